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
                (dict(backward=1, alibi=1), 2, "(desc->alibi): the backward pass does not "
                                              "support attention features yet")):
            d = self.desc(**fields)
            self.assertEqual(L.fj_validate_attention_desc(C.byref(d)), status, fields)
            self.assertIn(expected, message())
        tuning = _capi.mod_args([0x7f0000000000], [1.5], [3])
        d = self.desc(window=1, window_left=128, window_right=0, softcap=30.0, alibi=1,
                      score_mod=b"return score;", mask_mod=b"return true;",
                      tuning_mod_args=C.pointer(tuning))
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

    def fj_kernel_get(self, ctx, desc_ref, handle_ref):
        d = desc_ref._obj
        tuning = d.tuning_mod_args.contents.scalar[0] if d.tuning_mod_args else None
        self.got.append(dict(window=(d.window, d.window_left, d.window_right),
                             softcap=d.softcap, alibi=d.alibi, score_mod=d.score_mod,
                             mask_mod=d.mask_mod, backward=d.backward, tuning=tuning))
        handle_ref._obj.value = 0x1000 + 16 * len(self.got)
        return 0

    def fj_kernel_info(self, handle, info_ref):
        return 0

    def fj_kernel_release(self, handle):
        return 0


class FeatureKernels(unittest.TestCase):
    """_runtime.kernel with features: they go into the description, and they (the user
    code's text included) are part of what picks the cached handle."""

    def setUp(self):
        self.saved = (_capi._library, _runtime.context, dict(_runtime._kernels))
        self.fake = FakeKernelLibrary()
        real = _capi.library()
        _capi._library = type("L", (), dict(lib=self.fake, has_backward=True,
                                             check=real.check.__func__,
                                             version=lambda self: "fake"))()
        _runtime.context = lambda device: (("fake", device), C.c_void_p(1))

    def tearDown(self):
        _capi._library, _runtime.context = self.saved[0], self.saved[1]
        _runtime._kernels.clear()
        _runtime._kernels.update(self.saved[2])

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

    def test_backward_with_features_is_refused(self):
        with self.assertRaisesRegex(NotImplementedError,
                                    r"backward pass does not support attention features "
                                    r"yet \(window, mask_mod\)"):
            self.get(_checks.check_features(window=(8, 0), mask_mod="return true;"),
                     backward=True)
        self.assertEqual(self.fake.got, [])
        self.get(backward=True)  # the plain description still gets its backward pass
        self.assertEqual(self.fake.got[-1]["backward"], 1)


class Settings(unittest.TestCase):
    def setUp(self):
        self.saved = dict(_runtime.settings)

    def tearDown(self):
        _runtime.settings.clear()
        _runtime.settings.update(self.saved)

    def test_configure(self):
        s = flashjit.configure(tune_mode="heuristic", cache_path="/tmp/x.sqlite", budget_s=7)
        self.assertEqual(s, dict(tune_mode="heuristic", cache_path="/tmp/x.sqlite",
                                 budget_s=7.0))
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
        self.assertEqual(_runtime.settings, self.saved)  # nothing half-applied

    def test_tuning_nests_and_restores(self):
        flashjit.configure(tune_mode="default")
        with flashjit.tuning(budget_s=5) as outer:
            self.assertEqual(outer["budget_s"], 5.0)
            self.assertEqual(_runtime.current_settings()["tune_mode"], "default")
            with flashjit.tuning(tune_mode="cached"):
                self.assertEqual(_runtime.current_settings(),
                                 dict(tune_mode="cached", cache_path=None, budget_s=5.0))
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
                    for module in ("__init__", "_capi", "_checks", "_ops", "_runtime"):
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
