#!/usr/bin/env bash
# One prepared run on a lent GPU machine (NVIDIA, PyTorch + timm installed, no network).
# SESSION=kernels (default; ~12 min on an H200 in all, so gpu_prep.sh prints it as two calls):
#   the GEMM kernels (`tokenmix bench --gemm`, every kernel, both layouts) beside torch.matmul
#   fp32 and autocast f16 at 1568x512x2048, 12544x512x2048 and 4096^3; then the autotuned
#   models at batch 1/8/64 beside PyTorch CUDA fp32, and with f16 weights and hidden activations beside autocast f16
#   (mixer_s16/b16/l16, gmlp_s16, resmlp_12, poolformer_s12/m48), each followed by where tokenmix's
#   time went per kind of step (`bench --profile`: GPU timestamps around each step, so the gap
#   between the steps' sum and the median shows what batch 1 loses between them); gmlp_s16's
#   and poolformer_s12's norms in the three row kernels (TOKENMIX_ROWS), back to back; the tuner's choices.
# SESSION=train:
#   1. trains the four Fashion-MNIST default models in parallel (tools/train.py, CUDA),
#   2. checks them with `tokenmix eval` (Vulkan on the GPU) against PyTorch's own counts,
#   3. checks full-size timm logits parity on the GPU and benches tokenmix (Vulkan) beside
#      PyTorch CUDA on mixer_s16_224, gmlp_s16_224, resmlp_12_224 and poolformer_s12.
# Expects: .bin/tokenmix (release build), .gl/*.deb (Vulkan loader), for train .data/ (Fashion-MNIST
# IDX files): `SESSION=... bash tools/gpu_prep.sh` makes them here (git-ignored) and prints the
# device call with its carry list. Writes results under $OUT. Never run by CI.
# REHEARSE=1 (kernels session only): the same commands on this CPU machine (PyTorch on the CPU,
# tokenmix on lavapipe, a small GEMM and a small model, few iterations), so that a wiring error
# shows up here and not in the GPU machine's 15 minutes:
#   OUT=$(mktemp -d) TM=target/release/tokenmix REHEARSE=1 bash tools/gpu_session.sh
# With TM a script that runs tokenmix through `tools/lavapipe26.sh run` (and TOKENMIX_AUTOTUNE=1),
# the rehearsal's f16 GEMMs and autotuner include the coop kernel on real cooperative matrices.
set -u
if [ -n "${REHEARSE:-}" ]; then
  [ "${SESSION:-kernels}" = kernels ] || { echo "REHEARSE=1 rehearses SESSION=kernels only" >&2; exit 2; }
  DEVICE=cpu SHAPES="256x128x192" MODELS="gmlp_ti16_224" BATCHES=1,2 ITERS=2 ROWS_AB=gmlp_ti16_224
else
  # SHAPES, MODELS and ROWS_AB may be set (even empty) to split the work over two device calls.
  DEVICE=cuda BATCHES=1,8,64 ITERS=20
  SHAPES=${SHAPES-"1568x512x2048 12544x512x2048 4096x4096x4096"}
  MODELS=${MODELS-"mixer_s16_224 gmlp_s16_224 resmlp_12_224 poolformer_s12 mixer_b16_224 mixer_l16_224 poolformer_m48"}
  ROWS_AB=${ROWS_AB-"gmlp_s16_224 poolformer_s12"}
  for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
fi
# TOKENMIX_BACKEND=gpu: the WGSL path is what this script measures, whatever auto would pick.
export PYTHONUNBUFFERED=1 WGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp/xdg TOKENMIX_BACKEND=gpu
mkdir -p -m 700 /tmp/xdg /tmp/train
TM=${TM:-.bin/tokenmix}
MINUTES=${MINUTES:-4}
# The Mixer family on a 14x14 token grid (patch 2): room for token mixing to learn structure
# (`tokenmix insight` below prints its figures beside timm's initialisation).
PATCH=${PATCH:-2}
[ -n "${REHEARSE:-}" ] || nvidia-smi -L
python3 -c "import torch, timm; print('torch', torch.__version__, 'timm', timm.__version__)"
if ! $TM info >/dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
# No adapter means every step below would fail one by one (2026-12-04: six minutes of device
# time spent that way): stop at once and show what the Vulkan loader saw.
if [ -z "${REHEARSE:-}" ] && ! $TM info >/dev/null 2>&1; then
  VK_LOADER_DEBUG=error,warn $TM info 2>&1 | head -20
  echo "no Vulkan adapter: are all of .gl/*.deb there (bash tools/gpu_prep.sh)?" >&2
  exit 3
fi
$TM info | grep -E "runs on|kernels|norm rows|precision"
# Cooperative matrices (tensor cores): under f16 the `coop` and `coop128` kernels (64x64 and
# 128x128 tiles) join `bench --gemm` below, with their error against the CPU GEMM; the autotuner
# admits each per shape class only once it matched the tiled kernel ("rejected: …" in `gemm`).
for k in coop coop128; do TOKENMIX_GEMM=$k timeout -k 5 60 $TM info --precision f16 2>&1 | grep -E "error|kernels|precision"; done
# The autotuner's cache lives with the results, so the note can quote its choices, and its
# time per candidate and class is printed (TOKENMIX_TUNE_LOG: `tune: …` lines in bench.txt).
export TOKENMIX_CACHE_DIR="$OUT/tuning" TOKENMIX_TUNE_LOG=1
# Seconds since the script started, printed at each step: a run cut off at the device call's
# timeout still says where its time went, and the next session can size the call from it.
stamp() { echo "[t+${SECONDS}s] $*"; }
# Each step gets at most STEP seconds: a kernel that hangs a real driver costs one step of the
# device call, not all of it.
STEP=${STEP:-150}
# A step that fails on its own has said why already; one stopped at the limit is named here.
t() {
  timeout -k 5 "$STEP" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "(stopped at the ${STEP} s limit: $*)"; fi
  return 0
}

if [ "${SESSION:-kernels}" = kernels ]; then
  echo "== GEMM kernels beside torch.matmul"
  for shape in $SHAPES; do
    stamp "GEMM $shape"
    for p in f32 f16; do t python3 tools/bench_torch.py --gemm "$shape" --device $DEVICE --precision "$p" --tokenmix $TM --iters $ITERS; done
  done 2>&1 | tee "$OUT/gemm.txt"
  echo "== models beside PyTorch CUDA (fp32, then f16 weights and hidden activations vs autocast f16)"
  for m in $MODELS; do
    stamp "model $m"
    (cd tools && python3 timm_checkpoint.py "$m" "/tmp/$m.safetensors") >/dev/null || continue
    t python3 tools/check_logits.py "$m" "/tmp/$m.safetensors" --tokenmix $TM   # the tuned kernels, exact?
    t python3 tools/check_logits.py "$m" "/tmp/$m.safetensors" --tokenmix $TM --precision f16   # coop, splitk at f16
    for p in f32 f16; do
      t python3 tools/bench_torch.py "$m" "/tmp/$m.safetensors" --tokenmix $TM --device $DEVICE --batch $BATCHES --iters $ITERS --precision "$p" --profile
    done
    # LayerNorm and softmax one workgroup per row and GroupNorm in chunks, reduced by subgroups
    # first (the native GPU default) or through workgroup memory alone (the browser's), or one
    # invocation per row and a workgroup per image (CPU rasterisers'), back to back on the
    # model with the most LayerNorms (gMLP: 2 a block), and on PoolFormer-S12 for GroupNorm.
    if [[ " $ROWS_AB " == *" $m "* ]]; then
      for r in subgroup workgroup invocation; do
        echo "TOKENMIX_ROWS=$r"
        t env TOKENMIX_ROWS=$r $TM bench --weights "/tmp/$m.safetensors" --batch "$BATCHES" --iters $ITERS --profile | grep -E "median|layer_norm|group_norm|softmax"
      done
    fi
    rm -f "/tmp/$m.safetensors"
  done 2>&1 | tee "$OUT/bench.txt"
  # An image classified as the page and the desktop app classify one: a 4000x3000 photo-sized
  # PNG (written here, no imaging library needed), resized by preprocess.wgsl and on the CPU,
  # with the default model (its forward pass is small, so the resize dominates).
  stamp "image resize routes"
  python3 - <<'PY'
import struct, zlib
w, h = 4000, 3000
rows = b"".join(b"\0" + bytes((((x * 7 + y) & 255), ((y * 3 + (x >> 4)) & 255), (((x ^ y) >> 3) & 255)) [i % 3] for x in range(w) for i in range(3)) for y in range(h))
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
open("/tmp/photo4000.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b""))
PY
  t $TM --backend gpu bench --batch 1 --iters $ITERS --image /tmp/photo4000.png 2>&1 | grep -E "image|error" | tee "$OUT/image.txt"
  stamp "done"
  cat "$OUT/tuning/gemm-tuning.json" 2>/dev/null | tee "$OUT/tuning.txt"
  exit 0
fi

echo "== training (${MINUTES} min each, 4 in parallel)"
for m in mixer gmlp resmlp poolformer; do
  python3 tools/train.py "$m" --minutes "$MINUTES" --patch "$PATCH" --ema 0.998 --data .data --out /tmp/train > "/tmp/train/$m.log" 2>&1 &
done
wait
for m in mixer gmlp resmlp poolformer; do tail -n 2 "/tmp/train/$m.log"; done
tar czf "$OUT/trained.tar.gz" -C /tmp/train .

echo "== tokenmix eval on the GPU"
for m in mixer gmlp resmlp poolformer; do
  w=/tmp/train/${m}_fmnist.safetensors
  [ -f "$w" ] && echo "$m $($TM eval --weights "$w" --data .data --json)"
done 2>&1 | tee "$OUT/eval.txt"
for m in mixer gmlp resmlp; do
  w=/tmp/train/${m}_fmnist.safetensors
  [ -f "$w" ] && $TM insight --weights "$w"
done 2>&1 | tee "$OUT/insight.txt"

echo "== full-size timm checkpoints: logits parity and bench"
for m in mixer_s16_224 gmlp_s16_224 resmlp_12_224 poolformer_s12 gmlp_ti16_224; do
  (cd tools && python3 timm_checkpoint.py "$m" "/tmp/$m.safetensors") >/dev/null
  $TM info --weights "/tmp/$m.safetensors" | grep -E "preset|GMACs"
  python3 tools/check_logits.py "$m" "/tmp/$m.safetensors" --tokenmix $TM
done 2>&1 | tee "$OUT/parity.txt"
for m in mixer_s16_224 gmlp_s16_224 resmlp_12_224 poolformer_s12; do
  python3 tools/bench_torch.py "$m" "/tmp/$m.safetensors" --tokenmix $TM --device cuda --batch 1,8,64 --iters 30
done 2>&1 | tee "$OUT/bench.txt"
