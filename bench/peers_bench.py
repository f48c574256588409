#!/usr/bin/env python3
"""flashjit against the attention kernels a PyTorch user would pick instead, in one
process, on the same inputs: SDPA's flash (FlashAttention-2), cuDNN and efficient
backends, and FlexAttention. flashjit runs through its C API (ctypes over
libflashjit.so) on the same torch tensors.

    python3 bench/peers_bench.py --lib .gpu/libflashjit.so --out $OUT/bench

For each shape (head_dim x N, batch*N = 16384 tokens, heads*head_dim = 2048, causal or
not, bf16 and fp16) it
  1. checks flashjit's output against an fp32 reference on a slice of the problem with
     the bar of DESIGN.md, using the worst peer's error as the "same dtype" error;
  2. times each system with CUDA events: warm-up, median of many calls, inputs rotated
     over enough sets to exceed twice the L2 so nobody reads the last call's data from
     cache, each system after --heat-s seconds of its own calls, so that every reading
     is at the GPU's power-capped steady state (docs/PERF.md bw17);
  3. writes a table (TFLOP/s, ratio of flashjit to each peer, geometric means), a JSON
     file and PNG plots of TFLOP/s against N, one per head dim.
FLOPs as in the FlashAttention papers: 4*B*H*N^2*d, halved when causal.
"""
import argparse
import ctypes as C
import itertools
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


# ---- the C API through ctypes (layouts mirror include/flashjit/flashjit.h) ----
class ContextOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("device", C.c_int32),
                ("user_cache_path", C.c_char_p), ("shipped_cache_paths", C.c_void_p),
                ("num_shipped_cache_paths", C.c_int32), ("tune_mode", C.c_int32),
                ("tuning_budget_seconds", C.c_double), ("log_callback", C.c_void_p),
                ("log_user_data", C.c_void_p)]


class AttentionDesc(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("dtype", C.c_int32), ("head_dim", C.c_int32),
                ("head_dim_v", C.c_int32), ("causal", C.c_int32), ("num_heads_q", C.c_int32),
                ("num_heads_kv", C.c_int32), ("softmax_scale", C.c_float),
                ("seqlen_q_hint", C.c_int32), ("seqlen_k_hint", C.c_int32),
                ("batch_hint", C.c_int32)]


class ForwardArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("q", C.c_void_p), ("k", C.c_void_p),
                ("v", C.c_void_p), ("o", C.c_void_p), ("lse", C.c_void_p),
                ("batch", C.c_int32), ("seqlen_q", C.c_int32), ("seqlen_k", C.c_int32)] + \
               [(f"{t}_{s}_stride", C.c_int64) for t in "qkvo" for s in ("batch", "seq", "head")] + \
               [("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p), ("total_q", C.c_int64),
                ("total_k", C.c_int64)]


class KernelInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("family", C.c_char_p), ("spec_key", C.c_char_p),
                ("device_key", C.c_char_p), ("num_variants", C.c_int32),
                ("primary_variant", C.c_int32), ("compiled_now", C.c_int32),
                ("origin", C.c_int32), ("block_m", C.c_int32), ("block_n", C.c_int32),
                ("warps", C.c_int32), ("stages", C.c_int32), ("registers", C.c_int32),
                ("shared_bytes", C.c_int32), ("tuned_us", C.c_double), ("get_ms", C.c_double)]


TUNE_MODES = {"auto": 0, "default": 1, "cached": 2, "heuristic": 3, "exhaustive": 4}


class Flashjit:
    def __init__(self, path, tune_mode, budget):
        self.lib = C.CDLL(path)
        self.lib.fj_last_error_message.restype = C.c_char_p
        self.lib.fj_version.restype = C.c_char_p
        opts = ContextOptions(struct_size=C.sizeof(ContextOptions), device=torch.cuda.current_device(),
                              tune_mode=TUNE_MODES[tune_mode], tuning_budget_seconds=budget)
        self.ctx = C.c_void_p()
        self.check(self.lib.fj_context_create(C.byref(opts), C.byref(self.ctx)), "fj_context_create")
        self.kernels = {}

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.fj_last_error_message().decode()}")

    def kernel(self, dtype, d, heads, causal, n, batch):
        key = (dtype, d, heads, causal, n, batch)
        if key not in self.kernels:
            desc = AttentionDesc(struct_size=C.sizeof(AttentionDesc),
                                 dtype=2 if dtype == torch.bfloat16 else 1, head_dim=d,
                                 head_dim_v=d, causal=int(causal), num_heads_q=heads,
                                 num_heads_kv=heads, seqlen_q_hint=n, seqlen_k_hint=n,
                                 batch_hint=batch)
            handle = C.c_void_p()
            self.check(self.lib.fj_kernel_get(self.ctx, C.byref(desc), C.byref(handle)), "fj_kernel_get")
            info = KernelInfo(struct_size=C.sizeof(KernelInfo))
            self.check(self.lib.fj_kernel_info(handle, C.byref(info)), "fj_kernel_info")
            self.kernels[key] = (handle, info)
        return self.kernels[key]

    def forward(self, handle, q, k, v, o):
        """q, k, v, o: [batch, seq, heads, dim] tensors (BSHD), last dim contiguous."""
        args = ForwardArgs(struct_size=C.sizeof(ForwardArgs), q=q.data_ptr(), k=k.data_ptr(),
                           v=v.data_ptr(), o=o.data_ptr(), batch=q.shape[0],
                           seqlen_q=q.shape[1], seqlen_k=k.shape[1])
        for name, t in zip("qkvo", (q, k, v, o)):
            setattr(args, f"{name}_batch_stride", t.stride(0))
            setattr(args, f"{name}_seq_stride", t.stride(1))
            setattr(args, f"{name}_head_stride", t.stride(2))
        self.check(self.lib.fj_forward(handle, C.byref(args),
                                       C.c_void_p(torch.cuda.current_stream().cuda_stream)),
                   "fj_forward")


# ---- timing ----
def heat(call, seconds):
    """Runs call() for `seconds` of wall time, a few calls between synchronizations: the
    GPU is then at its power-capped steady state, as in a training step, not at the
    boost clock a pause leaves (docs/PERF.md bw17)."""
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(4):
            call()
        torch.cuda.synchronize()


def median_ms(fn, sets, iters=40, warm=8, heat_s=0.5):
    """Median of `iters` event-timed calls of fn(i) over `sets` input sets, after `warm`
    calls and, with heat_s > 0, after running fn for heat_s seconds first. Heating times
    each backend at the power-capped steady state: loaded, an H200 runs at 1980 MHz for
    well under a second, then at its power cap (~1710 MHz at 700 W for the d 128
    backward), so a short timed run right after a pause reads the boost clock, and which
    backend got the pause decided the ratio (docs/PERF.md bw17)."""
    for i in range(warm):
        fn(i % sets)
    torch.cuda.synchronize()
    calls = itertools.count()
    heat(lambda: fn(next(calls) % sets), heat_s)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def parse_shape(shape):
    """A --shapes entry dtype:head_dim:N:causal at the peers' sizes (batch*N = 16384 tokens,
    heads*head_dim = 2048): (dtype, d, N, causal, heads, batch)."""
    dname, d, n, causal = shape.split(":")
    d, n = int(d), int(n)
    dtype = torch.bfloat16 if dname == "bf16" else torch.float16
    return dtype, d, n, bool(int(causal)), 2048 // d, max(1, 16384 // n)


def reference_slice(q, k, v, causal, rows, heads=2):
    """fp32 textbook attention for the last `rows` queries of batch 0, heads 0..heads-1
    (None: every head)."""
    qs = q[0, -rows:, :heads].float().transpose(0, 1)      # [h, rows, d]
    ks = k[0, :, :heads].float().transpose(0, 1)
    vs = v[0, :, :heads].float().transpose(0, 1)
    s = qs @ ks.transpose(1, 2) / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = q.shape[1], k.shape[1]
        i = torch.arange(n_q - rows, n_q, device=q.device)[:, None]
        j = torch.arange(n_k, device=q.device)[None, :]
        s = s.masked_fill(j > i + n_k - n_q, float("-inf"))
    return (torch.softmax(s, dim=-1) @ vs).transpose(0, 1)  # [rows, h, d]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".gpu/libflashjit.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--tune-mode", default="default", choices=list(TUNE_MODES))
    ap.add_argument("--tune-budget", type=float, default=30)
    ap.add_argument("--flex", action="store_true", help="include FlexAttention (compiles per shape)")
    ap.add_argument("--heat-s", type=float, default=0.5,
                    help="seconds each backend runs its own calls right before it is timed, so "
                         "that every reading is at the GPU's power-capped steady state (0: "
                         "time from the warm-up alone, as runs before bw17 did)")
    ap.add_argument("--peers", default="fa2,cudnn,efficient",
                    help="SDPA backends to compare: fa2, cudnn, efficient")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fj = Flashjit(a.lib, a.tune_mode, a.tune_budget)
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    backends = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    peers = {name: backends[name] for name in a.peers.split(",") if name}
    flex = None
    if a.flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        # One compiled kernel per shape (dynamic=False is FlexAttention's fast path); the
        # default limit of 8 recompiles would silently drop later shapes to eager mode.
        import torch._dynamo as dynamo  # (binds only `dynamo`: `torch` stays the module)
        for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
            if hasattr(dynamo.config, limit):
                setattr(dynamo.config, limit, 4096)
        flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    print(f"device {torch.cuda.get_device_name(0)}, flashjit {fj.lib.fj_version().decode()}, "
          f"torch {torch.__version__}")
    print(f"{'dtype':5} {'d':>4} {'N':>6} {'causal':6} {'flashjit':>8} " +
          " ".join(f"{p:>9}" for p in list(peers) + ["flex"]) + "  tile             check")
    for dname in a.dtypes.split(","):
        dtype = torch.bfloat16 if dname == "bf16" else torch.float16
        for d in map(int, a.head_dims.split(",")):
            H = 2048 // d
            for N in map(int, a.seqlens.split(",")):
                B = max(1, 16384 // N)
                for causal in (False, True):
                    flops = 4 * B * H * N * N * d / (2 if causal else 1)
                    sets = max(1, math.ceil(2 * l2 / (4 * B * N * H * d * 2)))
                    bshd = [[torch.randn(B, N, H, d, device="cuda", dtype=dtype) for _ in range(3)]
                            for _ in range(sets)]
                    bhsd = [[t.transpose(1, 2).contiguous() for t in s] for s in bshd]
                    o = torch.empty(B, N, H, d, device="cuda", dtype=dtype)
                    row = dict(dtype=dname, d=d, N=N, B=B, H=H, causal=causal)
                    handle, info = fj.kernel(dtype, d, H, causal, N, B)
                    row["tile"] = f"bm{info.block_m}.bn{info.block_n}.w{info.warps}.s{info.stages}"
                    # Correctness first: flashjit vs fp32 on a slice, bar from the peers.
                    q, k, v = bshd[0]
                    o.fill_(float("nan"))
                    fj.forward(handle, q, k, v, o)
                    torch.cuda.synchronize()
                    n_rows = min(N, 256)
                    ref = reference_slice(q, k, v, causal, n_rows)
                    err = (o[0, -n_rows:, :2].float() - ref).abs().max().item()
                    peer_errs = []
                    for name, backend in peers.items():
                        try:
                            with sdpa_kernel(backend):
                                po = F.scaled_dot_product_attention(*bhsd[0], is_causal=causal)
                            peer_errs.append((po.transpose(1, 2)[0, -n_rows:, :2].float() - ref)
                                             .abs().max().item())
                        except Exception:
                            pass
                    bar = 2 * max(peer_errs) + 1e-5 if peer_errs else 1e-2
                    ok = math.isfinite(err) and err <= bar
                    row.update(error=err, bar=bar, passed=ok)
                    ms = median_ms(lambda i: fj.forward(handle, *bshd[i], o), sets,
                                   heat_s=a.heat_s)
                    row["flashjit"] = flops / ms / 1e9
                    for name, backend in peers.items():
                        try:
                            with sdpa_kernel(backend):
                                ms = median_ms(lambda i: F.scaled_dot_product_attention(
                                    *bhsd[i], is_causal=causal), sets, heat_s=a.heat_s)
                            row[name] = flops / ms / 1e9
                        except Exception:
                            row[name] = None
                    row["flex"] = None
                    if flex is not None and d <= 128:
                        try:
                            bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, N, N) \
                                if causal else None
                            ms = median_ms(lambda i: flex(*bhsd[i], block_mask=bm), sets,
                                           heat_s=a.heat_s)
                            row["flex"] = flops / ms / 1e9
                        except Exception as ex:
                            print("  flex failed:", str(ex)[:120])
                    rows.append(row)
                    cells = " ".join(f"{row[p]:9.1f}" if row[p] else f"{'-':>9}"
                                     for p in list(peers) + ["flex"])
                    print(f"{dname:5} {d:>4} {N:>6} {str(causal):6} {row['flashjit']:8.1f} {cells}  "
                          f"{row['tile']:16} {'ok' if ok else 'FAIL'} ({err:.1e} <= {bar:.1e})",
                          flush=True)
                    del bshd, bhsd, o
                    json.dump(dict(device=torch.cuda.get_device_name(0), rows=rows),
                              open(os.path.join(a.out, "peers_bench.json"), "w"), indent=1)
    # Geometric means of flashjit / peer over the shapes both ran.
    summary = {}
    for peer in list(peers) + ["flex"]:
        ratios = [r["flashjit"] / r[peer] for r in rows if r.get(peer)]
        if ratios:
            summary[peer] = dict(geomean=math.exp(sum(map(math.log, ratios)) / len(ratios)),
                                 min=min(ratios), max=max(ratios), shapes=len(ratios))
            print(f"flashjit / {peer}: geometric mean {summary[peer]['geomean']:.3f} "
                  f"(min {summary[peer]['min']:.3f}, max {summary[peer]['max']:.3f}, "
                  f"{len(ratios)} shapes)")
    failed = [r for r in rows if not r["passed"]]
    print(f"correctness: {len(rows) - len(failed)} passed, {len(failed)} failed")
    json.dump(dict(device=torch.cuda.get_device_name(0), rows=rows, summary=summary,
                   heat_s=a.heat_s),
              open(os.path.join(a.out, "peers_bench.json"), "w"), indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        for d in sorted({r["d"] for r in rows}):
            fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
            for ax, causal in zip(axes, (False, True)):
                for system in ["flashjit"] + list(peers) + ["flex"]:
                    pts = [(r["N"], r[system]) for r in rows
                           if r["d"] == d and r["causal"] == causal and r["dtype"] == "bf16" and r.get(system)]
                    if pts:
                        ax.plot(*zip(*pts), marker="o", label=system)
                ax.set_xscale("log", base=2)
                ax.set_title(f"bf16, head_dim {d}, {'causal' if causal else 'non-causal'}")
                ax.set_xlabel("N")
            axes[0].set_ylabel("TFLOP/s")
            axes[1].legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(os.path.join(a.out, f"peers_d{d}.png"), dpi=80)
    except ImportError:
        print("matplotlib missing: no plots")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
