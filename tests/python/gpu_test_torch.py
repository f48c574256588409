#!/usr/bin/env python3
"""The Python package on a GPU with PyTorch (run by hand on the GPU machine; prints each
case, the counts, and exits non-zero on any failure):

    FLASHJIT_LIBRARY=.gpu/libflashjit.so python3 tests/python/gpu_test_torch.py  # or build/api/

Against an fp32 reference of the textbook formula (causal aligned bottom-right, as
flashjit's, with the mask built explicitly): fixed and random shapes with odd lengths,
GQA/MQA, head_dim_v != head_dim, both layouts and strided views, causal or not, varlen,
the LSE; gradients of q, k, v (also varlen and deterministic); torch.compile
(fullgraph=True, also dynamic shapes and mode="reduce-overhead"); a captured CUDA graph
(forward, and forward + backward); a side stream; flashjit.sdpa against
F.scaled_dot_product_attention and its fallbacks; bad arguments; the attention features
(window, softcap, ALiBi, score_mod, mask_mod; alone, together, varlen, compiled, their
LSE and empty rows, the fast path's bits equal to the operator's, one handle per user code
text; their gradients (0.9: window, softcap, ALiBi, mask_mod and together, causal or not,
also deterministic), and a score_mod's backward raising); block masks
(0.6: create_block_mask with a document mask and a prefix-LM mask, causal or not, GQA/MQA,
odd lengths, shared across batch and heads, BHSD, varlen, rows that see no key: equal to
the same call without the mask and to the reference; update() in place, with new
tensors and in a CUDA graph; torch.compile; a mask refused for another shape or kernel,
closed, and by fj_forward itself); decode over a
KV cache (contiguous and paged with shuffled pages of 16 and 64 tokens, last pages partly
full and NaN past every sequence's keys; query rows 1, 4, 16; MHA, GQA, MQA; causal or
not; fp16/bf16; head dims 64/128; split counts; a 70,000-key cache; empty sequences; its
LSE), kv_append (bitwise against torch indexing, then decode), both in a CUDA graph and
under torch.compile. The decode bar: 2x the error of the same formula in the inputs'
dtype against the fp32 reference, + 1e-5. FP8 (0.7): gpu_test_fp8.py's cases, run here too
(skipped off sm_90), with FlashAttention-3's bar (that file's docstring).

The bar: 2x the error of PyTorch's own SDPA in the same dtype against the same fp32
reference, plus 1e-3 of the reference's largest value (a floor for shapes where SDPA
happens to be nearly exact). Without fj_backward in the library the gradient cases are
skipped (said so) and backward must raise a clear RuntimeError instead."""
import math
import random
import sys
import warnings

import gpu_harness
from gpu_harness import Skip, case, causal_mask, decode_reference, max_err

torch = gpu_harness.import_torch(__name__ == "__main__")
import torch.nn.functional as F  # noqa: E402
import flashjit  # noqa: E402  (gpu_harness puts this checkout's package on the path)


def reference(q, k, v, causal, scale=None):
    """fp32, BSHD in and out, GQA by repeating k/v heads; rows that see no key: 0."""
    hq, hk = q.shape[2], k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    if hq != hk:
        kf = kf.repeat_interleave(hq // hk, dim=1)
        vf = vf.repeat_interleave(hq // hk, dim=1)
    s = qf @ kf.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[1], k.shape[1], q.device), float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ vf).transpose(1, 2)


def peer(q, k, v, causal, scale=None):
    """PyTorch's SDPA in the inputs' dtype, BSHD, with the explicit bottom-right mask."""
    hq, hk = q.shape[2], k.shape[2]
    mask = causal_mask(q.shape[1], k.shape[1], q.device) if causal else None
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       attn_mask=mask, scale=scale, enable_gqa=hq != hk)
    return o.transpose(1, 2)


def bar(peer_error, ref):
    return 2 * peer_error + 1e-3 * max(ref.abs().max().item(), 1e-3)


def rand(*shape, dtype=torch.bfloat16, grad=False):
    return torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_(grad)


def check_forward(o, q, k, v, causal, scale=None, what="o"):
    ref = reference(q, k, v, causal, scale)
    err, perr = max_err(o, ref), max_err(peer(q, k, v, causal, scale), ref)
    assert err <= bar(perr, ref), f"{what}: error {err:.3e}, PyTorch's {perr:.3e}"


@case("forward")
def forward(dtype, d, hq, hk, sq, sk, causal, layout, dv=None):
    dv = dv or d
    q, k, v = rand(2, sq, hq, d, dtype=dtype), rand(2, sk, hk, d, dtype=dtype), \
        rand(2, sk, hk, dv, dtype=dtype)
    if layout == "bhsd":
        o = flashjit.attention(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal,
                               layout="bhsd").transpose(1, 2)
    elif layout == "bhsd-contiguous":
        o = flashjit.attention(*(t.transpose(1, 2).contiguous() for t in (q, k, v)),
                               causal=causal, layout="bhsd").transpose(1, 2)
    else:
        o = flashjit.attention(q, k, v, causal=causal)
    assert o.shape == (2, sq, hq, dv) and o.dtype == dtype, (o.shape, o.dtype)
    check_forward(o, q, k, v, causal)


@case("tune_lengths='ladder': one kernel tuned for every length (issue 31)")
def length_ladder():
    # A description no other case uses (d 48), so that this kernel is got here, tuned.
    with flashjit.tuning(tune_mode="default", budget_s=1, cache_path="",
                         tune_lengths="ladder"):
        shapes = [(16, 1024), (4, 4096), (1, 700)]  # two rungs (16k tokens), one between
        for b, n in shapes:
            q, k, v = (rand(b, n, 4, 48) for _ in range(3))
            check_forward(flashjit.attention(q, k, v, causal=True), q, k, v, True,
                          what=f"b {b} n {n}")
    mine = [e for e in flashjit.info()["kernels"]
            if e["head_dim"] == 48 and e["tune_lengths"] == "ladder"]
    assert len(mine) == 1, mine
    e = mine[0]
    assert e["num_variants"] >= 6, e  # the 6 rungs (and a fallback family's)
    assert e["forward_calls"] == 3, e
    # the rungs' own calls ran tuned; N = 700 (batch 1) on the nearest rung's tile
    assert e["forward_calls_untuned"] == 1 and e["last_untuned_bucket"] == "q1024.k1024.bh4", e


@case("forward, packed qkv views (GPT-2 style) and a custom scale")
def packed_views():
    b, n, h, d = 3, 129, 6, 64
    qkv = rand(b, n, 3, h, d)
    q, k, v = qkv.unbind(2)  # strides (n*3*h*d, 3*h*d, d, 1): not contiguous
    o = flashjit.attention(q, k, v, causal=True, scale=0.1)  # the eager fast path
    check_forward(o, q, k, v, True, scale=0.1)
    # The operator (return_lse takes it) with the same kernel: bitwise the same.
    o2, _ = flashjit.attention(q, k, v, causal=True, scale=0.1, return_lse=True)
    assert torch.equal(o, o2), max_err(o, o2.float())


@case("lse")
def lse_case():
    q, k, v = rand(2, 77, 4, 64), rand(2, 99, 2, 64), rand(2, 99, 2, 64)
    o, lse = flashjit.attention(q, k, v, return_lse=True, causal=True)
    assert lse.shape == (2, 4, 77) and lse.dtype == torch.float32, (lse.shape, lse.dtype)
    kf = k.float().repeat_interleave(2, dim=2)
    s = q.float().transpose(1, 2) @ kf.transpose(1, 2).transpose(-1, -2) / 8
    s = s.masked_fill(~causal_mask(77, 99), float("-inf"))
    want = torch.logsumexp(s, dim=-1)
    assert (lse - want).abs().max().item() < 1e-3, (lse - want).abs().max().item()
    check_forward(o, q, k, v, True)


def cu(lens):
    return torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32,
                        device="cuda")


def per_sequence(fn, q, k, v, cu_q, cu_k):
    """fn on each sequence ([1, len, heads, dim]), rows concatenated back."""
    outs = []
    for b in range(cu_q.numel() - 1):
        sq, sk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        outs.append(fn(q[sq][None], k[sk][None], v[sk][None])[0])
    return torch.cat(outs)


@case("varlen")
def varlen(causal, lens_q, lens_k):
    hq, hk, d = 6, 2, 128
    cu_q, cu_k = cu(lens_q), cu(lens_k)
    q, k, v = rand(sum(lens_q), hq, d), rand(sum(lens_k), hk, d), rand(sum(lens_k), hk, d)
    o, lse = flashjit.attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k),
                                return_lse=True)
    assert o.shape == (sum(lens_q), hq, d) and lse.shape == (hq, sum(lens_q))
    ref = per_sequence(lambda a, b, c: reference(a, b, c, causal), q, k, v, cu_q, cu_k)
    low = per_sequence(lambda a, b, c: peer(a, b, c, causal), q, k, v, cu_q, cu_k)
    err, perr = max_err(o, ref), max_err(low, ref)
    assert err <= bar(perr, ref), f"error {err:.3e}, PyTorch's {perr:.3e}"
    # Without return_lse the eager fast path takes the call: the operator's bits. Then
    # the same plan (cu_seqlens of the same shape) with other lengths: its pointers are
    # the call's, not the first call's.
    call = dict(causal=causal, max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))
    fast = flashjit.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **call)
    assert torch.equal(fast, o), "fast path with cu_seqlens: not the operator's output"
    cu_q2, cu_k2 = cu(lens_q[::-1]), cu(lens_k[::-1])
    fast = flashjit.attention(q, k, v, cu_seqlens_q=cu_q2, cu_seqlens_k=cu_k2, **call)
    o2, _ = flashjit.attention(q, k, v, cu_seqlens_q=cu_q2, cu_seqlens_k=cu_k2,
                               return_lse=True, **call)
    assert torch.equal(fast, o2), "fast path: a plan reused with other cu_seqlens"


def need_backward():
    if not flashjit.has_backward():
        raise Skip(f"the library ({flashjit.library_path()}) has no fj_backward")


def grads_of(fn, inputs, do):
    out = fn(*inputs)
    return [g.float() for g in torch.autograd.grad(out, inputs, do)]


def compare_grads(got, ref, low):
    for name, g, r, p in zip(("dq", "dk", "dv"), got, ref, low):
        err, perr = max_err(g, r), max_err(p, r)
        assert err <= bar(perr, r), f"{name}: error {err:.3e}, PyTorch's {perr:.3e}"


@case("gradients")
def gradients(dtype, d, hq, hk, sq, sk, causal, deterministic=False, dv=None):
    need_backward()
    dv = dv or d
    q, k, v = rand(2, sq, hq, d, dtype=dtype, grad=True), \
        rand(2, sk, hk, d, dtype=dtype, grad=True), rand(2, sk, hk, dv, dtype=dtype, grad=True)
    do = rand(2, sq, hq, dv, dtype=dtype)
    got = grads_of(lambda a, b, c: flashjit.attention(a, b, c, causal=causal,
                                                      deterministic=deterministic),
                   (q, k, v), do)
    leaves = tuple(t.detach().float().requires_grad_() for t in (q, k, v))
    ref = grads_of(lambda a, b, c: reference(a, b, c, causal), leaves, do.float())
    low = grads_of(lambda a, b, c: peer(a, b, c, causal), (q, k, v), do)
    compare_grads(got, ref, low)
    if deterministic:
        again = grads_of(lambda a, b, c: flashjit.attention(a, b, c, causal=causal,
                                                            deterministic=True), (q, k, v), do)
        for g, h in zip(got, again):
            assert torch.equal(g, h), "deterministic=True gradients differ from run to run"


@case("gradients, varlen")
def varlen_gradients(causal):
    need_backward()
    lens_q, lens_k = [5, 130, 77], [17, 130, 300]
    hq, hk, d = 4, 2, 64
    cu_q, cu_k = cu(lens_q), cu(lens_k)
    q, k, v = rand(sum(lens_q), hq, d, grad=True), rand(sum(lens_k), hk, d, grad=True), \
        rand(sum(lens_k), hk, d, grad=True)
    do = rand(sum(lens_q), hq, d)
    got = grads_of(lambda a, b, c: flashjit.attention(
        a, b, c, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k)), (q, k, v), do)
    leaves = tuple(t.detach().float().requires_grad_() for t in (q, k, v))
    ref = grads_of(lambda a, b, c: per_sequence(
        lambda x, y, z: reference(x, y, z, causal), a, b, c, cu_q, cu_k), leaves, do.float())
    low = grads_of(lambda a, b, c: per_sequence(
        lambda x, y, z: peer(x, y, z, causal), a, b, c, cu_q, cu_k), (q, k, v), do)
    compare_grads(got, ref, low)


@case("backward without fj_backward raises")
def backward_raises_without_library_support():
    if flashjit.has_backward():
        raise Skip("the library has fj_backward")
    q, k, v = (rand(1, 64, 2, 64, grad=True) for _ in range(3))
    o = flashjit.attention(q, k, v)  # the forward still runs
    try:
        o.sum().backward()
    except RuntimeError as ex:
        assert "fj_backward" in str(ex), str(ex)
        return
    raise AssertionError("backward returned without fj_backward")


@case("torch.compile(fullgraph=True), forward + backward")
def compiled():
    need_backward()
    q, k, v = rand(2, 200, 8, 64, grad=True), rand(2, 300, 2, 64, grad=True), \
        rand(2, 300, 2, 64, grad=True)

    def f(q, k, v):  # deterministic: dq's atomics would differ in the last bits run to run
        return (flashjit.attention(q, k, v, causal=True, deterministic=True) * 2).sum()
    cf = torch.compile(f, fullgraph=True)
    eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    comp = torch.autograd.grad(cf(q, k, v), (q, k, v))
    for a, b in zip(eager, comp):
        assert torch.equal(a, b), (a.float() - b.float()).abs().max().item()


@case("eager autograd: no dispatcher, no double backward")
def eager_autograd():
    # Eager training calls skip torch.library's dispatch (_ops._EagerAttention: ~1 ms of
    # host time a step through the operators); compiled() checks that both give the same
    # bits. Its backward is once_differentiable: a second-order gradient raises rather
    # than coming back silently zero.
    need_backward()
    q, k, v = (rand(1, 100, 2, 64, grad=True) for _ in range(3))
    o = flashjit.attention(q, k, v, causal=True)
    assert "EagerAttention" in type(o.grad_fn).__name__, type(o.grad_fn).__name__
    dq, = torch.autograd.grad(o.sum(), (q,), create_graph=True)
    try:
        torch.autograd.grad(dq.sum(), (q,))
    except RuntimeError:
        pass
    else:
        raise AssertionError("a second-order gradient came back")
    with torch.no_grad():  # no autograd node without grad mode
        assert flashjit.attention(q, k, v, causal=True).grad_fn is None


@case("torch.compile(fullgraph=True, dynamic=True), inference, two shapes")
def compiled_dynamic():
    def f(q, k, v):
        return flashjit.attention(q, k, v, causal=True, layout="bhsd") + 1
    cf = torch.compile(f, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for n in (136, 520):
            q, k, v = rand(1, 4, n, 128), rand(1, 4, n, 128), rand(1, 4, n, 128)
            # Eager through the same operator (return_lse takes it), the same kernel.
            a = flashjit.attention(q, k, v, causal=True, layout="bhsd", return_lse=True)[0] + 1
            b = cf(q, k, v)
            assert torch.equal(a, b), (n, max_err(a, b.float()))


@case("torch.compile(mode='reduce-overhead') (CUDA graphs through inductor)")
def compiled_reduce_overhead():
    def f(q, k, v):
        return flashjit.attention(q, k, v) * 0.5
    cf = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        q, k, v = rand(2, 257, 4, 64), rand(2, 300, 4, 64), rand(2, 300, 4, 64)
        for _ in range(3):  # warm-up runs, then recorded and replayed
            out = cf(q, k, v)
        want = flashjit.attention(q, k, v, return_lse=True)[0] * 0.5  # the same operator
        assert torch.equal(out, want), max_err(out, want.float())


@case("CUDA graph, forward")
def cuda_graph():
    q, k, v = rand(2, 257, 4, 128), rand(2, 389, 4, 128), rand(2, 389, 4, 128)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: gets the kernel (may compile) before capture
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


@case("CUDA graph, forward + backward")
def cuda_graph_backward():
    need_backward()
    q, k, v = rand(2, 190, 8, 64, grad=True), rand(2, 260, 2, 64, grad=True), \
        rand(2, 260, 2, 64, grad=True)
    do = rand(2, 190, 8, 64)

    def step():
        out = flashjit.attention(q, k, v, causal=True, deterministic=True)
        return (out, *torch.autograd.grad(out, (q, k, v), do))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = step()
    with torch.no_grad():
        for t in (q, k, v, do):
            t.copy_(torch.randn_like(t))
    g.replay()
    torch.cuda.synchronize()
    for name, a, b in zip(("o", "dq", "dk", "dv"), captured, step()):
        assert torch.equal(a, b), f"{name}: replay differs from a direct call"


@case("eager calls from 4 threads at once, same shape, different tensors")
def threads():
    # The eager fast path keeps one argument struct per plan and thread: a thread must
    # never launch with another thread's pointers.
    import threading
    inputs = [tuple(rand(1, 333, 4, 64) for _ in range(3)) for _ in range(4)]
    outputs = [[] for _ in inputs]
    start = threading.Barrier(len(inputs))

    def work(i):
        q, k, v = inputs[i]
        start.wait()
        with torch.no_grad():
            for _ in range(200):
                outputs[i].append(flashjit.attention(q, k, v, causal=True))
        torch.cuda.current_stream().synchronize()

    pool = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    torch.cuda.synchronize()
    for i, (q, k, v) in enumerate(inputs):
        assert len(outputs[i]) == 200
        check_forward(outputs[i][0], q, k, v, True, what=f"thread {i}")
        for o in outputs[i][1:]:
            assert torch.equal(o, outputs[i][0]), f"thread {i}: a launch differs from its first"


@case("side stream")
def side_stream():
    q, k, v = rand(2, 300, 4, 64), rand(2, 300, 4, 64), rand(2, 300, 4, 64)
    want = flashjit.attention(q, k, v)
    want_op, _ = flashjit.attention(q, k, v, return_lse=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x = torch.empty_like(q)
        torch.cuda._sleep(50_000_000)  # x is written late on s: a launch on another
        x.copy_(q)                      # stream would read it before
        got = flashjit.attention(x, k, v)
        got_op, _ = flashjit.attention(x, k, v, return_lse=True)
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(got, want), "fast path: not on the current stream"
    assert torch.equal(got_op, want_op), "operator: not on the current stream"


@case("sdpa")
def sdpa_case():
    q, k, v = (rand(2, 8, 150, 64) for _ in range(3))
    for causal in (False, True):
        a = flashjit.sdpa(q, k, v, is_causal=causal)
        b = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        p = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert max_err(a, b) <= bar(max_err(p, b), b), (max_err(a, b), max_err(p, b))
    kq = rand(2, 2, 150, 64)
    a = flashjit.sdpa(q, kq, kq, enable_gqa=True)
    b = F.scaled_dot_product_attention(q, kq, kq, enable_gqa=True)
    assert max_err(a, b.float()) < 2e-2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flashjit._warned.clear()
        mask = torch.ones(150, 150, dtype=torch.bool, device="cuda").tril()
        got = flashjit.sdpa(q, k, v, attn_mask=mask)
        assert torch.equal(got, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        short = q[:, :, :100]
        got = flashjit.sdpa(short, k, v, is_causal=True)  # top-left vs bottom-right
        assert torch.equal(got, F.scaled_dot_product_attention(short, k, v, is_causal=True))
        flashjit.sdpa(q.float(), k.float(), v.float())
        flashjit.sdpa(q.cpu(), k.cpu(), v.cpu())
        flashjit.sdpa(q, k, v, dropout_p=0.1)
        flashjit.sdpa(q.float(), k.float(), v.float())  # the same reason: no second warning
    texts = [str(w.message) for w in caught]
    for fragment in ("attn_mask", "top left", "dtype", "dropout"):
        assert any(fragment in t for t in texts), texts
    assert sum("float32" in t for t in texts) == 1, texts


@case("sdpa gradients")
def sdpa_gradients():
    need_backward()
    q, k, v = (rand(2, 4, 130, 64, grad=True) for _ in range(3))
    do = rand(2, 4, 130, 64)
    got = grads_of(lambda a, b, c: flashjit.sdpa(a, b, c, is_causal=True), (q, k, v), do)
    leaves = tuple(t.detach().float().requires_grad_() for t in (q, k, v))
    ref = grads_of(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                   leaves, do.float())
    low = grads_of(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                   (q, k, v), do)
    compare_grads(got, ref, low)


@case("bad arguments")
def bad_arguments():
    q, k, v = (rand(2, 100, 4, 64) for _ in range(3))
    base = torch.empty(2 * 100 * 4 * 64 + 8, device="cuda", dtype=torch.bfloat16)
    misaligned = base[1:1 + q.numel()].view(q.shape)  # 2 bytes off 16
    for name, call, exc in (
            ("fp32", lambda: flashjit.attention(q.float(), k, v), TypeError),
            ("cpu", lambda: flashjit.attention(q.cpu(), k.cpu(), v.cpu()), ValueError),
            ("heads", lambda: flashjit.attention(q, rand(2, 100, 3, 64), rand(2, 100, 3, 64)),
             ValueError),
            ("head dim", lambda: flashjit.attention(rand(2, 100, 4, 60), rand(2, 100, 4, 60),
                                                    rand(2, 100, 4, 60)), ValueError),
            ("stride", lambda: flashjit.attention(q[..., ::2], k[..., ::2], v[..., ::2]),
             ValueError),
            ("misaligned", lambda: flashjit.attention(misaligned, k, v),
             (ValueError, flashjit.FlashJitError))):
        try:
            call()
        except exc as ex:
            print(f"      {name}: {type(ex).__name__}: {ex}")
            continue
        raise AssertionError(f"{name}: not raised")


# ---- attention features (0.3) -----------------------------------------------------
def feature_reference(q, k, v, causal=False, window=None, softcap=0.0, slopes=None,
                      score_fn=None, mask_fn=None, dtype=torch.float32):
    """(o, lse) of the textbook formula with the features in docs/FEATURES.md's order,
    computed in `dtype` (fp32: the reference; the inputs' dtype: the same-dtype peer of the
    bar), BSHD. score_fn(s, b, h, i, j) and mask_fn(b, h, i, j) take broadcast index
    tensors [B, H, Sq, Sk]; slopes [H] or [B, H]."""
    hq, hk = q.shape[2], k.shape[2]
    qf, kf, vf = (t.to(dtype).transpose(1, 2) for t in (q, k, v))
    if hq != hk:
        kf, vf = (t.repeat_interleave(hq // hk, dim=1) for t in (kf, vf))
    s = (qf @ kf.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    nb, nq, nk = q.shape[0], q.shape[1], k.shape[1]
    dev = q.device
    b = torch.arange(nb, device=dev)[:, None, None, None]
    h = torch.arange(hq, device=dev)[None, :, None, None]
    i = torch.arange(nq, device=dev)[None, None, :, None]
    j = torch.arange(nk, device=dev)[None, None, None, :]
    diag = nk - nq
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        sl = slopes.to(dtype).reshape(-1, hq)[:, :, None, None]
        s = s - sl * (i + diag - j).abs().to(dtype)
    if score_fn is not None:
        s = score_fn(s, b, h, i, j).to(dtype)
    keep = torch.ones_like(s, dtype=torch.bool)
    if causal:
        keep &= j <= i + diag
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i + diag - left
        if right >= 0:
            keep &= j <= i + diag + right
    if mask_fn is not None:
        keep &= mask_fn(b, h, i, j)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ vf).transpose(1, 2), lse


def check_features(o, lse, q, k, v, what="o", **features):
    ref, ref_lse = feature_reference(q, k, v, **features)
    low, _ = feature_reference(q, k, v, dtype=q.dtype, **features)
    err, perr = max_err(o, ref), max_err(low, ref)
    assert err <= bar(perr, ref), f"{what}: error {err:.3e}, same-dtype formula's {perr:.3e}"
    if lse is not None:
        dead = torch.isneginf(ref_lse)
        assert torch.equal(torch.isneginf(lse), dead), "lse: -inf rows differ"
        lerr = (lse[~dead] - ref_lse[~dead]).abs().max().item() if (~dead).any() else 0.0
        assert lerr < 2e-2, f"lse error {lerr:.3e}"


@case("features")
def features_case(name, sq, sk, causal, **features):
    q, k, v = rand(2, sq, 8, 64), rand(2, sk, 2, 64), rand(2, sk, 2, 64)
    if features.get("softcap"):
        q = q * 4  # scores large enough for the cap to matter
    call = dict(features)
    refs = dict(features)
    for key in ("score_fn", "mask_fn"):
        call.pop(key, None)
    for key in ("score_mod", "mask_mod", "mod_tensors", "mod_scalars", "mod_ints",
                "alibi_slopes"):
        refs.pop(key, None)
    if "alibi_slopes" in features:
        refs["slopes"] = features["alibi_slopes"]
    o, lse = flashjit.attention(q, k, v, causal=causal, return_lse=True, **call)
    assert o.shape == (2, sq, 8, 64), o.shape
    check_features(o, lse, q, k, v, causal=causal, **refs)
    # Without return_lse the eager fast path takes the built-in features (the user's code
    # keeps the operator): the operator's bits either way.
    fast = flashjit.attention(q, k, v, causal=causal, **call)
    assert torch.equal(fast, o), "without return_lse: not the operator's output"


def alibi_slopes(heads, batch=None):
    """The geometric slopes of the ALiBi paper, per head (and per sequence: scaled)."""
    base = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device="cuda")
    if batch is None:
        return base
    return torch.stack([base * (1 + 0.5 * b) for b in range(batch)])


@case("features: every one at once, a row that sees no key, the handles")
def features_together():
    q, k, v = rand(2, 150, 8, 64) * 3, rand(2, 190, 2, 64), rand(2, 190, 2, 64)
    slopes = alibi_slopes(8, 2)
    doc = (torch.arange(190, device="cuda", dtype=torch.int32) // 37).contiguous()
    score = "return score + args.scalar[0] * (float)(kv_idx - q_idx);"
    mask = ("const int *doc = (const int *)args.tensor[0];\n"
            "return q_idx != 5 && doc[q_idx + args.integer[0]] == doc[kv_idx];")
    o, lse = flashjit.attention(q, k, v, causal=True, window=(90, 0), softcap=20.0,
                                alibi_slopes=slopes, score_mod=score, mask_mod=mask,
                                mod_tensors=(doc,), mod_scalars=(0.01,), mod_ints=(40,),
                                return_lse=True)
    check_features(o, lse, q, k, v, causal=True, window=(90, 0), softcap=20.0, slopes=slopes,
                   score_fn=lambda s, b, h, i, j: s + 0.01 * (j - i).float(),
                   mask_fn=lambda b, h, i, j: (i != 5) & (doc[(i + 40).clamp(max=189)] ==
                                                          doc[j.clamp(max=189)]))
    assert torch.equal(o[:, 5], torch.zeros_like(o[:, 5])), "row 5 sees no key: o = 0"
    assert torch.isneginf(lse[:, :, 5]).all(), "row 5 sees no key: lse = -inf"
    keys = [kernel["spec_key"] for kernel in flashjit.info()["kernels"]]
    assert any(".win90_0.cap20.alibi.score-" in key and ".mask-" in key for key in keys), keys
    # Another text is another kernel; the same text (a new str) is the same handle.
    before = len(flashjit.info()["kernels"])
    flashjit.attention(q, k, v, score_mod="return score * 0.5f;")
    flashjit.attention(q, k, v, score_mod="return score * " + "0.5f;")
    flashjit.attention(q, k, v, score_mod="return score * 0.25f;")
    assert len(flashjit.info()["kernels"]) == before + 2, flashjit.info()["kernels"]


@case("features: varlen with a window and per-sequence ALiBi slopes")
def features_varlen():
    lens_q, lens_k = [1, 130, 77], [17, 130, 300]
    cu_q, cu_k = cu(lens_q), cu(lens_k)
    q, k, v = rand(sum(lens_q), 6, 64), rand(sum(lens_k), 2, 64), rand(sum(lens_k), 2, 64)
    slopes = alibi_slopes(6, 3)
    o = flashjit.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                           max_seqlen_q=130, max_seqlen_k=300, window=(48, 0),
                           alibi_slopes=slopes)
    for b in range(3):
        rq = slice(int(cu_q[b]), int(cu_q[b + 1]))
        rk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        check_features(o[rq][None], None, q[rq][None], k[rk][None], v[rk][None],
                       what=f"sequence {b}", causal=True, window=(48, 0),
                       slopes=slopes[b:b + 1])
    # The fast path's plan again, with other slopes of the same shape: the call's.
    call = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=130,
                max_seqlen_k=300, window=(48, 0), alibi_slopes=slopes * 0.5)
    fast = flashjit.attention(q, k, v, **call)
    want, _ = flashjit.attention(q, k, v, return_lse=True, **call)
    assert torch.equal(fast, want), "fast path: a plan reused with other ALiBi slopes"
    assert not torch.equal(fast, o), "other slopes, the same output"


@case("features: torch.compile(fullgraph=True)")
def features_compiled():
    q, k, v = rand(2, 256, 4, 64), rand(2, 256, 4, 64), rand(2, 256, 4, 64)
    slopes = alibi_slopes(4)

    @torch.compile(fullgraph=True)
    def f(q, k, v, slopes):
        return flashjit.attention(q, k, v, window=(64, 64), softcap=30.0, alibi_slopes=slopes)

    o = f(q, k, v, slopes)
    check_features(o, None, q, k, v, window=(64, 64), softcap=30.0, slopes=slopes)


@case("features: gradients")
def features_gradients(name, sq, sk, causal, dtype=torch.bfloat16, **features):
    """dq, dk, dv through flashjit's backward pass with the features (0.9, bwd_mma) against
    autograd of the fp32 formula with the same features, to 2x the error of the same
    formula in the inputs' dtype."""
    need_backward()
    scale_q = 4.0 if features.get("softcap") else 1.0  # scores into the cap's bend
    q = (rand(2, sq, 8, 64, dtype=dtype) * scale_q).detach().requires_grad_()
    k, v = rand(2, sk, 2, 64, dtype=dtype, grad=True), rand(2, sk, 2, 64, dtype=dtype, grad=True)
    do = rand(2, sq, 8, 64, dtype=dtype)
    call, refs = dict(features), dict(features)
    for key in ("mask_fn",):
        call.pop(key, None)
    for key in ("mask_mod", "mod_tensors", "mod_scalars", "mod_ints", "alibi_slopes"):
        refs.pop(key, None)
    if "alibi_slopes" in features:
        refs["slopes"] = features["alibi_slopes"]
    got = grads_of(lambda a, b, c: flashjit.attention(a, b, c, causal=causal, **call),
                   (q, k, v), do)
    leaves = tuple(t.detach().float().requires_grad_() for t in (q, k, v))
    ref = grads_of(lambda a, b, c: feature_reference(a, b, c, causal=causal, **refs)[0],
                   leaves, do.float())
    low = grads_of(lambda a, b, c: feature_reference(a, b, c, causal=causal, dtype=dtype,
                                                     **refs)[0], (q, k, v), do)
    compare_grads(got, ref, low)
    again = grads_of(lambda a, b, c: flashjit.attention(a, b, c, causal=causal,
                                                        deterministic=True, **call),
                     (q, k, v), do)
    compare_grads(again, ref, low)


@case("features: a score_mod's backward raises NotImplementedError")
def features_backward_raises():
    q, k, v = rand(1, 64, 2, 64, grad=True), rand(1, 64, 2, 64, grad=True), \
        rand(1, 64, 2, 64, grad=True)
    o = flashjit.attention(q, k, v, score_mod="return score * 0.5f;")  # the forward runs
    check_features(o.detach(), None, q.detach(), k.detach(), v.detach(),
                   score_fn=lambda s, b, h, i, j: s * 0.5)
    try:
        o.sum().backward()
    except NotImplementedError as ex:
        assert "does not take a score_mod" in str(ex), ex
        print(f"      NotImplementedError: {ex}")
        return
    raise AssertionError("backward with a score_mod did not raise")


@case("features: bad arguments")
def features_bad_arguments():
    q, k, v = rand(1, 64, 2, 64), rand(1, 64, 2, 64), rand(1, 64, 2, 64)
    for name, call, exc in (
            ("window", lambda: flashjit.attention(q, k, v, window=(-1, -1)), ValueError),
            ("softcap", lambda: flashjit.attention(q, k, v, softcap=-1.0), ValueError),
            ("slopes dtype", lambda: flashjit.attention(
                q, k, v, alibi_slopes=torch.ones(2, device="cuda", dtype=torch.bfloat16)),
             TypeError),
            ("slopes shape", lambda: flashjit.attention(
                q, k, v, alibi_slopes=torch.ones(3, device="cuda")), ValueError),
            ("code that does not compile", lambda: flashjit.attention(
                q, k, v, score_mod="return score +;"), flashjit.FlashJitError)):
        try:
            call()
        except exc as ex:
            print(f"      {name}: {type(ex).__name__}: {str(ex)[:200]}")
            continue
        raise AssertionError(f"{name}: not raised")


def features_cases():
    for causal in (False, True):
        features_case("window", 200, 333, causal, window=(64, 0))
        features_case("window", 200, 333, causal, window=(-1, 32))
        features_case("window", 257, 257, causal, window=(100, 100))
        features_case("softcap", 200, 333, causal, softcap=30.0)
        features_case("alibi [H]", 200, 333, causal, alibi_slopes=alibi_slopes(8))
        features_case("alibi [B, H]", 129, 129, causal, alibi_slopes=alibi_slopes(8, 2))
        features_case("score_mod", 200, 333, causal,
                      score_mod="return score + args.scalar[0] * (float)(kv_idx - q_idx);",
                      mod_scalars=(0.05,), score_fn=lambda s, b, h, i, j: s + 0.05 * (j - i))
        features_case("mask_mod", 200, 333, causal,
                      mask_mod="return ((q_idx + kv_idx + h) % args.integer[1]) != 0;",
                      mod_ints=(0, 3), mask_fn=lambda b, h, i, j: (i + j + h) % 3 != 0)
    features_together()
    features_varlen()
    features_compiled()
    features_backward_raises()
    for causal in (False, True):
        features_gradients("window", 200, 333, causal, window=(64, 0))
        features_gradients("window", 257, 257, causal, window=(100, 30), dtype=torch.float16)
        features_gradients("softcap", 200, 333, causal, softcap=5.0)
        features_gradients("alibi [B, H]", 129, 129, causal, alibi_slopes=alibi_slopes(8, 2))
        features_gradients("mask_mod", 200, 200, causal,
                           mask_mod="return q_idx / args.integer[0] == kv_idx / args.integer[0];",
                           mod_ints=(37,), mask_fn=lambda b, h, i, j: (i // 37) == (j // 37))
        doc = (torch.arange(300, device="cuda", dtype=torch.int32) // 41).contiguous()
        features_gradients("mask_mod, tensor and scalar arguments", 300, 300, causal,
                           mask_mod="const int *doc = (const int *)args.tensor[0];\n"
                                    "return doc[q_idx] == doc[kv_idx] && args.scalar[0] > 0.f;",
                           mod_tensors=(doc,), mod_scalars=(1.0,),
                           mask_fn=lambda b, h, i, j: doc[i] == doc[j])
        features_gradients("window + softcap + alibi", 300, 300, causal, window=(90, 0),
                           softcap=20.0, alibi_slopes=alibi_slopes(8))
    features_bad_arguments()


# ---- block masks (0.6) -------------------------------------------------------------
def need_block_mask():
    if not flashjit.has_block_mask():
        raise Skip(f"the library ({flashjit.library_path()}) has no fj_block_mask_create")


# Document ids per sequence: dq [B, Sq] and dk [B, Sk], row strides in args.integer[0/1]
# (0: every sequence reads row 0, the mask does not depend on b).
DOC_MASK = ("const int *dq = (const int *)args.tensor[0];\n"
            "const int *dk = (const int *)args.tensor[1];\n"
            "return dq[b * args.integer[0] + q_idx] == dk[b * args.integer[1] + kv_idx];")
# Prefix-LM: the first args.integer[0] keys (+ 16 per head) seen by every query, the rest
# causally (bottom-right: args.integer[1] = seq_k - seq_q); the second ignores h.
PREFIX_MASK = "return kv_idx < args.integer[0] + 16 * h || kv_idx <= q_idx + args.integer[1];"
PREFIX_MASK_SHARED = "return kv_idx < args.integer[0] || kv_idx <= q_idx + args.integer[1];"


def doc_ids(b, n, seed, docs=4, same=False):
    """[b, n] int32 document ids: `docs` runs of random lengths per sequence, or the
    same runs in every sequence (same=True)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for r in range(b):
        if same and rows:
            rows.append(rows[0])
            continue
        cuts = torch.randint(1, max(n, 2), (docs - 1,), generator=g).tolist()
        ids = torch.zeros(n, dtype=torch.int32)
        for c in cuts:
            ids[c:] += 1
        rows.append(ids)
    return torch.stack(rows).cuda()


def document(b, sq, sk, seed=0, shared_batch=False, empty_rows=0):
    """(mask_mod, attention's mod_* kwargs, mask_fn) of a document mask over keys' ids,
    queries the last sq positions (bottom-right, as causal); `empty_rows` first query rows
    of each sequence in a document no key has (rows that see nothing)."""
    dk = doc_ids(b, sk, seed, same=shared_batch)
    dq = dk[:, sk - sq:].clone(memory_format=torch.contiguous_format) if sq <= sk else \
        doc_ids(b, sq, seed + 1, same=shared_batch)  # rows sq apart, as mod_ints say
    if empty_rows:
        dq[:, :empty_rows] = -1
    mod = dict(mod_tensors=(dq, dk), mod_ints=(0, 0) if shared_batch else (sq, sk))
    dql, dkl = dq.long(), dk.long()
    return DOC_MASK, mod, lambda b_, h, i, j: dql[b_, i] == dkl[b_, j]


def prefix_lm(b, sq, sk, prefix=100, per_head=True):
    code = PREFIX_MASK if per_head else PREFIX_MASK_SHARED
    step = 16 if per_head else 0
    mod = dict(mod_ints=(prefix, sk - sq))
    return code, mod, lambda b_, h, i, j: (j < prefix + step * h) | (j <= i + (sk - sq))


def check_same(o, o_plain, q, k, v, what, **features):
    """o (with the mask) against o_plain (without) within the bar of the fp32 reference."""
    ref, _ = feature_reference(q, k, v, **features)
    low, _ = feature_reference(q, k, v, dtype=q.dtype, **features)
    err, perr = max_err(o, o_plain.float()), max_err(low, ref)
    assert err <= bar(perr, ref), f"{what}: with and without the block mask differ by " \
                                  f"{err:.3e}, same-dtype formula's error {perr:.3e}"


@case("block mask")
def block_mask_case(kind, b, sq, sk, hq, hk, causal, layout="bshd", shared_batch=False,
                    shared_heads=False, d=64, dtype=torch.bfloat16, empty_rows=0):
    need_block_mask()
    q, k, v = rand(b, sq, hq, d, dtype=dtype), rand(b, sk, hk, d, dtype=dtype), \
        rand(b, sk, hk, d, dtype=dtype)
    if kind == "document":
        code, mod, mask_fn = document(b, sq, sk, shared_batch=shared_batch,
                                      empty_rows=empty_rows)
    else:
        code, mod, mask_fn = prefix_lm(b, sq, sk, per_head=not shared_heads)
    inputs = (q, k, v) if layout == "bshd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    call = dict(causal=causal, layout=layout, mask_mod=code, **mod)
    with flashjit.create_block_mask(*inputs, shared_across_batch=shared_batch,
                                    shared_across_heads=shared_heads, **call) as mask:
        assert mask.shape == (b, sq, sk, False), mask
        o, lse = flashjit.attention(*inputs, return_lse=True, block_mask=mask, **call)
        plain, plain_lse = flashjit.attention(*inputs, return_lse=True, **call)
        # Without mask_mod and mod_*: the mask's.
        implicit = flashjit.attention(*inputs, causal=causal, layout=layout, block_mask=mask)
    assert mask.closed
    if layout == "bhsd":
        o, plain, implicit = (t.transpose(1, 2) for t in (o, plain, implicit))
    features = dict(causal=causal, mask_fn=mask_fn)
    check_features(o, lse, q, k, v, what="with the block mask", **features)
    check_features(plain, plain_lse, q, k, v, what="without", **features)
    check_same(o, plain, q, k, v, "o", **features)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(plain_lse)), "lse's -inf rows"
    assert torch.equal(implicit, o), "the mask's mask_mod and mod_* give another result"
    if empty_rows:
        assert torch.equal(o[:, :empty_rows], torch.zeros_like(o[:, :empty_rows])), \
            "rows that see no key: o = 0"


@case("block mask: varlen (cu_seqlens), a document mask per sequence")
def block_mask_varlen():
    need_block_mask()
    lens = [130, 1, 300, 77]
    cu_ = cu(lens)
    width = max(lens)
    ids = doc_ids(len(lens), width, 7, docs=3)
    q, k, v = rand(sum(lens), 8, 64), rand(sum(lens), 2, 64), rand(sum(lens), 2, 64)
    call = dict(cu_seqlens_q=cu_, cu_seqlens_k=cu_, max_seqlen_q=width, max_seqlen_k=width,
                mask_mod=DOC_MASK, mod_tensors=(ids, ids), mod_ints=(width, width))
    with flashjit.create_block_mask(q, k, v, shared_across_heads=True, **call) as mask:
        o = flashjit.attention(q, k, v, block_mask=mask, **call)
        plain = flashjit.attention(q, k, v, **call)
    for s in range(len(lens)):
        rows = slice(int(cu_[s]), int(cu_[s + 1]))
        own = ids[s].long()
        args = (q[rows][None], k[rows][None], v[rows][None])
        fn = (lambda own: lambda b_, h, i, j: own[i] == own[j])(own)
        check_features(o[rows][None], None, *args, what=f"sequence {s}", mask_fn=fn)
        check_same(o[rows][None], plain[rows][None], *args, f"sequence {s}", mask_fn=fn)


@case("block mask: update() after new document ids, in place and as new tensors")
def block_mask_update():
    need_block_mask()
    b, n = 2, 700
    q, k, v = rand(b, n, 4, 64), rand(b, n, 4, 64), rand(b, n, 4, 64)
    code, mod, fn1 = document(b, n, n, seed=1)
    dq, dk = mod["mod_tensors"]
    mask = flashjit.create_block_mask(q, k, v, causal=True, mask_mod=code, **mod)
    o1 = flashjit.attention(q, k, v, causal=True, block_mask=mask)
    check_features(o1, None, q, k, v, what="first ids", causal=True, mask_fn=fn1)
    # New contents in the same tensors.
    _, mod2, fn2 = document(b, n, n, seed=2)
    dq.copy_(mod2["mod_tensors"][0])
    dk.copy_(mod2["mod_tensors"][1])
    assert mask.update() is mask
    o2 = flashjit.attention(q, k, v, causal=True, block_mask=mask)
    check_features(o2, None, q, k, v, what="ids written in place", causal=True, mask_fn=fn2)
    # Other tensors (and their ints), given to update: the calls then take them.
    _, mod3, fn3 = document(b, n, n, seed=3)
    mask.update(mod_tensors=mod3["mod_tensors"], mod_ints=mod3["mod_ints"])
    o3 = flashjit.attention(q, k, v, causal=True, block_mask=mask)
    check_features(o3, None, q, k, v, what="new tensors", causal=True, mask_fn=fn3)
    plain = flashjit.attention(q, k, v, causal=True, mask_mod=code, **mod3)
    check_same(o3, plain, q, k, v, "o3", causal=True, mask_fn=fn3)
    mask.close()


@case("block mask: update() and attention in a CUDA graph, replayed on new ids")
def block_mask_cuda_graph():
    need_block_mask()
    b, n = 2, 513
    q, k, v = rand(b, n, 4, 64), rand(b, n, 4, 64), rand(b, n, 4, 64)
    code, mod, _ = document(b, n, n, seed=4)
    dq, dk = mod["mod_tensors"]
    mask = flashjit.create_block_mask(q, k, v, mask_mod=code, **mod)
    flashjit.attention(q, k, v, block_mask=mask)  # warm-up (the kernel is got already)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        mask.update()
        out = flashjit.attention(q, k, v, block_mask=mask)
    _, mod2, fn2 = document(b, n, n, seed=5)
    dq.copy_(mod2["mod_tensors"][0])
    dk.copy_(mod2["mod_tensors"][1])
    g.replay()
    torch.cuda.synchronize()
    check_features(out, None, q, k, v, what="replayed", mask_fn=fn2)
    want = flashjit.attention(q, k, v, mask_mod=code, **mod)
    check_same(out, want, q, k, v, "replayed", mask_fn=fn2)
    del g
    mask.close()


@case("block mask: torch.compile(fullgraph=True)")
def block_mask_compiled():
    need_block_mask()
    q, k, v = rand(2, 384, 4, 64), rand(2, 384, 4, 64), rand(2, 384, 4, 64)
    code, mod, fn = prefix_lm(2, 384, 384, prefix=70)
    mask = flashjit.create_block_mask(q, k, v, mask_mod=code, **mod)

    @torch.compile(fullgraph=True)
    def f(q, k, v):
        return flashjit.attention(q, k, v, block_mask=mask)

    o = f(q, k, v)
    check_features(o, None, q, k, v, mask_fn=fn)
    assert torch.equal(o, flashjit.attention(q, k, v, block_mask=mask)), "compiled != eager"
    mask.close()


@case("block mask: errors (another shape, another kernel, closed, no mask_mod)")
def block_mask_errors():
    need_block_mask()
    q, k, v = rand(2, 333, 8, 64), rand(2, 333, 2, 64), rand(2, 333, 2, 64)
    code, mod, _ = document(2, 333, 333)
    mask = flashjit.create_block_mask(q, k, v, mask_mod=code, **mod)
    q2, k2, v2 = rand(2, 300, 8, 64), rand(2, 300, 2, 64), rand(2, 300, 2, 64)
    _, mod2, _ = document(2, 300, 300)
    for name, call, exc, text in (
            ("another shape", lambda: flashjit.attention(q2, k2, v2, block_mask=mask, **mod2),
             ValueError, "build a mask for this shape"),
            ("another batch", lambda: flashjit.attention(q[:1], k[:1], v[:1], block_mask=mask),
             ValueError, "this call has batch 1"),
            ("causal", lambda: flashjit.attention(q, k, v, causal=True, block_mask=mask),
             ValueError, "causal: the mask's False, this call's True"),
            ("another mask_mod", lambda: flashjit.attention(
                q, k, v, mask_mod=PREFIX_MASK, mod_ints=(1, 0), block_mask=mask), ValueError,
             "mask_mod: another text"),
            ("head dim", lambda: flashjit.attention(
                rand(2, 333, 8, 128), rand(2, 333, 2, 128), rand(2, 333, 2, 128),
                block_mask=mask), ValueError, "head_dim: the mask's 64, this call's 128"),
            ("not a mask", lambda: flashjit.attention(q, k, v, mask_mod=code, block_mask=123,
                                                      **mod), TypeError, "flashjit.BlockMask"),
            ("no mask_mod", lambda: flashjit.create_block_mask(q, k, v, mask_mod=None),
             ValueError, "needs mask_mod"),
            ("shared batch with cu_seqlens", lambda: flashjit.create_block_mask(
                q.view(-1, 8, 64), k.view(-1, 2, 64), v.view(-1, 2, 64), mask_mod=code,
                cu_seqlens_q=cu([333, 333]), cu_seqlens_k=cu([333, 333]), max_seqlen_q=333,
                max_seqlen_k=333, shared_across_batch=True), ValueError,
             "shared_across_batch")):
        try:
            call()
        except exc as ex:
            assert text in str(ex), f"{name}: {ex}"
            print(f"      {name}: {type(ex).__name__}: {str(ex)[:160]}")
            continue
        raise AssertionError(f"{name}: not raised")
    # The library's own check, through the C API: its message as a FlashJitError.
    from flashjit import _capi, _ops
    lib = _capi.library()
    args = _ops.forward_args(q2, k2, v2, "bshd", 2, 300, 300, None, None, None,
                             _capi.mod_args([t.data_ptr() for t in mod2["mod_tensors"]], (),
                                            mod2["mod_ints"]), o=torch.empty_like(q2))
    args.block_mask = mask.address
    try:
        import ctypes
        lib.check("fj_forward", lib.lib.fj_forward(
            mask.kernel, ctypes.byref(args),
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)))
        raise AssertionError("fj_forward took a mask of another shape")
    except flashjit.FlashJitError as ex:
        assert "args->block_mask was built for batch 2, seqlen_q 333" in ex.message, ex
        print(f"      fj_forward: {ex}")
    mask.close()
    try:
        flashjit.attention(q, k, v, block_mask=mask)
        raise AssertionError("a closed mask was used")
    except ValueError as ex:
        assert "closed" in str(ex), ex


@case("block mask: gradients through the backward's block sparsity (0.10)")
def block_mask_gradients(causal):
    need_block_mask()
    if not getattr(flashjit._capi.library(), "has_backward_block_mask", False):
        raise Skip(f"the library ({flashjit.library_path()}) has no backward block masks")
    from flashjit import _ops
    b, n, d = 2, 700, 128
    q, k, v = rand(b, n, 8, d, grad=True), rand(b, n, 2, d, grad=True), \
        rand(b, n, 2, d, grad=True)
    code, mod, _ = document(b, n, n)
    call = dict(causal=causal, mask_mod=code, **mod)
    do = torch.randn_like(q)
    with flashjit.create_block_mask(q, k, v, **call) as mask:
        assert mask.backward, "inputs that require grad: the mask serves the backward too"
        o, lse = flashjit.attention(q, k, v, block_mask=mask, return_lse=True, **call)

        # The backward alone on the same o and lse (scale 0.0: the default, as the
        # operator takes it), deterministic: the skipped steps add nothing and dq's pass
        # walks every block, so the gradients are those without the mask bit for bit.
        # (Through each forward they may differ in the last bit: the forward's partly
        # masked tiles take the fast softmax with the mask's keep bits and the exact one
        # without, so a row's O can round apart, docs/PYTHON.md.)
        def backward(address):
            return [g.float() for g in _ops._attention_bwd_impl(
                do, q, k, v, o.detach(), lse, causal=causal, scale=0.0, layout="bshd",
                cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
                deterministic=True, window=None, softcap=0.0, alibi_slopes=None,
                mask_mod=code, mod_tensors=list(mod["mod_tensors"]), mod_scalars=[],
                mod_ints=list(mod["mod_ints"]), block_mask=address)]
        got, plain = backward(mask.address), backward(0)
        for name, g, h in zip(("dq", "dk", "dv"), got, plain):
            assert torch.equal(g, h), f"{name} with the block mask differs from without"
        # Through autograd, each call with its own forward: the same up to that rounding.
        through = grads_of(lambda a, b_, c: flashjit.attention(
            a, b_, c, block_mask=mask, deterministic=True, **call), (q, k, v), do)
        # dq by atomics (in another order): close to the same too.
        fast = grads_of(lambda a, b_, c: flashjit.attention(a, b_, c, block_mask=mask, **call),
                        (q, k, v), do)
    unmasked = grads_of(lambda a, b_, c: flashjit.attention(a, b_, c, deterministic=True,
                                                            **call), (q, k, v), do)
    for name, g, h, u in zip(("dq", "dk", "dv"), through, plain, unmasked):
        assert torch.equal(g, h), f"{name} through autograd differs from the backward alone"
        err = (g - u).abs().max().item()
        assert err <= 1e-2 * u.abs().max().item(), f"{name}: {err:.3e} from the unmasked call"
    for name, g, h in zip(("dq", "dk", "dv"), fast, plain):
        err = (g - h).abs().max().item()
        assert err <= 1e-2 * h.abs().max().item(), f"{name}: {err:.3e} from the unmasked"


def block_mask_cases():
    for causal in (False, True):
        block_mask_case("document", 2, 333, 333, 8, 2, causal)            # GQA, odd lengths
        block_mask_case("document", 2, 200, 333, 8, 2, causal)            # seq_q < seq_k
        block_mask_case("prefix", 2, 300, 300, 6, 2, causal)              # per-head prefix
        block_mask_case("prefix", 1, 1000, 1000, 4, 1, causal, shared_batch=True,
                        shared_heads=True, d=128)                         # MQA, shared
    block_mask_case("document", 3, 257, 257, 4, 4, False, shared_batch=True, shared_heads=True,
                    d=128, dtype=torch.float16)
    block_mask_case("document", 2, 300, 300, 8, 2, True, layout="bhsd")
    block_mask_case("document", 2, 190, 190, 4, 2, False, empty_rows=5)
    block_mask_case("document", 1, 2048, 2048, 4, 2, True, d=128)        # many skipped tiles
    block_mask_varlen()
    block_mask_update()
    block_mask_cuda_graph()
    block_mask_compiled()
    block_mask_errors()
    for causal in (False, True):
        block_mask_gradients(causal)


# ---- decode over a KV cache (0.4) -------------------------------------------------
NAN = float("nan")


def need_decode():
    if not flashjit.has_decode():
        raise Skip(f"the library ({flashjit.library_path()}) has no fj_decode")


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


def kv_cache(lens, hk, d, dv, dtype, page=None, n_max=None, spare=3):
    """A cache holding sequences of `lens` keys and NaN everywhere else (an unmasked read
    shows): contiguous [batch, n_max, hk, d] (page None) or a pool of shuffled pages of
    `page` tokens, `spare` of them owned by no sequence. Returns k_cache, v_cache,
    block_table (None when contiguous), and the keys and values of each sequence as the
    reference sees them ([len, hk, d] each)."""
    b = len(lens)
    n_max = n_max or max(max(lens), 1)
    keys = [rand(n, hk, d, dtype=dtype) for n in lens]
    values = [rand(n, hk, dv, dtype=dtype) for n in lens]
    if page is None:
        k = torch.full((b, n_max, hk, d), NAN, dtype=dtype, device="cuda")
        v = torch.full((b, n_max, hk, dv), NAN, dtype=dtype, device="cuda")
        table = table_cpu = None
    else:
        width = -(-n_max // page)
        pages = b * width + spare
        table_cpu = torch.randperm(pages)[:b * width].view(b, width).to(torch.int32)
        table = table_cpu.cuda()
        k = torch.full((pages, page, hk, d), NAN, dtype=dtype, device="cuda")
        v = torch.full((pages, page, hk, dv), NAN, dtype=dtype, device="cuda")
    for i in range(b):
        write_rows(k, table_cpu, page, i, 0, keys[i])
        write_rows(v, table_cpu, page, i, 0, values[i])
    return k, v, table, keys, values


def check_decoded(o, lse, q, keys, values, causal, scale=None, what="o", window=None,
                  softcap=0.0, alibi=None, bias=None, keep=None):
    """Each sequence against the fp32 reference over its keys (with the window, softcap
    and ALiBi's slopes, [heads_q] or [batch, heads_q], when given; bias(b) and keep(b),
    a score_mod's addend and a mask_mod's keep of sequence b, [heads_q, seqlen_q, keys]);
    the bar: 2x the error of the same formula in q's dtype, + 1e-5."""
    assert not torch.isnan(o).any(), f"{what}: NaN (a read past a sequence's keys?)"
    for b in range(q.shape[0]):
        args = (q[b:b + 1], keys[b][None], values[b][None], causal, scale)
        slopes = None if alibi is None else (alibi[b] if alibi.dim() == 2 else alibi)
        f = dict(window=window, softcap=softcap, alibi=slopes,
                 bias=None if bias is None else bias(b), keep=None if keep is None else keep(b))
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


PAGES = {"contiguous": None, "paged16": 16, "paged64": 64}


@case("decode")
def decode_case(layout, dtype, d, hq, hk, sq, causal, lens=(300, 77, 1), dv=None,
                num_splits=0):
    need_decode()
    dv = dv or d
    k, v, table, keys, values = kv_cache(list(lens), hk, d, dv, dtype, PAGES[layout])
    q = rand(len(lens), sq, hq, d, dtype=dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    o, lse = flashjit.decode(q, k, v, seqlens, table, causal=causal, num_splits=num_splits,
                             return_lse=True)
    assert o.shape == (len(lens), sq, hq, dv) and o.dtype == dtype, (o.shape, o.dtype)
    assert lse.shape == (len(lens), hq, sq) and lse.dtype == torch.float32, lse.shape
    check_decoded(o, lse, q, keys, values, causal)
    again = flashjit.decode(q, k, v, seqlens, table, causal=causal, num_splits=num_splits)
    assert torch.equal(again, o), "a second call (through its plan) differs"


@case("decode with a window, softcap and ALiBi (0.13)")
def decode_window_softcap_case(layout, causal, window, softcap, alibi=None):
    need_decode()
    lens = [5000, 77, 1, 1300]
    k, v, table, keys, values = kv_cache(lens, 2, 128, 128, torch.bfloat16, PAGES[layout])
    q = rand(len(lens), 3, 8, 128)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    slopes = None
    if alibi == "heads":
        slopes = torch.tensor([2.0 ** (-(h + 1)) for h in range(8)], device="cuda")
    elif alibi == "batch":
        slopes = torch.rand(len(lens), 8, device="cuda") * 0.5 + 0.01
    f = dict(window=window, softcap=softcap)
    for splits in (1, 0):  # o: the automatic split count's, which `again` runs too
        o, lse = flashjit.decode(q, k, v, seqlens, table, causal=causal, num_splits=splits,
                                 return_lse=True, alibi_slopes=slopes, **f)
        check_decoded(o, lse, q, keys, values, causal, what=f"num_splits={splits}",
                      alibi=slopes, **f)
    again = flashjit.decode(q, k, v, seqlens, table, causal=causal, alibi_slopes=slopes, **f)
    assert torch.equal(again, o), "a second call (through its plan) differs"
    plain = flashjit.decode(q, k, v, seqlens, table, causal=causal)
    assert not torch.equal(plain, o), "the window / softcap changed nothing"


@case("decode with score_mod and mask_mod (0.14)")
def decode_mods_case(layout, causal, window=None):
    """A score_mod of every index and a scalar, a mask_mod reading a tensor by sequence
    and key; a second call through the plan with another scalar."""
    need_decode()
    lens = [5000, 77, 1, 1300]
    k, v, table, keys, values = kv_cache(lens, 2, 128, 128, torch.bfloat16, PAGES[layout])
    sq, hq = 3, 8
    q = rand(len(lens), sq, hq, 128)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    kept = (torch.rand(len(lens), max(lens), device="cuda") > 0.25).to(torch.uint8)
    score = "return score + args.scalar[0] * (float)((kv_idx * 7 + q_idx * 3 + h) % 11);"
    mask = ("const unsigned char *keep = (const unsigned char *)args.tensor[0];\n"
            "return keep[b * args.integer[0] + kv_idx] != 0;")

    def bias(scalar):
        def of(b):
            i = torch.arange(sq, device="cuda")[None, :, None]
            j = torch.arange(lens[b], device="cuda")[None, None, :]
            h = torch.arange(hq, device="cuda")[:, None, None]
            return scalar * ((j * 7 + i * 3 + h) % 11).float()
        return of

    def keep(b):
        return kept[b, :lens[b]].bool()[None, None, :].expand(hq, sq, lens[b])

    f = dict(score_mod=score, mask_mod=mask, mod_tensors=(kept,), mod_ints=(max(lens),))
    for splits in (1, 0):
        o, lse = flashjit.decode(q, k, v, seqlens, table, causal=causal, num_splits=splits,
                                 return_lse=True, window=window, mod_scalars=(0.5,), **f)
        check_decoded(o, lse, q, keys, values, causal, what=f"num_splits={splits}",
                      window=window, bias=bias(0.5), keep=keep)
    again = flashjit.decode(q, k, v, seqlens, table, causal=causal, window=window,
                            mod_scalars=(0.5,), **f)
    assert torch.equal(again, o), "a second call (through its plan) differs"
    other = flashjit.decode(q, k, v, seqlens, table, causal=causal, window=window,
                            mod_scalars=(-0.25,), **f)  # the plan's, a new scalar
    check_decoded(other, None, q, keys, values, causal, what="another scalar",
                  window=window, bias=bias(-0.25), keep=keep)


@case("decode refuses a bad window, bad slopes")
def decode_feature_refusals():
    need_decode()
    q, k, v = rand(2, 1, 8, 128), rand(2, 64, 2, 128), rand(2, 64, 2, 128)
    try:
        flashjit.decode(q, k, v, window=(-1, -1))
        raise AssertionError("window (-1, -1) was accepted")
    except ValueError as e:
        assert "window" in str(e), e
    try:
        flashjit.decode(q, k, v, alibi_slopes=torch.ones(3, device="cuda"))
        raise AssertionError("slopes of 3 heads were accepted for 8")
    except ValueError as e:
        assert "alibi_slopes" in str(e), e


@case("decode, contiguous cache without cache_seqlens, out= a strided view, softmax_scale")
def decode_full_cache():
    need_decode()
    q, k, v = rand(4, 3, 8, 128), rand(4, 333, 2, 128), rand(4, 333, 2, 128)
    out = torch.empty(4, 8, 3, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    got = flashjit.decode(q, k, v, causal=True, softmax_scale=0.05, out=out)
    assert got is out
    check_decoded(out, None, q, list(k), list(v), True, scale=0.05)
    # q as a view of SDPA's [batch, heads, 1, d] layout
    qs = rand(4, 8, 1, 128).transpose(1, 2)
    check_decoded(flashjit.decode(qs, k, v), None, qs, list(k), list(v), False)


@case("decode, a long cache: automatic splits, one, five")
def decode_long():
    need_decode()
    lens = [70000, 4099]
    k, v, table, keys, values = kv_cache(lens, 2, 128, 128, torch.bfloat16, 64)
    q = rand(2, 1, 16, 128)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    outs = []
    for splits in (0, 1, 5):
        o, lse = flashjit.decode(q, k, v, seqlens, table, num_splits=splits, return_lse=True)
        check_decoded(o, lse, q, keys, values, False, what=f"num_splits={splits}")
        outs.append(o)
    # max_seqlen_k: the bound of the lengths, when the table is wider than any sequence.
    o = flashjit.decode(q, k, v, seqlens, table, max_seqlen_k=70000)
    check_decoded(o, None, q, keys, values, False, what="max_seqlen_k")


@case("decode, a sequence with no keys, a row that sees none")
def decode_empty():
    need_decode()
    lens = [0, 5, 64]
    k, v, table, keys, values = kv_cache(lens, 2, 64, 64, torch.float16, 16)
    q = rand(3, 8, 4, 64, dtype=torch.float16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for causal in (False, True):
        o, lse = flashjit.decode(q, k, v, seqlens, table, causal=causal, return_lse=True)
        check_decoded(o, lse, q, keys, values, causal)
        assert torch.equal(o[0], torch.zeros_like(o[0])), "no keys: o = 0"
        assert torch.isneginf(lse[0]).all(), "no keys: lse = -inf"
        if causal:  # 5 keys, 8 rows: rows 0..2 see none
            assert torch.isneginf(lse[1, :, :3]).all() and not torch.isneginf(lse[1, :, 3:]).any()


@case("decode has no autograd")
def decode_no_grad():
    need_decode()
    q = rand(2, 1, 4, 64, grad=True)
    k, v = rand(2, 100, 4, 64), rand(2, 100, 4, 64)
    o = flashjit.decode(q, k, v)
    assert not o.requires_grad and o.grad_fn is None, "decode recorded autograd history"


@case("kv_append, then decode")
def kv_append_case(layout, new_len, causal):
    need_decode()
    dtype, hq, hk, d = torch.bfloat16, 8, 2, 128
    old = [250, 64, 0]
    page = PAGES[layout]
    k, v, table, keys, values = kv_cache(old, hk, d, d, dtype, page, n_max=320)
    k_ref, v_ref = k.clone(), v.clone()
    k_new, v_new = rand(3, new_len, hk, d, dtype=dtype), rand(3, new_len, hk, d, dtype=dtype)
    lens = [n + new_len for n in old]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    flashjit.kv_append(k, v, k_new, v_new, seqlens, table)
    table_cpu = None if table is None else table.cpu()
    for b, n in enumerate(old):
        write_rows(k_ref, table_cpu, page, b, n, k_new[b])
        write_rows(v_ref, table_cpu, page, b, n, v_new[b])
    for name, got, want in (("k_cache", k, k_ref), ("v_cache", v, v_ref)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), \
            f"{name} after kv_append differs from the rows written by torch indexing"
    q = rand(3, new_len, hq, d, dtype=dtype)
    o = flashjit.decode(q, k, v, seqlens, table, causal=causal)
    assert torch.equal(o, flashjit.decode(q, k_ref, v_ref, seqlens, table, causal=causal))
    keys = [torch.cat([keys[b], k_new[b]]) for b in range(3)]
    values = [torch.cat([values[b], v_new[b]]) for b in range(3)]
    check_decoded(o, None, q, keys, values, causal)


@case("decode + kv_append in a CUDA graph, replayed with new tokens")
def decode_cuda_graph():
    need_decode()
    old = [100, 30, 7]
    k, v, table, _, _ = kv_cache(old, 2, 128, 128, torch.bfloat16, 16, n_max=256)
    seqlens = torch.tensor([n + 1 for n in old], dtype=torch.int32, device="cuda")
    q, k_new, v_new = rand(3, 1, 8, 128), rand(3, 1, 2, 128), rand(3, 1, 2, 128)

    def step():
        flashjit.kv_append(k, v, k_new, v_new, seqlens, table)
        return flashjit.decode(q, k, v, seqlens, table, causal=True)
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
        flashjit.kv_append(k_ref, v_ref, k_new, v_new, seqlens, table)
        want = flashjit.decode(q, k_ref, v_ref, seqlens, table, causal=True)
        torch.cuda.synchronize()
        assert torch.equal(k.view(torch.int16), k_ref.view(torch.int16)), "replayed append"
        assert torch.equal(captured, want), "replayed decode differs from a direct call"


@case("decode + kv_append under torch.compile(fullgraph=True)")
def decode_compiled():
    need_decode()
    old = [90, 17]
    k, v, table, _, _ = kv_cache(old, 2, 64, 64, torch.float16, 16, n_max=128)
    seqlens = torch.tensor([n + 2 for n in old], dtype=torch.int32, device="cuda")
    q = rand(2, 2, 4, 64, dtype=torch.float16)
    k_new, v_new = rand(2, 2, 2, 64, dtype=torch.float16), rand(2, 2, 2, 64, dtype=torch.float16)

    def step(q, k, v, k_new, v_new, seqlens, table):
        flashjit.kv_append(k, v, k_new, v_new, seqlens, table)
        o, lse = flashjit.decode(q, k, v, seqlens, table, causal=True, return_lse=True)
        # the window and softcap through the operator too (0.13), and user code (0.14)
        w = flashjit.decode(q, k, v, seqlens, table, causal=True, window=(32, 0),
                            softcap=30.0)
        m = flashjit.decode(q, k, v, seqlens, table, causal=True,
                            score_mod="return score * args.scalar[0];",
                            mask_mod="return kv_idx % 5 != 2;", mod_scalars=[0.5])
        return o * 2, lse, w, m
    k2, v2 = k.clone(), v.clone()
    want = step(q, k, v, k_new, v_new, seqlens, table)
    got = torch.compile(step, fullgraph=True)(q, k2, v2, k_new, v_new, seqlens, table)
    assert torch.equal(k.view(torch.int16), k2.view(torch.int16)), "compiled append"
    assert torch.equal(v.view(torch.int16), v2.view(torch.int16)), "compiled append"
    for name, a, b in zip(("o", "lse", "windowed o", "o with user code"), want, got):
        assert torch.equal(a, b), f"{name}: compiled differs from eager"


@case("decode: bad arguments")
def decode_bad_arguments():
    need_decode()
    q, k, v = rand(2, 1, 4, 64), rand(2, 100, 4, 64), rand(2, 100, 4, 64)
    lens = torch.tensor([100, 50], dtype=torch.int32, device="cuda")
    base = torch.empty(2 * 4 * 64 + 8, device="cuda", dtype=torch.bfloat16)
    misaligned = base[1:1 + q.numel()].view(q.shape)
    for name, call, exc in (
            ("fp32", lambda: flashjit.decode(q.float(), k.float(), v.float()), TypeError),
            ("cpu", lambda: flashjit.decode(q.cpu(), k.cpu(), v.cpu()), ValueError),
            ("int64 lengths", lambda: flashjit.decode(q, k, v, lens.long()), TypeError),
            ("paged without lengths", lambda: flashjit.decode(
                q, k, v, None, torch.zeros(2, 100, dtype=torch.int32, device="cuda")),
             ValueError),
            ("num_splits", lambda: flashjit.decode(q, k, v, num_splits=200), ValueError),
            ("misaligned", lambda: flashjit.decode(misaligned, k, v),
             (ValueError, flashjit.FlashJitError)),
            ("append rows", lambda: flashjit.kv_append(k, v, rand(2, 1, 2, 64),
                                                       rand(2, 1, 2, 64), lens), ValueError)):
        try:
            call()
        except exc as ex:
            print(f"      {name}: {type(ex).__name__}: {ex}")
            continue
        raise AssertionError(f"{name}: not raised")


def decode_cases():
    combos = [(torch.bfloat16, 128, 8, 2), (torch.float16, 64, 8, 8), (torch.float16, 128, 8, 8),
              (torch.bfloat16, 64, 8, 2), (torch.bfloat16, 128, 4, 1)]
    for dtype, d, hq, hk in combos:
        for layout in PAGES:
            for sq in (1, 4, 16):
                for causal in (False, True):
                    decode_case(layout, dtype, d, hq, hk, sq, causal)
    decode_case("paged16", torch.bfloat16, 128, 8, 2, 4, True, dv=64)
    decode_case("paged64", torch.float16, 64, 8, 2, 1, False, num_splits=1)
    decode_case("contiguous", torch.bfloat16, 128, 8, 2, 1, False, lens=(2000, 1500, 3),
                num_splits=7)
    for layout, causal, window, softcap in (("paged16", True, (100, 0), 0.0),
                                            ("contiguous", False, (700, -1), 0.0),
                                            ("paged64", False, (37, 20), 30.0),
                                            ("paged16", True, None, 2.0)):
        decode_window_softcap_case(layout, causal, window, softcap)
    decode_window_softcap_case("paged16", True, None, 0.0, alibi="heads")
    decode_window_softcap_case("contiguous", False, (300, -1), 20.0, alibi="batch")
    if getattr(flashjit._capi.library(), "has_decode_mods", False):
        decode_mods_case("paged16", True)
        decode_mods_case("contiguous", False, (700, 20))
    decode_feature_refusals()
    decode_full_cache()
    decode_long()
    decode_empty()
    decode_no_grad()
    for layout in PAGES:
        for new_len, causal in ((1, False), (4, True)):
            kv_append_case(layout, new_len, causal)
    decode_cuda_graph()
    decode_compiled()
    decode_bad_arguments()
    kernels = [k for k in flashjit.info()["kernels"] if k["decode"]]
    print(f"      {len(kernels)} decode handles, families "
          f"{sorted({k['decode_family'] for k in kernels})}")


def main():
    if gpu_harness.no_device(torch):
        return 0
    random.seed(0)
    torch.manual_seed(0)
    print(f"flashjit {flashjit.version()} ({flashjit.library_path()}), backward: "
          f"{flashjit.has_backward()}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    flashjit.configure(tune_mode="heuristic", cache_path="")
    shapes = [(torch.bfloat16, 64, 4, 4, 1, 1), (torch.float16, 128, 8, 2, 113, 203),
              (torch.bfloat16, 96, 6, 1, 257, 389), (torch.float16, 256, 4, 2, 300, 77),
              (torch.bfloat16, 128, 4, 4, 1023, 1024), (torch.bfloat16, 40, 2, 2, 64, 513)]
    rng = random.Random(1)
    for _ in range(4):  # random shapes: odd lengths, GQA groups
        hk = rng.choice((1, 2, 4))
        shapes.append((rng.choice((torch.float16, torch.bfloat16)), rng.choice((32, 64, 128)),
                       hk * rng.choice((1, 2, 3)), hk, rng.randrange(1, 700),
                       rng.randrange(1, 700)))
    for dtype, d, hq, hk, sq, sk in shapes:
        for causal in (False, True):
            forward(dtype, d, hq, hk, sq, sk, causal, "bshd")
            gradients(dtype, d, hq, hk, sq, sk, causal)
        forward(dtype, d, hq, hk, sq, sk, True, "bhsd")
    forward(torch.bfloat16, 64, 4, 2, 200, 333, True, "bhsd-contiguous")
    forward(torch.bfloat16, 64, 4, 2, 200, 333, False, "bshd", 128)  # head_dim_v != head_dim
    gradients(torch.float16, 64, 4, 2, 200, 333, True, False, 128)
    gradients(torch.bfloat16, 128, 8, 2, 333, 444, True, True)
    packed_views()
    lse_case()
    for causal in (False, True):
        varlen(causal, [1, 130, 77], [17, 130, 300])
        varlen_gradients(causal)
    varlen(True, [64], [64])
    backward_raises_without_library_support()
    compiled()
    eager_autograd()
    compiled_dynamic()
    compiled_reduce_overhead()
    cuda_graph()
    cuda_graph_backward()
    threads()
    side_stream()
    sdpa_case()
    sdpa_gradients()
    bad_arguments()
    features_cases()
    block_mask_cases()
    decode_cases()
    length_ladder()
    import gpu_test_fp8  # FP8 (0.7): counted here too (gpu_harness.results)
    gpu_test_fp8.run_all()
    import gpu_test_fp8_cache  # the FP8 KV cache (0.12): counted here too
    gpu_test_fp8_cache.run_all()
    info = flashjit.info()
    print(f"{len(info['kernels'])} kernel handles; contexts: "
          f"{[(c['device_name'], c['target'], c['tune_mode']) for c in info['contexts']]}")
    return gpu_harness.report()


if __name__ == "__main__":
    sys.exit(main())
