#!/usr/bin/env python3
"""FP8 (torch.float8_e4m3fn, C API 0.7) through flashjit.attention on a GPU with PyTorch
(run by hand on the GPU machine; gpu_test_torch.py runs these cases too; prints each
case, the counts, and exits non-zero on any failure):

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 tests/python/gpu_test_fp8.py

e4m3 q, k and v quantized from random values whose scale differs per sequence and
key/value head, against the fp32 reference over the dequantized inputs (q.float() *
q_descale, ...; causal aligned bottom-right, the mask built explicitly): head dims 64
and 128 (and dv != d), causal or not, GQA and MQA, odd lengths (257 x 389, 389 x 257
whose first rows see no key, 1 x 1), descales per tensor, per (sequence, kv head), none,
mixed (copied by the operator), [batch, kv heads] views of one factor (strides 0), bf16
and fp16 outputs, a BHSD view; through the eager fast path, the operator (return_lse,
with the LSE checked), torch.compile(fullgraph=True) and a CUDA graph replayed on new
inputs and factors; one kernel handle per output type; no backward (NotImplementedError)
and the argument errors.

The bar, FlashAttention-3's for its FP8 forward: max|o - ref| <= 3 x max|naive - ref| +
max(1e-5, FA3's fwd_atol), the naive computed by torch in the output's 16-bit type with
the probabilities cast to float8_e4m3fn before P V; also max|o - ref| <= 0.15 max|ref|
and no NaN. The LSE within max(1e-3, 2 x the naive's LSE error). Skips (exit 0) without
torch, a CUDA device, an sm_90 device or a library with FP8."""
import itertools
import math
import sys

import gpu_harness
from gpu_harness import Skip, case, causal_mask

torch = gpu_harness.import_torch(__name__ == "__main__")
import flashjit  # noqa: E402  (gpu_harness puts this checkout's package on the path)

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


# ---- inputs, descales, the two references --------------------------------------------
def per_head(factor, heads):
    """A factor as it multiplies a [batch, seq, heads, d] tensor: None, a 0-d/1-element
    tensor (per tensor), or [batch, heads_kv] (query head h uses kv head h // group)."""
    if factor is None:
        return 1.0
    if factor.dim() < 2:
        return factor.reshape(1, 1, 1, 1)
    group = heads // factor.shape[1]
    return factor.repeat_interleave(group, dim=1)[:, None, :, None]


def quantize(x, hkv, how):
    """(e4m3 tensor, descale) of fp32 x [b, s, h, d]: how 'tensor' (one factor, 0-d),
    'head' ([b, hkv], each (sequence, kv head) scaled to e4m3's range), 'none' (no
    factor: x as it rounds)."""
    if how == "none":
        return x.to(E4M3), None
    if how == "tensor":
        descale = (x.abs().amax() / E4M3_MAX).float()
    else:
        b, s, h, d = x.shape
        amax = x.abs().reshape(b, s, hkv, h // hkv, d).amax(dim=(1, 3, 4))
        descale = (amax / E4M3_MAX).float().contiguous()
    return (x / per_head(descale, x.shape[2])).to(E4M3), descale


def dequantize(x8, descale):
    return x8.float() * per_head(descale, x8.shape[2])


def fp8_inputs(b, sq, sk, hq, hkv, d, dv, how, seed=0):
    """e4m3 q, k, v and their descales: random values whose scale differs per sequence
    and key/value head (0.5 to 2), so that per-head factors differ."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def values(s, h, dim):
        mag = torch.rand(b, 1, hkv, 1, device="cuda", generator=g) * 1.5 + 0.5
        mag = mag.repeat_interleave(h // hkv, dim=2)
        return torch.randn(b, s, h, dim, device="cuda", generator=g) * mag
    q8, qs = quantize(values(sq, hq, d), hkv, how)
    k8, ks = quantize(values(sk, hkv, d), hkv, how)
    v8, vs = quantize(values(sk, hkv, dv), hkv, how)
    return q8, k8, v8, qs, ks, vs


def _scores(q, k, causal, scale):
    """[b, hq, sq, sk] scores of BSHD q, k (k's heads repeated for GQA), in their dtype."""
    hq, hk = q.shape[2], k.shape[2]
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    if hq != hk:
        kt = kt.repeat_interleave(hq // hk, dim=1)
    s = qt @ (kt * scale).transpose(-1, -2)  # FA3's reorder_ops: the scale on k
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[1], k.shape[1]), float("-inf"))
    return s


def _pv(p, v, hq):
    vt = v.transpose(1, 2)
    if vt.shape[1] != hq:
        vt = vt.repeat_interleave(hq // vt.shape[1], dim=1)
    return (p @ vt).transpose(1, 2)


def reference(q8, k8, v8, qs, ks, vs, causal, scale):
    """fp32 over the dequantized inputs: (o [b, sq, hq, dv], lse [b, hq, sq]); rows that
    see no key: o 0, lse -inf."""
    q, k, v = dequantize(q8, qs), dequantize(k8, ks), dequantize(v8, vs)
    s = _scores(q, k, causal, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return _pv(p, v, q.shape[2]), lse


def naive(q8, k8, v8, qs, ks, vs, causal, scale, out_dtype):
    """FlashAttention-3's naive FP8 attention (its test's attention_ref with upcast=False,
    reorder_ops=True, intermediate_dtype=float8_e4m3fn): the dequantized inputs in the
    output's 16-bit type, the scores and softmax in it, the probabilities cast to e4m3
    before P V. Returns (o, lse of its scores)."""
    q, k, v = (dequantize(x, f).to(out_dtype) for x, f in ((q8, qs), (k8, ks), (v8, vs)))
    s = _scores(q, k, causal, scale)
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0).to(E4M3).to(out_dtype)
    return _pv(p, v, q.shape[2]), lse


def max_err(a, b):
    """The largest absolute difference, a NaN making it NaN (a failure): unlike
    gpu_harness.max_err, which takes NaNs in `a` as 0, since these references give 0 for
    rows that see no key, as the kernels must."""
    return (a.float() - b.float()).abs().max().item()


def check(o, q8, k8, v8, qs, ks, vs, causal, out_dtype, scale=None, lse=None, what="o"):
    """o (and lse) against the fp32 reference with the bars above; returns (max|o - ref|,
    its bar, the naive's error)."""
    scale = scale or 1 / math.sqrt(q8.shape[-1])
    assert o.dtype == out_dtype, (o.dtype, out_dtype)
    assert o.shape == (*q8.shape[:3], v8.shape[-1]), (o.shape, q8.shape, v8.shape)
    assert not torch.isnan(o).any(), f"{what}: NaN in o"
    ref, ref_lse = reference(q8, k8, v8, qs, ks, vs, causal, scale)
    low, low_lse = naive(q8, k8, v8, qs, ks, vs, causal, scale, out_dtype)
    err, naive_err = max_err(o, ref), max_err(low, ref)
    fwd_atol = 2 * (ref + 0.3 - 0.3 - ref).abs().max().item()  # FA3's floor
    bar = 3 * naive_err + max(1e-5, fwd_atol)
    assert err <= bar, f"{what}: max|o - ref| {err:.3e} > bar {bar:.3e} (naive {naive_err:.3e})"
    top = ref.abs().max().item()
    assert err <= 0.15 * top + 1e-5, f"{what}: max|o - ref| {err:.3e} > 0.15 max|ref| {top:.3e}"
    if lse is None:
        return err, bar, naive_err
    assert lse.shape == ref_lse.shape and lse.dtype == torch.float32, (lse.shape, lse.dtype)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(lse[~seen], ref_lse[~seen]), "lse of rows that see no key: not -inf"
    lse_err = max_err(lse[seen], ref_lse[seen]) if seen.any() else 0.0
    lse_bar = max(1e-3, 2 * max_err(low_lse[seen], ref_lse[seen]) if seen.any() else 0.0)
    assert lse_err <= lse_bar, f"lse: max error {lse_err:.3e} > bar {lse_bar:.3e}"
    return err, bar, naive_err


# ---- cases -------------------------------------------------------------------------
@case("fp8 forward")
def forward(d, hq, hkv, sq, sk, causal, how, out_dtype, dv=None, path="eager"):
    """path 'eager' (the fast path), 'op' (return_lse: the operator, the LSE checked),
    'bhsd' (BHSD views of the BSHD tensors)."""
    dv = dv or d
    q8, k8, v8, qs, ks, vs = fp8_inputs(2, sq, sk, hq, hkv, d, dv, how, seed=sq * 7 + sk + d)
    kw = dict(causal=causal, q_descale=qs, k_descale=ks, v_descale=vs)
    if out_dtype != torch.bfloat16:
        kw["out_dtype"] = out_dtype
    lse = None
    if path == "op":
        o, lse = flashjit.attention(q8, k8, v8, return_lse=True, **kw)
    elif path == "bhsd":
        o = flashjit.attention(*(t.transpose(1, 2) for t in (q8, k8, v8)), layout="bhsd",
                               **kw)
        assert o.shape == (2, hq, sq, dv), o.shape
        o = o.transpose(1, 2)
    else:
        o = flashjit.attention(q8, k8, v8, **kw)
    err, bar, naive_err = check(o, q8, k8, v8, qs, ks, vs, causal, out_dtype, lse=lse)
    print(f"      max|o - ref| {err:.2e}, bar {bar:.2e} (naive {naive_err:.2e})")


@case("fp8 descales: mixed kinds, [batch, heads_kv] views, scale")
def descale_kinds():
    b, hq, hkv, d = 2, 8, 2, 128
    q8, k8, v8, qs, ks, vs = fp8_inputs(b, 200, 333, hq, hkv, d, d, "head", seed=5)
    one_q, one_v = qs.amax(), vs.amax()  # 0-d: per tensor
    for kinds in ((one_q, ks, None), (one_q.reshape(1), None, vs),
                  (one_q.expand(b, hkv), ks, one_v.reshape(1, 1).expand(b, hkv)),
                  (qs.t().contiguous().t(), ks, vs),  # [b, hkv] with strides (1, b)
                  (qs.t().contiguous().t(), ks.contiguous(), None)):
        for return_lse in (False, True):  # the fast path (or its fallback) and the operator
            out = flashjit.attention(q8, k8, v8, causal=True, scale=0.1, q_descale=kinds[0],
                                     k_descale=kinds[1], v_descale=kinds[2],
                                     return_lse=return_lse)
            o, lse = out if return_lse else (out, None)
            check(o, q8, k8, v8, *kinds, True, torch.bfloat16, scale=0.1, lse=lse)


@case("fp8: one kernel handle per output type, reused by every shape")
def handles():
    q8, k8, v8, qs, ks, vs = fp8_inputs(1, 64, 64, 4, 2, 64, 64, "tensor", seed=9)

    def count():
        return sum(1 for k in flashjit.info()["kernels"] if k["dtype"] == "e4m3")
    before = count()
    for out_dtype in (None, torch.bfloat16, torch.float16):
        flashjit.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs,
                           out_dtype=out_dtype, scale=0.3)
    assert count() == before + 2, (before, count())
    q8, k8, v8, qs, ks, vs = fp8_inputs(3, 100, 300, 4, 2, 64, 64, "head", seed=10)
    o = flashjit.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs,
                           out_dtype=torch.float16, scale=0.3)
    check(o, q8, k8, v8, qs, ks, vs, False, torch.float16, scale=0.3)
    assert count() == before + 2, (before, count())
    kinds = {(k["out_dtype"], k["backward"]) for k in flashjit.info()["kernels"]
             if k["dtype"] == "e4m3"}
    assert kinds <= {("bf16", False), ("fp16", False)}, kinds


@case("fp8 under torch.compile(fullgraph=True)")
def compiled():
    q8, k8, v8, qs, ks, vs = fp8_inputs(2, 257, 389, 4, 2, 128, 128, "head", seed=11)

    def f(q8, k8, v8, qs, ks, vs):
        return flashjit.attention(q8, k8, v8, causal=True, q_descale=qs, k_descale=ks,
                                  v_descale=vs, out_dtype=torch.float16) * 2
    cf = torch.compile(f, fullgraph=True)
    eager, comp = f(q8, k8, v8, qs, ks, vs), cf(q8, k8, v8, qs, ks, vs)
    assert comp.dtype == torch.float16
    assert torch.equal(eager, comp), max_err(eager, comp)


@case("fp8 in a CUDA graph, replayed on new inputs and descales")
def cuda_graph():
    q8, k8, v8, qs, ks, vs = fp8_inputs(2, 257, 389, 4, 2, 128, 128, "head", seed=12)

    def call():
        return flashjit.attention(q8, k8, v8, causal=True, q_descale=qs, k_descale=ks,
                                  v_descale=vs)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: the kernel (may compile) and the plan
        call()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = call()
    new = fp8_inputs(2, 257, 389, 4, 2, 128, 128, "head", seed=13)
    for t, n in zip((q8, k8, v8, qs, ks, vs), new):
        t.copy_(n)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, call()), "replay differs from a direct call on the new inputs"
    check(out, q8, k8, v8, qs, ks, vs, True, torch.bfloat16)


@case("fp8: no backward pass (NotImplementedError), the forward runs")
def no_backward():
    q8, k8, v8, qs, ks, vs = fp8_inputs(1, 64, 80, 4, 2, 64, 64, "tensor", seed=14)
    try:
        q8.requires_grad_()
    except RuntimeError as ex:  # this torch lets no float8 tensor require grad
        raise Skip(f"float8 tensors cannot require grad here: {ex}")
    o = flashjit.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs)
    check(o.detach(), q8.detach(), k8, v8, qs, ks, vs, False, torch.bfloat16)
    assert o.requires_grad, "the output of a call whose q requires grad has no history"
    try:
        o.float().sum().backward()
    except NotImplementedError as ex:
        assert "does not support FP8" in str(ex), ex
        print(f"      NotImplementedError: {ex}")
    else:
        raise AssertionError("backward through an FP8 call did not raise")


@case("fp8 varlen")
def varlen(d, causal, lens):
    """A variable-length batch (cu_seqlens), with per-(sequence, kv head) factors [batch,
    num_heads_kv]: each sequence's rows of o and lse against its own references, the bars
    taken over the whole batch as over one tensor (a sequence of one row has too few
    samples for a bar of its own: P's rounding to e4m3 decides its error by chance)."""
    hq, hkv = 4, 2
    seqs = [fp8_inputs(1, sq, sk, hq, hkv, d, d, "head", seed=40 + i)
            for i, (sq, sk) in enumerate(lens)]
    q8, k8, v8 = (torch.cat([x[t][0] for x in seqs]) for t in range(3))
    qs, ks, vs = (torch.cat([x[t] for x in seqs]).contiguous() for t in range(3, 6))
    cu_q, cu_k = (torch.tensor([0] + list(itertools.accumulate(n)), dtype=torch.int32,
                               device="cuda") for n in zip(*lens))
    o, lse = flashjit.attention(q8, k8, v8, causal=causal, cu_seqlens_q=cu_q,
                                cu_seqlens_k=cu_k, max_seqlen_q=max(n for n, _ in lens),
                                max_seqlen_k=max(n for _, n in lens), return_lse=True,
                                q_descale=qs, k_descale=ks, v_descale=vs)
    assert not torch.isnan(o).any(), "NaN in o"
    fast = flashjit.attention(q8, k8, v8, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                              max_seqlen_q=max(n for n, _ in lens),
                              max_seqlen_k=max(n for _, n in lens), q_descale=qs,
                              k_descale=ks, v_descale=vs)  # the eager fast path
    assert torch.equal(fast, o), "fast path with cu_seqlens: not the operator's output"
    err = naive_err = top = lse_err = naive_lse_err = floor = 0.0
    for b, (sq, sk) in enumerate(lens):
        rows = slice(int(cu_q[b]), int(cu_q[b + 1]))
        inputs = (*seqs[b][:3], qs[b:b + 1], ks[b:b + 1], vs[b:b + 1], causal,
                  1 / math.sqrt(d))
        ref, ref_lse = reference(*inputs)
        low, low_lse = naive(*inputs, torch.bfloat16)
        seq_err, seq_naive = max_err(o[rows][None], ref), max_err(low, ref)
        print(f"      sequence {b} ({sq}x{sk}): max|o - ref| {seq_err:.3e}, naive {seq_naive:.3e}")
        err, naive_err = max(err, seq_err), max(naive_err, seq_naive)
        top = max(top, ref.abs().max().item())
        floor = max(floor, 2 * (ref + 0.3 - 0.3 - ref).abs().max().item())
        seen = torch.isfinite(ref_lse)
        seq_lse = lse[:, rows][None]
        assert torch.equal(seq_lse[~seen], ref_lse[~seen]), f"sequence {b}: lse of rows that see no key"
        if seen.any():
            lse_err = max(lse_err, max_err(seq_lse[seen], ref_lse[seen]))
            naive_lse_err = max(naive_lse_err, max_err(low_lse[seen], ref_lse[seen]))
    bar = 3 * naive_err + max(1e-5, floor)
    assert err <= bar, f"max|o - ref| {err:.3e} > bar {bar:.3e} (naive {naive_err:.3e})"
    assert err <= 0.15 * top + 1e-5, f"max|o - ref| {err:.3e} > 0.15 max|ref| {top:.3e}"
    lse_bar = max(1e-3, 2 * naive_lse_err)
    assert lse_err <= lse_bar, f"lse: max error {lse_err:.3e} > bar {lse_bar:.3e}"


@case("fp8 argument errors")
def bad_arguments():
    q8, k8, v8, qs, ks, vs = fp8_inputs(2, 64, 80, 4, 2, 64, 64, "head", seed=15)

    def expect(exc, text, *args, **kw):
        try:
            flashjit.attention(*args, **kw)
        except exc as ex:
            assert text in str(ex), (text, str(ex))
        else:
            raise AssertionError(f"no {exc.__name__} ({text})")
    expect(TypeError, "must be the same", q8, k8.to(torch.bfloat16), v8)
    expect(TypeError, "expected torch.float32", q8, k8, v8, q_descale=qs.half())
    expect(ValueError, "expected () or (1,)", q8, k8, v8, k_descale=torch.ones(4, device="cuda"))
    expect(ValueError, "v_descale is on cpu", q8, k8, v8, v_descale=vs.cpu())
    expect(ValueError, "no attention features yet (softcap)", q8, k8, v8, softcap=20.0)
    expect(ValueError, "no attention features yet (window)", q8, k8, v8, window=(16, 0))
    expect(TypeError, "FP8 inputs give o as torch.bfloat16", q8, k8, v8,
           out_dtype=torch.float32)
    b16 = [t.float().to(torch.bfloat16) for t in (q8, k8, v8)]
    expect(ValueError, "the inputs are not FP8", *b16, q_descale=qs)
    cu = torch.tensor([0, 64, 128], dtype=torch.int32, device="cuda")
    kv = k8.reshape(-1, 2, 64)[:128]
    expect(ValueError, "expected () or (1,) (one factor per tensor) or (2, 2)",
           q8.reshape(-1, 4, 64)[:128], kv, kv, cu_seqlens_q=cu, cu_seqlens_k=cu,
           max_seqlen_q=64, max_seqlen_k=64, q_descale=torch.ones(128, 2, device="cuda"))
    wide = torch.zeros(2, 64, 4, 72, device="cuda").to(E4M3)[..., :64]  # rows of 72
    expect(ValueError, "multiple of 16 elements", wide, k8, v8)


def run_all():
    """Every FP8 case, counted in gpu_harness.results."""
    why = None
    if not torch.cuda.is_available():
        why = "no CUDA device (run on the GPU machine, docs/GPU-TESTING.md)"
    elif torch.cuda.get_device_capability(0) != (9, 0):
        major, minor = torch.cuda.get_device_capability(0)
        why = (f"FP8 runs on sm_90a (H100, H200); this device is "
               f"{torch.cuda.get_device_name(0)}, sm_{major}{minor}")
    elif not flashjit.has_fp8():
        why = f"{flashjit.library_path()} (version {flashjit.version()}) has no FP8 kernels"
    if why:
        gpu_harness.skip_cases("the FP8 cases", why)
        return
    for d in (64, 128):
        for causal in (False, True):
            forward(d, 4, 2, 257, 389, causal, "tensor", torch.bfloat16)
            forward(d, 4, 2, 257, 389, causal, "head", torch.float16)
        forward(d, 4, 2, 257, 389, True, "head", torch.bfloat16, path="op")
    forward(128, 4, 2, 389, 257, True, "head", torch.bfloat16, path="op")  # rows see no key
    forward(128, 8, 1, 300, 77, False, "head", torch.float16, path="op")    # MQA
    forward(64, 4, 4, 128, 128, True, "none", torch.bfloat16)                # MHA, no factors
    forward(64, 4, 2, 1, 1, False, "tensor", torch.float16)
    forward(64, 4, 2, 200, 333, True, "head", torch.bfloat16, dv=128)        # dv != d
    forward(128, 4, 2, 257, 389, True, "head", torch.float16, path="bhsd")
    for d in (64, 128, 256):
        for causal in (False, True):
            varlen(d, causal, [(300, 77), (1, 513), (129, 129), (64, 1)])
    descale_kinds()
    handles()
    compiled()
    cuda_graph()
    no_backward()
    bad_arguments()


def main():
    if gpu_harness.no_device(torch):
        return 0
    torch.manual_seed(0)
    print(f"flashjit {flashjit.version()} ({flashjit.library_path()}), torch "
          f"{torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    flashjit.configure(tune_mode="heuristic", cache_path="")
    run_all()
    return gpu_harness.report()


if __name__ == "__main__":
    sys.exit(main())
