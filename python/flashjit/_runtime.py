"""Contexts, kernel handles and settings, without torch: one fj_context per (device,
settings), created on first use and kept for the life of the process; one kernel handle
per (device, description), got once and reused by every later call of any size."""
import ctypes as C
import math
import os
import threading

from . import _capi, _checks

_lock = threading.Lock()
_contexts = {}   # (device, tune mode, cache path, budget) -> fj_context handle
# (device, dtype, d, dv, heads_q, heads_kv, causal, scale, backward, features, decode,
# tune_lengths, out_dtype, kv_cache_dtype) -> (handle, info, context key); features is a
# _checks.Features (the user code's text included), decode whether the handle carries the
# decode kernels (desc.decode), out_dtype o's type ('bf16' / 'fp16'; dtype's own for 16-bit
# inputs, desc.out_dtype for FP8 ones, 'e4m3'), kv_cache_dtype the decode cache's type
# (desc.kv_cache_dtype, 0.12: 'e4m3' for an FP8 cache, else None: the dtype's). The
# settings in force when a description is first got decide how its kernel is got (cache,
# tune, compile); later calls reuse the handle whatever the settings.
_kernels = {}
_local = threading.local()
# Caches of launch plans that hold kernel handles (_decode's): cleared when the handles
# they hold are released (forget_decode_kernels).
plan_caches = []

DEFAULT_SETTINGS = dict(tune_mode="auto", cache_path=None, budget_s=0.0, tune_lengths="auto")
settings = dict(DEFAULT_SETTINGS)


def current_settings():
    """This thread's settings inside flashjit.tuning(), else the process-wide ones."""
    return getattr(_local, "settings", None) or settings


def checked_settings(base, tune_mode=None, cache_path=None, budget_s=None, tune_lengths=None):
    """`base` updated with the given values, checked (ValueError/TypeError)."""
    new = dict(base)
    if tune_lengths is not None:
        if tune_lengths not in _capi.TUNE_LENGTHS:
            raise ValueError(f"tune_lengths is {tune_lengths!r}: expected one of "
                             f"{', '.join(map(repr, _capi.TUNE_LENGTHS))}")
        new["tune_lengths"] = tune_lengths
    if tune_mode is not None:
        if tune_mode not in _capi.TUNE_MODES:
            raise ValueError(f"tune_mode is {tune_mode!r}: expected one of "
                             f"{', '.join(map(repr, _capi.TUNE_MODES))}")
        new["tune_mode"] = tune_mode
    if cache_path is not None:
        new["cache_path"] = os.fspath(cache_path)
        if not isinstance(new["cache_path"], str):
            new["cache_path"] = os.fsdecode(new["cache_path"])
    if budget_s is not None:
        if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)):
            raise TypeError(f"budget_s is {budget_s!r}: expected a number of seconds")
        if not (math.isfinite(budget_s) and budget_s >= 0):
            raise ValueError(f"budget_s is {budget_s}: expected a finite number of seconds "
                             f">= 0 (0: the library's default, 30 s)")
        new["budget_s"] = float(budget_s)
    return new


def context(device):
    """(key, handle) of the context for `device` under the current settings."""
    s = current_settings()
    key = (device, s["tune_mode"], s["cache_path"], float(s["budget_s"]))
    handle = _contexts.get(key)
    if handle is not None:
        return key, handle
    with _lock:
        if key not in _contexts:
            lib = _capi.library()
            opts = _capi.new(_capi.ContextOptions, device=device,
                             tune_mode=_capi.TUNE_MODES[s["tune_mode"]],
                             tuning_budget_seconds=float(s["budget_s"]),
                             log_callback=_capi.log_callback)
            if s["cache_path"] is not None:
                opts.user_cache_path = os.fsencode(s["cache_path"])
            handle = C.c_void_p()
            lib.check("fj_context_create",
                      lib.lib.fj_context_create(C.byref(opts), C.byref(handle)))
            _contexts[key] = handle
        return key, _contexts[key]


def no_backward_message(lib):
    return (f"flashjit: {lib.path} (version {lib.version()}) has no backward pass (no "
            f"fj_backward): gradients through flashjit.attention cannot be computed; build a "
            f"library with it (0.2 or later) to train, or run the forward under "
            f"torch.no_grad()")


def no_decode_message(lib):
    return (f"flashjit: {lib.path} (version {lib.version()}) has no decode kernels (no "
            f"fj_decode): flashjit.decode and flashjit.kv_append need a library of 0.4 or "
            f"later")


def no_fp8_cache_message(lib):
    return (f"flashjit: {lib.path} (version {lib.version()}) has no FP8 KV cache "
            f"(desc.kv_cache_dtype): torch.float8_e4m3fn caches in flashjit.decode and "
            f"flashjit.kv_append need a library of 0.12 or later")


def no_fp8_message(lib):
    return (f"flashjit: {lib.path} (version {lib.version()}) has no FP8 kernels (no "
            f"fj_forward_workspace_size): torch.float8_e4m3fn inputs need a library of 0.7 or "
            f"later")


def fp8_backward_message():
    return ("flashjit: the backward pass does not support FP8 (torch.float8_e4m3fn) inputs: "
            "gradients through an FP8 flashjit.attention cannot be computed; run it under "
            "torch.no_grad() (or detach its inputs), or use fp16/bf16 inputs to train")


def features_backward_message(features):
    return ("flashjit: the backward pass does not take a score_mod (flashjit cannot "
            "differentiate the user's code): gradients through flashjit.attention with one "
            "cannot be computed; run the forward under torch.no_grad(), or express the "
            "variant with window, softcap, alibi_slopes or mask_mod, which train")


def kernel(device, dtype, d, dv, hq, hkv, causal, scale, backward, hints,
           features=_checks.PLAIN, tuning_args=None, decode=False, out_dtype=None,
           kv_cache_dtype=None):
    """(handle, info) for a description: got once per device (fj_kernel_get may compile
    or tune), then reused. dtype 'fp16', 'bf16' or 'e4m3' (FP8, 0.7); scale 0.0 for
    1/sqrt(d); hints (seqlen_q, seqlen_k, batch) choose the shape bucket tuned first;
    features a checked _checks.Features; tuning_args (an _capi.ModArgs, or None) what the
    tuner runs the user code with if this call gets the kernel (not part of the key);
    decode: the handle also carries the decode kernels (desc.decode, 0.4); out_dtype: o's
    type with 'e4m3' inputs, 'bf16' (None) or 'fp16' (desc.out_dtype); 16-bit inputs
    write o in their own; kv_cache_dtype: with decode, 'e4m3' for an FP8 KV cache
    (desc.kv_cache_dtype, 0.12), None for a cache of the dtype."""
    lengths = current_settings().get("tune_lengths", "auto")
    fp8 = dtype == "e4m3"
    out = (out_dtype or "bf16") if fp8 else dtype
    cache = kv_cache_dtype if kv_cache_dtype != dtype else None
    key = (device, dtype, d, dv, hq, hkv, bool(causal), float(scale), bool(backward),
           features, bool(decode), lengths, out, cache)
    found = _kernels.get(key)
    if found is not None:
        return found[0], found[1]
    lib = _capi.library()
    if fp8 and not getattr(lib, "has_fp8", False):
        raise RuntimeError(no_fp8_message(lib))
    if cache is not None and not getattr(lib, "has_fp8_kv_cache", False):
        raise RuntimeError(no_fp8_cache_message(lib))
    if fp8 and backward:
        raise NotImplementedError(fp8_backward_message())
    if backward and not lib.has_backward:
        raise RuntimeError(no_backward_message(lib))
    if decode and not getattr(lib, "has_decode", False):
        raise RuntimeError(no_decode_message(lib))
    if decode and features != _checks.PLAIN and not getattr(lib, "has_decode_features", False):
        raise RuntimeError(
            f"flashjit: the library ({lib.version()}) has no decode kernels with a window or "
            f"softcap ({_checks.features_on(features)}); 0.13 and later have them")
    if decode and (features.score_mod or features.mask_mod) and \
            not getattr(lib, "has_decode_mods", False):
        raise RuntimeError(
            f"flashjit: the library ({lib.version()}) has no decode kernels with a score_mod "
            f"or mask_mod ({_checks.features_on(features)}); 0.14 and later have them")
    if backward and features.score_mod is not None:
        raise NotImplementedError(features_backward_message(features))
    if backward and features != _checks.PLAIN and not getattr(lib, "has_feature_backward",
                                                                 False):
        raise NotImplementedError(
            f"flashjit: the library ({lib.version()}) has no backward pass with attention "
            f"features ({_checks.features_on(features)}); 0.9 and later have one")
    ctx_key, ctx = context(device)
    desc = _capi.new(_capi.AttentionDesc, dtype=_capi.DTYPES[dtype],
                     out_dtype=_capi.DTYPES[out] if fp8 else 0,
                     head_dim=d, head_dim_v=dv, causal=int(causal),
                     num_heads_q=hq, num_heads_kv=hkv, softmax_scale=scale,
                     seqlen_q_hint=_hint(hints[0]), seqlen_k_hint=_hint(hints[1]),
                     # the ladder's rungs are a 16k-token step's unless a batch is
                     # hinted, and the first call's batch says nothing of later calls'
                     batch_hint=0 if lengths == "ladder" else _hint(hints[2]),
                     backward=int(backward), decode=int(decode),
                     tune_lengths=_capi.TUNE_LENGTHS[lengths],
                     kv_cache_dtype=_capi.DTYPES[cache] if cache else 0)
    _set_features(desc, features, tuning_args)
    handle = C.c_void_p()
    lib.check("fj_kernel_get", lib.lib.fj_kernel_get(ctx, C.byref(desc), C.byref(handle)))
    info = _capi.new(_capi.KernelInfo)
    status = lib.lib.fj_kernel_info(handle, C.byref(info))
    if status:
        lib.lib.fj_kernel_release(handle)
        lib.check("fj_kernel_info", status)
    with _lock:
        if key in _kernels:  # another thread got it meanwhile: keep one handle
            lib.lib.fj_kernel_release(handle)
        else:
            _kernels[key] = (handle, info, ctx_key)
        found = _kernels[key]
    return found[0], found[1]


def append_kernel(device, dtype, d, dv, hkv, hints, kv_cache_dtype=None):
    """A handle with decode kernels for fj_kv_append, whose kernel depends only on (dtype,
    d, dv, heads_kv, the cache's type): a decode handle already got for them (any heads_q,
    causal, scale), else one got for the plain MHA description with the heuristic tile
    (tune_mode 'cached' stays 'cached'): appending never starts a tuning run of its own."""
    cache = kv_cache_dtype if kv_cache_dtype != dtype else None
    for key, (handle, info, _) in list(_kernels.items()):
        if key[0] == device and key[1] == dtype and key[2] == d and key[3] == dv and \
                key[5] == hkv and key[10] and key[13] == cache:
            return handle, info
    s = current_settings()
    mode = "cached" if s["tune_mode"] == "cached" else "heuristic"
    saved = getattr(_local, "settings", None)
    _local.settings = dict(s, tune_mode=mode)
    try:
        return kernel(device, dtype, d, dv, hkv, hkv, False, 0.0, False, hints, decode=True,
                      kv_cache_dtype=cache)
    finally:
        _local.settings = saved


def forget_decode_kernels():
    """Releases the decode handles got so far and forgets them, so that the next call gets
    a new one for its shape (bench/decode_peers_bench.py: one tuned handle per shape).
    Only when nothing holds them: no launch in flight, no captured graph."""
    lib = _capi.library()
    with _lock:
        keys = [key for key in _kernels if key[10]]
        for cache in plan_caches:
            cache.clear()
        for key in keys:
            handle = _kernels.pop(key)[0]
            lib.check("fj_kernel_release", lib.lib.fj_kernel_release(handle))
    return len(keys)


def _hint(n):
    return max(0, min(int(n), 1 << 30))


def _set_features(desc, features, tuning_args):
    """The description's feature fields (0.3). The strings and tuning_args stay referenced
    by `desc` (ctypes keeps them alive) for the fj_kernel_get call, which copies them."""
    if features.window is not None:
        desc.window = 1
        desc.window_left, desc.window_right = features.window
    desc.softcap = features.softcap
    desc.alibi = int(features.alibi)
    if features.score_mod:
        desc.score_mod = features.score_mod.encode()
    if features.mask_mod:
        desc.mask_mod = features.mask_mod.encode()
    if tuning_args is not None and (features.score_mod or features.mask_mod):
        desc.tuning_mod_args = C.pointer(tuning_args)


def contexts_info():
    """fj_context_info of every context opened so far, as dicts."""
    lib = _capi.library()
    out = []
    for key, handle in list(_contexts.items()):
        ci = _capi.new(_capi.ContextInfo)
        lib.check("fj_context_info", lib.lib.fj_context_info(handle, C.byref(ci)))
        entry = _capi.struct_dict(ci)
        entry["tune_mode"] = _capi.TUNE_MODE_NAMES.get(ci.tune_mode, ci.tune_mode)
        entry["settings"] = dict(tune_mode=key[1], cache_path=key[2], budget_s=key[3])
        out.append(entry)
    return out


def kernels_info():
    """fj_kernel_info of every kernel handle got so far, as dicts: asked now, so that the
    call counters (forward_calls, forward_calls_untuned, last_untuned_bucket) are
    current."""
    out = []
    lib = _capi.library() if _kernels else None
    for key, (handle, info, _) in list(_kernels.items()):
        now = _capi.new(_capi.KernelInfo)
        if lib.lib.fj_kernel_info(handle, C.byref(now)) == 0:
            info = now
        (device, dtype, d, dv, hq, hkv, causal, scale, backward, features, decode, lengths,
         out_dtype, cache) = key
        entry = dict(device=device, dtype=dtype, out_dtype=out_dtype, head_dim=d, head_dim_v=dv,
                     num_heads_q=hq, num_heads_kv=hkv, causal=causal, softmax_scale=scale,
                     backward=backward, decode=decode, tune_lengths=lengths,
                     kv_cache_dtype=(cache or dtype) if decode else None,
                     features=features._asdict())
        entry.update(_capi.struct_dict(info))
        entry["origin"] = _capi.ORIGINS.get(info.origin, info.origin)
        out.append(entry)
    return out
