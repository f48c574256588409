#include "tuner/decode_kernel.h"

#include "support/error.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

namespace flashjit::tuner {
namespace {

long long ceilDiv(long long a, long long b) { return (a + b - 1) / b; }
size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Key tiles a split takes at least: below this the prologue, the partial output's
// write and its combine cost more than the parallelism gains. Two since the combine
// loads its splits in batches (H100, docs/PERF.md d2: batch 1 x 1024 keys, 8 KV heads,
// 64-key tiles: 12.7 us as 8 splits of 2 tiles, 15.2 as 4 of 4, 13.0 as 16 of 1).
constexpr int kMinTilesPerSplit = 2;

} // namespace

size_t decodeWorkspaceBytes(long long batch, int headsQ, int seqlenQ, int headDimV,
                            int numSplits) {
  if (numSplits <= 1)
    return 0;
  const size_t rows = (size_t)batch * headsQ * seqlenQ * numSplits;
  return align256(rows * headDimV * 4) + align256(rows * 4);
}

void bindDecodeWorkspace(FjDecodeParams &params, int headDimV, void *base) {
  const size_t rows = (size_t)params.batch * params.heads_q * params.seqlen_q * params.num_splits;
  params.o_partial = (float *)base;
  params.lse_partial = (float *)((char *)base + align256(rows * headDimV * 4));
}

const DecodeKernel *DecodeKernel::of(const LoadedKernel &kernel) {
  return kernel.operation() == generator::Operation::Decode
             ? static_cast<const DecodeKernel *>(&kernel)
             : nullptr;
}

llvm::Expected<std::unique_ptr<DecodeKernel>>
DecodeKernel::load(llvm::StringRef cubin, const generator::EmittedKernel &emitted) {
  if (!emitted.decode.enabled)
    return makeError(ErrorCode::Internal, "{0} is not a decode kernel", emitted.entryName);
  auto module = runtime::Module::load(cubin);
  if (!module)
    return module.takeError();
  auto result = std::unique_ptr<DecodeKernel>(new DecodeKernel());
  auto split = (*module)->kernel(emitted.entryName);
  if (!split)
    return split.takeError();
  if (emitted.sharedBytes > 48 * 1024)
    if (llvm::Error err = split->setMaxDynamicSharedMemory(emitted.sharedBytes))
      return std::move(err);
  auto combine = (*module)->kernel(emitted.decode.combine);
  if (!combine)
    return combine.takeError();
  auto append = (*module)->kernel(emitted.decode.append);
  if (!append)
    return append.takeError();
  auto regs = split->attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
  if (!regs)
    return regs.takeError();
  auto sms = runtime::currentDeviceSmCount();
  if (!sms)
    return sms.takeError();
  auto sharedPerSm =
      runtime::currentDeviceAttribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  if (!sharedPerSm)
    return sharedPerSm.takeError();
  auto regsPerSm =
      runtime::currentDeviceAttribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  if (!regsPerSm)
    return regsPerSm.takeError();
  result->split_ = *split;
  result->combine_ = *combine;
  result->append_ = *append;
  result->module_ = std::move(*module);
  result->entries_ = emitted.decode;
  result->threads_ = emitted.threads;
  result->sharedBytes_ = emitted.sharedBytes;
  result->registers_ = *regs;
  result->policy_.blockM = emitted.blockM;
  result->policy_.blockN = emitted.decode.blockN;
  result->policy_.windowLeft = emitted.decode.windowLeft;
  result->headDimV_ = emitted.decode.headDimV;
  const int smCount = std::max(1, *sms);
  // Resident CTAs per multiprocessor: shared memory (1 KB reserved per CTA), registers
  // (allocated per warp in 256s) and threads.
  const int bySmem = *sharedPerSm / std::max(1, emitted.sharedBytes + 1024);
  const int warpRegs = (*regs * 32 + 255) / 256 * 256;
  const int byRegs = *regsPerSm / std::max(1, warpRegs * (emitted.threads / 32));
  const int byThreads = 2048 / std::max(1, emitted.threads);
  result->policy_.residentSlots =
      (long long)smCount * std::max(1, std::min({bySmem, byRegs, byThreads, 32}));
  return std::move(result);
}

long long SplitPolicy::mostSplits(long long tiles) {
  return std::min<long long>(ceilDiv(tiles, kMinTilesPerSplit), kMaxDecodeSplits);
}

long long SplitPolicy::keyTiles(const FjDecodeParams &p) const {
  long long keys = std::max(p.seqlen_k, 1);
  // dec_mma::run reads a row tile's tiles from its first row's left bound on: at most
  // window_left + seqlen_q keys, and one tile more where that bound is not aligned.
  if (windowLeft >= 0)
    keys = std::min<long long>(keys, (long long)windowLeft + p.seqlen_q + blockN);
  return std::max(1LL, ceilDiv(keys, blockN));
}

long long SplitPolicy::ctas(const FjDecodeParams &p) const {
  const long long rowTiles =
      ceilDiv((long long)p.seqlen_q * (p.heads_q / std::max(1, p.heads_kv)), blockM);
  return std::max(1LL, (long long)p.batch * p.heads_kv * rowTiles);
}

DecodeSplits SplitPolicy::plan(const FjDecodeParams &p, int requested) const {
  DecodeSplits out;
  const long long tiles = keyTiles(p);
  long long splits = requested;
  if (splits <= 0) {
    // The CTAs in flight to aim for: the tuned problem's, else one wave. One wave: every
    // resident slot busy once; more splits only add partial outputs and a longer
    // combine (H100, docs/PERF.md d1: batch 1, 16k keys, 8 KV heads ran 39 us at 16
    // splits, 51 us at 32). Rounded down: one CTA past the wave is a second wave (batch
    // 4 x 8 KV heads at 264 resident slots: 9 splits ran 141 us where 8 ran 104).
    const long long target = tunedSplits > 0 ? tunedSplits * std::max(1LL, tunedCtas)
                                             : residentSlots;
    splits = std::min<long long>(std::max(1LL, target / ctas(p)), mostSplits(tiles));
  }
  splits = std::clamp<long long>(splits, 1, std::min<long long>(tiles, kMaxDecodeSplits));
  out.tilesPerSplit = (int)ceilDiv(tiles, splits);
  out.numSplits = (int)ceilDiv(tiles, out.tilesPerSplit);  // no split left empty by rounding
  return out;
}

std::vector<int> DecodeKernel::splitCountsToTime(const FjDecodeParams &p) const {
  const long long tiles = policy_.keyTiles(p);
  std::vector<int> planned{plan(p, 0).numSplits}, counts;
  for (long long n = 1; n <= SplitPolicy::mostSplits(tiles); n *= 2) {
    const int got = plan(p, (int)n).numSplits;
    if (llvm::is_contained(planned, got))
      continue;
    planned.push_back(got);
    counts.push_back((int)n);
  }
  return counts;
}

std::unique_ptr<DecodeKernel> DecodeKernel::withSplits(int splits,
                                                       const FjDecodeParams &tunedOn) const {
  auto copy = std::unique_ptr<DecodeKernel>(new DecodeKernel(*this));
  copy->policy_.tunedSplits = std::clamp(splits, 0, kMaxDecodeSplits);
  copy->policy_.tunedCtas = policy_.ctas(tunedOn);
  return copy;
}

llvm::Error DecodeKernel::launch(const FjDecodeParams &p, CUstream stream) const {
  if (p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0)
    return llvm::Error::success();
  void *args[] = {const_cast<FjDecodeParams *>(&p)};
  const long long rowTiles =
      ceilDiv((long long)p.seqlen_q * (p.heads_q / p.heads_kv), policy_.blockM);
  if (llvm::Error err = split_.launch((unsigned)p.num_splits, (unsigned)rowTiles,
                                      (unsigned)((long long)p.batch * p.heads_kv),
                                      (unsigned)threads_, (unsigned)sharedBytes_, stream, args))
    return err;
  if (p.num_splits <= 1)
    return llvm::Error::success();
  const long long rows = (long long)p.batch * p.heads_q * p.seqlen_q;
  const unsigned combineCtas = (unsigned)ceilDiv(rows, entries_.combineRowsPerCta);
  if (entries_.dependentCombine)  // its launch overlaps the split kernel (docs/PERF.md d2)
    return combine_.launchDependent(combineCtas, 1, 1, (unsigned)entries_.auxThreads, 0, stream,
                                    args);
  return combine_.launch(combineCtas, 1, 1, (unsigned)entries_.auxThreads, 0, stream, args);
}

llvm::Error DecodeKernel::append(const FjDecodeParams &p, CUstream stream) const {
  if (p.batch == 0 || p.new_len == 0)
    return llvm::Error::success();
  void *args[] = {const_cast<FjDecodeParams *>(&p)};
  return append_.launch((unsigned)p.new_len, (unsigned)p.batch, 1, (unsigned)entries_.auxThreads,
                        0, stream, args);
}

} // namespace flashjit::tuner
