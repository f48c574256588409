// fj_block_mask_create / _update / _destroy, and fj_forward's check of a mask: the block
// sparsity of a mask_mod (templates/fj_block_mask.cuh), built by the variant fj_forward
// picks for a call's arguments, at that variant's tiles, for that call's shape.
#include "api/handles.h"
#include "api/live_handles.h"
#include "api/validate_structs.h"

#include "support/error.h"
#include "tuner/keep_bits.h"

namespace flashjit::api {

namespace {

llvm::Error checkLiveMask(const fj_block_mask_s *mask) {
  if (!mask)
    return makeError(ErrorCode::InvalidValue, "mask is NULL");
  if (!LiveHandles::get().contains(mask) || mask->magic != kBlockMaskMagic)
    return makeError(ErrorCode::InvalidValue,
                     "block mask {0} is not a live block mask (destroyed already, or not one)",
                     (const void *)mask);
  return llvm::Error::success();
}

// Whether a call of `params` has the shape `mask` was built for; the error says what
// differs.
llvm::Error checkSameShape(const fj_block_mask_s &mask, const FjForwardParams &params) {
  const bool varlen = params.cu_seqlens_q != nullptr;
  if (params.batch != mask.batch || params.seqlen_q != mask.seqlenQ ||
      params.seqlen_k != mask.seqlenK || varlen != mask.varlen)
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask was built for batch {0}, seqlen_q {1}, seqlen_k {2}{3}; "
                     "this call has batch {4}, seqlen_q {5}, seqlen_k {6}{7}: build a mask "
                     "for this shape",
                     mask.batch, mask.seqlenQ, mask.seqlenK, mask.varlen ? " (cu_seqlens)" : "",
                     params.batch, params.seqlen_q, params.seqlen_k,
                     varlen ? " (cu_seqlens)" : "");
  return llvm::Error::success();
}

const tuner::ForwardKernel &forwardVariant(const fj_kernel_s &kernel, int index) {
  // dispatchForward only returns loaded forward variants.
  return static_cast<const tuner::ForwardKernel &>(*kernel.variants[index].kernel);
}

// Builds `mask` for `params` (checked, with work) on `stream`.
llvm::Error build(fj_block_mask_s &mask, const FjForwardParams &params, void *stream) {
  if (mask.shape.workTiles() == 0)
    return llvm::Error::success();
  if (llvm::Error error = mask.kernel->context->device->makeCurrent())
    return error;
  return forwardVariant(*mask.kernel, mask.variant)
      .buildBlockMask(params, mask.shape, mask.buffer, static_cast<CUstream>(stream));
}

// The backward pass's step lists of `mask` for `params` (checked, with work), when the
// kernel has a backward pass whose variant for these sizes walks them: the variant is
// recorded either way, the lists allocated (`allocate`) and built on `stream`, with bit
// slots for a kernel that reads keep bits (allocateAndBuild).
llvm::Error buildBackward(fj_block_mask_s &mask, const FjForwardParams &params, bool allocate,
                          void *stream) {
  const fj_kernel_s &kernel = *mask.kernel;
  const int index = dispatchBackward(kernel, params);
  if (index < 0)
    return llvm::Error::success();
  const auto *backward = tuner::BackwardKernel::of(*kernel.variants[index].kernel);
  FjBackwardParams backwardParams{};
  backwardParams.fwd = params;
  auto build = [&]() -> llvm::Error {
    return backward->buildBlockSteps(backwardParams, mask.stepsShape, mask.stepsBuffer,
                                     static_cast<CUstream>(stream));
  };
  if (!allocate)
    return mask.stepsShape.lists() == 0 ? llvm::Error::success() : build();
  mask.backwardVariant = index;
  if (!backward || !backward->hasBlockSteps())
    return llvm::Error::success();  // a module without the builder: every step
  const int group = params.heads_q / params.heads_kv;
  mask.stepsShape = tuner::BlockStepsShape::of(backward->entries(), params.batch,
                                               params.heads_kv, group, params.seqlen_q,
                                               params.seqlen_k, mask.sharedBatch,
                                               mask.sharedHeads);
  // An entry packs the query head within the group in 8 bits and the query block in 23:
  // past that the backward walks every step (as without a mask), the forward's part
  // still serves.
  if (group > 255 || mask.stepsShape.capacity / group >= (1 << 23)) {
    mask.stepsShape = {};
    return llvm::Error::success();
  }
  if (mask.stepsShape.lists() == 0)
    return llvm::Error::success();
  return tuner::allocateAndBuild(mask.stepsShape, mask.stepsBuffer, backward->entries().stepBits,
                                 build, static_cast<CUstream>(stream));
}

} // namespace

llvm::Expected<fj_block_mask_s *> createBlockMask(const fj_kernel_s *kernel,
                                                  const fj_forward_args *args,
                                                  const fj_block_mask_options *options,
                                                  void *stream) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return std::move(error);
  if (kernel->desc.features.maskMod.empty())
    return makeError(ErrorCode::InvalidValue,
                     "kernel {0} has no mask_mod: a block mask serves only a mask_mod's kernel",
                     kernel->specKey);
  fj_block_mask_options opts{};
  if (options)
    if (llvm::Error error =
            copyInStruct(options, "options", "fj_block_mask_options", opts))
      return std::move(error);
  FjForwardParams params;
  bool noWork = false;
  fj_block_mask given = nullptr;
  if (llvm::Error error = checkForwardArgs(kernel->desc, args, params, noWork, &given))
    return std::move(error);
  if (given)
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask is set: the arguments to build a block mask for must "
                     "not carry one");
  const bool varlen = params.cu_seqlens_q != nullptr;
  if (varlen && opts.shared_across_batch)
    return makeError(ErrorCode::InvalidValue,
                     "options->shared_across_batch is set, but the arguments have cu_seqlens: "
                     "sequences of different lengths cannot share one mask");

  auto mask = std::make_unique<fj_block_mask_s>();
  mask->kernel = kernel;
  mask->batch = params.batch;
  mask->seqlenQ = params.seqlen_q;
  mask->seqlenK = params.seqlen_k;
  mask->varlen = varlen;
  mask->sharedBatch = opts.shared_across_batch != 0;
  mask->sharedHeads = opts.shared_across_heads != 0;
  if (!noWork) {
    llvm::Expected<int> index = dispatchForward(*kernel, params, /*count=*/false);
    if (!index)
      return index.takeError();
    mask->variant = *index;
    const tuner::ForwardKernel &variant = forwardVariant(*kernel, *index);
    if (!variant.geometry().blockMask)
      return makeError(ErrorCode::Internal, "kernel {0}: variant {1} has no block-mask builder",
                       kernel->specKey, *index);
    mask->shape = variant.blockMaskShape(params, opts.shared_across_batch != 0,
                                         opts.shared_across_heads != 0);
    if (llvm::Error error = kernel->context->device->makeCurrent())
      return std::move(error);
    if (llvm::Error error = tuner::allocateAndBuild(
            mask->shape, mask->buffer, /*withBits=*/true,
            [&] { return build(*mask, params, stream); }, static_cast<CUstream>(stream)))
      return std::move(error);
    if (llvm::Error error = buildBackward(*mask, params, /*allocate=*/true, stream))
      return std::move(error);
  }
  kernel->blockMasks.fetch_add(1);
  fj_block_mask_s *out = mask.release();
  LiveHandles::get().add(out);
  return out;
}

llvm::Error updateBlockMask(fj_block_mask_s *mask, const fj_forward_args *args, void *stream) {
  if (llvm::Error error = checkLiveMask(mask))
    return error;
  FjForwardParams params;
  bool noWork = false;
  fj_block_mask given = nullptr;
  if (llvm::Error error = checkForwardArgs(mask->kernel->desc, args, params, noWork, &given))
    return error;
  if (given)
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask is set: the arguments to build a block mask for must "
                     "not carry one");
  if (llvm::Error error = checkSameShape(*mask, params))
    return error;
  if (noWork)
    return llvm::Error::success();
  if (llvm::Error error = build(*mask, params, stream))
    return error;
  return buildBackward(*mask, params, /*allocate=*/false, stream);
}

llvm::Error destroyBlockMask(fj_block_mask_s *mask) {
  if (!mask)
    return makeError(ErrorCode::InvalidValue, "mask is NULL");
  if (!LiveHandles::get().remove(mask))
    return makeError(ErrorCode::InvalidValue,
                     "block mask {0} is not a live block mask (destroyed twice, or not one)",
                     (const void *)mask);
  const fj_kernel_s *kernel = mask->kernel;
  mask->magic = kDeadMagic;
  // The buffer is freed in the kernel's context.
  llvm::Error current = kernel->context->device->makeCurrent();
  delete mask;
  kernel->blockMasks.fetch_sub(1);
  return current;
}

namespace {

// The launch path's checks both passes share: `mask` is live, of `kernel`, and of the
// call's shape.
llvm::Error checkMaskServes(const fj_kernel_s &kernel, const fj_block_mask_s *mask,
                            const FjForwardParams &params) {
  if (mask->magic != kBlockMaskMagic)
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask {0} is not a live block mask (destroyed already, or "
                     "not one)",
                     (const void *)mask);
  if (mask->kernel != &kernel)
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask was built for kernel {0} ({1}), not this one ({2})",
                     (const void *)mask->kernel, mask->kernel->specKey, kernel.specKey);
  return checkSameShape(*mask, params);
}

} // namespace

llvm::Error useBlockMask(const fj_kernel_s &kernel, const fj_block_mask_s *mask, int index,
                         FjForwardParams &params) {
  if (llvm::Error error = checkMaskServes(kernel, mask, params))
    return error;
  if (mask->variant != index)
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask was built for variant {0} of the kernel, but these "
                     "arguments launch variant {1}: build the mask with the arguments of the "
                     "calls it serves (their strides and alignment choose the variant too)",
                     mask->variant, index);
  mask->shape.describe(params, mask->buffer.ptr());
  return llvm::Error::success();
}

llvm::Error useBackwardBlockMask(const fj_kernel_s &kernel, const fj_block_mask_s *mask,
                                 int index, FjBackwardParams &params) {
  if (llvm::Error error = checkMaskServes(kernel, mask, params.fwd))
    return error;
  // A mask built for a call with no queries has no backward part: nor does the call.
  if (mask->backwardVariant >= 0 && mask->backwardVariant != index)
    return makeError(ErrorCode::InvalidValue,
                     "args->block_mask was built for backward variant {0} of the kernel, but "
                     "these arguments launch variant {1}: build the mask with the forward "
                     "arguments of the calls it serves",
                     mask->backwardVariant, index);
  if (mask->backwardVariant == index && mask->stepsShape.lists() > 0)
    mask->stepsShape.describe(params, mask->stepsBuffer.ptr());
  return llvm::Error::success();
}

} // namespace flashjit::api
