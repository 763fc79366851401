#!/usr/bin/env python3
"""Writes a full-size timm model with random weights as model.safetensors (timm names), and
optionally the same model as ONNX for the onnxruntime-web comparison in tests/browser/bench.mjs.

Every parameter is re-randomised (timm zero-inits the head), so parity checks are meaningful;
the ONNX file holds the very same weights, so the browser bench can check that tokenmix and
onnxruntime-web agree before it compares their speed.
Usage: python tools/timm_checkpoint.py mixer_s16_224 /tmp/mixer_s16_224.safetensors [--onnx /tmp/mixer_s16_224.onnx]
"""
import argparse

import timm
import torch
from safetensors.torch import save_file

from make_goldens import rerandomise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="timm model name, e.g. mixer_s16_224")
    ap.add_argument("out", help="the .safetensors file to write")
    ap.add_argument("--onnx", help="also export the model to this .onnx file (opset 17, TorchScript exporter; needs `onnx`)")
    args = ap.parse_args()
    model = timm.create_model(args.name, pretrained=False).eval()
    rerandomise(model, torch.Generator().manual_seed(7), 1.0)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.out)
    print(f"{args.name}: {sum(p.numel() for p in model.parameters())} parameters -> {args.out}")
    if args.onnx:
        size = model.pretrained_cfg.get("input_size", (3, 224, 224))
        with torch.no_grad():
            torch.onnx.export(model, (torch.zeros(1, *size),), args.onnx, opset_version=17, dynamo=False,
                              input_names=["input"], output_names=["logits"])
        print(f"{args.name}: ONNX opset 17 -> {args.onnx}")


if __name__ == "__main__":
    main()
