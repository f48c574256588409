#!/usr/bin/env python3
"""One launch each of flashjit (through its C API) and SDPA's flash (FlashAttention-2) and
cuDNN backends, on the same inputs, inside a profiler range, so that Nsight Compute sees
exactly those kernels and nothing of the tuning or warm-up around them:

    ncu --profile-from-start off --clock-control none --section SpeedOfLight ... \\
        python3 bench/profile_peers.py --lib .gpu/libflashjit.so --shapes bf16:128:8192:0

Shapes are dtype:head_dim:N:causal, with the peers benchmark's sizes (batch*N = 16384
tokens, heads*head_dim = 2048). $FLASHJIT_FAMILY picks flashjit's kernel family.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_bench import Flashjit, parse_shape  # noqa: E402  (Flashjit: flashjit.h's ctypes mirror)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".gpu/libflashjit.so")
    ap.add_argument("--shapes", default="bf16:128:8192:0", help="dtype:d:N:causal,...")
    ap.add_argument("--tune-budget", type=float, default=5)
    ap.add_argument("--peers", default="fa2,cudnn")
    a = ap.parse_args()
    fj = Flashjit(a.lib, "default", a.tune_budget)
    backends = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    peers = {name: backends[name] for name in a.peers.split(",") if name}
    torch.manual_seed(0)
    cases = []
    for shape in a.shapes.split(","):
        dtype, d, n, causal, heads, batch = parse_shape(shape)
        q, k, v = (torch.randn(batch, n, heads, d, device="cuda", dtype=dtype) for _ in range(3))
        o = torch.empty_like(q)
        handle, info = fj.kernel(dtype, d, heads, causal, n, batch)  # tunes, outside the range
        bhsd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
        cases.append((shape, handle, info, (q, k, v, o), bhsd, causal))
        print(f"{shape}: flashjit {info.family.decode()} bm{info.block_m}.bn{info.block_n}."
              f"w{info.warps}.s{info.stages}, {info.registers} registers", flush=True)

    def run_all():
        for _, handle, _, (q, k, v, o), bhsd, causal in cases:
            fj.forward(handle, q, k, v, o)
            for backend in peers.values():
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(*bhsd, is_causal=causal)

    for _ in range(3):  # warm-up: every kernel loaded and every peer's plan built
        run_all()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run_all()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("profiled, in order per shape: flashjit, " + ", ".join(peers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
