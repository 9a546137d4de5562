#!/usr/bin/env bash
# Makes .cudahelper/ (git-ignored), what the GPU machine lacks for bench/gpu.sh and the CUDA
# tests: the GPU machine reaches no package registry and gets only the working tree (64 MiB with
# what `carry` names), not ../shared. Run here, then on the GPU machine (carry [".cudahelper"]):
#   source .cudahelper/env.sh && bash bench/gpu.sh --bench
# Holds: deps/ (Debian's googletest, nlohmann-json, cpp-httplib with the brotli / openssl / zlib
# headers and libraries it links, pkgconf, unpacked with relocated .pc files and a pkg-config
# wrapper), testdata/ (stories260K and the testdata README, copied to ../shared/testdata there by
# env.sh), vocab/ (ggml-vocab-llama-spm.gguf, and the Llama 3 vocabulary made by
# `1bit convert --vocab-only`, gzipped), env.sh; deps/ is packed as deps.tgz (env.sh unpacks it into
# $TMPDIR/onebit-cudahelper and sets ONEBIT_DEPS).
# LLAMA_SRC=GIT_DIR also packs a pruned llama.cpp source as llama-src.tgz (bench/build_llama_cuda.sh).
#   scripts/gpu_carry.sh [BUILD_DIR]     (BUILD_DIR with bin/1bit, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
H=$PWD/.cudahelper
shared=../shared/testdata
[ -x "$build/bin/1bit" ] || { echo "gpu_carry: no $build/bin/1bit (build first: make)" >&2; exit 1; }
[ -f "$shared/models/stories260K.gguf" ] || { echo "gpu_carry: $shared is missing (clone the shared testdata beside the project)" >&2; exit 1; }
rm -rf "$H"
mkdir -p "$H/debs" "$H/deps" "$H/testdata/models" "$H/vocab"

# Debian's packages, unpacked (no install): headers, static gtest / gmock, the shared libraries
# cpp-httplib needs at link and run time.
(cd "$H/debs" && apt-get download libgtest-dev libgmock-dev nlohmann-json3-dev libcpp-httplib-dev libcpp-httplib0.11 \
  libbrotli1 libbrotli-dev libssl-dev libssl3 zlib1g zlib1g-dev pkgconf-bin libpkgconf3 >/dev/null 2>&1) ||
  { echo "gpu_carry: apt-get download failed (is Debian's registry reachable?)" >&2; exit 1; }
for f in "$H"/debs/*.deb; do dpkg -x "$f" "$H/deps"; done
rm -rf "$H/debs"
d=$H/deps
if [ -d "$d/lib/x86_64-linux-gnu" ] && [ ! -L "$d/lib" ]; then  # zlib1g unpacks into /lib
  mv "$d"/lib/x86_64-linux-gnu/* "$d/usr/lib/x86_64-linux-gnu/" && rm -rf "$d/lib"
fi
ln -sfn usr/lib/x86_64-linux-gnu "$d/lib"
ln -sfn usr/include "$d/include"
rm -f "$d"/usr/lib/x86_64-linux-gnu/{libssl,libcrypto,libz,libbrotlicommon,libbrotlidec,libbrotlienc}.a
rm -rf "$d/usr/share/doc" "$d/usr/share/man"
pc=$d/usr/lib/x86_64-linux-gnu/pkgconfig/cpp-httplib.pc
sed -i 's|^prefix=/usr|prefix=${pcfiledir}/../../..|; /^Requires.private/d; s|^Cflags: -I${includedir} |Cflags: -I${includedir} -I${includedir}/x86_64-linux-gnu |' "$pc"
mkdir -p "$d/bin"
cat >"$d/bin/pkg-config" <<'EOF'
#!/bin/sh
d=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH=$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$d/usr/bin/pkgconf" "$@"
EOF
chmod +x "$d/bin/pkg-config"

cp "$shared/README.md" "$H/testdata/"
cp "$shared/models/stories260K.gguf" "$H/testdata/models/"
cp "$shared/vocab/ggml-vocab-llama-spm.gguf" "$H/vocab/"
"$build/bin/1bit" convert --vocab-only "$shared/tokenizers/llama3/tokenizer.json" "$H/vocab/llama3.gguf" >/dev/null 2>&1
gzip -9 "$H/vocab/llama3.gguf"

# A pruned llama.cpp source for bench/build_llama_cuda.sh (the side-by-side rows of gpu_bench.sh),
# when LLAMA_SRC names a llama.cpp git repository (a `fetch` mirror will do): CMake files, ggml
# (CPU and CUDA backends only), src, common, include and the examples but the server and the apps.
if [ -n "${LLAMA_SRC:-}" ]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/llama-src"
  git -C "$LLAMA_SRC" archive HEAD CMakeLists.txt cmake ggml src common examples include pocs 2>/dev/null |
    tar -x -C "$tmp/llama-src"
  rm -rf "$tmp"/llama-src/examples/{server,llama.android,llama.swiftui} \
    "$tmp"/llama-src/ggml/src/ggml-{kompute,opencl,cann,metal,sycl,vulkan}
  tar -czf "$H/llama-src.tgz" -C "$tmp" llama-src
  rm -rf "$tmp"
fi

# deps/ travels packed (about a third of its size) and env.sh unpacks it.
tar -czf "$H/deps.tgz" -C "$H" deps
rm -rf "$H/deps"

cat >"$H/env.sh" <<'EOF'
# source .cudahelper/env.sh on the GPU machine (made by scripts/gpu_carry.sh): the carried deps
# on the paths CMake and pkg-config search, the test data where the tests look (../shared/testdata).
H=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${TMPDIR:-/tmp}/onebit-cudahelper  # deps unpacked outside the carried folder
[ -d "$D/deps" ] || { mkdir -p "$D" && tar -xzf "$H/deps.tgz" -C "$D"; }
export ONEBIT_DEPS=$D/deps
export PATH=$D/deps/bin:$PATH
export PKG_CONFIG_PATH=$D/deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CMAKE_PREFIX_PATH=$D/deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export LD_LIBRARY_PATH=$D/deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ONEBIT_STORIES260K=$H/testdata/models/stories260K.gguf
mkdir -p "$D/vocab"  # the vocabularies beside the carried folder too (llama3.gguf unpacked there)
[ -f "$D/vocab/llama3.gguf" ] || gunzip -c "$H/vocab/llama3.gguf.gz" >"$D/vocab/llama3.gguf"
ln -sf "$H/vocab/ggml-vocab-llama-spm.gguf" "$D/vocab/ggml-vocab-llama-spm.gguf"
export ONEBIT_VOCAB_DIR=$D/vocab
R=$(cd "$H/.." && pwd)
if [ ! -e "$R/../shared/testdata" ]; then mkdir -p "$R/../shared" && cp -r "$H/testdata" "$R/../shared/testdata"; fi
EOF
tree_bytes=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
carry_bytes=$(du -sb "$H" | cut -f1)
echo "gpu_carry: $H is $((carry_bytes / 1048576)) MiB; with the working tree $(((tree_bytes + carry_bytes) / 1048576)) MiB of the 64 MiB a call carries"
