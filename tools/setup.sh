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
if [ ${#need_apt[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "setup: no Vulkan driver found and no apt-get; install a Vulkan driver (e.g. Mesa lavapipe)" >&2
    exit 1
  fi
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust from https://rustup.rs" >&2
  exit 1
fi

# The library must keep building for the browser: `make test` checks it for wasm32.
if command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown; then
  echo "setup: adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown >/dev/null
fi
