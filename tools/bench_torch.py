#!/usr/bin/env python3
"""PyTorch CPU (2 threads) beside `tokenmix bench`, in the same run, on the same checkpoint.

Usage: python tools/bench_torch.py mixer_s16_224 W.safetensors [--batch 1,8] [--iters 5]
Prints one table: median latency of each, and tokenmix / torch latency ratio.
"""
import argparse
import json
import statistics
import subprocess
import time

import timm
import torch
from safetensors.torch import load_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("weights")
    ap.add_argument("--tokenmix", default="target/release/tokenmix")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    torch.set_num_threads(2)
    model = timm.create_model(args.model, pretrained=False).eval()
    model.load_state_dict(load_file(args.weights))
    c, h, w = model.pretrained_cfg["input_size"]
    torch_ms = {}
    with torch.inference_mode():
        for b in batches:
            x = torch.randn(b, c, h, w)
            model(x)
            times = []
            for _ in range(args.iters):
                t = time.perf_counter()
                model(x)
                times.append(time.perf_counter() - t)
            torch_ms[b] = statistics.median(times) * 1e3
    out = subprocess.run([args.tokenmix, "bench", "--weights", args.weights, "--batch", args.batch,
                          "--iters", str(args.iters), "--json"], check=True, capture_output=True, text=True)
    tm = json.loads(out.stdout)
    print(f"{args.model} on {tm['adapter']} (gemm {tm['gemm']}); tokenmix time to first result {tm['first_result_ms']:.0f} ms")
    print(f"{'batch':>5} {'torch ms':>10} {'tokenmix ms':>12} {'ratio':>7} {'tokenmix GFLOP/s':>17}")
    for run in tm["runs"]:
        b = run["batch"]
        print(f"{b:>5} {torch_ms[b]:>10.1f} {run['median_ms']:>12.1f} {run['median_ms'] / torch_ms[b]:>7.1f} {run['gflops']:>17.1f}")


if __name__ == "__main__":
    main()
