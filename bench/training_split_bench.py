#!/usr/bin/env python3
"""Where a training step's time goes: flashjit's forward (with the LSE), backward, and the
two back to back, against cuDNN's (SDPA with grad; its backward through autograd), in
interleaved rounds on the same tensors (medians, microseconds), plus each call's host
time. "both - sum" near 0 says the two passes do not slow each other down, so a forward
+ backward ratio follows from the two passes' own.

    python3 bench/training_split_bench.py --lib .gpu/libflashjit.so \
        --shapes bf16:64:2048:0,fp16:128:4096:0     # dtype:head_dim:N:causal

Shapes as bench/peers_bench.py (batch*N = 16384 tokens, heads*head_dim = 2048);
heuristic mode, as bench/backward_peers_bench.py.
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backward_peers_bench import Flashjit, training_set  # noqa: E402
from peers_bench import median_ms  # noqa: E402


def host_us(call, sets, calls=20):
    """Host time of one call, microseconds: the launches alone, the GPU left to catch up."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(calls):
        call(i % sets)
    spent = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return spent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".gpu/libflashjit.so")
    ap.add_argument("--shapes", default="bf16:64:2048:0,bf16:64:2048:1,bf16:128:2048:1,"
                                        "fp16:128:4096:0,bf16:128:8192:0,fp16:256:2048:0")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    fj = Flashjit(a.lib, "heuristic", 30)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{'shape':18} {'who':6} {'fwd':>8} {'bwd':>8} {'sum':>8} {'both':>8} {'both-sum':>8}"
          f"  host_us(fwd,bwd)")
    for shape in a.shapes.split(","):
        dname, d, n, causal = shape.split(":")
        d, n, causal = int(d), int(n), bool(int(causal))
        dtype = torch.bfloat16 if dname == "bf16" else torch.float16
        heads, batch = 2048 // d, max(1, 16384 // n)
        handle = fj.kernel(dtype, d, heads, causal, n, batch)
        sets = max(1, math.ceil(2 * l2 / (8 * batch * n * heads * d * 2)))
        data = []
        for _ in range(sets):
            s = training_set(fj, handle, batch, n, heads, d, dtype)
            s["leaves"] = [s[t].transpose(1, 2).detach().requires_grad_() for t in "qkv"]
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                s["out"] = F.scaled_dot_product_attention(*s["leaves"], is_causal=causal)
            s["dout_bhsd"] = s["dout"].transpose(1, 2)
            data.append(s)

        def fj_fwd(i):
            s = data[i]
            fj.forward(handle, s["q"], s["k"], s["v"], s["o"], s["lse"])

        def fj_bwd(i):
            fj.backward(handle, data[i]["args"])

        def fj_both(i):
            fj_fwd(i)
            fj_bwd(i)

        def cudnn_fwd(i):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(*data[i]["leaves"], is_causal=causal)

        def cudnn_bwd(i):
            torch.autograd.grad(data[i]["out"], data[i]["leaves"], data[i]["dout_bhsd"],
                                retain_graph=True)

        def cudnn_both(i):
            torch.autograd.grad(cudnn_fwd(i), data[i]["leaves"], data[i]["dout_bhsd"])

        passes = {"fj": (fj_fwd, fj_bwd, fj_both), "cudnn": (cudnn_fwd, cudnn_bwd, cudnn_both)}
        readings = {(who, p): [] for who in passes for p in range(3)}
        for _ in range(a.rounds):
            for who, calls in passes.items():
                for p, call in enumerate(calls):
                    readings[(who, p)].append(median_ms(call, sets) * 1e3)
        for who, calls in passes.items():
            fwd, bwd, both = (statistics.median(readings[(who, p)]) for p in range(3))
            print(f"{shape:18} {who:6} {fwd:8.1f} {bwd:8.1f} {fwd + bwd:8.1f} {both:8.1f} "
                  f"{both - fwd - bwd:8.1f}  {host_us(calls[0], sets):.0f},"
                  f"{host_us(calls[1], sets):.0f}", flush=True)
        fj.check(fj.lib.fj_kernel_release(handle), "fj_kernel_release")
        del data


if __name__ == "__main__":
    main()
