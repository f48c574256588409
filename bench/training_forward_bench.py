#!/usr/bin/env python3
"""The training forward alone: flashjit's fj_forward writing the LSE on a backward handle,
the same handle without the LSE, and a forward-only handle, against cuDNN's forward with
grad (it saves its softmax stats) and under no_grad; interleaved rounds on the same
tensors, TFLOP/s medians, and the geometric means of the three ratios.

    python3 bench/training_forward_bench.py --lib .gpu/libflashjit.so --dtype bf16

Shapes as bench/peers_bench.py (batch*N = 16384 tokens, heads*head_dim = 2048);
heuristic mode, as bench/backward_peers_bench.py.
"""
import argparse
import ctypes as C
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backward_peers_bench import AttentionDescV2, Flashjit, KernelInfoV2, VariantInfo  # noqa: E402
from peers_bench import median_ms  # noqa: E402


class NoTensor:
    """Stands for an absent tensor: Flashjit.forward passes its data_ptr, 0."""

    def data_ptr(self):
        return 0


def handle_for(fj, dtype, d, heads, causal, n, batch, backward):
    desc = AttentionDescV2(struct_size=C.sizeof(AttentionDescV2),
                           dtype=2 if dtype == torch.bfloat16 else 1, head_dim=d, head_dim_v=d,
                           causal=int(causal), num_heads_q=heads, num_heads_kv=heads,
                           seqlen_q_hint=n, seqlen_k_hint=n, batch_hint=batch,
                           backward=int(backward))
    handle = C.c_void_p()
    fj.check(fj.lib.fj_kernel_get(fj.ctx, C.byref(desc), C.byref(handle)), "fj_kernel_get")
    return handle


def forward_tile(fj, handle):
    """The tile of the handle's first (primary) forward variant."""
    info = KernelInfoV2(struct_size=C.sizeof(KernelInfoV2))
    fj.check(fj.lib.fj_kernel_info(handle, C.byref(info)), "fj_kernel_info")
    variant = VariantInfo(struct_size=C.sizeof(VariantInfo))
    fj.check(fj.lib.fj_kernel_variant_info(handle, 0, C.byref(variant)), "fj_kernel_variant_info")
    return variant.tile.decode()


def cudnn_forward(q, k, v, causal, train):
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        if train:
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            return F.scaled_dot_product_attention(*leaves, is_causal=causal)
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".gpu/libflashjit.so")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--ns", default="1024,2048,4096,8192")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    fj = Flashjit(a.lib, "heuristic", 30)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    none = NoTensor()
    print(f"{'d':>4} {'N':>6} {'c':1} {'fj_lse':>7} {'fj_nolse':>8} {'fj_fwdonly':>10} "
          f"{'cd_train':>8} {'cd_infer':>8} {'lse/cdT':>7} {'only/cdI':>8}  tile")
    logs = {k: [] for k in ("lse_cdT", "only_cdI", "lse_only")}
    for d in map(int, a.dims.split(",")):
        heads = 2048 // d
        for n in map(int, a.ns.split(",")):
            batch = max(1, 16384 // n)
            for causal in (False, True):
                flops = 4 * batch * heads * n * n * d / (2 if causal else 1)
                sets = max(1, math.ceil(2 * l2 / (4 * batch * n * heads * d * 2)))
                with_bwd = handle_for(fj, dtype, d, heads, causal, n, batch, True)
                fwd_only = handle_for(fj, dtype, d, heads, causal, n, batch, False)
                data = []
                for _ in range(sets):
                    q, k, v = (torch.randn(batch, n, heads, d, device="cuda", dtype=dtype)
                               for _ in range(3))
                    lse = torch.empty(batch, heads, n, device="cuda", dtype=torch.float32)
                    data.append((q, k, v, torch.empty_like(q), lse))
                calls = {
                    "fj_lse": lambda i: fj.forward(with_bwd, *data[i]),
                    "fj_nolse": lambda i: fj.forward(with_bwd, *data[i][:4], none),
                    "fj_fwdonly": lambda i: fj.forward(fwd_only, *data[i][:4], none),
                    "cd_train": lambda i: cudnn_forward(*data[i][:3], causal, train=True),
                    "cd_infer": lambda i: cudnn_forward(*data[i][:3], causal, train=False),
                }
                readings = {name: [] for name in calls}
                for _ in range(a.rounds):
                    for name, call in calls.items():
                        readings[name].append(flops / median_ms(call, sets) / 1e9)
                m = {name: statistics.median(r) for name, r in readings.items()}
                logs["lse_cdT"].append(math.log(m["fj_lse"] / m["cd_train"]))
                logs["only_cdI"].append(math.log(m["fj_fwdonly"] / m["cd_infer"]))
                logs["lse_only"].append(math.log(m["fj_lse"] / m["fj_fwdonly"]))
                print(f"{d:>4} {n:>6} {int(causal)} {m['fj_lse']:7.1f} {m['fj_nolse']:8.1f} "
                      f"{m['fj_fwdonly']:10.1f} {m['cd_train']:8.1f} {m['cd_infer']:8.1f} "
                      f"{m['fj_lse'] / m['cd_train']:7.3f} {m['fj_fwdonly'] / m['cd_infer']:8.3f}  "
                      f"{forward_tile(fj, with_bwd)}/{forward_tile(fj, fwd_only)}", flush=True)
                for handle in (with_bwd, fwd_only):
                    fj.check(fj.lib.fj_kernel_release(handle), "fj_kernel_release")
                del data
    for name, values in logs.items():
        print(name, "geomean", round(math.exp(sum(values) / len(values)), 4))


if __name__ == "__main__":
    main()
