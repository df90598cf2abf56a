# Thin wrapper over CMake; the real build is CMakeLists.txt.
#   make              build everything (CUDA too when nvcc is found; MEG_CUDA=OFF for CPU only)
#   make test         build, then run the CPU tests (unit, tool and multi-process tests), then the
#                     same under AddressSanitizer and UndefinedBehaviorSanitizer with a short run
#                     of every fuzz target (make test-sanitize: a clang build of its own, $(SAN_BUILD))
#   make fuzz         every fuzz target for FUZZ_SECONDS (default 60) each (scripts/fuzz.sh)
#   make test-gpu     build, then run the CUDA tests (needs a GPU)
#   make demo         the embedded demo: real text to a trained model (scripts/demo.sh)
#   make bench        benchmarks (scripts/bench.sh, tests/bench/bench_init, bench_generate_cpu,
#                     scripts/bench-retro.sh, and scripts/bench-gpu.sh and scripts/bench-generate.sh
#                     on a CUDA machine, scripts/bench-generate-tp.sh on one with several GPUs);
#                     they print tables against reference figures
#   make install PREFIX=/usr/local
BUILD    ?= build
PREFIX   ?= /usr/local
JOBS     ?= $(shell nproc)
MEG_CUDA ?=
SAN_BUILD ?= build-san
FUZZ_SECONDS ?= 60
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
CMAKE_ARGS := -G "$(GENERATOR)" -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(if $(MEG_CUDA),-DMEG_CUDA=$(MEG_CUDA)) $(CMAKE_FLAGS)

SAN_CMAKE_ARGS := -G "$(GENERATOR)" -DMEG_CUDA=OFF -DMEG_FUZZ=ON $(CMAKE_FLAGS)

.PHONY: all setup configure test sanitize-build test-sanitize fuzz test-gpu demo bench install clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

setup:
	@bash scripts/setup.sh

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_ARGS)

test: setup
	@$(MAKE) --no-print-directory all
	cd $(BUILD) && ctest -L cpu --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-sanitize

sanitize-build:
	@test -f $(SAN_BUILD)/CMakeCache.txt || CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) $(SAN_CMAKE_ARGS)
	cmake --build $(SAN_BUILD) -j $(JOBS)

test-sanitize: setup sanitize-build
	cd $(SAN_BUILD) && ctest -L 'cpu|fuzz' --output-on-failure -j $(JOBS)

fuzz: setup sanitize-build
	@bash scripts/fuzz.sh $(SAN_BUILD) $(FUZZ_SECONDS)

test-gpu:
	@$(MAKE) --no-print-directory all
	cd $(BUILD) && ctest -L gpu --output-on-failure

demo: setup
	@$(MAKE) --no-print-directory all
	@bash scripts/demo.sh $(BUILD)/bin

bench: setup
	@$(MAKE) --no-print-directory all
	@bash scripts/bench.sh $(BUILD)/bin
	@$(BUILD)/tests/bench_init
	@$(BUILD)/tests/bench_generate_cpu
	@bash scripts/bench-retro.sh $(BUILD)
	@if [ -x $(BUILD)/tests/bench_train ] && nvidia-smi >/dev/null 2>&1; then bash scripts/bench-gpu.sh $(BUILD) && bash scripts/bench-generate.sh $(BUILD); fi
	@if [ -x $(BUILD)/tests/bench_train ] && [ "$$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then \
	  bash scripts/bench-generate-tp.sh $(BUILD); fi

install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
