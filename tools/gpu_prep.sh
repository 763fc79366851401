#!/usr/bin/env bash
# Gets the working tree ready for tools/gpu_session.sh before the lent GPU machine is started:
# its 15 minutes include start-up, so nothing is built or fetched there.
#   SESSION=kernels (default) bash tools/gpu_prep.sh   # .bin/tokenmix and .gl/ (~12 MB)
#   SESSION=train bash tools/gpu_prep.sh               # also .data/ (Fashion-MNIST, ~30 MB)
# .bin/tokenmix: the release build of this tree (a binary built here runs there as is).
# .gl/: the Vulkan loader and glvnd's GL/EGL dispatch libraries as .debs (the GPU machine has
#       the NVIDIA driver but neither: without libGLX/libGLdispatch the driver's Vulkan ICD,
#       libGLX_nvidia.so.0, loads but returns no vkCreateInstance, so wgpu finds no adapter —
#       seen on the H200 on 2026-12-04 with the loader alone); gpu_session.sh unpacks them.
# .data/: Fashion-MNIST's IDX files, for the train session's tools/train.py and tokenmix eval.
# The three are git-ignored, so the device call must carry them; the last line printed is
# that call's command and carry list. Everything stays inside the clone and is never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
SESSION=${SESSION:-kernels}
case "$SESSION" in kernels|train) ;; *) echo "SESSION must be kernels or train, not '$SESSION'" >&2; exit 2;; esac

cargo build --release --locked
mkdir -p .bin .gl
cp target/release/tokenmix .bin/tokenmix
./.bin/tokenmix --version >/dev/null

rm -f .gl/*.deb
command -v apt-get >/dev/null || { echo "apt-get not found: put the libvulkan1 .deb in .gl/ by hand" >&2; exit 1; }
GL_DEBS=(libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
(cd .gl && apt-get download "${GL_DEBS[@]}" 2>&1 | grep -v "unsandboxed as root" || true)
for d in "${GL_DEBS[@]}"; do
  ls .gl/"${d}"_*.deb >/dev/null 2>&1 || { echo "apt-get download $d left no .deb in .gl/" >&2; exit 1; }
done

dirs=(.bin .gl)
if [ "$SESSION" = train ]; then
  # train.py's own loader finds and reads both splits (raw or .gz) in its default folder, or in
  # $FASHION_MNIST, and says which file is missing (with this script's knob as the hint); its
  # folder is what gets copied.
  src=$(FASHION_MNIST=${FASHION_MNIST:-} python3 -c '
import os, pathlib, sys
sys.path.insert(0, "tools")
import train
src = pathlib.Path(os.environ["FASHION_MNIST"] or train.DATA)
for split in ("train", "t10k"):
    try:
        train.load(src, split)
    except SystemExit as e:  # train.py says "pass --data"; here the folder comes from $FASHION_MNIST
        sys.exit(str(e).replace("pass --data", "set FASHION_MNIST=<folder>"))
print(src)')
  mkdir -p .data
  cp "$src"/*-idx?-ubyte* .data/
  dirs+=(.data)
fi

# The carry limit is 64 MiB in all.
total=$(du -scm "${dirs[@]}" | awk 'END {print $1}')
[ "$total" -lt 64 ] || { echo "the carried folders take ${total} MiB, over the 64 MiB carry limit" >&2; exit 1; }
echo "ready (${total} MiB to carry). Rehearse first: OUT=\$(mktemp -d) REHEARSE=1 bash tools/gpu_session.sh"
carry=$(printf '"%s", ' "${dirs[@]}")
if [ "$SESSION" = kernels ]; then
  # The whole kernels session takes ~12 min on an H200 (2026-12-04: ~55 s per GEMM shape, 55-75 s
  # per small model; bench --gemm has had 8 f32 kernels since tiled128k16): two calls, back to
  # back while the machine is warm (30 s). Run 1 holds the issue's key figures (every GEMM shape,
  # mixer_s16 and gmlp_s16 with its row-kernel A/B: ~6 min); if it must be rerun, run 2 is what
  # to drop, and it is ordered so that whatever the budget cuts off matters least.
  echo "device run 1: command \"set -o pipefail; MODELS='mixer_s16_224 gmlp_s16_224' ROWS_AB=gmlp_s16_224 bash tools/gpu_session.sh 2>&1 | tee \$OUT/session.log\", carry [${carry%, }], timeout_s 420"
  echo "device run 2: command \"set -o pipefail; SHAPES= ROWS_AB=poolformer_s12 MODELS='resmlp_12_224 poolformer_s12 mixer_b16_224 poolformer_m48 mixer_l16_224' bash tools/gpu_session.sh 2>&1 | tee \$OUT/session.log\", carry [${carry%, }], timeout_s 420"
else
  echo "device run: command \"SESSION=$SESSION bash tools/gpu_session.sh\", carry [${carry%, }], timeout_s 560"
fi
