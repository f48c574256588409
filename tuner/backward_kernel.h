// The backward pass's kernels loaded on the device: a variant's module (prep, the main
// passes, convert, dq; generator::BackwardEntries) launched in order, and the naive
// reference the checker compares it with.
#pragma once

#include "generator/emit.h"
#include "runtime/driver.h"
#include "templates/fj_bwd_params.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <optional>
#include <vector>

namespace flashjit::tuner {

// The step lists of a backward block mask (FjBackwardParams::block_steps) for one shape
// at a backward kernel's tiles: one list per (sequence, kv head, key block), one sequence
// or head where the mask is shared, each with room for every (query head of the group,
// query block) step; the lists, then their counts.
struct BlockStepsShape {
  int batches = 0, heads = 0, keyBlocks = 0;
  int64_t capacity = 0;  // steps a list: group * query blocks
  bool sharedBatch = false, sharedHeads = false;
  static BlockStepsShape of(const generator::BackwardEntries &entries, int batch, int headsKv,
                            int group, int seqlenQ, int seqlenK, bool sharedBatch,
                            bool sharedHeads) {
    const int queryBlocks = (seqlenQ + entries.queryRowsPerStep - 1) / entries.queryRowsPerStep;
    return {sharedBatch ? 1 : batch, sharedHeads ? 1 : headsKv,
            (seqlenK + entries.keysPerCta - 1) / entries.keysPerCta,
            (int64_t)group * queryBlocks, sharedBatch, sharedHeads};
  }
  int64_t lists() const { return (int64_t)batches * heads * keyBlocks; }
  int64_t countsOffset() const { return (lists() * capacity * 4 + 15) / 16 * 16; }
  int64_t bytes() const { return countsOffset() + lists() * 4; }
  // Points `params` at lists of this shape at device address `base`.
  void describe(FjBackwardParams &params, uint64_t base) const {
    params.block_steps = reinterpret_cast<const unsigned *>(base);
    params.block_step_counts = reinterpret_cast<const int *>(base + countsOffset());
    params.block_steps_head_stride = sharedHeads ? 0 : keyBlocks;
    params.block_steps_batch_stride = sharedBatch ? 0 : (long long)heads * keyBlocks;
    params.block_steps_capacity = (int)capacity;
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
  // builds them: from `params` (the call's, described by shape.describe), writing the
  // lists at params.block_steps, asynchronously.
  bool hasBlockSteps() const { return blockSteps_.has_value(); }
  llvm::Error buildBlockSteps(const FjBackwardParams &params, const BlockStepsShape &shape,
                              CUstream stream) const;

  generator::Operation operation() const override { return generator::Operation::Backward; }
  int registers() const override { return registers_; }
  const generator::BackwardEntries &entries() const { return entries_; }

private:
  std::unique_ptr<runtime::Module> module_;
  runtime::Kernel prep_, convert_, dq_;
  std::optional<runtime::Kernel> blockSteps_;
  std::vector<runtime::Kernel> passes_;
  generator::BackwardEntries entries_;
  int threads_ = 0, sharedBytes_ = 0, registers_ = 0;
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
