// The backward pass's kernels loaded on the device: a variant's module (prep, the main
// passes, convert, dq; generator::BackwardEntries) launched in order, and the naive
// reference the checker compares it with.
#pragma once

#include "generator/emit.h"
#include "runtime/driver.h"
#include "templates/fj_bwd_params.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

namespace flashjit::tuner {

// The step lists of a backward block mask (FjBackwardParams::block_steps) for one shape
// at a backward kernel's tiles: one list per (sequence, kv head, key block), one sequence
// or head where the mask is shared, each with room for every (query head of the group,
// query block) step; the lists, their bit slots, their counts, the builder's count of
// partly masked steps, then bitCapacity slots of keep bits (kernels that read them:
// BackwardEntries::stepBits).
struct BlockStepsShape {
  int batches = 0, heads = 0, keyBlocks = 0;
  int64_t capacity = 0;  // steps a list: group * query blocks
  bool sharedBatch = false, sharedHeads = false;
  int blockM = 0, blockN = 0;  // a step's queries and keys
  int64_t bitCapacity = 0;
  static BlockStepsShape of(const generator::BackwardEntries &entries, int batch, int headsKv,
                            int group, int seqlenQ, int seqlenK, bool sharedBatch,
                            bool sharedHeads) {
    const int queryBlocks = (seqlenQ + entries.queryRowsPerStep - 1) / entries.queryRowsPerStep;
    BlockStepsShape shape;
    shape.batches = sharedBatch ? 1 : batch;
    shape.heads = sharedHeads ? 1 : headsKv;
    shape.keyBlocks = (seqlenK + entries.keysPerCta - 1) / entries.keysPerCta;
    shape.capacity = (int64_t)group * queryBlocks;
    shape.sharedBatch = sharedBatch;
    shape.sharedHeads = sharedHeads;
    shape.blockM = entries.queryRowsPerStep;
    shape.blockN = entries.keysPerCta;
    return shape;
  }
  static int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }
  int64_t lists() const { return (int64_t)batches * heads * keyBlocks; }
  int64_t entries() const { return lists() * capacity; }
  int64_t slotsOffset() const { return align16(entries() * 4); }
  int64_t countsOffset() const { return slotsOffset() + align16(entries() * 4); }
  int64_t usedOffset() const { return countsOffset() + align16(lists() * 4); }
  int64_t bitsOffset() const { return usedOffset() + 16; }
  int64_t bytesPerSlot() const { return (int64_t)blockN * ((blockM + 31) / 32) * 4; }
  int64_t bytes() const { return bitsOffset() + bitCapacity * bytesPerSlot(); }
  // Points `params` at lists of this shape at device address `base`.
  void describe(FjBackwardParams &params, uint64_t base) const {
    params.block_steps = reinterpret_cast<const unsigned *>(base);
    params.block_step_slots = reinterpret_cast<const int *>(base + slotsOffset());
    params.block_step_counts = reinterpret_cast<const int *>(base + countsOffset());
    params.block_step_bits = reinterpret_cast<const unsigned *>(base + bitsOffset());
    params.block_steps_head_stride = sharedHeads ? 0 : keyBlocks;
    params.block_steps_batch_stride = sharedBatch ? 0 : (long long)heads * keyBlocks;
    params.block_steps_capacity = (int)capacity;
    params.block_step_bits_capacity = (int)std::min<int64_t>(bitCapacity, INT32_MAX);
  }
};

class BackwardKernel : public LoadedKernel {
public:
  static llvm::Expected<std::unique_ptr<BackwardKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted);
  // The backward kernel a LoadedKernel is, or null when it is another operation's.
  static const BackwardKernel *of(const LoadedKernel &kernel);

  // Asynchronous: prep, the main passes, then convert (params.dq_accum set) or the
  // deterministic dq kernel (params.dq_accum null). Checks nothing but the launches (the
  // caller validated params and bound the workspace).
  llvm::Error launch(const FjBackwardParams &params, CUstream stream) const;

  // Whether the main pass walks a block mask's step lists (a mask_mod's module), and
  // builds them: from `params` (the call's), into `buffer` (of shape.bytes() at least),
  // asynchronously. The count of partly masked steps the lists wanted bits for (kept
  // or not) is then at shape.usedOffset().
  bool hasBlockSteps() const { return blockSteps_.has_value(); }
  llvm::Error buildBlockSteps(FjBackwardParams params, const BlockStepsShape &shape,
                              runtime::DeviceBuffer &buffer, CUstream stream) const;

  generator::Operation operation() const override { return generator::Operation::Backward; }
  int registers() const override { return registers_; }
  const generator::BackwardEntries &entries() const { return entries_; }

private:
  // Zeroes what the kernels add to or count on: the dQ accumulator and the tile counter.
  llvm::Error zeroScratch(const FjBackwardParams &params, CUstream stream) const;

  std::unique_ptr<runtime::Module> module_;
  runtime::Kernel prep_, convert_, dq_;
  std::optional<runtime::Kernel> blockSteps_;
  std::vector<runtime::Kernel> passes_;
  generator::BackwardEntries entries_;
  int threads_ = 0, sharedBytes_ = 0, registers_ = 0;
  int smCount_ = 0;  // of the device it was loaded on, for a persistent main pass
};

// The naive backward reference (fp32, or emulating the dtype's rounding), with the
// spec's features: generator::emitBackwardReference's two kernels.
class BackwardReferenceKernel {
public:
  static llvm::Expected<std::unique_ptr<BackwardReferenceKernel>>
  build(generator::DType dtype, bool emulateLowPrecision, const std::string &target,
        const generator::Features &features = {});
  // Writes dq, dk and dv of `params` (in fp32, or the dtype when emulating), and the
  // reference's own lse and D into lseRef and dpsumRef (laid out like the lse).
  llvm::Error launch(const FjBackwardParams &params, int headDim, int headDimV, bool causal,
                     float *lseRef, float *dpsumRef, CUstream stream) const;

private:
  std::unique_ptr<runtime::Module> module_;
  runtime::Kernel rows_, keys_;
  int threads_ = 0;
};

} // namespace flashjit::tuner
