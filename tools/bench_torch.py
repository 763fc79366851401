#!/usr/bin/env python3
"""PyTorch beside `tokenmix bench`, in the same run, on the same checkpoint.

Usage: python tools/bench_torch.py mixer_s16_224 W.safetensors [--batch 1,8] [--iters 5]
           [--device cpu|cuda] [--threads 2] [--precision f32|f16]
       python tools/bench_torch.py --gemm 4096x4096x4096 [--device cuda] [--precision f32|f16]
Default: PyTorch on the CPU with 2 threads (this project's dev machines). With --device cuda
PyTorch runs fp32 on the GPU (TF32 off, synchronised timing) while tokenmix runs on whatever
adapter wgpu picks (set WGPU_BACKEND=vulkan). With --precision f16, PyTorch runs under
torch.autocast(float16) and tokenmix with --precision f16. Prints one table: median latency of
each and the tokenmix / torch latency ratio. --gemm MxKxN times torch.matmul on [M,K]x[K,N]
beside `tokenmix bench --gemm` (every kernel, both layouts) and prints each as % of torch.
With --profile, tokenmix also times each step of one forward pass per batch size (`bench
--profile`: GPU timestamps on a GPU) and the table is followed by where its time went.
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
    ap.add_argument("model", nargs="?")
    ap.add_argument("weights", nargs="?")
    ap.add_argument("--gemm", help="MxKxN: a GEMM micro-benchmark instead of a model")
    ap.add_argument("--precision", default="f32", choices=["f32", "f16"])
    ap.add_argument("--tokenmix", default="target/release/tokenmix")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="print tokenmix's time per kind of step")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    autocast = torch.autocast(args.device, dtype=torch.float16, enabled=args.precision == "f16")
    if args.gemm:
        return gemm(args, sync, autocast)
    model = timm.create_model(args.model, pretrained=False).eval()
    model.load_state_dict(load_file(args.weights))
    model.to(args.device)
    c, h, w = model.pretrained_cfg["input_size"]
    torch_ms = {}
    with torch.inference_mode(), autocast:
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
    tm = tokenmix_json([args.tokenmix, "bench", "--weights", args.weights, "--batch", args.batch,
                        "--iters", str(args.iters), "--precision", args.precision, "--json"]
                       + (["--profile"] if args.profile else []))
    where = f"cuda ({torch.cuda.get_device_name()})" if args.device == "cuda" else f"cpu ({args.threads} threads)"
    mode = "autocast f16" if args.precision == "f16" else "fp32"
    stored = f"{tm['precision']} weights" + "".join(f" + {a} activations" for a in tm.get("f16_activations", []))
    print(f"{args.model}: torch {torch.__version__} {mode} on {where}; tokenmix {stored} on "
          f"{tm['adapter']} (gemm {tm['gemm']}); tokenmix time to first result {tm['first_result_ms']:.0f} ms")
    # PyTorch's input is already a device tensor; tokenmix's median uploads its input (and both
    # read nothing back but tokenmix's logits). On a GPU, tokenmix also times the pass with its
    # input left on the device ("on device"): that ratio compares like with like.
    device = all("device_ms" in run for run in tm["runs"])
    extra = f" {'on device ms':>13} {'ratio':>7}" if device else ""
    print(f"{'batch':>5} {'torch ms':>10} {'tokenmix ms':>12} {'ratio':>7}{extra} {'tokenmix GFLOP/s':>17}")
    for run in tm["runs"]:
        b = run["batch"]
        extra = f" {run['device_ms']:>13.1f} {run['device_ms'] / torch_ms[b]:>7.2f}" if device else ""
        print(f"{b:>5} {torch_ms[b]:>10.1f} {run['median_ms']:>12.1f} {run['median_ms'] / torch_ms[b]:>7.2f}{extra} "
              f"{run['gflops']:>17.1f}")
    for run in tm["runs"]:
        if "profile" in run:
            print_profile(run["profile"], run["median_ms"])


def tokenmix_json(cmd):
    """Runs tokenmix and parses its --json output; on failure exits with tokenmix's own error
    (stderr), which a bare CalledProcessError would swallow, so a GPU run's log says why."""
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stderr.strip()}")
    # TOKENMIX_TUNE_LOG=1 (gpu_session.sh): the autotuner's time per candidate and class.
    for line in out.stderr.splitlines():
        if line.startswith("tune: "):
            print(f"  {line}")
    return json.loads(out.stdout)


def print_profile(p, median_ms, top=8) -> None:
    """tokenmix's time per kind of step in one forward pass: the steps' sum beside the span
    (first start to last end) and the benchmark's median, whose difference is time between steps."""
    total = sum(r["ms"] for r in p["rows"])
    steps = sum(r["steps"] for r in p["rows"])
    print(f"  tokenmix profile, batch {p['batch']} ({p['clock']}): steps {total:.3f} ms ({steps} steps, "
          f"{p['untimed']} untimed), span {p['span_ms']:.3f} ms, median forward {median_ms:.3f} ms")
    for r in sorted(p["rows"], key=lambda r: -r["ms"])[:top]:
        kernel = f" [{r['kernel']}]" if r["kernel"] else ""
        print(f"    {r['ms']:>9.3f} ms {100 * r['ms'] / max(total, 1e-12):>5.1f} % {r['steps']:>4}x  {r['kind']}{kernel}")


def gemm(args, sync, autocast) -> None:
    m, k, n = (int(v) for v in args.gemm.split("x"))
    a = torch.randn(m, k, device=args.device)
    b = torch.randn(k, n, device=args.device)
    with torch.inference_mode(), autocast:
        for _ in range(3):
            torch.matmul(a, b)
        sync()
        times = []
        for _ in range(max(args.iters, 5)):
            t = time.perf_counter()
            torch.matmul(a, b)
            sync()
            times.append(time.perf_counter() - t)
    flops = 2.0 * m * n * k
    torch_gflops = flops / statistics.median(times) / 1e9
    tm = tokenmix_json([args.tokenmix, "bench", "--gemm", args.gemm, "--iters", str(max(args.iters, 5)),
                        "--precision", args.precision, "--json"])
    mode = "autocast f16" if args.precision == "f16" else "fp32"
    print(f"GEMM {args.gemm}: torch.matmul {mode} {torch_gflops:,.0f} GFLOP/s; tokenmix ({tm['precision']} weights, default kernel {tm['gemm']}) on {tm['adapter']}:")
    for run in tm["runs"]:
        err = f"  rel. error {run['rel_error']:.1e}" if "rel_error" in run else ""
        print(f"  {run['variant']:>9} {run['layout']:<20} {run['gflops']:>10,.0f} GFLOP/s  {100 * run['gflops'] / torch_gflops:>5.1f} % of torch{err}")


if __name__ == "__main__":
    main()
