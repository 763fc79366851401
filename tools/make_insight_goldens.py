#!/usr/bin/env python3
"""Writes tests/fixtures/insight.json: an independent (numpy/PyTorch, f64) reference for
tokenmix's insight module (src/insight.rs), which tests/insight.rs checks on every build.

For each model below and each token-mixing layer:
  map           the layer's tokens x tokens map M: gMLP's SGU projection, ResMLP's
                linear_tokens, and for MLP-Mixer the token MLP linearised at zero input,
                fc2 · diag(GELU'(b1)) · fc1, with GELU' from PyTorch autograd of F.gelu;
  figures       locality (|M|-weighted mean patch distance), shift_invariance (share of ‖M‖²
                in the offset-averaged map), low_frequency (share of the rows' np.fft.fft2
                energy at radial frequency ≤ 0.25 cycles per patch);
  offset_kernel mean of M by offset pos(s) − pos(t), (2gh−1) x (2gw−1);
  units         (Mixer) per fc1 row: the dominant (ky, kx) of np.fft.rfft2's power (the first
                index within 1e-9 of the maximum, row-major), the opposite-sign partner it is
                paired with (correlations of the centred rows below −0.5, greedily from the
                most negative) and the display order.
And the figures of timm's own initialisation (a fresh timm model per seed, 16 seeds: mean and
standard deviation) for the shipped models' shapes and a golden fixture's, which tokenmix
estimates from its own draws of timm's distributions.

Run: python tools/make_insight_goldens.py   (needs tools/requirements.txt; CI never runs it)
"""
import json
import pathlib

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file
from timm.models.mlp_mixer import Affine, MlpMixer, ResBlock, SpatialGatingBlock
from train import resolve  # tools/train.py: the dotted class names of a file's config

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
LOW = 0.25

# name: (file, kind, grid)
MODELS = {
    "mixer_p4_rgb": (FIX / "mixer_p4_rgb.safetensors", "mixer", (4, 4)),
    "mixer_p8_grey_nonsquare": (FIX / "mixer_p8_grey_nonsquare.safetensors", "mixer", (3, 5)),
    "mixer_p2_small_stem_f16": (FIX / "mixer_p2_small_stem_f16.safetensors", "mixer", (7, 7)),
    "gmlp_p4_rgb": (FIX / "gmlp_p4_rgb.safetensors", "gmlp", (4, 4)),
    "gmlp_grey_nonsquare_f16": (FIX / "gmlp_grey_nonsquare_f16.safetensors", "gmlp", (5, 7)),
    "resmlp_grey_nonsquare": (FIX / "resmlp_grey_nonsquare.safetensors", "resmlp", (3, 5)),
    "mixer_fmnist": (ROOT / "weights" / "mixer_fmnist.safetensors", "mixer", (7, 7)),
    "gmlp_fmnist": (ROOT / "weights" / "gmlp_fmnist.safetensors", "gmlp", (7, 7)),
}


def shipped_init(name: str) -> dict:
    """timm kwargs of a shipped model's architecture, read from its file's metadata `config` (as
    tools/train.py wrote it), with one block: the layer whose initialisation the figures compare with."""
    with safe_open(ROOT / "weights" / f"{name}.safetensors", "pt") as f:
        config = json.loads(f.metadata()["config"])
    kw = {k: resolve(v) if isinstance(v, str) and v.startswith(("timm.", "torch.")) else v
          for k, v in config.items() if k not in ("family", "timm_class", "drop_path_rate")}
    return {**kw, "num_blocks": 1}


# Initialisations: timm constructor kwargs (grid = img_size / patch_size).
INITS = {
    "mixer_fmnist": shipped_init("mixer_fmnist"),
    "gmlp_fmnist": shipped_init("gmlp_fmnist"),
    "resmlp_grey_nonsquare": dict(img_size=(12, 20), patch_size=4, in_chans=1, embed_dim=64, num_blocks=1, mlp_ratio=2,
                                  num_classes=6, block_layer=ResBlock, norm_layer=Affine),
}


def gelu_slope(b: torch.Tensor) -> torch.Tensor:
    b = b.detach().double().clone().requires_grad_(True)
    F.gelu(b).sum().backward()
    return b.grad


def token_map(w: dict, kind: str, i: int) -> np.ndarray:
    p = f"blocks.{i}"
    if kind == "mixer":
        fc1 = w[f"{p}.mlp_tokens.fc1.weight"].double()
        fc2 = w[f"{p}.mlp_tokens.fc2.weight"].double()
        slope = gelu_slope(w[f"{p}.mlp_tokens.fc1.bias"])
        return (fc2 @ torch.diag(slope) @ fc1).numpy()
    name = "mlp_channels.gate.proj.weight" if kind == "gmlp" else "linear_tokens.weight"
    return w[f"{p}.{name}"].double().numpy()


def offsets(m: np.ndarray, gh: int, gw: int):
    s = gh * gw
    ty, tx = np.divmod(np.arange(s), gw)
    dy = ty[None, :] - ty[:, None] + gh - 1  # [t, s]: pos(s) - pos(t)
    dx = tx[None, :] - tx[:, None] + gw - 1
    idx = (dy * (2 * gw - 1) + dx).ravel()
    k = (2 * gh - 1) * (2 * gw - 1)
    total = np.bincount(idx, weights=m.ravel(), minlength=k)
    count = np.bincount(idx, minlength=k)
    return total, count


def figures(m: np.ndarray, gh: int, gw: int) -> dict:
    s = gh * gw
    ty, tx = np.divmod(np.arange(s), gw)
    d = np.hypot(ty[:, None] - ty[None, :], tx[:, None] - tx[None, :])
    a = np.abs(m)
    total, count = offsets(m, gh, gw)
    nz = count > 0
    projected = (total[nz] ** 2 / count[nz]).sum()
    p = np.abs(np.fft.fft2(m.reshape(s, gh, gw))) ** 2
    fy = np.fft.fftfreq(gh)[:, None]
    fx = np.fft.fftfreq(gw)[None, :]
    low = np.hypot(fy, fx) <= LOW + 1e-12
    return {
        "locality": float((a * d).sum() / a.sum()),
        "shiftInvariance": float(projected / (m ** 2).sum()),
        "lowFrequency": float(p[:, low].sum() / p.sum()),
    }


def units(fc1: np.ndarray, gh: int, gw: int) -> dict:
    rows = fc1.shape[0]
    out = []
    for u in range(rows):
        p = np.abs(np.fft.rfft2(fc1[u].reshape(gh, gw))) ** 2
        flat = p.ravel()
        j = int(np.flatnonzero(flat >= flat.max() * (1 - 1e-9))[0])
        ky, kx = divmod(j, p.shape[1])
        fy = (ky if 2 * ky <= gh else ky - gh) / gh  # the Nyquist row counts as positive
        full = np.abs(np.fft.fft2(fc1[u].reshape(gh, gw))) ** 2
        out.append({"ky": ky, "kx": kx, "radial": float(np.hypot(fy, kx / gw)), "angle": float(np.arctan2(fy, kx / gw)),
                    "dcShare": float(full[0, 0] / full.sum())})
    z = fc1 - fc1.mean(1, keepdims=True)
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    r = z @ z.T
    pairs = sorted((r[a, b], a, b) for a in range(rows) for b in range(a + 1, rows) if r[a, b] < -0.5)
    paired = [-1] * rows
    for _, a, b in pairs:
        if paired[a] < 0 and paired[b] < 0:
            paired[a], paired[b] = b, a
    for u in range(rows):
        out[u]["pairedWith"] = paired[u]

    def key(u):
        return (round(out[u]["radial"] * 1e6), round(out[u]["angle"] * 1e6), -out[u]["dcShare"], u)

    groups = []
    for u in range(rows):
        if paired[u] < 0:
            groups.append([u])
        elif u < paired[u]:
            groups.append(sorted([u, paired[u]], key=key))
    groups.sort(key=lambda g: key(g[0]))
    return {"units": [{"ky": o["ky"], "kx": o["kx"], "pairedWith": o["pairedWith"]} for o in out], "groups": groups}


def main() -> None:
    out = {"models": {}, "init": {}}
    for name, (path, kind, (gh, gw)) in MODELS.items():
        w = load_file(path)
        layers = []
        i = 0
        while any(k.startswith(f"blocks.{i}.") for k in w):
            m = token_map(w, kind, i)
            total, count = offsets(m, gh, gw)
            entry = {"figures": figures(m, gh, gw),
                     "offsetKernel": (total / np.maximum(count, 1)).tolist()}
            if kind == "mixer":
                entry.update(units(w[f"blocks.{i}.mlp_tokens.fc1.weight"].double().numpy(), gh, gw))
            layers.append(entry)
            i += 1
        out["models"][name] = {"file": str(path.relative_to(ROOT)), "kind": kind, "grid": [gh, gw], "layers": layers}
        print(name, kind, len(layers), "layers", layers[0]["figures"])
    for name, kwargs in INITS.items():
        kind = "gmlp" if kwargs.get("block_layer") is SpatialGatingBlock else "resmlp" if kwargs.get("block_layer") is ResBlock else "mixer"
        figs = []
        for seed in range(16):
            torch.manual_seed(seed)
            model = MlpMixer(**kwargs)
            gh, gw = model.stem.grid_size
            w = {k: v.detach() for k, v in model.state_dict().items()}
            figs.append(figures(token_map(w, kind, 0), gh, gw))
        keys = figs[0].keys()
        rows = model.blocks[0].mlp_tokens.fc1.out_features if kind == "mixer" else gh * gw
        out["init"][name] = {"kind": kind, "grid": [gh, gw], "rows": rows,
                             "mean": {k: float(np.mean([f[k] for f in figs])) for k in keys},
                             "std": {k: float(np.std([f[k] for f in figs])) for k in keys}, "seeds": len(figs)}
        print("init", name, out["init"][name]["mean"])
    (FIX / "insight.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
