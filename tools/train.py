#!/usr/bin/env python3
"""Trains tokenmix's default models on Fashion-MNIST with timm's own model classes.

Writes weights/<name>.safetensors with timm parameter names (F16) and __metadata__ holding
`config`, `preprocess`, `labels`, `dataset`, `recipe` and PyTorch's own test accuracy, plus
tests/fixtures/<name>.preds.safetensors: a fixed slice of the test set with PyTorch's
predictions, so the Rust suite can check tokenmix predicts the same.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, MIT licence).
Run:  python tools/train.py mixer --minutes 20 --threads 1     (never run by CI)
"""
import argparse
import gzip
import json
import math
import pathlib
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")
LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
MEAN, STD = 0.2860, 0.3530
SLICE = 256  # test images whose predictions are committed as a fixture


def idx(path: pathlib.Path) -> np.ndarray:
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split: str):
    x = idx(DATA / f"{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = idx(DATA / f"{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy((x - MEAN) / STD).unsqueeze(1), torch.from_numpy(y)


def build(name: str):
    if name == "mixer":
        from timm.models.mlp_mixer import MlpMixer
        cfg = dict(img_size=28, patch_size=4, in_chans=1, embed_dim=128, num_blocks=4,
                   mlp_ratio=(1.0, 4.0), num_classes=10)
        return MlpMixer(**cfg), cfg
    raise SystemExit(f"unknown model {name}")


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random 2-pixel translation (pad + crop) and horizontal flip, on normalised tensors."""
    n = x.shape[0]
    pad = F.pad(x, (2, 2, 2, 2), value=-MEAN / STD)
    dx, dy = torch.randint(0, 5, (2,), generator=gen).tolist()
    out = pad[:, :, dy:dy + 28, dx:dx + 28]
    flip = torch.rand(n, generator=gen) < 0.5
    out = torch.where(flip[:, None, None, None], out.flip(3), out)
    return out.contiguous()


@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    model.eval()
    preds = torch.cat([model(x[i:i + batch]).argmax(1) for i in range(0, len(x), batch)])
    return preds, (preds == y).float().mean().item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["mixer"])
    ap.add_argument("--minutes", type=float, default=20.0, help="training budget; epochs fit into it")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    model, cfg = build(args.model)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    steps_per_epoch = len(xtr) // args.batch
    total = steps_per_epoch * args.epochs
    warmup = steps_per_epoch // 2
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    start = time.time()
    step = 0
    epochs_done = 0
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        for i in range(steps_per_epoch):
            b = perm[i * args.batch:(i + 1) * args.batch]
            loss = F.cross_entropy(model(augment(xtr[b], gen)), ytr[b], label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
        epochs_done += 1
        _, acc = evaluate(model, xte, yte)
        elapsed = (time.time() - start) / 60
        print(f"epoch {epoch + 1}: loss {loss.item():.3f} test top-1 {acc:.4f} ({elapsed:.1f} min)", flush=True)
        if elapsed * (epoch + 2) / (epoch + 1) > args.minutes:
            print("time budget reached", flush=True)
            break
    train_min = (time.time() - start) / 60
    preds, acc = evaluate(model, xte, yte)
    model.eval()

    name = f"{args.model}_fmnist"
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    # Accuracy of the F16 weights actually shipped, as PyTorch computes it.
    model.load_state_dict({k: v.float() for k, v in state.items()})
    preds, acc16 = evaluate(model, xte, yte)
    meta = {
        "config": json.dumps({"family": args.model, **cfg, "img_size": [28, 28]}),
        "preprocess": json.dumps({"size": [28, 28], "crop_pct": 1.0, "mean": [MEAN], "std": [STD], "channels": 1,
                                  "photo": "greyscale, then invert when the background is light (Fashion-MNIST "
                                           "items are light on black)"}),
        "labels": json.dumps(LABELS),
        "dataset": "Fashion-MNIST (Zalando, MIT licence), 60k train / 10k test, via Debian dataset-fashion-mnist",
        "recipe": json.dumps({"optimizer": "AdamW", "lr": args.lr, "weight_decay": 0.05, "batch": args.batch,
                              "schedule": "linear warmup 0.5 epoch + cosine", "epochs": epochs_done,
                              "label_smoothing": 0.1, "augment": "random 2px translation, horizontal flip",
                              "seed": 0, "threads": args.threads, "train_minutes": round(train_min, 1)}),
        "pytorch_top1": f"{acc16:.4f}",
        "params": str(params),
    }
    (ROOT / "weights").mkdir(exist_ok=True)
    save_file(state, ROOT / "weights" / f"{name}.safetensors", metadata=meta)
    save_file({"input": xte[:SLICE].contiguous(), "preds": preds[:SLICE].to(torch.int32).contiguous(),
               "labels": yte[:SLICE].to(torch.int32).contiguous()},
              ROOT / "tests" / "fixtures" / f"{name}.preds.safetensors")
    print(json.dumps({"name": name, "params": params, "train_minutes": round(train_min, 1),
                      "pytorch_top1_f32": acc, "pytorch_top1_f16": acc16, "correct_f16": int(round(acc16 * len(yte)))}))


if __name__ == "__main__":
    main()
