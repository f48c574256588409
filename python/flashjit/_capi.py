"""The C API (include/flashjit/flashjit.h) through ctypes: the structs, field for
field, and the library, found without torch. Every call that fails raises
FlashJitError with the library's own message."""
import ctypes as C
import logging
import os

FJ_DTYPE_FP16, FJ_DTYPE_BF16 = 1, 2
FJ_DTYPE_E4M3 = 3  # FP8 q, k, v (0.7): the forward pass alone, o of desc.out_dtype; also
                   # a decode KV cache's type (0.12, desc.kv_cache_dtype)
# The package's dtype names (the kernel key's) as fj_dtype values.
DTYPES = {"fp16": FJ_DTYPE_FP16, "bf16": FJ_DTYPE_BF16, "e4m3": FJ_DTYPE_E4M3}
TUNE_MODES = {"auto": 0, "default": 1, "cached": 2, "heuristic": 3, "exhaustive": 4}
TUNE_MODE_NAMES = {v: k for k, v in TUNE_MODES.items()}
# fj_tune_lengths (0.5): the forward's shape buckets fj_kernel_get tunes
TUNE_LENGTHS = {"auto": 0, "hinted": 1, "ladder": 2}
ORIGINS = {1: "shipped cache", 2: "user cache", 3: "compiled now", 4: "tuned now",
           5: "system cache"}
STATUS_NAMES = {0: "FJ_SUCCESS", 1: "FJ_ERROR_INVALID_VALUE", 2: "FJ_ERROR_NOT_SUPPORTED",
                3: "FJ_ERROR_NO_DEVICE", 4: "FJ_ERROR_COMPILE", 5: "FJ_ERROR_CUDA",
                6: "FJ_ERROR_CACHE", 7: "FJ_ERROR_NOT_FOUND", 8: "FJ_ERROR_OUT_OF_MEMORY",
                9: "FJ_ERROR_INTERNAL"}
_STRIDES = ("batch", "seq", "head")


class FlashJitError(RuntimeError):
    """A C API call failed. `call` is the entry point, `status` its fj_status (an int),
    `status_name` e.g. "FJ_ERROR_INVALID_VALUE", `message` fj_last_error_message()."""

    def __init__(self, call, status, message):
        self.call, self.status, self.message = call, status, message
        self.status_name = STATUS_NAMES.get(status, f"status {status}")
        super().__init__(f"{call} failed with {self.status_name}: {message}")


# The log callback: void (*)(int level, const char *message, void *user_data).
LOG_CALLBACK = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)


class ContextOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("device", C.c_int32),
                ("user_cache_path", C.c_char_p), ("shipped_cache_paths", C.POINTER(C.c_char_p)),
                ("num_shipped_cache_paths", C.c_int32), ("tune_mode", C.c_int32),
                ("tuning_budget_seconds", C.c_double), ("log_callback", LOG_CALLBACK),
                ("log_user_data", C.c_void_p)]


class ContextInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("device", C.c_int32), ("tune_mode", C.c_int32),
                ("kernels_outstanding", C.c_int32), ("compilations", C.c_int32),
                ("tunes", C.c_int32), ("device_name", C.c_char_p), ("target", C.c_char_p),
                ("device_key", C.c_char_p), ("user_cache_path", C.c_char_p)]


# What user code (score_mod / mask_mod) sees as `args` (0.3).
MOD_ARGS = 4  # entries of each array


class ModArgs(C.Structure):
    _fields_ = [("tensor", C.c_void_p * MOD_ARGS), ("scalar", C.c_float * MOD_ARGS),
                ("integer", C.c_int32 * MOD_ARGS)]


class AttentionDesc(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("dtype", C.c_int32), ("head_dim", C.c_int32),
                ("head_dim_v", C.c_int32), ("causal", C.c_int32), ("num_heads_q", C.c_int32),
                ("num_heads_kv", C.c_int32), ("softmax_scale", C.c_float),
                ("seqlen_q_hint", C.c_int32), ("seqlen_k_hint", C.c_int32),
                ("batch_hint", C.c_int32), ("backward", C.c_int32),
                # attention features (0.3)
                ("window", C.c_int32), ("window_left", C.c_int32), ("window_right", C.c_int32),
                ("softcap", C.c_float), ("alibi", C.c_int32), ("score_mod", C.c_char_p),
                ("mask_mod", C.c_char_p), ("tuning_mod_args", C.POINTER(ModArgs)),
                # the decode kernels (0.4): fj_decode, fj_kv_append
                ("decode", C.c_int32),
                # one handle, every length (0.5): an fj_tune_lengths
                ("reserved_04", C.c_int32), ("tune_lengths", C.c_int32),
                # FP8 (0.7): 0.6's tail padding, then o's type for FJ_DTYPE_E4M3 inputs
                ("reserved_06", C.c_int32), ("out_dtype", C.c_int32),
                # FP8 KV cache (0.12): 0.7's tail padding, then the decode cache's type
                ("reserved_07", C.c_int32), ("kv_cache_dtype", C.c_int32),
                ("reserved_12", C.c_int32)]


class ForwardArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("q", C.c_void_p), ("k", C.c_void_p),
                ("v", C.c_void_p), ("o", C.c_void_p), ("lse", C.c_void_p),
                ("batch", C.c_int32), ("seqlen_q", C.c_int32), ("seqlen_k", C.c_int32)] + \
               [(f"{t}_{s}_stride", C.c_int64) for t in "qkvo" for s in _STRIDES] + \
               [("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p),
                ("total_q", C.c_int64), ("total_k", C.c_int64),
                # attention features (0.3)
                ("alibi_slopes", C.c_void_p), ("alibi_batch_stride", C.c_int64),
                ("mod_args", ModArgs),
                # a block mask of this kernel (0.6): an fj_block_mask handle, or NULL
                ("block_mask", C.c_void_p),
                # FP8 (0.7): dequantization factors and the workspace for v transposed
                ("q_descale", C.c_void_p), ("k_descale", C.c_void_p), ("v_descale", C.c_void_p),
                ("descale_batch_stride", C.c_int64), ("descale_head_stride", C.c_int64),
                ("workspace", C.c_void_p), ("workspace_bytes", C.c_size_t)]


# fj_block_mask_options (0.6): what a block mask may share.
class BlockMaskOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("shared_across_batch", C.c_int32),
                ("shared_across_heads", C.c_int32)]


BACKWARD_TENSORS = ("q", "k", "v", "o", "dout", "dq", "dk", "dv")


class BackwardArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t)] + \
               [(n, C.c_void_p) for n in ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv")] + \
               [("batch", C.c_int32), ("seqlen_q", C.c_int32), ("seqlen_k", C.c_int32)] + \
               [(f"{t}_{s}_stride", C.c_int64) for t in BACKWARD_TENSORS for s in _STRIDES] + \
               [("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p),
                ("total_q", C.c_int64), ("total_k", C.c_int64), ("deterministic", C.c_int32),
                ("workspace", C.c_void_p), ("workspace_bytes", C.c_size_t),
                # Features (0.9; zero for an older library, which then accepts the size).
                ("alibi_slopes", C.c_void_p), ("alibi_batch_stride", C.c_int64),
                ("mod_args", ModArgs),
                # The forward's block mask (0.10; NULL for an older library).
                ("block_mask", C.c_void_p)]


# Decode over a KV cache (0.4): fj_decode_args and fj_kv_append_args. The cache's strides
# are (page, row, head): the page stride is the batch stride of a contiguous cache.
_CACHE_STRIDES = ("page", "row", "head")
# An FP8 cache's factors (0.12), at the end of the decode and append args.
_FP8_CACHE_FIELDS = [("k_descale", C.c_void_p), ("v_descale", C.c_void_p),
                     ("descale_batch_stride", C.c_int64), ("descale_head_stride", C.c_int64)]


class DecodeArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t)] + \
               [(n, C.c_void_p) for n in ("q", "k_cache", "v_cache", "o", "lse", "block_table",
                                          "cache_seqlens")] + \
               [(n, C.c_int32) for n in ("batch", "seqlen_q", "seqlen_k", "page_size",
                                         "num_pages", "table_stride")] + \
               [(f"q_{s}_stride", C.c_int64) for s in _STRIDES] + \
               [(f"{t}_{s}_stride", C.c_int64) for t in "kv" for s in _CACHE_STRIDES] + \
               [(f"o_{s}_stride", C.c_int64) for s in _STRIDES] + \
               [("num_splits", C.c_int32), ("workspace", C.c_void_p),
                ("workspace_bytes", C.c_size_t)] + _FP8_CACHE_FIELDS + \
               [("alibi_slopes", C.c_void_p), ("alibi_batch_stride", C.c_int64)] + \
               [("mod_args", ModArgs)]  # 0.13's ALiBi, 0.14's user code


class KvAppendArgs(C.Structure):
    _fields_ = [("struct_size", C.c_size_t)] + \
               [(n, C.c_void_p) for n in ("k_cache", "v_cache", "block_table", "cache_seqlens")] + \
               [(n, C.c_int32) for n in ("batch", "seqlen_k", "page_size", "num_pages",
                                         "table_stride")] + \
               [(f"{t}_{s}_stride", C.c_int64) for t in "kv" for s in _CACHE_STRIDES] + \
               [("k_new", C.c_void_p), ("v_new", C.c_void_p), ("new_len", C.c_int32)] + \
               [(f"{t}_new_{s}_stride", C.c_int64) for t in "kv" for s in _STRIDES] + \
               _FP8_CACHE_FIELDS


class KernelInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("family", C.c_char_p), ("spec_key", C.c_char_p),
                ("device_key", C.c_char_p), ("num_variants", C.c_int32),
                ("primary_variant", C.c_int32), ("compiled_now", C.c_int32),
                ("origin", C.c_int32), ("block_m", C.c_int32), ("block_n", C.c_int32),
                ("warps", C.c_int32), ("stages", C.c_int32), ("registers", C.c_int32),
                ("shared_bytes", C.c_int32), ("tuned_us", C.c_double), ("get_ms", C.c_double),
                ("backward_family", C.c_char_p), ("num_backward_variants", C.c_int32),
                ("decode_family", C.c_char_p), ("num_decode_variants", C.c_int32),  # 0.4
                ("forward_calls", C.c_int64), ("forward_calls_untuned", C.c_int64),
                ("last_untuned_bucket", C.c_char * 40)]  # 0.5


class VariantInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("bucket", C.c_char_p), ("tile", C.c_char_p),
                ("binary_key", C.c_char_p), ("binary_key_text", C.c_char_p),
                ("tuning_key", C.c_char_p), ("note", C.c_char_p),
                ("bucket_seqlen_q", C.c_int32), ("bucket_seqlen_k", C.c_int32),
                ("bucket_batch_heads", C.c_int32), ("origin", C.c_int32),
                ("block_m", C.c_int32), ("block_n", C.c_int32), ("warps", C.c_int32),
                ("stages", C.c_int32), ("registers", C.c_int32), ("shared_bytes", C.c_int32),
                ("tuned_us", C.c_double), ("calls", C.c_int64),  # calls: 0.5
                ("num_splits", C.c_int32)]  # 0.8


class DispatchInfo(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("variant", C.c_int32), ("tuned", C.c_int32),
                ("bucket_seqlen_q", C.c_int32), ("bucket_seqlen_k", C.c_int32),
                ("bucket_batch_heads", C.c_int32), ("bucket", C.c_char * 40)]


# Every struct the package passes, with the C name (tests/python compares the layouts).
STRUCTS = {"fj_context_options": ContextOptions, "struct fj_context_info": ContextInfo,
           "fj_attention_desc": AttentionDesc, "fj_forward_args": ForwardArgs,
           "fj_backward_args": BackwardArgs, "struct fj_kernel_info": KernelInfo,
           "fj_variant_info": VariantInfo, "fj_mod_args": ModArgs,
           "fj_decode_args": DecodeArgs, "fj_kv_append_args": KvAppendArgs,
           "fj_dispatch_info": DispatchInfo, "fj_block_mask_options": BlockMaskOptions}


def _candidates():
    """Where libflashjit.so may be, in order: $FLASHJIT_LIBRARY (alone: a path that
    does not load is an error, not a reason to pick another copy), a copy bundled in
    the package, the repository's build tree, the system loader."""
    env = os.environ.get("FLASHJIT_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libflashjit.so", "libflashjit.so.0"):
        if os.path.exists(os.path.join(here, name)):
            yield os.path.join(here, name)
    repo = os.path.dirname(os.path.dirname(here))  # python/flashjit -> repository
    for where in (("build", "api"), (".gpu",)):
        path = os.path.join(repo, *where, "libflashjit.so")
        if os.path.exists(path):
            yield path
    yield "libflashjit.so.0"  # the installed SONAME (cmake --install), on the loader's path
    yield "libflashjit.so"


_REQUIRED = {
    "fj_context_create": (lambda: [C.POINTER(ContextOptions), C.POINTER(C.c_void_p)]),
    "fj_context_destroy": (lambda: [C.c_void_p]),
    "fj_context_info": (lambda: [C.c_void_p, C.POINTER(ContextInfo)]),
    "fj_kernel_get": (lambda: [C.c_void_p, C.POINTER(AttentionDesc), C.POINTER(C.c_void_p)]),
    "fj_kernel_release": (lambda: [C.c_void_p]),
    "fj_kernel_info": (lambda: [C.c_void_p, C.POINTER(KernelInfo)]),
    "fj_kernel_variant_info": (lambda: [C.c_void_p, C.c_int32, C.POINTER(VariantInfo)]),
    "fj_forward_dispatch_info": (lambda: [C.c_void_p, C.POINTER(ForwardArgs),
                                          C.POINTER(DispatchInfo)]),
    "fj_kernel_source": (lambda: [C.c_void_p, C.c_int32, C.POINTER(C.c_char_p),
                                  C.POINTER(C.c_size_t)]),
    "fj_forward": (lambda: [C.c_void_p, C.POINTER(ForwardArgs), C.c_void_p]),
    "fj_validate_attention_desc": (lambda: [C.POINTER(AttentionDesc)]),
    "fj_validate_forward_args": (lambda: [C.POINTER(AttentionDesc), C.POINTER(ForwardArgs)]),
}
# The backward pass (0.2): optional, so that a library without it still serves the forward.
_BACKWARD = {
    "fj_backward": (lambda: [C.c_void_p, C.POINTER(BackwardArgs), C.c_void_p]),
    "fj_backward_workspace_size": (lambda: [C.c_void_p, C.POINTER(BackwardArgs),
                                            C.POINTER(C.c_size_t)]),
    "fj_validate_backward_args": (lambda: [C.POINTER(AttentionDesc), C.POINTER(BackwardArgs)]),
}
# Decode over a KV cache (0.4): optional too, so that an older library still serves the rest.
_DECODE = {
    "fj_decode": (lambda: [C.c_void_p, C.POINTER(DecodeArgs), C.c_void_p]),
    "fj_decode_workspace_size": (lambda: [C.c_void_p, C.POINTER(DecodeArgs),
                                          C.POINTER(C.c_size_t)]),
    "fj_validate_decode_args": (lambda: [C.POINTER(AttentionDesc), C.POINTER(DecodeArgs)]),
    "fj_kv_append": (lambda: [C.c_void_p, C.POINTER(KvAppendArgs), C.c_void_p]),
    "fj_validate_kv_append_args": (lambda: [C.POINTER(AttentionDesc),
                                            C.POINTER(KvAppendArgs)]),
}
# FP8 (0.7): the workspace an FP8 call needs; optional too (a library without it has no
# FJ_DTYPE_E4M3 either).
_FP8 = {
    "fj_forward_workspace_size": (lambda: [C.c_void_p, C.POINTER(ForwardArgs),
                                           C.POINTER(C.c_size_t)]),
}
# Block masks for mask_mod kernels (0.6): optional too.
_BLOCK_MASK = {
    "fj_block_mask_create": (lambda: [C.c_void_p, C.POINTER(ForwardArgs),
                                      C.POINTER(BlockMaskOptions), C.c_void_p,
                                      C.POINTER(C.c_void_p)]),
    "fj_block_mask_update": (lambda: [C.c_void_p, C.POINTER(ForwardArgs), C.c_void_p]),
    "fj_block_mask_destroy": (lambda: [C.c_void_p]),
}


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
        if self.path in ("libflashjit.so.0", "libflashjit.so"):
            self.path = _loaded_path(self.lib) or self.path
        L = self.lib
        missing = [name for name in ["fj_last_error_message", "fj_version", "fj_status_string",
                                     *_REQUIRED] if not hasattr(L, name)]
        if missing:
            raise ImportError(f"flashjit: {self.path} lacks {', '.join(missing)}: not a "
                              f"libflashjit.so this package can use")
        L.fj_last_error_message.restype = C.c_char_p
        L.fj_last_error_message.argtypes = []
        L.fj_version.restype = C.c_char_p
        L.fj_version.argtypes = []
        L.fj_status_string.restype = C.c_char_p
        L.fj_status_string.argtypes = [C.c_int]
        for name, args in _REQUIRED.items():
            fn = getattr(L, name)
            fn.argtypes, fn.restype = args(), C.c_int
        self.has_backward = all(hasattr(L, name) for name in _BACKWARD)
        if self.has_backward:
            for name, args in _BACKWARD.items():
                fn = getattr(L, name)
                fn.argtypes, fn.restype = args(), C.c_int
        # The backward pass with attention features (0.9): a version check, since the
        # entry points are the same.
        self.has_feature_backward = self.has_backward and _version_tuple(
            L.fj_version().decode()) >= (0, 9)
        # Block masks that also hold the backward pass's block sparsity (0.10).
        self.has_backward_block_mask = self.has_feature_backward and _version_tuple(
            L.fj_version().decode()) >= (0, 10)
        self.has_decode = all(hasattr(L, name) for name in _DECODE)
        if self.has_decode:
            for name, args in _DECODE.items():
                fn = getattr(L, name)
                fn.argtypes, fn.restype = args(), C.c_int
        self.has_block_mask = all(hasattr(L, name) for name in
                                  [*_BLOCK_MASK, "fj_block_mask_options_init"])
        if self.has_block_mask:
            for name, args in _BLOCK_MASK.items():
                fn = getattr(L, name)
                fn.argtypes, fn.restype = args(), C.c_int
            L.fj_block_mask_options_init.argtypes = [C.POINTER(BlockMaskOptions)]
            L.fj_block_mask_options_init.restype = None
        self.has_fp8 = all(hasattr(L, name) for name in _FP8)
        # An FP8 KV cache for the decode kernels (0.12, desc.kv_cache_dtype and the
        # factors of fj_decode_args / fj_kv_append_args): a version check, since the entry
        # points are the same.
        self.has_fp8_kv_cache = self.has_decode and _version_tuple(
            L.fj_version().decode()) >= (0, 12)
        # The decode kernels with a window and softcap (0.13: desc.decode accepts them).
        self.has_decode_features = self.has_decode and _version_tuple(
            L.fj_version().decode()) >= (0, 13)
        # ... and with the user's score_mod and mask_mod (0.14: fj_decode_args.mod_args).
        self.has_decode_mods = self.has_decode and _version_tuple(
            L.fj_version().decode()) >= (0, 14)
        if self.has_fp8:
            for name, args in _FP8.items():
                fn = getattr(L, name)
                fn.argtypes, fn.restype = args(), C.c_int

    def check(self, call, status):
        if status != 0:
            raise FlashJitError(call, status, self.lib.fj_last_error_message().decode())

    def version(self):
        return self.lib.fj_version().decode()


def _loaded_path(lib):
    """The file the system loader picked for `lib` (from /proc/self/maps; Linux)."""
    try:
        address = C.cast(lib.fj_version, C.c_void_p).value
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= address < hi and len(parts) >= 6:
                    return parts[5]
    except (OSError, ValueError, AttributeError):
        pass
    return None


_library = None


def library():
    """The loaded library (loaded on first use; ImportError when none can be)."""
    global _library
    if _library is None:
        _library = Library()
    return _library


def _version_tuple(text):
    """(major, minor) of a version string such as "0.9.0"; (0, 0) if it is not one."""
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return 0, 0


def new(struct, **fields):
    """A struct with struct_size set and the given fields (the rest zero, as the C
    *_init functions leave them)."""
    s = struct(struct_size=C.sizeof(struct))
    for name, value in fields.items():
        setattr(s, name, value)
    return s


def mod_args(pointers=(), scalars=(), integers=()):
    """An fj_mod_args of device pointers (ints), floats and ints; what is not given is 0."""
    m = ModArgs()
    for i, p in enumerate(pointers):
        m.tensor[i] = p or None
    for i, x in enumerate(scalars):
        m.scalar[i] = x
    for i, n in enumerate(integers):
        m.integer[i] = n
    return m


# ---- the library's log, into Python's logging --------------------------------------
logger = logging.getLogger("flashjit")
_LEVELS = {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}


def _log(level, message, user_data):
    try:
        logger.log(_LEVELS.get(level, logging.INFO), "%s", message.decode(errors="replace"))
    except Exception:  # never let an exception cross into C
        pass


# Kept alive for the life of the process: contexts hold the pointer.
log_callback = LOG_CALLBACK(_log)


def _text(value):
    return value.decode(errors="replace") if value else ""


def struct_dict(s):
    """A ctypes struct's fields as a dict (strings decoded), struct_size left out."""
    out = {}
    for name, _ in s._fields_:
        if name == "struct_size":
            continue
        value = getattr(s, name)
        out[name] = _text(value) if isinstance(value, bytes) or value is None else value
    return out
