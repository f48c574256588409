"""flashjit for PyTorch: run-time generated, tuned flash-attention kernels
(libflashjit.so through ctypes; docs/PYTHON.md).

    import flashjit
    o = flashjit.attention(q, k, v, causal=True)          # [batch, seq, heads, dim]
    o = flashjit.sdpa(query, key, value, is_causal=True)   # F.scaled_dot_product_attention's call
    o = flashjit.decode(q, k_cache, v_cache, cache_seqlens, block_table)  # a decode step
    o = flashjit.decode(q, k8_cache, v8_cache, cache_seqlens, block_table,
                        k_descale=ks, v_descale=vs)               # an FP8 (e4m3) KV cache
    mask = flashjit.create_block_mask(q, k, v, mask_mod=doc_mask, mod_tensors=(doc_ids,))
    o = flashjit.attention(q, k, v, block_mask=mask)       # skips the tiles the mask drops
    o = flashjit.attention(q8, k8, v8, q_descale=qs, k_descale=ks, v_descale=vs)  # FP8 -> bf16

Importing needs neither torch, nor a GPU, nor the library: the library is loaded by the
first call that needs it, torch by the first call on tensors.
"""
import contextlib
import math
import os
import re

from ._capi import FlashJitError, library
from ._checks import (check_alibi_slopes, check_decode, check_descales, check_features,
                      check_fp8_features, check_inputs, check_kv_append, check_max_seqlens,
                      check_mod_args, check_out_dtype, dtype_name, is_fp8, PLAIN)
from . import _block_mask, _runtime
from ._block_mask import BlockMask

__version__ = "0.14.1"  # the package's version (python/pyproject.toml reads it from here)

__all__ = ["attention", "sdpa", "decode", "kv_append", "create_block_mask", "BlockMask",
           "info", "configure", "tuning", "FlashJitError", "library_path", "version",
           "has_backward", "has_decode", "has_block_mask", "has_fp8", "has_fp8_kv_cache",
           "__version__"]


def library_path():
    """The libflashjit.so in use (loads it; ImportError when it cannot be found)."""
    return library().path


def version():
    """The library's version, fj_version() (the package's is flashjit.__version__)."""
    return library().version()


def has_backward():
    """Whether the library has the backward pass (fj_backward, 0.2 and later)."""
    return library().has_backward


def has_decode():
    """Whether the library has the decode kernels (fj_decode, fj_kv_append; 0.4 and later)."""
    return getattr(library(), "has_decode", False)


def has_block_mask():
    """Whether the library has block masks (fj_block_mask_create, 0.6 and later)."""
    return getattr(library(), "has_block_mask", False)


def has_fp8():
    """Whether the library has the FP8 (e4m3) forward pass (FJ_DTYPE_E4M3,
    fj_forward_workspace_size; 0.7 and later). Its kernels also need an sm_90a GPU
    (H100, H200): elsewhere the first FP8 call raises FlashJitError
    (FJ_ERROR_NOT_SUPPORTED)."""
    return getattr(library(), "has_fp8", False)


def has_fp8_kv_cache():
    """Whether the library's decode kernels take an FP8 (torch.float8_e4m3fn) KV cache
    (desc.kv_cache_dtype, the factors of fj_decode_args / fj_kv_append_args; 0.12 and
    later), on every GPU the decode kernels run on (sm_80 and newer)."""
    return getattr(library(), "has_fp8_kv_cache", False)


def _torch_ops():
    from . import _ops as ops  # imports torch
    return ops


def configure(tune_mode=None, cache_path=None, budget_s=None, tune_lengths=None):
    """Process-wide settings for kernels got from now on (handles already got keep
    theirs, whatever the settings). They are fj_context_options' fields:

    tune_mode: what fj_kernel_get does on a cache miss: 'auto' ($FLASHJIT_TUNE, else
    'default'), 'default' (tune within the budget, store the winner), 'heuristic'
    (compile the model's tile, no timing), 'cached' (never compile: FlashJitError
    FJ_ERROR_NOT_FOUND on a miss), 'exhaustive' (every candidate, no budget cut).
    cache_path: the user cache file ('' = in memory only; None = the library's default,
    $FLASHJIT_CACHE, else $XDG_CACHE_HOME/flashjit/cache.sqlite, else
    ~/.cache/flashjit/cache.sqlite).
    budget_s: tuning seconds per (description, shape bucket); 0 = the library's default
    (30 s). The C API has no budget for a whole model or block.
    tune_lengths: which forward shape buckets a new kernel is tuned for (the
    description's tune_lengths, 0.5): 'auto' (the package hints each kernel with its
    first call's shape, so: 'hinted'), 'hinted' (that shape's bucket only; other lengths
    run on its tile), 'ladder' (also the length ladder of docs/TUNING.md, 512..16384 at
    16k tokens: one kernel at its tuned speed at every length, for a model called with
    many lengths; the first call tunes up to 6 more buckets, and its bucket is
    taken at 16k tokens like the rungs). Part of a kernel's identity:
    kernels got under another setting are not reused.
    None leaves a setting as it is; configure() with no argument returns them."""
    new = _runtime.checked_settings(_runtime.settings, tune_mode, cache_path, budget_s,
                                    tune_lengths)
    _runtime.settings.update(new)
    return dict(_runtime.settings)


@contextlib.contextmanager
def tuning(budget_s=None, tune_mode=None, cache_path=None, tune_lengths=None):
    """Settings for the kernels first got inside the block, on this thread, e.g.

        with flashjit.tuning(budget_s=5):     # each new tune: at most 5 s per bucket
            model(warmup_batch)

    The library's budget is per (description, shape bucket), so this caps each new
    kernel's tuning, not the block's total. Descriptions already got before the block
    keep their kernels (warm up inside the block). Yields the settings in force."""
    saved = getattr(_runtime._local, "settings", None)
    new = _runtime.checked_settings(saved or _runtime.settings, tune_mode, cache_path,
                                    budget_s, tune_lengths)
    _runtime._local.settings = new
    try:
        yield dict(new)
    finally:
        _runtime._local.settings = saved


def _default_cache_path():
    """The user cache a context opened with cache_path=None uses (the library's rule,
    cache/paths.cpp; "" = in memory only)."""
    if os.environ.get("FLASHJIT_CACHE") is not None:
        return os.environ["FLASHJIT_CACHE"]
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"),
                                                                ".cache")
    return os.path.join(base, "flashjit", "cache.sqlite")


def info():
    """What flashjit has, as a dict: the library (path, version, whether it has the
    backward pass, the decode kernels, block masks, FP8 and the FP8 KV cache), the
    package's version, the environment variables the library reads, the settings and the
    user cache they point to, each context opened so far (device, its name and compile
    target, tune mode, cache path, compilations and tunes) and each kernel handle got so
    far (its description, o's dtype, a decode handle's cache dtype, family, tile, origin,
    backward and decode families).
    The C API describes devices only through a context: there is no device list here
    before the first call on a GPU."""
    lib = library()
    s = _runtime.current_settings()
    return dict(
        library=lib.path, version=lib.version(), package_version=__version__,
        backward=lib.has_backward, decode=getattr(lib, "has_decode", False),
        block_mask=getattr(lib, "has_block_mask", False), fp8=getattr(lib, "has_fp8", False),
        fp8_kv_cache=getattr(lib, "has_fp8_kv_cache", False),
        environment={k: os.environ[k] for k in ("FLASHJIT_CACHE", "FLASHJIT_TUNE",
                                                "FLASHJIT_FAMILY",
                                                "FLASHJIT_BACKWARD_FAMILY",
                                                "FLASHJIT_LIBRARY",
                                                "XDG_CACHE_HOME") if k in os.environ},
        settings=dict(s),
        user_cache_path=_default_cache_path() if s["cache_path"] is None else s["cache_path"],
        contexts=_runtime.contexts_info(), kernels=_runtime.kernels_info())


def attention(q, k, v, *, causal=False, scale=None, layout="bshd", cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, return_lse=False,
              deterministic=False, window=None, softcap=0.0, alibi_slopes=None,
              score_mod=None, mask_mod=None, mod_tensors=(), mod_scalars=(), mod_ints=(),
              block_mask=None, q_descale=None, k_descale=None, v_descale=None,
              out_dtype=None):
    """Exact attention softmax(q k^T * scale) v on CUDA fp16/bf16 tensors (or FP8, below),
    launched on the current stream.

    layout 'bshd': q [batch, seq_q, heads_q, d], k [batch, seq_k, heads_kv, d],
    v [batch, seq_k, heads_kv, dv] (flash_attn_func's); 'bhsd': [batch, heads, seq, d]
    (SDPA's). GQA/MQA when heads_q is a multiple of heads_kv. causal is aligned to the
    bottom right (query i sees keys j <= i + seq_k - seq_q), as FlashAttention >= 2.1.
    Variable-length: q [total_q, heads_q, d], k and v [total_k, heads_kv, d] with
    cu_seqlens_q/k (int32 CUDA tensors, batch + 1 prefix sums, the last one the number
    of rows of q / k) and max_seqlen_q/k (ints: the longest sequences).

    Returns o (q's layout, dv wide, contiguous), and with return_lse also the
    log-sum-exp, fp32 [batch, heads_q, seq_q] ([heads_q, total_q] varlen), natural log,
    not differentiable. Gradients flow to q, k and v through flashjit's backward pass
    when the library has it (deterministic=True: bitwise-reproducible dq).

    Attention features (docs/PYTHON.md, "Attention features"; applied to the scaled
    scores in this order: softcap, ALiBi, score_mod, then the masks):
    window=(left, right): a sliding window aligned bottom-right like causal, query i sees
    keys i + seq_k - seq_q - left .. i + seq_k - seq_q + right (-1: unbounded side).
    softcap=c > 0: scores become c * tanh(score / c).
    alibi_slopes: a float32 CUDA tensor [heads_q] or [batch, heads_q]: the bias
    -slope * |i + seq_k - seq_q - j|.
    score_mod / mask_mod: CUDA code, the bodies of
    `float score_mod(float score, int b, int h, int q_idx, int kv_idx, const FjModArgs &args)`
    and `bool mask_mod(int b, int h, int q_idx, int kv_idx, const FjModArgs &args)` (true
    keeps the key), with args.tensor[i] the data pointers of mod_tensors (up to 4 CUDA
    tensors), args.scalar[i] mod_scalars (floats), args.integer[i] mod_ints (int32s).
    The features select the kernel (one handle per distinct set, code text included).
    They have no backward pass yet: backward() raises NotImplementedError.
    block_mask: a flashjit.BlockMask (create_block_mask) made with this call's arguments:
    key tiles its mask_mod drops everywhere are skipped, those it keeps everywhere run
    without calling it; the output is the same. Without mask_mod (and mod_*), the call
    takes the mask's (the mod_* it was built or last updated with).

    FP8 (C API 0.7; docs/PYTHON.md, "FP8"): q, k and v all torch.float8_e4m3fn, on an
    sm_90a GPU (H100, H200): the forward pass alone, o of out_dtype (torch.bfloat16 for
    None, or torch.float16). q_descale / k_descale / v_descale: dequantization factors,
    None (1) or torch.float32 CUDA tensors, () or (1,) per tensor, or [batch,
    num_heads_kv] per sequence and key/value head (FlashAttention-3's; query head h uses
    its key/value head's): q, k and v hold x / factor, so the scores are
    (q k^T) * q_descale * k_descale * scale and o is multiplied by v_descale. Head dims
    multiples of 16, strides multiples of 16 elements, at least one key; no features and
    no block mask (ValueError), and no backward pass (backward() raises
    NotImplementedError). The workspace the kernel transposes v into is allocated with
    torch on the current stream. return_lse gives the LSE of the dequantized scores.

    The first call of a description gets its kernel (from the cache, else compiled or
    tuned: do it before capturing a CUDA graph); later calls only launch.
    """
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if block_mask is not None:
        block_mask = _block_mask.check_mask(block_mask)
        if mask_mod is None:
            mask_mod = block_mask.mask_mod
        if not (_given(mod_tensors) or _given(mod_scalars) or _given(mod_ints)):
            mod_tensors, mod_scalars, mod_ints = \
                block_mask.mod_tensors, block_mask.mod_scalars, block_mask.mod_ints
    if window is None and alibi_slopes is None and score_mod is None and mask_mod is None \
            and type(softcap) in (float, int) and softcap == 0 \
            and not (_given(mod_tensors) or _given(mod_scalars) or _given(mod_ints)):
        features = PLAIN  # the common call, tested cheaply (the fast path's overhead)
    else:
        features = check_features(window, softcap, alibi_slopes is not None, score_mod,
                                  mask_mod)
        mod_tensors, mod_scalars, mod_ints = check_mod_args(
            mod_tensors, mod_scalars, mod_ints, getattr(q, "device", None))
    ops = _fast_ops
    # The built-in features (window, softcap, ALiBi) take the fast path too; the user's
    # code (score_mod, mask_mod and their args) and block masks take the operator.
    plain = features == PLAIN
    builtin = plain or (features.score_mod is None and features.mask_mod is None
                        and not (mod_tensors or mod_scalars or mod_ints))
    if ops is not None and not return_lse and builtin and block_mask is None:
        # Eager inference: the launch without the operator dispatcher (its cost is most
        # of a small call's; docs/PYTHON.md, "Overhead").
        packed = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) if varlen else None
        out = None
        if out_dtype is None and q_descale is None and k_descale is None and v_descale is None:
            if plain:
                out = ops.fast_forward(q, k, v, causal, scale, layout, packed)
            else:
                out = ops.fast_forward(q, k, v, causal, scale, layout, packed,
                                       (features, alibi_slopes))
        elif plain:
            out = ops.fast_forward_fp8(q, k, v, causal, scale, layout, q_descale, k_descale,
                                       v_descale, out_dtype, packed)
        if out is not None:
            return out
    _, dims = check_inputs(q, k, v, layout, cu_seqlens_q, cu_seqlens_k, fp8=True)
    fp8 = is_fp8(q)
    if fp8:
        check_fp8_features(features, block_mask)
    out_name = check_out_dtype(out_dtype, q, fp8)
    sequences = cu_seqlens_q.shape[0] - 1 if varlen else dims["q"][0]
    check_descales((q_descale, k_descale, v_descale), fp8, sequences, dims["k"][2], q.device)
    if varlen:
        check_max_seqlens(max_seqlen_q, max_seqlen_k)
    d = dims["q"][3]
    if alibi_slopes is not None:
        check_alibi_slopes(alibi_slopes, sequences, dims["q"][2], q.device)
    scale = _scale(scale, d)
    mask_address = 0
    if block_mask is not None:
        _block_mask.check_use(block_mask, _description(q, dims, causal, scale, features),
                              _call_shape(dims, varlen, cu_seqlens_q, max_seqlen_q,
                                          max_seqlen_k))
        mask_address = block_mask.address
    import torch
    _enable_fast_path()
    # The kernel is got with its backward pass only when a gradient may be asked for
    # (and the library has one): inference never prepares the backward kernels.
    # With a score_mod there is no backward kernel to get (nor with a library before 0.9
    # and any feature): the forward runs, and backward() raises (_ops._backward, or the
    # library's refusal). Nor with FP8 inputs: the forward runs, and backward() raises
    # NotImplementedError.
    need_grad = _fast_ops.HAS_BACKWARD and torch.is_grad_enabled() and (
        q.requires_grad or k.requires_grad or v.requires_grad) and \
        features.score_mod is None and not fp8 and \
        (features == PLAIN or _fast_ops.HAS_FEATURE_BACKWARD)
    # Eager calls skip the dispatcher (autograd by a torch.autograd.Function over the same
    # implementations); torch.compile traces the operator (_ops.attention_eager_or_op).
    o, lse = _fast_ops.attention_eager_or_op(
        q, k, v, bool(causal), float(scale), layout.lower(), cu_seqlens_q, cu_seqlens_k,
        int(max_seqlen_q or 0), int(max_seqlen_k or 0), bool(need_grad), bool(deterministic),
        None if features.window is None else list(features.window), features.softcap,
        alibi_slopes, features.score_mod, features.mask_mod, list(mod_tensors),
        list(mod_scalars), list(mod_ints), int(mask_address), q_descale, k_descale,
        v_descale, _fast_ops.out_dtype_code(out_name if fp8 else None))
    return (o, lse.detach()) if return_lse else o


def _scale(scale, d):
    """scale as the kernel key has it: 0.0 for None (the library's 1/sqrt(d)), else a
    finite positive float (TypeError / ValueError)."""
    if scale is None:
        return 0.0
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"scale is {scale!r}: expected a number (None: 1/sqrt({d}))") \
            from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"scale is {scale!r}: expected a finite positive number (None: "
                         f"1/sqrt({d}))")
    return value


def _description(q, dims, causal, scale, features):
    """The kernel a call describes, as a block mask records it (_block_mask.Description)."""
    return _block_mask.Description(dtype_name(q), dims["q"][3], dims["v"][3], dims["q"][2],
                                   dims["k"][2], bool(causal), scale, features)


def _call_shape(dims, varlen, cu_seqlens_q, max_seqlen_q, max_seqlen_k):
    """(batch, seqlen_q, seqlen_k, varlen) of a call, as fj_forward_args has them."""
    if varlen:
        return _block_mask.Shape(cu_seqlens_q.shape[0] - 1, int(max_seqlen_q),
                                 int(max_seqlen_k), True)
    return _block_mask.Shape(dims["q"][0], dims["q"][1], dims["k"][1], False)


def create_block_mask(q, k, v, *, mask_mod, causal=False, scale=None, layout="bshd",
                      cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                      max_seqlen_k=None, window=None, softcap=0.0, alibi_slopes=None,
                      score_mod=None, mod_tensors=(), mod_scalars=(), mod_ints=(),
                      shared_across_batch=False, shared_across_heads=False):
    """A flashjit.BlockMask for flashjit.attention calls with these arguments (C API 0.6,
    fj_block_mask_create), as FlexAttention's create_block_mask: built once, on the GPU,
    by evaluating mask_mod (with causal and the window) over every (query, key) pair, then
    passed as attention(..., block_mask=mask) by every call of that shape (e.g. each
    layer of a step), which skips the key tiles it drops everywhere and runs those it keeps
    everywhere without calling mask_mod. The output is the same as without it up to
    rounding (a row can differ in its last bit, docs/PYTHON.md).

    The arguments are attention's, and must be those of the calls the mask serves: the
    kernel (dtype, head dims, heads, causal, scale, window, softcap, ALiBi, score_mod,
    mask_mod's text), the shape (batch, seq_q, seq_k; with cu_seqlens: batch and
    max_seqlen_q/k) and the layout and strides of q, k and v (they choose the kernel's
    variant, whose tiles the mask is made of): a call with other ones is refused
    (ValueError naming what differs; FlashJitError from fj_forward for another variant).
    q, k and v are not read. mod_tensors / mod_scalars / mod_ints, cu_seqlens and
    alibi_slopes are read on the device as the kernel reads them: the mask is built from
    their contents now (BlockMask.update rebuilds it after they change) and keeps them
    alive. shared_across_batch: mask_mod does not depend on b (one mask for every
    sequence, built with b = 0; not with cu_seqlens); shared_across_heads: it does not
    depend on h (built with h = 0).

    Built on the current stream of q's device, which it synchronises once (the build
    counts the partly masked tiles, whose keep bits are then allocated: not inside a CUDA
    graph capture; BlockMask.update is capturable); gets the description's kernel first
    if no call did (the cache, else compiled or tuned, with these mod_* as the tuner's)."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if mask_mod is None or mask_mod == "":
        raise ValueError("create_block_mask needs mask_mod, the CUDA body of "
                         "`bool mask_mod(int b, int h, int q_idx, int kv_idx, "
                         "const FjModArgs &args)`: a block mask records where it drops keys")
    features = check_features(window, softcap, alibi_slopes is not None, score_mod, mask_mod)
    mod_tensors, mod_scalars, mod_ints = check_mod_args(
        mod_tensors, mod_scalars, mod_ints, getattr(q, "device", None))
    _block_mask.check_options(shared_across_batch, shared_across_heads, varlen)
    _, dims = check_inputs(q, k, v, layout, cu_seqlens_q, cu_seqlens_k, pointers=True)
    if varlen:
        check_max_seqlens(max_seqlen_q, max_seqlen_k)
    if alibi_slopes is not None:
        batch = cu_seqlens_q.shape[0] - 1 if varlen else dims["q"][0]
        check_alibi_slopes(alibi_slopes, batch, dims["q"][2], q.device, pointers=True)
    scale = _scale(scale, dims["q"][3])
    return _torch_ops().create_block_mask(
        q, k, v, bool(causal), scale, layout.lower(), cu_seqlens_q, cu_seqlens_k,
        int(max_seqlen_q or 0), int(max_seqlen_k or 0), features, alibi_slopes, mod_tensors,
        mod_scalars, mod_ints, bool(shared_across_batch), bool(shared_across_heads))


def _given(values):
    """Whether a mod_* argument holds anything (anything but an empty tuple or list)."""
    return type(values) not in (tuple, list) or len(values) > 0


_fast_ops = None


def _enable_fast_path():
    global _fast_ops
    if _fast_ops is None:
        _fast_ops = _torch_ops()


_warned = set()


def _fallback(reason, *args, **kwargs):
    """PyTorch's SDPA, with one warning per kind of reason (numbers do not count)."""
    import warnings
    import torch.nn.functional as F
    kind = re.sub(r"\d+", "N", reason)
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(f"flashjit.sdpa: {reason}; using torch's scaled_dot_product_attention",
                      stacklevel=3)
    return F.scaled_dot_product_attention(*args, **kwargs)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature and layout
    ([batch, heads, seq, dim]); flashjit where it can, PyTorch (with one warning per
    reason) for an attn_mask, dropout, dtypes other than fp16/bf16, CPU tensors,
    unsupported head dims or strides, ranks other than 4, head counts that differ
    without enable_gqa, and is_causal with seq_q != seq_k (PyTorch aligns that mask to
    the top left, flashjit to the bottom right: they agree only when seq_q == seq_k)."""
    call = (query, key, value)
    kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    if enable_gqa:
        kw["enable_gqa"] = True
    if attn_mask is not None:
        return _fallback("an attn_mask is not supported", *call, **kw)
    if dropout_p > 0:
        return _fallback("dropout is not supported", *call, **kw)
    if any(len(t.shape) != 4 for t in call):
        return _fallback("only 4-D [batch, heads, seq, dim] tensors are supported", *call, **kw)
    if query.shape[1] != key.shape[1] and not enable_gqa:
        return _fallback("different head counts need enable_gqa=True", *call, **kw)
    if is_causal and query.shape[2] != key.shape[2]:
        return _fallback("is_causal with seq_q != seq_k is aligned to the top left in PyTorch "
                         "and to the bottom right in flashjit", *call, **kw)
    if scale is not None and not _positive_number(scale):
        return _fallback(f"scale {scale!r} is not a finite positive number", *call, **kw)
    import torch
    try:  # data_ptr() cannot be traced: under torch.compile the library checks alignment
        check_inputs(query, key, value, "bhsd", pointers=not torch.compiler.is_compiling())
    except (TypeError, ValueError) as ex:
        return _fallback(str(ex), *call, **kw)
    return attention(query, key, value, causal=is_causal, scale=scale, layout="bhsd")


def _positive_number(x):
    try:
        return math.isfinite(float(x)) and float(x) > 0
    except (TypeError, ValueError):
        return False


# ---- decode over a KV cache (0.4) --------------------------------------------------
_decode_ops = None


def _load_decode_ops():
    global _decode_ops
    if _decode_ops is None:
        from . import _decode  # imports torch
        _decode_ops = _decode
    return _decode_ops


def decode(q, k_cache, v_cache, cache_seqlens=None, block_table=None, *, causal=False,
           softmax_scale=None, num_splits=0, return_lse=False, out=None, max_seqlen_k=None,
           k_descale=None, v_descale=None, window=None, softcap=0.0, alibi_slopes=None,
           score_mod=None, mask_mod=None, mod_tensors=(), mod_scalars=(), mod_ints=()):
    """Attention of a few new query rows per sequence against a KV cache (a decode step;
    fj_decode), on CUDA fp16/bf16 tensors (the cache may be FP8, below), launched on the
    current stream.

    q [batch, seqlen_q, heads_q, d]. The cache is either contiguous, k_cache
    [batch, seqlen_k, heads_kv, d] and v_cache [batch, seqlen_k, heads_kv, dv] with
    block_table None, or paged (vLLM / FlashAttention's layout): a pool k_cache
    [num_pages, page_size, heads_kv, d] (v_cache likewise, dv) and block_table, int32
    [batch, max_pages], the pages of each sequence in token order (token j of sequence b
    is row j % page_size of page block_table[b, j // page_size]). cache_seqlens, int32
    [batch]: the keys of each sequence, its new tokens included (kv_append them first);
    None: every sequence has all seqlen_k keys of a contiguous cache (required when
    paged). GQA/MQA when heads_q is a multiple of heads_kv. causal is aligned to the
    bottom right per sequence: query i sees keys j <= i + cache_seqlens[b] - seqlen_q (a
    row that sees no key gets 0, lse -inf). softmax_scale None: 1/sqrt(d).

    num_splits: how many ranges of keys are computed in parallel and merged (split-KV):
    0 automatic (the count tuned with the tile for the step's bucket, else a heuristic),
    else 1 to 128. max_seqlen_k: the longest cache_seqlens entry if known (an
    int; None: the cache's capacity, seqlen_k or max_pages * page_size), which sizes the
    splits; every entry must be at most it. The split workspace is allocated with torch.

    window=(left, right), softcap and alibi_slopes (C API 0.13) as for attention(),
    aligned to the bottom right per sequence: query i sees keys i + diag - left .. i +
    diag + right, diag = cache_seqlens[b] - seqlen_q (ALiBi's distance likewise), and a
    step reads only the keys its rows' windows hold. alibi_slopes: float32 [heads_q] or
    [batch, heads_q] on q's device.

    score_mod, mask_mod and mod_tensors / mod_scalars / mod_ints (C API 0.14) as for
    attention(): q_idx counts the step's rows (row i is the cache's key i +
    cache_seqlens[b] - seqlen_q), kv_idx the sequence's keys; mask_mod is called for every
    key a row may see (no block mask in decode). The first call of a kernel may tune it
    with its own mod arguments. The features need a 16-bit cache.

    FP8 KV cache (C API 0.12; docs/PYTHON.md, "FP8 KV cache"): k_cache and v_cache both
    torch.float8_e4m3fn (one byte a value; head dims multiples of 16, cache strides
    multiples of 16 elements), q (and o) fp16 or bf16. The value of a stored key of
    sequence b, key/value head h is its e4m3 value times k_descale's factor for (b, h),
    likewise for values with v_descale: each None (a factor of 1) or a torch.float32 CUDA
    tensor on q's device, () or (1,) (one factor), [heads_kv] (one per key/value head) or
    [batch, heads_kv] (one per sequence and key/value head); given together they must
    have the same shape and strides (the C API takes one stride pair for both). They are
    read on the device at each launch; with a 16-bit cache they must be None (ValueError).

    Returns o [batch, seqlen_q, heads_q, dv] (contiguous, or written into `out`), and with
    return_lse also the log-sum-exp, fp32 [batch, heads_q, seqlen_q], natural log.
    Inference only: no gradient flows through it (the result has no autograd history).
    The handle is got per (device, dtype, d, dv, heads_q, heads_kv, causal, scale, the
    cache's dtype) with the decode kernels (desc.decode): its first call may tune or
    compile, later ones launch only (CUDA graphs can capture them; torch.compile traces
    the flashjit::decode operator)."""
    ops = _decode_ops
    if ops is not None:
        result = ops.fast_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal,
                                 softmax_scale, num_splits, return_lse, out, max_seqlen_k,
                                 k_descale, v_descale, window, softcap, alibi_slopes,
                                 score_mod, mask_mod, mod_tensors, mod_scalars, mod_ints)
        if result is not None:
            return result
    # The data pointers' alignment is checked when the call's plan is made (not here:
    # torch.compile cannot trace data_ptr()).
    sizes = check_decode(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale,
                         num_splits, out, max_seqlen_k, k_descale=k_descale,
                         v_descale=v_descale)
    features = check_features(window, softcap, alibi_slopes is not None, score_mod, mask_mod)
    if alibi_slopes is not None:
        check_alibi_slopes(alibi_slopes, sizes.batch, sizes.heads_q, q.device)
    mods = check_mod_args(mod_tensors, mod_scalars, mod_ints, q.device)
    return _load_decode_ops().decode(q, k_cache, v_cache, cache_seqlens, block_table, causal,
                                     softmax_scale, num_splits, return_lse, out,
                                     max_seqlen_k, sizes, k_descale, v_descale, features,
                                     alibi_slopes, mods)


def kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table=None, *,
              k_descale=None, v_descale=None):
    """Writes new_len new rows per sequence into a KV cache (fj_kv_append), on the current
    stream: k_new [batch, new_len, heads_kv, d] and v_new [batch, new_len, heads_kv, dv]
    go to tokens cache_seqlens[b] - new_len .. cache_seqlens[b] - 1 of sequence b, i.e.
    cache_seqlens (int32 [batch]) already counts the new rows: update it first (None: every
    sequence is full, the rows go to its last new_len tokens). The cache as in decode():
    contiguous [batch, seqlen_k, heads_kv, d] with block_table None, or paged
    [num_pages, page_size, heads_kv, d] with block_table int32 [batch, max_pages], whose
    entries for the new tokens' pages must be set. In place; returns None.

    An FP8 cache (torch.float8_e4m3fn k_cache and v_cache, 0.12): k_new and v_new stay
    fp16 or bf16; each new value is stored divided by its factor (k_descale / v_descale,
    as in decode(): the same tensors decode will be given), rounded to the nearest e4m3
    value and saturated to +-448. With a 16-bit cache the factors must be None.

    The append kernel depends only on (dtype, d, dv, heads_kv, the cache's dtype): it uses
    a decode handle already got for them, else gets one for the MHA description without
    tuning (the heuristic tile; none compiled when the tune mode is 'cached')."""
    ops = _decode_ops
    if ops is not None and ops.fast_kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens,
                                              block_table, k_descale, v_descale):
        return None
    sizes = check_kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table,
                            k_descale=k_descale, v_descale=v_descale)
    _load_decode_ops().kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table,
                                 sizes, k_descale, v_descale)
    return None
