# tokenmix — `make demo` sets up and runs the main job; `make test` sets up and runs all tests.
SHELL := /bin/bash

# Mesa wants a private runtime dir; a fresh mode-700 one keeps lavapipe quiet.
export XDG_RUNTIME_DIR := $(shell d=$${TMPDIR:-/tmp}/tokenmix-xdg-$$(id -u); mkdir -p -m 700 $$d; echo $$d)

CARGO ?= cargo
BIN := target/release/tokenmix

.PHONY: demo test setup build bench clean

setup:
	@bash tools/setup.sh

build: setup
	$(CARGO) build --release

# Until the browser page lands, the demo classifies the bundled Fashion-MNIST samples natively
# with the embedded default model.
demo: build
	$(BIN) info
	$(BIN) classify --top-k 3 www/samples/fmnist-*.png

# --nocapture so the log shows the adapter each test ran on and the golden error margins.
# The wasm32 check keeps the library building for the browser.
test: setup
	$(CARGO) check --release --lib --target wasm32-unknown-unknown
	$(CARGO) test --release -- --nocapture

bench: build
	$(BIN) bench --gemm 1568x512x2048 --iters 5
	$(BIN) bench --batch 1,8,64

clean:
	$(CARGO) clean
