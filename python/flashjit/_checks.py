"""Argument checks that need neither torch nor a GPU: they read only what any tensor has
(shape, stride(), dtype, device, data_ptr()), so CI tests them on stand-ins. Each failure
is a ValueError or TypeError naming the argument and the value. They mirror the C API's
rules (api/validate.cpp) and are never stricter: the library checks again."""
import math
import operator
from collections import namedtuple

SUPPORTED_DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16"}
# FP8 inputs (C API 0.7, FJ_DTYPE_E4M3): flashjit.attention's forward pass alone, o of a
# 16-bit type (OUT_DTYPES), on sm_90a. Also the type of an FP8 KV cache (0.12,
# desc.kv_cache_dtype): flashjit.decode's and kv_append's k_cache and v_cache, on sm_80+.
FP8_DTYPES = {"torch.float8_e4m3fn": "e4m3"}
OUT_DTYPES = SUPPORTED_DTYPES  # o's types for FP8 inputs; None: bf16, as FlashAttention-3
FP8_HEAD_DIM_STEP = 16  # FP8 head dims: multiples of 16 (TMA rows of 16-byte multiples)
FP8_STRIDE_STEP = 16    # FP8 q, k, v strides: multiples of 16 elements (16 bytes)
MAX_HEAD_DIM = 256
MAX_GRID = 65535  # batch and heads: a CUDA grid dimension
MAX_SEQLEN = 1 << 30
MAX_USER_CODE_BYTES = 64 * 1024  # generator::kMaxUserCodeBytes
MOD_ARGS = 4  # entries of each of fj_mod_args' arrays
INT32 = (-(1 << 31), (1 << 31) - 1)


def dtype_name(t, fp8=False):
    """The kernel key's name of t's dtype ('fp16', 'bf16'; with fp8 also 'e4m3'), None
    for any other."""
    name = SUPPORTED_DTYPES.get(str(t.dtype))
    if name is None and fp8:
        return FP8_DTYPES.get(str(t.dtype))
    return name


def is_fp8(t):
    """Whether t holds FP8 (e4m3) elements."""
    return str(t.dtype) in FP8_DTYPES


class Layout:
    """Where batch, sequence and heads are in a q/k/v tensor."""

    def __init__(self, name, varlen):
        if not isinstance(name, str) or name.lower() not in ("bshd", "bhsd"):
            raise ValueError(f"layout is {name!r}: expected 'bshd' ([batch, seq, heads, dim], "
                             f"as flash_attn_func) or 'bhsd' ([batch, heads, seq, dim], as SDPA)")
        name = name.lower()
        if varlen and name != "bshd":
            raise ValueError("cu_seqlens takes packed tensors [total, heads, dim] (layout 'bshd')")
        self.name, self.varlen = name, varlen

    def dims(self, t):
        """(batch, seq, heads, dim) sizes (batch 1 when varlen: seq is the packed rows)."""
        if self.varlen:
            return 1, t.shape[0], t.shape[1], t.shape[2]
        if self.name == "bshd":
            return tuple(t.shape)
        b, h, s, d = t.shape
        return b, s, h, d

    def strides(self, t):
        """(batch, seq, head) strides in elements (batch 0 when varlen)."""
        st = t.stride()
        if self.varlen:
            return 0, st[0], st[1]
        if self.name == "bshd":
            return st[0], st[1], st[2]
        return st[0], st[2], st[1]

    def axis_names(self):
        """Names of the (batch, seq, head) axes, for messages."""
        return ("batch", "row", "head") if self.varlen else ("batch", "sequence", "head")


def _check_memory(name, t, lay, sizes, pointers):
    """The C API's rules for a tensor it reads or writes through strides: the last
    dimension contiguous, each stride of a dimension with more than one element a
    positive multiple of 8 elements, and (`pointers`) 16-byte aligned. Empty tensors are
    not read: not checked."""
    b, s, h, d = sizes
    if b * s * h * d == 0:
        return
    st = t.stride()
    if st[-1] != 1 and d > 1:
        raise ValueError(f"{name}'s last dimension has stride {st[-1]}: it must be "
                         f"contiguous (stride 1); call {name}.contiguous()")
    for axis, size, stride in zip(lay.axis_names(), (b, s, h), lay.strides(t)):
        if size <= 1 or lay.varlen and axis == "batch":
            continue
        if stride <= 0 or stride % 8:
            raise ValueError(
                f"{name}'s {axis} stride is {stride} elements (strides {tuple(st)}): flashjit "
                f"reads 16-byte vectors, so every stride but the last must be a positive "
                f"multiple of 8; call {name}.contiguous()")
    if pointers:
        ptr = t.data_ptr()
        if ptr % 16:
            raise ValueError(f"{name}'s data is at {ptr:#x}, not 16-byte aligned (a view "
                             f"with an offset?); call {name}.contiguous() or .clone()")


def check_inputs(q, k, v, layout, cu_seqlens_q=None, cu_seqlens_k=None, pointers=False,
                 fp8=False):
    """Checks q, k, v (and the cu_seqlens pair); returns the Layout and, per tensor, its
    (batch, seq, heads, dim). pointers: also check data_ptr()'s alignment (not under
    torch.compile, which cannot trace data_ptr(); the library checks it again anyway).
    fp8: torch.float8_e4m3fn inputs are taken too (flashjit.attention's), with the FP8
    kernels' own rules (check_fp8_inputs)."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError("cu_seqlens_q and cu_seqlens_k go together: pass both or neither")
    lay = Layout(layout, varlen)
    rank = 3 if varlen else 4
    dims = {}
    for name, t in (("q", q), ("k", k), ("v", v)):
        for attr in ("shape", "stride", "dtype", "device"):
            if not hasattr(t, attr):
                raise TypeError(f"{name} is a {type(t).__name__}, not a tensor")
        if len(t.shape) != rank:
            what = "[total, heads, dim] with cu_seqlens" if varlen else \
                "[batch, seq, heads, dim] (layout 'bshd')" if lay.name == "bshd" else \
                "[batch, heads, seq, dim] (layout 'bhsd')"
            raise ValueError(f"{name} has {len(t.shape)} dimensions {tuple(t.shape)}: expected "
                             f"{rank}, {what}")
        if dtype_name(t, fp8) is None:
            if is_fp8(t):
                raise TypeError(f"{name}.dtype is {t.dtype}: this call takes torch.float16 or "
                                f"torch.bfloat16 (FP8 inputs run in flashjit.attention "
                                f"alone, without attention features)")
            raise TypeError(f"{name}.dtype is {t.dtype}: flashjit takes torch.float16 or "
                            f"torch.bfloat16" + (" (or torch.float8_e4m3fn: FP8, the forward "
                                                 "pass alone)" if fp8 else ""))
        if str(t.device).split(":")[0] != "cuda":
            raise ValueError(f"{name} is on {t.device}: flashjit runs on CUDA tensors")
        dims[name] = lay.dims(t)
    if not (q.dtype == k.dtype == v.dtype):
        hint = " (FP8 takes all three as torch.float8_e4m3fn)" if \
            any(is_fp8(t) for t in (q, k, v)) else ""
        raise TypeError(f"q, k and v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: they must "
                        f"be the same{hint}")
    if not (str(q.device) == str(k.device) == str(v.device)):
        raise ValueError(f"q, k and v are on {q.device}, {k.device}, {v.device}: they must "
                         f"be on one device")
    (bq, _, hq, d), (bk, sk, hk, dk), (bv, sv, hv, dv) = dims["q"], dims["k"], dims["v"]
    if dk != d:
        raise ValueError(f"q's head dim is {d} and k's {dk}: they must be equal")
    for name, value in (("head dim", d), ("v's head dim", dv)):
        if value % 8 or value < 8 or value > MAX_HEAD_DIM:
            raise ValueError(f"{name} is {value}: flashjit takes multiples of 8 from 8 to "
                             f"{MAX_HEAD_DIM}")
    if (bk, sk, hk) != (bv, sv, hv):
        raise ValueError(f"k is {tuple(k.shape)} and v {tuple(v.shape)}: they must agree in "
                         f"batch, sequence and heads")
    if bq != bk:
        raise ValueError(f"q has batch {bq} and k {bk}: they must be equal")
    if hk == 0 or hq == 0 or hq % hk:
        raise ValueError(f"q has {hq} heads and k/v {hk}: the query heads must be a non-zero "
                         f"multiple of the key/value heads (GQA/MQA)")
    if hq > MAX_GRID or bq > MAX_GRID:
        raise ValueError(f"q has batch {bq} and {hq} heads: flashjit takes at most {MAX_GRID} "
                         f"of each (a CUDA grid dimension)")
    if not varlen and max(dims["q"][1], sk) > MAX_SEQLEN:
        raise ValueError(f"q has {dims['q'][1]} positions and k {sk}: flashjit takes at most "
                         f"2^30")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_memory(name, t, lay, dims[name], pointers)
    if varlen:
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            for attr in ("shape", "dtype", "device"):
                if not hasattr(cu, attr):
                    raise TypeError(f"{name} is a {type(cu).__name__}: expected a 1-D "
                                    f"torch.int32 tensor of batch + 1 prefix sums")
            if str(cu.dtype) != "torch.int32" or len(cu.shape) != 1:
                raise TypeError(f"{name} must be a 1-D torch.int32 tensor of batch + 1 prefix "
                                f"sums, not {cu.dtype} {tuple(cu.shape)}")
            if str(cu.device) != str(q.device):
                raise ValueError(f"{name} is on {cu.device}, q on {q.device}: they must be "
                                 f"on one device")
            if cu.shape[0] > 1 and cu.stride()[0] != 1:
                raise ValueError(f"{name} has stride {cu.stride()[0]}: it must be contiguous")
            if pointers and cu.data_ptr() % 4:
                raise ValueError(f"{name}'s data is not 4-byte aligned")
        if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0] or cu_seqlens_q.shape[0] < 1:
            raise ValueError(f"cu_seqlens_q has {cu_seqlens_q.shape[0]} entries and "
                             f"cu_seqlens_k {cu_seqlens_k.shape[0]}: both must be batch + 1 "
                             f"(>= 1)")
        if cu_seqlens_q.shape[0] - 1 > MAX_GRID:
            raise ValueError(f"cu_seqlens_q holds {cu_seqlens_q.shape[0] - 1} sequences: "
                             f"flashjit takes at most {MAX_GRID}")
    if fp8 and is_fp8(q):
        check_fp8_inputs(q, k, v, lay, dims)
    return lay, dims


# ---- FP8 (0.7) ---------------------------------------------------------------------
def check_fp8_inputs(q, k, v, lay, dims):
    """What FP8 q, k and v need beyond check_inputs' rules (api/validate_fp8.cpp): head
    dims multiples of 16, strides (of dimensions with more than one element) multiples of
    16 elements, at least one key."""
    d, dv = dims["q"][3], dims["v"][3]
    for name, value in (("head dim", d), ("v's head dim", dv)):
        if value % FP8_HEAD_DIM_STEP:
            raise ValueError(f"{name} is {value}: FP8 (torch.float8_e4m3fn) takes head dims "
                             f"that are multiples of {FP8_HEAD_DIM_STEP}")
    if dims["k"][1] < 1:
        raise ValueError(f"k has {dims['k'][1]} keys per sequence: FP8 kernels need at least "
                         f"one key")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if 0 in dims[name]:
            continue
        for axis, size, stride in zip(lay.axis_names(), dims[name][:3], lay.strides(t)):
            if size > 1 and stride % FP8_STRIDE_STEP:
                raise ValueError(
                    f"{name}'s {axis} stride is {stride} elements (strides "
                    f"{tuple(t.stride())}): FP8 kernels load q, k and v by rows of 16 bytes, "
                    f"so every stride but the last must be a multiple of {FP8_STRIDE_STEP} "
                    f"elements; call {name}.contiguous()")


def fp8_stride(size, stride):
    """The stride an FP8 call passes for a dimension: its own, but 0 where the dimension
    has one element and its stride (never multiplied by an index but 0) is not a multiple
    of 16, which the FP8 kernels ask of every stride."""
    return 0 if size <= 1 and stride % FP8_STRIDE_STEP else stride


def check_out_dtype(out_dtype, q, fp8):
    """o's dtype name ('bf16' or 'fp16'): with FP8 inputs out_dtype's (None: bf16); with
    16-bit ones q's own, which out_dtype may only repeat."""
    if fp8:
        if out_dtype is None:
            return "bf16"
        name = OUT_DTYPES.get(str(out_dtype))
        if name is None:
            raise TypeError(f"out_dtype is {out_dtype!r}: FP8 inputs give o as torch.bfloat16 "
                            f"(None, the default) or torch.float16")
        return name
    if out_dtype is not None and str(out_dtype) != str(q.dtype):
        raise ValueError(f"out_dtype is {out_dtype}, q's dtype {q.dtype}: with 16-bit inputs "
                         f"o has q's dtype (out_dtype chooses o's type for FP8 inputs, "
                         f"torch.float8_e4m3fn, alone)")
    return dtype_name(q)


def check_fp8_features(features, block_mask=None):
    """FP8 kernels take no attention features and no block mask (yet)."""
    if features != PLAIN or block_mask is not None:
        what = features_on(features) or "block_mask"
        raise ValueError(f"FP8 (torch.float8_e4m3fn) inputs take no attention features yet "
                         f"({what}): the FP8 kernel is the plain forward pass (causal or "
                         f"not); use fp16/bf16 inputs for them")


DESCALES = ("q_descale", "k_descale", "v_descale")


def _check_float32_on(t, name, device, shapes, why="", ref="q"):
    """That `t` is a torch.float32 tensor on `ref`'s device: TypeError or ValueError naming
    `name`; `shapes` ends the TypeError's expectation, `why` the device's."""
    for attr in ("shape", "stride", "dtype", "device"):
        if not hasattr(t, attr):
            raise TypeError(f"{name} is a {type(t).__name__}: expected a torch.float32 "
                            f"tensor{shapes}")
    if str(t.dtype) != "torch.float32":
        raise TypeError(f"{name}.dtype is {t.dtype}: expected torch.float32")
    if str(t.device) != str(device):
        raise ValueError(f"{name} is on {t.device}, {ref} on {device}: they must be on one "
                         f"device{why}")


def check_descale(name, t, batch, heads_kv, device, pointers=False):
    """A dequantization factor of FP8 inputs (q, k, v hold x / factor): a torch.float32
    tensor on q's device, one factor per tensor (shape () or (1,)) or one per sequence and
    key/value head ([batch, num_heads_kv], FlashAttention-3's). Returns the C API's
    (descale_batch_stride, descale_head_stride) for it, in elements: (0, 0) per tensor,
    and 0 for a dimension of one element."""
    _check_float32_on(t, name, device, ", () or (1,) (per tensor) or [batch, num_heads_kv]",
                      " (the kernel reads the factors)")
    shape = tuple(t.shape)
    if pointers and t.data_ptr() % 4:
        raise ValueError(f"{name}'s data is not 4-byte aligned")
    if shape in ((), (1,)):
        return (0, 0)
    if shape != (batch, heads_kv):
        raise ValueError(f"{name} is {shape}: expected () or (1,) (one factor per tensor) or "
                         f"({batch}, {heads_kv}), [batch, num_heads_kv] (one per sequence and "
                         f"key/value head)")
    st = t.stride()
    strides = (st[0] if batch > 1 else 0, st[1] if heads_kv > 1 else 0)
    if min(strides) < 0:
        raise ValueError(f"{name} has strides {tuple(st)}: they must not be negative")
    return strides


def check_descales(descales, fp8, batch, heads_kv, device, pointers=False):
    """The (q, k, v) descales of a call, each checked (check_descale); for 16-bit inputs
    they must all be None. Returns their check_descale results (None where not given)."""
    if not fp8:
        for name, t in zip(DESCALES, descales):
            if t is not None:
                raise ValueError(f"{name} is given, but the inputs are not FP8: dequantization "
                                 f"factors are for torch.float8_e4m3fn q, k and v")
        return (None, None, None)
    return tuple(None if t is None else check_descale(name, t, batch, heads_kv, device,
                                                      pointers)
                 for name, t in zip(DESCALES, descales))


def descale_strides(strides):
    """The one (batch, head) stride pair the C API takes for all three factors, from
    check_descales' results (a factor not given, NULL, reads as 1 whatever the strides):
    the given factors' strides when they agree (per tensor: (0, 0)), else None (then the
    factors are copied into contiguous [batch, num_heads_kv] tensors first)."""
    given = {s for s in strides if s is not None}
    if len(given) > 1:
        return None
    return given.pop() if given else (0, 0)


def check_max_seqlens(max_seqlen_q, max_seqlen_k):
    """With cu_seqlens: the longest sequences, positive ints up to 2^30."""
    if max_seqlen_q is None or max_seqlen_k is None:
        raise ValueError("with cu_seqlens, max_seqlen_q and max_seqlen_k are required (the "
                         "longest sequence of each)")
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise TypeError(f"{name} is {value!r}: expected an int") from None
        if not 0 <= n <= MAX_SEQLEN:
            raise ValueError(f"{name} is {value}: expected the longest sequence length, "
                             f"1 to 2^30")



# ---- attention features (0.3) ------------------------------------------------------
# What selects a kernel beyond the plain description, hashable (it is part of the key of
# the kernel handles): window None or (left, right); softcap 0.0 for none; alibi a bool
# (the slopes come per call); score_mod / mask_mod the user's CUDA text or None.
Features = namedtuple("Features", "window softcap alibi score_mod mask_mod")
PLAIN = Features(None, 0.0, False, None, None)


def features_on(f):
    """The names of the features `f` enables ("window, softcap"), "" for none."""
    names = [name for name, on in (("window", f.window is not None), ("softcap", f.softcap > 0),
                                   ("alibi", f.alibi), ("score_mod", f.score_mod),
                                   ("mask_mod", f.mask_mod)) if on]
    return ", ".join(names)


def _window(window):
    if window is None:
        return None
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(f"window is {window!r}: expected (left, right), the keys each query "
                        f"sees before and after its diagonal (-1: unbounded), or None") \
            from None
    sides = []
    for name, side in (("left", left), ("right", right)):
        try:
            if isinstance(side, bool):
                raise TypeError
            sides.append(operator.index(side))  # ints, numpy's and torch's too; not floats
        except TypeError:
            raise TypeError(f"window's {name} side is {side!r}: expected an int (keys, or -1 "
                            f"for unbounded)") from None
    left, right = sides
    for name, side in (("left", left), ("right", right)):
        if not -1 <= side <= INT32[1]:
            raise ValueError(f"window's {name} side is {side}: expected >= 0 keys, or -1 for "
                             f"unbounded")
    if left < 0 and right < 0:
        raise ValueError("window is (-1, -1): a window unbounded on both sides is no window; "
                         "bound a side, or pass window=None")
    return left, right


def _softcap(softcap):
    if isinstance(softcap, bool):
        raise TypeError(f"softcap is {softcap!r}: expected a number (0: none)")
    try:
        value = float(softcap)
    except (TypeError, ValueError):
        raise TypeError(f"softcap is {softcap!r}: expected a number (0: none)") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"softcap is {softcap!r}: expected a finite number >= 0 (0: none)")
    return value


def _user_code(name, text):
    """None or "" is none; else a str of at most MAX_USER_CODE_BYTES bytes (UTF-8)."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise TypeError(f"{name} is a {type(text).__name__}: expected a str, the body of the "
                        f"CUDA function (docs/PYTHON.md, \"Attention features\")")
    if "\0" in text:
        raise ValueError(f"{name} contains a NUL character")
    size = len(text.encode())
    if size > MAX_USER_CODE_BYTES:
        raise ValueError(f"{name} is {size} bytes: at most {MAX_USER_CODE_BYTES}")
    return text


def check_features(window=None, softcap=0.0, alibi=False, score_mod=None, mask_mod=None):
    """The Features of a call, checked (TypeError / ValueError naming the argument)."""
    return Features(_window(window), _softcap(softcap), bool(alibi),
                    _user_code("score_mod", score_mod), _user_code("mask_mod", mask_mod))


def check_alibi_slopes(slopes, batch, heads_q, device, pointers=False):
    """The slopes of ALiBi: a float32 tensor on q's device, [heads_q] (shared by the batch)
    or [batch, heads_q]. Returns the batch stride in elements (0 when shared)."""
    _check_float32_on(slopes, "alibi_slopes", device, " [heads_q] or [batch, heads_q]")
    shape = tuple(slopes.shape)
    if shape not in ((heads_q,), (batch, heads_q)):
        raise ValueError(f"alibi_slopes is {shape}: expected ({heads_q},) or ({batch}, "
                         f"{heads_q}), one slope per query head (and sequence)")
    st = slopes.stride()
    if heads_q > 1 and st[-1] != 1:
        raise ValueError(f"alibi_slopes has strides {tuple(st)}: the heads must be contiguous")
    batch_stride = st[0] if len(shape) == 2 and batch > 1 else 0
    if batch_stride < 0:
        raise ValueError(f"alibi_slopes has strides {tuple(st)}: they must not be negative")
    if pointers and slopes.data_ptr() % 4:
        raise ValueError("alibi_slopes' data is not 4-byte aligned")
    return batch_stride


def check_mod_args(mod_tensors=(), mod_scalars=(), mod_ints=(), device=None):
    """What user code sees as args: up to 4 tensors on q's device (any dtype and shape:
    the code indexes them), 4 floats and 4 int32s. Returns them as lists."""
    lists = []
    for name, values in (("mod_tensors", mod_tensors), ("mod_scalars", mod_scalars),
                         ("mod_ints", mod_ints)):
        if values is None:
            values = ()
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or \
                hasattr(values, "shape"):
            raise TypeError(f"{name} is {type(values).__name__}: expected a tuple or list of "
                            f"at most {MOD_ARGS}")
        if len(values) > MOD_ARGS:
            raise ValueError(f"{name} has {len(values)} entries: at most {MOD_ARGS}")
        lists.append(list(values))
    tensors, scalars, ints = lists
    for i, t in enumerate(tensors):
        if not all(hasattr(t, attr) for attr in ("data_ptr", "device")):
            raise TypeError(f"mod_tensors[{i}] is a {type(t).__name__}, not a tensor")
        if device is not None and str(t.device) != str(device):
            raise ValueError(f"mod_tensors[{i}] is on {t.device}, q on {device}: they must be "
                             f"on one device")
    for i, x in enumerate(scalars):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"mod_scalars[{i}] is {x!r}: expected a number")
        scalars[i] = float(x)
    for i, n in enumerate(ints):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"mod_ints[{i}] is {n!r}: expected an int")
        if not INT32[0] <= n <= INT32[1]:
            raise ValueError(f"mod_ints[{i}] is {n}: expected an int32")
    return tensors, scalars, ints


# ---- decode over a KV cache (0.4) --------------------------------------------------
MAX_DECODE_SPLITS = 128  # fj_decode_args.num_splits: 0 (automatic) or 1 to this
MIN_DECODE_ROW_TILE = 16  # dec_mma's smallest row tile (the grid's y dimension)

# The checked sizes of a decode call. seqlen_k: the bound of cache_seqlens (fj_decode_args.
# seqlen_k); page_size, num_pages, table_stride: 0 for a contiguous cache; scale 0.0 for
# 1/sqrt(head_dim); kv_cache_dtype: None for a 16-bit cache (q's dtype), 'e4m3' for an FP8
# one (0.12); descale_strides: the FP8 cache's factors' (descale_batch_stride,
# descale_head_stride), (0, 0) without factors or with a 16-bit cache.
DecodeSizes = namedtuple("DecodeSizes", "batch seqlen_q heads_q heads_kv head_dim head_dim_v "
                                        "seqlen_k paged page_size num_pages table_stride "
                                        "scale num_splits kv_cache_dtype descale_strides",
                         defaults=(None, (0, 0)))
# The checked sizes of an append: seqlen_k the cache's capacity per sequence; the cache's
# type and its factors' strides as in DecodeSizes.
AppendSizes = namedtuple("AppendSizes", "batch new_len heads_kv head_dim head_dim_v seqlen_k "
                                        "paged page_size num_pages table_stride "
                                        "kv_cache_dtype descale_strides",
                         defaults=(None, (0, 0)))
# An FP8 KV cache (0.12): the factors' names, and the step of its strides and head dims
# (its elements are bytes; the kernels move 16-byte chunks).
CACHE_DESCALES = ("k_descale", "v_descale")
FP8_CACHE_STEP = 16


def _is_tensor(name, t, what):
    for attr in ("shape", "stride", "dtype", "device"):
        if not hasattr(t, attr):
            raise TypeError(f"{name} is a {type(t).__name__}, not a tensor: expected {what}")


def _check_strided(name, t, axes, pointers, fp8=False):
    """The C API's memory rules (see _check_memory) for a 4-D tensor whose first three
    dimensions are named `axes` in messages; empty tensors are not checked. fp8: an FP8
    KV cache, whose strides (of dimensions with more than one element) must be multiples
    of 16 elements (16 bytes); those of one element are sent as 0 when they are not
    (fp8_stride)."""
    shape, st = tuple(t.shape), t.stride()
    if 0 in shape:
        return
    if st[-1] != 1 and shape[-1] > 1:
        raise ValueError(f"{name}'s last dimension has stride {st[-1]}: it must be "
                         f"contiguous (stride 1); call {name}.contiguous()")
    for axis, size, stride in zip(axes, shape[:3], st[:3]):
        if size > 1 and (stride <= 0 or stride % 8):
            raise ValueError(
                f"{name}'s {axis} stride is {stride} elements (strides {tuple(st)}): flashjit "
                f"reads 16-byte vectors, so every stride but the last must be a positive "
                f"multiple of 8; call {name}.contiguous()")
        if fp8 and size > 1 and stride % FP8_CACHE_STEP:
            raise ValueError(
                f"{name}'s {axis} stride is {stride} elements (strides {tuple(st)}): an FP8 "
                f"KV cache (torch.float8_e4m3fn) is read in 16-byte chunks, so every stride "
                f"but the last must be a multiple of {FP8_CACHE_STEP} elements; call "
                f"{name}.contiguous()")
    if pointers and t.data_ptr() % 16:
        raise ValueError(f"{name}'s data is at {t.data_ptr():#x}, not 16-byte aligned (a view "
                         f"with an offset?); call {name}.contiguous() or .clone()")


def _check_4d(name, t, what, cache=False):
    """A 4-D CUDA tensor of fp16/bf16; `cache`: a KV cache, which may also be
    torch.float8_e4m3fn (an FP8 cache, 0.12)."""
    _is_tensor(name, t, what)
    if len(t.shape) != 4:
        raise ValueError(f"{name} has {len(t.shape)} dimensions {tuple(t.shape)}: expected 4, "
                         f"{what}")
    if dtype_name(t, fp8=cache) is None:
        if is_fp8(t):
            raise TypeError(f"{name}.dtype is {t.dtype}: {name} must be torch.float16 or "
                            f"torch.bfloat16 (with an FP8 KV cache, torch.float8_e4m3fn "
                            f"k_cache and v_cache, q, o and the new rows stay 16-bit)")
        raise TypeError(f"{name}.dtype is {t.dtype}: flashjit takes torch.float16 or "
                        f"torch.bfloat16" + (" (or torch.float8_e4m3fn: an FP8 KV cache)"
                                             if cache else ""))
    if str(t.device).split(":")[0] != "cuda":
        raise ValueError(f"{name} is on {t.device}: flashjit runs on CUDA tensors")


def _same(names, tensors):
    """One dtype and one device for all of `tensors`."""
    dtypes = [str(t.dtype) for t in tensors]
    if dtypes.count(dtypes[0]) != len(dtypes):
        raise TypeError(f"{', '.join(names)} have dtypes {', '.join(dtypes)}: they must be "
                        f"the same")
    devices = [str(t.device) for t in tensors]
    if devices.count(devices[0]) != len(devices):
        raise ValueError(f"{', '.join(names)} are on {', '.join(devices)}: they must be on "
                         f"one device")


def _cache_dtype(k_cache, v_cache, rows, row_names):
    """The KV cache's type, checked with the 16-bit tensors that go with it (`rows`: q, or
    k_new and v_new): None for a 16-bit cache (the rows' dtype, all on one device), 'e4m3'
    for an FP8 one (k_cache and v_cache both torch.float8_e4m3fn, the rows fp16 or bf16
    alike, all on one device)."""
    if not (is_fp8(k_cache) or is_fp8(v_cache)):
        if row_names[0] == "q":
            _same(row_names + ("k_cache", "v_cache"), rows + (k_cache, v_cache))
        else:
            _same(("k_cache", "v_cache") + row_names, (k_cache, v_cache) + rows)
        return None
    if not (is_fp8(k_cache) and is_fp8(v_cache)):
        raise TypeError(f"k_cache and v_cache have dtypes {k_cache.dtype}, {v_cache.dtype}: "
                        f"an FP8 KV cache takes both as torch.float8_e4m3fn (a 16-bit one "
                        f"both of {row_names[0]}'s dtype)")
    _same(row_names, rows)
    tensors = rows + (k_cache, v_cache)
    devices = [str(t.device) for t in tensors]
    if devices.count(devices[0]) != len(devices):
        raise ValueError(f"{', '.join(row_names + ('k_cache', 'v_cache'))} are on "
                         f"{', '.join(devices)}: they must be on one device")
    return "e4m3"


def _fp8_cache_head_dims(d, dv, k_name="k_cache", v_name="v_cache"):
    for name, value in ((f"{k_name}'s head dim", d), (f"{v_name}'s head dim", dv)):
        if value % FP8_CACHE_STEP:
            raise ValueError(f"{name} is {value}: an FP8 KV cache (torch.float8_e4m3fn) takes "
                             f"head dims that are multiples of {FP8_CACHE_STEP}")


def _cache_descale(name, t, batch, heads_kv, device, pointers, ref):
    """One factor of an FP8 KV cache: its (descale_batch_stride, descale_head_stride)."""
    _check_float32_on(t, name, device, ", () or (1,) (per tensor), [num_heads_kv] (per "
                                       "key/value head) or [batch, num_heads_kv]",
                      " (the kernels read the factors)", ref)
    if pointers and t.data_ptr() % 4:
        raise ValueError(f"{name}'s data is not 4-byte aligned")
    shape = tuple(t.shape)
    if shape in ((), (1,)):
        return (0, 0)
    st = t.stride()
    if shape == (heads_kv,):
        strides = (0, st[0] if heads_kv > 1 else 0)
    elif shape == (batch, heads_kv):
        strides = (st[0] if batch > 1 else 0, st[1] if heads_kv > 1 else 0)
    else:
        raise ValueError(f"{name} is {shape}: expected () or (1,) (one factor per tensor), "
                         f"({heads_kv},), [num_heads_kv] (one per key/value head), or "
                         f"({batch}, {heads_kv}), [batch, num_heads_kv] (one per sequence and "
                         f"key/value head)")
    if min(strides) < 0:
        raise ValueError(f"{name} has strides {tuple(st)}: they must not be negative")
    return strides


def check_cache_descales(k_descale, v_descale, kv_cache_dtype, batch, heads_kv, device,
                         pointers=False, ref="q"):
    """The dequantization factors of an FP8 KV cache (the value of a stored byte is its e4m3
    value times its (sequence, key/value head)'s factor): each None (a factor of 1) or a
    torch.float32 tensor on q's device, () or (1,) (one factor per tensor), [num_heads_kv]
    (one per key/value head) or [batch, num_heads_kv] (one per sequence and key/value
    head). The C API takes one (batch, head) stride pair for both: given together, they
    must be laid out alike (the same shape and strides). Returns that pair, (0, 0) when
    neither is given. With a 16-bit cache (kv_cache_dtype None) they must be None. `ref`
    names the tensor whose device is `device` in messages."""
    given = [(name, t) for name, t in zip(CACHE_DESCALES, (k_descale, v_descale))
             if t is not None]
    if kv_cache_dtype is None:
        if given:
            raise ValueError(f"{given[0][0]} is given, but the KV cache is not FP8: "
                             f"dequantization factors are for a torch.float8_e4m3fn k_cache "
                             f"and v_cache (a 16-bit cache holds the values themselves)")
        return (0, 0)
    strides = [_cache_descale(name, t, batch, heads_kv, device, pointers, ref)
               for name, t in given]
    if len(strides) == 2 and strides[0] != strides[1]:
        k, v = k_descale, v_descale
        raise ValueError(f"k_descale is {tuple(k.shape)} (strides {tuple(k.stride())}) and "
                         f"v_descale {tuple(v.shape)} (strides {tuple(v.stride())}): the C "
                         f"API takes one (batch, head) stride pair for both factors, so they "
                         f"must have the same shape and strides (e.g. both [num_heads_kv], "
                         f"or both contiguous [batch, num_heads_kv])")
    return strides[0] if strides else (0, 0)


def _check_head_dims(d, dk, dv, q_name="q", k_name="k_cache", v_name="v_cache"):
    if dk != d:
        raise ValueError(f"{q_name}'s head dim is {d} and {k_name}'s {dk}: they must be equal")
    for name, value in ((f"{k_name}'s head dim", dk), (f"{v_name}'s head dim", dv)):
        if value % 8 or value < 8 or value > MAX_HEAD_DIM:
            raise ValueError(f"{name} is {value}: flashjit takes multiples of 8 from 8 to "
                             f"{MAX_HEAD_DIM}")


def _int_tensor(name, t, shape, device, what, pointers):
    """A torch.int32 tensor of `shape` on `device`, its last dimension contiguous."""
    _is_tensor(name, t, what)
    if str(t.dtype) != "torch.int32":
        raise TypeError(f"{name}.dtype is {t.dtype}: expected torch.int32 ({what})")
    if str(t.device) != str(device):
        raise ValueError(f"{name} is on {t.device}, q on {device}: they must be on one device "
                         f"(device memory, read by the kernels)")
    wrong = len(t.shape) != len(shape)
    if not wrong:
        for n, want in zip(t.shape, shape):  # (a loop: torch.compile traces this)
            if want is not None and n != want:
                wrong = True
    if wrong:
        text = ", ".join(["?" if n is None else str(n) for n in shape])
        if len(shape) == 1:
            text += ","
        raise ValueError(f"{name} is {tuple(t.shape)}: expected ({text}), {what}")
    if t.shape[-1] > 1 and t.stride()[-1] != 1:
        raise ValueError(f"{name} has strides {tuple(t.stride())}: its last dimension must be "
                         f"contiguous; call {name}.contiguous()")
    if pointers and t.data_ptr() % 4:
        raise ValueError(f"{name}'s data is not 4-byte aligned")


def _cache_layout(k_cache, v_cache, batch, block_table, device, pointers, caller):
    """(paged, page_size, num_pages, table_stride, capacity) of a KV cache: contiguous
    [batch, seqlen_k, heads_kv, d] without a block table, paged [num_pages, page_size,
    heads_kv, d] with one ([batch, max_pages] int32). capacity: the most keys a sequence
    can have (seqlen_k; max_pages * page_size)."""
    p, s, hk = k_cache.shape[:3]
    if tuple(v_cache.shape[:3]) != (p, s, hk):
        what = "pages, page size" if block_table is not None else "batch, sequence"
        raise ValueError(f"k_cache is {tuple(k_cache.shape)} and v_cache "
                         f"{tuple(v_cache.shape)}: they must agree in {what} and heads")
    if block_table is None:
        if p != batch:
            raise ValueError(f"k_cache has batch {p} and {caller} {batch}: a contiguous cache "
                             f"([batch, seqlen_k, heads_kv, head_dim]) holds one row per "
                             f"sequence (pass block_table for a paged cache)")
        return False, 0, 0, 0, s
    _int_tensor("block_table", block_table, (batch, None), device,
                "[batch, max_pages], the pages of each sequence in token order", pointers)
    max_pages = block_table.shape[1]
    if s < 1 or p < 1:
        raise ValueError(f"k_cache is {tuple(k_cache.shape)}: a paged cache ([num_pages, "
                         f"page_size, heads_kv, head_dim]) needs at least one page of at least "
                         f"one token")
    table_stride = max_pages
    if batch > 1:
        table_stride = block_table.stride()[0]
        if table_stride < max_pages:
            raise ValueError(f"block_table has strides {tuple(block_table.stride())}: its rows "
                             f"must not overlap; call block_table.contiguous()")
    if table_stride > INT32[1]:
        raise ValueError(f"block_table's row stride is {table_stride}: at most 2^31 - 1")
    return True, s, p, table_stride, max_pages * s


def _seqlens(cache_seqlens, batch, device, pointers):
    _int_tensor("cache_seqlens", cache_seqlens, (batch,), device,
                "[batch], the keys of each sequence", pointers)


def check_decode(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None,
                 num_splits=0, out=None, max_seqlen_k=None, pointers=False, k_descale=None,
                 v_descale=None):
    """Checks flashjit.decode's arguments (TypeError / ValueError naming the argument and
    the value, the C API's rules: api/validate_decode.cpp); returns their DecodeSizes.
    k_cache and v_cache of torch.float8_e4m3fn: an FP8 cache (0.12), with its factors
    k_descale and v_descale (check_cache_descales)."""
    paged = block_table is not None
    what_cache = "[num_pages, page_size, heads_kv, head_dim] (paged: block_table given)" \
        if paged else "[batch, seqlen_k, heads_kv, head_dim] (a contiguous cache; pass " \
                      "block_table for a paged one)"
    _check_4d("q", q, "[batch, seqlen_q, heads_q, head_dim]")
    _check_4d("k_cache", k_cache, what_cache, cache=True)
    _check_4d("v_cache", v_cache, what_cache.replace("head_dim", "head_dim_v", 1), cache=True)
    kv_cache_dtype = _cache_dtype(k_cache, v_cache, (q,), ("q",))
    batch, seqlen_q, heads_q, d = q.shape
    heads_kv, dk, dv = k_cache.shape[2], k_cache.shape[3], v_cache.shape[3]
    _check_head_dims(d, dk, dv)
    if kv_cache_dtype:
        _fp8_cache_head_dims(dk, dv)
    paged, page_size, num_pages, table_stride, capacity = _cache_layout(
        k_cache, v_cache, batch, block_table, q.device, pointers, "q")
    if heads_kv == 0 or heads_q == 0 or heads_q % heads_kv:
        raise ValueError(f"q has {heads_q} heads and k_cache/v_cache {heads_kv}: the query "
                         f"heads must be a non-zero multiple of the key/value heads (GQA/MQA)")
    if heads_q > MAX_GRID or batch > MAX_GRID:
        raise ValueError(f"q has batch {batch} and {heads_q} heads: flashjit takes at most "
                         f"{MAX_GRID} of each (a CUDA grid dimension)")
    if batch * heads_kv > MAX_GRID:
        raise ValueError(f"q has batch {batch} and the cache {heads_kv} heads: decode takes "
                         f"batch * heads_kv <= {MAX_GRID} (a CUDA grid dimension)")
    group = heads_q // heads_kv
    if seqlen_q > MAX_SEQLEN or -(-seqlen_q * group // MIN_DECODE_ROW_TILE) > MAX_GRID:
        raise ValueError(f"q has {seqlen_q} rows per sequence and {group} query heads per "
                         f"key/value head: decode takes at most "
                         f"{MAX_GRID * MIN_DECODE_ROW_TILE} of their product (a CUDA grid "
                         f"dimension)")
    if cache_seqlens is not None:
        _seqlens(cache_seqlens, batch, q.device, pointers)
    elif paged:
        raise ValueError("a paged cache (block_table given) needs cache_seqlens, the int32 "
                         "[batch] keys of each sequence")
    if max_seqlen_k is None:
        seqlen_k = capacity
    else:
        if isinstance(max_seqlen_k, bool):
            raise TypeError(f"max_seqlen_k is {max_seqlen_k!r}: expected an int")
        try:
            seqlen_k = operator.index(max_seqlen_k)
        except TypeError:
            raise TypeError(f"max_seqlen_k is {max_seqlen_k!r}: expected an int") from None
        if not 0 <= seqlen_k <= capacity:
            raise ValueError(f"max_seqlen_k is {seqlen_k}: expected 0 to the cache's capacity "
                             f"per sequence, {capacity} (the longest cache_seqlens entry)")
    if seqlen_k > MAX_SEQLEN:
        raise ValueError(f"the cache holds {seqlen_k} keys per sequence: flashjit takes at "
                         f"most 2^30 (pass max_seqlen_k, the longest cache_seqlens entry)")
    if isinstance(num_splits, bool):
        raise TypeError(f"num_splits is {num_splits!r}: expected an int")
    try:
        num_splits = operator.index(num_splits)
    except TypeError:
        raise TypeError(f"num_splits is {num_splits!r}: expected an int (0: automatic)") \
            from None
    if not 0 <= num_splits <= MAX_DECODE_SPLITS:
        raise ValueError(f"num_splits is {num_splits}: expected 0 (automatic) or 1 to "
                         f"{MAX_DECODE_SPLITS}")
    scale = _scale(softmax_scale, d)
    descale_strides = check_cache_descales(k_descale, v_descale, kv_cache_dtype, batch,
                                           heads_kv, q.device, pointers)
    if out is not None:
        _check_4d("out", out, f"[batch, seqlen_q, heads_q, head_dim_v] = "
                              f"{(batch, seqlen_q, heads_q, dv)}")
        if tuple(out.shape) != (batch, seqlen_q, heads_q, dv):
            raise ValueError(f"out is {tuple(out.shape)}: expected "
                             f"{(batch, seqlen_q, heads_q, dv)}, [batch, seqlen_q, heads_q, "
                             f"head_dim_v]")
        _same(("q", "out"), (q, out))
    work = batch > 0 and seqlen_q > 0
    if work:
        _check_strided("q", q, ("batch", "sequence", "head"), pointers)
        if out is not None:
            _check_strided("out", out, ("batch", "sequence", "head"), pointers)
        if seqlen_k > 0:
            axes = ("page", "row", "head") if paged else ("batch", "sequence", "head")
            _check_strided("k_cache", k_cache, axes, pointers, kv_cache_dtype is not None)
            _check_strided("v_cache", v_cache, axes, pointers, kv_cache_dtype is not None)
    return DecodeSizes(batch, seqlen_q, heads_q, heads_kv, d, dv, seqlen_k, paged, page_size,
                       num_pages, table_stride, scale, num_splits, kv_cache_dtype,
                       descale_strides)


def _scale(softmax_scale, d):
    if softmax_scale is None:
        return 0.0  # the library's default: 1 / sqrt(head_dim)
    if isinstance(softmax_scale, bool):
        raise TypeError(f"softmax_scale is {softmax_scale!r}: expected a number (None: "
                        f"1/sqrt({d}))")
    try:
        value = float(softmax_scale)
    except (TypeError, ValueError):
        raise TypeError(f"softmax_scale is {softmax_scale!r}: expected a number (None: "
                        f"1/sqrt({d}))") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"softmax_scale is {softmax_scale!r}: expected a finite positive "
                         f"number (None: 1/sqrt({d}))")
    return value


def check_kv_append(k_cache, v_cache, k_new, v_new, cache_seqlens=None, block_table=None,
                    pointers=False, k_descale=None, v_descale=None):
    """Checks flashjit.kv_append's arguments; returns their AppendSizes. An FP8 cache
    (torch.float8_e4m3fn, 0.12) takes 16-bit k_new and v_new, stored divided by
    k_descale / v_descale (check_cache_descales)."""
    paged = block_table is not None
    what_cache = "[num_pages, page_size, heads_kv, head_dim] (paged: block_table given)" \
        if paged else "[batch, seqlen_k, heads_kv, head_dim] (a contiguous cache; pass " \
                      "block_table for a paged one)"
    _check_4d("k_new", k_new, "[batch, new_len, heads_kv, head_dim]")
    _check_4d("v_new", v_new, "[batch, new_len, heads_kv, head_dim_v]")
    _check_4d("k_cache", k_cache, what_cache, cache=True)
    _check_4d("v_cache", v_cache, what_cache.replace("head_dim", "head_dim_v", 1), cache=True)
    kv_cache_dtype = _cache_dtype(k_cache, v_cache, (k_new, v_new), ("k_new", "v_new"))
    batch, new_len, heads_kv, d = k_new.shape
    if tuple(v_new.shape[:3]) != (batch, new_len, heads_kv):
        raise ValueError(f"k_new is {tuple(k_new.shape)} and v_new {tuple(v_new.shape)}: "
                         f"they must agree in batch, rows and heads")
    _check_head_dims(d, k_cache.shape[3], v_cache.shape[3], "k_new", "k_cache", "v_cache")
    if v_new.shape[3] != v_cache.shape[3]:
        raise ValueError(f"v_new's head dim is {v_new.shape[3]} and v_cache's "
                         f"{v_cache.shape[3]}: they must be equal")
    if k_cache.shape[2] != heads_kv:
        raise ValueError(f"k_new has {heads_kv} heads and k_cache {k_cache.shape[2]}: they "
                         f"must be equal")
    if heads_kv == 0:
        raise ValueError("k_new has 0 heads")
    if kv_cache_dtype:
        _fp8_cache_head_dims(k_cache.shape[3], v_cache.shape[3])
    paged, page_size, num_pages, table_stride, capacity = _cache_layout(
        k_cache, v_cache, batch, block_table, k_new.device, pointers, "k_new")
    if batch > MAX_GRID:
        raise ValueError(f"k_new has batch {batch}: flashjit takes at most {MAX_GRID} (a CUDA "
                         f"grid dimension)")
    if cache_seqlens is not None:
        _seqlens(cache_seqlens, batch, k_new.device, pointers)
    if capacity > MAX_SEQLEN:
        raise ValueError(f"the cache holds {capacity} keys per sequence: flashjit takes at "
                         f"most 2^30")
    if new_len > capacity:
        raise ValueError(f"k_new has {new_len} rows per sequence: more than the cache holds, "
                         f"{capacity}")
    descale_strides = check_cache_descales(k_descale, v_descale, kv_cache_dtype, batch,
                                           heads_kv, k_new.device, pointers, "k_new")
    if batch > 0 and new_len > 0:
        _check_strided("k_new", k_new, ("batch", "sequence", "head"), pointers)
        _check_strided("v_new", v_new, ("batch", "sequence", "head"), pointers)
        axes = ("page", "row", "head") if paged else ("batch", "sequence", "head")
        _check_strided("k_cache", k_cache, axes, pointers, kv_cache_dtype is not None)
        _check_strided("v_cache", v_cache, axes, pointers, kv_cache_dtype is not None)
    return AppendSizes(batch, new_len, heads_kv, d, v_cache.shape[3], capacity, paged,
                       page_size, num_pages, table_stride, kv_cache_dtype, descale_strides)
