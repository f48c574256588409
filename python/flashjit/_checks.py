"""Argument checks that need neither torch nor a GPU: they read only what any tensor has
(shape, stride(), dtype, device), so CI tests them on stand-ins. Each failure is a
ValueError or TypeError naming the argument and the value."""

SUPPORTED_DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16"}
MAX_HEAD_DIM = 256


def dtype_name(t):
    return SUPPORTED_DTYPES.get(str(t.dtype))


class Layout:
    """Where batch, sequence and heads are in a q/k/v tensor."""

    def __init__(self, name, varlen):
        name = name.lower()
        if name not in ("bshd", "bhsd"):
            raise ValueError(f"layout is {name!r}: expected 'bshd' ([batch, seq, heads, dim], "
                             f"as flash_attn_func) or 'bhsd' ([batch, heads, seq, dim], as SDPA)")
        if varlen and name != "bshd":
            raise ValueError("cu_seqlens takes packed tensors [total, heads, dim] (layout 'bshd')")
        self.name, self.varlen = name, varlen

    def dims(self, t):
        """(batch, seq, heads, dim) sizes."""
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


def check_inputs(q, k, v, layout, cu_seqlens_q=None, cu_seqlens_k=None):
    """Checks q, k, v (and the cu_seqlens pair); returns their (batch, seq, heads, dim)."""
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
                f"[batch, seq, heads, dim] ({lay.name})" if lay.name == "bshd" else \
                "[batch, heads, seq, dim] (bhsd)"
            raise ValueError(f"{name} has {len(t.shape)} dimensions {tuple(t.shape)}: expected "
                             f"{rank}, {what}")
        if dtype_name(t) is None:
            raise TypeError(f"{name}.dtype is {t.dtype}: flashjit takes torch.float16 or "
                            f"torch.bfloat16")
        if not str(t.device).startswith("cuda"):
            raise ValueError(f"{name} is on {t.device}: flashjit runs on CUDA tensors")
        if t.stride()[-1] != 1 and t.shape[-1] > 1:
            raise ValueError(f"{name}'s last dimension has stride {t.stride()[-1]}: it must be "
                             f"contiguous (stride 1)")
        dims[name] = lay.dims(t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v have dtypes {q.dtype}, {k.dtype}, {v.dtype}: they must "
                        f"be the same")
    if not (str(q.device) == str(k.device) == str(v.device)):
        raise ValueError(f"q, k and v are on {q.device}, {k.device}, {v.device}: they must "
                         f"be on one device")
    (bq, sq, hq, d), (bk, sk, hk, dk), (bv, sv, hv, dv) = dims["q"], dims["k"], dims["v"]
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
    if hk == 0 or hq % hk:
        raise ValueError(f"q has {hq} heads and k/v {hk}: the query heads must be a multiple "
                         f"of the key/value heads (GQA/MQA)")
    if varlen:
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if str(cu.dtype) != "torch.int32" or len(cu.shape) != 1:
                raise TypeError(f"{name} must be a 1-D torch.int32 tensor of batch + 1 prefix "
                                f"sums, not {cu.dtype} {tuple(cu.shape)}")
            if str(cu.device) != str(q.device):
                raise ValueError(f"{name} is on {cu.device}, q on {q.device}")
        if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0] or cu_seqlens_q.shape[0] < 1:
            raise ValueError(f"cu_seqlens_q has {cu_seqlens_q.shape[0]} entries and "
                             f"cu_seqlens_k {cu_seqlens_k.shape[0]}: both must be batch + 1")
    return lay, dims
