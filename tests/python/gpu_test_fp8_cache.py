#!/usr/bin/env python3
"""An FP8 (torch.float8_e4m3fn) KV cache (C API 0.12, desc.kv_cache_dtype) through
flashjit.kv_append and flashjit.decode on a GPU with PyTorch (run by hand on the GPU
machine; prints each case, the counts, and exits non-zero on any failure):

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 tests/python/gpu_test_fp8_cache.py

Caches (contiguous, and paged with shuffled pages of 16 and 64 tokens, the tokens no
sequence owns holding 448, the largest e4m3 value, so that an unmasked read shows) whose
old rows torch quantized, then new bf16/fp16 rows appended by flashjit.kv_append with
their factors: the cache's bytes must equal torch's quantization of the same rows
((x.float() / factor).clamp(-448, 448).to(float8_e4m3fn): division and rounding to
nearest even, saturated), then flashjit.decode over it against an fp32 reference over the
dequantized cache (cache.float() * factor), with the bar of gpu_test_torch.py's decode
cases: 2x the error of the same formula in q's dtype (over the dequantized values cast to
it) against the fp32 reference, + 1e-5, no NaN; the LSE within 1e-2. Factors: none, one
per tensor (() and (1,)), per key/value head ([heads_kv]), per sequence and key/value
head ([batch, heads_kv]) and a [batch, heads_kv] view of per-head factors (strides 0, 1),
differing per (sequence, head) so that a factor read for the wrong one shows. bf16 and
fp16 q; head dims 64 and 128 (and dv != d); MHA, GQA and MQA; 1, 4 and 16 query rows,
causal or not; a sequence with no old keys; a long cache with split counts 1, 5 and
automatic; the factors read at each launch (new tensors and new contents through one
plan); saturation; a CUDA graph of append + decode replayed with new tokens;
torch.compile(fullgraph=True) equal to eager; one handle per cache type; argument errors.
Skips (exit 0) without torch, a CUDA device of sm_80 or newer, or a library with the FP8
KV cache."""
import re
import sys

import gpu_harness
from gpu_harness import Skip, case, decode_reference, max_err

torch = gpu_harness.import_torch(__name__ == "__main__")
import flashjit  # noqa: E402  (gpu_harness puts this checkout's package on the path)

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
SENTINEL = 0x7e  # the byte of 448: every token no sequence owns


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


# ---- factors, quantization, the cache ------------------------------------------------
def factors(how, b, hk, seed):
    """One tensor's factors as decode takes them: None ('none'), () ('tensor'), (1,)
    ('one'), [hk] ('head'), [b, hk] ('seq_head'), or a [b, hk] view of per-head factors
    with strides (0, 1) ('expand'). Each (sequence, head) gets 8/448 times 1 to 2: random
    rows (|x| < 6) stay inside e4m3's range, and a factor read for another head shows."""
    if how == "none":
        return None
    g = torch.Generator(device="cuda").manual_seed(seed)
    base = 8.0 / E4M3_MAX

    def spread(*shape):
        return base * (1 + torch.rand(*shape, device="cuda", generator=g))
    if how == "tensor":
        return spread(1).reshape(())
    if how == "one":
        return spread(1)
    if how == "head":
        return spread(hk)
    if how == "seq_head":
        return spread(b, hk)
    if how == "expand":
        return spread(hk).expand(b, hk)
    raise ValueError(how)


def per_bh(f, b, hk):
    """The factor of each (sequence, key/value head), [b, hk] fp32 (ones for None)."""
    if f is None:
        return torch.ones(b, hk, device="cuda")
    if f.dim() == 0 or (f.dim() == 1 and f.shape[0] == 1):
        return f.reshape(1, 1).expand(b, hk)
    if f.dim() == 1:
        return f.reshape(1, hk).expand(b, hk)
    return f


def quantize(x, f_h):
    """Rows x [n, hk, d] of one sequence as fj_kv_append stores them: x / factor (fp32,
    f_h [hk]) rounded to the nearest e4m3 value, saturated to +-448."""
    return (x.float() / f_h[None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def write_rows(cache, table_cpu, page, b, start, rows):
    """rows [n, heads, dim] into tokens start .. start + n - 1 of sequence b, by torch
    indexing (contiguous: table_cpu None; paged: page by page through the table)."""
    n = rows.shape[0]
    if table_cpu is None:
        cache[b, start:start + n] = rows
        return
    pos = start
    while pos < start + n:
        p, r = int(table_cpu[b, pos // page]), pos % page
        m = min(page - r, start + n - pos)
        cache[p, r:r + m] = rows[pos - start:pos - start + m]
        pos += m


def read_rows(cache, table_cpu, page, b, n):
    """Tokens 0 .. n - 1 of sequence b as fp32 (the stored e4m3 values), [n, heads, dim]."""
    if table_cpu is None:
        return cache[b, :n].float()
    parts = []
    for pos in range(0, n, page):
        p = int(table_cpu[b, pos // page])
        parts.append(cache[p, :min(page, n - pos)].float())
    if not parts:
        return cache[0, :0].float()
    return torch.cat(parts)


def fp8_cache(lens, hk, d, dv, page, n_max, kb, vb, dtype, spare=3):
    """k_cache, v_cache (float8_e4m3fn), block_table (None when contiguous) and its CPU
    copy: sequences of `lens` random rows quantized by torch with the factors kb / vb
    ([b, hk]), the sentinel 448 in every other token. Contiguous [b, n_max, hk, d] (page
    None) or a pool of shuffled pages of `page` tokens, `spare` of them owned by none."""
    b = len(lens)
    if page is None:
        shapes = ((b, n_max, hk, d), (b, n_max, hk, dv))
        table = table_cpu = None
    else:
        width = -(-n_max // page)
        pages = b * width + spare
        table_cpu = torch.randperm(pages)[:b * width].view(b, width).to(torch.int32)
        table = table_cpu.cuda()
        shapes = ((pages, page, hk, d), (pages, page, hk, dv))
    k, v = (torch.full(s, SENTINEL, dtype=torch.uint8, device="cuda").view(E4M3)
            for s in shapes)
    for i, n in enumerate(lens):
        write_rows(k, table_cpu, page, i, 0, quantize(rand(n, hk, d, dtype=dtype), kb[i]))
        write_rows(v, table_cpu, page, i, 0, quantize(rand(n, hk, dv, dtype=dtype), vb[i]))
    return k, v, table, table_cpu


def dequantized(cache, table_cpu, page, lens, f_bh):
    """Each sequence's keys (or values) as the reference sees them: the stored values
    times their (sequence, head) factors, fp32 [len, hk, d]."""
    return [read_rows(cache, table_cpu, page, b, n) * f_bh[b][None, :, None]
            for b, n in enumerate(lens)]


def same_bytes(name, got, want):
    g, w = got.view(torch.uint8), want.view(torch.uint8)
    if not torch.equal(g, w):
        bad = (g != w).sum().item()
        diff = (got.float() - want.float()).abs().max().item()
        raise AssertionError(f"{name} after kv_append differs from torch's quantization of "
                             f"the same rows in {bad} bytes (values by up to {diff:.3e})")


# ---- the reference (gpu_test_torch.py's decode bar; gpu_harness.decode_reference) ------
def check_decoded(o, lse, q, keys, values, causal, scale=None, what="o", features=None):
    """Each sequence against the fp32 reference over its dequantized keys and values (with
    features(b), the reference's feature arguments of sequence b, when given); the bar:
    2x the error of the same formula in q's dtype, + 1e-5."""
    assert not torch.isnan(o).any(), f"{what}: NaN"
    for b in range(q.shape[0]):
        args = (q[b:b + 1], keys[b][None], values[b][None], causal, scale)
        f = features(b) if features else {}
        ref, ref_lse = decode_reference(*args, **f)
        low, _ = decode_reference(*args, dtype=q.dtype, **f)
        err, perr = max_err(o[b:b + 1], ref), max_err(low, ref)
        assert err <= 2 * perr + 1e-5, \
            f"{what}, sequence {b} ({keys[b].shape[0]} keys): error {err:.3e}, same-dtype " \
            f"formula's {perr:.3e}"
        if lse is not None:
            dead = torch.isneginf(ref_lse)
            assert torch.equal(torch.isneginf(lse[b:b + 1]), dead), \
                f"{what}, sequence {b}: lse's -inf rows differ"
            if (~dead).any():
                lerr = (lse[b:b + 1][~dead] - ref_lse[~dead]).abs().max().item()
                assert lerr < 1e-2, f"{what}, sequence {b}: lse error {lerr:.3e}"


def need():
    if not flashjit.has_fp8_kv_cache():
        raise Skip(f"the library ({flashjit.library_path()}, {flashjit.version()}) has no "
                   f"FP8 KV cache")


LAYOUTS = {"contiguous": None, "paged16": 16, "paged64": 64}


# ---- the cases ------------------------------------------------------------------------
@case("fp8 cache: kv_append, then decode")
def append_decode(layout, dtype, d, hq, hk, new_len, causal, how, dv=None):
    need()
    dv = dv or d
    old = [250, 64, 0]
    b, page = len(old), LAYOUTS[layout]
    kf, vf = factors(how, b, hk, seed=1), factors(how, b, hk, seed=2)
    kb, vb = per_bh(kf, b, hk), per_bh(vf, b, hk)
    k, v, table, table_cpu = fp8_cache(old, hk, d, dv, page, 320, kb, vb, dtype)
    k_ref, v_ref = k.clone(), v.clone()
    k_new, v_new = rand(b, new_len, hk, d, dtype=dtype), rand(b, new_len, hk, dv, dtype=dtype)
    lens = [n + new_len for n in old]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    flashjit.kv_append(k, v, k_new, v_new, seqlens, table, k_descale=kf, v_descale=vf)
    for i, n in enumerate(old):
        write_rows(k_ref, table_cpu, page, i, n, quantize(k_new[i], kb[i]))
        write_rows(v_ref, table_cpu, page, i, n, quantize(v_new[i], vb[i]))
    same_bytes("k_cache", k, k_ref)
    same_bytes("v_cache", v, v_ref)
    q = rand(b, new_len, hq, d, dtype=dtype)
    o, lse = flashjit.decode(q, k, v, seqlens, table, causal=causal, return_lse=True,
                             k_descale=kf, v_descale=vf)
    assert o.shape == (b, new_len, hq, dv) and o.dtype == dtype, (o.shape, o.dtype)
    assert lse.shape == (b, hq, new_len) and lse.dtype == torch.float32, lse.shape
    keys = dequantized(k, table_cpu, page, lens, kb)
    values = dequantized(v, table_cpu, page, lens, vb)
    check_decoded(o, lse, q, keys, values, causal)
    again = flashjit.decode(q, k, v, seqlens, table, causal=causal, k_descale=kf, v_descale=vf)
    assert torch.equal(again, o), "a second call (through its plan) differs"


@case("fp8 cache: the window, softcap, ALiBi and the user's code (0.14)")
def with_features(layout, causal, window, softcap, alibi, mods):
    """The features over an FP8 cache: what they see is the dequantized key's score (K's
    factor is in the hook's scale), against the reference over the dequantized cache."""
    need()
    if not getattr(flashjit._capi.library(), "has_decode_mods", False):
        raise Skip("the library has no features over an FP8 cache (0.14)")
    lens, hk, hq, sq = [5000, 77, 1, 1300], 2, 8, 3
    b, page = len(lens), LAYOUTS[layout]
    kf, vf = factors("seq_head", b, hk, 7), factors("seq_head", b, hk, 8)
    kb, vb = per_bh(kf, b, hk), per_bh(vf, b, hk)
    k, v, table, table_cpu = fp8_cache(lens, hk, 128, 128, page, 5000, kb, vb, torch.bfloat16)
    keys = dequantized(k, table_cpu, page, lens, kb)
    values = dequantized(v, table_cpu, page, lens, vb)
    q = rand(b, sq, hq, 128)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    slopes = torch.rand(b, hq, device="cuda") * 0.5 + 0.01 if alibi else None
    kw = dict(window=window, softcap=softcap, alibi_slopes=slopes)
    if mods:
        kw.update(score_mod="return score + args.scalar[0] * (float)((kv_idx * 7 + q_idx * 3 "
                            "+ h) % 11);", mask_mod="return kv_idx % 5 != 2;",
                  mod_scalars=(0.5,))

    def features(i):
        f = dict(window=window, softcap=softcap, alibi=None if slopes is None else slopes[i])
        if mods:
            n = lens[i]
            qi = torch.arange(sq, device="cuda")[None, :, None]
            j = torch.arange(n, device="cuda")[None, None, :]
            h = torch.arange(hq, device="cuda")[:, None, None]
            f["bias"] = 0.5 * ((j * 7 + qi * 3 + h) % 11).float()
            f["keep"] = (j % 5 != 2).expand(hq, sq, n)
        return f
    for splits in (1, 0):
        o, lse = flashjit.decode(q, k, v, seqlens, table, causal=causal, num_splits=splits,
                                 return_lse=True, k_descale=kf, v_descale=vf, **kw)
        check_decoded(o, lse, q, keys, values, causal, what=f"num_splits={splits}",
                      features=features)
    again = flashjit.decode(q, k, v, seqlens, table, causal=causal, k_descale=kf, v_descale=vf,
                            **kw)
    assert torch.equal(again, o), "a second call (through its plan) differs"


@case("fp8 cache: a long cache, automatic splits, one, five")
def decode_long():
    need()
    lens, hk = [5000, 1300, 1], 2
    kf, vf = factors("seq_head", 3, hk, 3), factors("seq_head", 3, hk, 4)
    kb, vb = per_bh(kf, 3, hk), per_bh(vf, 3, hk)
    k, v, table, table_cpu = fp8_cache(lens, hk, 128, 128, 64, 5000, kb, vb, torch.bfloat16)
    keys, values = dequantized(k, table_cpu, 64, lens, kb), dequantized(v, table_cpu, 64, lens, vb)
    q = rand(3, 1, 16, 128)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for splits in (0, 1, 5):
        o, lse = flashjit.decode(q, k, v, seqlens, table, num_splits=splits, return_lse=True,
                                 k_descale=kf, v_descale=vf)
        check_decoded(o, lse, q, keys, values, False, what=f"num_splits={splits}")
    o = flashjit.decode(q, k, v, seqlens, table, max_seqlen_k=5000, k_descale=kf, v_descale=vf)
    check_decoded(o, None, q, keys, values, False, what="max_seqlen_k")


@case("fp8 cache: the factors are read at each launch")
def factors_per_call():
    need()
    lens, hk = [300, 77], 2
    kf, vf = factors("seq_head", 2, hk, 5), factors("seq_head", 2, hk, 6)
    k, v, table, table_cpu = fp8_cache(lens, hk, 128, 128, 16, 320, kf, vf, torch.bfloat16)
    q = rand(2, 1, 8, 128)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")

    def check(k_descale, v_descale, what):
        o = flashjit.decode(q, k, v, seqlens, table, causal=True, k_descale=k_descale,
                            v_descale=v_descale)
        check_decoded(o, None, q, dequantized(k, table_cpu, 16, lens, per_bh(k_descale, 2, hk)),
                      dequantized(v, table_cpu, 16, lens, per_bh(v_descale, 2, hk)), True,
                      what=what)
        return o
    first = check(kf, vf, "the factors")
    # Other tensors of the same shape (the same plan, new pointers), new contents of the
    # same tensors, and one or no factor (other plans).
    second = check(kf * 2, vf * 0.5, "new factor tensors")
    assert not torch.equal(first, second), "new factors gave the same output"
    kf.mul_(1.5)
    vf.mul_(0.75)
    check(kf, vf, "the factors' new contents")
    check(kf, None, "v_descale None")
    check(None, None, "no factors")


@case("fp8 cache: kv_append saturates to +-448")
def saturation():
    need()
    k = torch.zeros(1, 16, 2, 64, device="cuda").to(E4M3)
    v = torch.zeros(1, 16, 2, 64, device="cuda").to(E4M3)
    k_new = torch.tensor([300.0, -1e4, 1.0, 0.001], device="cuda").repeat(32).view(1, 1, 2, 64)
    v_new = -k_new
    half = torch.full((2,), 0.5, device="cuda")
    seqlens = torch.tensor([1], dtype=torch.int32, device="cuda")
    flashjit.kv_append(k, v, k_new.to(torch.bfloat16), v_new.to(torch.bfloat16), seqlens,
                       k_descale=half, v_descale=half)
    want = torch.tensor([448.0, -448.0, 2.0, 0.001953125], device="cuda").repeat(32)
    for name, cache, sign in (("k_cache", k, 1), ("v_cache", v, -1)):
        got = cache[0, 0].float().flatten()
        assert torch.equal(got, sign * want), f"{name}'s first row: {got[:4].tolist()}"
        assert not torch.isnan(cache.float()).any(), f"{name}: a NaN byte was written"


@case("fp8 cache: kv_append + decode in a CUDA graph, replayed with new tokens")
def cuda_graph():
    need()
    old, hk = [100, 30, 7], 2
    kf, vf = factors("head", 3, hk, 7), factors("head", 3, hk, 8)
    k, v, table, _ = fp8_cache(old, hk, 128, 128, 16, 256, per_bh(kf, 3, hk),
                               per_bh(vf, 3, hk), torch.bfloat16)
    seqlens = torch.tensor([n + 1 for n in old], dtype=torch.int32, device="cuda")
    q, k_new, v_new = rand(3, 1, 8, 128), rand(3, 1, hk, 128), rand(3, 1, hk, 128)

    def step():
        flashjit.kv_append(k, v, k_new, v_new, seqlens, table, k_descale=kf, v_descale=vf)
        return flashjit.decode(q, k, v, seqlens, table, causal=True, k_descale=kf,
                               v_descale=vf)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: handles and plans before the capture
        step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = step()
    for _ in range(3):  # three more tokens, the lengths advanced on the device
        seqlens.add_(1)
        for t in (q, k_new, v_new):
            t.copy_(torch.randn_like(t))
        k_ref, v_ref = k.clone(), v.clone()
        g.replay()
        flashjit.kv_append(k_ref, v_ref, k_new, v_new, seqlens, table, k_descale=kf,
                           v_descale=vf)
        want = flashjit.decode(q, k_ref, v_ref, seqlens, table, causal=True, k_descale=kf,
                               v_descale=vf)
        torch.cuda.synchronize()
        same_bytes("k_cache (replayed)", k, k_ref)
        same_bytes("v_cache (replayed)", v, v_ref)
        assert torch.equal(captured, want), "replayed decode differs from a direct call"


@case("fp8 cache: kv_append + decode under torch.compile(fullgraph=True)")
def compiled():
    need()
    old, hk = [90, 17], 2
    kf, vf = factors("seq_head", 2, hk, 9), factors("seq_head", 2, hk, 10)
    k, v, table, _ = fp8_cache(old, hk, 64, 64, 16, 128, kf, vf, torch.float16)
    seqlens = torch.tensor([n + 2 for n in old], dtype=torch.int32, device="cuda")
    q = rand(2, 2, 4, 64, dtype=torch.float16)
    k_new, v_new = rand(2, 2, hk, 64, dtype=torch.float16), rand(2, 2, hk, 64, dtype=torch.float16)

    def step(q, k, v, k_new, v_new, seqlens, table, kf, vf):
        flashjit.kv_append(k, v, k_new, v_new, seqlens, table, k_descale=kf, v_descale=vf)
        o, lse = flashjit.decode(q, k, v, seqlens, table, causal=True, return_lse=True,
                                 k_descale=kf, v_descale=vf)
        return o * 2, lse
    k2, v2 = k.clone(), v.clone()
    want = step(q, k, v, k_new, v_new, seqlens, table, kf, vf)
    got = torch.compile(step, fullgraph=True)(q, k2, v2, k_new, v_new, seqlens, table, kf, vf)
    same_bytes("k_cache (compiled)", k2, k)
    same_bytes("v_cache (compiled)", v2, v)
    for name, a, b in zip(("o", "lse"), want, got):
        assert torch.equal(a, b), f"{name}: compiled differs from eager"


@case("fp8 cache: one handle per cache type")
def handles():
    need()
    q, k16, v16 = rand(2, 1, 8, 128), rand(2, 64, 2, 128), rand(2, 64, 2, 128)
    k8, v8 = k16.to(E4M3), v16.to(E4M3)
    o16 = flashjit.decode(q, k16, v16, softmax_scale=0.0625)
    o8 = flashjit.decode(q, k8, v8, softmax_scale=0.0625)
    check_decoded(o8, None, q, list(k8.float()), list(v8.float()), False, scale=0.0625)
    assert not torch.equal(o16, o8), "the FP8 cache gave the 16-bit cache's output"
    kinds = sorted(k["kv_cache_dtype"] for k in flashjit.info()["kernels"]
                   if k["decode"] and k["softmax_scale"] == 0.0625 and k["num_heads_q"] == 8
                   and k["head_dim"] == 128 and k["dtype"] == "bf16")
    assert kinds == ["bf16", "e4m3"], kinds


@case("fp8 cache: bad arguments")
def bad_arguments():
    need()
    q, k16, v16 = rand(2, 1, 4, 64), rand(2, 100, 2, 64), rand(2, 100, 2, 64)
    k8, v8 = k16.to(E4M3), v16.to(E4M3)
    lens = torch.tensor([100, 50], dtype=torch.int32, device="cuda")
    k_new, v_new = rand(2, 1, 2, 64), rand(2, 1, 2, 64)
    per_head = torch.ones(2, device="cuda")
    odd = torch.zeros(2, 100, 2, 72, device="cuda").to(E4M3)
    wide = odd[..., :64]  # heads 72 bytes apart: not whole 16-byte chunks
    for name, call, exc, pattern in (
            ("mixed cache dtypes", lambda: flashjit.decode(q, k8, v16, lens), TypeError,
             "an FP8 KV cache takes both as torch.float8_e4m3fn"),
            ("mixed cache dtypes, append", lambda: flashjit.kv_append(
                k16, v8, k_new, v_new, lens), TypeError, "an FP8 KV cache takes both"),
            ("fp8 q", lambda: flashjit.decode(q.to(E4M3), k8, v8, lens), TypeError,
             "q must be torch.float16 or torch.bfloat16"),
            ("fp8 new rows", lambda: flashjit.kv_append(k8, v8, k_new.to(E4M3),
                                                        v_new.to(E4M3), lens), TypeError,
             "k_new must be torch.float16 or torch.bfloat16"),
            ("descale shape", lambda: flashjit.decode(
                q, k8, v8, lens, k_descale=torch.ones(3, device="cuda")), ValueError,
             r"k_descale is \(3,\): expected"),
            ("descale shapes differ", lambda: flashjit.decode(
                q, k8, v8, lens, k_descale=per_head, v_descale=torch.ones(2, 2, device="cuda")),
             ValueError, "one \\(batch, head\\) stride pair"),
            ("descale dtype", lambda: flashjit.kv_append(
                k8, v8, k_new, v_new, lens, k_descale=per_head.double()), TypeError,
             "k_descale.dtype is torch.float64"),
            ("descale on the CPU", lambda: flashjit.decode(
                q, k8, v8, lens, v_descale=per_head.cpu()), ValueError, "v_descale is on cpu"),
            ("descale with a 16-bit cache", lambda: flashjit.decode(
                q, k16, v16, lens, k_descale=per_head), ValueError,
             "is given, but the KV cache is not FP8"),
            ("descale with a 16-bit cache, append", lambda: flashjit.kv_append(
                k16, v16, k_new, v_new, lens, v_descale=per_head), ValueError,
             "is given, but the KV cache is not FP8"),
            ("head dim 72", lambda: flashjit.decode(rand(2, 1, 4, 72), odd, odd, lens),
             ValueError, "multiples of 16"),
            ("cache strides", lambda: flashjit.decode(q, wide, v8, lens), ValueError,
             "multiple of 16 elements")):
        try:
            call()
        except exc as ex:
            assert re.search(pattern, str(ex)), f"{name}: {type(ex).__name__}: {ex}"
            print(f"      {name}: {type(ex).__name__}: {ex}")
            continue
        raise AssertionError(f"{name}: not raised")


def run_all():
    """Every FP8 KV cache case, counted in gpu_harness.results."""
    why = None
    if not torch.cuda.is_available():
        why = "no CUDA device (run on the GPU machine, docs/GPU-TESTING.md)"
    elif torch.cuda.get_device_capability(0) < (8, 0):
        major, minor = torch.cuda.get_device_capability(0)
        why = (f"the decode kernels run on sm_80 and newer; this device is "
               f"{torch.cuda.get_device_name(0)}, sm_{major}{minor}")
    elif not flashjit.has_fp8_kv_cache():
        why = (f"{flashjit.library_path()} (version {flashjit.version()}) has no FP8 KV "
               f"cache (0.12)")
    if why:
        gpu_harness.skip_cases("the FP8 KV cache cases", why)
        return
    bf16, fp16 = torch.bfloat16, torch.float16
    for layout in LAYOUTS:
        append_decode(layout, bf16, 128, 8, 2, 1, False, "head")       # GQA, per head
        append_decode(layout, fp16, 128, 8, 2, 4, True, "seq_head")    # fp16 q
    append_decode("paged16", bf16, 64, 8, 1, 1, True, "tensor")        # MQA, d 64
    append_decode("contiguous", fp16, 64, 4, 4, 16, True, "none")      # MHA, no factors
    append_decode("paged64", bf16, 128, 8, 2, 4, False, "one", dv=64)  # dv != d
    append_decode("paged16", bf16, 128, 16, 2, 1, True, "expand")      # strides (0, 1)
    with_features("paged16", True, (100, 0), 0.0, False, False)
    with_features("contiguous", False, (700, 20), 30.0, True, False)
    with_features("paged64", True, None, 0.0, True, True)
    with_features("paged16", False, (300, -1), 20.0, False, True)
    decode_long()
    factors_per_call()
    saturation()
    cuda_graph()
    compiled()
    handles()
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
