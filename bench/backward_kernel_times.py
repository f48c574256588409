#!/usr/bin/env python3
"""Where each backend's backward pass spends its time, kernel by kernel: flashjit's
fj_backward and SDPA's cuDNN backward on the same tensors, at the steady state.

    python3 bench/backward_kernel_times.py --lib .gpu/libflashjit.so \\
        --shapes bf16:128:512:1,bf16:128:4096:0 --json $OUT/times.json

Shapes are dtype:head_dim:N:causal with the peers benchmark's sizes (batch*N = 16384
tokens, heads*head_dim = 2048). For each backend: heat (--heat-s of its own calls, as
backward_peers_bench.py), the call's median time by CUDA events, then --calls calls
under torch.profiler (CUPTI), whose kernels and memsets are summed by name. What the
main kernel does not cover (prep, memsets, the dQ conversion) is what a call pays
whatever N is: the part the main kernel's speed cannot move. The call's time (events)
and the kernels' (profiled) come from two runs, at the clocks each ran at: their
difference is not a measure of gaps between the kernels.
"""
import argparse
import json
import math
import os
import statistics
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backward_peers_bench import Flashjit, training_set  # noqa: E402
from peers_bench import median_ms, parse_shape  # noqa: E402


def kernel_times(fn, calls):
    """{name: µs per call} of the device activity of `calls` calls of fn(i)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
    totals = defaultdict(float)
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = e.self_cuda_time_total
        if us > 0:
            totals[e.key] += us / calls
    return dict(totals)


def main_kernel(times):
    """The name of the longest activity: the backward's main kernel."""
    return max(times, key=times.get)


def short(name, width=60):
    return name if len(name) <= width else name[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".gpu/libflashjit.so")
    ap.add_argument("--shapes", default="bf16:128:512:0,bf16:128:512:1,bf16:128:1024:0,"
                    "bf16:128:1024:1,bf16:128:4096:0,bf16:64:512:0,bf16:64:1024:1")
    ap.add_argument("--calls", type=int, default=20, help="profiled calls per backend")
    ap.add_argument("--heat-s", type=float, default=0.5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    fj = Flashjit(a.lib, "heuristic", 30)
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"device {torch.cuda.get_device_name(0)}, flashjit {fj.lib.fj_version().decode()}, "
          f"torch {torch.__version__}; µs per backward call")
    rows = []
    for shape in a.shapes.split(","):
        dtype, d, n, causal, heads, batch = parse_shape(shape)
        dname = shape.split(":")[0]
        sets = max(1, math.ceil(2 * l2 / (8 * batch * n * heads * d * 2)))
        handle = fj.kernel(dtype, d, heads, causal, n, batch)
        data = [training_set(fj, handle, batch, n, heads, d, dtype) for _ in range(sets)]
        graphs = []
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for s in data:
                leaves = [s[t].transpose(1, 2).detach().requires_grad_() for t in "qkv"]
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                graphs.append((out, leaves, s["dout"].transpose(1, 2)))

        def fj_bwd(i):
            fj.backward(handle, data[i % sets]["args"])

        def cudnn_bwd(i):
            g = graphs[i % sets]
            torch.autograd.grad(g[0], g[1], g[2], retain_graph=True)

        row = dict(dtype=dname, d=d, N=n, B=batch, H=heads, causal=causal)
        print(f"\n{dname} d{d} N{n} B{batch} H{heads} {'causal' if causal else 'non-causal'}")
        for name, fn in (("flashjit", fj_bwd), ("cudnn", cudnn_bwd)):
            wall = 1000 * median_ms(fn, sets, heat_s=a.heat_s)
            times = kernel_times(fn, a.calls)
            main_name = main_kernel(times)
            busy = sum(times.values())
            row[name] = dict(wall_us=wall, busy_us=busy, main_us=times[main_name],
                             kernels=times)
            print(f"  {name:8} call {wall:8.1f}  kernels {busy:8.1f}  main {times[main_name]:8.1f}"
                  f"  other {busy - times[main_name]:6.1f} ({(busy - times[main_name]) / busy:5.1%})")
            for k, us in sorted(times.items(), key=lambda kv: -kv[1]):
                print(f"      {us:8.1f}  {short(k)}")
        rows.append(row)
        del graphs, data
    print("\nshape                      flashjit call / main / other    cudnn call / main / other"
          "    main ratio  call ratio")
    for r in rows:
        f, c = r["flashjit"], r["cudnn"]
        print(f"{r['dtype']} d{r['d']:<3} N{r['N']:<6} {'c ' if r['causal'] else 'nc'}"
              f"        {f['wall_us']:7.1f} / {f['main_us']:7.1f} / {f['busy_us'] - f['main_us']:5.1f}"
              f"   {c['wall_us']:7.1f} / {c['main_us']:7.1f} / {c['busy_us'] - c['main_us']:5.1f}"
              f"    {c['main_us'] / f['main_us']:6.3f}     {c['wall_us'] / f['wall_us']:6.3f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(dict(device=torch.cuda.get_device_name(0), heat_s=a.heat_s, rows=rows),
                      fh, indent=1)


if __name__ == "__main__":
    main()
