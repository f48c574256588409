// What the opaque C handles are: fj_context (a device, its caches, its tuner, the
// kernels it has given out) and fj_kernel (one description's ready-to-launch variants).
#pragma once

#include "api/logger.h"
#include "api/validate.h"
#include "flashjit/flashjit.h"

#include "cache/cache.h"
#include "runtime/driver.h"
#include "tuner/family.h"
#include "tuner/backward_kernel.h"
#include "tuner/loaded_kernel.h"
#include "tuner/tuner.h"

#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace flashjit::api {

// First word of a live handle; overwritten when it is freed, so a stale handle is
// (usually) recognised even where the registry is not consulted (fj_forward).
constexpr uint64_t kContextMagic = 0x66'6a'63'74'78'74'21'21ULL;  // "fjctxt!!"
constexpr uint64_t kKernelMagic = 0x66'6a'6b'65'72'6e'21'21ULL;   // "fjkern!!"
constexpr uint64_t kBlockMaskMagic = 0x66'6a'62'6d'61'73'6b'21ULL;  // "fjbmask!"
constexpr uint64_t kDeadMagic = 0x64'65'61'64'64'65'61'64ULL;     // "deaddead"

} // namespace flashjit::api

struct fj_context_s {
  uint64_t magic = flashjit::api::kContextMagic;
  flashjit::api::Logger log;
  fj_tune_mode mode = FJ_TUNE_DEFAULT;
  int ordinal = 0;
  std::string deviceName, target, deviceKey, userCachePath;
  // The kernel families for this device ($FLASHJIT_FAMILY, else by target), resolved once.
  flashjit::tuner::FamilyPlan families;
  // Declared in dependency order: destroyed tuner first, device last.
  std::unique_ptr<flashjit::runtime::Device> device;
  std::unique_ptr<flashjit::cache::Cache> cache;
  std::unique_ptr<flashjit::tuner::Tuner> tuner;

  mutable std::mutex mutex;  // guards `outstanding`
  int outstanding = 0;  // kernels given out and not yet released
};

struct fj_kernel_s {
  uint64_t magic = flashjit::api::kKernelMagic;
  fj_context_s *context = nullptr;  // outlives the kernel (destroy refuses otherwise)
  flashjit::api::AttentionDesc desc;
  // Immutable once the handle is given out, so launches read them without locks.
  // The primary family's variants are [0, familyVariants); the fallback family's (for
  // the arguments the primary cannot take, e.g. cu_seqlens with fwd_wgmma) follow, up
  // to backwardBegin; the backward pass's (desc.backward) are [backwardBegin,
  // decodeBegin); the decode kernels' (desc.decode) are [decodeBegin, end).
  std::vector<flashjit::tuner::Selection> variants;
  std::vector<flashjit::tuner::Bucket> buckets;  // variants[i].bucket, for dispatch
  int familyVariants = 0;
  int backwardBegin = 0;
  std::string backwardFamily;       // "" when the kernel has no backward pass
  int decodeBegin = 0;
  std::string decodeFamily;         // "" when the kernel has no decode kernels
  int primary = 0;                  // the variant for the hinted bucket
  std::vector<std::string> bucketKeys, tileKeys;  // per variant, for fj_variant_info
  std::string family, specKey;      // of the primary family
  std::string fallbackFamily;       // "" when there is none
  int compiledNow = 0;
  double getMs = 0;
  // Per variant, the launches it served. The counters are the launch paths' only
  // writes: relaxed atomics, no locks (fj_kernel_info, fj_variant_info, docs/TUNING.md).
  std::unique_ptr<std::atomic<int64_t>[]> calls;
  mutable std::atomic<int64_t> forwardCalls{0}, forwardCallsUntuned{0};
  mutable std::atomic<uint32_t> lastUntunedBucket{0};  // flashjit::api::packBucket; 0: none
  // Block masks built for this kernel and not yet destroyed (release refuses while any).
  mutable std::atomic<int> blockMasks{0};

  // Whether variant `index` was chosen for `bucket` by a timing on this device (it has
  // a tuning row and that bucket). (Handles made by hand in the unit tests may have
  // fewer variants than buckets, and no counters.)
  bool tunedFor(int index, const flashjit::tuner::Bucket &bucket) const {
    return index < (int)variants.size() && !variants[index].tuningKeyText.empty() &&
           buckets[index] == bucket;
  }
  void countLaunch(int index) const {
    if (calls)
      calls[index].fetch_add(1, std::memory_order_relaxed);
  }
  int64_t launches(int index) const {
    return calls ? calls[index].load(std::memory_order_relaxed) : 0;
  }
};

// A block mask (api/block_mask.cpp): built for one variant of one kernel and one call
// shape; fj_forward checks both before it uses it.
struct fj_block_mask_s {
  uint64_t magic = flashjit::api::kBlockMaskMagic;
  const fj_kernel_s *kernel = nullptr;  // outlives the mask (release refuses otherwise)
  int variant = -1;                     // index into kernel->variants
  int batch = 0, seqlenQ = 0, seqlenK = 0;
  bool varlen = false;
  flashjit::tuner::BlockMaskShape shape;
  flashjit::runtime::DeviceBuffer buffer;  // counts, then lists (BlockMaskShape::bytes)
  // The options it was created with (what its lists share too).
  bool sharedBatch = false, sharedHeads = false;
  // The backward pass's step lists (a kernel got with desc.backward), at the tiles of the
  // backward variant for the shape; -1 / empty otherwise.
  int backwardVariant = -1;  // index into kernel->variants
  flashjit::tuner::BlockStepsShape stepsShape;
  flashjit::runtime::DeviceBuffer stepsBuffer;
};

namespace flashjit::api {

// Registers a new handle with its context (one more kernel outstanding) and makes it live.
void adoptKernel(fj_context_s &context, fj_kernel_s *kernel);

// Whether `context` is a live context handle; the error names `what` otherwise.
llvm::Error checkLiveContext(const fj_context_s *context);
llvm::Error checkLiveKernel(const fj_kernel_s *kernel);

// The specs a kernel for `desc` loads on `target` under `plan`: the primary family's,
// then the fallback's. Pure (no device), so the unit tests check the choice.
std::vector<generator::KernelSpec> kernelSpecsFor(const AttentionDesc &desc,
                                                  llvm::StringRef target,
                                                  const tuner::FamilyPlan &plan);
// The spec of the backward pass a kernel for `desc` loads on `target` under `plan`: the
// family tuner::backwardFamilyFor picks for its head dims (bwd_wgmma on sm_90a for 64 and
// 128, else bwd_mma), validated. Errors: a forced family that cannot take the head dims,
// a spec the generator refuses (features). Pure, like kernelSpecsFor.
llvm::Expected<generator::KernelSpec> backwardSpecFor(const AttentionDesc &desc,
                                                      llvm::StringRef target,
                                                      const tuner::FamilyPlan &plan);

// A bucket in 32 bits (log2 of each size, 5 bits each, and a bit saying it is one), so
// the launch path can record it with one atomic store; unpackBucket inverts it.
uint32_t packBucket(const tuner::Bucket &bucket);
tuner::Bucket unpackBucket(uint32_t packed);

// The variant fj_forward launches for these checked arguments (an index into
// kernel.variants), counting the launch when `count`.
llvm::Expected<int> dispatchForward(const fj_kernel_s &kernel, const FjForwardParams &params,
                                    bool count);

// The C entry points' bodies (api/c_api.cpp wraps each in guard()).
llvm::Expected<fj_context_s *> createContext(const fj_context_options *options);
llvm::Error destroyContext(fj_context_s *context);
llvm::Error contextInfo(const fj_context_s *context, struct fj_context_info *info);

llvm::Expected<fj_kernel_s *> getKernel(fj_context_s *context, const fj_attention_desc *desc);
llvm::Error releaseKernel(fj_kernel_s *kernel);
llvm::Error forward(const fj_kernel_s *kernel, const fj_forward_args *args, void *stream);
llvm::Error forwardDispatchInfo(const fj_kernel_s *kernel, const fj_forward_args *args,
                                fj_dispatch_info *info);
llvm::Error forwardWorkspaceSize(const fj_kernel_s *kernel, const fj_forward_args *args,
                                 size_t *bytes);
// api/backward.cpp
llvm::Error backwardWorkspaceSize(const fj_kernel_s *kernel, const fj_backward_args *args,
                                  size_t *bytes);
llvm::Error backward(const fj_kernel_s *kernel, const fj_backward_args *args, void *stream);
// api/block_mask.cpp
llvm::Expected<fj_block_mask_s *> createBlockMask(const fj_kernel_s *kernel,
                                                  const fj_forward_args *args,
                                                  const fj_block_mask_options *options,
                                                  void *stream);
llvm::Error updateBlockMask(fj_block_mask_s *mask, const fj_forward_args *args, void *stream);
llvm::Error destroyBlockMask(fj_block_mask_s *mask);
// Points `params` at `mask` for a call that launches variant `index` of `kernel`, after
// checking that the mask was built for them (the launch path's check: no allocation).
llvm::Error useBlockMask(const fj_kernel_s &kernel, const fj_block_mask_s *mask, int index,
                         FjForwardParams &params);
// The same for fj_backward: points `params` at the mask's step lists when the backward
// variant `index` walks them (and the mask has them), else leaves it without.
llvm::Error useBackwardBlockMask(const fj_kernel_s &kernel, const fj_block_mask_s *mask,
                                 int index, FjBackwardParams &params);
// The backward variant (index into kernel.variants) fj_backward launches for a call of
// these sizes; -1 when the kernel has no backward pass.
int dispatchBackward(const fj_kernel_s &kernel, const FjForwardParams &params);
// api/decode.cpp
llvm::Error decodeWorkspaceSize(const fj_kernel_s *kernel, const fj_decode_args *args,
                                size_t *bytes);
llvm::Error decode(const fj_kernel_s *kernel, const fj_decode_args *args, void *stream);
llvm::Error kvAppend(const fj_kernel_s *kernel, const fj_kv_append_args *args, void *stream);

// The variants for `spec` and the hinted bucket (api/kernel.cpp): the tuner's choice
// under the context's mode, then every other bucket already tuned.
llvm::Expected<std::vector<tuner::Selection>>
selectVariants(fj_context_s &context, const generator::KernelSpec &spec,
               const tuner::Bucket &hinted);
// The bucket a call's shape dispatches to.
tuner::Bucket bucketFor(int64_t seqQ, int64_t seqK, int64_t batchHeads);
// Checks the first word of a kernel handle (the launch paths' cheap test).
llvm::Error checkKernelMagic(const fj_kernel_s *kernel);
llvm::Error kernelInfo(const fj_kernel_s *kernel, struct fj_kernel_info *info);
llvm::Error variantInfo(const fj_kernel_s *kernel, int index, fj_variant_info *info);
llvm::Error kernelSource(const fj_kernel_s *kernel, int index, const char **source,
                         size_t *length);

} // namespace flashjit::api
