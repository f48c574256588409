#!/usr/bin/env python3
"""The backward pass at head_dim != head_dim_v (docs/PERF.md bw15): flashjit's handle
through the Python operator against PyTorch SDPA's cuDNN backend (FlashAttention-2's
does not take unequal head dims), in one process, on the same shapes.

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 bench/backward_dv_bench.py
    FLASHJIT_BACKWARD_FAMILY=bwd_mma FLASHJIT_LIBRARY=... python3 bench/backward_dv_bench.py --no-peer

bf16, batch*N = 16384 tokens, 16 heads, heuristic tiles. A system's backward time is
the median of torch.autograd.grad of its output against a random dO (a forward and a
backward) minus the median of its forward alone (peers_bench.median_ms: CUDA events, 30
samples after 5 warm-up calls). FLOPs 2 B H N^2 (3 d + 2 dv): S, dP, dV, dK and dQ, halved when causal.
The family flashjit runs is $FLASHJIT_BACKWARD_FAMILY's (read once per process), else
the library's choice (bwd_wgmma on sm_90a for head dims from 32). PERF bw15's numbers
were taken with this script's two halves as separate scripts, run in one device call.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashjit  # noqa: E402
from peers_bench import median_ms  # noqa: E402


def backward_ms(forward, inputs, dout):
    """The backward's time: a forward and backward, less the forward alone (medians of 30
    event-timed calls after 5 warm-up ones)."""
    step = median_ms(lambda _: torch.autograd.grad(forward(), inputs, dout), 1, iters=30, warm=5)
    return step - median_ms(lambda _: forward(), 1, iters=30, warm=5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="192/128,128/64,64/128", help="head_dim/head_dim_v list")
    ap.add_argument("--seqlens", default="2048,8192")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--no-peer", action="store_true", help="flashjit alone (no cuDNN)")
    a = ap.parse_args()
    flashjit.configure(tune_mode="heuristic", cache_path="")
    family = os.environ.get("FLASHJIT_BACKWARD_FAMILY", "auto")
    print(f"{torch.cuda.get_device_name(0)}; flashjit backward family: {family}")
    print("   d   dv      N causal  flashjit TF/s    cuDNN TF/s   flashjit/cuDNN")
    ratios = []
    for pair in a.pairs.split(","):
        d, dv = map(int, pair.split("/"))
        for n in map(int, a.seqlens.split(",")):
            for causal in (False, True):
                batch, heads = max(1, 16384 // n), a.heads
                flops = 2.0 * batch * heads * n * n * (3 * d + 2 * dv) * (0.5 if causal else 1.0)

                def tensor(width, grad=True):
                    return torch.randn(batch, n, heads, width, device="cuda",
                                       dtype=torch.bfloat16, requires_grad=grad)
                # flashjit takes (batch, seq, heads, dim); SDPA (batch, heads, seq, dim).
                q, k, v, dout = tensor(d), tensor(d), tensor(dv), tensor(dv, grad=False)
                ours = flops / backward_ms(
                    lambda: flashjit.attention(q, k, v, causal=causal), (q, k, v), dout) / 1e9
                peer = float("nan")
                if not a.no_peer:
                    qt, kt, vt = (t.detach().transpose(1, 2).contiguous().requires_grad_()
                                  for t in (q, k, v))
                    dt = dout.transpose(1, 2).contiguous()
                    try:
                        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                            peer = flops / backward_ms(
                                lambda: F.scaled_dot_product_attention(qt, kt, vt,
                                                                       is_causal=causal),
                                (qt, kt, vt), dt) / 1e9
                    except RuntimeError as e:  # the backend refuses the shape
                        print(f"  cuDNN refused d {d} / dv {dv}: {str(e).splitlines()[0][:100]}")
                ratio = ours / peer if peer == peer else float("nan")
                if ratio == ratio:
                    ratios.append(ratio)
                print(f"{d:4d} {dv:4d} {n:6d} {str(causal):6s} {ours:14.1f} {peer:13.1f} "
                      f"{ratio:16.3f}", flush=True)
    if ratios:
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"flashjit / cuDNN: geometric mean {mean:.3f} over {len(ratios)} shapes")


if __name__ == "__main__":
    main()
