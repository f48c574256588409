/* Compiled as strict C99 (-std=c99 -pedantic-errors) in every build: the public
 * header must stay plain C, free of C++ and CUDA types. */
#include "flashjit/flashjit.h"

/* Every versioned struct starts with struct_size (negative array size otherwise). */
typedef char fj_check_context_options[offsetof(fj_context_options, struct_size) == 0 ? 1 : -1];
typedef char fj_check_desc[offsetof(fj_attention_desc, struct_size) == 0 ? 1 : -1];
typedef char fj_check_args[offsetof(fj_forward_args, struct_size) == 0 ? 1 : -1];
typedef char fj_check_backward_args[offsetof(fj_backward_args, struct_size) == 0 ? 1 : -1];
typedef char fj_check_decode_args[offsetof(fj_decode_args, struct_size) == 0 ? 1 : -1];
typedef char fj_check_kv_append_args[offsetof(fj_kv_append_args, struct_size) == 0 ? 1 : -1];
typedef char fj_check_kernel_info[offsetof(struct fj_kernel_info, struct_size) == 0 ? 1 : -1];
typedef char fj_check_context_info[offsetof(struct fj_context_info, struct_size) == 0 ? 1 : -1];
typedef char fj_check_variant_info[offsetof(fj_variant_info, struct_size) == 0 ? 1 : -1];
/* fj_mod_args (0.3) is embedded, not versioned: its C layout is the kernels' FjModArgs
 * (api/validate.cpp checks it against that in C++), with no padding on any ABI. */
typedef char fj_check_mod_args[sizeof(fj_mod_args) == 4 * sizeof(void *) + 8 * 4 ? 1 : -1];
/* 0.6: block masks. The options are versioned; the handle is an opaque pointer, and
 * fj_forward_args.block_mask ends 0.6's struct (a 0.5 caller's struct_size ends before it). */
typedef char fj_check_block_mask_options[
    offsetof(fj_block_mask_options, struct_size) == 0 ? 1 : -1];
typedef char fj_check_block_mask_handle[sizeof(fj_block_mask) == sizeof(void *) ? 1 : -1];
/* 0.7: FP8. The descale factors and the workspace follow block_mask, and
 * workspace_bytes ends the struct; out_dtype ends fj_attention_desc. */
typedef char fj_check_args_fp8_after_block_mask[
    offsetof(fj_forward_args, q_descale) == offsetof(fj_forward_args, block_mask) + sizeof(fj_block_mask) ? 1 : -1];
typedef char fj_check_args_workspace_last[
    offsetof(fj_forward_args, workspace_bytes) + sizeof(size_t) == sizeof(fj_forward_args) ? 1 : -1];
/* 0.12: kv_cache_dtype follows 0.7's tail padding (reserved_07), so that a 0.7 caller's
 * sizeof ends before it, and ends fj_attention_desc before its own padding; the FP8
 * cache's factors end fj_decode_args and fj_kv_append_args. */
typedef char fj_check_desc_kv_cache_dtype_after_07[
    offsetof(fj_attention_desc, kv_cache_dtype) == offsetof(fj_attention_desc, out_dtype) + 8 ? 1 : -1];
typedef char fj_check_desc_kv_cache_dtype_last[  /* then 4 bytes of tail padding */
    offsetof(fj_attention_desc, kv_cache_dtype) + 2 * sizeof(int32_t) == sizeof(fj_attention_desc) ? 1 : -1];
typedef char fj_check_decode_args_descale_after_workspace[
    offsetof(fj_decode_args, k_descale) == offsetof(fj_decode_args, workspace_bytes) + sizeof(size_t) ? 1 : -1];
/* 0.13: ALiBi's slopes end fj_decode_args, after the FP8 cache's factors. */
typedef char fj_check_decode_args_alibi_after_descale[
    offsetof(fj_decode_args, alibi_slopes) == offsetof(fj_decode_args, descale_head_stride) + sizeof(int64_t) ? 1 : -1];
/* 0.14: the user code's args end fj_decode_args, after ALiBi's slopes. */
typedef char fj_check_decode_args_mod_args_after_alibi[
    offsetof(fj_decode_args, mod_args) ==
    offsetof(fj_decode_args, alibi_batch_stride) + sizeof(int64_t) ? 1 : -1];
typedef char fj_check_decode_args_mod_args_last[
    offsetof(fj_decode_args, mod_args) + sizeof(fj_mod_args) == sizeof(fj_decode_args) ? 1 : -1];
typedef char fj_check_kv_append_args_descale_last[
    offsetof(fj_kv_append_args, descale_head_stride) + sizeof(int64_t) == sizeof(fj_kv_append_args) ? 1 : -1];
/* ... past 0.6's tail padding (reserved_06), so that a 0.6 caller's sizeof ends before it. */
typedef char fj_check_desc_out_dtype_after_06[
    offsetof(fj_attention_desc, out_dtype) == offsetof(fj_attention_desc, tune_lengths) + 8 ? 1 : -1];
