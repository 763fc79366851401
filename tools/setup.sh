#!/usr/bin/env bash
# Installs what `make test` and `make demo` need on a fresh Debian/Ubuntu machine, skipping
# whatever is already there. Native tests need a Vulkan driver: Mesa's lavapipe runs Vulkan on
# the CPU, so the suite executes the real WGSL kernels without a GPU.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

need_apt=()
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && ! ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  need_apt+=(mesa-vulkan-drivers libvulkan1)
fi
# `make test-coop` fetches Mesa 26's lavapipe (tools/lavapipe26.sh): curl, xz, sha256sum.
command -v curl >/dev/null || need_apt+=(curl)
command -v xz >/dev/null || need_apt+=(xz-utils)
# The browser page and its tests: headless Chromium (WebGPU on SwiftShader), chromedriver for
# wasm-bindgen-test, node/npm for playwright-core.
if [ "${TOKENMIX_NO_BROWSER:-0}" != 1 ]; then
  command -v chromium >/dev/null || need_apt+=(chromium)
  command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
  command -v npm >/dev/null || need_apt+=(nodejs npm)
fi
# The desktop app's real-window test (tests/desktop.rs): an X server of its own (Xvfb), xdotool
# to click and type, xclip to put an image on the clipboard, xwd to read the window's pixels;
# and the X libraries winit opens at run time.
command -v Xvfb >/dev/null || need_apt+=(xvfb)
command -v xdotool >/dev/null || need_apt+=(xdotool)
command -v xclip >/dev/null || need_apt+=(xclip)
command -v xwd >/dev/null || need_apt+=(x11-apps)
if command -v dpkg >/dev/null; then
  for lib in libx11-6 libx11-xcb1 libxcursor1 libxrandr2 libxi6 libxkbcommon-x11-0; do
    dpkg -s "$lib" >/dev/null 2>&1 || need_apt+=("$lib")
  done
fi
# The desktop app's camera backend (ffmpeg, streaming a camera's frames) and its tests, which
# stream one of ffmpeg's own test sources: without its recommends (55 MB instead of hundreds).
need_bare=()
command -v ffmpeg >/dev/null || need_bare+=(ffmpeg)
if [ ${#need_apt[@]} -gt 0 ] || [ ${#need_bare[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "setup: no apt-get to install ${need_apt[*]} ${need_bare[*]}; install them (a Vulkan driver: e.g. Mesa lavapipe)" >&2
    exit 1
  fi
  echo "setup: installing" ${need_apt[*]} ${need_bare[*]}
  $SUDO apt-get update -qq
  if [ ${#need_apt[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
  if [ ${#need_bare[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_bare[@]}" >/dev/null
  fi
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust from https://rustup.rs" >&2
  exit 1
fi

# `make test` checks formatting and lints.
if command -v rustup >/dev/null; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || { echo "setup: adding $c"; rustup component add "$c" >/dev/null; }
  done
fi

# The library must keep building for the browser: `make test` checks it for wasm32.
if command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown; then
  echo "setup: adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown >/dev/null
fi
# The threaded wasm build rebuilds std with shared memory (`make web`: -Z build-std).
if command -v rustup >/dev/null && ! rustup component list --installed 2>/dev/null | grep -q "^rust-src"; then
  echo "setup: adding rust-src (the threaded wasm build)"
  rustup component add rust-src >/dev/null
fi

[ "${TOKENMIX_NO_BROWSER:-0}" = 1 ] && exit 0

# wasm-bindgen-cli must match the wasm-bindgen crate in Cargo.lock. It takes minutes to build,
# so it lives in a cache outside the clone and is only built when that version is missing.
WBG_VERSION=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/"/, "", $3); print $3; exit}' Cargo.lock)
TOOLS=${TOKENMIX_CACHE:-$HOME/.cache/tokenmix-tools}
if ! "$TOOLS/bin/wasm-bindgen" --version 2>/dev/null | grep -q " $WBG_VERSION\b"; then
  echo "setup: building wasm-bindgen-cli $WBG_VERSION into $TOOLS (once)"
  cargo install -q wasm-bindgen-cli --version "$WBG_VERSION" --root "$TOOLS" --force
fi

# playwright-core for the end-to-end page tests (no browser download: it drives Debian's chromium).
if [ ! -d node_modules/playwright-core ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: npm ci (playwright-core)"
  npm ci --no-audit --no-fund --silent
fi
