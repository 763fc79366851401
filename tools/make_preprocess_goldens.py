#!/usr/bin/env python3
"""Writes tests/fixtures/preprocess.json: timm's own eval transform (timm.data
transforms_imagenet_eval, torchvision on PIL), the independent reference for tokenmix's
preprocessing (src/preprocess.rs, the CPU executor's and preprocess.wgsl's), which
tests/preprocess.rs checks on every build.

geometry  for each (input size, crop_pct, image size): the size the resize step makes and the
          crop's top-left corner in it, read off timm's transforms themselves: the resize
          applied to a blank image of that size, then the centre crop applied to an image whose
          pixels are their own x (and y) coordinate.
inputs    for a few small (channels, size, crop_pct, mean, std, image size) cases: the model
          input timm makes (bicubic; a one-channel model gets PIL's "L" conversion first) from
          the deterministic test image `synthetic(w, h)` (the same formula as in
          tests/preprocess.rs), CHW, as a flat list.

Run: python tools/make_preprocess_goldens.py   (needs tools/requirements.txt; CI never runs it)
"""
import json
import pathlib

import numpy as np
import timm
import torch
import torchvision
from PIL import Image
from timm.data.transforms_factory import transforms_imagenet_eval

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "preprocess.json"


def synthetic(w, h):
    """tests/preprocess.rs's synthetic(w, h): a colour image with texture and edges."""
    img = np.zeros((h, w, 3), dtype=np.uint8)
    for y in range(h):
        for x in range(w):
            v = lambda a, b: (a * 37 + b * 11 + (a * b) % 53) % 256
            img[y, x] = (v(x, y), v(y + 7, x), 30 if (x // 5 + y // 3) % 2 == 0 else 220)
    return Image.fromarray(img, "RGB")


def transform(size, crop_pct, mean, std):
    return transforms_imagenet_eval(img_size=size if size[0] != size[1] else size[0], crop_pct=crop_pct,
                                    interpolation="bicubic", mean=mean, std=std)


def geometry(size, crop_pct, w, h):
    t = transform(size, crop_pct, [0.5], [0.5])
    resize, crop = t.transforms[0], t.transforms[1]
    assert "Resize" in type(resize).__name__ and type(crop).__name__ == "CenterCrop", t
    rw, rh = resize(Image.new("L", (w, h))).size
    xs = Image.fromarray(np.tile(np.arange(rw, dtype=np.int32), (rh, 1)), "I")
    ys = Image.fromarray(np.tile(np.arange(rh, dtype=np.int32)[:, None], (1, rw)), "I")
    left, top = crop(xs).getpixel((0, 0)), crop(ys).getpixel((0, 0))
    return {"size": size, "crop_pct": crop_pct, "image": [w, h], "resized": [rw, rh], "left": left, "top": top}


def main():
    cases = []
    # Photos' aspect ratios at timm's defaults: 640x480 etc. resize to 298/341 wide, crops at .5.
    for size, crop in [([224, 224], 0.875), ([224, 224], 0.9), ([224, 224], 0.95), ([224, 224], 1.0)]:
        for w, h in [(640, 480), (480, 640), (800, 600), (1024, 768), (1920, 1080), (500, 375), (333, 500),
                     (256, 256), (257, 256), (300, 1000), (1000, 300)]:
            cases.append(geometry(size, crop, w, h))
    # crop_pct whose f32 is above its decimal value: floor(size / crop) must be taken in f64.
    for size, crop in [([224, 224], 0.8), ([16, 16], 0.8), ([28, 28], 0.7)]:
        for w, h in [(500, 500), (43, 36), (640, 480)]:
            cases.append(geometry(size, crop, w, h))
    # Non-square inputs: timm keeps the aspect ratio (ResizeKeepRatio), it does not stretch.
    for size, crop in [([24, 40], 0.875), ([36, 52], 0.9), ([12, 20], 0.875), ([40, 24], 0.875)]:
        for w, h in [(100, 100), (57, 40), (640, 480), (480, 640), (43, 36), (61, 47), (200, 90)]:
            cases.append(geometry(size, crop, w, h))
    # Small ones whose centre crop lands on .5 (Python rounds half to even).
    for size, crop in [([16, 16], 0.875)]:
        for w, h in [(43, 36), (36, 43), (37, 36), (19, 18), (21, 18), (23, 18)]:
            cases.append(geometry(size, crop, w, h))

    inputs = []
    for channels, size, crop, mean, std, (w, h) in [
        (3, [16, 16], 0.875, [0.5] * 3, [0.5] * 3, (43, 36)),   # a .5 crop offset
        (3, [16, 16], 0.875, [0.5] * 3, [0.5] * 3, (61, 47)),
        (3, [16, 16], 0.8, [0.5] * 3, [0.5] * 3, (30, 30)),     # floor(16 / 0.8) = 20, not 19
        (1, [24, 40], 0.875, [0.5], [0.5], (57, 40)),           # non-square, keep ratio
        (1, [36, 52], 0.9, [0.449], [0.226], (100, 100)),
        (1, [12, 20], 0.875, [0.449], [0.226], (47, 61)),
        (3, [16, 16], 0.875, [0.5] * 3, [0.5] * 3, (70, 60)),   # downscaled 3.3x: the widened filter
        (3, [16, 16], 0.875, [0.5] * 3, [0.5] * 3, (9, 7)),     # upscaled 2.6x: PIL clips between passes
        (3, [16, 16], 0.875, [0.5] * 3, [0.5] * 3, (200, 150)), # 9.5x: PIL's filter 38 taps wide
        (3, [16, 16], 0.875, [0.5] * 3, [0.5] * 3, (1, 3000)),  # a strip: resized to 18x54000
        (1, [24, 40], 0.875, [0.5], [0.5], (300, 7)),           # a non-square strip, one channel
    ]:
        img = synthetic(w, h)
        if channels == 1:
            img = img.convert("L")
        x = transform(size, crop, mean, std)(img)
        assert list(x.shape) == [channels, *size], x.shape
        inputs.append({"channels": channels, "size": size, "crop_pct": crop, "mean": mean, "std": std, "image": [w, h],
                       "input": [round(float(v), 7) for v in x.flatten()]})

    OUT.write_text(json.dumps({
        "about": f"timm {timm.__version__} transforms_imagenet_eval (torchvision {torchvision.__version__}, "
                 f"torch {torch.__version__}, Pillow {Image.__version__}); tools/make_preprocess_goldens.py",
        "geometry": cases, "inputs": inputs}, separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(cases)} geometries, {len(inputs)} inputs")


if __name__ == "__main__":
    main()
