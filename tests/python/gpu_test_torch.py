#!/usr/bin/env python3
"""The Python package on a GPU with PyTorch (run by hand on the GPU machine; prints the
counts and exits non-zero on any failure):

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 tests/python/gpu_test_torch.py

Against an fp32 reference of the textbook formula (causal aligned bottom-right, as
flashjit's): random shapes with odd lengths, GQA/MQA, both layouts, causal or not,
varlen; gradients of q, k, v; under torch.compile(fullgraph=True); inside a captured
CUDA graph; flashjit.sdpa against F.scaled_dot_product_attention and its fallbacks.
The bar: 2x the error of PyTorch's own SDPA in the same dtype against the same
reference, plus 1e-3 of the reference's scale (a floor for shapes where SDPA happens to
be nearly exact)."""
import math
import os
import random
import sys
import traceback
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import flashjit  # noqa: E402

results = {"passed": 0, "failed": 0}


def case(name):
    def wrap(fn):
        def run(*args):
            label = name + (" " + " ".join(map(str, args)) if args else "")
            try:
                fn(*args)
                results["passed"] += 1
                print(f"ok    {label}")
            except Exception:
                results["failed"] += 1
                print(f"FAIL  {label}\n{traceback.format_exc()}")
        return run
    return wrap


def reference(q, k, v, causal, scale=None):
    """fp32, BSHD in and out, GQA by repeating k/v heads."""
    hq, hk = q.shape[2], k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    if hq != hk:
        kf = kf.repeat_interleave(hq // hk, dim=1)
        vf = vf.repeat_interleave(hq // hk, dim=1)
    s = qf @ kf.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        nq, nk = q.shape[1], k.shape[1]
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + nk - nq, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # rows that see no key: 0
    return (p @ vf).transpose(1, 2)


def peer_error(q, k, v, causal, ref):
    """PyTorch's own error in the dtype (SDPA, explicit bottom-right mask)."""
    hq, hk = q.shape[2], k.shape[2]
    qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))
    mask = None
    if causal:
        nq, nk = q.shape[1], k.shape[1]
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nk, device=q.device)[None, :]
        mask = j <= i + nk - nq
    o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, enable_gqa=hq != hk)
    o = o.transpose(1, 2).float().nan_to_num(0.0)
    return (o - ref).abs().max().item()


def bar(peer, ref):
    return 2 * peer + 1e-3 * max(ref.abs().max().item(), 1e-3)


def rand(*shape, dtype=torch.bfloat16, grad=False):
    return torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_(grad)


@case("forward")
def forward(dtype, d, hq, hk, sq, sk, causal, layout):
    q, k, v = rand(2, sq, hq, d, dtype=dtype), rand(2, sk, hk, d, dtype=dtype), \
        rand(2, sk, hk, d, dtype=dtype)
    ref = reference(q, k, v, causal)
    if layout == "bhsd":
        o = flashjit.attention(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal,
                               layout="bhsd").transpose(1, 2)
    else:
        o = flashjit.attention(q, k, v, causal=causal)
    err = (o.float() - ref).abs().max().item()
    assert err <= bar(peer_error(q, k, v, causal, ref), ref), f"error {err}"


@case("lse")
def lse_case():
    q, k, v = rand(2, 77, 4, 64), rand(2, 99, 4, 64), rand(2, 99, 4, 64)
    o, lse = flashjit.attention(q, k, v, return_lse=True)
    s = q.float().transpose(1, 2) @ k.float().transpose(1, 2).transpose(-1, -2) / 8
    want = torch.logsumexp(s, dim=-1)
    assert (lse - want).abs().max().item() < 1e-3, (lse - want).abs().max().item()


@case("varlen")
def varlen(causal):
    lens_q, lens_k = [1, 130, 77], [17, 130, 300]
    hq, hk, d = 6, 2, 128
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    q, k, v = rand(sum(lens_q), hq, d), rand(sum(lens_k), hk, d), rand(sum(lens_k), hk, d)
    o = flashjit.attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                           max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))
    for b in range(3):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        qq, kk, vv = q[sq][None], k[sk][None], v[sk][None]
        ref = reference(qq, kk, vv, causal)
        err = (o[sq][None].float() - ref).abs().max().item()
        assert err <= bar(peer_error(qq, kk, vv, causal, ref), ref), f"sequence {b}: {err}"


def grads_of(fn, q, k, v, do):
    for t in (q, k, v):
        t.grad = None
    out = fn(q, k, v)
    out.backward(do)
    return [t.grad.float() for t in (q, k, v)]


@case("gradients")
def gradients(dtype, d, hq, hk, sq, sk, causal, deterministic=False):
    q, k, v = rand(2, sq, hq, d, dtype=dtype, grad=True), \
        rand(2, sk, hk, d, dtype=dtype, grad=True), rand(2, sk, hk, d, dtype=dtype, grad=True)
    do = rand(2, sq, hq, d, dtype=dtype)
    got = grads_of(lambda a, b, c: flashjit.attention(a, b, c, causal=causal,
                                                      deterministic=deterministic), q, k, v, do)
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref = grads_of(lambda a, b, c: reference(a, b, c, causal), *leaves, do.float())
    # PyTorch's own error in the dtype: SDPA with the explicit bottom-right mask.
    low = [t.detach().clone().requires_grad_() for t in (q, k, v)]

    def sdpa_bshd(a, b, c):
        mask = None
        if causal:
            i = torch.arange(sq, device="cuda")[:, None]
            j = torch.arange(sk, device="cuda")[None, :]
            mask = j <= i + sk - sq
        return F.scaled_dot_product_attention(a.transpose(1, 2), b.transpose(1, 2),
                                              c.transpose(1, 2), attn_mask=mask,
                                              enable_gqa=hq != hk).transpose(1, 2)
    peer = grads_of(sdpa_bshd, *low, do)
    for name, g, r, p in zip(("dq", "dk", "dv"), got, ref, peer):
        err = (g - r).abs().max().item()
        perr = (p.nan_to_num(0.0) - r).abs().max().item()
        assert err <= bar(perr, r), f"{name}: error {err}, PyTorch's {perr}"


@case("torch.compile(fullgraph=True)")
def compiled():
    q, k, v = rand(2, 200, 8, 64, grad=True), rand(2, 300, 2, 64, grad=True), \
        rand(2, 300, 2, 64, grad=True)

    def f(q, k, v):  # deterministic: dq's atomics would differ in the last bits run to run
        return (flashjit.attention(q, k, v, causal=True, deterministic=True) * 2).sum()
    cf = torch.compile(f, fullgraph=True)
    eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    comp = torch.autograd.grad(cf(q, k, v), (q, k, v))
    for a, b in zip(eager, comp):
        assert torch.equal(a, b), (a.float() - b.float()).abs().max().item()


@case("CUDA graph")
def cuda_graph():
    q, k, v = rand(2, 257, 4, 128), rand(2, 389, 4, 128), rand(2, 389, 4, 128)
    flashjit.attention(q, k, v, causal=True)  # gets the kernel (may compile) before capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        flashjit.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = flashjit.attention(q, k, v, causal=True)
    for t in (q, k, v):
        t.copy_(torch.randn_like(t))
    g.replay()
    torch.cuda.synchronize()
    want = flashjit.attention(q, k, v, causal=True)
    assert torch.equal(out, want), "replay differs from a direct call on the new inputs"


@case("sdpa")
def sdpa_case():
    q, k, v = (rand(2, 8, 150, 64) for _ in range(3))
    for causal in (False, True):
        a = flashjit.sdpa(q, k, v, is_causal=causal)
        b = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        assert (a.float() - b).abs().max().item() < 2e-2
    kq = rand(2, 2, 150, 64)
    a = flashjit.sdpa(q, kq, kq, enable_gqa=True)
    b = F.scaled_dot_product_attention(q, kq, kq, enable_gqa=True)
    assert (a.float() - b.float()).abs().max().item() < 2e-2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mask = torch.ones(150, 150, dtype=torch.bool, device="cuda").tril()
        flashjit.sdpa(q, k, v, attn_mask=mask)
        flashjit.sdpa(q[:, :, :100], k, v, is_causal=True)  # top-left vs bottom-right
        flashjit.sdpa(q.float(), k.float(), v.float())
    texts = " | ".join(str(w.message) for w in caught)
    for fragment in ("attn_mask", "top-left", "dtype"):
        assert fragment in texts, texts


@case("bad arguments")
def bad_arguments():
    q, k, v = (rand(2, 100, 4, 64) for _ in range(3))
    for call, exc in ((lambda: flashjit.attention(q.float(), k, v), TypeError),
                      (lambda: flashjit.attention(q.cpu(), k, v), ValueError),
                      (lambda: flashjit.attention(q, rand(2, 100, 3, 64), rand(2, 100, 3, 64)), ValueError)):
        try:
            call()
        except exc:
            continue
        raise AssertionError("not raised")


def main():
    random.seed(0)
    torch.manual_seed(0)
    print(f"flashjit {flashjit.version()} ({flashjit.library_path()}), torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}")
    flashjit.configure(tune_mode="heuristic", cache_path="")
    shapes = [(torch.bfloat16, 64, 4, 4, 1, 1), (torch.float16, 128, 8, 2, 113, 203),
              (torch.bfloat16, 96, 6, 1, 257, 389), (torch.float16, 256, 4, 2, 300, 77),
              (torch.bfloat16, 128, 4, 4, 1023, 1024), (torch.bfloat16, 40, 2, 2, 64, 513)]
    for dtype, d, hq, hk, sq, sk in shapes:
        for causal in (False, True):
            forward(dtype, d, hq, hk, sq, sk, causal, "bshd")
            gradients(dtype, d, hq, hk, sq, sk, causal)
        forward(dtype, d, hq, hk, sq, sk, True, "bhsd")
    gradients(torch.bfloat16, 128, 8, 2, 333, 444, True, True)
    lse_case()
    varlen(False)
    varlen(True)
    compiled()
    cuda_graph()
    sdpa_case()
    bad_arguments()
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
