#!/usr/bin/env python3
"""PyTorch beside `tokenmix bench`, in the same run, on the same checkpoint.

Usage: python tools/bench_torch.py mixer_s16_224 W.safetensors [--batch 1,8] [--iters 5]
           [--device cpu|cuda] [--threads 2]
Default: PyTorch on the CPU with 2 threads (this project's dev machines). With --device cuda
PyTorch runs fp32 on the GPU (TF32 off, synchronised timing) while tokenmix runs on whatever
adapter wgpu picks (set WGPU_BACKEND=vulkan). Prints one table: median latency of each and the
tokenmix / torch latency ratio.
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
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    model = timm.create_model(args.model, pretrained=False).eval()
    model.load_state_dict(load_file(args.weights))
    model.to(args.device)
    c, h, w = model.pretrained_cfg["input_size"]
    torch_ms = {}
    with torch.inference_mode():
        for b in batches:
            x = torch.randn(b, c, h, w, device=args.device)
            for _ in range(3):
                model(x)
            sync()
            times = []
            for _ in range(args.iters):
                t = time.perf_counter()
                model(x)
                sync()
                times.append(time.perf_counter() - t)
            torch_ms[b] = statistics.median(times) * 1e3
    out = subprocess.run([args.tokenmix, "bench", "--weights", args.weights, "--batch", args.batch,
                          "--iters", str(args.iters), "--json"], check=True, capture_output=True, text=True)
    tm = json.loads(out.stdout)
    where = f"cuda ({torch.cuda.get_device_name()})" if args.device == "cuda" else f"cpu ({args.threads} threads)"
    print(f"{args.model}: torch {torch.__version__} on {where}; tokenmix on {tm['adapter']} (gemm {tm['gemm']}); "
          f"tokenmix time to first result {tm['first_result_ms']:.0f} ms")
    print(f"{'batch':>5} {'torch ms':>10} {'tokenmix ms':>12} {'ratio':>7} {'tokenmix GFLOP/s':>17}")
    for run in tm["runs"]:
        b = run["batch"]
        print(f"{b:>5} {torch_ms[b]:>10.1f} {run['median_ms']:>12.1f} {run['median_ms'] / torch_ms[b]:>7.1f} {run['gflops']:>17.1f}")


if __name__ == "__main__":
    main()
