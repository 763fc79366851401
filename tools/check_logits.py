#!/usr/bin/env python3
"""Compares `tokenmix logits` with timm on a checkpoint: max |Δlogit| and max relative error.

Usage: python tools/check_logits.py mixer_s16_224 W.safetensors [--tokenmix target/release/tokenmix] [--batch 2]
       [--precision f32|f16]   (f16: tokenmix's f16 GEMMs, e.g. tensor cores, held to the f16 bound 1e-2)
"""
import argparse
import pathlib
import subprocess
import tempfile

import numpy as np
import timm
import torch
from safetensors.torch import load_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("weights")
    ap.add_argument("--tokenmix", default="target/release/tokenmix")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--precision", choices=["f32", "f16"], default="f32")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = timm.create_model(args.model, pretrained=False).eval()
    model.load_state_dict(load_file(args.weights))
    c, h, w = model.pretrained_cfg["input_size"]
    x = torch.randn((args.batch, c, h, w), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model(x).numpy()
    with tempfile.TemporaryDirectory() as d:
        xi, yo = pathlib.Path(d) / "x.npy", pathlib.Path(d) / "y.npy"
        np.save(xi, x.numpy().astype(np.float32))
        subprocess.run([args.tokenmix, "logits", "--weights", args.weights, "--input", str(xi), "--out", str(yo),
                        "--precision", args.precision], check=True)
        got = np.load(yo)
    diff = np.abs(got - ref).max()
    scale = max(1.0, np.abs(ref).max())
    tolerance = 1e-2 if args.precision == "f16" else 1e-4
    print(f"{args.model} ({args.precision}): max|Δlogit| {diff:.3e}, max|logit| {np.abs(ref).max():.3f}, "
          f"relative {diff / scale:.3e} (tolerance {tolerance:g}), same argmax: {(got.argmax(1) == ref.argmax(1)).all()}")


if __name__ == "__main__":
    main()
