// The decode operation's kernels loaded on the device (family dec_mma): the split-KV
// kernel, the combine of its splits and the KV append, and how many splits a call
// runs with.
#pragma once

#include "generator/emit.h"
#include "runtime/driver.h"
#include "templates/fj_decode_params.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/Error.h"

#include <cstddef>
#include <memory>
#include <vector>

namespace flashjit::tuner {

// The split-KV decomposition of one call: num_splits ranges of tilesPerSplit key tiles.
struct DecodeSplits {
  int numSplits = 1;
  int tilesPerSplit = 1;
};

// Bytes of fp32 workspace (partial outputs and their lse, 256-byte aligned) that
// `splits` ranges need for batch x headsQ x seqlenQ rows of headDimV; 0 for one split.
size_t decodeWorkspaceBytes(long long batch, int headsQ, int seqlenQ, int headDimV,
                            int numSplits);
// Points params.o_partial / lse_partial into `base` (laid out as above).
void bindDecodeWorkspace(FjDecodeParams &params, int headDimV, void *base);

// The largest split count any call takes (the workspace a caller must be ready for).
constexpr int kMaxDecodeSplits = 128;

class DecodeKernel : public LoadedKernel {
public:
  static llvm::Expected<std::unique_ptr<DecodeKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted);
  // The decode kernel a LoadedKernel is, or null when it is another operation's.
  static const DecodeKernel *of(const LoadedKernel &kernel);

  // The splits for a call of these sizes: `requested` (> 0) capped at the key tiles;
  // with 0 the count this kernel was tuned with (withSplits) while the call's keys give
  // each split at least 2 key tiles; untuned, the heuristic: enough CTAs for one wave of
  // the resident CTAs this tile allows on the device, with at least 2 key tiles per
  // split. At most kMaxDecodeSplits. Pure arithmetic on the sizes (no device call).
  DecodeSplits plan(const FjDecodeParams &params, int requested = 0) const;

  // The split counts a tune times besides the heuristic's for a call of these sizes
  // (tuner/tune.cpp): the powers of two up to the most splits plan() allows, each
  // giving a different number of splits than the heuristic and than each other.
  std::vector<int> splitCountsToTime(const FjDecodeParams &params) const;
  // This kernel, launching the calls that request no count as `splits` splits (the
  // tuned count of its bucket); it shares the loaded module.
  std::unique_ptr<DecodeKernel> withSplits(int splits) const;
  int tunedSplits() const { return tunedSplits_; }

  // Asynchronous: the split kernel, then (num_splits > 1) the combine. params must
  // have num_splits and tiles_per_split set (plan) and, with more than one split, the
  // workspace bound. Checks nothing but the launches.
  llvm::Error launch(const FjDecodeParams &params, CUstream stream) const;
  // Asynchronous: writes k_new / v_new (new_len rows) into the cache.
  llvm::Error append(const FjDecodeParams &params, CUstream stream) const;

  generator::Operation operation() const override { return generator::Operation::Decode; }
  int registers() const override { return registers_; }
  int blockM() const { return blockM_; }
  int blockN() const { return blockN_; }
  int headDimV() const { return headDimV_; }

private:
  std::shared_ptr<runtime::Module> module_;
  runtime::Kernel split_, combine_, append_;
  generator::DecodeEntries entries_;
  int threads_ = 0, sharedBytes_ = 0, registers_ = 0;
  int blockM_ = 16, blockN_ = 64, headDimV_ = 0;
  int smCount_ = 1, residentCtas_ = 1;  // per multiprocessor, for this tile
  int tunedSplits_ = 0;                 // 0: the heuristic
  // The most splits plan() gives a call of `tiles` key tiles without a request.
  static long long mostSplits(long long tiles);
};

} // namespace flashjit::tuner
