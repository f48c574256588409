"""The C API (include/flashjit/flashjit.h) through ctypes: the structs, field for
field, and the library, found without torch. Every call that fails raises
FlashJitError with the library's own message."""
import ctypes as C
import os

FJ_DTYPE_FP16, FJ_DTYPE_BF16 = 1, 2
TUNE_MODES = {"auto": 0, "default": 1, "cached": 2, "heuristic": 3, "exhaustive": 4}
_STRIDES = ("batch", "seq", "head")


class FlashJitError(RuntimeError):
    """A C API call failed: `status` is its fj_status, the text its message."""

    def __init__(self, call, status, message):
        super().__init__(f"{call}: {message} (status {status})")
        self.call, self.status, self.message = call, status, message


class ContextOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("device", C.c_int32),
                ("user_cache_path", C.c_char_p), ("shipped_cache_paths", C.POINTER(C.c_char_p)),
                ("num_shipped_cache_paths", C.c_int32), ("tune_mode", C.c_int32),
                ("tuning_budget_seconds", C.c_double), ("log_callback", C.c_void_p),
                ("log_user_data", C.c_void_p)]


class ContextInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("device", C.c_int32), ("tune_mode", C.c_int32),
                ("kernels_outstanding", C.c_int32), ("compilations", C.c_int32),
                ("tunes", C.c_int32), ("device_name", C.c_char_p), ("target", C.c_char_p),
                ("device_key", C.c_char_p), ("user_cache_path", C.c_char_p)]


class AttentionDesc(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("dtype", C.c_int32), ("head_dim", C.c_int32),
                ("head_dim_v", C.c_int32), ("causal", C.c_int32), ("num_heads_q", C.c_int32),
                ("num_heads_kv", C.c_int32), ("softmax_scale", C.c_float),
                ("seqlen_q_hint", C.c_int32), ("seqlen_k_hint", C.c_int32),
                ("batch_hint", C.c_int32), ("backward", C.c_int32)]


class ForwardArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("q", C.c_void_p), ("k", C.c_void_p),
                ("v", C.c_void_p), ("o", C.c_void_p), ("lse", C.c_void_p),
                ("batch", C.c_int32), ("seqlen_q", C.c_int32), ("seqlen_k", C.c_int32)] + \
               [(f"{t}_{s}_stride", C.c_int64) for t in "qkvo" for s in _STRIDES] + \
               [("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p),
                ("total_q", C.c_int64), ("total_k", C.c_int64)]


BACKWARD_TENSORS = ("q", "k", "v", "o", "dout", "dq", "dk", "dv")


class BackwardArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t)] + \
               [(n, C.c_void_p) for n in ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv")] + \
               [("batch", C.c_int32), ("seqlen_q", C.c_int32), ("seqlen_k", C.c_int32)] + \
               [(f"{t}_{s}_stride", C.c_int64) for t in BACKWARD_TENSORS for s in _STRIDES] + \
               [("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p),
                ("total_q", C.c_int64), ("total_k", C.c_int64), ("deterministic", C.c_int32),
                ("workspace", C.c_void_p), ("workspace_bytes", C.c_size_t)]


class KernelInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("family", C.c_char_p), ("spec_key", C.c_char_p),
                ("device_key", C.c_char_p), ("num_variants", C.c_int32),
                ("primary_variant", C.c_int32), ("compiled_now", C.c_int32),
                ("origin", C.c_int32), ("block_m", C.c_int32), ("block_n", C.c_int32),
                ("warps", C.c_int32), ("stages", C.c_int32), ("registers", C.c_int32),
                ("shared_bytes", C.c_int32), ("tuned_us", C.c_double), ("get_ms", C.c_double),
                ("backward_family", C.c_char_p), ("num_backward_variants", C.c_int32)]


def _candidates():
    """Where libflashjit.so may be, in order."""
    env = os.environ.get("FLASHJIT_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith("libflashjit.so"):
            yield os.path.join(here, name)
    repo = os.path.dirname(os.path.dirname(here))  # python/flashjit -> repository
    yield os.path.join(repo, "build", "api", "libflashjit.so")
    yield os.path.join(repo, ".gpu", "libflashjit.so")
    yield "libflashjit.so.0"


class Library:
    """libflashjit.so with its signatures declared."""

    def __init__(self):
        tried = []
        self.lib = None
        for path in _candidates():
            try:
                self.lib = C.CDLL(path)
                self.path = path
                break
            except OSError as ex:
                tried.append(f"{path} ({ex})")
        if self.lib is None:
            raise ImportError("flashjit: cannot load libflashjit.so; build it with CMake "
                              "(README.md) or set FLASHJIT_LIBRARY to its path. Tried: " +
                              "; ".join(tried))
        L = self.lib
        L.fj_last_error_message.restype = C.c_char_p
        L.fj_version.restype = C.c_char_p
        L.fj_status_string.restype = C.c_char_p
        for name, args in {
                "fj_context_create": [C.POINTER(ContextOptions), C.POINTER(C.c_void_p)],
                "fj_context_destroy": [C.c_void_p],
                "fj_context_info": [C.c_void_p, C.POINTER(ContextInfo)],
                "fj_kernel_get": [C.c_void_p, C.POINTER(AttentionDesc), C.POINTER(C.c_void_p)],
                "fj_kernel_release": [C.c_void_p],
                "fj_kernel_info": [C.c_void_p, C.POINTER(KernelInfo)],
                "fj_forward": [C.c_void_p, C.POINTER(ForwardArgs), C.c_void_p],
                "fj_validate_attention_desc": [C.POINTER(AttentionDesc)],
                "fj_validate_forward_args": [C.POINTER(AttentionDesc), C.POINTER(ForwardArgs)]}.items():
            fn = getattr(L, name)
            fn.argtypes, fn.restype = args, C.c_int
        # The backward pass (0.2): optional, so an older library still serves the forward.
        self.has_backward = hasattr(L, "fj_backward")
        if self.has_backward:
            for name, args in {
                    "fj_backward": [C.c_void_p, C.POINTER(BackwardArgs), C.c_void_p],
                    "fj_backward_workspace_size": [C.c_void_p, C.POINTER(BackwardArgs),
                                                   C.POINTER(C.c_size_t)],
                    "fj_validate_backward_args": [C.POINTER(AttentionDesc),
                                                  C.POINTER(BackwardArgs)]}.items():
                fn = getattr(L, name)
                fn.argtypes, fn.restype = args, C.c_int

    def check(self, call, status):
        if status != 0:
            raise FlashJitError(call, status, self.lib.fj_last_error_message().decode())

    def version(self):
        return self.lib.fj_version().decode()


_library = None


def library():
    global _library
    if _library is None:
        _library = Library()
    return _library


def new(struct, **fields):
    """A struct with struct_size set and the given fields."""
    s = struct(struct_size=C.sizeof(struct))
    for name, value in fields.items():
        setattr(s, name, value)
    return s
