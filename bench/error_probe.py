#!/usr/bin/env python3
"""Where a forward's error comes from, on one shape: flashjit (one handle per family)
against SDPA's cuDNN and FlashAttention-2 backends, all against the same fp32 reference
on a whole head slab. Prints max/mean abs error, the worst element, its reference value
and the output dtype's ulp there, so that a close call of the 2x bar can be read as
rounding (error ~ 1/2 ulp of the value) or as an arithmetic problem.

    FLASHJIT_FAMILY=fwd_wgmma python3 bench/error_probe.py --d 256 --n 1024 --b 16 --dtype bf16
"""
import argparse
import ctypes as C
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lengths_bench import Lib  # noqa: E402


def ulp(x, dtype):
    mant = 7 if dtype == torch.bfloat16 else 10
    return 2.0 ** (math.floor(math.log2(max(abs(x), 1e-30))) - mant)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".gpu/libflashjit.so")
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--b", type=int, default=16)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rows", type=int, default=256)
    a = ap.parse_args()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    H, d, N, B = 2048 // a.d, a.d, a.n, a.b
    lib = Lib(a.lib)
    ctx = lib.context(os.path.join(tempfile.mkdtemp(), "probe.sqlite"), 5)
    handle, info, _ = lib.kernel(ctx, dtype, d, H, a.causal, n=N, batch=B)
    print(f"handle: {info.family.decode()} tile {info.block_m}x{info.block_n} w{info.warps} "
          f"s{info.stages}")
    for seed in map(int, a.seeds.split(",")):
        torch.manual_seed(seed)
        q, k, v = (torch.randn(B, N, H, d, device="cuda", dtype=dtype) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        lib.forward(handle, q, k, v, o)
        bh = [t.transpose(1, 2) for t in (q, k, v)]
        outs = {"flashjit": o}
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel(be):
                outs[name] = F.scaled_dot_product_attention(*bh, is_causal=a.causal).transpose(1, 2)
        # fp32 reference over batch 0, every head, the last `rows` queries.
        r = min(a.rows, N)
        qs, ks, vs = (t[0].float().transpose(0, 1) for t in (q, k, v))
        s = qs[:, -r:] @ ks.transpose(1, 2) / math.sqrt(d)
        if a.causal:
            i = torch.arange(N - r, N, device="cuda")[:, None]
            j = torch.arange(N, device="cuda")[None, :]
            s = s.masked_fill(j > i, float("-inf"))
        ref = (torch.softmax(s, -1) @ vs).transpose(0, 1)  # [r, H, d]
        # DESIGN.md's bar: 2x the textbook formula computed in the input dtype.
        qn, kn, vn = (t[0].transpose(0, 1) for t in (q, k, v))
        sn = (qn[:, -r:] @ kn.transpose(1, 2)) * (1.0 / math.sqrt(d))
        if a.causal:
            sn = sn.masked_fill(j > i, float("-inf"))
        outs["naive"] = (torch.softmax(sn, -1) @ vn).transpose(0, 1).unsqueeze(0).expand(
            1, r, H, d)
        line = [f"seed {seed}:"]
        for name, out in outs.items():
            diff = out[0, -r:].float() - ref  # (naive holds only the last r rows)
            err = diff.abs()
            idx = err.argmax().item()
            worst = ref.flatten()[idx].item()
            row, head, col = idx // (H * d), idx // d % H, idx % d
            # signed mean relative to |ref|: a rounding that is not to nearest shows as bias
            bias = (diff * ref.sign()).mean().item()
            line.append(f"{name:8} max {err.max().item():.2e} mean {err.mean().item():.2e} "
                        f"bias {bias:+.1e} | worst at row {N - r + row} head {head} col {col}: "
                        f"ref {worst:+.4f} got {out[0, -r:][row, head, col].item():+.4f} "
                        f"(ulp {ulp(worst, dtype):.1e})")
        print("\n   ".join(line), flush=True)


if __name__ == "__main__":
    main()
