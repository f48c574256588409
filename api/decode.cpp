// fj_decode, its workspace and fj_kv_append: the decode variants of a kernel handle (the
// last ones, api/handles.h), dispatched by shape bucket like the forward.
#include "api/handles.h"

#include "support/error.h"
#include "tuner/decode_kernel.h"

namespace flashjit::api {

static_assert(kMaxDecodeSplits == tuner::kMaxDecodeSplits,
              "api/validate.h and tuner/decode_kernel.h disagree on the most splits");

namespace {

llvm::Error checkHasDecode(const fj_kernel_s *kernel) {
  if (kernel->decodeBegin >= (int)kernel->variants.size())
    return makeError(ErrorCode::InvalidValue,
                     "kernel {0} has no decode kernels: get it with desc.decode = 1",
                     kernel->specKey);
  return llvm::Error::success();
}

// The decode variant for a call of these sizes: the nearest decode bucket
// (tuner::Bucket::forDecode) among the handle's decode variants; `index` receives its
// index in kernel->variants. No allocation.
llvm::Expected<const tuner::DecodeKernel *> dispatch(const fj_kernel_s *kernel,
                                                     const FjDecodeParams &p, int &index) {
  const tuner::Bucket wanted =
      tuner::Bucket::forDecode(p.seqlen_q, p.seqlen_k, p.batch, p.heads_q, p.heads_kv);
  llvm::ArrayRef<tuner::Bucket> buckets =
      llvm::ArrayRef<tuner::Bucket>(kernel->buckets).drop_front(kernel->decodeBegin);
  const int nearest = tuner::nearestBucket(buckets, wanted);
  index = kernel->decodeBegin + nearest;
  const tuner::DecodeKernel *variant = nullptr;
  if (nearest >= 0 && kernel->variants[index].kernel)
    variant = tuner::DecodeKernel::of(*kernel->variants[index].kernel);
  if (!variant)
    return makeError(ErrorCode::Internal, "kernel {0} has no decode variant to dispatch to",
                     kernel->specKey);
  return variant;
}

size_t workspaceBytes(const fj_kernel_s *kernel, const FjDecodeParams &p) {
  return tuner::decodeWorkspaceBytes(p.batch, p.heads_q, p.seqlen_q, kernel->desc.headDimV,
                                     p.num_splits);
}

} // namespace

llvm::Error decodeWorkspaceSize(const fj_kernel_s *kernel, const fj_decode_args *args,
                                size_t *bytes) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return error;
  if (!bytes)
    return makeError(ErrorCode::InvalidValue, "bytes (the output pointer) is NULL");
  *bytes = 0;
  if (llvm::Error error = checkHasDecode(kernel))
    return error;
  fj_decode_args a;
  if (llvm::Error error = copyInStruct(args, "args", "fj_decode_args", a))
    return error;
  // Only the sizes matter here (the pointers and strides may not be set yet).
  if (llvm::Error error = checkDecodeSizes(kernel->desc, a))
    return error;
  if (a.batch == 0 || a.seqlen_q == 0)
    return llvm::Error::success();
  FjDecodeParams params{};
  params.batch = a.batch;
  params.heads_q = kernel->desc.headsQ;
  params.heads_kv = kernel->desc.headsKV;
  params.seqlen_q = a.seqlen_q;
  params.seqlen_k = a.seqlen_k;
  int index = 0;
  auto variant = dispatch(kernel, params, index);
  if (!variant)
    return variant.takeError();
  params.num_splits = (*variant)->plan(params, a.num_splits).numSplits;
  *bytes = workspaceBytes(kernel, params);
  return llvm::Error::success();
}

// The hot path, as fj_forward: no allocation, no lock, no synchronisation on success.
llvm::Error decode(const fj_kernel_s *kernel, const fj_decode_args *args, void *stream) {
  if (llvm::Error error = checkKernelMagic(kernel))
    return error;
  if (llvm::Error error = checkHasDecode(kernel))
    return error;
  FjDecodeParams params;
  bool noWork = false;
  if (llvm::Error error = checkDecodeArgs(kernel->desc, args, params, noWork))
    return error;
  if (noWork)
    return llvm::Error::success();
  int index = 0;
  auto variant = dispatch(kernel, params, index);
  if (!variant)
    return variant.takeError();
  // The same variant and plan as fj_decode_workspace_size (params.num_splits is the
  // caller's request until here).
  const tuner::DecodeSplits splits = (*variant)->plan(params, params.num_splits);
  params.num_splits = splits.numSplits;
  params.tiles_per_split = splits.tilesPerSplit;
  if (params.num_splits > 1) {
    // args was read whole by checkDecodeArgs (struct_size included).
    const size_t needed = workspaceBytes(kernel, params);
    if (!args->workspace)
      return makeError(ErrorCode::InvalidValue,
                       "args->workspace is NULL: the call runs as {0} splits and needs {1} "
                       "bytes of device memory (fj_decode_workspace_size)",
                       params.num_splits, needed);
    if (args->workspace_bytes < needed)
      return makeError(ErrorCode::InvalidValue,
                       "args->workspace_bytes is {0}: the call runs as {1} splits and needs "
                       "{2} (fj_decode_workspace_size)",
                       args->workspace_bytes, params.num_splits, needed);
    tuner::bindDecodeWorkspace(params, kernel->desc.headDimV, args->workspace);
  }
  if (llvm::Error error = kernel->context->device->makeCurrent())
    return error;
  kernel->countLaunch(index);
  return (*variant)->launch(params, static_cast<CUstream>(stream));
}

llvm::Error kvAppend(const fj_kernel_s *kernel, const fj_kv_append_args *args, void *stream) {
  if (llvm::Error error = checkKernelMagic(kernel))
    return error;
  if (llvm::Error error = checkHasDecode(kernel))
    return error;
  FjDecodeParams params;
  bool noWork = false;
  if (llvm::Error error = checkKvAppendArgs(kernel->desc, args, params, noWork))
    return error;
  if (noWork)
    return llvm::Error::success();
  // Every decode variant of the handle carries the same append (it depends on the
  // description only): the first.
  const tuner::Selection &variant = kernel->variants[kernel->decodeBegin];
  const tuner::DecodeKernel *append =
      variant.kernel ? tuner::DecodeKernel::of(*variant.kernel) : nullptr;
  if (!append)
    return makeError(ErrorCode::Internal, "kernel {0}: variant {1} is not a decode kernel",
                     kernel->specKey, kernel->decodeBegin);
  if (llvm::Error error = kernel->context->device->makeCurrent())
    return error;
  kernel->countLaunch(kernel->decodeBegin);
  return append->append(params, static_cast<CUstream>(stream));
}

} // namespace flashjit::api
