# Thin wrapper over Meson. The two commands a newcomer needs:
#   make run    set up, build, demonstrate a sandbox, then run the gateway
#   make test   set up, build with ASan+UBSan, and run every test
# (make check runs the unit tests alone.)
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_FUZZ ?= build-fuzz

.PHONY: deps build run test check format fuzz bench clean

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=release -Db_ndebug=false >/dev/null

build: deps $(BUILD)/build.ninja
	@ninja -C $(BUILD) fawn >/dev/null

run: build
	@bash scripts/demo.sh $(BUILD)/fawn

$(BUILD_ASAN)/build.ninja:
	meson setup $(BUILD_ASAN) -Db_sanitize=address,undefined -Db_lundef=false >/dev/null

test: deps $(BUILD_ASAN)/build.ninja
	@bash scripts/run-tests.sh $(BUILD_ASAN) $(BUILD_FUZZ)

# The unit tests alone (no sandboxes, no fuzzing, no e2e): the inner loop.
check: deps $(BUILD_ASAN)/build.ninja
	@ninja -C $(BUILD_ASAN) >/dev/null
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		meson test -C $(BUILD_ASAN) --suite unit --print-errorlogs

# Rewrites every C file to .clang-format (CI checks it).
format: deps
	@bash scripts/check-format.sh --fix

fuzz: deps
	@bash scripts/fuzz.sh $(BUILD_FUZZ) 60

bench: build
	@bash bench/sandbox $(BUILD)
	@FAWN_BIN=$(BUILD)/fawn bash bench/gateway
	@FAWN_BIN=$(BUILD)/fawn bash bench/agent
	@FAWN_BIN=$(BUILD)/fawn bash bench/storage

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ)
