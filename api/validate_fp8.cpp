// The FP8 (e4m3) parts of a description and of forward arguments: the output type,
// what FP8 kernels do not take yet, and the descale factors and workspace of a call.
#include "api/validate.h"
#include "api/validate_tensor.h"

#include "generator/emit.h"
#include "support/error.h"

namespace flashjit::api {

llvm::Error checkFp8Desc(const fj_attention_desc &d, AttentionDesc &out) {
  if (d.dtype != FJ_DTYPE_E4M3) {
    if (d.out_dtype != 0 && d.out_dtype != d.dtype)
      return makeError(ErrorCode::InvalidValue,
                       "desc->out_dtype is {0}: with a 16-bit dtype o has the dtype ({1}); "
                       "leave it 0",
                       d.out_dtype, d.dtype);
    out.outDtype = out.dtype;
    return llvm::Error::success();
  }
  if (d.out_dtype != 0 && d.out_dtype != FJ_DTYPE_BF16 && d.out_dtype != FJ_DTYPE_FP16)
    return makeError(ErrorCode::InvalidValue,
                     "desc->out_dtype is {0}: FP8 (FJ_DTYPE_E4M3) writes o as FJ_DTYPE_BF16 "
                     "({1}, the default for 0) or FJ_DTYPE_FP16 ({2})",
                     d.out_dtype, (int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16);
  out.outDtype = d.out_dtype == FJ_DTYPE_FP16 ? FJ_DTYPE_FP16 : FJ_DTYPE_BF16;
  const std::string unsupported =
      out.features.any() ? "attention features (" + featureFields(out.features) + ")"
      : out.backward     ? "desc->backward"
      : out.decode       ? "desc->decode"
                         : "";
  if (!unsupported.empty())
    return makeError(ErrorCode::NotSupported,
                     "FP8 (FJ_DTYPE_E4M3) does not take {0} yet: the FP8 kernel is the "
                     "forward pass alone",
                     unsupported);
  return llvm::Error::success();
}

llvm::Error checkDescaleFactors(
    std::initializer_list<std::pair<const char *, const float *>> factors,
    int64_t batchStride, int64_t headStride) {
  for (auto [field, ptr] : factors)
    if (llvm::Error error = checkAligned(field, ptr, 4))
      return error;
  for (auto [field, stride] : {std::pair{"descale_batch_stride", batchStride},
                               std::pair{"descale_head_stride", headStride}})
    if (stride < 0 || stride > (INT64_C(1) << 40))
      return makeError(ErrorCode::InvalidValue, "args->{0} is {1}: must be from 0 to 2^40",
                       field, stride);
  return llvm::Error::success();
}

llvm::Error checkKvCacheDtype(const fj_attention_desc &d, AttentionDesc &out) {
  // An FP8 description has no decode kernels (checkFp8Desc): its cache type is moot, but
  // never the FP8 cache's.
  out.kvCacheDtype = out.dtype == FJ_DTYPE_E4M3 ? out.outDtype : out.dtype;
  if (d.kv_cache_dtype == 0 || (d.kv_cache_dtype == d.dtype && d.dtype != FJ_DTYPE_E4M3))
    return llvm::Error::success();
  if (d.kv_cache_dtype != FJ_DTYPE_E4M3)
    return makeError(ErrorCode::InvalidValue,
                     "desc->kv_cache_dtype is {0}: expected 0 (the dtype's cache), the dtype "
                     "({1}) or FJ_DTYPE_E4M3 ({2})",
                     d.kv_cache_dtype, d.dtype, (int)FJ_DTYPE_E4M3);
  if (d.dtype == FJ_DTYPE_E4M3)
    return makeError(ErrorCode::NotSupported,
                     "desc->kv_cache_dtype is FJ_DTYPE_E4M3 with an FP8 dtype: an FP8 cache "
                     "is read by the decode kernels, whose q and o are 16-bit (dtype "
                     "FJ_DTYPE_BF16 or FJ_DTYPE_FP16)");
  if (!out.decode)
    return makeError(ErrorCode::InvalidValue,
                     "desc->kv_cache_dtype is FJ_DTYPE_E4M3 but desc->decode is 0: the cache's "
                     "type is the decode kernels' (set desc->decode)");
  if (out.headDim % 16 != 0 || out.headDimV % 16 != 0)
    return makeError(ErrorCode::NotSupported,
                     "desc->kv_cache_dtype is FJ_DTYPE_E4M3 with head_dim {0} and head_dim_v "
                     "{1}: an FP8 cache takes head dims that are multiples of 16 (rows of "
                     "16-byte chunks)",
                     out.headDim, out.headDimV);
  out.kvCacheDtype = FJ_DTYPE_E4M3;
  return llvm::Error::success();
}

namespace {
// The FP8 kernels load q, k and v by TMA in bytes: every stride a multiple of 16 from 0
// to below 2^39 (tuner::fp8ArgumentProblem's rule, also for dimensions of one element).
// With cu_seqlens the batch strides are not read (checked as 0).
llvm::Error checkByteStrides(const fj_forward_args &a) {
  const bool varlen = a.cu_seqlens_q != nullptr;
  const std::pair<const char *, int64_t> strides[] = {
      {"q_batch_stride", varlen ? 0 : a.q_batch_stride}, {"q_seq_stride", a.q_seq_stride},
      {"q_head_stride", a.q_head_stride},   {"k_batch_stride", varlen ? 0 : a.k_batch_stride},
      {"k_seq_stride", a.k_seq_stride},     {"k_head_stride", a.k_head_stride},
      {"v_batch_stride", varlen ? 0 : a.v_batch_stride}, {"v_seq_stride", a.v_seq_stride},
      {"v_head_stride", a.v_head_stride}};
  for (auto [field, stride] : strides)
    if (stride % 16 != 0 || stride < 0 || stride >= (INT64_C(1) << 39))
      return makeError(ErrorCode::NotSupported,
                       "args->{0} is {1}: FP8 kernels need q, k and v strides that are "
                       "multiples of 16 elements (16 bytes), from 0 to below 2^39",
                       field, stride);
  return llvm::Error::success();
}
} // namespace

llvm::Error checkFp8Sizes(const AttentionDesc &desc, const fj_forward_args &a) {
  if (desc.dtype != FJ_DTYPE_E4M3 || a.batch <= 0 || a.seqlen_k <= 0)
    return llvm::Error::success();  // no workspace (or refused elsewhere)
  if (a.cu_seqlens_q) {
    // A variable-length batch is one packed sequence to the kernel's tensor maps, which
    // need its row counts (the 16-bit calls have a fallback family without them; FP8
    // none). batch sequences of at most seqlen rows hold at most batch * seqlen.
    if (a.total_q <= 0 || a.total_k <= 0)
      return makeError(ErrorCode::InvalidValue,
                       "args->total_q is {0} and total_k {1}: an FP8 call with cu_seqlens "
                       "needs both, the packed row counts (cu_seqlens_q[batch], "
                       "cu_seqlens_k[batch])",
                       a.total_q, a.total_k);
    for (auto [field, total, longest] :
         {std::tuple{"total_q", a.total_q, a.seqlen_q}, std::tuple{"total_k", a.total_k, a.seqlen_k}})
      if (total > (int64_t)a.batch * longest)
        return makeError(ErrorCode::InvalidValue,
                         "args->{0} is {1}: more than batch ({2}) sequences of at most {3} "
                         "rows hold",
                         field, total, a.batch, longest);
  }
  // V^T's key columns are TMA coordinates (32-bit), and its rows of one batch a TMA
  // stride (below 2^40 bytes); both bound the workspace's size too.
  const generator::Fp8TransposedLayout vt = generator::fp8TransposedLayout(
      a.batch, a.seqlen_k, a.cu_seqlens_q ? a.total_k : 0);
  const int64_t batchBytes = vt.keys < (INT64_C(1) << 31)
                                 ? (int64_t)desc.headsKV * desc.headDimV * vt.keys
                                 : INT64_MAX;
  if (batchBytes >= (INT64_C(1) << 40))
    return makeError(ErrorCode::NotSupported,
                     "FP8 kernels cannot take {0} keys{1} with {2} kv heads of {3}: v "
                     "transposed would need {4} key columns and {2} x {3} x {4} bytes a batch "
                     "(TMA addresses below 2^31 columns and 2^40 bytes)",
                     a.cu_seqlens_q ? a.total_k : (int64_t)a.seqlen_k,
                     a.cu_seqlens_q ? " (total_k)" : " (seqlen_k)", desc.headsKV,
                     desc.headDimV, vt.keys);
  return llvm::Error::success();
}

llvm::Error checkFp8ForwardArgs(const AttentionDesc &desc, const fj_forward_args &a,
                                FjForwardParams &params) {
  if (llvm::Error error = checkFp8Sizes(desc, a))
    return error;
  if (a.seqlen_k == 0)
    return makeError(ErrorCode::NotSupported,
                     "args->seqlen_k is 0: FP8 kernels need at least one key");
  if (llvm::Error error = checkByteStrides(a))
    return error;
  if (llvm::Error error = checkDescaleFactors({{"q_descale", a.q_descale},
                                               {"k_descale", a.k_descale},
                                               {"v_descale", a.v_descale}},
                                              a.descale_batch_stride, a.descale_head_stride))
    return error;
  const uint64_t needed = fp8WorkspaceBytes(desc, a);
  if (!a.workspace)
    return makeError(ErrorCode::InvalidValue,
                     "args->workspace is NULL: an FP8 call needs {0} bytes of device memory "
                     "for v transposed (fj_forward_workspace_size)",
                     needed);
  if (llvm::Error error = checkAligned("workspace", a.workspace, 16))
    return error;
  if (a.workspace_bytes < needed)
    return makeError(ErrorCode::InvalidValue,
                     "args->workspace_bytes is {0}: this call needs {1} "
                     "(fj_forward_workspace_size)",
                     a.workspace_bytes, needed);
  params.q_descale = a.q_descale;
  params.k_descale = a.k_descale;
  params.v_descale = a.v_descale;
  params.descale_batch_stride = a.descale_batch_stride;
  params.descale_head_stride = a.descale_head_stride;
  params.v_transposed = a.workspace;
  return llvm::Error::success();
}

uint64_t fp8WorkspaceBytes(const AttentionDesc &desc, const fj_forward_args &a) {
  // checkFp8Sizes passed: no overflow below.
  if (desc.dtype != FJ_DTYPE_E4M3 || a.batch <= 0 || a.seqlen_k <= 0)
    return 0;
  return (uint64_t)generator::fp8TransposedBytes(a.batch, desc.headsKV, desc.headDimV,
                                                 a.seqlen_k, a.cu_seqlens_q ? a.total_k : 0);
}

} // namespace flashjit::api
