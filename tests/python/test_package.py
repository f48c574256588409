"""The Python package without torch or a GPU (what CI has): it imports, finds
libflashjit.so, its ctypes structs have the C layout, and bad arguments become clear
Python exceptions before anything reaches a device."""
import ctypes as C
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import flashjit  # noqa: E402
from flashjit import _capi  # noqa: E402


class FakeTensor:
    """What the checks read of a torch tensor: shape, stride(), dtype, device."""

    def __init__(self, shape, dtype="torch.bfloat16", device="cuda:0", strides=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        if strides is None:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= n
        self._strides = tuple(strides)

    def stride(self):
        return self._strides


def qkv(b=2, s=100, hq=8, hkv=2, d=64, **kw):
    return (FakeTensor((b, s, hq, d), **kw), FakeTensor((b, s + 7, hkv, d), **kw),
            FakeTensor((b, s + 7, hkv, d), **kw))


class Imports(unittest.TestCase):
    def test_finds_the_library(self):
        path = flashjit.library_path()
        self.assertTrue(os.path.exists(path), path)
        self.assertRegex(flashjit.version(), r"^\d+\.\d+\.\d+$")
        self.assertTrue(flashjit.info()["backward"])

    def test_missing_library_is_a_clear_import_error(self):
        saved = os.environ.get("FLASHJIT_LIBRARY")
        os.environ["FLASHJIT_LIBRARY"] = "/nonexistent/libflashjit.so"
        try:
            with self.assertRaisesRegex(ImportError, "FLASHJIT_LIBRARY"):
                _capi.Library()
        finally:
            os.environ["FLASHJIT_LIBRARY"] = saved


class StructLayouts(unittest.TestCase):
    """The C API reports its own sizeof and names fields by offset: a ctypes struct that
    disagrees with the header fails here."""

    def c_sizeof(self, call, typename):
        msg = _capi.library().lib.fj_last_error_message().decode()
        m = re.search(r"sizeof\(" + typename + r"\) = (\d+)", msg)
        self.assertIsNotNone(m, msg)
        return int(m.group(1))

    def desc(self, **kw):
        return _capi.new(_capi.AttentionDesc, dtype=_capi.FJ_DTYPE_BF16, head_dim=64,
                         num_heads_q=4, num_heads_kv=2, **kw)

    def test_sizes_match_the_header(self):
        L = _capi.library().lib
        d = self.desc()
        d.struct_size = 4
        self.assertNotEqual(L.fj_validate_attention_desc(C.byref(d)), 0)
        self.assertEqual(self.c_sizeof(None, "fj_attention_desc"), C.sizeof(_capi.AttentionDesc))
        d = self.desc()
        a = _capi.new(_capi.ForwardArgs)
        a.struct_size = 4
        self.assertNotEqual(L.fj_validate_forward_args(C.byref(d), C.byref(a)), 0)
        self.assertEqual(self.c_sizeof(None, "fj_forward_args"), C.sizeof(_capi.ForwardArgs))
        b = _capi.new(_capi.BackwardArgs)
        b.struct_size = 4
        self.assertNotEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 0)
        self.assertEqual(self.c_sizeof(None, "fj_backward_args"), C.sizeof(_capi.BackwardArgs))

    def test_last_fields_are_where_the_library_reads_them(self):
        L = _capi.library().lib
        d = self.desc(batch_hint=-3)
        self.assertNotEqual(L.fj_validate_attention_desc(C.byref(d)), 0)
        self.assertIn("desc->batch_hint is -3",
                      _capi.library().lib.fj_last_error_message().decode())
        d = self.desc()
        a = _capi.new(_capi.ForwardArgs, batch=1, seqlen_q=8, seqlen_k=8,
                      cu_seqlens_q=0x7f0000000000, cu_seqlens_k=0x7f0000001000, total_k=-5)
        self.assertNotEqual(L.fj_validate_forward_args(C.byref(d), C.byref(a)), 0)
        self.assertIn("args->total_k is -5", L.fj_last_error_message().decode())

    def test_backward_args_fields(self):
        L = _capi.library().lib
        d = self.desc()
        b = _capi.new(_capi.BackwardArgs, batch=1, seqlen_q=16, seqlen_k=16)
        base = 0x7f0000000000
        for i, name in enumerate(("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv")):
            setattr(b, name, base + i * 0x1000000)
        for t, heads in (("q", 4), ("k", 2), ("v", 2), ("o", 4), ("dout", 4), ("dq", 4),
                         ("dk", 2), ("dv", 2)):
            setattr(b, f"{t}_head_stride", 64)
            setattr(b, f"{t}_seq_stride", heads * 64)
            setattr(b, f"{t}_batch_stride", 16 * heads * 64)
        self.assertEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 0,
                         L.fj_last_error_message().decode())
        b.dv_seq_stride = 12
        self.assertNotEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 0)
        self.assertIn("args->dv_seq_stride is 12", L.fj_last_error_message().decode())
        b.dv_seq_stride = 128
        b.deterministic = 7
        self.assertNotEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 0)
        self.assertIn("args->deterministic is 7", L.fj_last_error_message().decode())
        b.deterministic = 0
        b.workspace = base + 0x10000004
        self.assertNotEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 0)
        self.assertIn("args->workspace", L.fj_last_error_message().decode())


class BadArguments(unittest.TestCase):
    def expect(self, exc, pattern, *args, **kw):
        with self.assertRaisesRegex(exc, pattern):
            flashjit.attention(*args, **kw)

    def test_valid_arguments_pass_the_checks(self):
        lay, dims = flashjit.check_inputs(*qkv(), "bshd")
        self.assertEqual(dims["q"], (2, 100, 8, 64))
        lay, dims = flashjit.check_inputs(*(FakeTensor((2, 8, 100, 64)),) * 3, "bhsd")
        self.assertEqual(dims["q"], (2, 100, 8, 64))

    def test_wrong_dtype(self):
        self.expect(TypeError, r"q\.dtype is torch\.float32.*float16 or torch\.bfloat16",
                    *qkv(dtype="torch.float32"))

    def test_mixed_dtypes(self):
        q, k, v = qkv()
        k.dtype = v.dtype = "torch.float16"
        self.expect(TypeError, "must be the same", q, k, v)

    def test_wrong_device(self):
        self.expect(ValueError, r"q is on cpu: flashjit runs on CUDA", *qkv(device="cpu"))

    def test_wrong_rank(self):
        q, k, v = qkv()
        self.expect(ValueError, r"q has 3 dimensions .*expected 4", FakeTensor((2, 100, 64)), k, v)

    def test_head_counts(self):
        self.expect(ValueError, r"q has 6 heads and k/v 4.*multiple", *qkv(hq=6, hkv=4))

    def test_head_dims(self):
        self.expect(ValueError, r"head dim is 100.*multiples of 8", *qkv(d=100))
        self.expect(ValueError, r"head dim is 264", *qkv(d=264))
        q, k, v = qkv()
        self.expect(ValueError, r"q's head dim is 64 and k's 128", q,
                    FakeTensor((2, 107, 2, 128)), v)

    def test_last_dim_not_contiguous(self):
        q, k, v = qkv()
        q2 = FakeTensor(q.shape, strides=(51200, 512, 64, 2))
        self.expect(ValueError, r"q's last dimension has stride 2", q2, k, v)

    def test_not_a_tensor(self):
        q, k, v = qkv()
        self.expect(TypeError, r"q is a list, not a tensor", [1, 2], k, v)

    def test_batch_and_kv_shapes(self):
        q, k, v = qkv()
        self.expect(ValueError, r"q has batch 2 and k 3", q, FakeTensor((3, 107, 2, 64)),
                    FakeTensor((3, 107, 2, 64)))
        self.expect(ValueError, r"they must agree", q, k, FakeTensor((2, 99, 2, 64)))

    def test_varlen_arguments(self):
        q, k, v = (FakeTensor((300, 8, 64)), FakeTensor((280, 2, 64)), FakeTensor((280, 2, 64)))
        cu = FakeTensor((4,), dtype="torch.int32")
        self.expect(ValueError, r"go together", q, k, v, cu_seqlens_q=cu)
        self.expect(TypeError, r"cu_seqlens_q must be a 1-D torch\.int32", q, k, v,
                    cu_seqlens_q=FakeTensor((4,), dtype="torch.int64"), cu_seqlens_k=cu)
        self.expect(ValueError, r"max_seqlen_q and max_seqlen_k are required", q, k, v,
                    cu_seqlens_q=cu, cu_seqlens_k=cu)
        self.expect(ValueError, r"packed tensors", q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                    layout="bhsd")

    def test_bad_layout_and_scale(self):
        self.expect(ValueError, r"layout is 'sbhd'", *qkv(), layout="sbhd")
        self.expect(ValueError, r"scale is -1", *qkv(), scale=-1.0)
        self.expect(ValueError, r"scale is nan", *qkv(), scale=float("nan"))


if __name__ == "__main__":
    unittest.main()
