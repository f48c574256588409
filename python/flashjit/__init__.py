"""flashjit for PyTorch: run-time generated, tuned flash-attention kernels
(libflashjit.so through ctypes; docs/PYTHON.md).

    import flashjit
    o = flashjit.attention(q, k, v, causal=True)          # [batch, seq, heads, dim]
    o = flashjit.sdpa(query, key, value, is_causal=True)   # F.scaled_dot_product_attention's call

Importing needs neither torch nor a GPU; the first call on tensors loads both.
"""
import contextlib
import math
import os

from ._capi import FlashJitError, library
from ._checks import check_inputs

__all__ = ["attention", "sdpa", "info", "configure", "tuning", "FlashJitError", "library_path",
           "version"]


def library_path():
    """The libflashjit.so in use."""
    return library().path


def version():
    return library().version()


def _torch_ops():
    from . import _ops as ops  # imports torch
    return ops


def configure(tune_mode=None, cache_path=None, budget_s=None):
    """Process-wide settings for contexts created from now on (kernels already got keep
    theirs). tune_mode: 'auto' ($FLASHJIT_TUNE, else default), 'default' (tune on a cache
    miss), 'heuristic' (compile the model's tile, no timing), 'cached' (never compile),
    'exhaustive'. cache_path: the user cache file ('' = in memory only; None = the default,
    $FLASHJIT_CACHE or ~/.cache/flashjit/cache.sqlite). budget_s: tuning seconds per
    (description, shape bucket); 0 = the library's default (30)."""
    from ._capi import TUNE_MODES
    ops = _torch_ops()
    if tune_mode is not None:
        if tune_mode not in TUNE_MODES:
            raise ValueError(f"tune_mode is {tune_mode!r}: expected one of {sorted(TUNE_MODES)}")
        ops.settings["tune_mode"] = tune_mode
    if cache_path is not None:
        ops.settings["cache_path"] = os.fspath(cache_path)
    if budget_s is not None:
        if not (budget_s >= 0 and math.isfinite(budget_s)):
            raise ValueError(f"budget_s is {budget_s}: expected a finite number of seconds >= 0")
        ops.settings["budget_s"] = float(budget_s)


@contextlib.contextmanager
def tuning(budget_s=None, tune_mode=None, cache_path=None):
    """Kernels first got inside the block (on this thread) use these settings, e.g.
    `with flashjit.tuning(budget_s=5): model(x)` caps each new tune at 5 s. Handles
    already got keep their kernels; the library's tuning budget is per (description,
    shape bucket), so this is a budget per new kernel, not for the whole block."""
    ops = _torch_ops()
    saved = getattr(ops._local, "settings", None)
    new = dict(saved or ops.settings)
    if budget_s is not None:
        if not (budget_s >= 0 and math.isfinite(budget_s)):
            raise ValueError(f"budget_s is {budget_s}: expected a finite number of seconds >= 0")
        new["budget_s"] = float(budget_s)
    if tune_mode is not None:
        from ._capi import TUNE_MODES
        if tune_mode not in TUNE_MODES:
            raise ValueError(f"tune_mode is {tune_mode!r}: expected one of {sorted(TUNE_MODES)}")
        new["tune_mode"] = tune_mode
    if cache_path is not None:
        new["cache_path"] = os.fspath(cache_path)
    ops._local.settings = new
    try:
        yield
    finally:
        ops._local.settings = saved


def info():
    """What flashjit has: the library, its version, whether it has the backward pass,
    the settings, and each context opened so far (device, target, cache, counts)."""
    import ctypes as C
    from . import _capi
    lib = library()
    out = dict(library=lib.path, version=lib.version(), backward=lib.has_backward,
               environment={k: os.environ[k] for k in ("FLASHJIT_CACHE", "FLASHJIT_TUNE",
                                                       "FLASHJIT_FAMILY", "FLASHJIT_LIBRARY")
                            if k in os.environ},
               contexts=[])
    try:
        ops = _torch_ops()
    except ImportError:
        return out
    out["settings"] = dict(ops.settings)
    for key, handle in list(ops._contexts.items()):
        ci = _capi.new(_capi.ContextInfo)
        lib.check("fj_context_info", lib.lib.fj_context_info(handle, C.byref(ci)))
        out["contexts"].append(dict(
            device=ci.device, device_name=ci.device_name.decode(), target=ci.target.decode(),
            tune_mode=ci.tune_mode, user_cache_path=ci.user_cache_path.decode(),
            kernels=ci.kernels_outstanding, compilations=ci.compilations, tunes=ci.tunes,
            budget_s=key[3]))
    return out


def attention(q, k, v, *, causal=False, scale=None, layout="bshd", cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, return_lse=False,
              deterministic=False):
    """Exact attention softmax(q k^T * scale) v on CUDA fp16/bf16 tensors, launched on
    the current stream.

    layout 'bshd': q [batch, seq_q, heads_q, d], k [batch, seq_k, heads_kv, d],
    v [batch, seq_k, heads_kv, dv] (flash_attn_func's); 'bhsd': [batch, heads, seq, d]
    (SDPA's). GQA/MQA when heads_q is a multiple of heads_kv. causal is aligned to the
    bottom right (query i sees keys j <= i + seq_k - seq_q), as FlashAttention >= 2.1.
    Variable-length: q [total_q, heads_q, d] etc. with cu_seqlens_q/k (int32, batch + 1
    prefix sums) and max_seqlen_q/k. Returns o (q's layout, dv wide), and with
    return_lse the log-sum-exp [batch, heads_q, seq_q] fp32 ([heads_q, total_q] varlen),
    not differentiable. Gradients flow to q, k and v through flashjit's backward pass
    (deterministic=True: bitwise-reproducible dq).

    The first call of a description gets its kernel (from the cache, else compiled or
    tuned: do it before capturing a CUDA graph); later calls only launch.
    """
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    ops = _fast_ops
    if ops is not None and not varlen and not return_lse:
        # Eager inference: the launch without the operator dispatcher (its cost is most
        # of a small call's; docs/PYTHON.md, "Overhead").
        out = ops.fast_forward(q, k, v, causal, scale, layout)
        if out is not None:
            return out
    _, dims = check_inputs(q, k, v, layout, cu_seqlens_q, cu_seqlens_k)
    if varlen and (max_seqlen_q is None or max_seqlen_k is None):
        raise ValueError("with cu_seqlens, max_seqlen_q and max_seqlen_k are required (the "
                         "longest sequence of each)")
    d = dims["q"][3]
    if scale is None:
        scale = 0.0  # the library's default: 1 / sqrt(d)
    elif not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale is {scale}: expected a finite positive number (None: "
                         f"1/sqrt({d}))")
    import torch
    _enable_fast_path()
    need_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or
                                             v.requires_grad)
    o, lse = torch.ops.flashjit.attention_fwd(
        q, k, v, bool(causal), float(scale), layout, cu_seqlens_q, cu_seqlens_k,
        int(max_seqlen_q or 0), int(max_seqlen_k or 0), bool(need_grad), bool(deterministic))
    return (o, lse.detach()) if return_lse else o


_fast_ops = None


def _enable_fast_path():
    global _fast_ops
    if _fast_ops is None:
        _fast_ops = _torch_ops()


_warned = set()


def _fallback(reason, *args, **kwargs):
    import warnings
    import torch.nn.functional as F
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"flashjit.sdpa: {reason}; using torch's scaled_dot_product_attention",
                      stacklevel=3)
    return F.scaled_dot_product_attention(*args, **kwargs)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature and layout
    ([batch, heads, seq, dim]); flashjit where it can, PyTorch (with one warning per
    reason) for a dense attn_mask, dropout, other dtypes, CPU tensors, unsupported head
    dims, and is_causal with seq_q != seq_k (PyTorch aligns that mask to the top left,
    flashjit to the bottom right)."""
    call = (query, key, value)
    kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    if enable_gqa:
        kw["enable_gqa"] = True
    if attn_mask is not None:
        return _fallback("a dense attn_mask is not supported", *call, **kw)
    if dropout_p > 0:
        return _fallback("dropout is not supported", *call, **kw)
    if any(len(t.shape) != 4 for t in call):
        return _fallback("only 4-D [batch, heads, seq, dim] tensors are supported", *call, **kw)
    if query.shape[1] != key.shape[1] and not enable_gqa:
        return _fallback("different head counts need enable_gqa=True", *call, **kw)
    if is_causal and query.shape[2] != key.shape[2]:
        return _fallback("is_causal with seq_q != seq_k is top-left aligned in PyTorch", *call,
                         **kw)
    try:
        check_inputs(query, key, value, "bhsd")
    except (TypeError, ValueError) as ex:
        return _fallback(str(ex), *call, **kw)
    return attention(query, key, value, causal=is_causal, scale=scale, layout="bhsd")
