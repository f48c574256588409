"""The Python package without torch or a GPU (what CI has): it imports, finds
libflashjit.so, its ctypes structs have the C layout, failing C calls become
FlashJitError with the library's status and message, the settings are checked, bad
arguments become clear Python exceptions before anything reaches a device, and the
package builds as a wheel offline.

    FLASHJIT_LIBRARY=build/api/libflashjit.so python3 -m unittest discover tests/python

(ctest runs it as `python_package`, label unit, with the library it just built.)"""
import ctypes as C
import hashlib
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON_DIR = os.path.join(REPO, "python")
sys.path.insert(0, PYTHON_DIR)

import flashjit  # noqa: E402
from flashjit import _capi, _checks, _runtime  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


class FakeTensor:
    """What the checks read of a torch tensor: shape, stride(), dtype, device, data_ptr()."""

    def __init__(self, shape, dtype="torch.bfloat16", device="cuda:0", strides=None,
                 ptr=0x7f0000000000, requires_grad=False):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad
        self.ptr = ptr
        if strides is None:
            strides, step = [], 1
            for n in reversed(self.shape):
                strides.insert(0, step)
                step *= n
        self._strides = tuple(strides)

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self.ptr


def qkv(b=2, s=100, hq=8, hkv=2, d=64, **kw):
    return (FakeTensor((b, s, hq, d), **kw), FakeTensor((b, s + 7, hkv, d), **kw),
            FakeTensor((b, s + 7, hkv, d), **kw))


def message():
    return _capi.library().lib.fj_last_error_message().decode()


class Imports(unittest.TestCase):
    def test_finds_the_library(self):
        path = flashjit.library_path()
        self.assertTrue(os.path.exists(path), path)
        self.assertRegex(flashjit.version(), r"^\d+\.\d+\.\d+$")
        self.assertIsInstance(flashjit.has_backward(), bool)
        self.assertEqual(flashjit.info()["backward"], flashjit.has_backward())

    def test_versions_agree(self):
        """The package's version is the library's (one release, one number)."""
        self.assertEqual(flashjit.__version__, flashjit.version())

    def run_python(self, code, **env):
        e = dict(os.environ, PYTHONPATH=PYTHON_DIR, PYTHONDONTWRITEBYTECODE="1", **env)
        return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True,
                              text=True, timeout=120)

    def test_import_needs_neither_torch_nor_the_library(self):
        r = self.run_python(
            "import sys, flashjit\n"
            "assert 'torch' not in sys.modules, 'import flashjit imported torch'\n"
            "try:\n"
            "    flashjit.library_path()\n"
            "except ImportError as ex:\n"
            "    print('ImportError:', ex)\n",
            FLASHJIT_LIBRARY="/nonexistent/libflashjit.so")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ImportError: flashjit: cannot load libflashjit.so", r.stdout)
        self.assertIn("FLASHJIT_LIBRARY", r.stdout)
        self.assertIn("/nonexistent/libflashjit.so", r.stdout)

    def test_missing_library_is_a_clear_import_error(self):
        saved = os.environ.get("FLASHJIT_LIBRARY")
        os.environ["FLASHJIT_LIBRARY"] = "/nonexistent/libflashjit.so"
        try:
            with self.assertRaisesRegex(ImportError, "FLASHJIT_LIBRARY"):
                _capi.Library()
        finally:
            if saved is None:
                del os.environ["FLASHJIT_LIBRARY"]
            else:
                os.environ["FLASHJIT_LIBRARY"] = saved

    def test_a_library_that_is_not_flashjit_is_refused(self):
        libc = "libc.so.6"
        r = self.run_python("import flashjit\nflashjit.library_path()", FLASHJIT_LIBRARY=libc)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("lacks fj_", r.stderr)

    @unittest.skipIf(HAVE_TORCH, "torch is installed")
    def test_attention_without_torch_says_so(self):
        with self.assertRaisesRegex(ImportError, "torch"):
            flashjit.attention(*qkv())


class StructLayouts(unittest.TestCase):
    """The C API reports its own sizeof and names fields by offset: a ctypes struct that
    disagrees with the header fails here."""

    def c_sizeof(self, typename):
        msg = message()
        m = re.search(r"sizeof\(" + typename + r"\) = (\d+)", msg)
        self.assertIsNotNone(m, msg)
        return int(m.group(1))

    def desc(self, **kw):
        fields = dict(dtype=_capi.FJ_DTYPE_BF16, head_dim=64, num_heads_q=4, num_heads_kv=2)
        fields.update(kw)
        return _capi.new(_capi.AttentionDesc, **fields)

    def test_sizes_match_the_library(self):
        L = _capi.library().lib
        d = self.desc()
        d.struct_size = 4
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 1)
        self.assertEqual(self.c_sizeof("fj_attention_desc"), C.sizeof(_capi.AttentionDesc))
        d = self.desc()
        a = _capi.new(_capi.ForwardArgs)
        a.struct_size = 4
        self.assertEqual(L.fj_validate_forward_args(C.byref(d), C.byref(a)), 1)
        self.assertEqual(self.c_sizeof("fj_forward_args"), C.sizeof(_capi.ForwardArgs))
        o = _capi.new(_capi.ContextOptions)
        o.struct_size = 4
        h = C.c_void_p()
        self.assertEqual(L.fj_context_create(C.byref(o), C.byref(h)), 1)
        self.assertEqual(self.c_sizeof("fj_context_options"), C.sizeof(_capi.ContextOptions))

    def test_block_mask_options_size_matches_the_library(self):
        """fj_block_mask_options_init (0.6) writes the library's sizeof into struct_size
        and zeroes the fields, and nothing past them."""
        lib = _capi.library()
        self.assertTrue(lib.has_block_mask)
        self.assertTrue(flashjit.has_block_mask())
        size = C.sizeof(_capi.BlockMaskOptions)
        raw = (C.c_ubyte * (size + 16))(*([0xAB] * (size + 16)))
        lib.lib.fj_block_mask_options_init(C.cast(raw, C.POINTER(_capi.BlockMaskOptions)))
        options = _capi.BlockMaskOptions.from_buffer(raw)
        self.assertEqual(options.struct_size, size)
        self.assertEqual((options.shared_across_batch, options.shared_across_heads), (0, 0))
        self.assertEqual(bytes(raw[size:]), b"\xab" * 16)
        # The library refuses masks of no kernel, through FlashJitError.
        mask = C.c_void_p()
        for call, run, expected in (
                ("fj_block_mask_create",
                 lambda: lib.lib.fj_block_mask_create(None, None, None, None, C.byref(mask)),
                 "kernel is NULL"),
                ("fj_block_mask_destroy", lambda: lib.lib.fj_block_mask_destroy(None),
                 "mask is NULL"),
                ("fj_block_mask_update", lambda: lib.lib.fj_block_mask_update(None, None, None),
                 "mask is NULL")):
            with self.assertRaisesRegex(flashjit.FlashJitError,
                                        rf"{call} failed with FJ_ERROR_INVALID_VALUE: .*"
                                        rf"{expected}"):
                lib.check(call, run())
        self.assertIsNone(mask.value)

    @unittest.skipUnless(_capi.library().has_backward, "the library has no fj_backward")
    def test_backward_size_matches_the_library(self):
        L = _capi.library().lib
        b = _capi.new(_capi.BackwardArgs)
        b.struct_size = 4
        self.assertEqual(L.fj_validate_backward_args(C.byref(self.desc()), C.byref(b)), 1)
        self.assertEqual(self.c_sizeof("fj_backward_args"), C.sizeof(_capi.BackwardArgs))

    def test_desc_fields_are_where_the_library_reads_them(self):
        L = _capi.library().lib
        for field, value, expected in (("batch_hint", -3, "desc->batch_hint is -3"),
                                       ("seqlen_k_hint", -4, "desc->seqlen_k_hint is -4"),
                                       ("head_dim_v", -8, "desc->head_dim_v is -8"),
                                       ("softmax_scale", -0.5, "desc->softmax_scale is -0.5"),
                                       ("num_heads_kv", 3, "(4) is not a multiple of "
                                                           "desc->num_heads_kv (3)")):
            d = self.desc(**{field: value})
            self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 1, field)
            self.assertIn(expected, message())
        # backward, the last field (0.2): a value there is read, not taken as an unknown
        # trailing byte of a newer struct.
        d = self.desc(backward=1)
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())

    def test_feature_fields_are_where_the_library_reads_them(self):
        """The attention features (0.3), each at its offset: a bad value there is named."""
        L = _capi.library().lib
        long_code = b"x" * (64 * 1024 + 1)
        for fields, status, expected in (
                (dict(window=1, window_left=-5), 1, "desc->window_left is -5"),
                (dict(window=1, window_right=-7), 1, "desc->window_right is -7"),
                (dict(window=1, window_left=-1, window_right=-1), 1, "are both -1"),
                (dict(window_right=3), 1, "desc->window_right is 3 but desc->window is 0"),
                (dict(softcap=-2.5), 1, "desc->softcap is -2.5"),
                (dict(softcap=float("nan")), 1, "desc->softcap is nan"),
                (dict(score_mod=long_code), 1, "desc->score_mod is longer than 65536"),
                (dict(mask_mod=long_code), 1, "desc->mask_mod is longer than 65536"),
                (dict(backward=1, score_mod=b"return score;"), 2,
                 "desc->backward is set with a score_mod: the backward pass cannot "
                 "differentiate")):
            d = self.desc(**fields)
            self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), status, fields)
            self.assertIn(expected, message())
        tuning = _capi.mod_args([0x7f0000000000], [1.5], [3])
        d = self.desc(window=1, window_left=128, window_right=0, softcap=30.0, alibi=1,
                      score_mod=b"return score;", mask_mod=b"return true;",
                      tuning_mod_args=C.pointer(tuning))
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())
        d = self.desc(backward=1, window=1, window_left=128, softcap=30.0, alibi=1,
                      mask_mod=b"return true;")  # the backward pass takes these (0.9)
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())

    def test_old_descriptions_read_as_plain(self):
        """A 0.2 caller's description (struct_size ending at `backward`, rounded up) is
        accepted whatever lies in the feature fields after it."""
        L = _capi.library().lib
        size02 = (_capi.AttentionDesc.backward.offset + 4 + 7) // 8 * 8
        d = self.desc(window=1, window_left=-1, window_right=-1, softcap=-1.0)
        d.struct_size = size02
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())

    def test_forward_fields_are_where_the_library_reads_them(self):
        L = _capi.library().lib
        base = dict(batch=1, seqlen_q=8, seqlen_k=8, q=0x7f0000000000, k=0x7f0000100000,
                    v=0x7f0000200000, o=0x7f0000300000)
        for t, heads in (("q", 4), ("k", 2), ("v", 2), ("o", 4)):
            base.update({f"{t}_head_stride": 64, f"{t}_seq_stride": heads * 64,
                         f"{t}_batch_stride": 8 * heads * 64})
        a = _capi.new(_capi.ForwardArgs, **base)
        self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 0,
                         message())
        for field, value, expected in (
                ("seqlen_k", -2, "args->seqlen_k is -2"),
                ("o_seq_stride", 12, "args->o_seq_stride is 12"),
                ("v_head_stride", 4, "args->v_head_stride is 4"),
                ("q", 0x7f0000000008, r"args->q is 0x0*7f0000000008: not 16-byte aligned"),
                ("lse", 0x7f0000400002, r"args->lse is 0x0*7f0000400002: not 4-byte aligned")):
            a = _capi.new(_capi.ForwardArgs, **dict(base, **{field: value}))
            self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 1,
                             field)
            self.assertRegex(message(), "(?i)" + expected)  # pointers print as 0x00007F..
        a = _capi.new(_capi.ForwardArgs, **dict(base, cu_seqlens_q=0x7f0000500000,
                                                cu_seqlens_k=0x7f0000600000, total_k=-5))
        self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 1)
        self.assertIn("args->total_k is -5", message())
        # The ALiBi slopes (0.3): required with desc.alibi, ignored without.
        alibi = self.desc(alibi=1)
        a = _capi.new(_capi.ForwardArgs, **base)
        self.assertEqual(L.fj_validate_forward_args(C.byref(alibi), C.byref(a)), 1)
        self.assertIn("args->alibi_slopes is NULL", message())
        for fields, expected in ((dict(alibi_slopes=0x7f0000700002), "not 4-byte aligned"),
                                 (dict(alibi_slopes=0x7f0000700000, alibi_batch_stride=-4),
                                  "args->alibi_batch_stride is -4")):
            a = _capi.new(_capi.ForwardArgs, **dict(base, **fields))
            self.assertEqual(L.fj_validate_forward_args(C.byref(alibi), C.byref(a)), 1)
            self.assertIn(expected, message())
            self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 0,
                             message())
        a = _capi.new(_capi.ForwardArgs, **dict(base, alibi_slopes=0x7f0000700000,
                                                alibi_batch_stride=4,
                                                mod_args=_capi.mod_args([1, 2], [0.5], [7])))
        self.assertEqual(L.fj_validate_forward_args(C.byref(alibi), C.byref(a)), 0, message())

    def test_block_mask_field_is_where_the_library_reads_it(self):
        """fj_forward_args.block_mask (0.6), 0.6's last field (0.7's FP8 fields follow
        it): set, it is read (refused without a mask_mod); a 0.5-sized struct ends before
        it; none ends inside it."""
        L = _capi.library().lib
        base = dict(batch=1, seqlen_q=8, seqlen_k=8, q=0x7f0000000000, k=0x7f0000100000,
                    v=0x7f0000200000, o=0x7f0000300000, block_mask=0x7f0000400000)
        for t, heads in (("q", 4), ("k", 2), ("v", 2), ("o", 4)):
            base.update({f"{t}_head_stride": 64, f"{t}_seq_stride": heads * 64,
                         f"{t}_batch_stride": 8 * heads * 64})
        a = _capi.new(_capi.ForwardArgs, **base)
        self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 1)
        self.assertIn("args->block_mask is set, but the description has no mask_mod",
                      message())
        masked = self.desc(mask_mod=b"return true;")
        self.assertEqual(L.fj_validate_forward_args(C.byref(masked), C.byref(a)), 0,
                         message())
        at = _capi.ForwardArgs.block_mask.offset
        self.assertEqual(at + 8, _capi.ForwardArgs.q_descale.offset)
        a.struct_size = at  # 0.5's sizeof: the mask is not read
        self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 0,
                         message())
        a.struct_size = at + 4
        self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 1)
        self.assertIn("ends inside the pointer `block_mask`", message())

    def test_fp8_fields_are_where_the_library_reads_them(self):
        """FP8 (0.7): desc.out_dtype, the last field of a 0.7 description (a 0.6-sized one
        reads it as 0; 0.12 put its tail padding and kv_cache_dtype after it), and the
        forward fields after block_mask, each read by the library where the ctypes struct
        puts it."""
        L = _capi.library().lib
        e4m3 = dict(dtype=_capi.FJ_DTYPE_E4M3)
        for fields, status, expected in (
                (dict(e4m3, out_dtype=7), 1, "desc->out_dtype is 7"),
                (dict(e4m3, out_dtype=_capi.FJ_DTYPE_E4M3), 1, "desc->out_dtype is 3"),
                (dict(out_dtype=_capi.FJ_DTYPE_FP16), 1, "with a 16-bit dtype o has the dtype"),
                (dict(e4m3, backward=1), 2, "does not take desc->backward"),
                (dict(e4m3, softcap=30.0), 2, "does not take attention features"),
                (dict(e4m3, decode=1), 2, "does not take desc->decode")):
            d = self.desc(**fields)
            self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), status, fields)
            self.assertIn(expected, message())
        for out in (0, _capi.FJ_DTYPE_BF16, _capi.FJ_DTYPE_FP16):
            d = self.desc(**e4m3, out_dtype=out)
            self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())
        d = self.desc(out_dtype=_capi.FJ_DTYPE_FP16)
        d.struct_size = _capi.AttentionDesc.out_dtype.offset  # 0.6's: out_dtype reads as 0
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())
        names = [name for name, _ in _capi.AttentionDesc._fields_]
        self.assertEqual(names[names.index("out_dtype"):],  # 0.7's last field, then 0.12's
                         ["out_dtype", "reserved_07", "kv_cache_dtype", "reserved_12"])
        # Forward arguments of an FP8 description (batch 1, 8 x 8, 4 and 2 heads of 64):
        # the workspace is batch * heads_kv * dv * round_up(seqlen_k, 64) = 8192 bytes.
        fp8 = self.desc(**e4m3)
        base = dict(batch=1, seqlen_q=8, seqlen_k=8, q=0x7f0000000000, k=0x7f0000100000,
                    v=0x7f0000200000, o=0x7f0000300000, workspace=0x7f0000400000,
                    workspace_bytes=8192)
        for t, heads in (("q", 4), ("k", 2), ("v", 2), ("o", 4)):
            base.update({f"{t}_head_stride": 64, f"{t}_seq_stride": heads * 64,
                         f"{t}_batch_stride": 8 * heads * 64})
        a = _capi.new(_capi.ForwardArgs, **base)
        self.assertEqual(L.fj_validate_forward_args(C.byref(fp8), C.byref(a)), 0, message())
        per_head = dict(base, q_descale=0x7f0000500000, k_descale=0x7f0000500010,
                        v_descale=0x7f0000500020, descale_batch_stride=2,
                        descale_head_stride=1)
        a = _capi.new(_capi.ForwardArgs, **per_head)
        self.assertEqual(L.fj_validate_forward_args(C.byref(fp8), C.byref(a)), 0, message())
        for field, value, status, expected in (
                ("workspace", None, 1, r"args->workspace is NULL: an FP8 call needs 8192 bytes"),
                ("workspace", 0x7f0000400008, 1, r"args->workspace is 0x0*7f0000400008: not "
                                                 r"16-byte aligned"),
                ("workspace_bytes", 8191, 1, r"args->workspace_bytes is 8191: this call needs "
                                             r"8192"),
                ("q_descale", 0x7f0000500002, 1, r"args->q_descale is 0x0*7f0000500002: not "
                                                 r"4-byte aligned"),
                ("k_descale", 0x7f0000500012, 1, r"args->k_descale is 0x0*7f0000500012"),
                ("v_descale", 0x7f0000500022, 1, r"args->v_descale is 0x0*7f0000500022"),
                ("descale_batch_stride", -1, 1, r"args->descale_batch_stride is -1"),
                ("descale_head_stride", -2, 1, r"args->descale_head_stride is -2"),
                ("k_seq_stride", 136, 2, r"args->k_seq_stride is 136: FP8 kernels need q, k "
                                         r"and v strides that are multiples of 16"),
                ("seqlen_k", 0, 2, r"args->seqlen_k is 0: FP8 kernels need at least one key")):
            a = _capi.new(_capi.ForwardArgs, **dict(per_head, **{field: value}))
            self.assertEqual(L.fj_validate_forward_args(C.byref(fp8), C.byref(a)), status,
                             field)
            self.assertRegex(message(), "(?i)" + expected)
        # cu_seqlens: both packed row counts, and v^T with a gap of 320 keys a sequence:
        # 2 kv heads * 64 * (round_up(8, 64) + 320) = 49152 bytes.
        varlen = dict(per_head, cu_seqlens_q=0x7f0000600000, cu_seqlens_k=0x7f0000700000,
                      total_q=8, total_k=0)
        a = _capi.new(_capi.ForwardArgs, **varlen)
        self.assertEqual(L.fj_validate_forward_args(C.byref(fp8), C.byref(a)), 1)
        self.assertIn("args->total_q is 8 and total_k 0", message())
        a = _capi.new(_capi.ForwardArgs, **dict(varlen, total_k=8))
        self.assertEqual(L.fj_validate_forward_args(C.byref(fp8), C.byref(a)), 1)
        self.assertIn("args->workspace_bytes is 8192: this call needs 49152", message())
        a = _capi.new(_capi.ForwardArgs, **dict(varlen, total_k=8, workspace_bytes=49152))
        self.assertEqual(L.fj_validate_forward_args(C.byref(fp8), C.byref(a)), 0, message())
        # A 16-bit description reads none of them.
        a = _capi.new(_capi.ForwardArgs, **dict(per_head, workspace=None, q_descale=3,
                                                descale_batch_stride=-1))
        self.assertEqual(L.fj_validate_forward_args(C.byref(self.desc()), C.byref(a)), 0,
                         message())

    def test_forward_workspace_size_is_bound(self):
        """fj_forward_workspace_size (0.7) is declared (optional: has_fp8) and its
        failures are FlashJitError; a kernel needs a device, so only the refusals here."""
        lib = _capi.library()
        self.assertTrue(lib.has_fp8)
        self.assertTrue(flashjit.has_fp8())
        self.assertTrue(flashjit.info()["fp8"])
        size = C.c_size_t(123)
        a = _capi.new(_capi.ForwardArgs, batch=2, seqlen_k=100)
        with self.assertRaisesRegex(flashjit.FlashJitError,
                                    r"fj_forward_workspace_size failed with "
                                    r"FJ_ERROR_INVALID_VALUE: .*kernel"):
            lib.check("fj_forward_workspace_size",
                      lib.lib.fj_forward_workspace_size(None, C.byref(a), C.byref(size)))

    @unittest.skipUnless(_capi.library().has_backward, "the library has no fj_backward")
    def test_backward_fields_are_where_the_library_reads_them(self):
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
        self.assertEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 0, message())
        b.dv_seq_stride = 12
        self.assertEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 1)
        self.assertIn("args->dv_seq_stride is 12", message())
        b.dv_seq_stride = 128
        b.deterministic = 7
        self.assertEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 1)
        self.assertIn("args->deterministic is 7", message())
        b.deterministic = 0
        b.workspace = base + 0x10000004
        self.assertEqual(L.fj_validate_backward_args(C.byref(d), C.byref(b)), 1)
        self.assertIn("args->workspace", message())

    def test_context_options_fields_are_where_the_library_reads_them(self):
        L = _capi.library().lib
        for field, value, expected in (
                ("tuning_budget_seconds", -1.0, "options->tuning_budget_seconds is -1"),
                ("tune_mode", 99, "options->tune_mode is 99"),
                ("num_shipped_cache_paths", -2, "options->num_shipped_cache_paths is -2"),
                ("device", -1, "options->device is -1")):
            o = _capi.new(_capi.ContextOptions, **{field: value})
            h = C.c_void_p()
            self.assertEqual(L.fj_context_create(C.byref(o), C.byref(h)), 1, field)
            self.assertIn(expected, message())
            self.assertIsNone(h.value)

    def test_layouts_match_the_header(self):
        """Every field's offset and size, and every struct's size, as a C compiler sees
        the header (skipped without a C compiler; ctest passes CMake's)."""
        cc = os.environ.get("FLASHJIT_TEST_CC") or shutil.which("cc") or \
            shutil.which("gcc") or shutil.which("clang")
        if not cc:
            self.skipTest("no C compiler")
        lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "flashjit/flashjit.h"',
                 "int main(void) {"]
        for cname, struct in _capi.STRUCTS.items():
            lines.append(f'  printf("{cname}|sizeof|%zu|%zu\\n", sizeof({cname}), '
                         f'_Alignof({cname}));')
            for field, _ in struct._fields_:
                lines.append(f'  printf("{cname}|{field}|%zu|%zu\\n", offsetof({cname}, '
                             f'{field}), sizeof((({cname} *)0)->{field}));')
        lines += ["  return 0;", "}"]
        with tempfile.TemporaryDirectory() as tmp:
            src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            r = subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), src,
                                "-o", exe], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
        seen = 0
        for line in out.splitlines():
            cname, field, a, b = line.split("|")
            struct = _capi.STRUCTS[cname]
            if field == "sizeof":
                self.assertEqual((C.sizeof(struct), C.alignment(struct)), (int(a), int(b)),
                                 cname)
            else:
                desc = getattr(struct, field)
                self.assertEqual((desc.offset, desc.size), (int(a), int(b)),
                                 f"{cname}.{field}: ctypes (offset, size) vs C")
            seen += 1
        self.assertEqual(seen, sum(len(s._fields_) + 1 for s in _capi.STRUCTS.values()))


HAS_DECODE = getattr(_capi.library(), "has_decode", False)


@unittest.skipUnless(HAS_DECODE, "the library has no fj_decode")
class DecodeLayouts(unittest.TestCase):
    """fj_decode_args and fj_kv_append_args (0.4) against the library: its own sizeof, and
    fields it names by value (test_layouts_match_the_header checks them against the
    header)."""

    def desc(self, **kw):
        fields = dict(dtype=_capi.FJ_DTYPE_BF16, head_dim=64, num_heads_q=8, num_heads_kv=2,
                      decode=1)
        fields.update(kw)
        return _capi.new(_capi.AttentionDesc, **fields)

    # batch 2, one query row, 8 query heads and 2 KV heads of 64, a contiguous cache of 100
    DECODE = dict(batch=2, seqlen_q=1, seqlen_k=100, q=0x7f0000000000, k_cache=0x7f0000100000,
                  v_cache=0x7f0000200000, o=0x7f0000300000, q_batch_stride=512,
                  q_seq_stride=512, q_head_stride=64, o_batch_stride=512, o_seq_stride=512,
                  o_head_stride=64, k_page_stride=12800, k_row_stride=128, k_head_stride=64,
                  v_page_stride=12800, v_row_stride=128, v_head_stride=64)
    PAGED = dict(DECODE, block_table=0x7f0000700000, page_size=16, num_pages=20,
                 table_stride=7, k_page_stride=2048, v_page_stride=2048)
    APPEND = dict(batch=2, seqlen_k=100, k_cache=0x7f0000100000, v_cache=0x7f0000200000,
                  k_page_stride=12800, k_row_stride=128, k_head_stride=64,
                  v_page_stride=12800, v_row_stride=128, v_head_stride=64,
                  k_new=0x7f0000800000, v_new=0x7f0000900000, new_len=1,
                  k_new_batch_stride=128, k_new_seq_stride=128, k_new_head_stride=64,
                  v_new_batch_stride=128, v_new_seq_stride=128, v_new_head_stride=64)

    def validate(self, struct, fields, desc=None):
        L = _capi.library().lib
        a = _capi.new(struct, **fields)
        fn = L.fj_validate_decode_args if struct is _capi.DecodeArgs else \
            L.fj_validate_kv_append_args
        return fn(C.byref(desc or self.desc()), C.byref(a))

    def test_sizes_match_the_library(self):
        for struct, cname in ((_capi.DecodeArgs, "fj_decode_args"),
                              (_capi.KvAppendArgs, "fj_kv_append_args")):
            self.assertEqual(self.validate(struct, dict(struct_size=4)), 1)
            m = re.search(r"sizeof\(" + cname + r"\) = (\d+)", message())
            self.assertIsNotNone(m, message())
            self.assertEqual(int(m.group(1)), C.sizeof(struct), cname)

    def test_desc_decode_is_where_the_library_reads_it(self):
        L = _capi.library().lib
        # An FP8 cache needs desc.decode: the field is read, so `decode` is where the
        # library reads it.
        e4m3 = dict(kv_cache_dtype=_capi.FJ_DTYPE_E4M3)
        self.assertEqual(L.fj_validate_attention_desc(C.byref(self.desc(**e4m3))), 0,
                         message())
        self.assertEqual(L.fj_validate_attention_desc(C.byref(self.desc(decode=0, **e4m3))), 1)
        self.assertIn("desc->kv_cache_dtype is FJ_DTYPE_E4M3 but desc->decode is 0", message())
        # Decode takes every feature (0.14: the user's mods too).
        d = self.desc(score_mod=b"return score;", mask_mod=b"return true;", softcap=30.0)
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())
        # A 0.3 caller's description (struct_size ending before `decode`) reads it as 0.
        d.struct_size = _capi.AttentionDesc.decode.offset
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())
        self.assertEqual(L.fj_validate_attention_desc(C.byref(self.desc(backward=1))), 0,
                         message())

    def test_decode_fields_are_where_the_library_reads_them(self):
        self.assertEqual(self.validate(_capi.DecodeArgs, self.DECODE), 0, message())
        self.assertEqual(self.validate(_capi.DecodeArgs, self.PAGED), 0, message())
        for base, field, value, expected in (
                (self.DECODE, "seqlen_k", -1, "args->seqlen_k is -1"),
                (self.DECODE, "num_splits", 129, "args->num_splits is 129"),
                (self.DECODE, "k_row_stride", 12, "args->k_row_stride is 12"),
                (self.DECODE, "v_head_stride", 4, "args->v_head_stride is 4"),
                (self.DECODE, "k_page_stride", 4, "args->k_page_stride is 4"),
                (self.DECODE, "o_head_stride", 12, "args->o_head_stride is 12"),
                (self.DECODE, "q", 0x7f0000000008, r"args->q is 0x0*7f0000000008"),
                (self.DECODE, "lse", 0x7f0000400002, r"args->lse is 0x0*7f0000400002"),
                (self.DECODE, "cache_seqlens", 0x7f0000500002,
                 r"args->cache_seqlens is 0x0*7f0000500002"),
                (self.DECODE, "workspace", 0x7f0000600008, r"args->workspace is 0x0*7f0000600008"),
                (self.PAGED, "page_size", 0, "args->page_size is 0"),
                (self.PAGED, "num_pages", 0, "args->num_pages is 0"),
                (self.PAGED, "table_stride", 6, r"args->table_stride is 6.*ceil\(100 / 16\)"),
                (self.PAGED, "block_table", 0x7f0000700002,
                 r"args->block_table is 0x0*7f0000700002")):
            self.assertEqual(self.validate(_capi.DecodeArgs, dict(base, **{field: value})), 1,
                             field)
            self.assertRegex(message(), "(?i)" + expected)
        # Contiguous: the paged fields are ignored. Grid limits are NOT_SUPPORTED.
        self.assertEqual(self.validate(_capi.DecodeArgs, dict(self.DECODE, page_size=-5)), 0)
        self.assertEqual(self.validate(_capi.DecodeArgs, dict(self.DECODE, batch=40000)), 2)
        self.assertIn("batch * num_heads_kv = 80000", message())

    def test_append_fields_are_where_the_library_reads_them(self):
        self.assertEqual(self.validate(_capi.KvAppendArgs, self.APPEND), 0, message())
        for field, value, expected in (
                ("new_len", 101, "args->new_len is 101, more than args->seqlen_k"),
                ("new_len", -1, "args->new_len is -1"),
                ("k_new_head_stride", 4, "args->k_new_head_stride is 4"),
                ("v_new_batch_stride", 12, "args->v_new_batch_stride is 12"),
                ("v_row_stride", 12, "args->v_row_stride is 12"),
                ("v_new", 0x7f0000900008, r"args->v_new is 0x0*7f0000900008"),
                ("block_table", 0x7f0000700002, r"args->block_table is 0x0*7f0000700002")):
            self.assertEqual(self.validate(_capi.KvAppendArgs, dict(self.APPEND, **{field: value})),
                             1, field)
            self.assertRegex(message(), "(?i)" + expected)

    def test_desc_kv_cache_dtype_is_where_the_library_reads_it(self):
        """desc.kv_cache_dtype (0.12), the description's last field before its tail
        padding: its values, and what an FP8 cache needs, named by the library."""
        L = _capi.library().lib
        e4m3 = _capi.FJ_DTYPE_E4M3
        for fields, status, expected in (
                (dict(kv_cache_dtype=7), 1, r"desc->kv_cache_dtype is 7: expected 0 \(the "
                                            r"dtype's cache\), the dtype \(2\) or "
                                            r"FJ_DTYPE_E4M3 \(3\)"),
                (dict(kv_cache_dtype=_capi.FJ_DTYPE_FP16), 1, r"desc->kv_cache_dtype is 1"),
                (dict(kv_cache_dtype=e4m3, decode=0), 1,
                 r"desc->kv_cache_dtype is FJ_DTYPE_E4M3 but desc->decode is 0"),
                (dict(kv_cache_dtype=e4m3, head_dim=72), 2,
                 r"desc->kv_cache_dtype is FJ_DTYPE_E4M3 with head_dim 72 and head_dim_v 72: "
                 r"an FP8 cache takes head dims that are multiples of 16"),
                (dict(kv_cache_dtype=e4m3, head_dim_v=40), 2, r"head_dim 64 and head_dim_v 40")):
            d = self.desc(**fields)
            self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), status, fields)
            self.assertRegex(message(), expected)
        for fields in (dict(kv_cache_dtype=e4m3), dict(kv_cache_dtype=e4m3, backward=1),
                       dict(kv_cache_dtype=e4m3, dtype=_capi.FJ_DTYPE_FP16),
                       dict(kv_cache_dtype=_capi.FJ_DTYPE_BF16), dict(kv_cache_dtype=0)):
            d = self.desc(**fields)
            self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, (fields, message()))
        # A 0.11 caller's description (struct_size ending before it) reads it as 0.
        d = self.desc(kv_cache_dtype=7)
        d.struct_size = _capi.AttentionDesc.kv_cache_dtype.offset
        self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), 0, message())
        names = [name for name, _ in _capi.AttentionDesc._fields_]
        self.assertEqual(names[-2:], ["kv_cache_dtype", "reserved_12"])  # the last field
        self.assertTrue(flashjit.has_fp8_kv_cache())  # this build's library: 0.12
        self.assertTrue(flashjit.info()["fp8_kv_cache"])

    def test_alibi_slopes_are_where_the_library_reads_them(self):
        """ALiBi's slopes in fj_decode_args (0.13): required with desc.alibi, checked where
        the ctypes struct puts them; a 0.12-sized struct reads them as NULL."""
        alibi = self.desc(alibi=1)
        self.assertEqual(self.validate(_capi.DecodeArgs, self.DECODE, alibi), 1)
        self.assertIn("args->alibi_slopes is NULL", message())
        ok = dict(self.DECODE, alibi_slopes=0x7f0000b00000, alibi_batch_stride=8)
        self.assertEqual(self.validate(_capi.DecodeArgs, ok, alibi), 0, message())
        for field, value, expected in (("alibi_slopes", 0x7f0000b00002, "4-byte"),
                                       ("alibi_batch_stride", -3,
                                        "args->alibi_batch_stride is -3")):
            self.assertEqual(self.validate(_capi.DecodeArgs, dict(ok, **{field: value}), alibi),
                             1, field)
            self.assertIn(expected, message())
        a = _capi.new(_capi.DecodeArgs, **ok)
        a.struct_size = _capi.DecodeArgs.alibi_slopes.offset
        L = _capi.library().lib
        self.assertEqual(L.fj_validate_decode_args(C.byref(alibi), C.byref(a)), 1)
        self.assertIn("args->alibi_slopes is NULL", message())

    def test_fp8_cache_fields_are_where_the_library_reads_them(self):
        """The factors of an FP8 cache (0.12), the last four fields of fj_decode_args and
        fj_kv_append_args, and the cache strides an FP8 cache needs, each named by the
        library where the ctypes struct puts it; a 16-bit cache, and an 0.11-sized struct,
        read none of them."""
        fp8 = self.desc(kv_cache_dtype=_capi.FJ_DTYPE_E4M3)
        factors = dict(k_descale=0x7f0000a00000, v_descale=0x7f0000a00010,
                       descale_batch_stride=2, descale_head_stride=1)
        for struct, base in ((_capi.DecodeArgs, self.DECODE), (_capi.DecodeArgs, self.PAGED),
                             (_capi.KvAppendArgs, self.APPEND)):
            names = [name for name, _ in struct._fields_]
            if struct is _capi.DecodeArgs:  # 0.13's ALiBi slopes and 0.14's mod args follow
                self.assertEqual(names[-3:], ["alibi_slopes", "alibi_batch_stride",
                                              "mod_args"])
                names = names[:-3]
            self.assertEqual(names[-4:], ["k_descale", "v_descale", "descale_batch_stride",
                                          "descale_head_stride"])
            self.assertEqual(self.validate(struct, base, fp8), 0, message())
            self.assertEqual(self.validate(struct, dict(base, **factors), fp8), 0, message())
            for field, value, expected in (
                    ("k_descale", 0x7f0000a00002, r"args->k_descale is 0x0*7f0000a00002: not "
                                                  r"4-byte aligned"),
                    ("v_descale", 0x7f0000a00016, r"args->v_descale is 0x0*7f0000a00016"),
                    ("descale_batch_stride", -1, r"args->descale_batch_stride is -1: must be "
                                                 r"from 0 to 2\^40"),
                    ("descale_head_stride", -2, r"args->descale_head_stride is -2"),
                    ("k_row_stride", 136, r"args->k_row_stride is 136: an FP8 cache "
                                          r"\(desc->kv_cache_dtype FJ_DTYPE_E4M3\) needs "
                                          r"strides that are multiples of 16 elements"),
                    ("v_page_stride", 12808 if base is not self.PAGED else 2056,
                     r"args->v_page_stride is \d+: an FP8 cache")):
                fields = dict(base, **factors)
                fields[field] = value
                if field == "k_row_stride":  # pages / sequences of 100 such rows
                    fields["k_page_stride"] = 136 * (16 if base is self.PAGED else 100)
                self.assertEqual(self.validate(struct, fields, fp8), 1, (struct, field))
                self.assertRegex(message(), "(?i)" + expected)
            # A 16-bit cache reads neither the factors nor the 16-element stride rule.
            odd = dict(base, k_descale=0x7f0000a00002, descale_batch_stride=-1,
                       k_row_stride=136, k_page_stride=136 * 100)
            if base is self.PAGED:
                odd["k_page_stride"] = 136 * 16
            self.assertEqual(self.validate(struct, odd), 0, message())
            # An 0.11-sized struct (ending before them) reads the factors as NULL and 0.
            a = _capi.new(struct, **dict(base, k_descale=0x7f0000a00002,
                                         descale_head_stride=-5))
            a.struct_size = struct.k_descale.offset
            fn = _capi.library().lib.fj_validate_decode_args if struct is _capi.DecodeArgs \
                else _capi.library().lib.fj_validate_kv_append_args
            self.assertEqual(fn(C.byref(fp8), C.byref(a)), 0, message())


class Errors(unittest.TestCase):
    """Failing C calls become FlashJitError with the status and the library's message."""

    def test_status_and_message(self):
        o = _capi.new(_capi.ContextOptions, tune_mode=42)
        h = C.c_void_p()
        with self.assertRaises(flashjit.FlashJitError) as cm:
            _capi.library().check("fj_context_create",
                                  _capi.library().lib.fj_context_create(C.byref(o), C.byref(h)))
        ex = cm.exception
        self.assertEqual((ex.call, ex.status, ex.status_name),
                         ("fj_context_create", 1, "FJ_ERROR_INVALID_VALUE"))
        self.assertIn("options->tune_mode is 42", ex.message)
        self.assertIn("FJ_ERROR_INVALID_VALUE", str(ex))
        self.assertIsInstance(ex, RuntimeError)

    def test_status_names_are_the_librarys(self):
        L = _capi.library().lib
        for status, name in _capi.STATUS_NAMES.items():
            self.assertTrue(L.fj_status_string(status).decode().startswith(name + ":")
                            or status == 0 and L.fj_status_string(0).decode().startswith(name))

    def test_bad_tune_mode_from_the_environment(self):
        saved = os.environ.get("FLASHJIT_TUNE")
        os.environ["FLASHJIT_TUNE"] = "bogus"
        try:
            with flashjit.tuning(tune_mode="auto", cache_path="", budget_s=1.25):
                with self.assertRaises(flashjit.FlashJitError) as cm:
                    _runtime.kernel(0, "bf16", 64, 64, 4, 2, False, 0.0, False, (128, 128, 1))
        finally:
            if saved is None:
                del os.environ["FLASHJIT_TUNE"]
            else:
                os.environ["FLASHJIT_TUNE"] = saved
        self.assertEqual(cm.exception.status, 1)
        self.assertIn("FLASHJIT_TUNE", cm.exception.message)

    def test_no_device(self):
        L = _capi.library().lib
        o = _capi.new(_capi.ContextOptions, user_cache_path=b"")
        h = C.c_void_p()
        if L.fj_context_create(C.byref(o), C.byref(h)) == 0:
            L.fj_context_destroy(h)
            self.skipTest("this machine has a CUDA device")
        with flashjit.tuning(cache_path="", tune_mode="heuristic", budget_s=2.5):
            with self.assertRaises(flashjit.FlashJitError) as cm:
                _runtime.kernel(0, "bf16", 64, 64, 4, 2, True, 0.0, False, (128, 128, 1))
        self.assertIn(cm.exception.status_name, ("FJ_ERROR_NO_DEVICE", "FJ_ERROR_CUDA"))
        self.assertTrue(cm.exception.message)
        self.assertEqual(_runtime.kernels_info(), [])


class FakeKernelLibrary:
    """Stands in for libflashjit.so's fj_kernel_get: records what each description asked
    for and hands out distinct handles, so the handle cache is tested without a device."""

    def __init__(self):
        self.got = []
        self.released = []

    def fj_kernel_get(self, ctx, desc_ref, handle_ref):
        d = desc_ref._obj
        tuning = d.tuning_mod_args.contents.scalar[0] if d.tuning_mod_args else None
        self.got.append(dict(window=(d.window, d.window_left, d.window_right),
                             softcap=d.softcap, alibi=d.alibi, score_mod=d.score_mod,
                             mask_mod=d.mask_mod, backward=d.backward, tuning=tuning,
                             decode=d.decode, heads=(d.num_heads_q, d.num_heads_kv),
                             dtype=d.dtype, out_dtype=d.out_dtype,
                             kv_cache_dtype=d.kv_cache_dtype, causal=d.causal,
                             hints=(d.seqlen_q_hint, d.seqlen_k_hint, d.batch_hint),
                             tune_mode=_runtime.current_settings()["tune_mode"]))
        handle_ref._obj.value = 0x1000 + 16 * len(self.got)
        return 0

    def fj_kernel_info(self, handle, info_ref):
        return 0

    def fj_kernel_release(self, handle):
        self.released.append(handle.value if hasattr(handle, "value") else handle)
        return 0


class FakeKernelsTestCase(unittest.TestCase):
    """Tests of _runtime's kernel handles on a FakeKernelLibrary (self.fake) standing in for
    libflashjit.so, with a fake context: _runtime's library, context, handles and plan
    caches are restored after each test. `library` adds the library's has_* flags."""

    library = {}

    def setUp(self):
        self.saved = (_capi._library, _runtime.context, dict(_runtime._kernels),
                      list(_runtime.plan_caches))
        self.fake = FakeKernelLibrary()
        real = _capi.library()
        _capi._library = type("L", (), dict(lib=self.fake, has_backward=True, path="fake",
                                             check=real.check.__func__,
                                             version=lambda self: "fake", **self.library))()
        _runtime.context = lambda device: (("fake", device), C.c_void_p(1))
        _runtime._kernels.clear()

    def tearDown(self):
        _capi._library, _runtime.context = self.saved[0], self.saved[1]
        _runtime._kernels.clear()
        _runtime._kernels.update(self.saved[2])
        _runtime.plan_caches[:] = self.saved[3]


class FeatureKernels(FakeKernelsTestCase):
    """_runtime.kernel with features: they go into the description, and they (the user
    code's text included) are part of what picks the cached handle."""

    def get(self, features=_checks.PLAIN, backward=False, tuning=None):
        handle, _ = _runtime.kernel(0, "bf16", 64, 64, 4, 2, True, 0.0, backward,
                                    (128, 128, 1), features, tuning)
        return handle.value

    def test_features_reach_the_description(self):
        f = _checks.check_features((256, -1), 30.0, True, "return score * args.scalar[0];",
                                   "return kv_idx != 3;")
        self.get(f, tuning=_capi.mod_args([], [0.25]))
        got = self.fake.got[-1]
        self.assertEqual(got["window"], (1, 256, -1))
        self.assertEqual((got["softcap"], got["alibi"]), (30.0, 1))
        self.assertEqual(got["score_mod"], b"return score * args.scalar[0];")
        self.assertEqual(got["mask_mod"], b"return kv_idx != 3;")
        self.assertEqual(got["tuning"], 0.25)
        self.get(_checks.check_features(softcap=5.0), tuning=_capi.mod_args([], [0.5]))
        got = self.fake.got[-1]  # no user code: no tuning args, no window
        self.assertEqual((got["window"], got["score_mod"], got["tuning"]), ((0, 0, 0), None,
                                                                             None))

    def test_features_are_part_of_the_handle_key(self):
        plain = self.get()
        self.assertEqual(self.get(), plain)
        code = _checks.check_features(score_mod="return score;")
        other = _checks.check_features(score_mod="return score * 2;")
        handles = {plain, self.get(code), self.get(other),
                   self.get(_checks.check_features(window=(64, 0))),
                   self.get(_checks.check_features(window=(64, 1))),
                   self.get(_checks.check_features(softcap=30)),
                   self.get(_checks.check_features(alibi=True))}
        self.assertEqual(len(handles), 7)
        self.assertEqual(len(self.fake.got), 7)
        # The same text (a new str object) finds the same handle; tuning args do not count.
        self.assertEqual(self.get(_checks.check_features(score_mod="return " + "score;"),
                                  tuning=_capi.mod_args([], [1.0])), self.get(code))
        self.assertEqual(len(self.fake.got), 7)
        kinds = [k["features"] for k in _runtime.kernels_info()]
        self.assertIn(dict(window=None, softcap=0.0, alibi=False,
                           score_mod="return score * 2;", mask_mod=None), kinds)

    def test_backward_with_features(self):
        # A score_mod has no backward pass; the other features have one from 0.9.
        with self.assertRaisesRegex(NotImplementedError,
                                    r"backward pass does not take a score_mod"):
            self.get(_checks.check_features(score_mod="return score;"), backward=True)
        windowed = _checks.check_features(window=(8, 0), mask_mod="return true;")
        with self.assertRaisesRegex(NotImplementedError,
                                    r"library \(fake\) has no backward pass with attention "
                                    r"features \(window, mask_mod\); 0.9 and later"):
            self.get(windowed, backward=True)
        self.assertEqual(self.fake.got, [])
        self.get(backward=True)  # the plain description still gets its backward pass
        self.assertEqual(self.fake.got[-1]["backward"], 1)
        _capi._library.has_feature_backward = True
        self.get(windowed, backward=True)
        self.assertEqual((self.fake.got[-1]["backward"], self.fake.got[-1]["window"]),
                         (1, (1, 8, 0)))


class DecodeKernels(FakeKernelsTestCase):
    """_runtime.kernel(decode=True) and the append's handle, on a stand-in fj_kernel_get."""

    library = dict(has_decode=True)

    def get(self, hq=8, hkv=2, causal=True, decode=True, hints=(1, 4096, 16), cache=None,
            dtype="bf16"):
        handle, _ = _runtime.kernel(0, dtype, 128, 128, hq, hkv, causal, 0.0, False, hints,
                                    decode=decode, kv_cache_dtype=cache)
        return handle.value

    def test_decode_reaches_the_description_and_keys_the_handle(self):
        dec = self.get()
        self.assertEqual(self.fake.got[-1]["decode"], 1)
        self.assertEqual(self.fake.got[-1]["hints"], (1, 4096, 16))
        self.assertEqual(self.get(hints=(4, 100, 1)), dec)  # any size: the same handle
        plain = self.get(decode=False)
        self.assertNotEqual(plain, dec)
        self.assertEqual(self.fake.got[-1]["decode"], 0)
        self.assertEqual(len(self.fake.got), 2)
        kinds = sorted((k["decode"], k["num_heads_q"]) for k in _runtime.kernels_info())
        self.assertEqual(kinds, [(False, 8), (True, 8)])

    def test_decode_features_reach_the_description(self):
        """The window and softcap with decode (0.13): in the description, a handle of
        their own; a 0.12 library says it has none."""
        _capi._library.has_decode_features = True
        plain = self.get()
        f = _checks.check_features((64, 0), 30.0)
        handle, _ = _runtime.kernel(0, "bf16", 128, 128, 8, 2, True, 0.0, False,
                                    (1, 4096, 16), features=f, decode=True)
        self.assertNotEqual(handle.value, plain)
        got = self.fake.got[-1]
        self.assertEqual((got["decode"], got["window"], got["softcap"]), (1, (1, 64, 0), 30.0))
        _capi._library.has_decode_features = False
        with self.assertRaisesRegex(RuntimeError, r"no decode kernels with a window or softcap"):
            _runtime.kernel(0, "bf16", 128, 128, 8, 2, False, 0.0, False, (1, 4096, 16),
                            features=f, decode=True)

    def test_decode_mods_reach_the_description(self):
        """score_mod and mask_mod with decode (0.14): in the description with the tuning
        args, a handle of their own; a 0.13 library says it has none."""
        _capi._library.has_decode_features = True
        _capi._library.has_decode_mods = True
        plain = self.get()
        f = _checks.check_features(None, 0.0, False, "return score;", "return true;")
        args = _capi.mod_args((), (0.5,), (7,))
        handle, _ = _runtime.kernel(0, "bf16", 128, 128, 8, 2, True, 0.0, False,
                                    (1, 4096, 16), features=f, tuning_args=args, decode=True)
        self.assertNotEqual(handle.value, plain)
        got = self.fake.got[-1]
        self.assertEqual((got["decode"], got["score_mod"], got["mask_mod"], got["tuning"]),
                         (1, b"return score;", b"return true;", 0.5))
        _capi._library.has_decode_mods = False
        with self.assertRaisesRegex(RuntimeError, r"no decode kernels with a score_mod"):
            _runtime.kernel(0, "bf16", 128, 128, 8, 2, False, 0.0, False, (1, 4096, 16),
                            features=f, decode=True)

    def test_a_library_without_decode_says_so(self):
        _capi._library.has_decode = False
        with self.assertRaisesRegex(RuntimeError, r"has no decode kernels \(no fj_decode\)"):
            self.get()
        self.assertEqual(self.fake.got, [])

    def test_append_uses_a_decode_handle_of_its_kv_heads(self):
        dec = self.get(hq=8, hkv=2)
        self.get(hq=8, hkv=4, decode=False)
        # Any decode handle with the same (dtype, d, dv, heads_kv) serves the append.
        handle, _ = _runtime.append_kernel(0, "bf16", 128, 128, 2, (1, 64, 2))
        self.assertEqual(handle.value, dec)
        self.assertEqual(len(self.fake.got), 2)
        # Otherwise the MHA description's, got without tuning (heuristic, or cached).
        with flashjit.tuning(tune_mode="default"):
            handle, _ = _runtime.append_kernel(0, "bf16", 128, 128, 4, (1, 64, 2))
            self.assertEqual(_runtime.current_settings()["tune_mode"], "default")
        got = self.fake.got[-1]
        self.assertEqual((got["decode"], got["heads"], got["causal"], got["tune_mode"]),
                         (1, (4, 4), 0, "heuristic"))
        with flashjit.tuning(tune_mode="cached"):
            _runtime.append_kernel(0, "fp16", 64, 64, 1, (1, 64, 2))
        self.assertEqual(self.fake.got[-1]["tune_mode"], "cached")
        # ... and kept: the next append of those heads finds it.
        again, _ = _runtime.append_kernel(0, "bf16", 128, 128, 4, (1, 64, 2))
        self.assertEqual(again.value, handle.value)

    def test_fp8_cache_reaches_the_description_and_keys_the_handle(self):
        """An FP8 KV cache (0.12): desc.kv_cache_dtype FJ_DTYPE_E4M3, a handle of its own
        (the 16-bit cache's is another), for the decode call and for the append."""
        _capi._library.has_fp8_kv_cache = True
        dec = self.get()
        self.assertEqual(self.fake.got[-1]["kv_cache_dtype"], 0)
        fp8 = self.get(cache="e4m3")
        self.assertNotEqual(fp8, dec)
        got = self.fake.got[-1]
        self.assertEqual((got["dtype"], got["kv_cache_dtype"], got["decode"]),
                         (_capi.FJ_DTYPE_BF16, _capi.FJ_DTYPE_E4M3, 1))
        self.assertEqual(self.get(cache="e4m3", hints=(4, 100, 1)), fp8)
        self.assertEqual(self.get(cache="bf16"), dec)  # the dtype's own: a 16-bit cache
        fp16 = self.get(cache="e4m3", dtype="fp16")
        self.assertNotIn(fp16, (dec, fp8))
        self.assertEqual((self.fake.got[-1]["dtype"], self.fake.got[-1]["kv_cache_dtype"]),
                         (_capi.FJ_DTYPE_FP16, _capi.FJ_DTYPE_E4M3))
        self.assertEqual(len(self.fake.got), 3)
        # The append takes the decode handle of its cache's type, else gets its own.
        self.assertEqual(_runtime.append_kernel(0, "bf16", 128, 128, 2, (1, 64, 2),
                                                "e4m3")[0].value, fp8)
        self.assertEqual(_runtime.append_kernel(0, "bf16", 128, 128, 2, (1, 64, 2))[0].value,
                         dec)
        _runtime.append_kernel(0, "bf16", 128, 128, 4, (1, 64, 2), "e4m3")
        got = self.fake.got[-1]
        self.assertEqual((got["heads"], got["kv_cache_dtype"], got["tune_mode"]),
                         ((4, 4), _capi.FJ_DTYPE_E4M3, "heuristic"))
        kinds = sorted((k["dtype"], k["kv_cache_dtype"], k["num_heads_kv"])
                       for k in _runtime.kernels_info())
        self.assertEqual(kinds, [("bf16", "bf16", 2), ("bf16", "e4m3", 2), ("bf16", "e4m3", 4),
                                 ("fp16", "e4m3", 2)])
        self.assertEqual(_runtime.forget_decode_kernels(), 4)

    def test_a_library_without_fp8_cache_says_so(self):
        _capi._library.has_fp8_kv_cache = False
        with self.assertRaisesRegex(RuntimeError, r"has no FP8 KV cache \(desc\.kv_cache_dtype\)"
                                                  r": torch\.float8_e4m3fn caches .* need a "
                                                  r"library of 0\.12 or later"):
            self.get(cache="e4m3")
        self.assertEqual(self.fake.got, [])
        self.get()  # a 16-bit cache still gets its handle
        self.assertEqual(self.fake.got[-1]["kv_cache_dtype"], 0)

    def test_forget_decode_kernels(self):
        dec = self.get()
        plain = self.get(decode=False)
        plans = {"some": "plan"}
        _runtime.plan_caches.append(plans)
        self.assertEqual(_runtime.forget_decode_kernels(), 1)
        self.assertEqual(self.fake.released, [dec])
        self.assertEqual(plans, {})
        self.assertEqual(self.get(decode=False), plain)
        self.assertNotEqual(self.get(), dec)  # got again (the fake hands out a new handle)


class Fp8Kernels(FakeKernelsTestCase):
    """_runtime.kernel for FP8 inputs (0.7) on a stand-in fj_kernel_get: dtype e4m3 and
    o's type reach the description, and o's type keys the handle."""

    library = dict(has_fp8=True)

    def get(self, dtype="e4m3", out_dtype=None, backward=False):
        handle, _ = _runtime.kernel(0, dtype, 128, 128, 8, 2, True, 0.0, backward,
                                    (257, 389, 2), out_dtype=out_dtype)
        return handle.value

    def test_dtype_and_out_dtype_reach_the_description(self):
        bf16_out = self.get()
        self.assertEqual((self.fake.got[-1]["dtype"], self.fake.got[-1]["out_dtype"]),
                         (_capi.FJ_DTYPE_E4M3, _capi.FJ_DTYPE_BF16))
        self.assertEqual(self.get(out_dtype="bf16"), bf16_out)  # None is bf16
        fp16_out = self.get(out_dtype="fp16")
        self.assertNotEqual(fp16_out, bf16_out)
        self.assertEqual((self.fake.got[-1]["dtype"], self.fake.got[-1]["out_dtype"]),
                         (_capi.FJ_DTYPE_E4M3, _capi.FJ_DTYPE_FP16))
        plain = self.get(dtype="bf16")  # 16-bit: out_dtype 0 (o has the dtype)
        self.assertNotIn(plain, (bf16_out, fp16_out))
        self.assertEqual((self.fake.got[-1]["dtype"], self.fake.got[-1]["out_dtype"]),
                         (_capi.FJ_DTYPE_BF16, 0))
        self.assertEqual(len(self.fake.got), 3)
        kinds = sorted((k["dtype"], k["out_dtype"]) for k in _runtime.kernels_info())
        self.assertEqual(kinds, [("bf16", "bf16"), ("e4m3", "bf16"), ("e4m3", "fp16")])

    def test_no_backward_and_no_fp8_library(self):
        with self.assertRaisesRegex(NotImplementedError, r"the backward pass does not support "
                                                         r"FP8 \(torch\.float8_e4m3fn\)"):
            self.get(backward=True)
        _capi._library.has_fp8 = False
        with self.assertRaisesRegex(RuntimeError, r"has no FP8 kernels \(no "
                                                  r"fj_forward_workspace_size\)"):
            self.get()
        self.assertEqual(self.fake.got, [])


def fp8_qkv(**kw):
    """qkv() as float8_e4m3fn stand-ins: batch 2, 100 queries, 107 keys, 8 and 2 heads."""
    return qkv(dtype="torch.float8_e4m3fn", **kw)


def descale(shape=(), **kw):
    kw.setdefault("dtype", "torch.float32")
    return FakeTensor(shape, **kw)


class BadFp8Arguments(unittest.TestCase):
    """flashjit.attention's FP8 arguments (0.7) on stand-in tensors: the checks that fail
    before torch is imported or anything reaches a device."""

    def expect(self, exc, pattern, *args, **kw):
        with self.assertRaisesRegex(exc, pattern):
            flashjit.attention(*args, **kw)

    def test_valid_arguments_pass_the_checks(self):
        q, k, v = fp8_qkv()
        lay, dims = _checks.check_inputs(q, k, v, "bshd", pointers=True, fp8=True)
        self.assertEqual(dims["k"], (2, 107, 2, 64))
        self.assertEqual(_checks.dtype_name(q, fp8=True), "e4m3")
        self.assertIsNone(_checks.dtype_name(q))  # decode, block masks: 16-bit alone
        # BHSD views; one-element dimensions with strides that are no multiple of 16
        # (sent as 0: fp8_stride).
        bhsd = FakeTensor((1, 8, 100, 64), dtype="torch.float8_e4m3fn",
                          strides=(8, 64, 512, 1))
        _checks.check_inputs(bhsd, bhsd, bhsd, "bhsd", pointers=True, fp8=True)
        self.assertEqual((_checks.fp8_stride(1, 8), _checks.fp8_stride(1, 32),
                          _checks.fp8_stride(5, 32)), (0, 32, 32))
        for shape, strides, expected in (((), (), (0, 0)), ((1,), (1,), (0, 0)),
                                         ((2, 2), (2, 1), (2, 1)), ((2, 2), (0, 0), (0, 0)),
                                         ((2, 2), (1, 2), (1, 2))):
            self.assertEqual(_checks.check_descale("q_descale", descale(shape, strides=strides),
                                                   2, 2, "cuda:0", pointers=True), expected)
        self.assertEqual(_checks.check_descale("k_descale", descale((1, 2)), 1, 2, "cuda:0"),
                         (0, 1))
        self.assertEqual(_checks.check_descales((None, None, None), False, 2, 2, "cuda:0"),
                         (None, None, None))
        for strides, expected in (((None, None, None), (0, 0)), (((0, 0), None, (0, 0)), (0, 0)),
                                  (((2, 1), (2, 1), None), (2, 1)),
                                  (((0, 0), (2, 1), None), None), (((2, 1), (1, 2), (2, 1)), None)):
            self.assertEqual(_checks.descale_strides(strides), expected, strides)
        self.assertEqual(_checks.check_out_dtype(None, q, True), "bf16")
        self.assertEqual(_checks.check_out_dtype("torch.float16", q, True), "fp16")
        self.assertEqual(_checks.check_out_dtype("torch.bfloat16", q, True), "bf16")
        bf16 = FakeTensor((1,))
        self.assertEqual(_checks.check_out_dtype(None, bf16, False), "bf16")
        self.assertEqual(_checks.check_out_dtype("torch.bfloat16", bf16, False), "bf16")

    @unittest.skipIf(HAVE_TORCH, "torch is installed")
    def test_valid_calls_reach_torch(self):
        q, k, v = fp8_qkv()
        for kw in (dict(), dict(causal=True, out_dtype="torch.float16"),
                   dict(q_descale=descale(), k_descale=descale((1,)),
                        v_descale=descale((2, 2))),
                   dict(return_lse=True, scale=0.125, layout="bshd")):
            self.expect(ImportError, "torch", q, k, v, **kw)

    def test_dtypes(self):
        q, k, v = fp8_qkv()
        self.expect(TypeError, r"q, k and v have dtypes torch.float8_e4m3fn, torch.bfloat16, "
                               r"torch.bfloat16: they must be the same \(FP8 takes all three "
                               r"as torch.float8_e4m3fn\)", q, *qkv()[1:])
        self.expect(TypeError, r"must be the same \(FP8", qkv()[0], k, v)
        self.expect(TypeError, r"q\.dtype is torch\.float8_e5m2: flashjit takes torch\.float16 "
                               r"or torch\.bfloat16 \(or torch\.float8_e4m3fn",
                    *qkv(dtype="torch.float8_e5m2"))
        # Where FP8 does not run: a clear TypeError, not a missing kernel.
        with self.assertRaisesRegex(TypeError, r"q\.dtype is torch\.float8_e4m3fn: this call "
                                               r"takes torch\.float16 or torch\.bfloat16 \(FP8 "
                                               r"inputs run in flashjit\.attention alone"):
            flashjit.create_block_mask(q, k, v, mask_mod=DOC)
        with self.assertRaisesRegex(TypeError, r"q\.dtype is torch\.float8_e4m3fn"):
            flashjit.decode(*decode_args(dtype="torch.float8_e4m3fn")[:3])

    def test_shapes_and_strides(self):
        self.expect(ValueError, r"head dim is 72: FP8 \(torch.float8_e4m3fn\) takes head dims "
                                r"that are multiples of 16", *fp8_qkv(d=72))
        q, k, v = fp8_qkv()
        self.expect(ValueError, r"v's head dim is 40: FP8", q, k,
                    FakeTensor((2, 107, 2, 40), dtype="torch.float8_e4m3fn"))
        self.expect(ValueError, r"k's sequence stride is 136 elements \(strides \(15408, 136, "
                                r"64, 1\)\): FP8 kernels load q, k and v by rows of 16 bytes",
                    q, FakeTensor(k.shape, dtype="torch.float8_e4m3fn",
                                  strides=(15408, 136, 64, 1)), v)
        self.expect(ValueError, r"q's head stride is 72 elements", FakeTensor(
            q.shape, dtype="torch.float8_e4m3fn", strides=(57600, 576, 72, 1)), k, v)
        empty = FakeTensor((2, 0, 2, 64), dtype="torch.float8_e4m3fn")
        self.expect(ValueError, r"k has 0 keys per sequence: FP8 kernels need at least one "
                                r"key", q, empty, empty)
        pq, pk = (FakeTensor((300, 8, 64), dtype="torch.float8_e4m3fn"),
                  FakeTensor((280, 2, 64), dtype="torch.float8_e4m3fn"))
        cu = FakeTensor((4,), dtype="torch.int32")
        # cu_seqlens: per-sequence factors are [batch, num_heads_kv] with batch the number
        # of sequences (3 here), not of packed rows.
        self.expect(ValueError, r"q_descale is \(280, 2\): expected \(\) or \(1,\) .* "
                                r"or \(3, 2\)",
                    pq, pk, pk, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=100,
                    max_seqlen_k=100,
                    q_descale=FakeTensor((280, 2), dtype="torch.float32"))

    def test_no_features(self):
        q, k, v = fp8_qkv()
        for kw, named in ((dict(window=(64, 0)), "window"), (dict(softcap=30.0), "softcap"),
                          (dict(alibi_slopes=descale((8,))), "alibi"),
                          (dict(score_mod="return score;"), "score_mod"),
                          (dict(mask_mod=DOC), "mask_mod"),
                          (dict(window=(8, 8), mask_mod=DOC), "window, mask_mod")):
            self.expect(ValueError, r"FP8 \(torch.float8_e4m3fn\) inputs take no attention "
                                    rf"features yet \({named}\)", q, k, v, **kw)
        mask = fake_mask(FakeMaskLibrary())
        try:
            self.expect(ValueError, r"take no attention features yet \(mask_mod\)", q, k, v,
                        block_mask=mask)
        finally:
            mask.close()

    def test_bad_descales(self):
        q, k, v = fp8_qkv()  # batch 2, 2 key/value heads (8 query heads)
        for kw, exc, pattern in (
                (dict(q_descale=0.5), TypeError, r"q_descale is a float: expected a "
                                                 r"torch\.float32 tensor"),
                (dict(k_descale=descale(dtype="torch.bfloat16")), TypeError,
                 r"k_descale\.dtype is torch\.bfloat16: expected torch\.float32"),
                (dict(v_descale=descale(device="cpu")), ValueError,
                 r"v_descale is on cpu, q on cuda:0"),
                (dict(q_descale=descale((3,))), ValueError,
                 r"q_descale is \(3,\): expected \(\) or \(1,\) \(one factor per tensor\) "
                 r"or \(2, 2\), \[batch, num_heads_kv\]"),
                (dict(k_descale=descale((2, 8))), ValueError,
                 r"k_descale is \(2, 8\): expected .*\(2, 2\)"),
                (dict(v_descale=descale((2, 2, 1))), ValueError, r"v_descale is \(2, 2, 1\)"),
                (dict(out_dtype="torch.float32"), TypeError,
                 r"out_dtype is 'torch\.float32': FP8 inputs give o as torch\.bfloat16 "
                 r"\(None, the default\) or torch\.float16"),
                (dict(out_dtype="torch.float8_e4m3fn"), TypeError, r"out_dtype is")):
            self.expect(exc, pattern, q, k, v, **kw)
        with self.assertRaisesRegex(ValueError, r"q_descale's data is not 4-byte aligned"):
            _checks.check_descale("q_descale", descale(ptr=0x7f0000000002), 2, 2, "cuda:0",
                                  pointers=True)
        # 16-bit inputs take neither descales nor another out_dtype.
        b16 = qkv()
        self.expect(ValueError, r"k_descale is given, but the inputs are not FP8", *b16,
                    k_descale=descale())
        self.expect(ValueError, r"out_dtype is torch\.float16, q's dtype torch\.bfloat16: with "
                                r"16-bit inputs o has q's dtype", *b16,
                    out_dtype="torch.float16")


class Settings(unittest.TestCase):
    def setUp(self):
        self.saved = dict(_runtime.settings)

    def tearDown(self):
        _runtime.settings.clear()
        _runtime.settings.update(self.saved)

    def test_configure(self):
        s = flashjit.configure(tune_mode="heuristic", cache_path="/tmp/x.sqlite", budget_s=7)
        self.assertEqual(s, dict(tune_mode="heuristic", cache_path="/tmp/x.sqlite",
                                 budget_s=7.0, tune_lengths="auto"))
        self.assertEqual(flashjit.configure(tune_lengths="ladder")["tune_lengths"], "ladder")
        s["tune_lengths"] = "ladder"
        self.assertEqual(flashjit.info()["settings"], s)
        self.assertEqual(flashjit.info()["user_cache_path"], "/tmp/x.sqlite")
        self.assertEqual(flashjit.configure(), s)

    def test_bad_settings(self):
        with self.assertRaisesRegex(ValueError, r"tune_mode is 'fast': expected one of"):
            flashjit.configure(tune_mode="fast")
        with self.assertRaisesRegex(ValueError, r"budget_s is -1"):
            flashjit.configure(budget_s=-1)
        with self.assertRaisesRegex(ValueError, r"budget_s is nan"):
            flashjit.configure(budget_s=float("nan"))
        with self.assertRaisesRegex(TypeError, r"budget_s is '5'"):
            flashjit.configure(budget_s="5")
        with self.assertRaisesRegex(ValueError, r"budget_s is inf"):
            with flashjit.tuning(budget_s=float("inf")):
                pass
        with self.assertRaisesRegex(ValueError, r"tune_lengths is 'all': expected one of "
                                    r"'auto', 'hinted', 'ladder'"):
            flashjit.configure(tune_lengths="all")
        self.assertEqual(_runtime.settings, self.saved)  # nothing half-applied

    def test_tuning_nests_and_restores(self):
        flashjit.configure(tune_mode="default")
        with flashjit.tuning(budget_s=5) as outer:
            self.assertEqual(outer["budget_s"], 5.0)
            self.assertEqual(_runtime.current_settings()["tune_mode"], "default")
            with flashjit.tuning(tune_mode="cached"):
                self.assertEqual(_runtime.current_settings(),
                                 dict(tune_mode="cached", cache_path=None, budget_s=5.0,
                                      tune_lengths="auto"))
            self.assertEqual(_runtime.current_settings()["tune_mode"], "default")
        self.assertEqual(_runtime.current_settings()["budget_s"], self.saved["budget_s"])

    def test_default_cache_path_follows_the_librarys_rule(self):
        env = {k: os.environ.pop(k) for k in ("FLASHJIT_CACHE", "XDG_CACHE_HOME")
               if k in os.environ}
        try:
            os.environ["XDG_CACHE_HOME"] = "/xdg"
            self.assertEqual(flashjit.info()["user_cache_path"], "/xdg/flashjit/cache.sqlite")
            os.environ["FLASHJIT_CACHE"] = ""
            self.assertEqual(flashjit.info()["user_cache_path"], "")
        finally:
            for k in ("FLASHJIT_CACHE", "XDG_CACHE_HOME"):
                os.environ.pop(k, None)
            os.environ.update(env)


class BadArguments(unittest.TestCase):
    def expect(self, exc, pattern, *args, **kw):
        with self.assertRaisesRegex(exc, pattern):
            flashjit.attention(*args, **kw)

    def check(self, exc, pattern, *args, **kw):
        with self.assertRaisesRegex(exc, pattern):
            _checks.check_inputs(*args, pointers=True, **kw)

    def test_valid_arguments_pass_the_checks(self):
        lay, dims = _checks.check_inputs(*qkv(), "bshd", pointers=True)
        self.assertEqual(dims["q"], (2, 100, 8, 64))
        lay, dims = _checks.check_inputs(*(FakeTensor((2, 8, 100, 64)),) * 3, "BHSD")
        self.assertEqual((lay.name, dims["q"]), ("bhsd", (2, 100, 8, 64)))
        # BHSD views of BSHD memory, strides of one-element dimensions anything, MQA.
        q = FakeTensor((1, 8, 100, 64), strides=(3, 64, 512, 1))
        kv = FakeTensor((1, 1, 50, 64), strides=(5, 9, 64, 1))
        _checks.check_inputs(q, kv, kv, "bhsd", pointers=True)
        # dv != d; empty tensors are not checked for strides.
        _checks.check_inputs(FakeTensor((2, 5, 4, 64)), FakeTensor((2, 0, 4, 64), strides=(
            0, 0, 0, 1)), FakeTensor((2, 0, 4, 128), strides=(3, 3, 3, 1)), "bshd",
            pointers=True)

    def test_wrong_dtype(self):
        self.expect(TypeError, r"q\.dtype is torch\.float32.*float16 or torch\.bfloat16",
                    *qkv(dtype="torch.float32"))

    def test_mixed_dtypes(self):
        q, k, v = qkv()
        k.dtype = v.dtype = "torch.float16"
        self.expect(TypeError, "must be the same", q, k, v)

    def test_wrong_device(self):
        self.expect(ValueError, r"q is on cpu: flashjit runs on CUDA", *qkv(device="cpu"))
        q, k, v = qkv()
        k.device = v.device = "cuda:1"
        self.expect(ValueError, r"on one device", q, k, v)

    def test_wrong_rank(self):
        q, k, v = qkv()
        self.expect(ValueError, r"q has 3 dimensions .*expected 4", FakeTensor((2, 100, 64)), k, v)
        self.expect(ValueError, r"k has 5 dimensions", q, FakeTensor((2, 1, 100, 2, 64)), v)

    def test_head_counts(self):
        self.expect(ValueError, r"q has 6 heads and k/v 4.*multiple", *qkv(hq=6, hkv=4))
        self.expect(ValueError, r"q has 0 heads", *qkv(hq=0, hkv=2))
        self.expect(ValueError, r"at most 65535", *qkv(hq=65536, hkv=1))

    def test_head_dims(self):
        self.expect(ValueError, r"head dim is 100.*multiples of 8", *qkv(d=100))
        self.expect(ValueError, r"head dim is 264", *qkv(d=264))
        self.expect(ValueError, r"head dim is 0", *qkv(d=0))
        q, k, v = qkv()
        self.expect(ValueError, r"q's head dim is 64 and k's 128", q,
                    FakeTensor((2, 107, 2, 128)), v)
        self.expect(ValueError, r"v's head dim is 12", q, k, FakeTensor((2, 107, 2, 12)))

    def test_last_dim_not_contiguous(self):
        q, k, v = qkv()
        q2 = FakeTensor(q.shape, strides=(51200, 512, 64, 2))
        self.expect(ValueError, r"q's last dimension has stride 2.*contiguous", q2, k, v)

    def test_strides_and_alignment(self):
        q, k, v = qkv()
        self.expect(ValueError, r"k's sequence stride is 132 elements.*multiple of 8", q,
                    FakeTensor(k.shape, strides=(14128, 132, 64, 1)), v)
        self.expect(ValueError, r"v's head stride is 0", q, k,
                    FakeTensor(v.shape, strides=(107 * 64, 64, 0, 1)))
        self.expect(ValueError, r"q's batch stride is -51200", FakeTensor(
            q.shape, strides=(-51200, 512, 64, 1)), k, v)
        self.check(ValueError, r"q's data is at 0x7f0000000008, not 16-byte aligned",
                   FakeTensor(q.shape, ptr=0x7f0000000008), k, v, "bshd")
        bhsd = FakeTensor((2, 8, 100, 64), strides=(51200, 6400, 63, 1))
        self.check(ValueError, r"q's sequence stride is 63", bhsd, bhsd, bhsd, "bhsd")

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
        self.expect(TypeError, r"cu_seqlens_k is a list", q, k, v, cu_seqlens_q=cu,
                    cu_seqlens_k=[0, 1, 2, 3])
        self.expect(ValueError, r"cu_seqlens_k is on cpu", q, k, v, cu_seqlens_q=cu,
                    cu_seqlens_k=FakeTensor((4,), dtype="torch.int32", device="cpu"))
        self.expect(ValueError, r"cu_seqlens_q has 4 entries and cu_seqlens_k 5", q, k, v,
                    cu_seqlens_q=cu, cu_seqlens_k=FakeTensor((5,), dtype="torch.int32"))
        self.expect(ValueError, r"max_seqlen_q and max_seqlen_k are required", q, k, v,
                    cu_seqlens_q=cu, cu_seqlens_k=cu)
        self.expect(ValueError, r"max_seqlen_k is -1", q, k, v, cu_seqlens_q=cu,
                    cu_seqlens_k=cu, max_seqlen_q=100, max_seqlen_k=-1)
        self.expect(TypeError, r"max_seqlen_q is 'x'", q, k, v, cu_seqlens_q=cu,
                    cu_seqlens_k=cu, max_seqlen_q="x", max_seqlen_k=1)
        self.expect(ValueError, r"packed tensors", q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                    layout="bhsd")
        self.expect(ValueError, r"q has 4 dimensions .*expected 3, \[total, heads, dim\]",
                    *qkv(), cu_seqlens_q=cu, cu_seqlens_k=cu)
        self.check(ValueError, r"cu_seqlens_q's data is not 4-byte aligned", q, k, v, "bshd",
                   cu_seqlens_q=FakeTensor((4,), dtype="torch.int32", ptr=0x7f0000000002),
                   cu_seqlens_k=cu)

    def test_bad_features(self):
        self.expect(ValueError, r"window is \(-1, -1\)", *qkv(), window=(-1, -1))
        self.expect(ValueError, r"window's left side is -5", *qkv(), window=(-5, 0))
        self.expect(TypeError, r"window is 128: expected \(left, right\)", *qkv(), window=128)
        self.expect(TypeError, r"window's right side is 1\.5", *qkv(), window=(4, 1.5))
        self.expect(ValueError, r"softcap is nan", *qkv(), softcap=float("nan"))
        self.expect(ValueError, r"softcap is -1", *qkv(), softcap=-1)
        self.expect(TypeError, r"softcap is 'big'", *qkv(), softcap="big")
        self.expect(TypeError, r"score_mod is a int: expected a str", *qkv(), score_mod=3)
        self.expect(ValueError, r"mask_mod is 65537 bytes", *qkv(), mask_mod="x" * 65537)
        self.expect(ValueError, r"score_mod contains a NUL", *qkv(), score_mod="a\0b")
        self.expect(ValueError, r"mod_tensors has 5 entries", *qkv(), score_mod="return score;",
                    mod_tensors=[FakeTensor((4,))] * 5)
        self.expect(TypeError, r"mod_tensors\[0\] is a int", *qkv(), mod_tensors=[3])
        self.expect(ValueError, r"mod_tensors\[1\] is on cpu", *qkv(),
                    mod_tensors=[FakeTensor((4,)), FakeTensor((4,), device="cpu")])
        self.expect(TypeError, r"mod_tensors is FakeTensor", *qkv(), mod_tensors=FakeTensor((4,)))
        self.expect(ValueError, r"mod_ints\[0\] is 4294967296", *qkv(), mod_ints=[1 << 32])
        self.expect(TypeError, r"mod_scalars\[0\] is 'x'", *qkv(), mod_scalars=["x"])

    def test_bad_alibi_slopes(self):
        q, k, v = qkv()  # batch 2, 8 query heads
        self.expect(TypeError, r"alibi_slopes\.dtype is torch\.bfloat16", q, k, v,
                    alibi_slopes=FakeTensor((8,)))
        self.expect(ValueError, r"alibi_slopes is \(4,\): expected \(8,\) or \(2, 8\)", q, k,
                    v, alibi_slopes=FakeTensor((4,), dtype="torch.float32"))
        self.expect(ValueError, r"alibi_slopes is on cpu", q, k, v,
                    alibi_slopes=FakeTensor((8,), dtype="torch.float32", device="cpu"))
        self.expect(ValueError, r"the heads must be contiguous", q, k, v,
                    alibi_slopes=FakeTensor((2, 8), dtype="torch.float32", strides=(16, 2)))
        self.expect(TypeError, r"alibi_slopes is a list", q, k, v, alibi_slopes=[0.5] * 8)
        self.assertEqual(_checks.check_alibi_slopes(
            FakeTensor((8,), dtype="torch.float32"), 2, 8, "cuda:0"), 0)
        self.assertEqual(_checks.check_alibi_slopes(
            FakeTensor((2, 8), dtype="torch.float32", strides=(16, 1)), 2, 8, "cuda:0"), 16)
        self.assertEqual(_checks.check_alibi_slopes(  # one sequence: the stride is unused
            FakeTensor((1, 8), dtype="torch.float32", strides=(0, 1)), 1, 8, "cuda:0"), 0)

    def test_good_features_pass_the_checks(self):
        f = _checks.check_features((256, 0), 30, True, "return score;", "")
        self.assertEqual(f, _checks.Features((256, 0), 30.0, True, "return score;", None))
        self.assertEqual(_checks.features_on(f), "window, softcap, alibi, score_mod")
        self.assertEqual(_checks.check_features(), _checks.PLAIN)
        self.assertEqual(_checks.check_features(window=[-1, 0]).window, (-1, 0))
        t = FakeTensor((3,))
        self.assertEqual(_checks.check_mod_args((t,), (1, 2.5), (7,), "cuda:0"),
                         ([t], [1.0, 2.5], [7]))

    def test_bad_layout_and_scale(self):
        self.expect(ValueError, r"layout is 'sbhd'", *qkv(), layout="sbhd")
        self.expect(ValueError, r"layout is None", *qkv(), layout=None)
        self.expect(ValueError, r"scale is -1", *qkv(), scale=-1.0)
        self.expect(ValueError, r"scale is 0", *qkv(), scale=0)
        self.expect(ValueError, r"scale is nan", *qkv(), scale=float("nan"))
        self.expect(TypeError, r"scale is 'big'", *qkv(), scale="big")


class FakeMaskLibrary:
    """Stands in for libflashjit.so's fj_block_mask_update / _destroy: records the calls."""

    def __init__(self):
        self.destroyed, self.updates = [], []
        real = _capi.library()
        self.check = real.check
        self.lib = self

    def fj_block_mask_destroy(self, mask):
        self.destroyed.append(mask.value)
        return 0

    def fj_block_mask_update(self, mask, args_ref, stream):
        a = args_ref._obj
        self.updates.append(dict(mask=mask.value, stream=stream.value,
                                 tensors=list(a.mod_args.tensor), ints=list(a.mod_args.integer),
                                 q_seq_stride=a.q_seq_stride, o_seq_stride=a.o_seq_stride,
                                 cu=(a.cu_seqlens_q, a.cu_seqlens_k),
                                 block_mask=a.block_mask))
        return 0


DOC = "const int *doc = (const int *)args.tensor[0];\nreturn doc[q_idx] == doc[kv_idx];"


def fake_mask(lib, address=0x5000, varlen=False, causal=False, alibi=False, **shape):
    """A BlockMask as _ops.create_block_mask makes one, for qkv()'s calls (bf16, d 64,
    8 query and 2 key/value heads, batch 2, 100 queries, 107 keys) with DOC as mask_mod."""
    from flashjit import _block_mask
    features = _checks.check_features(None, 0.0, alibi, None, DOC)
    shape = _block_mask.Shape(**dict(dict(batch=2, seqlen_q=100, seqlen_k=107, varlen=varlen),
                                     **shape))
    args = _capi.new(_capi.ForwardArgs, q=0x7f0000000000, batch=shape.batch,
                     seqlen_q=shape.seqlen_q, seqlen_k=shape.seqlen_k, q_seq_stride=512,
                     o_seq_stride=512)
    doc = FakeTensor((107,), dtype="torch.int32", ptr=0x7f0000900000)
    cu = (FakeTensor((3,), dtype="torch.int32", ptr=0x7f0000a00000),
          FakeTensor((3,), dtype="torch.int32", ptr=0x7f0000b00000)) if varlen else None
    mask = _block_mask.BlockMask(
        address, C.c_void_p(0x1234), "cuda:0", 0,
        _block_mask.Description("bf16", 64, 64, 8, 2, causal, 0.0, features), shape,
        ((doc,), (), (5,)), cu, None, args, False, False, lambda: 0x77, lib)
    return _block_mask.register(mask)


class BlockMasks(unittest.TestCase):
    """flashjit.create_block_mask's checks and BlockMask (0.6) without a device: the
    arguments, a mask's life (close, the registry), update's arguments reaching the C
    call, and attention refusing a mask made for another kernel or shape."""

    def setUp(self):
        self.lib = FakeMaskLibrary()

    def create(self, exc, pattern, *args, **kw):
        kw.setdefault("mask_mod", DOC)
        with self.assertRaisesRegex(exc, pattern):
            flashjit.create_block_mask(*args, **kw)

    def attend(self, exc, pattern, *args, **kw):
        with self.assertRaisesRegex(exc, pattern):
            flashjit.attention(*args, **kw)

    def test_create_arguments(self):
        q, k, v = qkv()
        self.create(ValueError, r"create_block_mask needs mask_mod", q, k, v, mask_mod=None)
        self.create(ValueError, r"create_block_mask needs mask_mod", q, k, v, mask_mod="")
        self.create(TypeError, r"mask_mod is a bytes: expected a str", q, k, v,
                    mask_mod=b"return true;")
        self.create(TypeError, r"shared_across_heads is 'yes': expected True or False", q, k,
                    v, shared_across_heads="yes")
        self.create(TypeError, r"shared_across_batch is 2", q, k, v, shared_across_batch=2)
        self.create(ValueError, r"mod_tensors has 5 entries", q, k, v,
                    mod_tensors=[FakeTensor((4,))] * 5)
        self.create(ValueError, r"mod_tensors\[0\] is on cpu", q, k, v,
                    mod_tensors=[FakeTensor((4,), device="cpu")])
        self.create(ValueError, r"window is \(-1, -1\)", q, k, v, window=(-1, -1))
        self.create(ValueError, r"scale is -1", q, k, v, scale=-1.0)
        self.create(ValueError, r"q has 6 heads and k/v 4", *qkv(hq=6, hkv=4))
        self.create(ValueError, r"q's data is at 0x7f0000000008, not 16-byte aligned",
                    FakeTensor(q.shape, ptr=0x7f0000000008), k, v)
        self.create(ValueError, r"alibi_slopes is \(4,\)", q, k, v,
                    alibi_slopes=FakeTensor((4,), dtype="torch.float32"))
        pq, pk = FakeTensor((300, 8, 64)), FakeTensor((280, 2, 64))
        cu = FakeTensor((4,), dtype="torch.int32")
        self.create(ValueError, r"shared_across_batch is set, but the arguments have "
                                r"cu_seqlens", pq, pk, pk, cu_seqlens_q=cu, cu_seqlens_k=cu,
                    max_seqlen_q=100, max_seqlen_k=100, shared_across_batch=True)
        self.create(ValueError, r"max_seqlen_q and max_seqlen_k are required", pq, pk, pk,
                    cu_seqlens_q=cu, cu_seqlens_k=cu)

    @unittest.skipIf(HAVE_TORCH, "torch is installed")
    def test_create_without_torch_says_so(self):
        with self.assertRaisesRegex(ImportError, "torch"):
            flashjit.create_block_mask(*qkv(), mask_mod=DOC, shared_across_heads=True)

    def test_close_and_the_registry(self):
        from flashjit import _block_mask
        mask = fake_mask(self.lib)
        self.assertIs(_block_mask.lookup(0x5000), mask)
        self.assertFalse(mask.closed)
        self.assertIn("batch=2, seqlen_q=100, seqlen_k=107", repr(mask))
        with mask as m:
            self.assertIs(m, mask)
        self.assertTrue(mask.closed)
        self.assertEqual(mask.address, 0)
        mask.close()  # twice: nothing
        self.assertEqual(self.lib.destroyed, [0x5000])
        self.assertIn("closed", repr(mask))
        with self.assertRaisesRegex(ValueError, r"block_mask 0x5000 is not an open "
                                                r"flashjit.BlockMask"):
            _block_mask.lookup(0x5000)
        # Dropped without close(): destroyed by the collector, gone from the registry.
        fake_mask(self.lib, address=0x6000)
        import gc
        gc.collect()
        self.assertEqual(self.lib.destroyed, [0x5000, 0x6000])
        with self.assertRaises(ValueError):
            _block_mask.lookup(0x6000)

    def test_update(self):
        mask = fake_mask(self.lib)
        doc2 = FakeTensor((107,), dtype="torch.int32", ptr=0x7f0000c00000)
        self.assertIs(mask.update(), mask)  # the same tensors, rebuilt
        self.assertIs(mask.update(mod_tensors=(doc2,), mod_ints=(7,)), mask)
        first, second = self.lib.updates
        self.assertEqual((first["mask"], first["stream"]), (0x5000, 0x77))
        self.assertEqual(first["tensors"][0], 0x7f0000900000)
        self.assertEqual((first["ints"][0], first["q_seq_stride"], first["o_seq_stride"]),
                         (5, 512, 512))
        self.assertIsNone(first["block_mask"])
        self.assertEqual((second["tensors"][0], second["ints"][0]), (0x7f0000c00000, 7))
        self.assertEqual((mask.mod_tensors, mask.mod_ints), ((doc2,), (7,)))
        for kw, exc, pattern in (
                (dict(mod_tensors=(FakeTensor((4,), device="cpu"),)), ValueError,
                 r"mod_tensors\[0\] is on cpu"),
                (dict(mod_ints=("x",)), TypeError, r"mod_ints\[0\] is 'x'"),
                (dict(cu_seqlens_q=FakeTensor((3,), dtype="torch.int32")), ValueError,
                 r"built without cu_seqlens"),
                (dict(alibi_slopes=FakeTensor((8,), dtype="torch.float32")), ValueError,
                 r"no ALiBi")):
            with self.assertRaisesRegex(exc, pattern):
                mask.update(**kw)
        self.assertEqual(len(self.lib.updates), 2)  # nothing reached the library
        self.assertEqual(mask.mod_ints, (7,))       # nor changed the mask
        varlen = fake_mask(self.lib, address=0x7000, varlen=True)
        cu = FakeTensor((3,), dtype="torch.int32", ptr=0x7f0000d00000)
        varlen.update(cu_seqlens_k=cu)
        self.assertEqual(self.lib.updates[-1]["cu"], (0x7f0000a00000, 0x7f0000d00000))
        self.assertIs(varlen.cu_seqlens[1], cu)
        with self.assertRaisesRegex(ValueError, r"cu_seqlens_q is torch.int32 \(4,\): this "
                                                r"mask's calls have batch 2"):
            varlen.update(cu_seqlens_q=FakeTensor((4,), dtype="torch.int32"))
        mask.close()
        with self.assertRaisesRegex(ValueError, r"BlockMask.update: this BlockMask was closed"):
            mask.update()

    def test_attention_refuses_another_kernel_or_shape(self):
        mask = fake_mask(self.lib)
        q, k, v = qkv()
        self.attend(TypeError, r"block_mask is a int: expected a flashjit.BlockMask", q, k, v,
                    block_mask=0x5000)
        for kw, pattern in (
                (dict(causal=True), r"another kernel than this call's \(causal: the mask's "
                                    r"False, this call's True\)"),
                (dict(mask_mod="return true;"), r"\(mask_mod: another text\)"),
                (dict(mask_mod=""), r"mask_mod: the mask's 'const int \*doc.*', this call's "
                                    r"None"),
                (dict(scale=0.5), r"scale: the mask's None \(1/sqrt\(64\)\), this call's "
                                  r"0\.5"),
                (dict(window=(16, 0)), r"window: the mask's None, this call's \(16, 0\)"),
                (dict(softcap=30.0), r"softcap: the mask's 0\.0, this call's 30\.0")):
            self.attend(ValueError, pattern, q, k, v, block_mask=mask, **kw)
        self.attend(ValueError, r"dtype: the mask's 'bf16', this call's 'fp16'",
                    *qkv(dtype="torch.float16"), block_mask=mask)
        self.attend(ValueError, r"heads_q: the mask's 8, this call's 4", *qkv(hq=4),
                    block_mask=mask)
        self.attend(ValueError, r"block_mask was built for batch 2, seqlen_q 100, seqlen_k "
                                r"107; this call has batch 2, seqlen_q 64, seqlen_k 71: build "
                                r"a mask for this shape", *qkv(s=64), block_mask=mask)
        self.attend(ValueError, r"batch 3, seqlen_q 100", *qkv(b=3), block_mask=mask)
        pq, pk = FakeTensor((300, 8, 64)), FakeTensor((280, 2, 64))
        cu = FakeTensor((3,), dtype="torch.int32")
        self.attend(ValueError, r"this call has batch 2, seqlen_q 100, seqlen_k 107 "
                                r"\(cu_seqlens\)", pq, pk, pk, cu_seqlens_q=cu,
                    cu_seqlens_k=cu, max_seqlen_q=100, max_seqlen_k=107, block_mask=mask)
        mask.close()
        self.attend(ValueError, r"block_mask: this BlockMask was closed", q, k, v,
                    block_mask=mask)

    @unittest.skipIf(HAVE_TORCH, "torch is installed")
    def test_attention_with_a_mask_passes_the_checks(self):
        """A call of the mask's kernel and shape, with or without the mask's mask_mod
        and mod_* (taken from the mask), gets past the checks to torch."""
        mask = fake_mask(self.lib)
        for kw in (dict(), dict(mask_mod=DOC), dict(mask_mod=DOC, mod_ints=(1,))):
            self.attend(ImportError, "torch", *qkv(), block_mask=mask, **kw)
        varlen = fake_mask(self.lib, address=0x7000, varlen=True)
        pq, pk = FakeTensor((300, 8, 64)), FakeTensor((280, 2, 64))
        cu = FakeTensor((3,), dtype="torch.int32")
        self.attend(ImportError, "torch", pq, pk, pk, cu_seqlens_q=cu, cu_seqlens_k=cu,
                    max_seqlen_q=100, max_seqlen_k=107, block_mask=varlen)


def decode_args(b=3, sq=1, hq=8, hkv=2, d=128, dv=None, n=300, paged=False, page=16,
                pages=None, **kw):
    """Stand-ins for flashjit.decode: q, k_cache, v_cache, cache_seqlens, block_table
    (contiguous cache [b, n, hkv, d]; paged: a pool of `pages` pages and a [b, ceil(n /
    page)] table)."""
    dv = dv or d
    q = FakeTensor((b, sq, hq, d), **kw)
    lens = FakeTensor((b,), dtype="torch.int32")
    if not paged:
        return q, FakeTensor((b, n, hkv, d), **kw), FakeTensor((b, n, hkv, dv), **kw), lens, None
    width = -(-n // page)
    pages = pages or b * width
    return (q, FakeTensor((pages, page, hkv, d), **kw), FakeTensor((pages, page, hkv, dv), **kw),
            lens, FakeTensor((b, width), dtype="torch.int32"))


class DecodeErrors(unittest.TestCase):
    """What flashjit.decode and flashjit.kv_append raise, matched by a pattern."""

    def expect(self, exc, pattern, *args, **kw):
        with self.assertRaisesRegex(exc, pattern):
            flashjit.decode(*args, **kw)

    def expect_append(self, exc, pattern, *args, **kw):
        with self.assertRaisesRegex(exc, pattern):
            flashjit.kv_append(*args, **kw)


class BadDecodeArguments(DecodeErrors):
    """flashjit.decode's and flashjit.kv_append's checks, on stand-in tensors: they fail
    before torch is imported or anything reaches a device."""

    def test_valid_arguments_pass_the_checks(self):
        sizes = _checks.check_decode(*decode_args(), pointers=True)
        self.assertEqual(sizes, _checks.DecodeSizes(3, 1, 8, 2, 128, 128, 300, False, 0, 0, 0,
                                                    0.0, 0))
        q, k, v, lens, table = decode_args(paged=True, n=300, page=64, pages=50, dv=64, sq=4)
        sizes = _checks.check_decode(q, k, v, lens, table, softmax_scale=0.5, num_splits=7,
                                     pointers=True)
        self.assertEqual(sizes, _checks.DecodeSizes(3, 4, 8, 2, 128, 64, 320, True, 64, 50, 5,
                                                    0.5, 7))
        # max_seqlen_k bounds the lengths (and sizes the splits); a contiguous cache needs no
        # lengths; a table view with wider rows gives its row stride; MQA; no work.
        self.assertEqual(_checks.check_decode(q, k, v, lens, table, max_seqlen_k=100).seqlen_k,
                         100)
        q, k, v, _, _ = decode_args(hkv=1)
        self.assertEqual(_checks.check_decode(q, k, v).heads_kv, 1)
        q, k, v, lens, _ = decode_args(paged=True)
        wide = FakeTensor((3, 19), dtype="torch.int32", strides=(32, 1))
        self.assertEqual(_checks.check_decode(q, k, v, lens, wide).table_stride, 32)
        q, k, v, lens, table = decode_args(b=1, paged=True)
        one = FakeTensor((1, 19), dtype="torch.int32", strides=(5, 1))
        self.assertEqual(_checks.check_decode(q, k, v, lens, one).table_stride, 19)
        # Views: q and out from [batch, heads, 1, d] memory (SDPA's), misaligned pointers of
        # empty tensors are never read.
        q = FakeTensor((3, 1, 8, 128), strides=(1024, 7, 128, 1))
        _checks.check_decode(q, *decode_args()[1:3], out=FakeTensor(
            (3, 1, 8, 128), strides=(1024, 3, 128, 1)), pointers=True)
        q, k, v, _, _ = decode_args(b=0)
        _checks.check_decode(FakeTensor((0, 1, 8, 128), ptr=3), k, v, pointers=True)

    def test_tensors(self):
        q, k, v, lens, table = decode_args()
        self.expect(TypeError, r"q is a list, not a tensor", [1], k, v)
        self.expect(TypeError, r"q\.dtype is torch\.float32", FakeTensor(q.shape,
                                                                         dtype="torch.float32"), k, v)
        self.expect(TypeError, r"q, k_cache, v_cache have dtypes torch\.bfloat16, "
                               r"torch\.float16", q, FakeTensor(k.shape, dtype="torch.float16"),
                    FakeTensor(v.shape, dtype="torch.float16"))
        self.expect(ValueError, r"k_cache is on cpu", q, FakeTensor(k.shape, device="cpu"), v)
        self.expect(ValueError, r"on one device", q, FakeTensor(k.shape, device="cuda:1"),
                    FakeTensor(v.shape, device="cuda:1"))
        self.expect(ValueError, r"q has 3 dimensions .*\[batch, seqlen_q, heads_q, head_dim\]",
                    FakeTensor((3, 8, 128)), k, v)
        self.expect(ValueError, r"k_cache has 3 dimensions .*\[batch, seqlen_k, heads_kv, "
                                r"head_dim\] \(a contiguous cache", q, FakeTensor((3, 300, 256)), v)

    def test_shapes(self):
        self.expect(ValueError, r"q has 6 heads and k_cache/v_cache 4", *decode_args(hq=6, hkv=4))
        self.expect(ValueError, r"head dim is 100", *decode_args(d=100))
        self.expect(ValueError, r"v_cache's head dim is 12", *decode_args(dv=12))
        q, k, v, lens, _ = decode_args()
        self.expect(ValueError, r"q's head dim is 128 and k_cache's 64", q,
                    FakeTensor((3, 300, 2, 64)), v)
        self.expect(ValueError, r"k_cache is \(3, 300, 2, 128\) and v_cache \(3, 299, 2, 128\)",
                    q, k, FakeTensor((3, 299, 2, 128)))
        self.expect(ValueError, r"k_cache has batch 4 and q 3: a contiguous cache", q,
                    FakeTensor((4, 300, 2, 128)), FakeTensor((4, 300, 2, 128)))
        self.expect(ValueError, r"batch \* heads_kv <= 65535", *decode_args(b=40000))
        self.expect(ValueError, r"decode takes at most 1048560", *decode_args(sq=300000, hq=64,
                                                                              hkv=1))
        self.expect(ValueError, r"q has batch 3 and 65536 heads", *decode_args(hq=65536, hkv=1))

    def test_paged_cache(self):
        q, k, v, lens, table = decode_args(paged=True)
        self.expect(ValueError, r"a paged cache \(block_table given\) needs cache_seqlens", q,
                    k, v, None, table)
        self.expect(TypeError, r"block_table\.dtype is torch\.int64",
                    q, k, v, lens, FakeTensor(table.shape, dtype="torch.int64"))
        self.expect(ValueError, r"block_table is \(2, 19\): expected \(3, \?\)", q, k, v, lens,
                    FakeTensor((2, 19), dtype="torch.int32"))
        self.expect(ValueError, r"block_table is \(57,\): expected \(3, \?\)", q, k, v, lens,
                    FakeTensor((57,), dtype="torch.int32"))
        self.expect(ValueError, r"block_table is on cpu", q, k, v, lens,
                    FakeTensor(table.shape, dtype="torch.int32", device="cpu"))
        self.expect(ValueError, r"block_table has strides \(1, 3\): its last dimension must be "
                                r"contiguous", q, k, v, lens,
                    FakeTensor(table.shape, dtype="torch.int32", strides=(1, 3)))
        self.expect(ValueError, r"block_table has strides \(8, 1\): its rows must not overlap",
                    q, k, v, lens, FakeTensor(table.shape, dtype="torch.int32", strides=(8, 1)))
        self.expect(ValueError, r"needs at least one page", q, FakeTensor((0, 16, 2, 128)),
                    FakeTensor((0, 16, 2, 128)), lens, table)
        self.expect(ValueError, r"k_cache is \(57, 16, 2, 128\) and v_cache \(57, 32, 2, 128\): "
                                r"they must agree in pages, page size and heads", q, k,
                    FakeTensor((57, 32, 2, 128)), lens, table)
        with self.assertRaisesRegex(ValueError, r"block_table's data is not 4-byte aligned"):
            _checks.check_decode(q, k, v, lens, FakeTensor(table.shape, dtype="torch.int32",
                                                           ptr=0x7f0000000002), pointers=True)

    def test_cache_seqlens_and_numbers(self):
        q, k, v, lens, _ = decode_args()
        self.expect(TypeError, r"cache_seqlens\.dtype is torch\.int64", q, k, v,
                    FakeTensor((3,), dtype="torch.int64"))
        self.expect(ValueError, r"cache_seqlens is \(4,\): expected \(3,\)", q, k, v,
                    FakeTensor((4,), dtype="torch.int32"))
        self.expect(TypeError, r"cache_seqlens is a list", q, k, v, [300, 300, 300])
        self.expect(ValueError, r"its last dimension must be contiguous", q, k, v,
                    FakeTensor((3,), dtype="torch.int32", strides=(2,)))
        self.expect(ValueError, r"max_seqlen_k is 301: expected 0 to the cache's capacity per "
                                r"sequence, 300", q, k, v, lens, max_seqlen_k=301)
        self.expect(TypeError, r"max_seqlen_k is 2\.5", q, k, v, lens, max_seqlen_k=2.5)
        self.expect(ValueError, r"num_splits is 129: expected 0 \(automatic\) or 1 to 128", q,
                    k, v, num_splits=129)
        self.expect(ValueError, r"num_splits is -1", q, k, v, num_splits=-1)
        self.expect(TypeError, r"num_splits is True", q, k, v, num_splits=True)
        self.expect(TypeError, r"num_splits is 'auto'", q, k, v, num_splits="auto")
        self.expect(ValueError, r"softmax_scale is -1", q, k, v, softmax_scale=-1.0)
        self.expect(ValueError, r"softmax_scale is nan", q, k, v, softmax_scale=float("nan"))
        self.expect(TypeError, r"softmax_scale is 'big'", q, k, v, softmax_scale="big")

    def test_strides_alignment_and_out(self):
        q, k, v, lens, _ = decode_args()
        self.expect(ValueError, r"k_cache's sequence stride is 132 elements", q,
                    FakeTensor(k.shape, strides=(300 * 132, 132, 64, 1)), v)
        self.expect(ValueError, r"v_cache's last dimension has stride 2", q, k,
                    FakeTensor(v.shape, strides=(153600, 512, 256, 2)))
        q2, kp, vp, lens2, table = decode_args(paged=True)
        self.expect(ValueError, r"k_cache's page stride is 4100 elements", q2,
                    FakeTensor(kp.shape, strides=(4100, 256, 128, 1)), vp, lens2, table)
        self.expect(ValueError, r"q's head stride is 12", FakeTensor(q.shape, strides=(
            1024, 1024, 12, 1)), k, v)
        self.expect(ValueError, r"out is \(3, 1, 8, 64\): expected \(3, 1, 8, 128\)", q, k, v,
                    out=FakeTensor((3, 1, 8, 64)))
        self.expect(TypeError, r"q, out have dtypes", q, k, v,
                    out=FakeTensor(q.shape, dtype="torch.float16"))
        self.expect(TypeError, r"out is a tuple", q, k, v, out=(1, 2))
        with self.assertRaisesRegex(ValueError, r"q's data is at 0x7f0000000008, not 16-byte"):
            _checks.check_decode(FakeTensor(q.shape, ptr=0x7f0000000008), k, v, pointers=True)
        with self.assertRaisesRegex(ValueError, r"cache_seqlens's data is not 4-byte aligned"):
            _checks.check_decode(q, k, v, FakeTensor((3,), dtype="torch.int32", ptr=6),
                                 pointers=True)
        # Without work (no query rows; no keys) the tensors are not read: not checked.
        _checks.check_decode(FakeTensor((3, 0, 8, 128), strides=(3, 3, 3, 3)), k, v)
        _checks.check_decode(q, FakeTensor((3, 0, 2, 128), strides=(5, 5, 5, 5)),
                             FakeTensor((3, 0, 2, 128), strides=(5, 5, 5, 5)))

    def test_kv_append(self):
        _, k, v, lens, _ = decode_args()
        kn, vn = FakeTensor((3, 2, 2, 128)), FakeTensor((3, 2, 2, 128))
        self.assertEqual(_checks.check_kv_append(k, v, kn, vn, lens, pointers=True),
                         _checks.AppendSizes(3, 2, 2, 128, 128, 300, False, 0, 0, 0))
        _, kp, vp, lens, table = decode_args(paged=True, page=64)
        self.assertEqual(_checks.check_kv_append(kp, vp, kn, vn, lens, table),
                         _checks.AppendSizes(3, 2, 2, 128, 128, 320, True, 64, 15, 5))
        self.expect_append(ValueError, r"k_new is \(3, 2, 2, 128\) and v_new \(3, 1, 2, 128\)",
                           k, v, kn, FakeTensor((3, 1, 2, 128)), lens)
        self.expect_append(ValueError, r"k_new has 4 heads and k_cache 2", k, v,
                           FakeTensor((3, 2, 4, 128)), FakeTensor((3, 2, 4, 128)), lens)
        self.expect_append(ValueError, r"k_new's head dim is 64 and k_cache's 128", k, v,
                           FakeTensor((3, 2, 2, 64)), FakeTensor((3, 2, 2, 64)), lens)
        self.expect_append(ValueError, r"v_new's head dim is 64 and v_cache's 128", k, v, kn,
                           FakeTensor((3, 2, 2, 64)), lens)
        self.expect_append(ValueError, r"k_cache has batch 3 and k_new 2", k, v,
                           FakeTensor((2, 2, 2, 128)), FakeTensor((2, 2, 2, 128)),
                           FakeTensor((2,), dtype="torch.int32"))
        self.expect_append(ValueError, r"k_new has 301 rows per sequence: more than the cache "
                                       r"holds, 300", k, v, FakeTensor((3, 301, 2, 128)),
                           FakeTensor((3, 301, 2, 128)), lens)
        self.expect_append(TypeError, r"k_cache, v_cache, k_new, v_new have dtypes", k, v, kn,
                           FakeTensor(vn.shape, dtype="torch.float16"), lens)
        self.expect_append(TypeError, r"cache_seqlens\.dtype is torch\.float32", k, v, kn, vn,
                           FakeTensor((3,), dtype="torch.float32"))
        self.expect_append(ValueError, r"k_new's sequence stride is 4", k, v,
                           FakeTensor(kn.shape, strides=(512, 4, 256, 1)), vn, lens)
        self.expect_append(ValueError, r"block_table is \(2, 5\)", kp, vp, kn, vn, lens,
                           FakeTensor((2, 5), dtype="torch.int32"))
        with self.assertRaisesRegex(ValueError, r"v_new's data is at 0x7f0000000004"):
            _checks.check_kv_append(k, v, kn, FakeTensor(vn.shape, ptr=0x7f0000000004), lens,
                                    pointers=True)

    @unittest.skipIf(HAVE_TORCH, "torch is installed")
    def test_user_code_and_its_args(self):
        """score_mod, mask_mod and mod_* (0.14) are checked as attention()'s before torch
        is imported; valid ones, over a 16-bit or an FP8 cache, pass to the import."""
        args = decode_args()
        ok = dict(score_mod="return score;", mask_mod="return true;")
        self.expect(TypeError, r"score_mod is a bytes: expected a str", *args,
                    score_mod=b"return score;")
        self.expect(ValueError, r"mask_mod contains a NUL", *args, mask_mod="return true;\0")
        self.expect(ValueError, r"mod_tensors has 5 entries: at most 4", *args,
                    mod_tensors=[FakeTensor((4,))] * 5, **ok)
        self.expect(TypeError, r"mod_scalars\[0\] is 'x': expected a number", *args,
                    mod_scalars=("x",), **ok)
        self.expect(ValueError, r"mod_ints\[1\] is 4294967296: expected an int32", *args,
                    mod_ints=(1, 1 << 32), **ok)
        self.expect(ValueError, r"mod_tensors\[0\] is on cuda:1, q on cuda:0", *args,
                    mod_tensors=(FakeTensor((4,), device="cuda:1"),), **ok)
        for cache in (args, fp8_cache_args()):
            with self.assertRaisesRegex(ImportError, "torch"):
                flashjit.decode(*cache, window=(64, 0), softcap=30.0,
                                mod_tensors=(FakeTensor((4,)),), mod_scalars=(0.5,),
                                mod_ints=(3,), **ok)

    def test_decode_without_torch_says_so(self):
        with self.assertRaisesRegex(ImportError, "torch"):
            flashjit.decode(*decode_args())
        with self.assertRaisesRegex(ImportError, "torch"):
            _, k, v, lens, _ = decode_args()
            flashjit.kv_append(k, v, FakeTensor((3, 1, 2, 128)), FakeTensor((3, 1, 2, 128)), lens)


def fp8_cache_args(b=3, hkv=2, q_dtype="torch.bfloat16", cache_strides=None, **kw):
    """decode_args() with the caches as float8_e4m3fn stand-ins (an FP8 KV cache, 0.12) of
    the same shapes (and `cache_strides` if given); q stays 16-bit."""
    q, k, v, lens, table = decode_args(b=b, hkv=hkv, **kw)
    q = FakeTensor(q.shape, dtype=q_dtype)
    k, v = (FakeTensor(t.shape, dtype="torch.float8_e4m3fn", strides=cache_strides)
            for t in (k, v))
    return q, k, v, lens, table


def fp8_new_rows(b=3, new_len=2, hkv=2, d=128, dtype="torch.bfloat16"):
    return FakeTensor((b, new_len, hkv, d), dtype=dtype), FakeTensor((b, new_len, hkv, d),
                                                                     dtype=dtype)


class BadFp8CacheArguments(DecodeErrors):
    """flashjit.decode's and flashjit.kv_append's FP8 KV cache (0.12) on stand-in tensors:
    the caches' dtypes, head dims and strides, the factors' type, device, shape, strides
    and alignment, checked before torch is imported or anything reaches a device."""

    def test_valid_arguments_pass_the_checks(self):
        q, k, v, lens, _ = fp8_cache_args()  # batch 3, 2 KV heads
        sizes = _checks.check_decode(q, k, v, lens, pointers=True)
        self.assertEqual(sizes, _checks.DecodeSizes(3, 1, 8, 2, 128, 128, 300, False, 0, 0, 0,
                                                    0.0, 0, "e4m3", (0, 0)))
        # The factors' strides: (0, 0) for one factor, (0, 1) per KV head, the batch and
        # head strides of a [batch, heads_kv] tensor (0 where a dimension has one element).
        for shape, strides, expected in (((), (), (0, 0)), ((1,), (1,), (0, 0)),
                                         ((2,), (1,), (0, 1)), ((2,), (0,), (0, 0)),
                                         ((3, 2), (2, 1), (2, 1)), ((3, 2), (1, 3), (1, 3)),
                                         ((3, 2), (0, 1), (0, 1))):
            f = descale(shape, strides=strides)
            for kw in (dict(k_descale=f), dict(v_descale=f), dict(k_descale=f, v_descale=f)):
                got = _checks.check_decode(q, k, v, lens, pointers=True, **kw)
                self.assertEqual(got.descale_strides, expected, (shape, strides, kw))
        # () and (1,) are both one factor: one stride pair, (0, 0).
        self.assertEqual(_checks.check_decode(q, k, v, lens, k_descale=descale(),
                                              v_descale=descale((1,))).descale_strides, (0, 0))
        self.assertEqual(_checks.check_decode(*fp8_cache_args(b=1, hkv=1, hq=8), k_descale=descale(
            (1, 1))).descale_strides, (0, 0))
        # fp16 q; a paged cache; GQA, MQA; no work (no rows) reads no strides.
        q16 = FakeTensor(q.shape, dtype="torch.float16")
        self.assertEqual(_checks.check_decode(q16, k, v, lens).kv_cache_dtype, "e4m3")
        qp, kp, vp, lens_p, table = fp8_cache_args(paged=True, page=64, pages=20, dv=64, sq=4)
        sizes = _checks.check_decode(qp, kp, vp, lens_p, table, pointers=True,
                                     k_descale=descale((3, 2)), v_descale=descale((3, 2)))
        self.assertEqual(sizes, _checks.DecodeSizes(3, 4, 8, 2, 128, 64, 320, True, 64, 20, 5,
                                                    0.0, 0, "e4m3", (2, 1)))
        self.assertEqual(_checks.check_decode(*fp8_cache_args(hkv=1)[:3]).heads_kv, 1)
        _checks.check_decode(FakeTensor((3, 0, 8, 128)), k, v, pointers=True)
        # One-element dimensions may have strides that are not multiples of 16 (sent as 0).
        one = FakeTensor((1, 300, 2, 128), dtype="torch.float8_e4m3fn",
                         strides=(8, 256, 128, 1))
        _checks.check_decode(FakeTensor((1, 1, 8, 128)), one, one, pointers=True)
        # kv_append: 16-bit new rows into the FP8 cache, with the same factors.
        kn, vn = fp8_new_rows()
        self.assertEqual(_checks.check_kv_append(k, v, kn, vn, lens, pointers=True,
                                                 k_descale=descale((2,)),
                                                 v_descale=descale((2,))),
                         _checks.AppendSizes(3, 2, 2, 128, 128, 300, False, 0, 0, 0, "e4m3",
                                             (0, 1)))
        self.assertEqual(_checks.check_kv_append(kp, vp, kn, FakeTensor((3, 2, 2, 64)), lens_p,
                                                 table).kv_cache_dtype, "e4m3")
        # A 16-bit cache: no type, no factors (the 0.11 sizes, defaults of the new fields).
        self.assertEqual(_checks.check_decode(*decode_args()[:3]),
                         _checks.DecodeSizes(3, 1, 8, 2, 128, 128, 300, False, 0, 0, 0, 0.0, 0,
                                             None, (0, 0)))

    @unittest.skipIf(HAVE_TORCH, "torch is installed")
    def test_valid_calls_reach_torch(self):
        q, k, v, lens, table = fp8_cache_args(paged=True)
        kn, vn = fp8_new_rows()
        for kw in (dict(), dict(k_descale=descale()), dict(k_descale=descale((3, 2)),
                                                           v_descale=descale((3, 2)))):
            self.expect(ImportError, "torch", q, k, v, lens, table, **kw)
            self.expect_append(ImportError, "torch", k, v, kn, vn, lens, table, **kw)

    def test_dtypes(self):
        q, k, v, lens, _ = fp8_cache_args()
        b16 = decode_args()
        self.expect(TypeError, r"k_cache and v_cache have dtypes torch\.float8_e4m3fn, "
                               r"torch\.bfloat16: an FP8 KV cache takes both as "
                               r"torch\.float8_e4m3fn \(a 16-bit one both of q's dtype\)",
                    q, k, b16[2], lens)
        self.expect(TypeError, r"k_cache and v_cache have dtypes torch\.bfloat16, "
                               r"torch\.float8_e4m3fn", q, b16[1], v, lens)
        self.expect(TypeError, r"q\.dtype is torch\.float8_e4m3fn: q must be torch\.float16 "
                               r"or torch\.bfloat16 \(with an FP8 KV cache",
                    *fp8_cache_args(q_dtype="torch.float8_e4m3fn")[:3])
        self.expect(TypeError, r"k_cache\.dtype is torch\.float8_e5m2: flashjit takes "
                               r"torch\.float16 or torch\.bfloat16 \(or torch\.float8_e4m3fn: "
                               r"an FP8 KV cache\)", q,
                    FakeTensor(k.shape, dtype="torch.float8_e5m2"), v)
        self.expect(ValueError, r"q, k_cache, v_cache are on cuda:0, cuda:1, cuda:1", q,
                    FakeTensor(k.shape, dtype="torch.float8_e4m3fn", device="cuda:1"),
                    FakeTensor(v.shape, dtype="torch.float8_e4m3fn", device="cuda:1"))
        self.expect(TypeError, r"out\.dtype is torch\.float8_e4m3fn", q, k, v,
                    out=FakeTensor((3, 1, 8, 128), dtype="torch.float8_e4m3fn"))
        kn, vn = fp8_new_rows()
        self.expect_append(TypeError, r"k_new\.dtype is torch\.float8_e4m3fn: k_new must be "
                                      r"torch\.float16 or torch\.bfloat16", k, v,
                           *fp8_new_rows(dtype="torch.float8_e4m3fn"), lens)
        self.expect_append(TypeError, r"k_new, v_new have dtypes torch\.bfloat16, "
                                      r"torch\.float16", k, v, kn,
                           FakeTensor(vn.shape, dtype="torch.float16"), lens)
        self.expect_append(TypeError, r"k_cache and v_cache have dtypes torch\.float8_e4m3fn, "
                                      r"torch\.bfloat16: .* both of k_new's dtype", k, b16[2],
                           kn, vn, lens)

    def test_head_dims_and_strides(self):
        self.expect(ValueError, r"k_cache's head dim is 72: an FP8 KV cache "
                                r"\(torch\.float8_e4m3fn\) takes head dims that are multiples "
                                r"of 16", *fp8_cache_args(d=72))
        self.expect(ValueError, r"v_cache's head dim is 40: an FP8 KV cache",
                    *fp8_cache_args(dv=40))
        kn, vn = fp8_new_rows(d=72)
        _, k, v, lens, _ = fp8_cache_args(d=72)
        self.expect_append(ValueError, r"k_cache's head dim is 72: an FP8 KV cache", k, v, kn, vn,
                           lens)
        q, k, v, lens, _ = fp8_cache_args()
        rows136 = FakeTensor(k.shape, dtype="torch.float8_e4m3fn",
                             strides=(300 * 136, 136, 64, 1))
        self.expect(ValueError, r"k_cache's sequence stride is 136 elements \(strides \(40800, "
                                r"136, 64, 1\)\): an FP8 KV cache \(torch\.float8_e4m3fn\) is read "
                                r"in 16-byte chunks, so every stride but the last must be a "
                                r"multiple of 16 elements", q, rows136, v, lens)
        self.expect(ValueError, r"v_cache's sequence stride is 136", q, k, rows136, lens)
        qp, kp, vp, lens_p, table = fp8_cache_args(paged=True)
        self.expect(ValueError, r"k_cache's page stride is 4104 elements", qp,
                    FakeTensor(kp.shape, dtype="torch.float8_e4m3fn",
                               strides=(4104, 256, 128, 1)), vp, lens_p, table)
        self.expect(ValueError, r"v_cache's head stride is 8 elements", qp, kp,
                    FakeTensor(vp.shape, dtype="torch.float8_e4m3fn", strides=(4096, 256, 8, 1)),
                    lens_p, table)
        kn, vn = fp8_new_rows()
        self.expect_append(ValueError, r"k_cache's sequence stride is 136", rows136, v, kn, vn,
                           lens)
        # A 16-bit cache takes strides of 8 elements; the new rows of an FP8 one too.
        _checks.check_decode(*decode_args()[:2], FakeTensor((3, 300, 2, 128),
                                                            strides=(300 * 136, 136, 64, 1)))
        _checks.check_kv_append(k, v, FakeTensor(kn.shape, strides=(1088, 136, 64, 1)), vn, lens)

    def test_bad_descales(self):
        q, k, v, lens, _ = fp8_cache_args()  # batch 3, 2 KV heads
        for kw, exc, pattern in (
                (dict(k_descale=0.5), TypeError, r"k_descale is a float: expected a "
                                                 r"torch\.float32 tensor, \(\) or \(1,\) \(per "
                                                 r"tensor\), \[num_heads_kv\]"),
                (dict(v_descale=descale(dtype="torch.bfloat16")), TypeError,
                 r"v_descale\.dtype is torch\.bfloat16: expected torch\.float32"),
                (dict(k_descale=descale(device="cpu")), ValueError,
                 r"k_descale is on cpu, q on cuda:0: they must be on one device \(the kernels "
                 r"read the factors\)"),
                (dict(k_descale=descale((3,))), ValueError,
                 r"k_descale is \(3,\): expected \(\) or \(1,\) \(one factor per tensor\), "
                 r"\(2,\), \[num_heads_kv\] \(one per key/value head\), or \(3, 2\), "
                 r"\[batch, num_heads_kv\]"),
                (dict(v_descale=descale((2, 3))), ValueError, r"v_descale is \(2, 3\): expected"),
                (dict(v_descale=descale((3, 2, 1))), ValueError, r"v_descale is \(3, 2, 1\)"),
                (dict(k_descale=descale((3, 2), strides=(-2, 1))), ValueError,
                 r"k_descale has strides \(-2, 1\): they must not be negative"),
                (dict(k_descale=descale((2,)), v_descale=descale((3, 2))), ValueError,
                 r"k_descale is \(2,\) \(strides \(1,\)\) and v_descale \(3, 2\) \(strides "
                 r"\(2, 1\)\): the C API takes one \(batch, head\) stride pair for both "
                 r"factors, so they must have the same shape and strides"),
                (dict(k_descale=descale(), v_descale=descale((2,))), ValueError,
                 r"one \(batch, head\) stride pair"),
                (dict(k_descale=descale((3, 2)), v_descale=descale((3, 2), strides=(1, 3))),
                 ValueError, r"k_descale is \(3, 2\) \(strides \(2, 1\)\) and v_descale "
                             r"\(3, 2\) \(strides \(1, 3\)\)")):
            self.expect(exc, pattern, q, k, v, lens, **kw)
        with self.assertRaisesRegex(ValueError, r"v_descale's data is not 4-byte aligned"):
            _checks.check_decode(q, k, v, lens, pointers=True,
                                 v_descale=descale((2,), ptr=0x7f0000000002))
        kn = fp8_new_rows()
        self.expect_append(ValueError, r"k_descale is on cpu, k_new on cuda:0", k, v, *kn, lens,
                           k_descale=descale(device="cpu"))
        self.expect_append(ValueError, r"one \(batch, head\) stride pair", k, v, *kn, lens,
                           k_descale=descale((3, 2)), v_descale=descale((2,)))
        with self.assertRaisesRegex(ValueError, r"k_descale's data is not 4-byte aligned"):
            _checks.check_kv_append(k, v, *kn, lens, pointers=True,
                                    k_descale=descale(ptr=0x7f0000000001))
        # A 16-bit cache takes no factors (they would be ignored).
        b16 = decode_args()
        for name in ("k_descale", "v_descale"):
            self.expect(ValueError, rf"{name} is given, but the KV cache is not FP8: "
                                    r"dequantization factors are for a torch\.float8_e4m3fn "
                                    r"k_cache and v_cache", *b16, **{name: descale()})
            self.expect_append(ValueError, rf"{name} is given, but the KV cache is not FP8",
                               b16[1], b16[2], *fp8_new_rows(), lens, **{name: descale()})


class Wheel(unittest.TestCase):
    """python/_flashjit_backend.py (the PEP 517 backend pip uses) builds a wheel with the
    standard library alone."""

    def test_build_wheel(self):
        import _flashjit_backend as backend
        self.assertEqual(backend.get_requires_for_build_wheel(), [])
        saved = os.environ.pop("FLASHJIT_BUNDLE_LIBRARY", None)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                name = backend.build_wheel(tmp)
                bundled = os.path.exists(os.path.join(PYTHON_DIR, "flashjit", "libflashjit.so"))
                self.assertRegex(name, rf"^flashjit-{re.escape(flashjit.__version__)}-py3-none-"
                                       rf"{'linux_[a-z0-9_]+' if bundled else 'any'}\.whl$")
                with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                    names = set(z.namelist())
                    for module in ("__init__", "_capi", "_checks", "_decode", "_ops",
                                   "_runtime"):
                        self.assertIn(f"flashjit/{module}.py", names)
                    record = z.read(f"flashjit-{flashjit.__version__}.dist-info/RECORD")
                    for line in record.decode().splitlines():
                        path, digest, size = line.rsplit(",", 2)
                        if not digest:
                            continue
                        data = z.read(path)
                        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
                        self.assertEqual(digest, "sha256=" + want.rstrip(b"=").decode(), path)
                        self.assertEqual(int(size), len(data), path)
                if not bundled:
                    os.environ["FLASHJIT_BUNDLE_LIBRARY"] = flashjit.library_path()
                    name = backend.build_wheel(tmp)
                    self.assertRegex(name, r"-py3-none-linux_[a-z0-9_]+\.whl$")
                    with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                        self.assertIn("flashjit/libflashjit.so", z.namelist())
        finally:
            os.environ.pop("FLASHJIT_BUNDLE_LIBRARY", None)
            if saved is not None:
                os.environ["FLASHJIT_BUNDLE_LIBRARY"] = saved


if __name__ == "__main__":
    warnings.simplefilter("default")
    unittest.main()
