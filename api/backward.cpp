// fj_backward and its workspace: the backward variants of a kernel handle
// ([backwardBegin, decodeBegin), api/handles.h), dispatched by shape bucket like the
// forward.
#include "api/handles.h"

#include "support/error.h"
#include "tuner/backward_kernel.h"
#include "tuner/backward_problem.h"

namespace flashjit::api {
namespace {

llvm::Error checkHasBackward(const fj_kernel_s *kernel) {
  if (kernel->backwardBegin >= kernel->decodeBegin)
    return makeError(ErrorCode::InvalidValue,
                     "kernel {0} has no backward pass: get it with desc.backward = 1",
                     kernel->specKey);
  return llvm::Error::success();
}

// Rows of the lse-shaped workspace arrays: batch * seqlen_q, or the packed total.
long long workspaceRows(const FjForwardParams &p) {
  return p.cu_seqlens_q ? p.total_q : (long long)p.batch * p.seqlen_q;
}

tuner::BackwardWorkspace layoutFor(const fj_kernel_s *kernel, const FjBackwardParams &params,
                                   bool deterministic) {
  return tuner::backwardWorkspace(kernel->desc.headsQ, workspaceRows(params.fwd),
                                  params.fwd.batch, kernel->desc.headDim,
                                  kernel->desc.headDimV, deterministic);
}

} // namespace

int dispatchBackward(const fj_kernel_s &kernel, const FjForwardParams &p) {
  if (kernel.backwardBegin >= kernel.decodeBegin)
    return -1;
  const tuner::Bucket wanted = bucketFor(p.seqlen_q, p.seqlen_k, (int64_t)p.batch * p.heads_q);
  llvm::ArrayRef<tuner::Bucket> buckets = llvm::ArrayRef<tuner::Bucket>(kernel.buckets)
                                              .slice(kernel.backwardBegin,
                                                     kernel.decodeBegin - kernel.backwardBegin);
  const int index = tuner::nearestBucket(buckets, wanted);
  return index < 0 ? -1 : kernel.backwardBegin + index;
}

llvm::Error backwardWorkspaceSize(const fj_kernel_s *kernel, const fj_backward_args *args,
                                  size_t *bytes) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return error;
  if (!bytes)
    return makeError(ErrorCode::InvalidValue, "bytes (the output pointer) is NULL");
  *bytes = 0;
  if (llvm::Error error = checkHasBackward(kernel))
    return error;
  fj_backward_args a;
  if (llvm::Error error = copyInStruct(args, "args", "fj_backward_args", a))
    return error;
  // Only the sizes matter here (the pointers and strides may not be set yet).
  if (a.batch < 0 || a.seqlen_q < 0 || a.seqlen_k < 0)
    return makeError(ErrorCode::InvalidValue,
                     "args->batch, seqlen_q and seqlen_k are {0}, {1} and {2}: must be >= 0",
                     a.batch, a.seqlen_q, a.seqlen_k);
  if (a.seqlen_q > kMaxSeqlen || a.batch > kMaxGridYZ)
    return makeError(ErrorCode::NotSupported,
                     "args->batch is {0} and seqlen_q {1}: at most {2} and {3}", a.batch,
                     a.seqlen_q, kMaxGridYZ, kMaxSeqlen);
  const bool varlen = a.cu_seqlens_q || a.cu_seqlens_k;
  if (varlen && a.batch > 0 && a.total_q <= 0)
    return makeError(ErrorCode::InvalidValue,
                     "args->total_q is {0}: with cu_seqlens it must be the number of packed "
                     "query rows (cu_seqlens_q[batch], >= 1)",
                     a.total_q);
  if (varlen && a.total_q > (long long)a.batch * a.seqlen_q)
    return makeError(ErrorCode::InvalidValue,
                     "args->total_q is {0}: more than batch * seqlen_q = {1}", a.total_q,
                     (long long)a.batch * a.seqlen_q);
  const long long rows = varlen ? a.total_q : (long long)a.batch * a.seqlen_q;
  *bytes = rows == 0 ? 0
                     : tuner::backwardWorkspace(kernel->desc.headsQ, rows, a.batch,
                                                kernel->desc.headDim, kernel->desc.headDimV,
                                                a.deterministic != 0)
                           .bytes;
  return llvm::Error::success();
}

// The hot path, as fj_forward: no allocation, no lock, no synchronisation on success.
llvm::Error backward(const fj_kernel_s *kernel, const fj_backward_args *args, void *stream) {
  if (llvm::Error error = checkKernelMagic(kernel))
    return error;
  if (llvm::Error error = checkHasBackward(kernel))
    return error;
  FjBackwardParams params;
  bool noWork = false;
  fj_block_mask blockMask = nullptr;
  if (llvm::Error error = checkBackwardArgs(kernel->desc, args, params, noWork, &blockMask))
    return error;
  if (noWork)
    return llvm::Error::success();
  // args was read whole by checkBackwardArgs (struct_size included).
  const tuner::BackwardWorkspace layout = layoutFor(kernel, params, args->deterministic != 0);
  if (!args->workspace)
    return makeError(ErrorCode::InvalidValue,
                     "args->workspace is NULL: the call needs {0} bytes of device memory "
                     "(fj_backward_workspace_size)",
                     layout.bytes);
  if (args->workspace_bytes < layout.bytes)
    return makeError(ErrorCode::InvalidValue,
                     "args->workspace_bytes is {0}: the call needs {1} "
                     "(fj_backward_workspace_size)",
                     args->workspace_bytes, layout.bytes);
  tuner::bindWorkspace(params, layout, args->workspace);

  const int index = dispatchBackward(*kernel, params.fwd);
  if (index < 0)
    return makeError(ErrorCode::Internal, "kernel {0} has no backward variant to dispatch to",
                     kernel->specKey);
  if (blockMask)
    if (llvm::Error error = useBackwardBlockMask(*kernel, blockMask, index, params))
      return error;
  const tuner::Selection &variant = kernel->variants[index];
  kernel->countLaunch(index);
  if (llvm::Error error = kernel->context->device->makeCurrent())
    return error;
  // getKernel loaded the backward family's variants as backward kernels.
  return static_cast<const tuner::BackwardKernel &>(*variant.kernel)
      .launch(params, static_cast<CUstream>(stream));
}

} // namespace flashjit::api
