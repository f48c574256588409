#include "api/validate.h"
#include "api/validate_tensor.h"

#include "support/error.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <cstdint>

// fj_mod_args goes to the kernels as FjModArgs, copied byte for byte.
static_assert(sizeof(fj_mod_args) == sizeof(FjModArgs) &&
                  offsetof(fj_mod_args, tensor) == offsetof(FjModArgs, tensor) &&
                  offsetof(fj_mod_args, scalar) == offsetof(FjModArgs, scalar) &&
                  offsetof(fj_mod_args, integer) == offsetof(FjModArgs, integer) &&
                  sizeof(int32_t) == sizeof(int),
              "fj_mod_args (flashjit.h) and FjModArgs (templates/fj_params.h) differ");

namespace flashjit::api {
namespace {

constexpr int kMaxHeadDim = 256;

llvm::Error checkHeadDim(const char *field, int value) {
  if (value <= 0)
    return makeError(ErrorCode::InvalidValue, "{0} is {1}: must be positive", field, value);
  if (value % 8 != 0 || value > kMaxHeadDim)
    return makeError(ErrorCode::NotSupported,
                     "{0} is {1}: supported head dims are the multiples of 8 from 8 to {2} "
                     "(8, 16, 24, ..., {2})",
                     field, value, kMaxHeadDim);
  return llvm::Error::success();
}

llvm::Error checkHint(const char *field, int value) {
  if (value < 0)
    return makeError(ErrorCode::InvalidValue, "{0} is {1}: must be >= 0 (0: unknown)", field,
                     value);
  return llvm::Error::success();
}

// One side of the sliding window: >= 0 keys, or -1 for unbounded.
llvm::Error checkWindowSide(const char *field, int value) {
  if (value < -1)
    return makeError(ErrorCode::InvalidValue,
                     "desc->{0} is {1}: must be >= 0 (keys), or -1 for unbounded", field,
                     value);
  return llvm::Error::success();
}

llvm::Error checkWindow(const fj_attention_desc &d, generator::Features &f) {
  if (!d.window) {
    // Sides without the switch: a window the caller asked for and would not get.
    for (auto [field, value] : {std::pair{"window_left", d.window_left},
                                std::pair{"window_right", d.window_right}})
      if (value != 0)
        return makeError(ErrorCode::InvalidValue,
                         "desc->{0} is {1} but desc->window is 0: set desc->window to "
                         "enable the sliding window (or leave its sides 0)",
                         field, value);
    return llvm::Error::success();
  }
  if (llvm::Error error = checkWindowSide("window_left", d.window_left))
    return error;
  if (llvm::Error error = checkWindowSide("window_right", d.window_right))
    return error;
  if (d.window_left < 0 && d.window_right < 0)
    return makeError(ErrorCode::InvalidValue,
                     "desc->window_left and desc->window_right are both -1: a window "
                     "unbounded on both sides is no window; bound a side, or set "
                     "desc->window to 0");
  f.window = true;
  f.windowLeft = d.window_left;
  f.windowRight = d.window_right;
  return llvm::Error::success();
}

// User code: NULL or "" is none; otherwise copied, at most kMaxUserCodeBytes (read no
// further than one byte past the limit).
llvm::Error copyUserCode(const char *field, const char *text, std::string &out) {
  if (!text)
    return llvm::Error::success();
  size_t length = strnlen(text, generator::kMaxUserCodeBytes + 1);
  if (length > generator::kMaxUserCodeBytes)
    return makeError(ErrorCode::InvalidValue,
                     "desc->{0} is longer than {1} bytes: user code is at most {1} bytes",
                     field, generator::kMaxUserCodeBytes);
  out.assign(text, length);
  return llvm::Error::success();
}

} // namespace

// The fields of a description that enable features, for messages: "window, alibi".
std::string featureFields(const generator::Features &f) {
  std::string out;
  auto add = [&](bool on, const char *name) {
    if (on)
      out += (out.empty() ? "desc->" : ", desc->") + std::string(name);
  };
  add(f.window, "window");
  add(f.softcap > 0, "softcap");
  add(f.alibi, "alibi");
  add(!f.scoreMod.empty(), "score_mod");
  add(!f.maskMod.empty(), "mask_mod");
  return out;
}

namespace {

// The features of a description (all zero: none), checked as generator::validateFeatures
// checks a spec, with messages that name the fields.
llvm::Error checkFeatures(const fj_attention_desc &d, generator::Features &f) {
  if (llvm::Error error = checkWindow(d, f))
    return error;
  if (!std::isfinite(d.softcap) || d.softcap < 0)
    return makeError(ErrorCode::InvalidValue,
                     "desc->softcap is {0}: must be finite and >= 0 (0: no soft-capping)",
                     floatText(d.softcap));
  f.softcap = d.softcap;
  f.alibi = d.alibi != 0;
  if (llvm::Error error = copyUserCode("score_mod", d.score_mod, f.scoreMod))
    return error;
  if (llvm::Error error = copyUserCode("mask_mod", d.mask_mod, f.maskMod))
    return error;
  if (d.tuning_mod_args) {
    f.hasTuningArgs = true;
    std::memcpy(&f.tuningArgs, d.tuning_mod_args, sizeof(f.tuningArgs));
  }
  return llvm::Error::success();
}

} // namespace

llvm::Error checkAlibiSlopes(const float *slopes, int64_t batchStride, int batch,
                             const AttentionDesc &desc) {
  if (!slopes)
    return makeError(ErrorCode::InvalidValue,
                     "args->alibi_slopes is NULL, but the description has ALiBi "
                     "(desc->alibi): the slopes are given per call, fp32 in device memory "
                     "([num_heads_q] or [batch, num_heads_q])");
  if (llvm::Error error = checkAligned("alibi_slopes", slopes, 4))
    return error;
  if (batchStride < 0)
    return makeError(ErrorCode::InvalidValue,
                     "args->alibi_batch_stride is {0}: must be >= 0 (0: one slope per head "
                     "for the whole batch)",
                     batchStride);
  // The kernels index slopes with b * alibi_batch_stride + h: keep it far from overflow.
  int64_t span = 0;
  if (__builtin_mul_overflow((int64_t)batch - 1, batchStride, &span) ||
      span > (INT64_C(1) << 61) - desc.headsQ)
    return makeError(ErrorCode::InvalidValue,
                     "args->alibi_batch_stride is {0}: over batch {1} it spans more than "
                     "2^61 elements",
                     batchStride, batch);
  return llvm::Error::success();
}

llvm::Error checkSize(const char *field, int value, int limit, const char *why) {
  if (value < 0)
    return makeError(ErrorCode::InvalidValue, "args->{0} is {1}: must be >= 0", field, value);
  if (value > limit)
    return makeError(ErrorCode::NotSupported, "args->{0} is {1}: at most {2} ({3})", field,
                     value, limit, why);
  return llvm::Error::success();
}

llvm::Error checkAligned(const char *field, const void *ptr, unsigned alignment) {
  if (reinterpret_cast<uintptr_t>(ptr) % alignment != 0)
    return makeError(ErrorCode::InvalidValue, "args->{0} is {1}: not {2}-byte aligned", field,
                     ptr, alignment);
  return llvm::Error::success();
}

static llvm::Error checkStride(const Dim &dim) {
  if (dim.size <= 1)
    return llvm::Error::success();  // never multiplied by an index other than 0
  if (dim.stride < 0)
    return makeError(ErrorCode::InvalidValue,
                     "args->{0} is {1}: strides must not be negative", dim.strideField,
                     dim.stride);
  if (dim.stride == 0)
    return makeError(ErrorCode::InvalidValue,
                     "args->{0} is 0, but its dimension has {1} elements: a stride may be 0 "
                     "only where the dimension has one element",
                     dim.strideField, dim.size);
  if (dim.stride % 8 != 0)
    return makeError(ErrorCode::InvalidValue,
                     "args->{0} is {1}: must be a multiple of 8 elements (the kernels read "
                     "16-byte vectors)",
                     dim.strideField, dim.stride);
  return llvm::Error::success();
}

llvm::Error checkTensor(const Tensor &t) {
  if (!t.ptr)
    return makeError(ErrorCode::InvalidValue,
                     "args->{0} is NULL, but {0} is not empty (batch, sequence length and "
                     "heads are all non-zero)",
                     t.name);
  if (reinterpret_cast<uintptr_t>(t.ptr) % 16 != 0)
    return makeError(ErrorCode::InvalidValue,
                     "args->{0} is {1}: not 16-byte aligned (the kernels read 16-byte vectors)",
                     t.name, t.ptr);
  // The furthest element the kernels may touch must have an offset that fits (the
  // device computes it in 64 bits, in bytes): sum of (size - 1) * stride.
  int64_t extent = t.lastDim;
  for (const Dim &dim : t.dims) {
    if (llvm::Error error = checkStride(dim))
      return error;
    if (dim.size <= 1)
      continue;
    int64_t span = 0;
    if (__builtin_mul_overflow(dim.size - 1, dim.stride, &span) ||
        __builtin_add_overflow(extent, span, &extent) || extent > (INT64_C(1) << 61))
      return makeError(ErrorCode::InvalidValue,
                       "args->{0}: its strides and sizes span more than 2^61 elements "
                       "({1} is {2} over {3} elements)",
                       t.name, dim.strideField, dim.stride, dim.size);
  }
  return llvm::Error::success();
}

std::string floatText(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

llvm::Error checkBackwardFeatures(const generator::Features &f, const char *what) {
  if (!f.scoreMod.empty())
    return makeError(ErrorCode::NotSupported,
                     "{0} with a score_mod: the backward pass cannot differentiate the "
                     "user's code (it takes a window, softcap, alibi and mask_mod)",
                     what);
  return llvm::Error::success();
}

llvm::Expected<AttentionDesc> checkDesc(const fj_attention_desc *in) {
  fj_attention_desc d;
  if (llvm::Error error = copyInStruct(in, "desc", "fj_attention_desc", d))
    return std::move(error);
  AttentionDesc out;
  if (d.dtype != FJ_DTYPE_FP16 && d.dtype != FJ_DTYPE_BF16 && d.dtype != FJ_DTYPE_E4M3)
    return makeError(ErrorCode::InvalidValue,
                     "desc->dtype is {0}: expected FJ_DTYPE_FP16 ({1}), FJ_DTYPE_BF16 ({2}) or "
                     "FJ_DTYPE_E4M3 ({3})",
                     d.dtype, (int)FJ_DTYPE_FP16, (int)FJ_DTYPE_BF16, (int)FJ_DTYPE_E4M3);
  out.dtype = static_cast<fj_dtype>(d.dtype);
  if (llvm::Error error = checkHeadDim("desc->head_dim", d.head_dim))
    return std::move(error);
  out.headDim = d.head_dim;
  if (d.head_dim_v < 0)
    return makeError(ErrorCode::InvalidValue,
                     "desc->head_dim_v is {0}: must be positive (0: same as head_dim)",
                     d.head_dim_v);
  out.headDimV = d.head_dim_v == 0 ? d.head_dim : d.head_dim_v;
  if (d.head_dim_v != 0)
    if (llvm::Error error = checkHeadDim("desc->head_dim_v", d.head_dim_v))
      return std::move(error);
  out.causal = d.causal != 0;
  for (auto [field, value] : {std::pair{"desc->num_heads_q", d.num_heads_q},
                              std::pair{"desc->num_heads_kv", d.num_heads_kv}}) {
    if (value <= 0)
      return makeError(ErrorCode::InvalidValue, "{0} is {1}: must be >= 1", field, value);
    if (value > kMaxGridYZ)
      return makeError(ErrorCode::NotSupported,
                       "{0} is {1}: at most {2} heads (a CUDA grid dimension)", field, value,
                       kMaxGridYZ);
  }
  if (d.num_heads_q % d.num_heads_kv != 0)
    return makeError(ErrorCode::InvalidValue,
                     "desc->num_heads_q ({0}) is not a multiple of desc->num_heads_kv ({1})",
                     d.num_heads_q, d.num_heads_kv);
  out.headsQ = d.num_heads_q;
  out.headsKV = d.num_heads_kv;
  if (!std::isfinite(d.softmax_scale) || d.softmax_scale < 0)
    return makeError(ErrorCode::InvalidValue,
                     "desc->softmax_scale is {0}: must be finite and >= 0 (0: 1/sqrt(head_dim))",
                     floatText(d.softmax_scale));
  out.scale = d.softmax_scale > 0 ? d.softmax_scale : 1.0f / std::sqrt((float)d.head_dim);
  if (!std::isfinite(out.scale * kLog2e))
    return makeError(ErrorCode::InvalidValue,
                     "desc->softmax_scale is {0}: too large (scale * log2(e) overflows fp32)",
                     floatText(d.softmax_scale));
  if (llvm::Error error = checkHint("desc->seqlen_q_hint", d.seqlen_q_hint))
    return std::move(error);
  if (llvm::Error error = checkHint("desc->seqlen_k_hint", d.seqlen_k_hint))
    return std::move(error);
  if (llvm::Error error = checkHint("desc->batch_hint", d.batch_hint))
    return std::move(error);
  out.seqQHint = d.seqlen_q_hint > 0 ? d.seqlen_q_hint : 1024;
  out.seqKHint = d.seqlen_k_hint > 0 ? d.seqlen_k_hint : out.seqQHint;
  out.batchHint = d.batch_hint > 0 ? d.batch_hint : 1;
  out.seqHinted = d.seqlen_q_hint > 0;
  out.batchHinted = d.batch_hint > 0;
  if (d.tune_lengths < FJ_TUNE_LENGTHS_AUTO || d.tune_lengths > FJ_TUNE_LENGTHS_LADDER)
    return makeError(ErrorCode::InvalidValue,
                     "desc->tune_lengths is {0}: expected FJ_TUNE_LENGTHS_AUTO (0), "
                     "FJ_TUNE_LENGTHS_HINTED (1) or FJ_TUNE_LENGTHS_LADDER (2)",
                     d.tune_lengths);
  out.tuneLengths = static_cast<fj_tune_lengths>(d.tune_lengths);
  out.backward = d.backward != 0;
  if (llvm::Error error = checkFeatures(d, out.features))
    return std::move(error);
  // The shape tuning_mod_args' tensors are sized for: the hints, as resolved above.
  out.features.tuningShape = {out.batchHint, out.headsQ, out.headsKV, out.seqQHint,
                              out.seqKHint};
  // ALiBi's kernels add the bias in the unscaled score's units, slope / softmax_scale
  // (fj_features.cuh, kScoreUnits): a scale this small would overflow it.
  if (out.features.alibi && out.scale < kMinAlibiScale)
    return makeError(ErrorCode::InvalidValue,
                     "desc->softmax_scale is {0}: with ALiBi (desc->alibi) it must be >= 2^-60",
                     floatText(d.softmax_scale));
  if (out.backward)
    if (llvm::Error error = checkBackwardFeatures(out.features, "desc->backward is set"))
      return std::move(error);
  out.decode = d.decode != 0;  // the decode kernels take every feature (0.14)
  if (llvm::Error error = checkFp8Desc(d, out))
    return std::move(error);
  if (llvm::Error error = checkKvCacheDtype(d, out))
    return std::move(error);
  return out;
}

llvm::Error checkForwardArgs(const AttentionDesc &desc, const fj_forward_args *in,
                             FjForwardParams &params, bool &noWork,
                             fj_block_mask *blockMask, void **tileCounter) {
  fj_forward_args a;
  if (llvm::Error error = copyInStruct(in, "args", "fj_forward_args", a))
    return error;
  if (a.block_mask && desc.features.maskMod.empty())
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask is set, but the description has no mask_mod: a block "
                     "mask serves only a mask_mod's kernel");
  if (blockMask)
    *blockMask = a.block_mask;
  // A 16-bit call's workspace is read only with a block mask: its walk's tile counter.
  const bool counter = a.block_mask && a.workspace && desc.dtype != FJ_DTYPE_E4M3;
  if (counter) {
    if (llvm::Error error = checkAligned("workspace", a.workspace, 4))
      return error;
    if (a.workspace_bytes < kTileCounterBytes)
      return makeError(ErrorCode::InvalidValue,
                       "args->workspace_bytes is {0}: a block-mask call's workspace (its tile "
                       "counter) needs {1} (fj_forward_workspace_size)",
                       a.workspace_bytes, kTileCounterBytes);
  }
  if (tileCounter)
    *tileCounter = counter ? a.workspace : nullptr;
  if (llvm::Error error = checkSize("batch", a.batch, kMaxGridYZ, "a CUDA grid dimension"))
    return error;
  if (llvm::Error error = checkSize("seqlen_q", a.seqlen_q, kMaxSeqlen, "2^30"))
    return error;
  if (llvm::Error error = checkSize("seqlen_k", a.seqlen_k, kMaxSeqlen, "2^30"))
    return error;

  const bool varlen = a.cu_seqlens_q || a.cu_seqlens_k;
  if (varlen) {
    if (!a.cu_seqlens_q || !a.cu_seqlens_k)
      return makeError(ErrorCode::InvalidValue,
                       "args->{0} is set but args->{1} is NULL: variable-length batches need "
                       "both",
                       a.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k",
                       a.cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q");
    if (llvm::Error error = checkAligned("cu_seqlens_q", a.cu_seqlens_q, 4))
      return error;
    if (llvm::Error error = checkAligned("cu_seqlens_k", a.cu_seqlens_k, 4))
      return error;
    if (a.batch > 0)
      for (auto [field, value] : {std::pair{"seqlen_q", a.seqlen_q}, std::pair{"seqlen_k", a.seqlen_k}})
        if (value == 0)
          return makeError(ErrorCode::InvalidValue,
                           "args->cu_seqlens_q/k are set but args->{0} is 0: with cu_seqlens "
                           "it must hold the longest sequence length (>= 1)",
                           field);
    for (auto [field, value] :
         {std::pair{"total_q", a.total_q}, std::pair{"total_k", a.total_k}})
      if (value < 0)
        return makeError(ErrorCode::InvalidValue,
                         "args->{0} is {1}: with cu_seqlens it is the number of packed rows, "
                         "or 0 when not known",
                         field, value);
    if (a.lse && a.batch > 0 && a.total_q <= 0)
      return makeError(ErrorCode::InvalidValue,
                       "args->total_q is {0}: with cu_seqlens and lse it must be the number "
                       "of packed query rows (cu_seqlens_q[batch], >= 1)",
                       a.total_q);
  }

  noWork = a.batch == 0 || a.seqlen_q == 0;
  params = FjForwardParams{};
  params.batch = a.batch;
  params.heads_q = desc.headsQ;
  params.heads_kv = desc.headsKV;
  params.seqlen_q = a.seqlen_q;
  params.seqlen_k = a.seqlen_k;
  params.softmax_scale = desc.scale;
  params.scale_log2 = desc.scale * kLog2e;
  if (noWork)
    return llvm::Error::success();  // nothing is read or written: pointers may be NULL

  // Rows along the sequence dimension: per batch entry, or packed (bounded by
  // batch * longest) when variable-length, where the batch strides are unused.
  const int64_t rowsQ = varlen ? (int64_t)a.batch * a.seqlen_q : a.seqlen_q;
  const int64_t rowsK = varlen ? (int64_t)a.batch * a.seqlen_k : a.seqlen_k;
  const int64_t batches = varlen ? 1 : a.batch;
  const Tensor q{"q", a.q,
                 {{"q_batch_stride", a.q_batch_stride, batches},
                  {"q_seq_stride", a.q_seq_stride, rowsQ},
                  {"q_head_stride", a.q_head_stride, desc.headsQ}},
                 desc.headDim};
  const Tensor o{"o", a.o,
                 {{"o_batch_stride", a.o_batch_stride, batches},
                  {"o_seq_stride", a.o_seq_stride, rowsQ},
                  {"o_head_stride", a.o_head_stride, desc.headsQ}},
                 desc.headDimV};
  const Tensor k{"k", a.k,
                 {{"k_batch_stride", a.k_batch_stride, batches},
                  {"k_seq_stride", a.k_seq_stride, rowsK},
                  {"k_head_stride", a.k_head_stride, desc.headsKV}},
                 desc.headDim};
  const Tensor v{"v", a.v,
                 {{"v_batch_stride", a.v_batch_stride, batches},
                  {"v_seq_stride", a.v_seq_stride, rowsK},
                  {"v_head_stride", a.v_head_stride, desc.headsKV}},
                 desc.headDimV};
  if (llvm::Error error = checkTensor(q))
    return error;
  if (llvm::Error error = checkTensor(o))
    return error;
  if (rowsK > 0) {  // no keys: k and v are never read
    if (llvm::Error error = checkTensor(k))
      return error;
    if (llvm::Error error = checkTensor(v))
      return error;
  }
  if (a.lse)
    if (llvm::Error error = checkAligned("lse", a.lse, 4))
      return error;
  if (desc.features.alibi)  // else the slopes are ignored
    if (llvm::Error error = checkAlibiSlopes(a.alibi_slopes, a.alibi_batch_stride, a.batch, desc))
      return error;

  params.q = a.q;
  params.k = a.k;
  params.v = a.v;
  params.o = a.o;
  params.lse = a.lse;
  params.cu_seqlens_q = a.cu_seqlens_q;
  params.cu_seqlens_k = a.cu_seqlens_k;
  params.total_q = varlen ? a.total_q : 0;
  params.total_k = varlen ? a.total_k : 0;
  params.q_batch_stride = varlen ? 0 : a.q_batch_stride;
  params.k_batch_stride = varlen ? 0 : a.k_batch_stride;
  params.v_batch_stride = varlen ? 0 : a.v_batch_stride;
  params.o_batch_stride = varlen ? 0 : a.o_batch_stride;
  params.q_row_stride = a.q_seq_stride, params.q_head_stride = a.q_head_stride;
  params.k_row_stride = a.k_seq_stride, params.k_head_stride = a.k_head_stride;
  params.v_row_stride = a.v_seq_stride, params.v_head_stride = a.v_head_stride;
  params.o_row_stride = a.o_seq_stride, params.o_head_stride = a.o_head_stride;
  // LSE: [batch, heads, seqlen_q], or [heads, total_q] when variable-length.
  params.lse_head_stride = varlen ? a.total_q : a.seqlen_q;
  params.lse_batch_stride = varlen ? 0 : (long long)desc.headsQ * a.seqlen_q;
  if (desc.features.alibi) {
    params.alibi_slopes = a.alibi_slopes;
    params.alibi_batch_stride = a.alibi_batch_stride;
  }
  std::memcpy(&params.mod_args, &a.mod_args, sizeof(params.mod_args));
  if (desc.dtype == FJ_DTYPE_E4M3)
    return checkFp8ForwardArgs(desc, a, params);
  return llvm::Error::success();
}

} // namespace flashjit::api
