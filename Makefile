# The front door. `make serve` installs what is missing, builds and runs the main job;
# `make test` builds and runs every test (unit, sanitizers, fuzzing). See README.md.
JOBS ?= $(shell nproc)
BUILD ?= build
MODEL ?= models/onebit-20m-q8_0.gguf
FUZZ_SECONDS ?= 45
# The CUDA backend: AUTO builds it where nvcc is found (ON requires it, OFF never builds it). The
# sanitizer and fuzz builds are CPU-only; CI runs CPU-only (CUDA=OFF, .ci/run).
CUDA ?= AUTO

.PHONY: all setup build serve test test-unit test-sanitize test-fuzz format clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONEBIT_CUDA=$(CUDA)

build: setup $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# The main job: the OpenAI-compatible server on the native engine.
serve: build
	$(BUILD)/bin/1bit serve -m $(MODEL)

test: test-unit test-sanitize test-fuzz

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer (clang).
test-sanitize: setup
	CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DONEBIT_SANITIZE=ON -DONEBIT_CUDA=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# Every fuzz target for a bounded time, seeded from fuzz/corpus/<target>/.
test-fuzz: setup
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONEBIT_FUZZ=ON -DONEBIT_CUDA=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	bash scripts/run_fuzzers.sh build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu')

clean:
	rm -rf $(BUILD) build-asan build-fuzz
