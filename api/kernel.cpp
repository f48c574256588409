// fj_kernel: a description's variants, loaded and ready; and the launch itself.
#include "api/handles.h"
#include "api/live_handles.h"
#include "api/validate_structs.h"
#include "api/validate_tensor.h"

#include "generator/spec.h"
#include "support/error.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

namespace flashjit::api {
namespace {

// Bucket dimensions stay within what Bucket::forShape can round up to a power of two.
int bucketDim(int64_t value) { return (int)std::clamp<int64_t>(value, 1, kMaxSeqlen); }

fj_origin publicOrigin(tuner::Origin origin) {
  switch (origin) {
  case tuner::Origin::ShippedCache: return FJ_ORIGIN_SHIPPED_CACHE;
  case tuner::Origin::UserCache: return FJ_ORIGIN_USER_CACHE;
  case tuner::Origin::CompiledNow: return FJ_ORIGIN_COMPILED_NOW;
  case tuner::Origin::TunedNow: return FJ_ORIGIN_TUNED_NOW;
  case tuner::Origin::SystemCache: return FJ_ORIGIN_SYSTEM_CACHE;
  }
  return FJ_ORIGIN_COMPILED_NOW;
}

generator::KernelSpec specFor(const AttentionDesc &desc, llvm::StringRef target,
                              generator::Family family) {
  generator::KernelSpec spec;
  spec.family = family;
  auto dtypeOf = [](fj_dtype dtype) {
    return dtype == FJ_DTYPE_FP16   ? generator::DType::FP16
           : dtype == FJ_DTYPE_E4M3 ? generator::DType::E4M3
                                    : generator::DType::BF16;
  };
  spec.dtype = dtypeOf(desc.dtype);
  spec.outDtype = dtypeOf(desc.outDtype);
  spec.headDim = desc.headDim;
  spec.headDimV = desc.headDimV;
  spec.causal = desc.causal;
  spec.target = target.str();
  spec.features = desc.features;  // tuningArgs included: the tuner runs user code with them
  return spec;
}

// What the loaded kernel uses, from the driver: the compile log's figure is missing
// (-1) for binaries that came from a cache without it.
int registersOf(const tuner::Selection &selection) {
  if (selection.kernel && selection.kernel->registers() > 0)
    return selection.kernel->registers();
  return selection.registers;
}

llvm::Error checkVariantIndex(const fj_kernel_s *kernel, int index) {
  if (index < 0 || index >= (int)kernel->variants.size())
    return makeError(ErrorCode::InvalidValue,
                     "index is {0}: the kernel has {1} variant(s), 0 to {2}", index,
                     kernel->variants.size(), kernel->variants.size() - 1);
  return llvm::Error::success();
}

// The length ladder of docs/TUNING.md ("One handle, every length"), tuned before the
// hinted bucket so that the handle then loads every length's winner. Each bucket is
// an optimisation only: one that fails to tune is logged and left to the nearest. Not
// for user code that reads tensors (below).
void tuneLengthLadder(fj_context_s &context, const generator::KernelSpec &spec,
                      const AttentionDesc &desc) {
  // User code that reads tensors runs, while tuning, on tuning args sized for the
  // hinted shape: the ladder's longer rungs would index past them.
  if (spec.features.readsTensors()) {
    context.log(FJ_LOG_INFO,
                llvm::formatv("{0}: the length ladder is not tuned: the user code reads "
                              "args.tensor, and tuning_mod_args describe the hinted shape "
                              "only; other lengths run on its bucket's tile",
                              spec.key())
                    .str());
    return;
  }
  const std::vector<tuner::Bucket> ladder =
      tuner::lengthLadder(desc.headsQ, desc.batchHinted ? desc.batchHint : 0);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ladder.size(); ++i) {
    context.log(FJ_LOG_INFO, llvm::formatv("{0}: length ladder {1}/{2}, bucket {3} ({4:f1} s "
                                           "so far)",
                                           spec.key(), i + 1, ladder.size(), ladder[i].key(),
                                           std::chrono::duration<double>(
                                               std::chrono::steady_clock::now() - start)
                                               .count())
                                 .str());
    auto selection = context.tuner->select(spec, ladder[i]);
    if (!selection)
      context.log(FJ_LOG_WARNING,
                  llvm::formatv("{0}: length ladder bucket {1} not tuned ({2}); its calls "
                                "use the nearest tuned bucket",
                                spec.key(), ladder[i].key(),
                                llvm::toString(selection.takeError()))
                      .str());
  }
}

bool modeTunes(fj_tune_mode mode) {
  return mode == FJ_TUNE_DEFAULT || mode == FJ_TUNE_EXHAUSTIVE;
}

int log2Of(int powerOfTwo) { return (int)llvm::Log2_32((uint32_t)powerOfTwo); }

} // namespace

uint32_t packBucket(const tuner::Bucket &b) {
  return 1u << 15 | (uint32_t)log2Of(b.seqQ) << 10 | (uint32_t)log2Of(b.seqK) << 5 |
         (uint32_t)log2Of(b.batchHeads);
}

tuner::Bucket unpackBucket(uint32_t packed) {
  return tuner::Bucket{1 << ((packed >> 10) & 31), 1 << ((packed >> 5) & 31), 1 << (packed & 31)};
}

tuner::Bucket bucketFor(int64_t seqQ, int64_t seqK, int64_t batchHeads) {
  return tuner::Bucket::forShape(bucketDim(seqQ), bucketDim(seqK), bucketDim(batchHeads));
}

llvm::Error checkKernelMagic(const fj_kernel_s *kernel) {
  if (!kernel)
    return makeError(ErrorCode::InvalidValue, "kernel is NULL");
  if (kernel->magic != kKernelMagic)
    return makeError(ErrorCode::InvalidValue,
                     "kernel {0} is not a live kernel (released already, or not one)",
                     (const void *)kernel);
  return llvm::Error::success();
}

std::vector<generator::KernelSpec> kernelSpecsFor(const AttentionDesc &desc,
                                                  llvm::StringRef target,
                                                  const tuner::FamilyPlan &plan) {
  std::vector<generator::KernelSpec> specs;
  for (generator::Family family : plan.families())
    // FP8 is fwd_wgmma's alone: no fallback family (its calls must give what TMA needs).
    if (desc.dtype != FJ_DTYPE_E4M3 || family == generator::Family::FwdWgmma)
      specs.push_back(specFor(desc, target, family));
  return specs;
}

llvm::Expected<generator::KernelSpec> backwardSpecFor(const AttentionDesc &desc,
                                                      llvm::StringRef target,
                                                      const tuner::FamilyPlan &plan) {
  generator::KernelSpec spec = specFor(desc, target, plan.backward);
  llvm::Expected<generator::Family> family = tuner::backwardFamilyFor(plan, spec);
  if (!family)
    return family.takeError();
  spec.family = *family;
  if (llvm::Error error = generator::validateSpec(spec))
    return std::move(error);
  return spec;
}

llvm::Error checkLiveKernel(const fj_kernel_s *kernel) {
  if (!kernel)
    return makeError(ErrorCode::InvalidValue, "kernel is NULL");
  if (!LiveHandles::get().contains(kernel) || kernel->magic != kKernelMagic)
    return makeError(ErrorCode::InvalidValue,
                     "kernel {0} is not a live kernel (released already, or not one)",
                     (const void *)kernel);
  return llvm::Error::success();
}

// The variant for the hinted bucket. Every mode but Cached gets it from select()
// (cache hit, else tuned or compiled now). Cached never compiles: on a miss it takes
// the nearest bucket already tuned for the spec, else the spec's default tile if the
// caches hold its binary (`flashjit tune --compile-only` puts it there), else NotFound.
llvm::Expected<std::vector<tuner::Selection>>
selectVariants(fj_context_s &context, const generator::KernelSpec &spec,
               const tuner::Bucket &hinted) {
  tuner::Tuner &tuner = *context.tuner;
  std::vector<tuner::Selection> variants;
  auto primary = tuner.select(spec, hinted);
  if (primary) {
    variants.push_back(std::move(*primary));
  } else {
    ErrorReport miss = takeErrorReport(primary.takeError());
    if (miss.code != ErrorCode::NotFound || context.mode != FJ_TUNE_CACHED)
      return makeError(miss.code, miss.message);
    auto tuned = tuner.loadTuned(spec);
    if (!tuned)
      return tuned.takeError();
    if (tuned->empty()) {
      auto fallback = tuner.heuristicDefault(spec);
      if (!fallback) {
        ErrorReport none = takeErrorReport(fallback.takeError());
        return makeError(none.code == ErrorCode::NotFound ? ErrorCode::NotFound : none.code,
                         "{0}; no other bucket of it is tuned; and {1}", miss.message,
                         none.message);
      }
      variants.push_back(std::move(*fallback));
      return std::move(variants);
    }
    context.log(FJ_LOG_INFO, miss.message + "; using the nearest tuned bucket");
    std::vector<tuner::Bucket> buckets;
    for (const tuner::Selection &s : *tuned)
      buckets.push_back(s.bucket);
    int nearest = tuner::nearestBucket(buckets, hinted);
    std::swap((*tuned)[0], (*tuned)[nearest]);  // the primary variant comes first
    (*tuned)[0].note += "; " + tuner::Tuner::dispatchNote((*tuned)[0], hinted);
    return std::move(*tuned);
  }
  // Every other bucket already tuned for this spec, so launches of other sizes use
  // their own winners. Only an optimisation: a failure leaves the primary alone.
  auto tuned = tuner.loadTuned(spec);
  if (!tuned) {
    context.log(FJ_LOG_WARNING, "cannot load the other tuned buckets of " + spec.key() +
                                    ": " + llvm::toString(tuned.takeError()));
    return std::move(variants);
  }
  for (tuner::Selection &selection : *tuned)
    if (selection.bucket != variants[0].bucket)
      variants.push_back(std::move(selection));
  return std::move(variants);
}

llvm::Expected<fj_kernel_s *> getKernel(fj_context_s *context, const fj_attention_desc *in) {
  auto start = std::chrono::steady_clock::now();
  if (llvm::Error error = checkLiveContext(context))
    return std::move(error);
  auto desc = checkDesc(in);
  if (!desc)
    return desc.takeError();
  if (!context->device || !context->tuner)
    return makeError(ErrorCode::Internal, "context {0} has no device", (const void *)context);
  std::vector<generator::KernelSpec> specs =
      kernelSpecsFor(*desc, context->target, context->families);
  if (specs.empty())
    return makeError(ErrorCode::NotSupported,
                     "FP8 (FJ_DTYPE_E4M3) runs on fwd_wgmma, on an sm_90a device (H100, H200); "
                     "this context's device is {0} and its families exclude it",
                     context->target);
  for (const generator::KernelSpec &spec : specs)
    if (llvm::Error error = generator::validateSpec(spec))
      return std::move(error);
  // Checked before anything is compiled, so that a backward family forced where it
  // cannot run fails the call at once.
  std::optional<generator::KernelSpec> bwd;
  if (desc->backward) {
    llvm::Expected<generator::KernelSpec> spec =
        backwardSpecFor(*desc, context->target, context->families);
    if (!spec)
      return spec.takeError();
    bwd = std::move(*spec);
  }
  if (llvm::Error error = context->device->makeCurrent())
    return std::move(error);

  // The forward's (and backward's) bucket: without a batch hint, a 16k-token step's;
  // for user code that reads tensors, the hinted shape's (what its tuning args hold).
  const bool bounded = tuner::boundedByTuningShape(specs[0]);
  const int stepBatch = desc->batchHinted || bounded ? desc->batchHint
                                                     : tuner::ladderBatch(desc->seqQHint);
  tuner::Bucket hinted =
      bucketFor(desc->seqQHint, desc->seqKHint, (int64_t)stepBatch * desc->headsQ);
  if (desc->tunesLadder() && modeTunes(context->mode))
    tuneLengthLadder(*context, specs[0], *desc);
  auto variants = selectVariants(*context, specs[0], hinted);
  if (!variants && specs.size() > 1) {
    // The primary family has no kernel to give (in cached mode: a cache prepared
    // before it existed; else no tile of it compiled and passed): the fallback family,
    // which takes every argument, serves the handle alone.
    ErrorReport failed = takeErrorReport(variants.takeError());
    context->log(failed.code == ErrorCode::NotFound ? FJ_LOG_INFO : FJ_LOG_WARNING,
                 llvm::formatv("{0}: {1}; using {2} instead", specs[0].key(), failed.message,
                               generator::familyName(specs[1].family))
                     .str());
    specs.erase(specs.begin());
    variants = selectVariants(*context, specs[0], hinted);
    if (!variants) {
      ErrorReport also = takeErrorReport(variants.takeError());
      return makeError(also.code, "{0}; nor from {1}: {2}", failed.message, specs[0].key(),
                       also.message);
    }
  }
  if (!variants)
    return variants.takeError();
  const generator::KernelSpec &spec = specs[0];

  auto kernel = std::make_unique<fj_kernel_s>();
  kernel->desc = *desc;
  // The caller's tuning arguments were valid during this call only.
  kernel->desc.features.hasTuningArgs = false;
  kernel->desc.features.tuningArgs = {};
  kernel->family = generator::familyName(spec.family).str();
  kernel->specKey = spec.key();
  kernel->variants = std::move(*variants);
  kernel->familyVariants = (int)kernel->variants.size();
  kernel->primary = 0;
  if (specs.size() > 1) {
    // Chosen now rather than at the first call that needs it: fj_forward never compiles,
    // tunes or blocks (CUDA graphs capture it), so the handle carries both families.
    auto fallback = selectVariants(*context, specs[1], hinted);
    if (!fallback) {
      ErrorReport failed = takeErrorReport(fallback.takeError());
      return makeError(failed.code,
                       "{0} is ready, but not the {1} kernel that takes the calls it cannot "
                       "(cu_seqlens, strides that are not multiples of 16 bytes, no keys): "
                       "{2}",
                       spec.key(), specs[1].key(), failed.message);
    }
    kernel->fallbackFamily = generator::familyName(specs[1].family).str();
    for (tuner::Selection &selection : *fallback) {
      selection.note += "; fallback for the calls " + kernel->family +
                        " cannot take (cu_seqlens, strides that are not multiples of 16 "
                        "bytes, no keys)";
      kernel->variants.push_back(std::move(selection));
    }
  }
  kernel->backwardBegin = (int)kernel->variants.size();
  if (bwd) {
    // The backward pass: its own family (bwd_wgmma on sm_90a for the head dims it
    // takes, else bwd_mma), tuned and cached like the forward; chosen now for the same
    // reason as the fallback.
    auto backward = selectVariants(*context, *bwd, hinted);
    if (!backward) {
      ErrorReport failed = takeErrorReport(backward.takeError());
      return makeError(failed.code, "{0} is ready, but not its backward pass {1}: {2}",
                       spec.key(), bwd->key(), failed.message);
    }
    kernel->backwardFamily = generator::familyName(bwd->family).str();
    for (tuner::Selection &selection : *backward)
      kernel->variants.push_back(std::move(selection));
  }
  kernel->decodeBegin = (int)kernel->variants.size();
  if (desc->decode) {
    // The decode kernels (dec_mma on every target): tuned and cached like the forward,
    // chosen now for the same reason (fj_decode never compiles or blocks).
    generator::KernelSpec dec = specFor(*desc, context->target, context->families.decode);
    if (desc->fp8Cache()) {  // an FP8 cache: e4m3 K/V, q and o of the dtype
      dec.outDtype = dec.dtype;
      dec.dtype = generator::DType::E4M3;
    }
    if (llvm::Error error = generator::validateSpec(dec))
      return std::move(error);
    // Decode's own bucket: a decode step's query rows (the hint when it is one, else
    // 1) against the hinted cache length (4096 when the hint is a prefill's or unset,
    // but for user code that reads tensors sized for the hint).
    const int decodeRows = desc->seqQHint <= 64 ? desc->seqQHint : 1;
    const int decodeKeys = desc->seqKHint >= 256 || bounded ? desc->seqKHint : 4096;
    dec.features.tuningShape.seqQ = decodeRows;  // a step's rows: within the hint
    const tuner::Bucket decodeHinted = tuner::Bucket::forDecode(
        decodeRows, decodeKeys, desc->batchHint, desc->headsQ, desc->headsKV);
    auto decode = selectVariants(*context, dec, decodeHinted);
    if (!decode) {
      ErrorReport failed = takeErrorReport(decode.takeError());
      return makeError(failed.code, "{0} is ready, but not its decode kernels {1}: {2}",
                       spec.key(), dec.key(), failed.message);
    }
    kernel->decodeFamily = generator::familyName(dec.family).str();
    for (tuner::Selection &selection : *decode)
      kernel->variants.push_back(std::move(selection));
  }
  kernel->calls = std::make_unique<std::atomic<int64_t>[]>(kernel->variants.size());
  for (const tuner::Selection &selection : kernel->variants) {
    if (!selection.kernel)
      return makeError(ErrorCode::Internal, "the tuner returned variant {0}/{1} unloaded",
                       selection.spec.key(), selection.bucket.key());
    kernel->buckets.push_back(selection.bucket);
    kernel->bucketKeys.push_back(selection.bucket.key());
    kernel->tileKeys.push_back(selection.tile.key());
    if (selection.origin == tuner::Origin::CompiledNow ||
        selection.origin == tuner::Origin::TunedNow)
      ++kernel->compiledNow;
  }
  kernel->getMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start).count();
  fj_kernel_s *handle = kernel.release();
  adoptKernel(*context, handle);
  return handle;
}

llvm::Error releaseKernel(fj_kernel_s *kernel) {
  if (!kernel)
    return makeError(ErrorCode::InvalidValue, "kernel is NULL");
  // Membership first: a handle released before is not dereferenced.
  if (!LiveHandles::get().remove(kernel))
    return makeError(ErrorCode::InvalidValue,
                     "kernel {0} is not a live kernel (released twice, or not one)",
                     (const void *)kernel);
  if (int masks = kernel->blockMasks.load(); masks > 0) {
    LiveHandles::get().add(kernel);  // still live: the caller may try again
    return makeError(ErrorCode::InvalidValue,
                     "kernel {0} has {1} block mask(s) not yet destroyed; destroy them first",
                     kernel->specKey, masks);
  }
  fj_context_s *context = kernel->context;
  kernel->magic = kDeadMagic;
  delete kernel;
  if (context) {
    std::lock_guard<std::mutex> lock(context->mutex);
    --context->outstanding;
  }
  return llvm::Error::success();
}

// What fj_forward launches: the family's variant for the call's bucket (or the
// nearest), the fallback family's when the primary cannot take the arguments.
// tuner::nearestBucket over the family's buckets: what Tuner::dispatch decides, without
// the vector it builds.
llvm::Expected<int> dispatchForward(const fj_kernel_s &kernel, const FjForwardParams &params,
                                    bool count) {
  const tuner::Bucket wanted =
      bucketFor(params.seqlen_q, params.seqlen_k, (int64_t)params.batch * params.heads_q);
  llvm::ArrayRef<tuner::Bucket> buckets(kernel.buckets);
  int index = tuner::nearestBucket(buckets.take_front(kernel.familyVariants), wanted);
  if (index < 0)
    return makeError(ErrorCode::Internal, "kernel {0} has no variant to dispatch to",
                     kernel.specKey);
  // Arguments a TMA kernel cannot take go to the fallback family's variants. (The
  // forward families' variants are forward kernels: getKernel loaded them so.)
  if (!kernel.variants[index].kernel)
    return makeError(ErrorCode::Internal, "kernel {0}: variant {1} is not loaded",
                     kernel.specKey, index);
  const auto &primary = static_cast<const tuner::ForwardKernel &>(*kernel.variants[index].kernel);
  if (primary.geometry().tma.enabled && tuner::tmaArgumentProblem(params)) {
    llvm::ArrayRef<tuner::Bucket> fallbacks = buckets.slice(
        kernel.familyVariants, kernel.backwardBegin - kernel.familyVariants);
    int fallback = tuner::nearestBucket(fallbacks, wanted);
    if (fallback < 0)
      return makeError(ErrorCode::NotSupported, "kernel {0} ({1}, no fallback family): {2}",
                       kernel.specKey, kernel.family,
                       llvm::toString(tuner::checkTmaArguments(params)));
    index = kernel.familyVariants + fallback;
  }
  if (count) {
    kernel.countLaunch(index);
    kernel.forwardCalls.fetch_add(1, std::memory_order_relaxed);
    if (!kernel.tunedFor(index, wanted)) {
      kernel.forwardCallsUntuned.fetch_add(1, std::memory_order_relaxed);
      kernel.lastUntunedBucket.store(packBucket(wanted), std::memory_order_relaxed);
    }
  }
  return index;
}

// The hot path: no allocation, no lock, no synchronisation on success.
llvm::Error forward(const fj_kernel_s *kernel, const fj_forward_args *args, void *stream) {
  if (llvm::Error error = checkKernelMagic(kernel))
    return error;
  FjForwardParams params;
  bool noWork = false;
  fj_block_mask blockMask = nullptr;
  void *tileCounter = nullptr;
  if (llvm::Error error =
          checkForwardArgs(kernel->desc, args, params, noWork, &blockMask, &tileCounter))
    return error;
  if (noWork)
    return llvm::Error::success();
  llvm::Expected<int> index = dispatchForward(*kernel, params, /*count=*/true);
  if (!index)
    return index.takeError();
  if (blockMask)
    if (llvm::Error error = useBlockMask(*kernel, blockMask, *index, params))
      return error;
  if (llvm::Error error = kernel->context->device->makeCurrent())
    return error;
  return static_cast<const tuner::ForwardKernel &>(*kernel->variants[*index].kernel)
      .launch(params, static_cast<CUstream>(stream), tileCounter);
}

llvm::Error forwardWorkspaceSize(const fj_kernel_s *kernel, const fj_forward_args *args,
                                 size_t *bytes) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return error;
  if (!bytes)
    return makeError(ErrorCode::InvalidValue, "bytes (the output pointer) is NULL");
  *bytes = 0;
  fj_forward_args a;
  if (llvm::Error error = copyInStruct(args, "args", "fj_forward_args", a))
    return error;
  // Only the sizes matter here (the pointers and strides may not be set yet).
  if (llvm::Error error = checkSize("batch", a.batch, kMaxGridYZ, "a CUDA grid dimension"))
    return error;
  if (llvm::Error error = checkSize("seqlen_k", a.seqlen_k, kMaxSeqlen, "2^30"))
    return error;
  if (llvm::Error error = checkFp8Sizes(kernel->desc, a))
    return error;
  *bytes = (size_t)fp8WorkspaceBytes(kernel->desc, a);
  if (kernel->desc.dtype != FJ_DTYPE_E4M3 && a.block_mask)
    *bytes = kTileCounterBytes;  // optional: the walk's tile counter
  return llvm::Error::success();
}
static_assert(kTileCounterBytes == tuner::kTileCounterBytes,
              "the caller's workspace is what the launch takes as its tile counter");

llvm::Error forwardDispatchInfo(const fj_kernel_s *kernel, const fj_forward_args *args,
                                fj_dispatch_info *info) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return error;
  if (!info)
    return makeError(ErrorCode::InvalidValue, "info is NULL");
  if (llvm::Error error =
          checkStructSize<fj_dispatch_info>(info->struct_size, "info", "fj_dispatch_info"))
    return error;
  FjForwardParams params;
  bool noWork = false;
  if (llvm::Error error = checkForwardArgs(kernel->desc, args, params, noWork))
    return error;
  fj_dispatch_info out{};
  const tuner::Bucket wanted =
      bucketFor(params.seqlen_q, params.seqlen_k, (int64_t)params.batch * params.heads_q);
  out.variant = -1;
  out.bucket_seqlen_q = wanted.seqQ;
  out.bucket_seqlen_k = wanted.seqK;
  out.bucket_batch_heads = wanted.batchHeads;
  std::snprintf(out.bucket, sizeof(out.bucket), "%s", wanted.key().c_str());
  if (!noWork) {
    llvm::Expected<int> index = dispatchForward(*kernel, params, /*count=*/false);
    if (!index)
      return index.takeError();
    out.variant = *index;
    out.tuned = kernel->tunedFor(*index, wanted);
  }
  return copyOutStruct(out, info, "info", "fj_dispatch_info");
}

llvm::Error kernelInfo(const fj_kernel_s *kernel, struct fj_kernel_info *info) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return error;
  if (!info)
    return makeError(ErrorCode::InvalidValue, "info is NULL");
  if (kernel->variants.empty())
    return makeError(ErrorCode::Internal, "kernel {0} has no variant", kernel->specKey);
  const tuner::Selection &primary = kernel->variants[kernel->primary];
  struct fj_kernel_info out {};
  out.family = kernel->family.c_str();
  out.spec_key = kernel->specKey.c_str();
  out.device_key = kernel->context->deviceKey.c_str();
  out.num_variants = (int32_t)kernel->variants.size();
  out.primary_variant = kernel->primary;
  out.compiled_now = kernel->compiledNow;
  out.origin = publicOrigin(primary.origin);
  out.block_m = primary.tile.blockM;
  out.block_n = primary.tile.blockN;
  out.warps = primary.tile.warps;
  out.stages = primary.tile.stages;
  out.registers = registersOf(primary);
  out.shared_bytes = primary.sharedBytes;
  out.tuned_us = primary.tunedUs;
  out.get_ms = kernel->getMs;
  out.backward_family = kernel->backwardFamily.c_str();
  out.num_backward_variants = (int32_t)(kernel->decodeBegin - kernel->backwardBegin);
  out.decode_family = kernel->decodeFamily.c_str();
  out.num_decode_variants = (int32_t)kernel->variants.size() - kernel->decodeBegin;
  out.forward_calls = kernel->forwardCalls.load(std::memory_order_relaxed);
  out.forward_calls_untuned = kernel->forwardCallsUntuned.load(std::memory_order_relaxed);
  if (uint32_t last = kernel->lastUntunedBucket.load(std::memory_order_relaxed))
    std::snprintf(out.last_untuned_bucket, sizeof(out.last_untuned_bucket), "%s",
                  unpackBucket(last).key().c_str());
  return copyOutStruct(out, info, "info", "struct fj_kernel_info");
}

llvm::Error variantInfo(const fj_kernel_s *kernel, int index, fj_variant_info *info) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return error;
  if (llvm::Error error = checkVariantIndex(kernel, index))
    return error;
  const tuner::Selection &v = kernel->variants[index];
  fj_variant_info out{};
  out.bucket = kernel->bucketKeys[index].c_str();
  out.tile = kernel->tileKeys[index].c_str();
  out.binary_key = v.binaryKey.c_str();
  out.binary_key_text = v.binaryKeyText.c_str();
  out.tuning_key = v.tuningKeyText.c_str();
  out.note = v.note.c_str();
  out.bucket_seqlen_q = v.bucket.seqQ;
  out.bucket_seqlen_k = v.bucket.seqK;
  out.bucket_batch_heads = v.bucket.batchHeads;
  out.origin = publicOrigin(v.origin);
  out.block_m = v.tile.blockM;
  out.block_n = v.tile.blockN;
  out.warps = v.tile.warps;
  out.stages = v.tile.stages;
  out.registers = registersOf(v);
  out.shared_bytes = v.sharedBytes;
  out.num_splits = v.splits;
  out.tuned_us = v.tunedUs;
  out.calls = kernel->launches(index);
  return copyOutStruct(out, info, "info", "fj_variant_info");
}

llvm::Error kernelSource(const fj_kernel_s *kernel, int index, const char **source,
                         size_t *length) {
  if (llvm::Error error = checkLiveKernel(kernel))
    return error;
  if (llvm::Error error = checkVariantIndex(kernel, index))
    return error;
  if (!source)
    return makeError(ErrorCode::InvalidValue, "source is NULL");
  const std::string &text = kernel->variants[index].source;
  *source = text.c_str();
  if (length)
    *length = text.size();
  return llvm::Error::success();
}

} // namespace flashjit::api
