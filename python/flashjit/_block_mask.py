"""Block masks (C API 0.6: fj_block_mask_create / _update / _destroy) without torch: the
BlockMask object that owns an fj_block_mask, the registry of live masks by address (what
the flashjit::attention_fwd operator receives), and the checks that a call may use a
mask. The masks are created by _ops.create_block_mask (torch: tensors, the stream)."""
import ctypes as C
import threading
import weakref
from collections import namedtuple

from . import _capi, _checks

# What a mask's kernel handle was got for, as _runtime.kernel keys it (less the device,
# compared apart, and the settings, which decide how a kernel is got, not which): a call
# with a mask must describe the same kernel.
Description = namedtuple("Description", "dtype head_dim head_dim_v heads_q heads_kv causal "
                                        "scale features")
# The shape a mask serves (the C API's check): batch, seqlen_q, seqlen_k (the longest
# sequences with cu_seqlens), and whether the calls have cu_seqlens.
Shape = namedtuple("Shape", "batch seqlen_q seqlen_k varlen")

_live = weakref.WeakValueDictionary()  # fj_block_mask address -> its open BlockMask
_lock = threading.Lock()


def no_block_mask_message(lib):
    return (f"flashjit: {lib.path} (version {lib.version()}) has no block masks (no "
            f"fj_block_mask_create): flashjit.create_block_mask needs a library of 0.6 or "
            f"later")


class BlockMask:
    """A block mask of one mask_mod kernel (fj_block_mask, C API 0.6), made by
    flashjit.create_block_mask for calls of one shape: per block of query rows and tile
    of keys of the kernel's own tiles, whether mask_mod (with causal and the window) drops
    the whole tile (skipped), keeps all of it (run without calling mask_mod) or some of it.
    Pass it as flashjit.attention(..., block_mask=mask); the output is the same as
    without it.

    It owns the C handle: close() (or the end of a `with` block, or garbage collection)
    destroys it; a closed mask is refused by attention. update() rebuilds it in place for
    new contents of what mask_mod reads. Keep it alive (and open) as long as a CUDA graph
    that uses it may replay."""

    def __init__(self, address, kernel, device, device_index, description, shape, mod,
                 cu_seqlens, alibi_slopes, args, shared_across_batch, shared_across_heads,
                 stream, lib):
        self._address = address       # the fj_block_mask, 0 once closed
        self.kernel = kernel          # the kernel handle it was built by (c_void_p)
        self.device = device          # q's torch.device
        self.device_index = device_index
        self.description = description
        self.shape = shape
        self.mod_tensors, self.mod_scalars, self.mod_ints = (tuple(x) for x in mod)
        self.cu_seqlens = cu_seqlens  # (cu_seqlens_q, cu_seqlens_k) or None: kept alive
        self.alibi_slopes = alibi_slopes
        self.shared_across_batch = bool(shared_across_batch)
        self.shared_across_heads = bool(shared_across_heads)
        # Whether its kernel has the backward pass, so that the mask serves fj_backward
        # too (made for inputs that require grad, with a library of 0.10 or later).
        self.backward = False
        self._args = args             # the fj_forward_args it was built with (for update)
        self._stream = stream         # () -> the current stream of its device
        self._lib = lib
        self._close_lock = threading.Lock()

    # ---- what it is --------------------------------------------------------------
    @property
    def mask_mod(self):
        return self.description.features.mask_mod

    @property
    def closed(self):
        return not self._address

    @property
    def address(self):
        """The fj_block_mask handle as an int (0 once closed)."""
        return self._address

    def __repr__(self):
        s = self.shape
        text = self.mask_mod if len(self.mask_mod) <= 40 else self.mask_mod[:37] + "..."
        return (f"BlockMask(batch={s.batch}, seqlen_q={s.seqlen_q}, seqlen_k={s.seqlen_k}"
                f"{', cu_seqlens' if s.varlen else ''}, heads_q={self.description.heads_q}, "
                f"causal={self.description.causal}, "
                f"shared_across_batch={self.shared_across_batch}, "
                f"shared_across_heads={self.shared_across_heads}, mask_mod={text!r}"
                f"{', closed' if self.closed else ''})")

    # ---- its life ----------------------------------------------------------------
    def close(self):
        """Destroys the C mask (fj_block_mask_destroy: after the work queued on it, the
        free synchronises the device). Closing twice does nothing."""
        with self._close_lock:
            address, self._address = self._address, 0
        if address:
            _live.pop(address, None)  # before the free: the address may be reused
            self._lib.check("fj_block_mask_destroy",
                            self._lib.lib.fj_block_mask_destroy(C.c_void_p(address)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never from a finalizer (e.g. at exit)
            pass

    def _check_open(self, what):
        if not self._address:
            raise ValueError(f"{what}: this BlockMask was closed (close(), or the end of its "
                             f"`with` block); create another with flashjit.create_block_mask")

    # ---- update ------------------------------------------------------------------
    def update(self, mod_tensors=None, mod_scalars=None, mod_ints=None, *, cu_seqlens_q=None,
               cu_seqlens_k=None, alibi_slopes=None):
        """Rebuilds the mask in place (fj_block_mask_update) on the current stream of its
        device, for new contents of what mask_mod reads: after writing into the tensors it
        was built with (e.g. new document ids), or with other values given here (None
        keeps the ones it has): mod_tensors / mod_scalars / mod_ints as attention takes
        them, cu_seqlens_q / cu_seqlens_k of the same batch (a mask built with them),
        alibi_slopes (with ALiBi). The shape is the one it was created for. No allocation:
        it may be captured in a CUDA graph. Returns the mask."""
        self._check_open("BlockMask.update")
        tensors, scalars, ints = _checks.check_mod_args(
            self.mod_tensors if mod_tensors is None else mod_tensors,
            self.mod_scalars if mod_scalars is None else mod_scalars,
            self.mod_ints if mod_ints is None else mod_ints, self.device)
        cu = self.cu_seqlens
        if cu_seqlens_q is not None or cu_seqlens_k is not None:
            if cu is None:
                raise ValueError("cu_seqlens_q/k given, but this mask was built without "
                                 "cu_seqlens (for calls of fixed-length sequences)")
            cu = (cu[0] if cu_seqlens_q is None else cu_seqlens_q,
                  cu[1] if cu_seqlens_k is None else cu_seqlens_k)
            for name, t in (("cu_seqlens_q", cu[0]), ("cu_seqlens_k", cu[1])):
                _check_cu(name, t, self.shape.batch, self.device)
        slopes, alibi_stride = self.alibi_slopes, None
        if alibi_slopes is not None:
            if not self.description.features.alibi:
                raise ValueError("alibi_slopes given, but this mask's kernel has no ALiBi")
            alibi_stride = _checks.check_alibi_slopes(alibi_slopes, self.shape.batch,
                                                      self.description.heads_q, self.device,
                                                      pointers=True)
            slopes = alibi_slopes
        args = _capi.ForwardArgs.from_buffer_copy(self._args)  # its own until success
        args.mod_args = _capi.mod_args([t.data_ptr() for t in tensors], scalars, ints)
        if cu is not None:
            args.cu_seqlens_q, args.cu_seqlens_k = cu[0].data_ptr(), cu[1].data_ptr()
        if alibi_stride is not None:
            args.alibi_slopes, args.alibi_batch_stride = slopes.data_ptr(), alibi_stride
        self._lib.check("fj_block_mask_update", self._lib.lib.fj_block_mask_update(
            C.c_void_p(self._address), C.byref(args), C.c_void_p(self._stream())))
        self._args = args
        self.mod_tensors, self.mod_scalars, self.mod_ints = \
            tuple(tensors), tuple(scalars), tuple(ints)
        self.cu_seqlens, self.alibi_slopes = cu, slopes
        return self

    # ---- use by a call -------------------------------------------------------------
    def kernel_for(self, device_index, description, shape):
        """The kernel handle a call of `description` and `shape` on device `device_index`
        launches with this mask; ValueError naming what differs when the mask does not
        serve it."""
        check_use(self, description, shape)
        if device_index != self.device_index:
            raise ValueError(f"block_mask was built on cuda:{self.device_index}, this call "
                             f"runs on cuda:{device_index}")
        return self.kernel


def _check_cu(name, t, batch, device):
    for attr in ("shape", "stride", "dtype", "device", "data_ptr"):
        if not hasattr(t, attr):
            raise TypeError(f"{name} is a {type(t).__name__}: expected a 1-D torch.int32 "
                            f"tensor of batch + 1 prefix sums")
    if str(t.dtype) != "torch.int32" or tuple(t.shape) != (batch + 1,):
        raise ValueError(f"{name} is {t.dtype} {tuple(t.shape)}: this mask's calls have "
                         f"batch {batch}, so it must be torch.int32 ({batch + 1},)")
    if str(t.device) != str(device):
        raise ValueError(f"{name} is on {t.device}, the mask on {device}")
    if batch > 0 and t.stride()[0] != 1:
        raise ValueError(f"{name} has stride {t.stride()[0]}: it must be contiguous")
    if t.data_ptr() % 4:
        raise ValueError(f"{name}'s data is not 4-byte aligned")


def register(mask):
    with _lock:
        _live[mask.address] = mask
    return mask


def find(address):
    """The open BlockMask at `address`, or None (closed or collected since)."""
    mask = _live.get(address)
    return None if mask is None or mask.closed else mask


def lookup(address):
    """The open BlockMask whose fj_block_mask is at `address` (what the operator gets)."""
    mask = _live.get(address)
    if mask is None or mask.closed:
        raise ValueError(f"block_mask {address:#x} is not an open flashjit.BlockMask (closed, "
                         f"or garbage-collected): keep the BlockMask object alive while calls "
                         f"use it")
    return mask


def check_mask(block_mask):
    """block_mask is an open BlockMask (TypeError / ValueError)."""
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask is a {type(block_mask).__name__}: expected a "
                        f"flashjit.BlockMask (flashjit.create_block_mask), or None")
    block_mask._check_open("block_mask")
    return block_mask


def _scale_text(scale, d):
    return f"None (1/sqrt({d}))" if scale == 0.0 else repr(scale)


def _differences(mine, call):
    """'name: the mask's X, this call's Y' for each field of two Descriptions that differ."""
    out = []
    for name in Description._fields:
        a, b = getattr(mine, name), getattr(call, name)
        if name == "features":
            for feature in _checks.Features._fields:
                fa, fb = getattr(a, feature), getattr(b, feature)
                if fa != fb:
                    if feature in ("score_mod", "mask_mod") and fa and fb:
                        out.append(f"{feature}: another text")
                    else:
                        out.append(f"{feature}: the mask's {fa!r}, this call's {fb!r}")
        elif a != b:
            if name == "scale":
                a, b = _scale_text(a, mine.head_dim), _scale_text(b, call.head_dim)
                out.append(f"scale: the mask's {a}, this call's {b}")
            else:
                out.append(f"{name}: the mask's {a!r}, this call's {b!r}")
    return out


def _shape_text(s):
    return (f"batch {s.batch}, seqlen_q {s.seqlen_q}, seqlen_k {s.seqlen_k}"
            f"{' (cu_seqlens)' if s.varlen else ''}")


def check_use(mask, description, shape):
    """ValueError unless a call of `description` and `shape` may use `mask` (the C API's
    checks of the kernel and the shape, in Python's words; it checks the variant)."""
    mask._check_open("block_mask")
    diffs = _differences(mask.description, description)
    if diffs:
        raise ValueError(f"block_mask was built for another kernel than this call's "
                         f"({'; '.join(diffs)}): a block mask serves only calls of the "
                         f"description it was created with; create one with this call's "
                         f"arguments (flashjit.create_block_mask)")
    if tuple(shape) != tuple(mask.shape):
        raise ValueError(f"block_mask was built for {_shape_text(mask.shape)}; this call has "
                         f"{_shape_text(Shape(*shape))}: build a mask for this shape "
                         f"(flashjit.create_block_mask)")


def check_options(shared_across_batch, shared_across_heads, varlen):
    """The options of create_block_mask: bools (or 0/1), not shared_across_batch with
    cu_seqlens (the C API's rule)."""
    for name, value in (("shared_across_batch", shared_across_batch),
                        ("shared_across_heads", shared_across_heads)):
        if not isinstance(value, bool) and not (isinstance(value, int) and value in (0, 1)):
            raise TypeError(f"{name} is {value!r}: expected True or False")
    if varlen and shared_across_batch:
        raise ValueError("shared_across_batch is set, but the arguments have cu_seqlens: "
                         "sequences of different lengths cannot share one mask")
