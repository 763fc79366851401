#!/usr/bin/env python3
"""Writes the golden fixtures under tests/fixtures/ from timm itself.

For each config: a model file `<name>.safetensors` with timm's own parameter names (exactly
what `model.state_dict()` holds, optionally stored as F16/BF16), and `<name>.io.safetensors`
holding `input` [N,C,H,W] and timm's `logits` [N,classes].

EVERY parameter is re-randomised: timm zero-initialises the head (and small layer scales),
which would let a broken head or norm pass. Some configs shrink the stem so the token
variance is ~1e-5, which makes LayerNorm's eps (1e-6 vs 1e-5) visible in the logits.

Run: python tools/make_goldens.py   (needs tools/requirements.txt; CI never runs it)
"""
import json
import pathlib

import torch
from safetensors.torch import save_file
from timm.models.mlp_mixer import MlpMixer

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures"

# name: (constructor kwargs, batch, weight dtype, stem scale, metadata)
CONFIGS = {
    # 4x4 grid, RGB, tokens_hidden < tokens, stored F32.
    "mixer_p4_rgb": (dict(img_size=16, patch_size=4, in_chans=3, embed_dim=32, num_blocks=2,
                          mlp_ratio=(0.5, 4.0), num_classes=10), 3, torch.float32, 1.0, None),
    # Non-square 3x5 grid, greyscale, tokens_hidden > tokens; image size given in metadata.
    "mixer_p8_grey_nonsquare": (dict(img_size=(24, 40), patch_size=8, in_chans=1, embed_dim=48, num_blocks=3,
                                     mlp_ratio=(3.0, 2.0), num_classes=7), 2, torch.float32, 1.0,
                                {"config": json.dumps({"img_size": [24, 40]})}),
    # 7x7 grid (49 tokens: K not a multiple of 4 or 8), tiny stem so LayerNorm eps matters, F16.
    "mixer_p2_small_stem_f16": (dict(img_size=14, patch_size=2, in_chans=3, embed_dim=24, num_blocks=4,
                                     mlp_ratio=(0.25, 3.0), num_classes=5), 2, torch.float16, 3e-3, None),
    # Odd sizes everywhere (dim 20, 3x3 grid, 11 classes), BF16 storage.
    "mixer_p5_bf16": (dict(img_size=15, patch_size=5, in_chans=3, embed_dim=20, num_blocks=2,
                           mlp_ratio=(1.5, 2.5), num_classes=11), 2, torch.bfloat16, 1.0, None),
    # dim, hidden sizes multiples of 64: the texture GEMM also gathers activations from
    # texture mirrors on this one (xn, both hidden layers), batch 3.
    "mixer_p4_d64": (dict(img_size=16, patch_size=4, in_chans=3, embed_dim=64, num_blocks=2,
                          mlp_ratio=(1.0, 4.0), num_classes=6), 3, torch.float32, 1.0, None),
    # Channel-MLP hidden units pushed into |x| ~ 1-3, where GELU's tanh approximation differs
    # most from the exact erf form: makes a wrong GELU fail by a wide margin.
    "mixer_p4_gelu_range": (dict(img_size=8, patch_size=4, in_chans=3, embed_dim=16, num_blocks=3,
                                 mlp_ratio=(2.0, 8.0), num_classes=4), 2, torch.float32, 1.0, None),
}


def rerandomise(model: torch.nn.Module, gen: torch.Generator, stem_scale: float) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.ndim >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
                if name.startswith("stem."):
                    p.mul_(stem_scale)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=gen))
            else:  # biases (norms and linears), anything else
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
                if name.startswith("stem."):
                    p.mul_(stem_scale)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, (name, (kwargs, batch, dtype, stem_scale, meta)) in enumerate(CONFIGS.items()):
        gen = torch.Generator().manual_seed(1000 + i)
        model = MlpMixer(**kwargs).eval()
        rerandomise(model, gen, stem_scale)
        if name == "mixer_p4_gelu_range":
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if "fc1" in n:
                        p.mul_(2.5)
        # Round the weights to the storage dtype first, so timm's logits are those of the
        # exact weights tokenmix reads.
        state = {k: v.to(dtype).contiguous() for k, v in model.state_dict().items()}
        model.load_state_dict({k: v.float() for k, v in state.items()})
        h, w = kwargs["img_size"] if isinstance(kwargs["img_size"], tuple) else (kwargs["img_size"],) * 2
        x = torch.randn((batch, kwargs["in_chans"], h, w), generator=gen)
        with torch.no_grad():
            logits = model(x)
        save_file(state, OUT / f"{name}.safetensors", metadata=meta)
        save_file({"input": x.contiguous(), "logits": logits.contiguous()}, OUT / f"{name}.io.safetensors")
        print(f"{name}: logits {tuple(logits.shape)}, max |logit| {logits.abs().max():.3f}")


if __name__ == "__main__":
    main()
