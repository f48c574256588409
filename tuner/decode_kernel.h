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

// How a decode kernel splits the calls that request no count: its tile, the device's
// resident slots for it, and the count its bucket was tuned with (if any).
struct SplitPolicy {
  int blockM = 16, blockN = 64;
  // A window's left side (generator::DecodeEntries::windowLeft; -1: none): a row tile
  // reads the key tiles of its rows' windows alone, so the splits share those.
  int windowLeft = -1;
  long long residentSlots = 1;  // multiprocessors x resident CTAs of this tile
  // Tuned: `tunedSplits` splits ran fastest on a problem of `tunedCtas` CTAs (row tiles x
  // batch x KV heads); 0: untuned, the heuristic.
  int tunedSplits = 0;
  long long tunedCtas = 0;

  // A call's key tiles (at most those of a window and the call's query rows), and the
  // CTAs it runs per split (row tiles x batch x KV heads).
  long long keyTiles(const FjDecodeParams &params) const;
  long long ctas(const FjDecodeParams &params) const;
  // The splits for a call of these sizes: `requested` (> 0) capped at the key tiles.
  // With 0 and a tuned count, as many CTAs in flight as the tuned problem had: the
  // tuned count scaled by its CTAs over the call's (rounded down), so a call of the
  // tuned problem's size runs the tuned count, a smaller one more splits, a much larger
  // one (a far bucket's) fewer. Untuned, the heuristic: one wave of the resident slots
  // (rounded down: a CTA past the wave is a second wave). Both give each split at least
  // 2 key tiles; every count at most kMaxDecodeSplits.
  DecodeSplits plan(const FjDecodeParams &params, int requested = 0) const;
  // The most splits plan() gives a call of `tiles` key tiles without a request.
  static long long mostSplits(long long tiles);
};

class DecodeKernel : public LoadedKernel {
public:
  static llvm::Expected<std::unique_ptr<DecodeKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted);
  // The decode kernel a LoadedKernel is, or null when it is another operation's.
  static const DecodeKernel *of(const LoadedKernel &kernel);

  // The splits for a call of these sizes (SplitPolicy::plan). Pure arithmetic on the
  // sizes (no device call).
  DecodeSplits plan(const FjDecodeParams &params, int requested = 0) const {
    return policy_.plan(params, requested);
  }

  // The split counts a tune times besides the heuristic's for a call of these sizes
  // (tuner/tune.cpp): the powers of two up to the most splits plan() allows, each
  // giving a different number of splits than the heuristic and than each other.
  std::vector<int> splitCountsToTime(const FjDecodeParams &params) const;
  // This kernel, with `splits` the count tuned on a problem of the sizes `tunedOn` (its
  // bucket's timing problem); it shares the loaded module.
  std::unique_ptr<DecodeKernel> withSplits(int splits, const FjDecodeParams &tunedOn) const;
  int tunedSplits() const { return policy_.tunedSplits; }

  // Asynchronous: the split kernel, then (num_splits > 1) the combine. params must
  // have num_splits and tiles_per_split set (plan) and, with more than one split, the
  // workspace bound. Checks nothing but the launches.
  llvm::Error launch(const FjDecodeParams &params, CUstream stream) const;
  // Asynchronous: writes k_new / v_new (new_len rows) into the cache.
  llvm::Error append(const FjDecodeParams &params, CUstream stream) const;

  generator::Operation operation() const override { return generator::Operation::Decode; }
  int registers() const override { return registers_; }
  int blockM() const { return policy_.blockM; }
  int blockN() const { return policy_.blockN; }
  int headDimV() const { return headDimV_; }

private:
  std::shared_ptr<runtime::Module> module_;
  runtime::Kernel split_, combine_, append_;
  generator::DecodeEntries entries_;
  int threads_ = 0, sharedBytes_ = 0, registers_ = 0;
  int headDimV_ = 0;
  SplitPolicy policy_;
};

} // namespace flashjit::tuner
