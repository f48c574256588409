"""Argument checks that need neither torch nor a GPU: they read only what any tensor has
(shape, stride(), dtype, device, data_ptr()), so CI tests them on stand-ins. Each failure
is a ValueError or TypeError naming the argument and the value. They mirror the C API's
rules (api/validate.cpp) and are never stricter: the library checks again."""

SUPPORTED_DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16"}
MAX_HEAD_DIM = 256
MAX_GRID = 65535  # batch and heads: a CUDA grid dimension
MAX_SEQLEN = 1 << 30


def dtype_name(t):
    return SUPPORTED_DTYPES.get(str(t.dtype))


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


def check_inputs(q, k, v, layout, cu_seqlens_q=None, cu_seqlens_k=None, pointers=False):
    """Checks q, k, v (and the cu_seqlens pair); returns the Layout and, per tensor, its
    (batch, seq, heads, dim). pointers: also check data_ptr()'s alignment (not under
    torch.compile, which cannot trace data_ptr(); the library checks it again anyway)."""
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
        if dtype_name(t) is None:
            raise TypeError(f"{name}.dtype is {t.dtype}: flashjit takes torch.float16 or "
                            f"torch.bfloat16")
        if str(t.device).split(":")[0] != "cuda":
            raise ValueError(f"{name} is on {t.device}: flashjit runs on CUDA tensors")
        dims[name] = lay.dims(t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: they must "
                        f"be the same")
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
    return lay, dims


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

