"""The torch side: the operators registered with torch.library (fake implementations
for torch.compile, autograd through fj_backward) and the eager fast path."""
import ctypes as C
import math
import threading
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _block_mask, _capi, _checks, _runtime

# Contexts and kernel handles live in _runtime (no torch there): the names below are
# kept for callers of this module (bench/python_overhead.py).
kernel = _runtime.kernel
settings = _runtime.settings
_no_backward_message = _runtime.no_backward_message
# Read by flashjit.attention as a plain module attribute (simple for torch.compile).
HAS_BACKWARD = _capi.library().has_backward
HAS_FEATURE_BACKWARD = getattr(_capi.library(), "has_feature_backward", False)


def _stream(device):
    return C.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _device_index(t):
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def _out_shapes(q, v, layout, varlen):
    lay = _checks.Layout(layout, varlen)
    b, s, h, _ = lay.dims(q)
    dv = v.shape[-1]
    if varlen:
        return (q.shape[0], h, dv), (h, q.shape[0])
    o = (b, s, h, dv) if lay.name == "bshd" else (b, h, s, dv)
    return o, (b, h, s)


def _sizes(q, k, layout, varlen, max_q, max_k, cu_q):
    lay = _checks.Layout(layout, varlen)
    bq, sq, hq, d = lay.dims(q)
    _, sk, hk, _ = lay.dims(k)
    if varlen:
        return lay, cu_q.shape[0] - 1, max_q, max_k, hq, hk, d
    return lay, bq, sq, sk, hq, hk, d


def _set_strides(args, lay, names_tensors, fp8=False):
    for name, t in names_tensors:
        b, s, h = lay.strides(t)
        if fp8 and name in ("q", "k", "v"):  # FP8 q, k, v: every stride a multiple of 16
            nb, ns, nh, _ = lay.dims(t)
            b, s, h = (_checks.fp8_stride(nb, b), _checks.fp8_stride(ns, s),
                       _checks.fp8_stride(nh, h))
        setattr(args, f"{name}_batch_stride", b)
        setattr(args, f"{name}_seq_stride", s)
        setattr(args, f"{name}_head_stride", h)


def _aligned(t):
    """t if the C API takes its memory as it is (last dim contiguous, the other strides
    positive multiples of 8 where the dimension has more than one element, 16-byte
    aligned), else a contiguous copy: dout from autograd may be anything, e.g. the
    expanded (stride 0) gradient of a sum()."""
    st = t.stride()
    if t.data_ptr() % 16 == 0 and (st[-1] == 1 or t.shape[-1] <= 1) and \
            all(n <= 1 or (s > 0 and s % 8 == 0) for n, s in zip(t.shape[:-1], st[:-1])):
        return t
    return t.contiguous()


def op_features(window, softcap, alibi_slopes, score_mod, mask_mod):
    """The operator's feature arguments as the _checks.Features that key the kernel (they
    were checked by flashjit.attention; checked again here for direct callers)."""
    return _checks.check_features(None if window is None else tuple(window), softcap,
                                  alibi_slopes is not None, score_mod, mask_mod)


class _Contiguous:
    """What Layout.strides reads of a tensor, for a contiguous one not allocated yet."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self._strides = tuple(_contiguous_strides(shape))

    def stride(self):
        return self._strides


def forward_args(q, k, v, layout, batch, sq, sk, cu_seqlens_q, cu_seqlens_k, alibi_slopes,
                 mod, o=None, lse=None):
    """The fj_forward_args of a call: what attention_fwd launches with, and what
    create_block_mask builds a mask with (its variant depends on them). Without `o`, o's
    strides are those of the contiguous o attention_fwd allocates, and q's pointer stands
    in for o's (the C API wants one set; a mask's build neither reads nor writes o).
    FP8 inputs: their strides as the FP8 kernels take them (_checks.fp8_stride); the
    descales and the workspace are the caller's to set (_set_fp8)."""
    varlen = cu_seqlens_q is not None
    lay = _checks.Layout(layout, varlen)
    args = _capi.new(_capi.ForwardArgs, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                     batch=batch, seqlen_q=sq, seqlen_k=sk, mod_args=mod)
    if o is None:
        o_shape, _ = _out_shapes(q, v, layout, varlen)
        o, args.o = _Contiguous(o_shape), q.data_ptr()
    else:
        args.o = o.data_ptr()
    if lse is not None:
        args.lse = lse.data_ptr()
    _set_strides(args, lay, (("q", q), ("k", k), ("v", v), ("o", o)), _checks.is_fp8(q))
    if varlen:
        args.cu_seqlens_q, args.cu_seqlens_k = cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()
        args.total_q, args.total_k = q.shape[0], k.shape[0]
    if alibi_slopes is not None:
        args.alibi_slopes = alibi_slopes.data_ptr()
        args.alibi_batch_stride = _checks.check_alibi_slopes(alibi_slopes, batch,
                                                             lay.dims(q)[2], q.device)
    return args


# ---- FP8 (0.7) -----------------------------------------------------------------------
# o's torch dtype for an FP8 call, by the operator's out_dtype argument (an fj_dtype: 0
# for 16-bit inputs, whose o has their own dtype).
_OUT_DTYPES = {_capi.FJ_DTYPE_BF16: torch.bfloat16, _capi.FJ_DTYPE_FP16: torch.float16}
_OUT_NAMES = {_capi.FJ_DTYPE_BF16: "bf16", _capi.FJ_DTYPE_FP16: "fp16"}


def out_dtype_code(name):
    """The operator's out_dtype argument for o's dtype name (None: 16-bit inputs, 0)."""
    return 0 if name is None else _capi.DTYPES[name]


def _o_dtype(q, out_dtype):
    """o's torch dtype: q's for 16-bit inputs, out_dtype's (0: bf16) for FP8 ones."""
    return _OUT_DTYPES.get(out_dtype, torch.bfloat16) if _checks.is_fp8(q) else q.dtype


def _fp8_descales(descales, batch, hk, device):
    """The call's descales (q, k, v; None: 1) with the one (batch, head) stride pair the C
    API takes for all three: as they are when their strides agree, else copied into
    contiguous [batch, num_heads_kv] tensors (on the current stream; small)."""
    strides = _checks.check_descales(descales, True, batch, hk, device)
    pair = _checks.descale_strides(strides)
    if pair is not None:
        return descales, pair
    descales = tuple(None if t is None else t.reshape(-1, 1).expand(batch, hk).contiguous()
                     if t.dim() < 2 else t.contiguous() for t in descales)
    return descales, (hk if batch > 1 else 0, 1 if hk > 1 else 0)


def _set_fp8(args, handle, descales, strides, device):
    """An FP8 call's descales and workspace (allocated here, by torch on the current
    stream: the returned tensor must outlive the launch's enqueueing)."""
    q_d, k_d, v_d = descales
    args.q_descale = None if q_d is None else q_d.data_ptr()
    args.k_descale = None if k_d is None else k_d.data_ptr()
    args.v_descale = None if v_d is None else v_d.data_ptr()
    args.descale_batch_stride, args.descale_head_stride = strides
    lib = _capi.library()
    size = C.c_size_t()
    lib.check("fj_forward_workspace_size",
              lib.lib.fj_forward_workspace_size(handle, C.byref(args), C.byref(size)))
    workspace = torch.empty(max(size.value, 16), dtype=torch.uint8, device=device)
    args.workspace, args.workspace_bytes = workspace.data_ptr(), workspace.numel()
    return workspace


# A block-mask call's workspace: its tile counter (4 bytes; 16 keeps torch's alignment).
_TILE_COUNTER_BYTES = 16


def _attention_fwd_impl(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float,
                        layout: str, cu_seqlens_q: Optional[Tensor],
                        cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                        with_backward: bool, deterministic: bool,
                        window: Optional[List[int]], softcap: float,
                        alibi_slopes: Optional[Tensor], score_mod: Optional[str],
                        mask_mod: Optional[str], mod_tensors: List[Tensor],
                        mod_scalars: List[float], mod_ints: List[int], block_mask: int,
                        q_descale: Optional[Tensor],
                        k_descale: Optional[Tensor], v_descale: Optional[Tensor],
                        out_dtype: int) -> Tuple[Tensor, Tensor]:
    # block_mask: the address of an open flashjit.BlockMask's fj_block_mask, 0 for none.
    # q/k/v_descale and out_dtype (an fj_dtype, 0 for 16-bit inputs): FP8 inputs' (0.7).
    varlen = cu_seqlens_q is not None
    fp8 = _checks.is_fp8(q)
    lay, batch, sq, sk, hq, hk, d = _sizes(q, k, layout, varlen, max_seqlen_q, max_seqlen_k,
                                           cu_seqlens_q)
    dv = v.shape[-1]
    o_shape, lse_shape = _out_shapes(q, v, layout, varlen)
    device = _device_index(q)
    features = op_features(window, softcap, alibi_slopes, score_mod, mask_mod)
    mod = _capi.mod_args([t.data_ptr() for t in mod_tensors], mod_scalars, mod_ints)
    if block_mask:
        # The mask's own handle (it is checked to describe this call's kernel): the one
        # it was built by, whatever the settings now.
        handle = _block_mask.lookup(block_mask).kernel_for(
            device, _block_mask.Description(_checks.dtype_name(q), d, dv, hq, hk, bool(causal),
                                            float(scale), features),
            _block_mask.Shape(batch, sq, sk, varlen))
    else:
        # The call's own args serve the tuner too: valid now, sized for this shape (the
        # hints).
        handle, _ = kernel(device, _checks.dtype_name(q, fp8=True), d, dv, hq, hk, causal,
                           scale, with_backward and not fp8, (sq, sk, batch), features, mod,
                           out_dtype=_OUT_NAMES.get(out_dtype) if fp8 else None)
    o = q.new_empty(o_shape, dtype=_o_dtype(q, out_dtype))
    lse = q.new_empty(lse_shape, dtype=torch.float32)
    lib = _capi.library()
    args = forward_args(q, k, v, layout, batch, sq, sk, cu_seqlens_q, cu_seqlens_k,
                        alibi_slopes, mod, o, lse)
    args.block_mask = block_mask or None
    workspace = None
    if fp8:
        descales, strides = _fp8_descales((q_descale, k_descale, v_descale), batch, hk,
                                          q.device)
        workspace = _set_fp8(args, handle, descales, strides, q.device)
    elif block_mask:
        # The counter the persistent walk hands work tiles out from (fj_forward zeroes it
        # on the stream); without it the walk is static.
        workspace = torch.empty(_TILE_COUNTER_BYTES, dtype=torch.uint8, device=q.device)
        args.workspace, args.workspace_bytes = workspace.data_ptr(), _TILE_COUNTER_BYTES
    lib.check("fj_forward", lib.lib.fj_forward(handle, C.byref(args), _stream(device)))
    del workspace  # enqueued: the caching allocator's stream order covers the rest
    return o, lse


attention_fwd = torch.library.custom_op("flashjit::attention_fwd", mutates_args=(),
                                        device_types="cuda")(_attention_fwd_impl)


@attention_fwd.register_fake
def _attention_fwd_fake(q, k, v, causal, scale, layout, cu_seqlens_q, cu_seqlens_k,
                        max_seqlen_q, max_seqlen_k, with_backward, deterministic, window,
                        softcap, alibi_slopes, score_mod, mask_mod, mod_tensors, mod_scalars,
                        mod_ints, block_mask, q_descale, k_descale, v_descale, out_dtype):
    o_shape, lse_shape = _out_shapes(q, v, layout, cu_seqlens_q is not None)
    return (q.new_empty(o_shape, dtype=_o_dtype(q, out_dtype)),
            q.new_empty(lse_shape, dtype=torch.float32))


def _attention_bwd_impl(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                        causal: bool, scale: float, layout: str, cu_seqlens_q: Optional[Tensor],
                        cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                        deterministic: bool, window: Optional[List[int]], softcap: float,
                        alibi_slopes: Optional[Tensor], mask_mod: Optional[str],
                        mod_tensors: List[Tensor], mod_scalars: List[float],
                        mod_ints: List[int], block_mask: int) -> Tuple[Tensor, Tensor, Tensor]:
    # The features (0.9) are the forward call's, but a score_mod (no backward pass).
    # block_mask: the forward call's (its address, 0 for none); used when its kernel has
    # the backward pass (BlockMask.backward), whose block sparsity it then holds (0.10).
    lib = _capi.library()
    if not lib.has_backward:
        raise RuntimeError(_no_backward_message(lib))
    varlen = cu_seqlens_q is not None
    lay, batch, sq, sk, hq, hk, d = _sizes(q, k, layout, varlen, max_seqlen_q, max_seqlen_k,
                                           cu_seqlens_q)
    dout = _aligned(dout)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    device = _device_index(q)
    features = op_features(window, softcap, alibi_slopes, None, mask_mod)
    mod = _capi.mod_args([t.data_ptr() for t in mod_tensors], mod_scalars, mod_ints)
    # A mask closed since the forward call is not needed: the gradients are the same.
    mask = _block_mask.find(block_mask) if block_mask else None
    if mask is not None and mask.backward:
        handle = mask.kernel_for(
            device, _block_mask.Description(_checks.dtype_name(q), d, v.shape[-1], hq, hk,
                                            bool(causal), float(scale), features),
            _block_mask.Shape(batch, sq, sk, varlen))
    else:
        mask = None
        handle, _ = kernel(device, _checks.dtype_name(q), d, v.shape[-1], hq, hk, causal,
                           scale, True, (sq, sk, batch), features, mod)
    args = _capi.new(_capi.BackwardArgs, batch=batch, seqlen_q=sq, seqlen_k=sk,
                     lse=lse.data_ptr(), deterministic=int(deterministic), mod_args=mod)
    if mask is not None:
        args.block_mask = block_mask
    if alibi_slopes is not None:
        args.alibi_slopes = alibi_slopes.data_ptr()
        args.alibi_batch_stride = _checks.check_alibi_slopes(alibi_slopes, batch, hq,
                                                             q.device)
    tensors = (("q", q), ("k", k), ("v", v), ("o", o), ("dout", dout), ("dq", dq),
               ("dk", dk), ("dv", dv))
    for name, t in tensors:
        setattr(args, name, t.data_ptr())
    _set_strides(args, lay, tensors)
    if varlen:
        args.cu_seqlens_q, args.cu_seqlens_k = cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()
        args.total_q, args.total_k = q.shape[0], k.shape[0]
    size = C.c_size_t()
    lib.check("fj_backward_workspace_size",
              lib.lib.fj_backward_workspace_size(handle, C.byref(args), C.byref(size)))
    workspace = torch.empty(max(size.value, 16), dtype=torch.uint8, device=q.device)
    args.workspace, args.workspace_bytes = workspace.data_ptr(), size.value
    lib.check("fj_backward", lib.lib.fj_backward(handle, C.byref(args), _stream(device)))
    return dq, dk, dv


attention_bwd = torch.library.custom_op("flashjit::attention_bwd", mutates_args=(),
                                        device_types="cuda")(_attention_bwd_impl)


@attention_bwd.register_fake
def _attention_bwd_fake(dout, q, k, v, o, lse, causal, scale, layout, cu_seqlens_q,
                        cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic, window,
                        softcap, alibi_slopes, mask_mod, mod_tensors, mod_scalars, mod_ints,
                        block_mask):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


# attention_fwd's inputs: q .. deterministic, then the features (window, softcap,
# alibi_slopes, score_mod, mask_mod, mod_*, block_mask), then FP8's (the descales,
# out_dtype).
_BASE_INPUTS = 12


def _setup_context(ctx, inputs, output):
    (q, k, v, causal, scale, layout, cu_q, cu_k, max_q, max_k, with_backward,
     deterministic) = inputs[:_BASE_INPUTS]
    (window, softcap, alibi_slopes, score_mod, mask_mod, mod_tensors, mod_scalars,
     mod_ints) = inputs[_BASE_INPUTS:_BASE_INPUTS + 8]
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, alibi_slopes, *mod_tensors)
    ctx.args = (causal, scale, layout, max_q, max_k, with_backward, deterministic)
    ctx.features = op_features(window, softcap, alibi_slopes, score_mod, mask_mod)
    ctx.feature_args = (None if window is None else list(window), softcap, mask_mod,
                        list(mod_scalars), list(mod_ints))
    ctx.block_mask = int(inputs[_BASE_INPUTS + 8] or 0)
    ctx.fp8 = _checks.is_fp8(q)
    # backward returns one entry per input, shaped as autograd flattens it: a list of
    # tensors (mod_tensors), or an empty list, gets a list of as many Nones; a list of
    # numbers (window, mod_scalars, mod_ints) is one leaf, and gets None.
    ctx.no_grads = tuple([None] * len(x) if isinstance(x, (list, tuple)) and
                         all(isinstance(e, torch.Tensor) for e in x) else None
                         for x in inputs)


def _backward(ctx, dout, dlse):
    dq, dk, dv = _gradients(ctx, dout, torch.ops.flashjit.attention_bwd)
    return (dq, dk, dv) + ctx.no_grads[3:]


def _gradients(ctx, dout, attention_bwd_fn):
    """(dq, dk, dv) of the call ctx saved (_setup_context), by attention_bwd_fn: the
    operator, or its implementation on the eager path."""
    q, k, v, o, lse, cu_q, cu_k, alibi_slopes, *mod_tensors = ctx.saved_tensors
    causal, scale, layout, max_q, max_k, with_backward, deterministic = ctx.args
    if ctx.fp8:  # no FP8 backward pass: a gradient is never made up
        raise NotImplementedError(_runtime.fp8_backward_message())
    if ctx.features.score_mod is not None:  # a gradient is never made up
        raise NotImplementedError(_runtime.features_backward_message(ctx.features))
    if ctx.features != _checks.PLAIN and not HAS_FEATURE_BACKWARD:
        raise NotImplementedError(
            f"flashjit: the library ({_capi.library().version()}) has no backward pass "
            f"with attention features ({_checks.features_on(ctx.features)}); 0.9 and later "
            f"have one")
    if not with_backward:
        lib = _capi.library()
        if not lib.has_backward:
            raise RuntimeError(_no_backward_message(lib))
        raise RuntimeError("flashjit: this attention call ran with a forward-only kernel "
                           "(no input required grad, or grad mode was off, when it ran), so "
                           "it has no backward pass; call flashjit.attention with "
                           "requires_grad inputs and grad mode on")
    # lse is returned detached by flashjit.attention: dlse carries nothing.
    window, softcap, mask_mod, mod_scalars, mod_ints = ctx.feature_args
    return attention_bwd_fn(dout, q, k, v, o, lse, causal, scale, layout, cu_q, cu_k, max_q,
                            max_k, deterministic, window, softcap, alibi_slopes, mask_mod,
                            list(mod_tensors), mod_scalars, mod_ints, ctx.block_mask)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """attention_fwd with its gradient, for eager calls: the same implementations as the
    operators, without torch.library's dispatch, which for operators of 25 arguments
    costs ~0.5 ms of host time a call in torch 2.11 (argument defaults, pytree
    flattening, its autograd wrapper): a training step's two calls took 1.2 ms of host
    time, more than the kernels of a 16k-token step at N 2k (docs/PYTHON.md,
    "Overhead"). torch.compile still traces the operators."""

    @staticmethod
    def forward(ctx, *inputs):
        o, lse = _attention_fwd_impl(*inputs)
        _setup_context(ctx, inputs, (o, lse))
        ctx.mark_non_differentiable(lse)
        ctx.inputs = len(inputs)
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, dlse):
        return _gradients(ctx, dout, _attention_bwd_impl) + (None,) * (ctx.inputs - 3)


def attention_eager_or_op(*inputs):
    """(o, lse) of attention_fwd's inputs: in eager mode without the dispatcher (with
    autograd where grad mode is on and an input requires grad, so that a backward()
    still raises where the operator's would), else through the operator (torch.compile,
    torch.func's transforms)."""
    if _is_compiling() or _functorch_active():
        return torch.ops.flashjit.attention_fwd(*inputs)
    q, k, v = inputs[:3]
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _EagerAttention.apply(*inputs)
    return _attention_fwd_impl(*inputs)


# ---- block masks (0.6) ---------------------------------------------------------------
def create_block_mask(q, k, v, causal, scale, layout, cu_seqlens_q, cu_seqlens_k,
                      max_seqlen_q, max_seqlen_k, features, alibi_slopes, mod_tensors,
                      mod_scalars, mod_ints, shared_across_batch, shared_across_heads):
    """A BlockMask for attention_fwd calls with these arguments (checked by
    flashjit.create_block_mask): built by the kernel handle those calls get (the same key:
    no backward pass, as calls with features), with the fj_forward_args they pass (the
    variant, which the mask is for, depends on their strides and alignment), on the current
    stream."""
    lib = _capi.library()
    if not getattr(lib, "has_block_mask", False):
        raise RuntimeError(_block_mask.no_block_mask_message(lib))
    varlen = cu_seqlens_q is not None
    lay, batch, sq, sk, hq, hk, d = _sizes(q, k, layout, varlen, max_seqlen_q, max_seqlen_k,
                                           cu_seqlens_q)
    dv = v.shape[-1]
    device = _device_index(q)
    mod = _capi.mod_args([t.data_ptr() for t in mod_tensors], mod_scalars, mod_ints)
    # For inputs that require grad, the kernel with the backward pass, so that the mask
    # holds the backward's block sparsity too (0.10; attention_bwd uses it).
    backward = (getattr(lib, "has_backward_block_mask", False) and features.score_mod is None
                and any(t.requires_grad for t in (q, k, v)))
    handle, _ = kernel(device, _checks.dtype_name(q), d, dv, hq, hk, bool(causal),
                       float(scale), backward, (sq, sk, batch), features, mod)
    args = forward_args(q, k, v, layout, batch, sq, sk, cu_seqlens_q, cu_seqlens_k,
                        alibi_slopes, mod)
    options = _capi.new(_capi.BlockMaskOptions, shared_across_batch=int(shared_across_batch),
                        shared_across_heads=int(shared_across_heads))
    dev = q.device

    def stream():
        return torch.cuda.current_stream(dev).cuda_stream

    out = C.c_void_p()
    lib.check("fj_block_mask_create",
              lib.lib.fj_block_mask_create(handle, C.byref(args), C.byref(options),
                                           C.c_void_p(stream()), C.byref(out)))
    try:
        mask = _block_mask.BlockMask(
            out.value, handle, dev, device,
            _block_mask.Description(_checks.dtype_name(q), d, dv, hq, hk, bool(causal),
                                    float(scale), features),
            _block_mask.Shape(batch, sq, sk, varlen), (mod_tensors, mod_scalars, mod_ints),
            (cu_seqlens_q, cu_seqlens_k) if varlen else None, alibi_slopes, args,
            shared_across_batch, shared_across_heads, stream, lib)
        mask.backward = backward
    except BaseException:
        lib.lib.fj_block_mask_destroy(out)
        raise
    return _block_mask.register(mask)


# ---- the eager inference fast path -------------------------------------------------
# Plans per (shapes, strides, dtype, device, causal, scale, layout, thread): the checks
# done, the kernel got, the arguments laid out once; a call sets the four pointers in the
# plan's own argument struct and launches. A plan belongs to one thread, so no other
# thread can rewrite its pointers between the set and the launch. Used only outside
# torch.compile and autograd (the operators serve those).
_plans = {}
_MAX_PLANS = 4096
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


class _Plan:
    # fp8: None, or for FP8 inputs (o's dtype, the workspace's bytes)
    __slots__ = ("handle", "args", "args_ref", "o_shape", "dtype", "device", "index", "fp8")


def _make_plan(q, k, v, causal, scale, layout, descales=(None, None, None), out_dtype=None,
               varlen=None, features=None):
    """The plan of a call, None where the general path must take it (it raises the
    errors the checks here let through, or copies FP8 descales whose strides differ).
    varlen: None, or (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k); the plan
    then holds the packed row counts, and each call sets the cu_seqlens pointers.
    features: None, or (checked built-in _checks.Features, alibi_slopes or None); each
    call sets the slopes' pointer."""
    cu_q, cu_k, max_q, max_k = varlen or (None, None, None, None)
    if features is not None and _checks.is_fp8(q):
        return None  # the general path refuses features with FP8 inputs
    _, dims = _checks.check_inputs(q, k, v, layout, cu_q, cu_k, pointers=True, fp8=True)
    if varlen is not None:
        if max_q is None or max_k is None:
            return None  # the general path says what is missing
        _checks.check_max_seqlens(max_q, max_k)
    d = dims["q"][3]
    if scale is None:
        scale = 0.0
    else:
        try:
            scale = float(scale)
        except (TypeError, ValueError):
            return None  # the general path raises the error
        if not (math.isfinite(scale) and scale > 0):
            return None
    lay = _checks.Layout(layout, varlen is not None)
    b, sq, hq, _ = lay.dims(q)
    _, sk, hk, _ = lay.dims(k)
    if varlen is not None:
        b, sq, sk = cu_q.shape[0] - 1, int(max_q), int(max_k)
    fp8 = _checks.is_fp8(q)
    out = _checks.check_out_dtype(out_dtype, q, fp8)
    strides = _checks.descale_strides(_checks.check_descales(descales, fp8, b, hk, q.device,
                                                             pointers=True))
    if strides is None:
        return None
    alibi_batch_stride = None
    if features is not None and features[1] is not None:
        alibi_batch_stride = _checks.check_alibi_slopes(features[1], b, hq, q.device)
    plan = _Plan()
    plan.index = _device_index(q)
    plan.handle, _ = kernel(plan.index, _checks.dtype_name(q, fp8=True), d, v.shape[-1], hq,
                            hk, bool(causal), float(scale), False, (sq, sk, b),
                            _checks.PLAIN if features is None else features[0],
                            out_dtype=out if fp8 else None)
    plan.o_shape, _ = _out_shapes(q, v, layout, varlen is not None)
    plan.dtype, plan.device = q.dtype, q.device
    template = _capi.new(_capi.ForwardArgs, batch=b, seqlen_q=sq, seqlen_k=sk)
    # o is allocated contiguous in q's layout ([total, heads, dv] with cu_seqlens).
    o_strides = _contiguous_strides(plan.o_shape)
    _set_strides(template, lay, (("q", q), ("k", k), ("v", v)), fp8)
    if varlen is not None:
        ob, os_, oh = 0, o_strides[0], o_strides[1]
        template.total_q, template.total_k = q.shape[0], k.shape[0]
    else:
        ob, os_, oh = (o_strides[0], o_strides[1], o_strides[2]) if lay.name == "bshd" else \
            (o_strides[0], o_strides[2], o_strides[1])
    template.o_batch_stride, template.o_seq_stride, template.o_head_stride = ob, os_, oh
    if alibi_batch_stride is not None:
        template.alibi_batch_stride = alibi_batch_stride
    plan.fp8 = None
    if fp8:
        template.descale_batch_stride, template.descale_head_stride = strides
        lib = _capi.library()
        size = C.c_size_t()
        lib.check("fj_forward_workspace_size",
                  lib.lib.fj_forward_workspace_size(plan.handle, C.byref(template),
                                                    C.byref(size)))
        plan.fp8 = (_OUT_DTYPES[_capi.DTYPES[out]], max(size.value, 16))
    plan.args = template
    plan.args_ref = C.byref(template)
    return plan


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return strides


_grad_enabled = torch.is_grad_enabled
_is_compiling = torch.compiler.is_compiling
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def _tensor_key(t):
    """What a plan's key holds of an optional tensor argument (descales, cu_seqlens)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.get_device())


def _varlen_key(varlen):
    return (_tensor_key(varlen[0]), _tensor_key(varlen[1]), varlen[2], varlen[3])


def _store_plan(key, plan):
    """plan (None: the general path takes the call) kept under key for later calls."""
    if plan is not None:
        if len(_plans) >= _MAX_PLANS:  # many shapes (e.g. every length): start over
            _plans.clear()
        _plans[key] = plan
    return plan


def _set_cu_seqlens(args, varlen):
    args.cu_seqlens_q, args.cu_seqlens_k = varlen[0].data_ptr(), varlen[1].data_ptr()


def fast_forward(q, k, v, causal, scale, layout, varlen=None, features=None):
    """o, or None when the call needs the operator (autograd, torch.compile) or the
    general path's checks and messages (arguments that are not tensors, a bad scale).
    varlen: None, or (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k).
    features: None, or (checked built-in _checks.Features, alibi_slopes or None)."""
    if _is_compiling():
        return None
    try:
        if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return None
        # get_device(): an int (-1 on the CPU), cheaper than building torch.device objects.
        key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype,
               k.dtype, v.dtype, q.get_device(), k.get_device(), v.get_device(), causal,
               scale, layout, _thread_id(), None if varlen is None else _varlen_key(varlen),
               None if features is None else (features[0], _tensor_key(features[1])))
        plan = _plans.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable argument
        return None
    if plan is None:
        plan = _store_plan(key, _make_plan(q, k, v, causal, scale, layout, varlen=varlen,
                                           features=features))
        if plan is None:
            return None
    if varlen is not None:
        _set_cu_seqlens(plan.args, varlen)
    if features is not None and features[1] is not None:
        plan.args.alibi_slopes = features[1].data_ptr()
    if plan.fp8 is not None:  # FP8 inputs without descales: o bf16
        return _launch_fp8(plan, q, k, v, None, None, None)
    o = q.new_empty(plan.o_shape)  # q's dtype and device (fewer arguments to parse)
    args = plan.args
    args.q, args.k, args.v, args.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    stream = _raw_stream(plan.index) if _raw_stream else \
        torch.cuda.current_stream(plan.device).cuda_stream
    status = _forward(plan.handle, plan.args_ref, stream)
    if status:
        _capi.library().check("fj_forward", status)
    return o


def fast_forward_fp8(q, k, v, causal, scale, layout, q_descale, k_descale, v_descale,
                     out_dtype, varlen=None):
    """fast_forward for calls with FP8 arguments (descales, out_dtype): o, or None when
    the call needs the operator or the general path's checks and messages."""
    if _is_compiling():
        return None
    try:
        if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return None
        key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype,
               k.dtype, v.dtype, q.get_device(), k.get_device(), v.get_device(), causal,
               scale, layout, _thread_id(), _tensor_key(q_descale), _tensor_key(k_descale),
               _tensor_key(v_descale), out_dtype,
               None if varlen is None else _varlen_key(varlen))
        plan = _plans.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable argument
        return None
    if plan is None:
        plan = _store_plan(key, _make_plan(q, k, v, causal, scale, layout,
                                           (q_descale, k_descale, v_descale), out_dtype,
                                           varlen))
        if plan is None:
            return None
    if plan.fp8 is None:  # 16-bit inputs with out_dtype their own dtype
        return fast_forward(q, k, v, causal, scale, layout, varlen)
    if varlen is not None:
        _set_cu_seqlens(plan.args, varlen)
    return _launch_fp8(plan, q, k, v, q_descale, k_descale, v_descale)


def _launch_fp8(plan, q, k, v, q_descale, k_descale, v_descale):
    """An FP8 plan's launch: o of its 16-bit dtype, and the workspace fj_forward needs
    (allocated by torch on the current stream, freed once the launch is enqueued: the
    caching allocator's stream order keeps it for the kernel)."""
    out_dtype, workspace_bytes = plan.fp8
    o = q.new_empty(plan.o_shape, dtype=out_dtype)
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=plan.device)
    args = plan.args
    args.q, args.k, args.v, args.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    args.q_descale = None if q_descale is None else q_descale.data_ptr()
    args.k_descale = None if k_descale is None else k_descale.data_ptr()
    args.v_descale = None if v_descale is None else v_descale.data_ptr()
    args.workspace, args.workspace_bytes = workspace.data_ptr(), workspace_bytes
    stream = _raw_stream(plan.index) if _raw_stream else \
        torch.cuda.current_stream(plan.device).cuda_stream
    status = _forward(plan.handle, plan.args_ref, stream)
    if status:
        _capi.library().check("fj_forward", status)
    return o


def _forward_holding_gil():
    """fj_forward through ctypes.PyDLL: the call keeps the GIL (it neither blocks nor
    calls back; it validates and enqueues, a few microseconds), which saves releasing
    and re-taking it on every launch."""
    fn = C.PyDLL(_capi.library().path).fj_forward
    fn.argtypes, fn.restype = [C.c_void_p, C.POINTER(_capi.ForwardArgs), C.c_void_p], C.c_int
    return fn


_forward = _forward_holding_gil()
_thread_id = threading.get_ident
