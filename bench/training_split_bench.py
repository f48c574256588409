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
from backward_peers_bench import Flashjit  # noqa: E402
from peers_bench import median_ms  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default=".gpu/libflashjit.so")
ap.add_argument("--shapes", default="bf16:64:2048:0,bf16:64:2048:1,bf16:128:2048:1,fp16:128:4096:0,bf16:128:8192:0,fp16:256:2048:0")
ap.add_argument("--rounds", type=int, default=3)
a = ap.parse_args()
fj = Flashjit(a.lib, "heuristic", 30)
l2 = torch.cuda.get_device_properties(0).L2_cache_size
print(f"{'shape':18} {'who':6} {'fwd':>8} {'bwd':>8} {'sum':>8} {'both':>8} {'both-sum':>8}  host_us(fwd,bwd)")
for sh in a.shapes.split(","):
    dn, d, N, causal = sh.split(":"); d, N, causal = int(d), int(N), bool(int(causal))
    dtype = torch.bfloat16 if dn == "bf16" else torch.float16
    H = 2048 // d; B = max(1, 16384 // N)
    h = fj.kernel(dtype, d, H, causal, N, B)
    sets = max(1, math.ceil(2 * l2 / (8 * B * N * H * d * 2)))
    data = []
    for _ in range(sets):
        q, k, v, dout = (torch.randn(B, N, H, d, device="cuda", dtype=dtype) for _ in range(4))
        o = torch.empty_like(q); lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
        dq, dk, dv = (torch.empty_like(q) for _ in range(3))
        fj.forward(h, q, k, v, o, lse)
        args, ws = fj.backward_args(h, q, k, v, o, lse, dout, dq, dk, dv)
        leaves = [t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        data.append(dict(q=q, k=k, v=v, o=o, lse=lse, args=args, ws=ws, leaves=leaves, out=out, dout=dout.transpose(1, 2)))
    def cd_fwd(i):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(*data[i]["leaves"], is_causal=causal)
    fns = {
        "fj": (lambda i: fj.forward(h, data[i]["q"], data[i]["k"], data[i]["v"], data[i]["o"], data[i]["lse"]),
               lambda i: fj.backward(h, data[i]["args"]),
               lambda i: (fj.forward(h, data[i]["q"], data[i]["k"], data[i]["v"], data[i]["o"], data[i]["lse"]), fj.backward(h, data[i]["args"]))),
        "cudnn": (cd_fwd,
                  lambda i: torch.autograd.grad(data[i]["out"], data[i]["leaves"], data[i]["dout"], retain_graph=True),
                  lambda i: torch.autograd.grad(cd_fwd(i), data[i]["leaves"], data[i]["dout"])),
    }
    r = {(w, p): [] for w in fns for p in range(3)}
    for _ in range(a.rounds):
        for w, trio in fns.items():
            for p, f in enumerate(trio):
                r[(w, p)].append(median_ms(f, sets) * 1e3)
    for w, trio in fns.items():
        host = []
        for f in trio[:2]:
            torch.cuda.synchronize(); t = time.perf_counter()
            for i in range(20): f(i % sets)
            host.append((time.perf_counter() - t) / 20 * 1e6); torch.cuda.synchronize()
        m = [statistics.median(r[(w, p)]) for p in range(3)]
        print(f"{sh:18} {w:6} {m[0]:8.1f} {m[1]:8.1f} {m[0]+m[1]:8.1f} {m[2]:8.1f} {m[2]-m[0]-m[1]:8.1f}  {host[0]:.0f},{host[1]:.0f}", flush=True)
    del data
