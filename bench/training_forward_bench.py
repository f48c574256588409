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

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default=".gpu/libflashjit.so")
ap.add_argument("--dtype", default="bf16")
ap.add_argument("--dims", default="64,128,256"); ap.add_argument("--ns", default="1024,2048,4096,8192")
ap.add_argument("--rounds", type=int, default=3)
a = ap.parse_args()
fj = Flashjit(a.lib, "heuristic", 30)
dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float16
l2 = torch.cuda.get_device_properties(0).L2_cache_size
def handle_for(d, H, causal, N, B, bwd):
    desc = AttentionDescV2(struct_size=C.sizeof(AttentionDescV2), dtype=2 if dtype == torch.bfloat16 else 1,
        head_dim=d, head_dim_v=d, causal=int(causal), num_heads_q=H, num_heads_kv=H,
        seqlen_q_hint=N, seqlen_k_hint=N, batch_hint=B, backward=bwd)
    h = C.c_void_p(); fj.check(fj.lib.fj_kernel_get(fj.ctx, C.byref(desc), C.byref(h)), "get"); return h
def fwd_tile(h):
    info = KernelInfoV2(struct_size=C.sizeof(KernelInfoV2)); fj.check(fj.lib.fj_kernel_info(h, C.byref(info)), "info")
    vi = VariantInfo(struct_size=C.sizeof(VariantInfo)); fj.check(fj.lib.fj_kernel_variant_info(h, 0, C.byref(vi)), "vi")
    return vi.tile.decode()
print(f"{'d':>4} {'N':>6} {'c':1} {'fj_lse':>7} {'fj_nolse':>8} {'fj_fwdonly':>10} {'cd_train':>8} {'cd_infer':>8} {'lse/cdT':>7} {'only/cdI':>8}  tile")
logs = {k: [] for k in ("lse_cdT", "only_cdI", "lse_only")}
for d in map(int, a.dims.split(",")):
    H = 2048 // d
    for N in map(int, a.ns.split(",")):
        B = max(1, 16384 // N)
        for causal in (False, True):
            flops = 4 * B * H * N * N * d / (2 if causal else 1)
            per_set = 4 * B * N * H * d * 2
            sets = max(1, math.ceil(2 * l2 / per_set))
            hb = handle_for(d, H, causal, N, B, 1); hf = handle_for(d, H, causal, N, B, 0)
            data = []
            for _ in range(sets):
                q, k, v = (torch.randn(B, N, H, d, device="cuda", dtype=dtype) for _ in range(3))
                o = torch.empty_like(q); lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
                data.append((q, k, v, o, lse))
            class Z:  # a stand-in whose data_ptr is 0
                def data_ptr(self): return 0
            z = Z()
            fns = {
                "fj_lse": lambda i: fj.forward(hb, *data[i]),
                "fj_nolse": lambda i: fj.forward(hb, *data[i][:4], z),
                "fj_fwdonly": lambda i: fj.forward(hf, *data[i][:4], z),
            }
            def cd(i, train):
                q, k, v = (t.transpose(1, 2) for t in data[i][:3])
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    if train:
                        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                        return F.scaled_dot_product_attention(*leaves, is_causal=causal)
                    with torch.no_grad():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            fns["cd_train"] = lambda i: cd(i, True)
            fns["cd_infer"] = lambda i: cd(i, False)
            r = {k: [] for k in fns}
            for _ in range(a.rounds):
                for k, f in fns.items():
                    r[k].append(flops / median_ms(f, sets) / 1e9)
            m = {k: statistics.median(v) for k, v in r.items()}
            logs["lse_cdT"].append(math.log(m["fj_lse"] / m["cd_train"]))
            logs["only_cdI"].append(math.log(m["fj_fwdonly"] / m["cd_infer"]))
            logs["lse_only"].append(math.log(m["fj_lse"] / m["fj_fwdonly"]))
            print(f"{d:>4} {N:>6} {int(causal)} {m['fj_lse']:7.1f} {m['fj_nolse']:8.1f} {m['fj_fwdonly']:10.1f} {m['cd_train']:8.1f} {m['cd_infer']:8.1f} {m['fj_lse']/m['cd_train']:7.3f} {m['fj_fwdonly']/m['cd_infer']:8.3f}  {fwd_tile(hb)}/{fwd_tile(hf)}", flush=True)
            del data
for k, v in logs.items():
    print(k, "geomean", round(math.exp(sum(v) / len(v)), 4))
