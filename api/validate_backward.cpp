// fj_backward's arguments: the forward's tensors are checked by the forward's own rules
// (an fj_forward_args made of them), then dout and the three gradients.
#include "api/validate.h"
#include "api/validate_tensor.h"

#include "support/error.h"

namespace flashjit::api {

fj_forward_args forwardPart(const fj_backward_args &a) {
  fj_forward_args f;
  std::memset(&f, 0, sizeof(f));
  f.struct_size = sizeof(f);
  f.q = a.q, f.k = a.k, f.v = a.v, f.o = const_cast<void *>(a.o);
  f.lse = const_cast<float *>(a.lse);
  f.batch = a.batch, f.seqlen_q = a.seqlen_q, f.seqlen_k = a.seqlen_k;
  f.q_batch_stride = a.q_batch_stride, f.q_seq_stride = a.q_seq_stride;
  f.q_head_stride = a.q_head_stride;
  f.k_batch_stride = a.k_batch_stride, f.k_seq_stride = a.k_seq_stride;
  f.k_head_stride = a.k_head_stride;
  f.v_batch_stride = a.v_batch_stride, f.v_seq_stride = a.v_seq_stride;
  f.v_head_stride = a.v_head_stride;
  f.o_batch_stride = a.o_batch_stride, f.o_seq_stride = a.o_seq_stride;
  f.o_head_stride = a.o_head_stride;
  f.cu_seqlens_q = a.cu_seqlens_q, f.cu_seqlens_k = a.cu_seqlens_k;
  f.total_q = a.total_q, f.total_k = a.total_k;
  f.alibi_slopes = a.alibi_slopes, f.alibi_batch_stride = a.alibi_batch_stride;
  f.mod_args = a.mod_args;
  f.block_mask = a.block_mask;
  return f;
}

llvm::Error checkBackwardArgs(const AttentionDesc &desc, const fj_backward_args *in,
                              FjBackwardParams &params, bool &noWork,
                              fj_block_mask *blockMask) {
  fj_backward_args a;
  if (llvm::Error error = copyInStruct(in, "args", "fj_backward_args", a))
    return error;
  // A description whose features the backward pass does not take never gets a backward
  // kernel (checkDesc refuses it with desc.backward); its arguments are refused too.
  if (llvm::Error error =
          checkBackwardFeatures(desc.features, "backward arguments for a description"))
    return error;
  const bool varlen = a.cu_seqlens_q || a.cu_seqlens_k;
  // lse and (with cu_seqlens) total_q first: the forward's rules would accept their
  // absence, the backward pass cannot.
  if (a.batch > 0 && a.seqlen_q > 0) {
    if (!a.lse)
      return makeError(ErrorCode::InvalidValue,
                       "args->lse is NULL: the backward pass needs the forward's log-sum-exp "
                       "(fj_forward_args.lse)");
    if (a.cu_seqlens_q && a.cu_seqlens_k && a.total_q <= 0)  // half of them: below
      return makeError(ErrorCode::InvalidValue,
                       "args->total_q is {0}: with cu_seqlens it must be the number of "
                       "packed query rows (cu_seqlens_q[batch], >= 1)",
                       a.total_q);
  }
  fj_forward_args forward = forwardPart(a);
  params = FjBackwardParams{};
  if (llvm::Error error = checkForwardArgs(desc, &forward, params.fwd, noWork, blockMask))
    return error;
  // Keys with no query (seqlen_q == 0) still get gradients: zeros, written by the
  // kernels. Only an empty batch or no keys leaves nothing to write.
  const bool noKeys = a.batch == 0 || a.seqlen_k == 0;
  const bool noQueries = a.batch == 0 || a.seqlen_q == 0;
  noWork = noKeys && noQueries;
  if (noWork)
    return llvm::Error::success();

  const int64_t rowsQ = varlen ? (int64_t)a.batch * a.seqlen_q : a.seqlen_q;
  const int64_t rowsK = varlen ? (int64_t)a.batch * a.seqlen_k : a.seqlen_k;
  const int64_t batches = varlen ? 1 : a.batch;
  const Tensor dout{"dout", a.dout,
                    {{"dout_batch_stride", a.dout_batch_stride, batches},
                     {"dout_seq_stride", a.dout_seq_stride, rowsQ},
                     {"dout_head_stride", a.dout_head_stride, desc.headsQ}},
                    desc.headDimV};
  const Tensor dq{"dq", a.dq,
                  {{"dq_batch_stride", a.dq_batch_stride, batches},
                   {"dq_seq_stride", a.dq_seq_stride, rowsQ},
                   {"dq_head_stride", a.dq_head_stride, desc.headsQ}},
                  desc.headDim};
  const Tensor dk{"dk", a.dk,
                  {{"dk_batch_stride", a.dk_batch_stride, batches},
                   {"dk_seq_stride", a.dk_seq_stride, rowsK},
                   {"dk_head_stride", a.dk_head_stride, desc.headsKV}},
                  desc.headDim};
  const Tensor dv{"dv", a.dv,
                  {{"dv_batch_stride", a.dv_batch_stride, batches},
                   {"dv_seq_stride", a.dv_seq_stride, rowsK},
                   {"dv_head_stride", a.dv_head_stride, desc.headsKV}},
                  desc.headDimV};
  if (rowsQ > 0) {
    if (llvm::Error error = checkTensor(dout))
      return error;
    if (llvm::Error error = checkTensor(dq))
      return error;
  }
  if (rowsK > 0) {
    if (llvm::Error error = checkTensor(dk))
      return error;
    if (llvm::Error error = checkTensor(dv))
      return error;
  }
  if (a.deterministic != 0 && a.deterministic != 1)
    return makeError(ErrorCode::InvalidValue, "args->deterministic is {0}: expected 0 or 1",
                     a.deterministic);
  if (a.workspace && reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
    return makeError(ErrorCode::InvalidValue, "args->workspace is {0}: not 16-byte aligned",
                     a.workspace);

  params.dout = a.dout;
  params.dq = a.dq;
  params.dk = a.dk;
  params.dv = a.dv;
  params.dout_batch_stride = varlen ? 0 : a.dout_batch_stride;
  params.dq_batch_stride = varlen ? 0 : a.dq_batch_stride;
  params.dk_batch_stride = varlen ? 0 : a.dk_batch_stride;
  params.dv_batch_stride = varlen ? 0 : a.dv_batch_stride;
  params.dout_row_stride = a.dout_seq_stride, params.dout_head_stride = a.dout_head_stride;
  params.dq_row_stride = a.dq_seq_stride, params.dq_head_stride = a.dq_head_stride;
  params.dk_row_stride = a.dk_seq_stride, params.dk_head_stride = a.dk_head_stride;
  params.dv_row_stride = a.dv_seq_stride, params.dv_head_stride = a.dv_head_stride;
  return llvm::Error::success();
}

} // namespace flashjit::api
