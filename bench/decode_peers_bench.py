#!/usr/bin/env python3
"""flashjit's decode (flashjit.decode, i.e. fj_decode) against the decode kernels a PyTorch
user has at hand, SDPA's cuDNN and FLASH_ATTENTION (FlashAttention-2) backends, in one
process, on the same values.

    PYTHONPATH=python python3 bench/decode_peers_bench.py --lib .gpu/libflashjit.so \\
        --out $OUT/decode

A decode step: one query row per sequence (q_len 1) against a contiguous KV cache of N
keys per sequence, MHA with --heads 32 (what both peers take), head dims 128 and 64,
batch x N over --batches x --seqlens (shapes whose K+V exceed --max-gb skipped), bf16
(--dtypes bf16,fp16). Causal makes no difference with one query row (it sees every key),
so none of them masks. For each shape:
  1. flashjit.decode on q [B, 1, H, d] and caches k, v [B, N, H, d], with a handle got for
     this shape (the decode handles are released between shapes, so that each shape's
     bucket is tuned: --tune-mode, --tune-budget per bucket; fj_kernel_get prepares the
     forward kernels of the description too, which the budget also covers);
  2. SDPA with each backend alone (torch.nn.attention.sdpa_kernel) on q [B, H, 1, d] and
     k, v [B, H, N, d] holding the same values: contiguous copies (--peer-layout
     contiguous, the default) or transposed views of flashjit's tensors (view); a peer
     that raises is reported unavailable for the shape;
  3. flashjit.decode on a paged copy of the cache (pages of --page-size tokens, in a
     shuffled order; cache_seqlens all N), which should cost the same as the contiguous
     cache;
  4. correctness, once per shape: flashjit's output against each peer's and the paged
     output against the contiguous one (max abs diff), and sequence 0 against an fp32
     reference with the bar of peers_bench.py (2x the worst peer's error + 1e-5).
Timing, as bench/peers_bench.py: CUDA events around each call, warm-up, median of --iters
(>= 20), inputs rotated over enough sets that they exceed twice the L2; in addition the
timed calls are queued behind a GPU sleep longer than the host takes to issue them, so
the events time the GPU's work rather than Python's launch overhead (a decode kernel can
be shorter than a Python call). Throughput: the K+V bytes of the cache over the time.
Ratios are flashjit's throughput over the peer's (the peer's time / flashjit's): above 1,
flashjit is faster. Writes decode_peers_bench.json to --out.
"""
import argparse
import ctypes as C
import json
import math
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION}


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def sleep_cycles_per_us():
    """GPU clock cycles of torch.cuda._sleep per microsecond (measured)."""
    torch.cuda._sleep(1000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    torch.cuda.synchronize()
    return 20_000_000 / (start.elapsed_time(end) * 1000)


def median_us(fn, sets, iters, warm, cycles_per_us):
    """Median GPU time of fn(i % sets) in microseconds: warm-up, then `iters` calls, each
    between two CUDA events, issued while the GPU sleeps (see the module's docstring)."""
    for i in range(warm):
        fn(i % sets)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(iters):
        fn(i % sets)
    torch.cuda.synchronize()
    issue_us = (time.perf_counter() - t0) / iters * 1e6  # the slower of host and GPU
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    torch.cuda._sleep(int(min(2 * issue_us * iters + 2000, 2e6) * cycles_per_us))
    for i in range(iters):
        starts[i].record()
        fn(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1000 for s, e in zip(starts, ends))
    return times[len(times) // 2]


def reference0(q, k, v):
    """fp32 attention of sequence 0: q [B, 1, H, d], k / v [B, N, Hkv, d] -> [1, H, dv]
    (query head h reads KV head h // (H / Hkv))."""
    group = q.shape[2] // k.shape[2]
    qf = q[0, 0].float()  # [H, d]
    kf = k[0].float().repeat_interleave(group, dim=1)  # [N, H, d]
    vf = v[0].float().repeat_interleave(group, dim=1)
    s = torch.einsum("hd,nhd->hn", qf, kf) / math.sqrt(q.shape[-1])
    return torch.einsum("hn,nhd->hd", torch.softmax(s, dim=-1), vf)[None]


def splits_of(workspace_bytes, batch, heads, dv):
    """The split count a workspace size implies (docs/API.md: splits x batch x heads x
    seqlen_q x (dv + 1) fp32 values, two arrays each rounded up to 256 bytes)."""
    if workspace_bytes == 0:
        return 1
    up = lambda n: (n + 255) // 256 * 256  # noqa: E731
    for s in range(2, 129):
        if up(s * batch * heads * dv * 4) + up(s * batch * heads * 4) == workspace_bytes:
            return s
    return None


def decode_handle(flashjit):
    """The decode handle flashjit got for the current shape (one at a time here)."""
    from flashjit import _runtime
    found = [value for key, value in _runtime._kernels.items() if key[10]]
    return found[-1] if found else None


def variant_of(flashjit, handle, info, batch, n, heads, heads_kv):
    """(tile, origin, tuned_us) of the decode variant fj_decode dispatches this shape to:
    the decode bucket q<H/Hkv>.k<N>.bh<B*Hkv> (query rows packed per KV head, keys,
    (sequence, KV head) pairs) rounded up to powers of 2, else the primary decode one."""
    from flashjit import _capi
    lib = _capi.library()
    pow2 = lambda x: 1 << max(0, (x - 1).bit_length())  # noqa: E731
    want = f"q{pow2(heads // heads_kv)}.k{pow2(n)}.bh{pow2(batch * heads_kv)}"
    first = info.num_variants - info.num_decode_variants
    chosen = None
    for i in range(first, info.num_variants):
        vi = _capi.new(_capi.VariantInfo)
        lib.check("fj_kernel_variant_info", lib.lib.fj_kernel_variant_info(handle, i,
                                                                           C.byref(vi)))
        entry = _capi.struct_dict(vi)
        if chosen is None or entry["bucket"] == want:
            chosen = entry
    if chosen is None:
        return dict(tile="?", bucket="?", origin="?", tuned_us=0.0)
    return dict(tile=chosen["tile"], bucket=chosen["bucket"],
                origin=_capi.ORIGINS.get(chosen["origin"], chosen["origin"]),
                tuned_us=chosen["tuned_us"], exact_bucket=chosen["bucket"] == want)


def workspace_bytes(flashjit, handle, batch, n):
    from flashjit import _capi
    lib = _capi.library()
    args = _capi.new(_capi.DecodeArgs, batch=batch, seqlen_q=1, seqlen_k=n)
    size = C.c_size_t()
    lib.check("fj_decode_workspace_size",
              lib.lib.fj_decode_workspace_size(handle, C.byref(args), C.byref(size)))
    return size.value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=None, help="libflashjit.so ($FLASHJIT_LIBRARY, else the "
                                                "package's search)")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--batches", default="1,4,16,64")
    ap.add_argument("--seqlens", default="1024,4096,16384,65536")
    ap.add_argument("--head-dims", default="128,64")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=0,
                    help="KV heads (default: --heads, MHA); fewer: GQA, the peers called with "
                         "enable_gqa=True")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--max-gb", type=float, default=16.0,
                    help="skip shapes whose K+V exceed this (GB, 1e9 bytes)")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--peer-layout", choices=("contiguous", "view"), default="contiguous")
    ap.add_argument("--tune-mode", default="default",
                    choices=("auto", "default", "cached", "heuristic", "exhaustive"))
    ap.add_argument("--tune-budget", type=float, default=3.0,
                    help="tuning seconds per (description, shape bucket) and family")
    ap.add_argument("--cache-path", default=None,
                    help="the flashjit user cache ('' in memory; default: the library's)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    if a.iters < 20:
        ap.error("--iters must be at least 20")
    if a.lib:
        os.environ["FLASHJIT_LIBRARY"] = os.path.abspath(a.lib)
    sys.path.insert(0, os.path.join(REPO, "python"))
    import flashjit
    from flashjit import _runtime
    if not flashjit.has_decode():
        sys.exit(f"{flashjit.library_path()} (version {flashjit.version()}) has no fj_decode")
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    dev = torch.cuda.get_device_properties(0)
    l2 = dev.L2_cache_size
    cycles = sleep_cycles_per_us()
    H = a.heads
    Hk = a.heads_kv or a.heads
    head = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__,
                flashjit=flashjit.version(), library=flashjit.library_path(),
                cudnn=torch.backends.cudnn.version(), args=vars(a), l2_bytes=l2)
    print(f"device {head['device']}, flashjit {head['flashjit']} ({head['library']}), torch "
          f"{head['torch']}, cuDNN {head['cudnn']}; decode q_len 1, {H} query / {Hk} KV heads; tune "
          f"{a.tune_mode} (budget {a.tune_budget:g} s); peers on {a.peer_layout} [B, H, N, d]")
    print("times in us (GPU); GB/s of K+V; x cudnn / x fa2: flashjit's throughput over the "
          "peer's; paged: pages of "
          f"{a.page_size}, shuffled, its time over the contiguous cache's")
    print(f"{'dtype':5} {'d':>4} {'B':>3} {'N':>6} {'K+V GB':>7} {'flashjit':>9} {'GB/s':>6} "
          f"{'cudnn':>9} {'fa2':>9} {'x cudnn':>7} {'x fa2':>6} {'paged':>9} {'p/c':>5} "
          f"{'splits':>6} {'tile':16} {'diff cudnn':>10} {'diff fa2':>9} {'diff pg':>8} check")
    rows = []
    path = os.path.join(a.out, "decode_peers_bench.json")
    for dname in a.dtypes.split(","):
        dtype = DTYPES[dname]
        for d in map(int, a.head_dims.split(",")):
            for B in map(int, a.batches.split(",")):
                for N in map(int, a.seqlens.split(",")):
                    kv_bytes = 2 * B * N * Hk * d * 2
                    row = dict(dtype=dname, d=d, B=B, N=N, H=H, Hkv=Hk, kv_gb=kv_bytes / 1e9)
                    if kv_bytes / 1e9 > a.max_gb:
                        row["skipped"] = f"K+V {kv_bytes / 1e9:.1f} GB > --max-gb {a.max_gb:g}"
                        print(f"{dname:5} {d:>4} {B:>3} {N:>6} {kv_bytes / 1e9:7.2f}  skipped "
                              f"({row['skipped']})", flush=True)
                        rows.append(row)
                        continue
                    run_shape(a, flashjit, _runtime, row, dtype, d, B, N, H, Hk, kv_bytes,
                              l2, cycles)
                    rows.append(row)
                    torch.cuda.empty_cache()
                    json.dump(dict(head, rows=rows), open(path, "w"), indent=1)
    summary = {}
    ran = [r for r in rows if "flashjit_us" in r]
    for peer in PEERS:
        for scope, sel in [("all", ran)] + [(f"d{d}", [r for r in ran if r["d"] == d])
                                            for d in sorted({r["d"] for r in ran})]:
            ratios = [r[f"{peer}_us"] / r["flashjit_us"] for r in sel if r.get(f"{peer}_us")]
            if ratios:
                summary[f"{peer}_{scope}"] = dict(geomean=geomean(ratios), min=min(ratios),
                                                  max=max(ratios), shapes=len(ratios),
                                                  faster=sum(x >= 1 for x in ratios))
    paged = [r["paged_us"] / r["flashjit_us"] for r in ran if r.get("paged_us")]
    if paged:
        summary["paged_over_contiguous"] = dict(geomean=geomean(paged), min=min(paged),
                                                max=max(paged), shapes=len(paged))
    for key, s in summary.items():
        what = "paged time / contiguous time" if key == "paged_over_contiguous" else \
            f"flashjit / {key.split('_')[0]} ({key.split('_')[1]}), throughput"
        extra = f", flashjit faster on {s['faster']}" if "faster" in s else ""
        print(f"{what}: geometric mean {s['geomean']:.3f} (min {s['min']:.3f}, max "
              f"{s['max']:.3f}, {s['shapes']} shapes{extra})")
    unavailable = {p: [f"B{r['B']} N{r['N']} d{r['d']}" for r in ran if r.get(f"{p}_us") is None]
                   for p in PEERS}
    for p, shapes in unavailable.items():
        if shapes:
            print(f"{p} unavailable for {len(shapes)} shapes: {', '.join(shapes)}")
    failed = [r for r in ran if not r["passed"]]
    print(f"correctness: {len(ran) - len(failed)} passed, {len(failed)} failed; "
          f"{len(rows) - len(ran)} shapes skipped")
    json.dump(dict(head, rows=rows, summary=summary), open(path, "w"), indent=1)
    return 1 if failed else 0


def run_shape(a, flashjit, _runtime, row, dtype, d, B, N, H, Hk, kv_bytes, l2, cycles):
    sets = max(1, math.ceil(2 * l2 / kv_bytes))
    row["sets"] = sets
    data = [dict(q=torch.randn(B, 1, H, d, device="cuda", dtype=dtype),
                 k=torch.randn(B, N, Hk, d, device="cuda", dtype=dtype),
                 v=torch.randn(B, N, Hk, d, device="cuda", dtype=dtype)) for _ in range(sets)]
    gqa = dict(enable_gqa=True) if Hk != H else {}
    # 1. flashjit, contiguous, with a handle got (tuned) for this shape.
    _runtime.forget_decode_kernels()
    t0 = time.perf_counter()
    with flashjit.tuning(tune_mode=a.tune_mode, budget_s=a.tune_budget,
                         cache_path=a.cache_path):
        o_fj = flashjit.decode(data[0]["q"], data[0]["k"], data[0]["v"])
    torch.cuda.synchronize()
    row["get_s"] = time.perf_counter() - t0
    handle, info, _ = decode_handle(flashjit)
    row.update(variant_of(flashjit, handle, info, B, N, H, Hk))
    row["workspace_bytes"] = workspace_bytes(flashjit, handle, B, N)
    row["splits"] = splits_of(row["workspace_bytes"], B, H, d)
    row["flashjit_us"] = median_us(lambda i: flashjit.decode(data[i]["q"], data[i]["k"],
                                                             data[i]["v"]),
                                   sets, a.iters, a.warmup, cycles)
    row["flashjit_gbs"] = kv_bytes / row["flashjit_us"] / 1e3
    # Correctness: sequence 0 against fp32; the peers' errors make the bar.
    ref = reference0(data[0]["q"], data[0]["k"], data[0]["v"])
    row["error"] = (o_fj[0].float() - ref).abs().max().item()
    peer_errors = []
    # 2. the peers, one backend at a time, on the same values.
    if a.peer_layout == "contiguous":
        peer = [dict(q=s["q"].transpose(1, 2).contiguous(), k=s["k"].transpose(1, 2).contiguous(),
                     v=s["v"].transpose(1, 2).contiguous()) for s in data]
    else:
        peer = [dict(q=s["q"].transpose(1, 2), k=s["k"].transpose(1, 2),
                     v=s["v"].transpose(1, 2)) for s in data]
    for name, backend in PEERS.items():
        row[f"{name}_us"] = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with sdpa_kernel(backend):
                    o_peer = F.scaled_dot_product_attention(peer[0]["q"], peer[0]["k"],
                                                            peer[0]["v"], **gqa)
                    o_peer = o_peer.transpose(1, 2)  # [B, 1, H, d]
                    row[f"diff_{name}"] = (o_fj.float() - o_peer.float()).abs().max().item()
                    peer_errors.append((o_peer[0].float() - ref).abs().max().item())
                    row[f"{name}_us"] = median_us(
                        lambda i: F.scaled_dot_product_attention(peer[i]["q"], peer[i]["k"],
                                                                 peer[i]["v"], **gqa),
                        sets, a.iters, a.warmup, cycles)
                    row[f"{name}_gbs"] = kv_bytes / row[f"{name}_us"] / 1e3
        except Exception as ex:  # the backend cannot run this shape (or failed)
            row[f"{name}_us"] = None
            row[f"{name}_error"] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:160]}"
    del peer
    torch.cuda.empty_cache()
    row["bar"] = 2 * max(peer_errors) + 1e-5 if peer_errors else 1e-2
    row["passed"] = bool(math.isfinite(row["error"]) and row["error"] <= row["bar"])
    # 3. flashjit on a paged copy: pages of page_size tokens in a shuffled order.
    P = a.page_size
    if N % P == 0:
        width = N // P
        lens = torch.full((B,), N, dtype=torch.int32, device="cuda")
        paged = []
        for s in data:
            table = torch.randperm(B * width, device="cuda").view(B, width).to(torch.int32)
            kp = torch.empty(B * width, P, Hk, d, device="cuda", dtype=dtype)
            vp = torch.empty_like(kp)
            index = table.flatten().long()
            kp.index_copy_(0, index, s["k"].reshape(B * width, P, Hk, d))
            vp.index_copy_(0, index, s["v"].reshape(B * width, P, Hk, d))
            paged.append(dict(q=s["q"], k=kp, v=vp, table=table))
        o_pg = flashjit.decode(paged[0]["q"], paged[0]["k"], paged[0]["v"], lens,
                               paged[0]["table"])
        row["diff_paged"] = (o_pg.float() - o_fj.float()).abs().max().item()
        row["paged_us"] = median_us(lambda i: flashjit.decode(
            paged[i]["q"], paged[i]["k"], paged[i]["v"], lens, paged[i]["table"]),
            sets, a.iters, a.warmup, cycles)
        del paged
    else:
        row["paged_us"] = None
    del data

    def us(x):
        return f"{x:9.1f}" if x else f"{'-':>9}"

    def ratio(p, width):
        return f"{row[p + '_us'] / row['flashjit_us']:{width}.2f}" if row.get(p + "_us") \
            else f"{'-':>{width}}"

    def diff(key, width):
        return f"{row[key]:{width}.1e}" if key in row else f"{'-':>{width}}"
    pc = f"{row['paged_us'] / row['flashjit_us']:5.2f}" if row["paged_us"] else f"{'-':>5}"
    check = ("ok" if row["passed"] else "FAIL") + f" ({row['error']:.1e} <= {row['bar']:.1e})"
    print(f"{row['dtype']:5} {d:>4} {B:>3} {N:>6} {row['kv_gb']:7.2f} {us(row['flashjit_us'])} "
          f"{row['flashjit_gbs']:6.0f} {us(row['cudnn_us'])} {us(row['fa2_us'])} "
          f"{ratio('cudnn', 7)} {ratio('fa2', 6)} {us(row['paged_us'])} {pc} "
          f"{row['splits'] if row['splits'] else '?':>6} {row['tile']:16} "
          f"{diff('diff_cudnn', 10)} {diff('diff_fa2', 9)} {diff('diff_paged', 8)} {check}",
          flush=True)
    for name in PEERS:
        if row.get(f"{name}_error"):
            print(f"      {name} unavailable: {row[name + '_error']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
