#!/usr/bin/env python3
"""Trains tokenmix's default models on Fashion-MNIST with timm's own model classes.

One small model per family, each built by timm exactly as its ImageNet presets build it, only
sized for 28x28 grey images (patch 4, so a 7x7 token grid):

  mixer       timm.models.mlp_mixer.MlpMixer (MixerBlock, Mlp)                 like mixer_s16_224
  gmlp        MlpMixer(block_layer=SpatialGatingBlock, mlp_layer=GatedMlp)     like gmlp_ti16_224
  resmlp      MlpMixer(block_layer=ResBlock, norm_layer=Affine)                like resmlp_12_224
  poolformer  timm.models.metaformer.MetaFormer (Pooling, GroupNorm1, Linear head,
              layer scale 1e-5; stem 7x7/4 → 7x7 grid, then 3x3/2 downsamples → 4x4, 2x2)
                                                                               like poolformer_s12

For each it writes
  weights/<model>_fmnist.safetensors              the weights, F16, timm parameter names, and a
      __metadata__ with `config` ({"family", "timm_class", the timm kwargs, "img_size": [28, 28]};
      class-valued kwargs as dotted names, see `instantiate`), `preprocess`, `labels`, `dataset`,
      `recipe`, `pytorch_top1` (accuracy of the shipped F16 weights) and `params`;
  tests/fixtures/<model>_fmnist.preds.safetensors  the first 256 test images (`input`, f32
      [256,1,28,28], normalised), PyTorch's predictions for them (`preds`, i32) and `labels` (i32),
      so the Rust suite can check tokenmix predicts the same.
With --out DIR both files are written directly into DIR instead (nothing in the repository is
touched), e.g. on a machine that returns files from one folder.

Training: the whole data set lives on the device as tensors; augmentation runs there too (per
sample random translation of up to ±2 px by pad + crop, horizontal flip, random erasing); AdamW,
linear warmup (1 epoch) + cosine decay, label smoothing 0.1, stochastic depth, bf16 autocast on
CUDA, fixed seeds; optionally (--ema) an exponential moving average of the weights, which is then
what is evaluated and shipped. `--minutes` is the budget of the training loop: the first epoch is timed and
the number of epochs (and so the cosine horizon) is chosen to fit the rest of the budget; should
the run slow down later (say another process takes the GPU), the horizon is shortened. An
explicit --epochs overrides the budget. The final accuracy and the fixture predictions are
computed on the CPU in float32 (no TF32), with the F16-rounded weights that are shipped, i.e. what
an exact fp32 engine gives; the script then reloads the written file, rebuilds the model from its
metadata `config` and checks it predicts the fixture the same.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, MIT licence); --data
takes any folder with the four IDX files (gzipped or not).

Run (never run by CI; versions in tools/requirements.txt):
  python tools/train.py mixer --minutes 3          # CUDA when available, else add --device cpu
  python tools/train.py gmlp --minutes 3
  python tools/train.py resmlp --minutes 3
  python tools/train.py poolformer --minutes 3
Several models at once on one GPU, as separate processes, files into one folder:
  for m in mixer gmlp resmlp poolformer; do
    python tools/train.py $m --minutes 3 --out "$OUT" > "$OUT/$m.log" 2>&1 &
  done; wait
On a CPU (slow: several minutes per epoch on two cores; --amp halves it where the CPU has
AVX512-BF16: 40 steps of the full Mixer at patch 2 took 1.31 min in fp32 and 0.64 min with --amp
on the project's 2-core AMD EPYC VM):
  python tools/train.py mixer --device cpu --threads 2 --minutes 60
  python tools/train.py mixer --small --patch 2 --device cpu --threads 2 --amp --minutes 85 \
      --batch 128 --drop-path 0.05 --erase 0.1 --ema 0.998        # 14x14: 23 epochs, 74 min, 91.19 %
  python tools/train.py poolformer --device cpu --threads 2 --amp --batch 128 --ema 0.999 \
      --drop-path 0.1 --minutes 88                                # 47 epochs, 75 min, 93.62 % (shipped)
--kw replaces timm kwargs of the family's config (recorded in the file's metadata like the rest):
  python tools/train.py gmlp --device cpu --threads 2 --amp --batch 128 --ema 0.999 --drop-path 0.1 \
      --epochs 37 --kw '{"embed_dim": 96, "num_blocks": 8, "mlp_ratio": 4}'   # 66 min, 92.60 %
  python tools/train.py gmlp --device cpu --threads 2 --amp --batch 128 --ema 0.998 --drop-path 0 \
      --erase 0 --lr 5e-4 --epochs 10 --init weights/gmlp_fmnist.safetensors \
      --kw '{"embed_dim": 96, "num_blocks": 8, "mlp_ratio": 4}'   # from the above: 18 min, 93.29 % (shipped)
A run longer than one sitting: a fixed --epochs and --checkpoint FILE (the whole training state,
written after every epoch); the same command line again resumes from FILE where it stopped.
--stop-at-epoch N leaves such a run after epoch N; --init FILE then starts a further cycle from its
(averaged) weights. --teacher W (repeatable) distils from shipped models, e.g. the shipped MLP-Mixer,
distilled from the start of its one cycle:
  python tools/train.py mixer --device cpu --threads 2 --amp --batch 128 --ema 0.999 --drop-path 0.05 \
      --erase 0.1 --kd-alpha 0.8 --minutes 105 --teacher weights/poolformer_fmnist.safetensors \
      --teacher weights/gmlp_fmnist.safetensors     # 49 epochs, 98 min: 93.21 % (shipped)
The same network trained plainly first and distilled afterwards, in cycles, stopped short of it:
  python tools/train.py mixer --device cpu --threads 2 --amp --batch 128 --ema 0.999 --drop-path 0.1 \
      --epochs 32 --checkpoint C1.pt --stop-at-epoch 17
  python tools/train.py mixer --device cpu --threads 2 --amp --batch 128 --ema 0.999 --drop-path 0.05 \
      --erase 0.1 --lr 1e-3 --epochs 14 --init C1.pt --checkpoint C2.pt --out M2 \
      --teacher weights/poolformer_fmnist.safetensors --teacher weights/gmlp_fmnist.safetensors
                                           # 17 epochs (90.51 %), then 14 more (57 min): 92.35 %
  python tools/train.py mixer --device cpu --threads 2 --amp --batch 128 --ema 0.998 --drop-path 0 \
      --erase 0 --lr 5e-4 --epochs 10 --init C2.pt --checkpoint C3.pt --out M3 \
      --teacher weights/poolformer_fmnist.safetensors --teacher weights/gmlp_fmnist.safetensors
                                           # 57 min: 92.84 %
  python tools/train.py mixer --device cpu --threads 2 --amp --batch 128 --ema 0.998 --drop-path 0 \
      --erase 0 --lr 3e-4 --epochs 8 --kd-alpha 0.8 --init M3/mixer_fmnist.safetensors --out M4 \
      --teacher weights/poolformer_fmnist.safetensors --teacher weights/gmlp_fmnist.safetensors \
      --teacher M3/mixer_fmnist.safetensors  # itself as a third teacher (ensemble 93.87 %); 42 min: 92.93 %
Smoke test (a few steps, 1000 test images, into /tmp):
  python tools/train.py gmlp --device cpu --threads 1 --max-steps 20 --test-limit 1000 --out /tmp/tm
"""
import argparse
import gzip
import importlib
import inspect
import json
import math
import os
import pathlib
import time

import numpy as np
import timm
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
MEAN, STD = 0.2860, 0.3530
BACKGROUND = -MEAN / STD  # a black pixel, normalised
SIZE = 28
SLICE = 256  # test images whose predictions are committed as a fixture
FAMILIES = ["mixer", "gmlp", "resmlp", "poolformer"]
LR = {"mixer": 2e-3, "gmlp": 1.5e-3, "resmlp": 2e-3, "poolformer": 2e-3}
LABEL_SMOOTHING, GRAD_CLIP = 0.1, 1.0  # fixed parts of every recipe: the loop uses them, recipes record them


def augment_text(erase: float) -> str:
    """What `augment` does, as the recipe records it."""
    return f"per-sample random translation +-2 px, horizontal flip, random erasing p={erase}"


# ----------------------------------------------------------------------------------------- data

def idx(path: pathlib.Path) -> np.ndarray:
    """Reads an IDX file (gzipped when the name ends in .gz)."""
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data: pathlib.Path, split: str):
    """(images f32 [N,1,28,28] normalised, labels i64 [N]) of split 'train' or 't10k'."""
    def find(name):
        for p in (data / f"{name}.gz", data / name):
            if p.exists():
                return p
        raise SystemExit(f"{data / name}[.gz] not found (Debian: apt install dataset-fashion-mnist, or pass --data)")
    x = idx(find(f"{split}-images-idx3-ubyte")).astype(np.float32) / 255.0
    y = idx(find(f"{split}-labels-idx1-ubyte")).astype(np.int64)
    return torch.from_numpy((x - MEAN) / STD).unsqueeze(1), torch.from_numpy(y)


def augment(x: torch.Tensor, gen: torch.Generator, erase: float) -> torch.Tensor:
    """Per sample: random translation by -2..2 px in x and y (pad with black + crop), horizontal flip
    with p=0.5, and with p=`erase` a random rectangle (2-20 % of the area, aspect 0.3-3.3) replaced
    by N(0,1) noise. Everything on x's device, in a handful of kernels."""
    n, c, h, w = x.shape
    dev = x.device
    pad = F.pad(x, (2, 2, 2, 2), value=BACKGROUND)
    off = torch.randint(0, 5, (2, n, 1), generator=gen, device=dev)
    ys, xs = torch.arange(h, device=dev), torch.arange(w, device=dev)
    flip = torch.rand(n, 1, generator=gen, device=dev) < 0.5
    rows = off[0] + ys                                           # [n, h]
    cols = off[1] + torch.where(flip, (w - 1) - xs, xs)          # [n, w]
    src = (rows[:, :, None] * (w + 4) + cols[:, None, :]).view(n, 1, h * w).expand(n, c, h * w)
    out = pad.reshape(n, c, -1).gather(2, src).view(n, c, h, w)
    if erase > 0:
        u = torch.rand(5, n, 1, generator=gen, device=dev)
        area = (0.02 + 0.18 * u[0]) * (h * w)
        aspect = torch.exp(math.log(0.3) + (math.log(3.3) - math.log(0.3)) * u[1])
        eh = (area * aspect).sqrt().round().clamp(1, h)
        ew = (area / aspect).sqrt().round().clamp(1, w)
        y0 = (u[2] * (h - eh + 1)).floor()
        x0 = (u[3] * (w - ew + 1)).floor()
        inside = (((ys >= y0) & (ys < y0 + eh)) & (u[4] < erase))[:, :, None] & ((xs >= x0) & (xs < x0 + ew))[:, None, :]
        noise = torch.randn(out.shape, generator=gen, device=dev, dtype=out.dtype)
        out = torch.where(inside[:, None], noise, out)
    return out


# --------------------------------------------------------------------------------------- models

# Smaller configs for training on 2 CPU cores within the hour (`--small`): fewer, narrower blocks.
SMALL = {
    "mixer": dict(embed_dim=96, num_blocks=6, mlp_ratio=[0.5, 3.0]),
    "gmlp": dict(embed_dim=64, num_blocks=6, mlp_ratio=4),
    "resmlp": dict(embed_dim=96, num_blocks=6, mlp_ratio=3),
    "poolformer": dict(depths=[2, 4, 2], dims=[32, 64, 128]),
}


def build(name: str, drop_path: float, small: bool = False, patch: int = 4, kw_over: dict | None = None) -> dict:
    """The JSON config of one family: {"family", "timm_class", <timm kwargs>, "img_size"}. Class-valued
    kwargs are dotted names that `instantiate` imports; the rest is passed to the class as is.
    `kw_over` (--kw) replaces timm kwargs last, after --small and --patch."""
    if name == "mixer":  # mixer_s16_224: MlpMixer defaults (MixerBlock, Mlp, LayerNorm eps 1e-6, GELU)
        kw = dict(patch_size=4, in_chans=1, num_classes=10, embed_dim=128, num_blocks=8, mlp_ratio=[1.0, 4.0])
        cls = "timm.models.mlp_mixer.MlpMixer"
    elif name == "gmlp":  # gmlp_ti16_224: patch 16, 30 blocks, dim 128, mlp_ratio 6
        kw = dict(patch_size=4, in_chans=1, num_classes=10, embed_dim=128, num_blocks=8, mlp_ratio=6,
                  block_layer="timm.models.mlp_mixer.SpatialGatingBlock", mlp_layer="timm.layers.GatedMlp")
        cls = "timm.models.mlp_mixer.MlpMixer"
    elif name == "resmlp":  # resmlp_12_224: patch 16, 12 blocks, dim 384, mlp_ratio 4
        kw = dict(patch_size=4, in_chans=1, num_classes=10, embed_dim=128, num_blocks=10, mlp_ratio=4,
                  block_layer="timm.models.mlp_mixer.ResBlock", norm_layer="timm.models.mlp_mixer.Affine")
        cls = "timm.models.mlp_mixer.MlpMixer"
    elif name == "poolformer":  # poolformer_s12: depths (2,2,6,2), dims (64,128,320,512)
        kw = dict(in_chans=1, num_classes=10, depths=[2, 6, 2], dims=[64, 128, 256],
                  token_mixers="timm.models.metaformer.Pooling", downsample_norm=None, mlp_act="torch.nn.GELU",
                  mlp_bias=True, norm_layers="timm.layers.GroupNorm1", output_norm="timm.layers.LayerNorm2d",
                  layer_scale_init_values=1e-5, res_scale_init_values=None, use_mlp_head=False)
        cls = "timm.models.metaformer.MetaFormer"
    else:
        raise SystemExit(f"unknown model {name}")
    if small:
        kw.update(SMALL[name])
    if "patch_size" in kw:
        if SIZE % patch:
            raise SystemExit(f"--patch {patch} does not divide the {SIZE}x{SIZE} image")
        kw["patch_size"] = patch  # 2: a 14x14 token grid, where token mixing has room for structure
    for k, v in (kw_over or {}).items():
        if k in ("drop_path_rate", "img_size"):  # set below, from --drop-path and the data set
            raise SystemExit(f"--kw: {k} is not a --kw key (use --drop-path; the image size is the data's)")
        if k not in kw:
            print(f"--kw: {k} is not in the {name} config {sorted(kw)}; passed to the timm class as given")
        kw[k] = v
    return {"family": name, "timm_class": cls, **kw, "drop_path_rate": drop_path, "img_size": [SIZE, SIZE]}


def resolve(dotted: str):
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def instantiate(config: dict) -> torch.nn.Module:
    """Builds the timm model a `config` (as stored in the metadata) describes."""
    cls = resolve(config["timm_class"])
    params = inspect.signature(cls).parameters
    kw = {}
    for k, v in config.items():
        if k in ("family", "timm_class") or (k == "img_size" and k not in params):
            continue
        kw[k] = resolve(v) if isinstance(v, str) and v.startswith(("timm.", "torch.")) else v
    return cls(**kw)


def from_checkpoint(path: pathlib.Path) -> tuple[dict, dict, dict]:
    """(config, F32 weights, recipe) of a run stopped with --stop-at-epoch: its averaged weights when it
    kept an average, else its weights; the recipe as it stood, recorded as an earlier cycle."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    sig = ck["signature"]
    config = sig["config"]
    state = {k: v.detach().float().contiguous() for k, v in (ck["ema"] or ck["model"]).items()}
    recipe = {"optimizer": "AdamW", "lr": sig["lr"], "weight_decay": sig["weight_decay"], "batch": sig["batch"],
              "schedule": f"linear warmup {ck['step'] // ck['epoch']} steps + cosine to 0 over {sig['epochs']} epochs, stopped after epoch "
                          f"{ck['epoch']} (lr then {ck['sched']['_last_lr'][0]:.2e})",
              "epochs": ck["epoch"], "steps": ck["step"], "label_smoothing": LABEL_SMOOTHING, "drop_path": config["drop_path_rate"],
              "grad_clip": GRAD_CLIP,
              **({"ema": f"timm ModelEmaV3, decay {sig['ema']}; the average is carried on"} if ck["ema"] else {}),
              "augment": augment_text(sig["erase"]),
              "precision": "bf16 autocast" if sig["amp"] else "fp32", "seed": sig["seed"],
              "device": ck.get("device", "not recorded"),
              "train_minutes": round(ck["train_s"] / 60, 2), "torch": torch.__version__}
    return config, state, recipe


def mflops(model: torch.nn.Module) -> float:
    """Multiply-adds x 2 of one 28x28 image (matmuls and convolutions, as PyTorch counts them)."""
    from torch.utils.flop_counter import FlopCounterMode
    counter = FlopCounterMode(display=False)
    model.eval()
    with counter, torch.no_grad():
        model(torch.zeros(1, 1, SIZE, SIZE))
    return counter.get_total_flops() / 1e6


@torch.no_grad()
def evaluate(model, x, y, batch=1000, amp=False):
    """(predictions, top-1) over x, in batches, on x's device."""
    model.eval()
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
        preds = torch.cat([model(x[i:i + batch]).argmax(1) for i in range(0, len(x), batch)])
    return preds, (preds == y).float().mean().item()


# ----------------------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=FAMILIES)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--minutes", type=float, default=3.0, help="budget of the training loop; epochs fit into it")
    ap.add_argument("--epochs", type=int, default=None, help="fixed number of epochs (overrides --minutes)")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=None, help="peak AdamW lr (default per family: %s)" % LR)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--drop-path", type=float, default=0.1, help="stochastic depth rate")
    ap.add_argument("--erase", type=float, default=0.25, help="random erasing probability (0: off)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ema", type=float, default=0.0,
                    help="decay of an exponential moving average of the weights (timm ModelEmaV3), e.g. 0.999; "
                         "when set, the average is what is evaluated and shipped (0: off)")
    ap.add_argument("--init", type=pathlib.Path, default=None,
                    help="start from these weights (a file this script wrote, same config, or a --checkpoint file: "
                         "its averaged weights in F32): a further cosine cycle (warm restart); the recipe records "
                         "the earlier cycles")
    ap.add_argument("--patch", type=int, default=4,
                    help="patch size of the Mixer family (4: a 7x7 token grid; 2: 14x14, 4x the token-mixing work)")
    ap.add_argument("--small", action="store_true", help="the CPU-sized configs (SMALL), for training without a GPU")
    ap.add_argument("--kw", type=json.loads, default=None,
                    help='timm kwargs (JSON) replacing the config\'s, e.g. \'{"embed_dim": 96, "num_blocks": 8}\'')
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1), help="CPU threads")
    ap.add_argument("--data", type=pathlib.Path, default=DATA, help="folder with the Fashion-MNIST IDX files")
    ap.add_argument("--out", type=pathlib.Path, default=None,
                    help="write both files directly into this folder (default: weights/ and tests/fixtures/)")
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                    help="bf16 autocast in training and the per-epoch evaluation (default: on CUDA only). On a CPU "
                         "with AVX512-BF16 (as on the project's AMD EPYC VM) about twice as fast as fp32; the "
                         "final accuracy and the fixture's predictions are always computed in fp32")
    ap.add_argument("--teacher", type=pathlib.Path, action="append", default=[],
                    help="knowledge distillation from this file (written by this script, any family; repeat for an "
                         "ensemble, whose logits are averaged): the loss becomes (1-a) x cross-entropy + a x T^2 x "
                         "KL(teacher || student) at temperature T, on the same augmented batch")
    ap.add_argument("--kd-alpha", type=float, default=0.5, help="weight a of the distillation term (with --teacher)")
    ap.add_argument("--kd-temp", type=float, default=2.0, help="softmax temperature T of the distillation term")
    ap.add_argument("--stop-at-epoch", type=int, default=None,
                    help="leave the run after this epoch of its --epochs horizon (with --checkpoint; no files are "
                         "written): --init CHECKPOINT then starts the next cycle from its weights")
    ap.add_argument("--checkpoint", type=pathlib.Path, default=None,
                    help="file the whole training state is written to after every epoch (needs --epochs); when it "
                         "exists, the run resumes from it, so a long run can span several sessions")
    # Smoke tests only: stop after N optimizer steps (also the cosine horizon), evaluate on the
    # first N test images.
    ap.add_argument("--max-steps", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--test-limit", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    dev = torch.device(args.device)
    amp = args.amp if args.amp is not None else dev.type == "cuda"
    lr = args.lr if args.lr is not None else LR[args.model]
    if args.checkpoint and args.epochs is None:
        raise SystemExit("--checkpoint needs a fixed horizon (--epochs): a budget is planned per process")
    if args.stop_at_epoch is not None and not args.checkpoint:
        raise SystemExit("--stop-at-epoch needs --checkpoint (the stopped run's state is what goes on)")
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)

    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "t10k")
    if args.test_limit:
        xte, yte = xte[:args.test_limit], yte[:args.test_limit]
    config = build(args.model, args.drop_path, args.small, args.patch, args.kw)
    earlier = []
    if args.init and args.init.suffix == ".pt":
        init_config, init_state, prior = from_checkpoint(args.init)
        earlier = [prior]
    elif args.init:
        with safe_open(args.init, "pt") as f:
            meta = f.metadata()
            init_config = json.loads(meta["config"])
            init_state = {k: f.get_tensor(k).float() for k in f.keys()}
            prior = json.loads(meta["recipe"])
            earlier = prior.pop("earlier_cycles", []) + [prior]
    if args.init and ({k: v for k, v in init_config.items() if k != "drop_path_rate"}
                      != {k: v for k, v in config.items() if k != "drop_path_rate"}):
        raise SystemExit(f"{args.init}: its config {init_config} is not this run's {config}")
    teachers, teacher_info = [], []
    for path in args.teacher:  # frozen, evaluated in the student's precision
        with safe_open(path, "pt") as f:
            tmeta = f.metadata()
            t = instantiate(json.loads(tmeta["config"]))
            t.load_state_dict({k: f.get_tensor(k).float() for k in f.keys()}, strict=True)
        teachers.append(t.eval().requires_grad_(False))
        teacher_info.append({"file": path.name, "family": json.loads(tmeta["config"])["family"],
                             "params": int(tmeta["params"]), "pytorch_top1": tmeta["pytorch_top1"]})
    model = instantiate(config)
    if args.init:
        model.load_state_dict(init_state, strict=True)
    params = sum(p.numel() for p in model.parameters())
    flops = mflops(model)
    model.to(dev)
    xtr_d, ytr_d, xte_d, yte_d = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    teachers = [t.to(dev) for t in teachers]
    ensemble_top1 = None
    if teachers:
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bool(amp)):
            tl = torch.cat([sum(t(xte_d[i:i + 1000]).float() for t in teachers) for i in range(0, len(xte_d), 1000)])
        ensemble_top1 = (tl.argmax(1) == yte_d).float().mean().item()
        print(f"distilling from {len(teachers)} teacher(s), ensemble top-1 {ensemble_top1:.4f}: "
              f"{[i['file'] for i in teacher_info]}, alpha {args.kd_alpha}, T {args.kd_temp}", flush=True)
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({args.threads} threads)"
    print(f"{args.model}: {params} params, {flops:.1f} MFLOPs/image, {config['timm_class']}; {device_name}, "
          f"batch {args.batch}, lr {lr}, {'bf16 autocast' if amp else 'fp32'}", flush=True)

    # AdamW; no weight decay on norms, biases, layer scales, Affine alpha/beta.
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim >= 2 and not n.endswith((".alpha", ".beta")) else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, fused=dev.type == "cuda")
    steps_per_epoch = len(xtr) // args.batch
    warmup = steps_per_epoch
    # The horizon: fixed by --epochs / --max-steps, else planned after the first epoch (and only ever shortened).
    plan = {"epochs": args.epochs or 1, "steps": args.max_steps or steps_per_epoch * (args.epochs or 10 ** 6)}
    budgeted = args.epochs is None and args.max_steps is None
    if args.max_steps:
        plan["epochs"] = math.ceil(args.max_steps / steps_per_epoch)
        warmup = max(1, min(warmup, args.max_steps // 5))

    def lr_factor(s: int) -> float:
        total = plan["steps"]
        return min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    ema = timm.utils.ModelEmaV3(model, decay=args.ema) if args.ema > 0 else None
    shipped = ema.module if ema else model  # what is evaluated and written
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    budget = args.minutes * 60
    eval_every, eval_s, first_epoch_end = 1, 0.0, 0.0
    start = time.time()
    step = epoch = 0
    resumed, before = 0, 0.0  # processes that ran this training before this one, and their training seconds
    signature = {"config": config, "lr": lr, "batch": args.batch, "epochs": args.epochs, "ema": args.ema,
                 "weight_decay": args.weight_decay,
                 "erase": args.erase, "seed": args.seed, "amp": bool(amp), "init": str(args.init),
                 **({"teachers": [str(p) for p in args.teacher], "kd": [args.kd_alpha, args.kd_temp]} if teachers else {})}
    if args.checkpoint and args.checkpoint.exists():
        ck = torch.load(args.checkpoint, map_location=dev, weights_only=False)
        if ck["signature"] != signature:
            raise SystemExit(f"{args.checkpoint} is of another run: {ck['signature']}, not {signature}")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        sched.load_state_dict(ck["sched"])
        if ema:
            ema.module.load_state_dict(ck["ema"])
        gen.set_state(ck["gen"])
        torch.set_rng_state(ck["rng"])
        step, epoch, resumed, before = ck["step"], ck["epoch"], ck["resumed"] + 1, ck["train_s"]
        print(f"resumed {args.checkpoint} at epoch {epoch}, step {step} ({before / 60:.2f} min trained before)", flush=True)
    while epoch < plan["epochs"] and step < plan["steps"] and (args.stop_at_epoch is None or epoch < args.stop_at_epoch):
        model.train()
        perm = torch.randperm(len(xtr_d), generator=gen, device=dev)
        loss_sum = torch.zeros((), device=dev)
        n_steps = 0
        t_epoch = time.time()
        t_steady, steady_from = None, steps_per_epoch // 5  # the first steps of a run are slow (warm-up)
        for i in range(steps_per_epoch):
            if step >= plan["steps"]:
                break
            if epoch == 0 and i == steady_from:
                sync()
                t_steady = time.time()
            b = perm[i * args.batch:(i + 1) * args.batch]
            xb = augment(xtr_d[b], gen, args.erase)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                logits = model(xb)
                if teachers:
                    with torch.no_grad():
                        soft = sum(t(xb).float() for t in teachers) / len(teachers)
            loss = F.cross_entropy(logits.float(), ytr_d[b], label_smoothing=LABEL_SMOOTHING)
            if teachers:
                temp = args.kd_temp
                kd = F.kl_div(F.log_softmax(logits.float() / temp, 1), F.log_softmax(soft / temp, 1),
                              reduction="batchmean", log_target=True) * temp * temp
                loss = (1 - args.kd_alpha) * loss + args.kd_alpha * kd
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            opt.step()
            sched.step()
            if ema:
                ema.update(model, step=step)
            loss_sum += loss.detach()
            n_steps += 1
            step += 1
        epoch += 1
        sync()
        train_s = time.time() - t_epoch
        if budgeted and epoch == 1:
            # Per-epoch cost from the steady part of epoch 1, eval included; fit the rest of the budget.
            t0 = time.time()
            _, acc = evaluate(shipped, xte_d, yte_d, 2500, amp)
            sync()
            eval_s = time.time() - t0
            per_epoch = (time.time() - t_steady) / (steps_per_epoch - steady_from) * steps_per_epoch if t_steady else train_s
            left = budget - (time.time() - start)
            more = int(0.97 * left / (per_epoch + eval_s))
            eval_every = max(1, (1 + more) // 30) if eval_s > 0.05 * per_epoch else 1
            more = max(0, int(0.97 * left / (per_epoch + eval_s / eval_every)))
            plan["epochs"] = 1 + more
            plan["steps"] = plan["epochs"] * steps_per_epoch
            print(f"plan: {plan['epochs']} epochs of {steps_per_epoch} steps ({per_epoch:.2f} s/epoch, "
                  f"eval {eval_s:.2f} s every {eval_every}) in {args.minutes} min", flush=True)
        elif epoch % eval_every == 0 or epoch == plan["epochs"] or step >= plan["steps"]:
            _, acc = evaluate(shipped, xte_d, yte_d, 2500, amp)
        else:
            acc = None
        elapsed = before + time.time() - start
        shown = "  -   " if acc is None else f"{acc:.4f}"
        print(f"epoch {epoch}/{plan['epochs']}: loss {loss_sum.item() / max(1, n_steps):.4f} "
              f"lr {sched.get_last_lr()[0]:.2e} test top-1 {shown} ({elapsed / 60:.2f} min)", flush=True)
        if budgeted and 1 < epoch < plan["epochs"]:
            per_epoch = (elapsed - first_epoch_end) / (epoch - 1)
            if elapsed + (plan["epochs"] - epoch) * per_epoch > 1.05 * budget:
                plan["epochs"] = max(epoch + 1, epoch + int((budget - elapsed) / per_epoch))
                plan["steps"] = plan["epochs"] * steps_per_epoch
                print(f"running slower than planned ({per_epoch:.2f} s/epoch): horizon shortened to "
                      f"{plan['epochs']} epochs", flush=True)
        if epoch == 1:
            first_epoch_end = elapsed
        if args.checkpoint:  # atomically: a process killed mid-write leaves the previous epoch's state
            tmp = args.checkpoint.with_name(args.checkpoint.name + ".tmp")
            torch.save({"signature": signature, "model": model.state_dict(), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "ema": ema.module.state_dict() if ema else None,
                        "gen": gen.get_state(), "rng": torch.get_rng_state(), "step": step, "epoch": epoch,
                        "resumed": resumed, "train_s": before + time.time() - start, "device": device_name}, tmp)
            os.replace(tmp, args.checkpoint)
    train_min = (before + time.time() - start) / 60
    if args.stop_at_epoch is not None and epoch < plan["epochs"]:
        print(f"stopped after epoch {epoch} of {plan['epochs']}: {args.checkpoint} holds the run "
              f"(--init {args.checkpoint} continues from its weights)", flush=True)
        return

    # Final numbers: CPU, float32, no TF32; once with the trained (or averaged) weights, once with the F16 ones shipped.
    model = shipped.cpu().float().eval()
    _, acc32 = evaluate(model, xte, yte)
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.float() for k, v in state.items()})
    preds, acc16 = evaluate(model, xte, yte)
    correct16, correct32 = int((preds == yte).sum()), int(round(acc32 * len(yte)))

    name = f"{args.model}_fmnist"
    meta = {
        "config": json.dumps(config),
        "preprocess": json.dumps({"size": [SIZE, SIZE], "crop_pct": 1.0, "mean": [MEAN], "std": [STD], "channels": 1,
                                  "photo": "greyscale, then invert when the background is light (Fashion-MNIST "
                                           "items are light on black)"}),
        "labels": json.dumps(LABELS),
        "dataset": "Fashion-MNIST (Zalando, MIT licence), 60k train / 10k test, via Debian dataset-fashion-mnist",
        "recipe": json.dumps({
            "optimizer": "AdamW", "lr": lr, "weight_decay": args.weight_decay, "batch": args.batch,
            "schedule": f"linear warmup {warmup} steps + cosine to 0", "epochs": epoch, "steps": step,
            "label_smoothing": LABEL_SMOOTHING, "drop_path": args.drop_path, "grad_clip": GRAD_CLIP,
            **({"ema": f"timm ModelEmaV3, decay {args.ema}; the average is shipped"} if ema else {}),
            "augment": augment_text(args.erase),
            "precision": "bf16 autocast" if amp else "fp32", "seed": args.seed, "device": device_name,
            "train_minutes": round(train_min, 2), "torch": torch.__version__, "timm": timm.__version__,
            **({"resumed": f"from its --checkpoint by {resumed} later process(es)"} if resumed else {}),
            **({"distillation": {"teachers": teacher_info, "teacher_ensemble_top1": round(ensemble_top1, 4),
                                 "loss": f"(1 - {args.kd_alpha}) x cross-entropy + {args.kd_alpha} x T^2 x "
                                         f"KL(mean teacher logits || student) at T = {args.kd_temp}"}} if teachers else {}),
            **({"init": "the weights of the earlier cycles below", "earlier_cycles": earlier,
                "total_epochs": epoch + sum(c["epochs"] for c in earlier),
                "total_train_minutes": round(train_min + sum(c["train_minutes"] for c in earlier), 2)} if earlier else {})}),
        "pytorch_top1": f"{acc16:.4f}",
        "params": str(params),
    }
    if args.out:
        wdir = fdir = args.out
    else:
        wdir, fdir = ROOT / "weights", ROOT / "tests" / "fixtures"
    wdir.mkdir(parents=True, exist_ok=True)
    fdir.mkdir(parents=True, exist_ok=True)
    wpath, fpath = wdir / f"{name}.safetensors", fdir / f"{name}.preds.safetensors"
    save_file(state, wpath, metadata=meta)
    save_file({"input": xte[:SLICE].contiguous(), "preds": preds[:SLICE].to(torch.int32).contiguous(),
               "labels": yte[:SLICE].to(torch.int32).contiguous()}, fpath)

    # Self-check: the written file rebuilds from its own metadata and predicts the fixture the same.
    with safe_open(wpath, "pt") as f:
        check = instantiate(json.loads(f.metadata()["config"]))
        check.load_state_dict({k: f.get_tensor(k).float() for k in f.keys()}, strict=True)
    check_preds, _ = evaluate(check, xte[:SLICE], yte[:SLICE])
    assert torch.equal(check_preds, preds[:SLICE]), "reloaded model disagrees with the fixture"

    print(json.dumps({"name": name, "params": params, "mflops": round(flops, 1), "epochs": epoch, "steps": step,
                      "train_minutes": round(train_min, 2), "device": device_name,
                      "pytorch_top1_f32": acc32, "pytorch_top1_f16": acc16, "correct_f32": correct32,
                      "correct_f16": correct16, "test_images": len(yte),
                      "weights": str(wpath), "fixture": str(fpath)}), flush=True)


if __name__ == "__main__":
    main()
