"""The torch side of flashjit.decode and flashjit.kv_append (fj_decode, fj_kv_append; 0.4):
eager calls launch through a plan (the checks done, the handle got, the argument struct
laid out once per shapes and strides, as _ops' fast path), calls under torch.compile go
through the operators flashjit::decode and flashjit::kv_append (fake implementations for
tracing). Inference only: nothing here records autograd history. An FP8 KV cache (0.12:
torch.float8_e4m3fn k_cache and v_cache) gets a handle of its own (desc.kv_cache_dtype);
its factors' pointers are set per call, their strides are the plan's."""
import ctypes as C
import threading
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _capi, _checks, _runtime

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_is_compiling = torch.compiler.is_compiling
_thread_id = threading.get_ident


def _stream(index, device):
    return _raw_stream(index) if _raw_stream else torch.cuda.current_stream(device).cuda_stream


def _device_index(t):
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def _three(t):
    """The strides of a 4-D tensor's first three dimensions, in elements."""
    st = t.stride()
    return st[0], st[1], st[2]


def _require_decode():
    lib = _capi.library()
    if not getattr(lib, "has_decode", False):
        raise RuntimeError(_runtime.no_decode_message(lib))
    return lib


def _cache_three(t, fp8):
    """A cache's (page, row, head) strides as the C API takes them: _three's, but for an
    FP8 cache 0 for a dimension of one element whose stride is not a multiple of 16 (the
    C API asks it of every FP8 cache stride; such a stride is never multiplied by an
    index but 0)."""
    st = t.stride()
    if not fp8:
        return st[0], st[1], st[2]
    shape = t.shape
    return tuple(_checks.fp8_stride(shape[i], st[i]) for i in range(3))


def _decode_template(sizes, q, k_cache, v_cache, o_strides, alibi_slopes=None):
    """fj_decode_args with the sizes and strides of a call, no pointers."""
    a = _capi.new(_capi.DecodeArgs, batch=sizes.batch, seqlen_q=sizes.seqlen_q,
                  seqlen_k=sizes.seqlen_k, page_size=sizes.page_size,
                  num_pages=sizes.num_pages, table_stride=sizes.table_stride,
                  num_splits=sizes.num_splits)
    fp8 = sizes.kv_cache_dtype is not None
    a.q_batch_stride, a.q_seq_stride, a.q_head_stride = _three(q)
    a.k_page_stride, a.k_row_stride, a.k_head_stride = _cache_three(k_cache, fp8)
    a.v_page_stride, a.v_row_stride, a.v_head_stride = _cache_three(v_cache, fp8)
    a.o_batch_stride, a.o_seq_stride, a.o_head_stride = o_strides[:3]
    a.descale_batch_stride, a.descale_head_stride = sizes.descale_strides
    if alibi_slopes is not None:
        a.alibi_batch_stride = _checks.check_alibi_slopes(alibi_slopes, sizes.batch,
                                                          sizes.heads_q, q.device)
    return a


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return tuple(strides)


def _decode_handle(q, sizes, causal, features=_checks.PLAIN, mod=None):
    """The decode handle of a call; `mod` (an _capi.ModArgs: the call's own, valid now)
    serves the tuner when the handle is new and the features have user code."""
    index = _device_index(q)
    handle, _ = _runtime.kernel(index, _checks.dtype_name(q), sizes.head_dim, sizes.head_dim_v,
                                sizes.heads_q, sizes.heads_kv, bool(causal), float(sizes.scale),
                                False, (sizes.seqlen_q, sizes.seqlen_k, sizes.batch),
                                features=features, tuning_args=mod, decode=True,
                                kv_cache_dtype=sizes.kv_cache_dtype)
    return index, handle


def _workspace_bytes(lib, handle, args):
    size = C.c_size_t()
    lib.check("fj_decode_workspace_size",
              lib.lib.fj_decode_workspace_size(handle, C.byref(args), C.byref(size)))
    return size.value


# ---- the eager path ------------------------------------------------------------------
# Plans per (shapes, strides, dtypes, devices of every tensor, the FP8 cache's factors'
# included, causal, scale, num_splits, max_seqlen_k, thread): the handle, the argument
# struct with sizes and strides (the factors' strides too), the output shapes and the
# workspace size. A call sets the pointers of its plan's struct (the factors' too) and
# launches; a plan belongs to one thread (see _ops' fast path).
_plans = {}
_runtime.plan_caches.append(_plans)
_MAX_PLANS = 4096


class _Plan:
    __slots__ = ("handle", "args", "args_ref", "o_shape", "lse_shape", "workspace_bytes",
                 "index", "device", "mods")


def _meta(t):
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.get_device())


_PLAIN = (bool, int, float, type(None))


def _key(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale, num_splits,
         out, max_seqlen_k, k_descale=None, v_descale=None, window=None, softcap=0.0,
         alibi_slopes=None, score_mod=None, mask_mod=None, mod_tensors=()):
    """The plan's key, or None when a number argument is not a plain Python value (a
    tensor's hash is its identity, not its value: such calls are never planned). The
    factors' shapes and strides are part of it (they give the plan's factor strides), and
    the window and softcap as given (a new pair is checked before it gets a plan), the
    user code's text and its tensors' metadata (their devices were checked; the scalars,
    ints and pointers are set per call)."""
    if not (type(causal) in _PLAIN and type(softmax_scale) in _PLAIN and
            type(num_splits) in _PLAIN and type(max_seqlen_k) in _PLAIN and
            type(softcap) in _PLAIN and (window is None or type(window) is tuple) and
            type(score_mod) in (str, type(None)) and type(mask_mod) in (str, type(None))):
        return None
    key = (q.shape, q.stride(), q.dtype, q.get_device(), _meta(k_cache), _meta(v_cache),
           _meta(cache_seqlens), _meta(block_table), _meta(out), causal, softmax_scale,
           num_splits, max_seqlen_k, _meta(k_descale), _meta(v_descale), window, softcap,
           _meta(alibi_slopes), _thread_id())
    if score_mod or mask_mod:
        key += (score_mod, mask_mod, tuple(_meta(t) for t in mod_tensors))
    return key


def _make_plan(q, k_cache, v_cache, sizes, causal, out, features=_checks.PLAIN,
               alibi_slopes=None, mod=None):
    lib = _require_decode()
    plan = _Plan()
    plan.mods = _has_code(features)
    plan.index, plan.handle = _decode_handle(q, sizes, causal, features, mod)
    plan.device = q.device
    plan.o_shape = (sizes.batch, sizes.seqlen_q, sizes.heads_q, sizes.head_dim_v)
    plan.lse_shape = (sizes.batch, sizes.heads_q, sizes.seqlen_q)
    o_strides = _contiguous_strides(plan.o_shape) if out is None else out.stride()
    plan.args = _decode_template(sizes, q, k_cache, v_cache, o_strides, alibi_slopes)
    plan.args_ref = C.byref(plan.args)
    plan.workspace_bytes = _workspace_bytes(lib, plan.handle, plan.args)
    return plan


def _plan(key, q, k_cache, v_cache, sizes, causal, out, features=_checks.PLAIN,
          alibi_slopes=None, mod=None):
    """The plan of `key` (made and kept when new; made for this call alone when key is
    None)."""
    plan = _plans.get(key) if key is not None else None
    if plan is None:
        plan = _make_plan(q, k_cache, v_cache, sizes, causal, out, features, alibi_slopes, mod)
        if key is not None:
            if len(_plans) >= _MAX_PLANS:  # many shapes (e.g. every cache length): start over
                _plans.clear()
            _plans[key] = plan
    return plan


def _has_code(features):
    return features.score_mod is not None or features.mask_mod is not None


def _mod_args(tensors, scalars, ints):
    """The user code's fj_mod_args of a call, from its checked args."""
    return _capi.mod_args([t.data_ptr() for t in tensors], scalars, ints)


def fast_decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
                num_splits, return_lse, out, max_seqlen_k, k_descale=None, v_descale=None,
                window=None, softcap=0.0, alibi_slopes=None, score_mod=None, mask_mod=None,
                mod_tensors=(), mod_scalars=(), mod_ints=()):
    """The result, or None when there is no plan yet (or the call is being traced, or its
    arguments are not all tensors): then flashjit.decode checks them and calls decode()."""
    if _is_compiling():
        return None
    try:
        key = _key(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
                   num_splits, out, max_seqlen_k, k_descale, v_descale, window, softcap,
                   alibi_slopes, score_mod, mask_mod, mod_tensors)
        plan = _plans.get(key) if key is not None else None
    except (AttributeError, TypeError):
        return None
    if plan is None:
        return None
    # Checked but for the tensors' device, which the plan's key holds.
    mod = _mod_args(*_checks.check_mod_args(mod_tensors, mod_scalars, mod_ints)) \
        if plan.mods else None
    return _launch(plan, q, k_cache, v_cache, cache_seqlens, block_table, return_lse, out,
                   k_descale, v_descale, alibi_slopes, mod)


def decode(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale, num_splits,
           return_lse, out, max_seqlen_k, sizes, k_descale=None, v_descale=None,
           features=_checks.PLAIN, alibi_slopes=None, mods=([], [], [])):
    """flashjit.decode after its checks (`sizes`, a _checks.DecodeSizes; `features`, the
    checked features, ALiBi's slopes `alibi_slopes`; `mods`, the user code's checked
    tensors, scalars and ints)."""
    window = features.window
    tensors, scalars, ints = mods
    if _is_compiling():
        o, lse = torch.ops.flashjit.decode(q, k_cache, v_cache, cache_seqlens, block_table,
                                           bool(causal), float(sizes.scale), sizes.num_splits,
                                           sizes.seqlen_k, k_descale, v_descale,
                                           window is not None, window[0] if window else 0,
                                           window[1] if window else 0, features.softcap,
                                           alibi_slopes, features.score_mod, features.mask_mod,
                                           tensors, scalars, ints)
        if out is not None:
            out.copy_(o)
            o = out
        return (o, lse) if return_lse else o
    key = _key(q, k_cache, v_cache, cache_seqlens, block_table, causal, softmax_scale,
               num_splits, out, max_seqlen_k, k_descale, v_descale, window, features.softcap,
               alibi_slopes, features.score_mod, features.mask_mod, tensors)
    mod = _mod_args(tensors, scalars, ints) if _has_code(features) else None
    plan = _plans.get(key) if key is not None else None
    if plan is None:  # a new plan: the pointers' alignment too (later calls: the library)
        _checks.check_decode(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale,
                             num_splits, out, max_seqlen_k, pointers=True, k_descale=k_descale,
                             v_descale=v_descale)
        if alibi_slopes is not None:
            _checks.check_alibi_slopes(alibi_slopes, sizes.batch, sizes.heads_q, q.device,
                                       pointers=True)
        plan = _plan(key, q, k_cache, v_cache, sizes, causal, out, features, alibi_slopes,
                     mod)
    return _launch(plan, q, k_cache, v_cache, cache_seqlens, block_table, return_lse, out,
                   k_descale, v_descale, alibi_slopes, mod)


def _launch(plan, q, k_cache, v_cache, cache_seqlens, block_table, return_lse, out,
            k_descale=None, v_descale=None, alibi_slopes=None, mod=None):
    o = q.new_empty(plan.o_shape) if out is None else out
    lse = torch.empty(plan.lse_shape, dtype=torch.float32, device=plan.device) \
        if return_lse else None
    workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=plan.device) \
        if plan.workspace_bytes else None
    a = plan.args
    a.q, a.k_cache, a.v_cache, a.o = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), \
        o.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else None
    a.cache_seqlens = cache_seqlens.data_ptr() if cache_seqlens is not None else None
    a.block_table = block_table.data_ptr() if block_table is not None else None
    a.k_descale = k_descale.data_ptr() if k_descale is not None else None
    a.v_descale = v_descale.data_ptr() if v_descale is not None else None
    a.alibi_slopes = alibi_slopes.data_ptr() if alibi_slopes is not None else None
    if mod is not None:
        a.mod_args = mod
    if workspace is not None:
        a.workspace, a.workspace_bytes = workspace.data_ptr(), plan.workspace_bytes
    else:
        a.workspace, a.workspace_bytes = None, 0
    status = _fj_decode()(plan.handle, plan.args_ref, _stream(plan.index, plan.device))
    if status:
        _capi.library().check("fj_decode", status)
    return (o, lse) if return_lse else o


_fj_decode_fn = None


def _fj_decode():
    """fj_decode through ctypes.PyDLL: the call keeps the GIL (it checks and enqueues, a
    few microseconds), as _ops' fj_forward."""
    global _fj_decode_fn
    if _fj_decode_fn is None:
        fn = C.PyDLL(_require_decode().path).fj_decode
        fn.argtypes = [C.c_void_p, C.POINTER(_capi.DecodeArgs), C.c_void_p]
        fn.restype = C.c_int
        _fj_decode_fn = fn
    return _fj_decode_fn


def _append_key(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, k_descale=None,
                v_descale=None):
    return ("append", _meta(k_cache), _meta(v_cache), _meta(k_new), _meta(v_new),
            _meta(cache_seqlens), _meta(block_table), _meta(k_descale), _meta(v_descale),
            _thread_id())


def _make_append_plan(k_cache, v_cache, k_new, v_new, sizes):
    _require_decode()
    plan = _Plan()
    plan.index = _device_index(k_new)
    plan.device = k_new.device
    plan.handle, _ = _runtime.append_kernel(plan.index, _checks.dtype_name(k_new),
                                            sizes.head_dim, sizes.head_dim_v, sizes.heads_kv,
                                            (1, sizes.seqlen_k, sizes.batch),
                                            sizes.kv_cache_dtype)
    a = _capi.new(_capi.KvAppendArgs, batch=sizes.batch, seqlen_k=sizes.seqlen_k,
                  page_size=sizes.page_size, num_pages=sizes.num_pages,
                  table_stride=sizes.table_stride, new_len=sizes.new_len)
    fp8 = sizes.kv_cache_dtype is not None
    a.k_page_stride, a.k_row_stride, a.k_head_stride = _cache_three(k_cache, fp8)
    a.v_page_stride, a.v_row_stride, a.v_head_stride = _cache_three(v_cache, fp8)
    a.k_new_batch_stride, a.k_new_seq_stride, a.k_new_head_stride = _three(k_new)
    a.v_new_batch_stride, a.v_new_seq_stride, a.v_new_head_stride = _three(v_new)
    a.descale_batch_stride, a.descale_head_stride = sizes.descale_strides
    plan.args, plan.args_ref = a, C.byref(a)
    return plan


def fast_kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, k_descale=None,
                   v_descale=None):
    """True when a plan appended, False when flashjit.kv_append must check the arguments
    and call kv_append() (no plan yet, tracing, arguments that are not tensors)."""
    if _is_compiling():
        return False
    try:
        plan = _plans.get(_append_key(k_cache, v_cache, k_new, v_new, cache_seqlens,
                                      block_table, k_descale, v_descale))
    except (AttributeError, TypeError):
        return False
    if plan is None:
        return False
    _append(plan, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, k_descale,
            v_descale)
    return True


def kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, sizes,
              k_descale=None, v_descale=None):
    """flashjit.kv_append after its checks (`sizes`, a _checks.AppendSizes)."""
    if _is_compiling():
        torch.ops.flashjit.kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens,
                                     block_table, k_descale, v_descale)
        return
    _append_planned(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, sizes,
                    k_descale, v_descale)


def _append_planned(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, sizes,
                    k_descale, v_descale):
    key = _append_key(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, k_descale,
                      v_descale)
    plan = _plans.get(key)
    if plan is None:  # a new plan: the pointers' alignment too (later calls: the library)
        _checks.check_kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table,
                                pointers=True, k_descale=k_descale, v_descale=v_descale)
        plan = _make_append_plan(k_cache, v_cache, k_new, v_new, sizes)
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    _append(plan, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, k_descale,
            v_descale)


def _append(plan, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, k_descale,
            v_descale):
    a = plan.args
    a.k_cache, a.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
    a.k_new, a.v_new = k_new.data_ptr(), v_new.data_ptr()
    a.cache_seqlens = cache_seqlens.data_ptr() if cache_seqlens is not None else None
    a.block_table = block_table.data_ptr() if block_table is not None else None
    a.k_descale = k_descale.data_ptr() if k_descale is not None else None
    a.v_descale = v_descale.data_ptr() if v_descale is not None else None
    lib = _capi.library()
    lib.check("fj_kv_append", lib.lib.fj_kv_append(plan.handle, plan.args_ref,
                                                   C.c_void_p(_stream(plan.index,
                                                                      plan.device))))


# ---- the operators (torch.compile) ---------------------------------------------------
# k_descale / v_descale (0.12): an FP8 cache's factors, None otherwise (the checks refuse
# factors with a 16-bit cache).
# has_window, window_left, window_right, softcap, alibi_slopes (0.13): the window (its
# sides when has_window), the cap and ALiBi's slopes of flashjit.decode.
# score_mod, mask_mod, mod_tensors, mod_scalars, mod_ints (0.14): the user's code and
# its args.
@torch.library.custom_op("flashjit::decode", mutates_args=(), device_types="cuda")
def decode_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Optional[Tensor],
              block_table: Optional[Tensor], causal: bool, scale: float, num_splits: int,
              seqlen_k: int, k_descale: Optional[Tensor], v_descale: Optional[Tensor],
              has_window: bool, window_left: int, window_right: int, softcap: float,
              alibi_slopes: Optional[Tensor], score_mod: Optional[str], mask_mod: Optional[str],
              mod_tensors: List[Tensor], mod_scalars: List[float],
              mod_ints: List[int]) -> Tuple[Tensor, Tensor]:
    sizes = _checks.check_decode(q, k_cache, v_cache, cache_seqlens, block_table,
                                 scale if scale > 0 else None, num_splits, None, seqlen_k,
                                 pointers=True, k_descale=k_descale, v_descale=v_descale)
    window = (window_left, window_right) if has_window else None
    features = _checks.check_features(window, softcap, alibi_slopes is not None, score_mod,
                                      mask_mod)
    if alibi_slopes is not None:
        _checks.check_alibi_slopes(alibi_slopes, sizes.batch, sizes.heads_q, q.device,
                                   pointers=True)
    tensors, scalars, ints = _checks.check_mod_args(mod_tensors, mod_scalars, mod_ints,
                                                    q.device)
    mod = _mod_args(tensors, scalars, ints) if _has_code(features) else None
    key = ("op",) + _key(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale,
                         num_splits, None, seqlen_k, k_descale, v_descale, window, softcap,
                         alibi_slopes, features.score_mod, features.mask_mod, tensors)
    plan = _plan(key, q, k_cache, v_cache, sizes, causal, None, features, alibi_slopes, mod)
    return _launch(plan, q, k_cache, v_cache, cache_seqlens, block_table, True, None,
                   k_descale, v_descale, alibi_slopes, mod)


@decode_op.register_fake
def _decode_fake(q, k_cache, v_cache, cache_seqlens, block_table, causal, scale, num_splits,
                 seqlen_k, k_descale, v_descale, has_window, window_left, window_right,
                 softcap, alibi_slopes, score_mod, mask_mod, mod_tensors, mod_scalars,
                 mod_ints):
    b, s, h, _ = q.shape  # o has q's dtype, whatever the cache's
    return q.new_empty((b, s, h, v_cache.shape[-1])), \
        q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("flashjit::kv_append", mutates_args=("k_cache", "v_cache"),
                         device_types="cuda")
def kv_append_op(k_cache: Tensor, v_cache: Tensor, k_new: Tensor, v_new: Tensor,
                 cache_seqlens: Optional[Tensor], block_table: Optional[Tensor],
                 k_descale: Optional[Tensor], v_descale: Optional[Tensor]) -> None:
    sizes = _checks.check_kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens,
                                    block_table, pointers=True, k_descale=k_descale,
                                    v_descale=v_descale)
    _append_planned(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, sizes,
                    k_descale, v_descale)


@kv_append_op.register_fake
def _kv_append_fake(k_cache, v_cache, k_new, v_new, cache_seqlens, block_table, k_descale,
                    v_descale):
    return None
