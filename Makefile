# The two commands of the README: `make demo` and `make test`.
# Every target installs the missing Debian packages it needs first
# (scripts/deps.sh demo|bench|deb|test): `make demo` only what the demo's
# build needs, `make test` every test tool.
JOBS ?= 2
BUILD ?= build
CMAKE_FLAGS ?=

.PHONY: all deps build demo test test-fast format format-check bench chaos deb package-test clean

all: build

DEPS ?= test
deps:
	@scripts/deps.sh $(DEPS)

# The library, the tools and the Python module; no tests or benchmarks
# (SHMSEM_BUILD_TESTS and SHMSEM_BUILD_BENCH are off unless asked for).
build demo: DEPS = demo
build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS) --target shmsem-demo
	$(BUILD)/examples/shmsem-demo

# The whole suite: normal build, ASan+UBSan build, TSan thread tests,
# static checks, fuzzers and the packaging tests (scripts/test.sh).
test: deps
	scripts/test.sh

# Only the normal build's suite, for the edit-compile-test loop.
test-fast: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMSEM_BUILD_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)
	ctest --test-dir $(BUILD) -j$(JOBS) --output-on-failure

format:
	scripts/format.sh fix

format-check:
	scripts/format.sh check

bench: DEPS = bench
bench: deps
	bench/run.sh

chaos: deps
	tests/chaos/run-long.sh

deb package-test: DEPS = deb
deb: deps
	packaging/build-deb.sh

package-test: deps
	tests/package/run.sh

clean:
	rm -rf build build-* 
