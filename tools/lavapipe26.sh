#!/usr/bin/env bash
# Mesa 26's lavapipe, the one Vulkan driver on a GPU-less machine with cooperative matrices
# (VK_KHR_cooperative_matrix, 8x8x8 f16 x f16 -> f32): the tensor-core GEMM (gemm_coop.wgsl)
# runs on it for real, where the system's Mesa 22 lavapipe only runs its lane-by-lane double.
#
#   tools/lavapipe26.sh fetch          put it into the tool cache (once; ~65 MB of packages)
#   tools/lavapipe26.sh run CMD ARGS   run CMD on it (cargo's runner in `make test-coop`)
#
# The packages are Debian trixie's (Mesa from trixie-backports), from deb.debian.org, each
# checked against the SHA-256 of its archive's index. Mesa 26 needs a newer glibc than
# bookworm's, so CMD runs under trixie's dynamic loader with only the unpacked libraries on
# its path: nothing is installed into the system, and everything lives outside the clone.
set -euo pipefail

TOOLS=${TOKENMIX_CACHE:-$HOME/.cache/tokenmix-tools}
DIR=$TOOLS/lavapipe-trixie
ROOT=$DIR/root
LIBS=$ROOT/usr/lib/x86_64-linux-gnu
MIRROR=${DEBIAN_MIRROR:-https://deb.debian.org/debian}

# Mesa's lavapipe and the libraries it and a Rust test binary load, dependencies included
# (the closure of mesa-vulkan-drivers, libvulkan1 and libc6 in trixie).
PACKAGES="mesa-vulkan-drivers libvulkan1 libc6 libgcc-s1 libstdc++6 libllvm19 libedit2 libffi8
libxml2 libz3-4 libzstd1 zlib1g liblzma5 libtinfo6 libbsd0 libmd0 libdisplay-info2 libdrm2
libdrm-amdgpu1 libdrm-common libelf1t64 libexpat1 libpng16-16t64 libwayland-client0 libx11-6
libx11-data libx11-xcb1 libxau6 libxdmcp6 libxcb1 libxcb-dri3-0 libxcb-present0 libxcb-randr0
libxcb-shm0 libxcb-sync1 libxcb-xfixes0 libxshmfence1"

fetch() {
  [[ -f $DIR/ok ]] && return 0
  [[ $(uname -m) == x86_64 ]] || { echo "lavapipe26: x86_64 only (this is $(uname -m))" >&2; exit 1; }
  rm -rf "$DIR" && mkdir -p "$DIR/debs" "$ROOT"
  # The package indices: backports (index.0), point-release updates (1), the release (2),
  # security fixes (sec).
  local i=0 suite
  for suite in trixie-backports trixie-updates trixie; do
    curl -fsSL --retry 3 "$MIRROR/dists/$suite/main/binary-amd64/Packages.xz" | xz -dc >"$DIR/index.$i"
    i=$((i + 1))
  done
  curl -fsSL --retry 3 "https://security.debian.org/debian-security/dists/trixie-security/main/binary-amd64/Packages.xz" |
    xz -dc >"$DIR/index.sec"
  local pkg line file sum order base
  for pkg in $PACKAGES; do
    # Backports only for Mesa itself; else the highest version among the release, its
    # point-release updates and its security fixes.
    if [[ $pkg == mesa-vulkan-drivers ]]; then order="0"; else order="sec 1 2"; fi
    line=$(for i in $order; do
      awk -v p="$pkg" -v i="$i" '
        /^Package: / { cur = ($2 == p); v = f = s = "" }
        cur && /^Version: / { v = $2 }
        cur && /^Filename: / { f = $2 }
        cur && /^SHA256: / { s = $2 }
        cur && v != "" && f != "" && s != "" { print v, f, s, i; cur = 0 }' "$DIR/index.$i"
    done | sort -V | tail -1)
    if [[ -z $line ]]; then echo "lavapipe26: $pkg is in none of trixie's indices" >&2; exit 1; fi
    read -r _ file sum i <<<"$line"
    if [[ $i == sec ]]; then base=https://security.debian.org/debian-security; else base=$MIRROR; fi
    curl -fsSL --retry 3 -o "$DIR/debs/${file##*/}" "$base/$file"
    if ! echo "$sum  $DIR/debs/${file##*/}" | sha256sum -c --quiet -; then
      echo "lavapipe26: ${file##*/} does not match its index's SHA-256" >&2
      exit 1
    fi
    dpkg-deb -x "$DIR/debs/${file##*/}" "$ROOT"
    echo "${file##*/}" >>"$DIR/versions"
  done
  rm -rf "$DIR/debs" "$DIR"/index.*
  # The driver manifest, pointing at the unpacked driver by absolute path.
  local api
  api=$(sed -n 's/.*"api_version": *"\([^"]*\)".*/\1/p' "$ROOT/usr/share/vulkan/icd.d/lvp_icd.json")
  printf '{ "file_format_version": "1.0.0", "ICD": { "library_path": "%s", "api_version": "%s" } }\n' \
    "$LIBS/libvulkan_lvp.so" "$api" >"$DIR/lvp_icd.json"
  touch "$DIR/ok"
  echo "lavapipe26: Mesa $(grep -o 'mesa-vulkan-drivers_[^_]*' "$DIR/versions" | cut -d_ -f2) in $DIR"
}

case ${1:-} in
  fetch)
    fetch
    ;;
  run)
    shift
    [[ -f $DIR/ok ]] || { echo "lavapipe26: run 'tools/lavapipe26.sh fetch' first" >&2; exit 1; }
    # Vulkan only: wgpu would otherwise also probe the system's GL (bookworm's libEGL).
    export VK_ICD_FILENAMES=$DIR/lvp_icd.json VK_DRIVER_FILES=$DIR/lvp_icd.json WGPU_BACKEND=vulkan
    exec "$LIBS/ld-linux-x86-64.so.2" --library-path "$LIBS:$ROOT/lib/x86_64-linux-gnu" "$@"
    ;;
  *)
    echo "usage: tools/lavapipe26.sh fetch | run CMD [ARGS...]" >&2
    exit 2
    ;;
esac
