#!/usr/bin/env python3
"""flashjit's backward pass against PyTorch's, in one process, on the same tensors:
SDPA's cuDNN and flash (FlashAttention-2) backends. flashjit runs through its C API
(ctypes over libflashjit.so; fj_forward for o and lse, then fj_backward).

    python3 bench/backward_peers_bench.py --lib .gpu/libflashjit.so --out $OUT/bwd

Shapes as bench/peers_bench.py (batch*N = 16384 tokens, heads*head_dim = 2048). For each
  1. correctness, where the fp32 reference fits (N <= --check-max-n): dq, dk, dv of
     flashjit and of each peer against fp32 autograd of the textbook formula; flashjit's
     error must be within 2x the worst peer's plus 1e-5 (PyTorch's own low-precision
     error, the issue's bar);
  2. time with CUDA events (warm-up, median, inputs rotated over enough sets to exceed
     twice the L2): the backward alone (flashjit: fj_backward; peers:
     torch.autograd.grad of a retained graph, i.e. their backward kernels only), and
     forward + backward; every backend in --rounds interleaved rounds (each round
     starting one backend later), the median of its rounds reported (each round's
     reading kept in the JSON); before each timed run the backend runs its own calls for
     --heat-s seconds, so that every reading is taken at the GPU's power-capped steady
     state, not at the boost clock a pause leaves (docs/PERF.md bw17);
  3. TFLOP/s with the papers' count: backward = 2.5 x the forward's 4*B*H*N^2*d
     (halved when causal); ratios to each peer and their geometric means.
A shape whose kernel flashjit cannot give (fj_kernel_get fails) is recorded as failed with
the library's message, and the run goes on to the other shapes; any failed shape makes the
exit status 1.
"""
import argparse
import ctypes as C
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_bench import (TUNE_MODES, AttentionDesc, ContextOptions, ForwardArgs,  # noqa: E402
                         KernelInfo, median_ms)


class AttentionDescV2(C.Structure):
    _fields_ = AttentionDesc._fields_ + [("backward", C.c_int32)]


class KernelInfoV2(C.Structure):
    _fields_ = KernelInfo._fields_ + [("backward_family", C.c_char_p),
                                      ("num_backward_variants", C.c_int32)]


class BackwardArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t)] + \
               [(n, C.c_void_p) for n in ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv")] + \
               [("batch", C.c_int32), ("seqlen_q", C.c_int32), ("seqlen_k", C.c_int32)] + \
               [(f"{t}_{s}_stride", C.c_int64)
                for t in ("q", "k", "v", "o", "dout", "dq", "dk", "dv")
                for s in ("batch", "seq", "head")] + \
               [("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p),
                ("total_q", C.c_int64), ("total_k", C.c_int64), ("deterministic", C.c_int32),
                ("workspace", C.c_void_p), ("workspace_bytes", C.c_size_t)]


class VariantInfo(C.Structure):
    """fj_variant_info up to `calls` (0.5)."""
    _fields_ = [("struct_size", C.c_size_t)] + \
               [(n, C.c_char_p) for n in ("bucket", "tile", "binary_key", "binary_key_text",
                                          "tuning_key", "note")] + \
               [(n, C.c_int32) for n in ("bucket_seqlen_q", "bucket_seqlen_k",
                                         "bucket_batch_heads", "origin", "block_m", "block_n",
                                         "warps", "stages", "registers", "shared_bytes")] + \
               [("tuned_us", C.c_double), ("calls", C.c_int64)]


def nvrtc_files():
    """The libnvrtc files mapped into this process (Linux), sorted."""
    try:
        with open("/proc/self/maps") as maps:
            return sorted({line.split()[-1] for line in maps if "libnvrtc.so" in line})
    except OSError:
        return []


class Flashjit:
    def __init__(self, path, tune_mode, budget):
        self.lib = C.CDLL(path)
        self.lib.fj_last_error_message.restype = C.c_char_p
        self.lib.fj_version.restype = C.c_char_p
        opts = ContextOptions(struct_size=C.sizeof(ContextOptions),
                              device=torch.cuda.current_device(),
                              tune_mode=TUNE_MODES[tune_mode], tuning_budget_seconds=budget)
        self.ctx = C.c_void_p()
        self.check(self.lib.fj_context_create(C.byref(opts), C.byref(self.ctx)), "fj_context_create")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.fj_last_error_message().decode()}")

    def kernel(self, dtype, d, heads, causal, n, batch):
        desc = AttentionDescV2(struct_size=C.sizeof(AttentionDescV2),
                               dtype=2 if dtype == torch.bfloat16 else 1, head_dim=d, head_dim_v=d,
                               causal=int(causal), num_heads_q=heads, num_heads_kv=heads,
                               seqlen_q_hint=n, seqlen_k_hint=n, batch_hint=batch, backward=1)
        handle = C.c_void_p()
        self.check(self.lib.fj_kernel_get(self.ctx, C.byref(desc), C.byref(handle)), "fj_kernel_get")
        return handle

    def served(self, handle, backward=True):
        """(tile, bucket) of the backward (else forward) variant that served the most calls
        so far: the one fj_backward (fj_forward) dispatched the timed shape to, which need
        not be the first."""
        info = KernelInfoV2(struct_size=C.sizeof(KernelInfoV2))
        self.check(self.lib.fj_kernel_info(handle, C.byref(info)), "fj_kernel_info")
        first = info.num_variants - info.num_backward_variants
        best = None
        for i in (range(first, info.num_variants) if backward else range(first)):
            vi = VariantInfo(struct_size=C.sizeof(VariantInfo))
            self.check(self.lib.fj_kernel_variant_info(handle, i, C.byref(vi)),
                       "fj_kernel_variant_info")
            if best is None or vi.calls > best[2]:
                best = (vi.tile.decode(), vi.bucket.decode(), vi.calls)
        return best[:2]

    def stream(self):
        return C.c_void_p(torch.cuda.current_stream().cuda_stream)

    def forward(self, handle, q, k, v, o, lse):
        args = ForwardArgs(struct_size=C.sizeof(ForwardArgs), q=q.data_ptr(), k=k.data_ptr(),
                           v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr(), batch=q.shape[0],
                           seqlen_q=q.shape[1], seqlen_k=k.shape[1])
        for name, t in zip("qkvo", (q, k, v, o)):
            for i, s in enumerate(("batch", "seq", "head")):
                setattr(args, f"{name}_{s}_stride", t.stride(i))
        self.check(self.lib.fj_forward(handle, C.byref(args), self.stream()), "fj_forward")

    def backward_args(self, handle, q, k, v, o, lse, dout, dq, dk, dv, deterministic=False):
        args = BackwardArgs(struct_size=C.sizeof(BackwardArgs), batch=q.shape[0],
                            seqlen_q=q.shape[1], seqlen_k=k.shape[1],
                            deterministic=int(deterministic))
        tensors = dict(q=q, k=k, v=v, o=o, dout=dout, dq=dq, dk=dk, dv=dv)
        for name, t in tensors.items():
            setattr(args, name, t.data_ptr())
            for i, s in enumerate(("batch", "seq", "head")):
                setattr(args, f"{name}_{s}_stride", t.stride(i))
        args.lse = lse.data_ptr()
        size = C.c_size_t()
        self.check(self.lib.fj_backward_workspace_size(handle, C.byref(args), C.byref(size)),
                   "fj_backward_workspace_size")
        workspace = torch.empty(max(size.value, 16), dtype=torch.uint8, device="cuda")
        args.workspace, args.workspace_bytes = workspace.data_ptr(), size.value
        return args, workspace

    def backward(self, handle, args):
        self.check(self.lib.fj_backward(handle, C.byref(args), self.stream()), "fj_backward")


def training_set(fj, handle, batch, n, heads, d, dtype, deterministic=False):
    """One set of a training step's tensors (BSHD), the forward run on them (o, lse), and
    fj_backward's arguments. dq, dk and dv start as NaN and are kept in the set: the
    arguments hold only their addresses."""
    q, k, v, dout = (torch.randn(batch, n, heads, d, device="cuda", dtype=dtype)
                     for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(batch, heads, n, device="cuda", dtype=torch.float32)
    dq, dk, dv = (torch.full_like(q, float("nan")) for _ in range(3))
    fj.forward(handle, q, k, v, o, lse)
    args, ws = fj.backward_args(handle, q, k, v, o, lse, dout, dq, dk, dv, deterministic)
    return dict(q=q, k=k, v=v, dout=dout, o=o, lse=lse, dq=dq, dk=dk, dv=dv, args=args, ws=ws)


def reference_grads(q, k, v, dout, causal):
    """fp32 autograd of the textbook formula, BSHD tensors."""
    qf, kf, vf = (t.detach().float().transpose(1, 2).requires_grad_() for t in (q, k, v))
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = q.shape[1], k.shape[1]
        i = torch.arange(n_q, device=q.device)[:, None]
        j = torch.arange(n_k, device=q.device)[None, :]
        s = s.masked_fill(j > i + n_k - n_q, float("-inf"))
    out = torch.softmax(s, dim=-1) @ vf
    grads = torch.autograd.grad(out, (qf, kf, vf), dout.float().transpose(1, 2))
    return [g.transpose(1, 2) for g in grads]


def max_err(got, ref):
    return max((g.float() - r).abs().max().item() for g, r in zip(got, ref))


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".gpu/libflashjit.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--tune-mode", default="heuristic", choices=list(TUNE_MODES))
    ap.add_argument("--tune-budget", type=float, default=30)
    ap.add_argument("--check-max-n", type=int, default=2048)
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved timing rounds of every backend; medians reported")
    ap.add_argument("--heat-s", type=float, default=0.5,
                    help="seconds each backend runs its own calls right before each timed "
                         "run, so that every reading is at the GPU's power-capped steady "
                         "state (0: time from the warm-up alone, as runs before bw17 did)")
    ap.add_argument("--peers", default="cudnn,fa2", help="SDPA backends to compare: cudnn, fa2")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fj = Flashjit(a.lib, a.tune_mode, a.tune_budget)
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}
    peers = {name: backends[name] for name in a.peers.split(",") if name}
    print(f"device {torch.cuda.get_device_name(0)}, flashjit {fj.lib.fj_version().decode()}, "
          f"torch {torch.__version__}; backward TFLOP/s (fwd+bwd in brackets)")
    print(f"{'dtype':5} {'d':>4} {'N':>6} {'causal':6} {'flashjit':>16} {'cudnn':>16} {'fa2':>16}"
          f"  bwd tile           fwd tile           check")
    rows = []
    for dname in a.dtypes.split(","):
        dtype = torch.bfloat16 if dname == "bf16" else torch.float16
        for d in map(int, a.head_dims.split(",")):
            H = 2048 // d
            for N in map(int, a.seqlens.split(",")):
                B = max(1, 16384 // N)
                for causal in (False, True):
                    fwd_flops = 4 * B * H * N * N * d / (2 if causal else 1)
                    bwd_flops = 2.5 * fwd_flops
                    per_set = 8 * B * N * H * d * 2  # q k v o dout dq dk dv
                    sets = max(1, math.ceil(2 * l2 / per_set))
                    try:
                        handle = fj.kernel(dtype, d, H, causal, N, B)
                    except RuntimeError as ex:
                        # Recorded as a failed shape; the run goes on to the others.
                        rows.append(dict(dtype=dname, d=d, N=N, B=B, H=H, causal=causal,
                                         passed=False, error=None, bar=None,
                                         kernel_error=str(ex)))
                        print(f"{dname:5} {d:>4} {N:>6} {str(causal):6} FAILED: {ex}",
                              flush=True)
                        continue
                    data = [training_set(fj, handle, B, N, H, d, dtype, a.deterministic)
                            for _ in range(sets)]
                    row = dict(dtype=dname, d=d, N=N, B=B, H=H, causal=causal)
                    # Correctness where the fp32 reference fits.
                    s0 = data[0]
                    fj.backward(handle, s0["args"])
                    torch.cuda.synchronize()
                    if N <= a.check_max_n:
                        ref = reference_grads(s0["q"], s0["k"], s0["v"], s0["dout"], causal)
                        err = max_err((s0["dq"], s0["dk"], s0["dv"]), ref)
                        peer_errs = []
                        for name, backend in peers.items():
                            try:
                                leaves = [s0[t].transpose(1, 2).detach().requires_grad_()
                                          for t in "qkv"]
                                with sdpa_kernel(backend):
                                    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                                g = torch.autograd.grad(out, leaves, s0["dout"].transpose(1, 2))
                                peer_errs.append(max_err([x.transpose(1, 2) for x in g], ref))
                            except Exception:
                                pass
                        bar = 2 * max(peer_errs) + 1e-5 if peer_errs else float("nan")
                        row.update(error=err, bar=bar, passed=bool(math.isfinite(err) and err <= bar))
                        del ref
                    else:
                        finite = all(torch.isfinite(s0[t]).all().item() for t in ("dq", "dk", "dv"))
                        row.update(error=None, bar=None, passed=finite)
                    # Backward alone, then forward + backward, for flashjit and each peer,
                    # in --rounds interleaved rounds; each number is the median of its
                    # rounds. One reading per backend drifts with the GPU's state: the
                    # same kernel timed again after the peers read up to 20 % apart.
                    def fj_bwd(i):
                        fj.backward(handle, data[i]["args"])

                    def fj_both(i):
                        s = data[i]
                        fj.forward(handle, s["q"], s["k"], s["v"], s["o"], s["lse"])
                        fj.backward(handle, s["args"])
                    timed = {"flashjit": (fj_bwd, fj_both)}
                    graphs = {}
                    for name, backend in peers.items():
                        try:
                            with sdpa_kernel(backend):
                                graphs[name] = []
                                for s in data:
                                    leaves = [s[t].transpose(1, 2).detach().requires_grad_()
                                              for t in "qkv"]
                                    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                                    graphs[name].append((out, leaves, s["dout"].transpose(1, 2)))
                        except Exception as ex:
                            print(f"  {name} failed: {str(ex)[:100]}")
                            continue

                        def peer_bwd(i, g=graphs[name]):
                            torch.autograd.grad(g[i][0], g[i][1], g[i][2], retain_graph=True)

                        def peer_both(i, g=graphs[name], backend=backend):
                            with sdpa_kernel(backend):
                                out = F.scaled_dot_product_attention(*g[i][1], is_causal=causal)
                            torch.autograd.grad(out, g[i][1], g[i][2])
                        timed[name] = (peer_bwd, peer_both)
                    readings = {name: ([], []) for name in timed}
                    # Each round starts one backend later: a fixed order would give the
                    # first one the GPU's state after the setup pause in every round.
                    order = list(timed.items())
                    for r in range(a.rounds):
                        k = r % len(order)
                        for name, (bwd, both) in order[k:] + order[:k]:
                            readings[name][0].append(
                                bwd_flops / median_ms(bwd, sets, heat_s=a.heat_s) / 1e9)
                            readings[name][1].append(
                                (fwd_flops + bwd_flops) /
                                median_ms(both, sets, heat_s=a.heat_s) / 1e9)
                    for name in ["flashjit"] + list(peers):
                        if name not in readings:
                            row[name] = row[name + "_fwdbwd"] = None
                            continue
                        row[name] = statistics.median(readings[name][0])
                        row[name + "_fwdbwd"] = statistics.median(readings[name][1])
                        row[name + "_rounds"] = readings[name]
                    tile, bucket = fj.served(handle)
                    fwd_tile, fwd_bucket = fj.served(handle, backward=False)
                    row.update(tile=tile, bucket=bucket, fwd_tile=fwd_tile, fwd_bucket=fwd_bucket)
                    del graphs, timed
                    rows.append(row)

                    def cell(p):
                        if not row.get(p):
                            return f"{'-':>16}"
                        return f"{row[p]:7.1f} [{row[p + '_fwdbwd']:6.1f}]"
                    check = ("ok" if row["passed"] else "FAIL") + \
                        (f" ({row['error']:.1e} <= {row['bar']:.1e})" if row["error"] is not None
                         else " (finite; N above --check-max-n)")
                    print(f"{dname:5} {d:>4} {N:>6} {str(causal):6} {cell('flashjit')} "
                          f"{cell('cudnn')} {cell('fa2')}  {tile:18} {fwd_tile:18} {check}", flush=True)
                    fj.check(fj.lib.fj_kernel_release(handle), "fj_kernel_release")
                    del data
                    torch.cuda.empty_cache()
                    json.dump(dict(device=torch.cuda.get_device_name(0), rows=rows),
                              open(os.path.join(a.out, "backward_bench.json"), "w"), indent=1)
    summary = {}
    for peer in peers:
        for kind, suffix in (("bwd", ""), ("fwdbwd", "_fwdbwd")):
            timed = [r for r in rows if r.get(peer + suffix) and r.get("flashjit" + suffix)]
            ratios = [r["flashjit" + suffix] / r[peer + suffix] for r in timed]
            long_ratios = [r["flashjit" + suffix] / r[peer + suffix] for r in timed
                           if r["N"] >= 1024]
            if ratios:
                summary[f"{peer}_{kind}"] = dict(geomean=geomean(ratios), min=min(ratios),
                                                 max=max(ratios), shapes=len(ratios),
                                                 at_or_above_n1024=sum(x >= 1 for x in long_ratios),
                                                 shapes_n1024=len(long_ratios))
                s = summary[f"{peer}_{kind}"]
                print(f"flashjit / {peer} ({kind}): geometric mean {s['geomean']:.3f} "
                      f"(min {s['min']:.3f}, max {s['max']:.3f}, {s['shapes']} shapes; "
                      f">= 1.0 on {s['at_or_above_n1024']}/{s['shapes_n1024']} with N >= 1024)")
    failed = [r for r in rows if not r["passed"]]
    print(f"correctness: {len(rows) - len(failed)} passed, {len(failed)} failed"
          f" ({sum('kernel_error' in r for r in failed)} without a kernel)")
    # PyTorch's NVRTC and, where flashjit found one, its own (PERF bw12: a shared copy
    # compiles differently once cuDNN has used it).
    nvrtc = nvrtc_files()
    print("NVRTC files in this process:", ", ".join(nvrtc) or "unknown")
    json.dump(dict(device=torch.cuda.get_device_name(0), rows=rows, summary=summary,
                   nvrtc_files=nvrtc, heat_s=a.heat_s),
              open(os.path.join(a.out, "backward_bench.json"), "w"), indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
