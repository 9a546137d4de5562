#!/usr/bin/env bash
# Installs the Debian bookworm packages 1bit builds and tests with (only those missing).
# Idempotent and quiet when everything is present. Needs root (or sudo) to install.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  clang libclang-rt-14-dev          # fuzz targets (libFuzzer) and sanitizer builds
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libhwy-dev
  unicode-data                      # tools/gen_unicode_tables.py reads the UCD from here
  python3 python3-jinja2            # template goldens (tools/)
  python3-jsonschema                # structured-output tests validate replies with it
  gnuplot-nox                       # 1bit bench draws bench.png with it
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; then
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
