#!/usr/bin/env python3
"""Attention features (issue 28): flashjit's compiled-in variants against its own plain
kernels and against FlexAttention (torch.compile'd flex_attention with the same score and
mask functions), in one process, on the same inputs.

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 bench/features_bench.py --out $OUT/features

Shapes: bf16, head dims 64 and 128, N = 1k..16k, batch * N = 16384 tokens, heads * d =
2048 (the peers' baseline shapes). Variants:
  plain       no mask                      (the reference for softcap and ALiBi)
  causal      causal                       (the reference for the window)
  window1024  causal with a 1024-key window: keys i - 1024 .. i
  alibi       ALiBi, slopes 2^(-8 (h + 1) / H), no mask
  softcap30   30 * tanh(score / 30), no mask
  document    a document mask (documents of 1/4 N give or take, ids in a tensor the
              user's mask_mod reads), through the user-code hook, with a block mask
              (flashjit.create_block_mask, shared across batch and heads as FlexAttention's
              create_block_mask(mask, None, None, N, N)) built once per shape outside the
              timed region: key tiles between documents are skipped, tiles inside one run
              without the mask. mask_build_ms: the median of 5 rebuilds (BlockMask.update,
              CUDA events; FlexAttention's create_block_mask, wall clock, in
              flex_mask_build_ms); vs_own_document_nomask: the mask's speed-up
  document_nomask  the same mask_mod without a block mask: every tile evaluates the mask
  document_varlen  the same documents as a variable-length batch (cu_seqlens), the way
              to run packed documents through flashjit; FlexAttention runs its mask
FLOPs are the pairs each query actually sees (4 * d per pair, as the papers count), so
a window's TFLOP/s are over the pairs in its band. The causal and window forwards also
get flashjit_tile_tflops, over the key tiles each kernel must compute at the tile it ran
(edge and diagonal tiles whole: issue 28's measure for the window), and the window
vs_own_causal_tiles, the ratio of the two. Each flashjit handle is tuned at every N of the sweep
(--tune-lengths ladder, the setting for a model called with many lengths; with 'hinted'
every N ran on the first N's tile, which is how runs before 2026-11-28 measured the
N > 1k shapes). With --backward (0.9: the features'
backward pass) each call is a training step's attention, forward and backward
(torch.autograd.grad of the output against a random dO): 3.5 times the forward's FLOPs
(the backward's 2.5, as the papers count); the document variant's block mask serves the
backward pass too (0.10: bwd_wgmma skips the steps it drops; before, only
document_nomask and document_varlen ran). Each system is timed with CUDA events
after a warm-up and --heat-s seconds of its own calls (the GPU's power-capped steady
state, docs/PERF.md bw17), median of --iters samples of 8 back-to-back calls (time_ms);
every input is 64 MiB (over the L2).
Outputs are compared between flashjit and FlexAttention (max |diff|) as a sanity check.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import flashjit  # noqa: E402
from peers_bench import heat  # noqa: E402  (bench/ is the script's own folder)

# Every (variant, shape) is its own compiled flex_attention: without room for them all,
# dynamo falls back to eager flex_attention (which materialises the N x N scores).
torch._dynamo.config.cache_size_limit = 1024
torch._dynamo.config.accumulated_cache_size_limit = 4096

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    FLEX = torch.compile(flex_attention, dynamic=False)
except Exception as e:  # noqa: BLE001 - any failure just drops the peer
    print(f"FlexAttention unavailable: {e}")
    FLEX = None

VARIANTS = ["plain", "causal", "window1024", "alibi", "softcap30", "document", "document_nomask",
            "document_varlen"]
WINDOW = 1024


def time_ms(fn, iters, back_to_back=8, heat_s=0.5):
    """Median over `iters` samples of `back_to_back` calls enqueued between two events,
    per call: the GPU's time per call once the host's own time per call (Python, the
    operator's dispatch: tens of microseconds, on both sides) is hidden behind the
    previous kernel, as in a model's stream of work. A single call between two events
    counted that host time too, which at N = 1k was as long as the kernel. With
    heat_s > 0 the calls run that long first, so that the reading is at the GPU's
    power-capped steady state, not at the boost clock a pause leaves (docs/PERF.md bw17)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    heat(fn, heat_s)
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(back_to_back):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / back_to_back)
    return statistics.median(times)


def visible_pairs(variant, n, doc):
    if variant in ("plain", "alibi", "softcap30"):
        return n * n
    if variant == "causal":
        return n * (n + 1) // 2
    if variant == "window1024":
        return sum(min(i, WINDOW) + 1 for i in range(n))
    # document (either way): pairs within each document (no causal)
    counts = torch.bincount(doc[:n].cpu())
    return int((counts.long() ** 2).sum())


def causal_tile_pairs(n, block_m, block_n, window=None, walk_rows=None):
    """The (query, key) pairs of the key tiles a causal kernel (with a left window of
    `window` keys, or none) must compute at tile block_m x block_n: for each query block
    (or each walk_rows rows of it, where its warpgroups walk their own tiles), every
    block_n-key tile from its first row's left bound to its last row's diagonal, whole
    (issue 28's "TFLOP/s counted over the tiles it must compute": the edge tiles' masked
    pairs are computed too)."""
    pairs = 0
    step = walk_rows or block_m
    for q0 in range(0, n, step):
        rows = min(step, n - q0)
        lo, hi = max(0, q0 - window) if window else 0, q0 + rows - 1
        pairs += rows * (hi // block_n - lo // block_n + 1) * block_n
    return pairs


def causal_tile(q, k, v, window):
    """(block_m, block_n, warps) of the variant that the causal kernel handle with this
    window ((WINDOW, 0) or None) and q's head dim runs for q, k, v (bshd), or None."""
    import ctypes as C
    from flashjit import _capi, _ops, _runtime
    lib = _capi.library()
    b, n = q.shape[0], q.shape[1]
    for key, (handle, _, _) in list(_runtime._kernels.items()):
        if key[9].window != window or not key[6] or key[2] != q.shape[3]:
            continue
        args = _ops.forward_args(q, k, v, "bshd", b, n, k.shape[1], None, None, None,
                                 _capi.mod_args())
        info = _capi.new(_capi.DispatchInfo)
        if lib.lib.fj_forward_dispatch_info(handle, C.byref(args), C.byref(info)) != 0:
            continue
        vi = _capi.new(_capi.VariantInfo)
        if lib.lib.fj_kernel_variant_info(handle, info.variant, C.byref(vi)) == 0:
            return vi.block_m, vi.block_n, vi.warps
    return None


def documents(n, device):
    """Document ids of n positions: lengths around n/4, not multiples of the tiles."""
    g = torch.Generator().manual_seed(n)
    ids, start, k = torch.empty(n, dtype=torch.int32), 0, 0
    while start < n:
        length = int(n / 4 * (0.6 + 0.8 * torch.rand(1, generator=g).item())) | 1
        ids[start:start + length] = k
        start += length
        k += 1
    return ids.to(device)


DOC_MASK = ("const int *doc = (const int *)args.tensor[0];\n"
            "return doc[q_idx] == doc[kv_idx];")


def mask_build_ms(mask, iters=5):
    """Median GPU time of `iters` rebuilds of a block mask (BlockMask.update), ms; each
    queued behind a GPU sleep, so that the host's launch is not what is timed."""
    mask.update()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)
        a.record()
        mask.update()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def flashjit_call(variant, q, k, v, slopes, doc):
    """(the call to time, its block mask or None). The document variant's mask is built
    here, once per shape, outside the timed calls."""
    kw = {}
    if variant == "causal":
        kw["causal"] = True
    elif variant == "window1024":
        kw.update(causal=True, window=(WINDOW, 0))
    elif variant == "alibi":
        kw["alibi_slopes"] = slopes
    elif variant == "softcap30":
        kw["softcap"] = 30.0
    elif variant == "document":
        # doc[q_idx] == doc[kv_idx] depends on neither b nor h: one mask for all.
        mask = flashjit.create_block_mask(q, k, v, mask_mod=DOC_MASK, mod_tensors=(doc,),
                                          shared_across_batch=True, shared_across_heads=True)
        return (lambda: flashjit.attention(q, k, v, block_mask=mask)), mask
    elif variant == "document_nomask":
        kw.update(mask_mod=DOC_MASK, mod_tensors=(doc,))
    elif variant == "document_varlen":
        b, n, h, d = q.shape
        lengths = torch.bincount(doc.long()).tolist()
        cu = torch.tensor([0] + [sum(lengths[:i + 1]) + r * n for r in range(b)
                                 for i in range(len(lengths))][:-1] + [b * n],
                          dtype=torch.int32, device=q.device)
        cu = torch.unique_consecutive(cu)
        qv, kv_, vv = (t.reshape(b * n, h, d) for t in (q, k, v))
        return (lambda: flashjit.attention(qv, kv_, vv, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                           max_seqlen_q=max(lengths),
                                           max_seqlen_k=max(lengths)).reshape(b, n, h, d)), None
    return (lambda: flashjit.attention(q, k, v, **kw)), None


def flex_call(variant, qh, kh, vh, slopes, doc, n):
    if FLEX is None:
        return None
    score_mod, mask = None, None
    if variant == "causal":
        mask = lambda b, h, qi, ki: qi >= ki  # noqa: E731
    elif variant == "window1024":
        mask = lambda b, h, qi, ki: (qi >= ki) & (qi - ki <= WINDOW)  # noqa: E731
    elif variant in ("document", "document_nomask", "document_varlen"):
        mask = lambda b, h, qi, ki: doc[qi] == doc[ki]  # noqa: E731
    elif variant == "alibi":
        score_mod = lambda s, b, h, qi, ki: s - slopes[h] * (qi - ki).abs()  # noqa: E731
    elif variant == "softcap30":
        score_mod = lambda s, b, h, qi, ki: 30.0 * torch.tanh(s / 30.0)  # noqa: E731
    block_mask = create_block_mask(mask, None, None, n, n, device="cuda") if mask else None
    return lambda: FLEX(qh, kh, vh, score_mod=score_mod, block_mask=block_mask)


def training_step(call, inputs, do):
    """A call that runs `call`'s forward and its backward against `do`, and returns the
    gradient of q (in q's layout: what the sanity check compares)."""
    def step():
        return torch.autograd.grad(call(), inputs, do)[0]
    return step


def flex_mask_build_ms(doc, n, iters=3):
    """Median wall-clock time of FlexAttention's create_block_mask for the document mask
    (what flashjit's mask_build_ms is compared with), ms."""
    if FLEX is None:
        return None
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        create_block_mask(lambda b, h, qi, ki: doc[qi] == doc[ki], None, None, n, n,
                          device="cuda")
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--heat-s", type=float, default=0.5,
                    help="seconds of each system's own calls before it is timed: the GPU's "
                         "power-capped steady state (0: the warm-up alone, as before bw17)")
    ap.add_argument("--budget-s", type=float, default=2.0)
    ap.add_argument("--tune-lengths", default="ladder",
                    help="flashjit.configure's tune_lengths: 'ladder' (default) tunes each "
                         "handle at every N of the sweep, as a model called with many "
                         "lengths is set up; 'hinted' runs every N on the first N's tile")
    ap.add_argument("--out", default="features")
    ap.add_argument("--backward", action="store_true",
                    help="time forward + backward (training) instead of the forward")
    a = ap.parse_args()
    flashjit.configure(budget_s=a.budget_s, tune_lengths=a.tune_lengths)
    torch.manual_seed(0)
    rows = []
    for d in map(int, a.head_dims.split(",")):
        heads = 2048 // d
        for n in map(int, a.seqlens.split(",")):
            b = 16384 // n
            q, k, v = (torch.randn(b, n, heads, d, device="cuda", dtype=torch.bfloat16)
                       .requires_grad_(a.backward) for _ in range(3))
            qh, kh, vh = (t.detach().transpose(1, 2).contiguous().requires_grad_(a.backward)
                          for t in (q, k, v))
            do = torch.randn_like(q) if a.backward else None
            slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)],
                                  device="cuda", dtype=torch.float32)
            doc = documents(n, "cuda")
            for variant in a.variants.split(","):
                flops = 4.0 * d * b * heads * visible_pairs(variant, n, doc)
                row = {"d": d, "n": n, "batch": b, "heads": heads, "variant": variant}
                if a.backward:
                    if variant == "document" and not getattr(
                            flashjit._capi.library(), "has_backward_block_mask", False):
                        continue  # before 0.10 its mask served the forward only
                    flops *= 3.5
                    row["pass"] = "forward+backward"
                fj, mask = flashjit_call(variant, q, k, v, slopes, doc)  # gets (tunes)
                if a.backward:
                    fj = training_step(fj, (q, k, v), do)
                out_fj = fj()                                         # the kernel
                row["flashjit_ms"] = time_ms(fj, a.iters, heat_s=a.heat_s)
                row["flashjit_tflops"] = flops / row["flashjit_ms"] / 1e9
                if variant in ("causal", "window1024") and not a.backward:
                    window = (WINDOW, 0) if variant == "window1024" else None
                    tile = causal_tile(q, k, v, window)
                    if tile is not None:
                        bm, bn, warps = tile
                        row["tile"] = "bm%d.bn%d.w%d" % tile
                        # fwd_wgmma's three consumer warpgroups (bm192, 16 warps) walk
                        # only their own 64 rows' tiles of a window (docs/PERF.md s63)
                        walk_rows = 64 if window and bm == 192 and warps == 16 else None
                        pairs = causal_tile_pairs(n, bm, bn, window and WINDOW, walk_rows)
                        row["flashjit_tile_tflops"] = (4.0 * d * b * heads * pairs /
                                                       row["flashjit_ms"] / 1e9)
                if mask is not None:
                    row["mask_build_ms"] = mask_build_ms(mask)
                    flex_build = flex_mask_build_ms(doc, n)
                    if flex_build is not None:
                        row["flex_mask_build_ms"] = flex_build
                    # the same call without the mask: the same output up to rounding
                    def nomask_call():
                        return flashjit.attention(q, k, v, mask_mod=DOC_MASK, mod_tensors=(doc,))
                    nomask = (training_step(nomask_call, (q, k, v), do)() if a.backward
                              else nomask_call())
                    row["max_diff_vs_nomask"] = float((out_fj.float() - nomask.float())
                                                      .abs().max())
                fx = flex_call(variant, qh, kh, vh, slopes, doc, n)
                if fx is not None and a.backward:
                    dh = do.transpose(1, 2).contiguous()
                    fx = training_step(fx, (qh, kh, vh), dh)
                if fx is not None:
                    out_fx = fx().transpose(1, 2)
                    row["max_diff_vs_flex"] = float((out_fj.float() - out_fx.float()).abs().max())
                    row["flex_ms"] = time_ms(fx, a.iters, heat_s=a.heat_s)
                    row["flex_tflops"] = flops / row["flex_ms"] / 1e9
                    row["vs_flex"] = row["flex_ms"] / row["flashjit_ms"]
                rows.append(row)
                print(json.dumps(row), flush=True)
                if mask is not None:
                    mask.close()
            del q, k, v, qh, kh, vh
            torch.cuda.empty_cache()
    # Ratios to flashjit's own plain kernels of the same shape.
    base = {(r["d"], r["n"], r["variant"]): r["flashjit_tflops"] for r in rows}
    for r in rows:
        ref = {"window1024": "causal", "alibi": "plain", "softcap30": "plain",
               "document": "document_nomask"}.get(r["variant"])
        if ref and (r["d"], r["n"], ref) in base:
            r["vs_own_" + ref] = r["flashjit_tflops"] / base[(r["d"], r["n"], ref)]
            if r["variant"] == "window1024":
                causal = next((c for c in rows if (c["d"], c["n"], c["variant"]) ==
                               (r["d"], r["n"], "causal")), {})
                if "flashjit_tile_tflops" in r and "flashjit_tile_tflops" in causal:
                    r["vs_own_causal_tiles"] = (r["flashjit_tile_tflops"] /
                                                causal["flashjit_tile_tflops"])
    os.makedirs(os.path.dirname(os.path.abspath(a.out + ".json")), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "rows": rows}, f, indent=1)
    nan = float("nan")
    print(f"\n{'d':>4} {'N':>6} {'variant':<15} {'fj TF/s':>8} {'flex TF/s':>9} {'vs flex':>8} "
          f"{'vs own':>7} {'maxdiff':>8} {'mask ms':>8} {'flex mask ms':>12}")
    for r in rows:
        own = next((v for k, v in r.items() if k.startswith("vs_own_")), None)
        print(f"{r['d']:>4} {r['n']:>6} {r['variant']:<15} {r['flashjit_tflops']:>8.1f} "
              f"{r.get('flex_tflops', nan):>9.1f} {r.get('vs_flex', nan):>8.2f} "
              f"{own if own is not None else nan:>7.2f} "
              f"{r.get('max_diff_vs_flex', nan):>8.1e} {r.get('mask_build_ms', nan):>8.3f} "
              f"{r.get('flex_mask_build_ms', nan):>12.3f}")
    for r in rows:
        if "vs_own_causal_tiles" in r:
            print(f"window1024 d {r['d']} N {r['n']}, tile {r['tile']}: "
                  f"{r['flashjit_tile_tflops']:.1f} TF/s over the tiles it computes, "
                  f"{r['vs_own_causal_tiles']:.2f}x the causal kernel's counted so "
                  f"(band: {r['vs_own_causal']:.2f}x)")
    for variant in a.variants.split(","):
        ratios = [r["vs_flex"] for r in rows if r["variant"] == variant and "vs_flex" in r]
        if ratios:
            gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"{variant:<15} vs FlexAttention: geomean {gm:.2f}x, min {min(ratios):.2f}x")


if __name__ == "__main__":
    main()
