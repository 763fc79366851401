#!/usr/bin/env python3
"""Writes the golden fixtures under tests/fixtures/ from timm itself.

For each config: a model file `<name>.safetensors` with timm's own parameter names (exactly
what `model.state_dict()` holds, optionally stored as F16/BF16), and `<name>.io.safetensors`
holding `input` [N,C,H,W] and timm's `logits` [N,classes].

EVERY parameter is re-randomised: timm zero-initialises the head (and small layer scales),
which would let a broken head or norm pass. Some configs shrink the stem so the token
variance is ~1e-5, which makes LayerNorm's eps (1e-6 vs 1e-5) visible in the logits.

gMLP and ResMLP are timm's MlpMixer with another block_layer (as timm's gmlp_*/resmlp_*
presets build them); PoolFormer is timm's MetaFormer with the Pooling mixer and GroupNorm1 (as
poolformer_s12). Layer scales are re-randomised too (0.5 * N(0,1), far from timm's 1e-5 init),
so the branches they scale matter.

It also writes `<name>.explain.safetensors`: timm's own per-token split of those logits
(`evidence` [N, classes, gh, gw], `bias` [classes]) taken from timm's tensors. Mixer, gMLP and
ResMLP: `forward_features` gives the normalised tokens n_t, and the head is linear after a
mean, so evidence[c, t] = head.weight[c] · n_t / T and bias = head.bias. PoolFormer:
`forward_features` gives the last stage's tokens x_t; the head is fc(LayerNorm(mean_t x_t)),
so with the pooled vector's mean μ and σ = sqrt(var + eps), evidence[c, t] =
Σ_k W[c,k] γ_k (x_t,k − μ) / (σ T) and bias = W·β + b. The script checks
`evidence.sum((2, 3)) + bias == logits` against timm's forward before writing.

Run: python tools/make_goldens.py            (needs tools/requirements.txt; CI never runs it)
     python tools/make_goldens.py --explain  (only the .explain files, from the committed
                                              weights and inputs, nothing else rewritten)
"""
import sys
import json
import pathlib

import torch
from safetensors.torch import save_file
from timm.layers import GroupNorm1
from timm.models.metaformer import MetaFormer, Pooling
from timm.models.mlp_mixer import Affine, GatedMlp, MlpMixer, ResBlock, SpatialGatingBlock

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

GMLP = dict(block_layer=SpatialGatingBlock, mlp_layer=GatedMlp)
RESMLP = dict(block_layer=ResBlock, norm_layer=Affine)
POOLFORMER = dict(token_mixers=Pooling, norm_layers=GroupNorm1, mlp_act=torch.nn.GELU, mlp_bias=True,
                  layer_scale_init_values=1e-5, res_scale_init_values=None, downsample_norm=None,
                  use_mlp_head=False)

CONFIGS.update({
    # gMLP: 4x4 grid, RGB, hidden 96 (gate halves of 48), batch 3.
    "gmlp_p4_rgb": (dict(img_size=16, patch_size=4, in_chans=3, embed_dim=32, num_blocks=2, mlp_ratio=3,
                         num_classes=10, **GMLP), 3, torch.float32, 1.0, None),
    # gMLP, non-square 5x7 grid (35 tokens), greyscale, F16, image size in metadata.
    "gmlp_grey_nonsquare_f16": (dict(img_size=(20, 28), patch_size=4, in_chans=1, embed_dim=24, num_blocks=3,
                                     mlp_ratio=4, num_classes=7, **GMLP), 2, torch.float16, 1.0,
                                {"config": json.dumps({"img_size": [20, 28]})}),
    # gMLP with dim 64 (texture mirrors) and fc1 scaled down so the gate half v has a variance
    # near 1e-5: the SGU LayerNorm's eps (1e-5, not the block norm's 1e-6) shows in the logits.
    "gmlp_d64_small_gate": (dict(img_size=12, patch_size=3, in_chans=3, embed_dim=64, num_blocks=2,
                                 mlp_ratio=2, num_classes=5, **GMLP), 2, torch.float32, 1.0, None),
    # ResMLP: 4x4 grid, RGB, Affine norms, layer scales, BF16.
    "resmlp_p4_bf16": (dict(img_size=16, patch_size=4, in_chans=3, embed_dim=32, num_blocks=3, mlp_ratio=4,
                            num_classes=10, **RESMLP), 2, torch.bfloat16, 1.0, None),
    # ResMLP, non-square 3x5 grid, greyscale, dim 64 (texture mirrors), batch 3.
    "resmlp_grey_nonsquare": (dict(img_size=(12, 20), patch_size=4, in_chans=1, embed_dim=64, num_blocks=2,
                                   mlp_ratio=2, num_classes=6, **RESMLP), 3, torch.float32, 1.0,
                              {"config": json.dumps({"img_size": [12, 20]})}),
    # PoolFormer, four stages on 64x64: grids 16, 8, 4, 2.
    "poolformer_rgb": (dict(in_chans=3, num_classes=10, depths=(2, 1, 2, 1), dims=(16, 24, 32, 40), **POOLFORMER),
                       2, torch.float32, 1.0, None, (64, 64)),
    # PoolFormer on a non-square 36x52 greyscale image: grids 9x13, 5x7, 3x4, 2x2 (odd sizes
    # exercise pooling at every border and the convolutions' padding), F16, small stem so the
    # GroupNorm eps (1e-5) shows.
    "poolformer_grey_nonsquare_f16": (dict(in_chans=1, num_classes=7, depths=(1, 1, 2, 1), dims=(8, 16, 24, 32),
                                           **POOLFORMER), 2, torch.float16, 3e-3,
                                      {"config": json.dumps({"img_size": [36, 52]})}, (36, 52)),
    # PoolFormer with widths multiple of 64 (texture mirrors) and two stages, batch 3.
    "poolformer_d64": (dict(in_chans=3, num_classes=6, depths=(1, 2), dims=(64, 128), **POOLFORMER),
                       3, torch.float32, 1.0, None, (32, 32)),
    # Many tokens (16x16 grid), narrow channels, 1000 classes: the token-mixing weights and the
    # head are several times larger than any activation of one image, so a test that lowers
    # the storage-binding limit below them (but above the activations) makes tokenmix split
    # these weights into row blocks — and the logits must not change.
    "mixer_many_tokens": (dict(img_size=32, patch_size=2, in_chans=3, embed_dim=8, num_blocks=2,
                               mlp_ratio=(4.0, 2.0), num_classes=1000), 2, torch.float32, 1.0, None),
    "gmlp_many_tokens": (dict(img_size=32, patch_size=2, in_chans=3, embed_dim=8, num_blocks=2, mlp_ratio=2,
                              num_classes=1000, **GMLP), 2, torch.float16, 1.0, None),
    "resmlp_many_tokens": (dict(img_size=32, patch_size=2, in_chans=3, embed_dim=8, num_blocks=2, mlp_ratio=2,
                                num_classes=1000, **RESMLP), 2, torch.float16, 1.0, None),
})


def build(kwargs: dict) -> torch.nn.Module:
    return (MetaFormer if "depths" in kwargs else MlpMixer)(**kwargs).eval()


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
    for i, (name, (kwargs, batch, dtype, stem_scale, meta, *size)) in enumerate(CONFIGS.items()):
        gen = torch.Generator().manual_seed(1000 + i)
        model = build(kwargs)
        rerandomise(model, gen, stem_scale)
        fc1_scale = {"mixer_p4_gelu_range": 2.5, "gmlp_d64_small_gate": 3e-3}.get(name)
        if fc1_scale:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if "fc1" in n:
                        p.mul_(fc1_scale)
        # Round the weights to the storage dtype first, so timm's logits are those of the
        # exact weights tokenmix reads.
        state = {k: v.to(dtype).contiguous() for k, v in model.state_dict().items()}
        model.load_state_dict({k: v.float() for k, v in state.items()})
        img = size[0] if size else kwargs["img_size"]
        h, w = img if isinstance(img, tuple) else (img,) * 2
        x = torch.randn((batch, kwargs["in_chans"], h, w), generator=gen)
        with torch.no_grad():
            logits = model(x)
        save_file(state, OUT / f"{name}.safetensors", metadata=meta)
        save_file({"input": x.contiguous(), "logits": logits.contiguous()}, OUT / f"{name}.io.safetensors")
        print(f"{name}: logits {tuple(logits.shape)}, max |logit| {logits.abs().max():.3f}"
              f"{eps_sensitivity(model, x, logits)}")


def eps_sensitivity(model: torch.nn.Module, x: torch.Tensor, logits: torch.Tensor) -> str:
    """How far the logits move when every norm's eps is 10x off: the margin a wrong eps fails by."""
    norms = [m for m in model.modules() if isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm))]
    if not norms:
        return ""
    saved = [m.eps for m in norms]
    moved = []
    for factor in (10.0, 0.1):
        for m, e in zip(norms, saved):
            m.eps = e * factor
        with torch.no_grad():
            moved.append((model(x) - logits).abs().max().item())
    for m, e in zip(norms, saved):
        m.eps = e
    return f", eps x10 moves logits {moved[0]:.2e}, eps /10 {moved[1]:.2e}"


def explain(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """timm's per-token split of its logits: (evidence [N, classes, gh, gw], bias [classes])."""
    with torch.no_grad():
        feats = model.forward_features(x)
        if isinstance(model, MetaFormer):
            n, d, gh, gw = feats.shape
            norm, fc = model.head.norm, model.head.fc
            pooled = feats.mean((2, 3))
            mu = pooled.mean(1)
            sigma = (pooled.var(1, unbiased=False) + norm.eps).sqrt()
            centred = (feats - mu[:, None, None, None]) / (sigma[:, None, None, None] * gh * gw)
            evidence = torch.einsum("ck,nkhw->nchw", fc.weight * norm.weight[None, :], centred)
            bias = fc.weight @ norm.bias + fc.bias
        else:
            n, t, d = feats.shape
            gh, gw = model.stem.grid_size
            evidence = torch.einsum("ck,ntk->nct", model.head.weight, feats).reshape(n, -1, gh, gw) / t
            bias = model.head.bias.clone()
    return evidence, bias


def explain_main() -> None:
    from safetensors.torch import load_file
    for name, (kwargs, *_rest) in CONFIGS.items():
        if name.endswith("_many_tokens"):
            continue  # 1000 classes x 256 tokens: 2 MB each, and nothing the others miss
        model = build(kwargs)
        model.load_state_dict({k: v.float() for k, v in load_file(OUT / f"{name}.safetensors").items()})
        io = load_file(OUT / f"{name}.io.safetensors")
        x = io["input"]
        with torch.no_grad():
            logits = model(x)
        assert torch.allclose(logits, io["logits"], atol=1e-5), name
        evidence, bias = explain(model, x)
        err = (evidence.sum((2, 3)) + bias - logits).abs().max().item()
        assert err <= 1e-4 * max(1.0, logits.abs().max().item()), (name, err)
        save_file({"evidence": evidence.contiguous(), "bias": bias.contiguous()}, OUT / f"{name}.explain.safetensors")
        print(f"{name}: evidence {tuple(evidence.shape)}, |sum + bias - logits| {err:.1e}")


if __name__ == "__main__":
    explain_main() if "--explain" in sys.argv[1:] else (main(), explain_main())
