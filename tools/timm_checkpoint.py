#!/usr/bin/env python3
"""Writes a full-size timm model with random weights as model.safetensors (timm names).

Every parameter is re-randomised (timm zero-inits the head), so parity checks are meaningful.
Usage: python tools/timm_checkpoint.py mixer_s16_224 /tmp/mixer_s16_224.safetensors
"""
import sys

import timm
import torch
from safetensors.torch import save_file

from make_goldens import rerandomise


def main() -> None:
    name, out = sys.argv[1], sys.argv[2]
    model = timm.create_model(name, pretrained=False).eval()
    rerandomise(model, torch.Generator().manual_seed(7), 1.0)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters -> {out}")


if __name__ == "__main__":
    main()
