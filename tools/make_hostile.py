#!/usr/bin/env python3
"""Writes tests/hostile/: hand-made broken and malicious model files, and manifest.json.

Every file is a small mutation of one valid tokenmix model (a tiny timm MLP-Mixer: 16x16 RGB,
patch 8, dim 8, one block, 10 classes, with metadata), so each exercises one check. The manifest
lists, per file, what is wrong and a fragment the error message must contain. tests/hostile.rs
loads each natively and tests/browser/e2e.mjs through the page's wasm `loadModel`: each must be
refused with that error — never a panic, a hang or an allocation the file does not justify — and
the model loaded before must still classify the same afterwards.

Needs numpy only (no torch; the torch.save stand-ins are a zip and a pickle of numpy arrays, as torch.save lays them out): the valid base is written here byte by byte, as safetensors lays
it out (8-byte little-endian header length, JSON header, tensor data). Run from anywhere:
  python3 tools/make_hostile.py
"""
import gzip
import io
import json
import pathlib
import pickle
import struct
import zipfile
import zlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "hostile"
DIM, TOKENS, TOK_H, CH_H, CLASSES, PATCH, CHANS = 8, 4, 4, 16, 10, 8, 3
LABELS = [f"class {i}" for i in range(CLASSES)]


def base_tensors() -> dict:
    """timm MlpMixer names and shapes for the tiny base model, seeded random values."""
    rng = np.random.default_rng(0)
    shapes = {
        "stem.proj.weight": (DIM, CHANS, PATCH, PATCH), "stem.proj.bias": (DIM,),
        "blocks.0.norm1.weight": (DIM,), "blocks.0.norm1.bias": (DIM,),
        "blocks.0.mlp_tokens.fc1.weight": (TOK_H, TOKENS), "blocks.0.mlp_tokens.fc1.bias": (TOK_H,),
        "blocks.0.mlp_tokens.fc2.weight": (TOKENS, TOK_H), "blocks.0.mlp_tokens.fc2.bias": (TOKENS,),
        "blocks.0.norm2.weight": (DIM,), "blocks.0.norm2.bias": (DIM,),
        "blocks.0.mlp_channels.fc1.weight": (CH_H, DIM), "blocks.0.mlp_channels.fc1.bias": (CH_H,),
        "blocks.0.mlp_channels.fc2.weight": (DIM, CH_H), "blocks.0.mlp_channels.fc2.bias": (DIM,),
        "norm.weight": (DIM,), "norm.bias": (DIM,),
        "head.weight": (CLASSES, DIM), "head.bias": (CLASSES,),
    }
    return {k: (0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}


def png_image(w: int, h: int) -> bytes:
    """A grey w x h PNG, chunk by chunk."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\x80" * w for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def base_metadata() -> dict:
    return {"config": json.dumps({"img_size": [16, 16]}), "labels": json.dumps(LABELS)}


def header_of(tensors: dict, dtypes: dict | None = None):
    """(header dict, data bytes) for tensors laid out one after another in name order."""
    header, data, at = {}, b"", 0
    for name, arr in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": (dtypes or {}).get(name, "F32"), "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        data += raw
        at += len(raw)
    return header, data


def pack(header, data: bytes, header_len: int | None = None) -> bytes:
    """A safetensors file: the JSON header (a dict, or a ready string) padded to 8 bytes."""
    text = header if isinstance(header, (str, bytes)) else json.dumps(header)
    raw = text.encode() if isinstance(text, str) else text
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) if header_len is None else header_len) + raw + data


def build(tensors=None, metadata=None, dtypes=None, edit=None) -> bytes:
    tensors = base_tensors() if tensors is None else tensors
    header, data = header_of(tensors, dtypes)
    header["__metadata__"] = base_metadata() if metadata is None else metadata
    if edit:
        edit(header)
    return pack(header, data)


def with_value(name, index, value):
    t = base_tensors()
    t[name].flat[index] = value
    return t


def without(name):
    t = base_tensors()
    del t[name]
    return t


def main() -> None:
    good = build()
    hdr_len = struct.unpack("<Q", good[:8])[0]
    cases = []

    def add(name, why, expect, content, stage="inspect"):
        """`stage`: where the refusal happens — "inspect" (the CPU-only check of header, metadata
        and config) or "load" (needs the architecture's tensor list: names, shapes, values)."""
        cases.append((name, why, expect, content, stage))

    def set_field(name, key, value):
        def edit(h):
            h[name][key] = value
        return edit

    # Truncations and framing.
    add("empty", "a 0-byte file", "malformed", b"")
    add("four_bytes", "4 bytes: not even the header length", "malformed", good[:4])
    add("header_len_2_63", "header length 2^63", "malformed", struct.pack("<Q", 1 << 63) + good[8:])
    add("header_len_past_end", "header length one past the end of the file", "malformed", struct.pack("<Q", len(good)) + good[8:])
    add("header_len_zero", "header length 0", "malformed", struct.pack("<Q", 0) + good[8:])
    add("cut_in_header", "truncated inside the JSON header", "malformed", good[: 8 + hdr_len // 2])
    add("cut_after_header", "truncated right after the header (no tensor data)", "malformed", good[: 8 + hdr_len])
    add("cut_half_data", "truncated halfway through the tensor data", "malformed", good[: 8 + hdr_len + (len(good) - 8 - hdr_len) // 2])
    add("cut_last_byte", "the last byte missing", "malformed", good[:-1])
    add("trailing_bytes", "64 bytes of junk after the last tensor", "malformed", good + b"\0" * 64)
    # Header JSON.
    add("header_not_json", "the header is not JSON", "malformed", pack(b"\xff\xfe not json {{{", b""))
    add("header_array", "the header is a JSON array", "malformed", pack("[1, 2, 3]", b""))
    add("header_nested_deep", "metadata nested 10000 levels deep", "malformed", pack('{"__metadata__": ' + "[" * 10000 + "]" * 10000 + "}", b""))
    add("metadata_not_strings", "__metadata__ values are not strings", "malformed", build(metadata={"config": {"img_size": [16, 16]}}))
    # Tensor table.
    add("offsets_past_end", "a tensor's data ends past the end of the file", "malformed",
        build(edit=lambda h: h["head.bias"].update(data_offsets=[h["head.bias"]["data_offsets"][0], h["head.bias"]["data_offsets"][1] + 4096])))
    add("offsets_reversed", "a tensor's data_offsets run backwards", "malformed",
        build(edit=lambda h: h["head.bias"].update(data_offsets=h["head.bias"]["data_offsets"][::-1])))
    add("overlapping", "two tensors share the same bytes", "malformed",
        build(edit=lambda h: h["norm.bias"].update(data_offsets=h["norm.weight"]["data_offsets"])))
    add("negative_shape", "a shape with -1", "malformed", build(edit=set_field("head.bias", "shape", [-1])))
    add("overflowing_shape", "a shape whose product overflows 64 bits", "malformed",
        build(edit=set_field("head.bias", "shape", [1 << 40, 1 << 40])))
    add("shape_exceeds_bytes", "a shape larger than its bytes", "malformed", build(edit=set_field("head.bias", "shape", [CLASSES * 2])))
    add("zero_dim", "a tensor with a 0 dimension (and no bytes)", "malformed", build(edit=set_field("head.bias", "shape", [0])))
    add("unknown_dtype", "a dtype safetensors does not know", "malformed", build(edit=set_field("head.bias", "dtype", "F7")))
    t = base_tensors()
    t["head.weight"] = t["head.weight"].astype(np.int32)
    add("int_dtype", "head.weight stored as I32", "dtype I32", build(tensors=t, dtypes={"head.weight": "I32"}))
    t = base_tensors()
    t["stem.proj.bias"] = t["stem.proj.bias"].astype(np.float64)
    add("f64_dtype", "stem.proj.bias stored as F64", "dtype F64", build(tensors=t, dtypes={"stem.proj.bias": "F64"}))
    # Values.
    add("nan_weight", "a NaN in a weight", "non-finite", build(tensors=with_value("blocks.0.mlp_channels.fc1.weight", 5, np.nan)), stage="load")
    add("inf_weight", "+Inf in a weight", "non-finite", build(tensors=with_value("head.weight", 0, np.inf)), stage="load")
    add("neg_inf_bias", "-Inf in a bias", "non-finite", build(tensors=with_value("stem.proj.bias", 3, -np.inf)), stage="load")
    # Names and shapes against the architecture.
    add("missing_tensor", "head.bias missing", "head.bias", build(tensors=without("head.bias")), stage="load")
    add("missing_block_tensor", "a block's token-MLP fc2 weight missing", "mlp_tokens.fc2.weight", build(tensors=without("blocks.0.mlp_tokens.fc2.weight")), stage="load")
    dup = build()
    dup_hdr_len = struct.unpack("<Q", dup[:8])[0]
    text = dup[8: 8 + dup_hdr_len].decode().rstrip()
    entry = '"norm.bias": ' + json.dumps(json.loads(text)["norm.bias"])
    dup_text = text.replace(entry, entry + ", " + entry, 1)
    assert dup_text != text
    add("duplicate_tensor", "norm.bias listed twice in the header", "more than once", pack(dup_text, dup[8 + dup_hdr_len:]))
    t = base_tensors()
    t["blocks.0.extra.weight"] = np.zeros((2, 2), np.float32)
    add("unexpected_tensor", "a tensor the architecture does not use", "blocks.0.extra.weight", build(tensors=t), stage="load")
    t = base_tensors()
    t["stem.proj.bias"] = np.zeros(DIM + 1, np.float32)
    add("wrong_shape", "stem.proj.bias one longer than dim", "stem.proj.bias", build(tensors=t), stage="load")
    t = base_tensors()
    t["head.bias"] = np.zeros(CLASSES + 1, np.float32)
    add("head_bias_mismatch", "head.bias has 11 entries for 10 classes", "head.bias", build(tensors=t), stage="load")
    add("not_timm", "tensor names of no supported architecture", "not a recognised timm checkpoint",
        build(tensors={"conv1.weight": np.zeros((4, 3, 3, 3), np.float32), "fc.weight": np.zeros((10, 4), np.float32)}, metadata={}))
    # Metadata.
    add("labels_mismatch", "3 labels for 10 classes", "labels", build(metadata={**base_metadata(), "labels": json.dumps(LABELS[:3])}))
    add("labels_not_json", "labels metadata is not JSON", "labels", build(metadata={**base_metadata(), "labels": "class 0, class 1"}))
    add("config_not_json", "config metadata is not JSON", "config", build(metadata={**base_metadata(), "config": "{img_size: 16"}))
    add("metadata_2mib", "a 2 MiB metadata entry", "limit", build(metadata={**base_metadata(), "labels": json.dumps(["x" * (2 << 20)])}))
    add("preprocess_bad_std", "preprocess std of 0", "std", build(metadata={**base_metadata(), "preprocess": json.dumps(
        {"size": [16, 16], "crop_pct": 1.0, "mean": [0.5] * 3, "std": [0.0] * 3, "channels": 3})}))
    add("wrong_img_size", "an image size that does not give the 4 tokens the weights hold", "tokens",
        build(metadata={**base_metadata(), "config": json.dumps({"img_size": [160, 160]})}))
    # A PoolFormer whose metadata asks for a 60000x60000 input: 15000x15000 tokens per stage-1
    # activation, hundreds of GB at batch 1. Refused from the config, before any allocation.
    rng = np.random.default_rng(1)
    pf = {"stem.conv.weight": (8, 3, 7, 7), "stem.conv.bias": (8,),
          "stages.0.blocks.0.norm1.weight": (8,), "stages.0.blocks.0.norm1.bias": (8,),
          "stages.0.blocks.0.layer_scale1.scale": (8,), "stages.0.blocks.0.norm2.weight": (8,),
          "stages.0.blocks.0.norm2.bias": (8,), "stages.0.blocks.0.mlp.fc1.weight": (32, 8, 1, 1),
          "stages.0.blocks.0.mlp.fc1.bias": (32,), "stages.0.blocks.0.mlp.fc2.weight": (8, 32, 1, 1),
          "stages.0.blocks.0.mlp.fc2.bias": (8,), "stages.0.blocks.0.layer_scale2.scale": (8,),
          "head.norm.weight": (8,), "head.norm.bias": (8,), "head.fc.weight": (10, 8), "head.fc.bias": (10,)}
    pf = {k: (0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in pf.items()}
    add("needs_100_gb", "PoolFormer with metadata img_size 60000x60000 (hundreds of GB of activations)", "image size",
        build(tensors=pf, metadata={"config": json.dumps({"img_size": [60000, 60000]})}))

    # Files of other formats given in place of a model: each is named for what it is (its first
    # eight bytes, read as a safetensors header length, used to give only "header too large").
    state = base_tensors()
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:  # torch.save's layout: a zip holding data.pkl
        # Entries dated 1980-01-01 (zip's epoch), not now: the file is the same at every run.
        z.writestr(zipfile.ZipInfo("archive/data.pkl"), pickle.dumps(state, protocol=2))
        z.writestr(zipfile.ZipInfo("archive/version"), "3\n")
    add("torch_zip", "a torch.save zip archive (pytorch_model.bin, .pth)", "zip archive, PyTorch's torch.save format", zipped.getvalue())
    add("torch_pickle", "PyTorch's legacy torch.save pickle", "Python pickle", pickle.dumps(state, protocol=2))
    add("html_page", "the web page a hub /blob/ link gives", "web page (HTML)",
        b"<!DOCTYPE html>\n<html class=\"\">\n<head><title>model.safetensors</title></head><body>" + b"x" * 600 + b"</body></html>\n")
    add("png_image", "a PNG image", "PNG image", png_image(4, 3))
    npy = io.BytesIO()
    np.save(npy, np.zeros((1, 3, 16, 16), np.float32))
    add("npy_array", "a NumPy .npy array", "NumPy .npy array", npy.getvalue())
    add("gzipped", "the base model gzip-compressed", "gzip-compressed", gzip.compress(good, mtime=0))

    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.safetensors"):
        old.unlink()
    (OUT / "base.safetensors").write_bytes(good)
    manifest = []
    for i, (name, why, expect, content, stage) in enumerate(cases):
        fname = f"{i:02d}_{name}.safetensors"
        (OUT / fname).write_bytes(content)
        manifest.append({"file": fname, "why": why, "expect": expect, "stage": stage})
    (OUT / "manifest.json").write_text(json.dumps({"base": "base.safetensors", "cases": manifest}, indent=1) + "\n")
    print(f"{len(cases)} hostile files and base.safetensors in {OUT} ({sum(len(c[3]) for c in cases)} bytes)")


if __name__ == "__main__":
    main()
