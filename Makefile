# tokenmix — `make demo` sets up and runs the main job; `make test` sets up and runs all tests.
SHELL := /bin/bash

# Mesa wants a private runtime dir; a fresh mode-700 one keeps lavapipe quiet.
export XDG_RUNTIME_DIR := $(shell d=$${TMPDIR:-/tmp}/tokenmix-xdg-$$(id -u); mkdir -p -m 700 $$d; echo $$d)

CARGO ?= cargo
BIN := target/release/tokenmix
TOOLS ?= $(or $(TOKENMIX_CACHE),$(HOME)/.cache/tokenmix-tools)
WASM_BINDGEN := $(TOOLS)/bin/wasm-bindgen
WASM := target/wasm32-unknown-unknown/release/tokenmix.wasm
# The native test suites' profile (Cargo.toml: release without LTO) and the CLI it builds.
TEST_PROFILE_NAME := release-nolto
TEST_PROFILE := --profile $(TEST_PROFILE_NAME)
TEST_BIN := target/$(TEST_PROFILE_NAME)/tokenmix
PORT ?= 8080

.PHONY: demo desktop test lint test-native test-coop test-wasm test-browser setup build web bench bench-web fuzz clean

setup:
	@bash tools/setup.sh

build: setup
	$(CARGO) build --release

# The desktop app: `tokenmix view` (cargo feature `desktop`: egui/eframe on wgpu). The plain
# build above leaves the GUI stack out.
desktop: setup
	$(CARGO) build --release --features desktop
	@echo "tokenmix desktop app: $(BIN) view [--weights W] [IMAGE]   (headless: $(BIN) view --image IMG --screenshot OUT.png)"

# The wasm module and its JS glue, inside the npm package js/ (js/pkg/tokenmix.js +
# tokenmix_bg.wasm); the page imports the package. Then the threaded build, js/pkg-threads,
# which js/core.js loads in a worker of a cross-origin-isolated page: the crate with the
# `threads` feature (rayon on Web Workers), compiled for shared memory (atomics, bulk-memory)
# against a std rebuilt with those features (-Z build-std: rust-src, from tools/setup.sh; the
# stable compiler accepts the flag with RUSTC_BOOTSTRAP=1, so no second toolchain). Its own
# target dir keeps the two builds from invalidating each other. The link arguments make the
# memory shared and imported (the workers receive it) with the thread-local storage symbols
# wasm-bindgen sets up per thread; it may grow to 4 GiB (mixer_l16 needs more than 1 GiB).
WASM_THREADS_FLAGS := -C target-feature=+simd128,+atomics,+bulk-memory,+mutable-globals \
  -C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
  -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size \
  -C link-arg=--export=__tls_align -C link-arg=--export=__tls_base
WASM_THREADS_DIR := target/wasm-threads
# `$(THREADS_CARGO) build|clippy|test …`: cargo on the threaded build, the same flags, std and
# target dir for `web`, `lint` and `test-wasm` (a difference would rebuild everything).
THREADS_CARGO = RUSTC_BOOTSTRAP=1 CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$(WASM_THREADS_FLAGS)" $(CARGO)
THREADS_ARGS = --release --target wasm32-unknown-unknown --features threads -Z build-std=std,panic_abort --target-dir $(WASM_THREADS_DIR)
WASM_THREADS := $(WASM_THREADS_DIR)/wasm32-unknown-unknown/release/tokenmix.wasm
web: setup
	$(CARGO) build --release --lib --target wasm32-unknown-unknown
	$(WASM_BINDGEN) --target web --out-dir js/pkg --out-name tokenmix $(WASM)
	$(THREADS_CARGO) build --lib $(THREADS_ARGS)
	$(WASM_BINDGEN) --target web --out-dir js/pkg-threads --out-name tokenmix $(WASM_THREADS)

# The demo: the page (index.html) served on localhost with the embedded default model.
demo: build web
	$(BIN) info
	@echo "tokenmix demo: open http://127.0.0.1:$(PORT)/ in a browser (WebGPU on a GPU, elsewhere WebAssembly SIMD on up to 8 threads; Ctrl-C stops)"
	node tests/browser/server.mjs $(PORT)

# --nocapture so the log shows the adapter each test ran on and the golden error margins.
test: setup lint test-native test-coop test-wasm test-browser

# rustfmt (rustfmt.toml) and clippy with warnings as errors, natively and for the wasm build.
lint: setup
	$(CARGO) fmt --check
	$(CARGO) clippy --release --all-targets --features desktop -- -D warnings
	$(CARGO) clippy --release --bins -- -D warnings
	$(CARGO) clippy --release --lib --target wasm32-unknown-unknown -- -D warnings
	$(THREADS_CARGO) clippy --lib $(THREADS_ARGS) -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --release --no-deps --lib --features desktop

# With the desktop app, whose tests (tests/desktop.rs, egui_kittest) render on the adapter.
# Then the subgroup kernels (and coop's lane-by-lane double) again at another subgroup width:
# lavapipe with 128-bit vectors has 4-lane subgroups (the test checks it got them).
test-native:
	$(CARGO) test $(TEST_PROFILE) --features desktop -- --nocapture
	LP_NATIVE_VECTOR_WIDTH=128 TOKENMIX_TEST_SUBGROUP_LANES=4 TOKENMIX_TEST_GEMM=texture,subgroup,coop-emulated \
	  $(CARGO) test $(TEST_PROFILE) --features desktop --test kernels -- --nocapture

# The tensor-core GEMM (gemm_coop.wgsl) on real cooperative matrices: Mesa 26's lavapipe
# (Debian trixie-backports, unpacked into the tool cache by tools/lavapipe26.sh) has 8x8x8
# f16 -> f32 ones, which the system's Mesa 22 lacks. The kernel and golden suites, with the coop
# kernels (both tile sizes) for f16 and the tiled one for f32; naming coop makes them fail if it
# cannot run.
test-coop: setup
	bash tools/lavapipe26.sh fetch
	CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="bash $(CURDIR)/tools/lavapipe26.sh run" TOKENMIX_TEST_GEMM=coop,coop128,tiled \
	  $(CARGO) test $(TEST_PROFILE) --features desktop --test kernels --test golden -- --nocapture

# The wasm build's golden logits in headless Chromium (wasm-bindgen-test-runner + chromedriver).
# The runner ends chromedriver without closing its session, so Chromium's profile
# (org.chromium.Chromium.scoped_dir.*, 8 MB) and singleton folder stay behind in TMPDIR: the
# run gets a TMPDIR of its own, removed when it ends, pass or fail.
WASM_TEST_ENV = CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=$(TOOLS)/bin/wasm-bindgen-test-runner \
	CHROMEDRIVER=$$(command -v chromedriver) \
	WASM_BINDGEN_TEST_WEBDRIVER_JSON=$(CURDIR)/tests/browser/webdriver.json \
	WASM_BINDGEN_TEST_TIMEOUT=600
# Twice: the one-thread build on a page, then the threaded build (as `make web` makes it) in a
# dedicated worker on a pool of two threads (the runner serves it cross-origin isolated).
test-wasm: setup
	t=$$(mktemp -d -t tokenmix-wasm-test.XXXXXX) && trap 'rm -rf "$$t"' EXIT && \
	TMPDIR=$$t $(WASM_TEST_ENV) $(CARGO) test --release --target wasm32-unknown-unknown --test wasm && \
	TMPDIR=$$t $(WASM_TEST_ENV) $(THREADS_CARGO) test $(THREADS_ARGS) --test wasm

# The real page in headless Chromium (WebGPU on SwiftShader), driven by playwright-core, beside
# the native CLI's answers. The CLI is asked for as the integration tests build it (through
# tests/cli.rs, with the dev-dependencies' features), so after test-native nothing is rebuilt;
# a plain `cargo build` would recompile naga and wgpu for its own feature set (~1.5 min).
test-browser: setup web
	$(CARGO) test $(TEST_PROFILE) --features desktop --no-run --test cli
	node_modules/.bin/tsc -p examples/web-minimal --noEmit
	TOKENMIX_BIN=$(TEST_BIN) node --test tests/browser/e2e.mjs

bench: build
	$(BIN) bench --gemm 1568x512x2048 --iters 5
	$(BIN) bench --batch 1,8,64

# The browser bench: tokenmix's default path (auto: the wasm SIMD CPU executor on SwiftShader)
# beside onnxruntime-web's wasm EP at 1 and 2 threads (and its WebGPU EP with
# BENCH_ORT_EPS=wasm,webgpu) in headless Chromium, on the shipped models and on timm-made
# mixer_s16_224 / gmlp_s16_224 / poolformer_s12 (written once into BENCH_DIR with their ONNX
# exports; needs Python with tools/requirements.txt), plus the .wasm size after wasm-opt.
# BENCH_BACKEND=gpu times tokenmix's WGSL path instead. onnxruntime-web and binaryen come from npm here, not from
# package.json: the tests need neither (and they weigh 240 MB).
BENCH_DIR ?= $(or $(TOKENMIX_CACHE),$(HOME)/.cache)/tokenmix-bench
BENCH_MODELS ?= mixer_s16_224 gmlp_s16_224 poolformer_s12
BENCH_BACKEND ?= auto
BENCH_ORT_EPS ?= wasm
WASM_OPT_FLAGS := -Oz --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int --enable-mutable-globals --enable-reference-types --enable-multivalue --enable-simd
bench-web: web
	npm install --no-save --no-audit --no-fund onnxruntime-web@1.30.0 binaryen@132.0.0
	mkdir -p $(BENCH_DIR)
	node_modules/.bin/wasm-opt $(WASM_OPT_FLAGS) js/pkg/tokenmix_bg.wasm -o $(BENCH_DIR)/tokenmix_bg.opt.wasm
	@for f in js/pkg/tokenmix_bg.wasm $(BENCH_DIR)/tokenmix_bg.opt.wasm js/pkg-threads/tokenmix_bg.wasm; do \
	  echo "$$f: $$(stat -c %s $$f) bytes, $$(gzip -9c $$f | wc -c) gzipped"; done
	@missing=; for m in $(BENCH_MODELS); do [ -f $(BENCH_DIR)/$$m.onnx ] || missing=1; done; \
	  [ -z "$$missing" ] || python3 -c 'import torch, timm, onnx' 2>/dev/null || \
	  { echo "bench-web: exporting the models needs torch, timm and onnx: pip install -r tools/requirements.txt" >&2; exit 1; }
	for m in $(BENCH_MODELS); do [ -f $(BENCH_DIR)/$$m.onnx ] || \
	  (cd tools && python3 timm_checkpoint.py $$m $(BENCH_DIR)/$$m.safetensors --onnx $(BENCH_DIR)/$$m.onnx) || exit 1; done
	node tests/browser/bench.mjs --backend $(BENCH_BACKEND) --iters 5 $(foreach m,mixer gmlp poolformer,$(m)_fmnist=weights/$(m)_fmnist.safetensors)
	node tests/browser/bench.mjs --backend $(BENCH_BACKEND) --ort-eps $(BENCH_ORT_EPS) --iters 5 --ort-iters 5 $(foreach m,$(BENCH_MODELS),$(m)=$(BENCH_DIR)/$(m).safetensors)

# Both cargo-fuzz targets for FUZZ_SECONDS each, one after the other (nightly + cargo-fuzz).
FUZZ_SECONDS ?= 600
fuzz:
	cd fuzz && for t in load_weights preprocess_image; do \
	  mkdir -p corpus/$$t && \
	  cargo +nightly fuzz run -O $$t corpus/$$t $$( [ $$t = load_weights ] && echo ../weights ../tests/fixtures ../tests/hostile ) \
	    -- -max_total_time=$(FUZZ_SECONDS) -max_len=1200000 -rss_limit_mb=4096 || exit 1; \
	done

clean:
	$(CARGO) clean
