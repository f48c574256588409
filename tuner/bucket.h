// Shape buckets: tuning results are kept per bucket of (seqlen_q, seqlen_k,
// batch x query heads), each rounded up to a power of two, so that a handful of
// tunes cover every size and a launch finds its winner with one lookup.
#pragma once

#include "generator/spec.h"
#include "tuner/forward_problem.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit::tuner {

struct Bucket {
  int seqQ = 1, seqK = 1, batchHeads = 1;

  // Each size rounded UP to a power of two (sizes < 1 count as 1).
  static Bucket forShape(int seqQ, int seqK, int batchHeads);
  // A decode step's bucket: what the decode kernels' work depends on, the query rows
  // packed per KV head (seqQ x headsQ / headsKV) and the (sequence, KV head) pairs
  // (batch x headsKV), against seqK. Its timing problem (timingShape: MHA with that
  // many query rows) has the same row tiles, CTAs and K/V bytes as every GQA step that
  // packs to it.
  static Bucket forDecode(int64_t seqQ, int64_t seqK, int64_t batch, int64_t headsQ,
                          int64_t headsKV);
  // "q1024.k1024.bh64"; every field a power of two.
  static llvm::Expected<Bucket> parse(llvm::StringRef key);
  std::string key() const;
  // Sum over the three fields of |log2(a / b)|: 0 for the same bucket, 1 per
  // doubling or halving of one field.
  double distance(const Bucket &other) const;
  // A total order used to break ties between equally near buckets: by the number
  // of scores (seqQ * seqK * batchHeads), then field by field.
  bool smallerThan(const Bucket &other) const;
  bool operator==(const Bucket &o) const {
    return seqQ == o.seqQ && seqK == o.seqK && batchHeads == o.batchHeads;
  }
  bool operator!=(const Bucket &o) const { return !(*this == o); }
};

// Index of the bucket in `tuned` to use for `wanted`: the same bucket, else the
// nearest by distance() (ties: the smaller bucket). -1 when `tuned` is empty.
int nearestBucket(llvm::ArrayRef<Bucket> tuned, const Bucket &wanted);

// The length ladder: the square buckets a handle tunes so that every sequence length
// runs at a tuned tile (docs/TUNING.md, "One handle, every length"). Lengths
// kLadderMinLength .. kLadderMaxLength, each power of two; at each length the batch is
// `batch` when the caller hinted one (> 0), else the batch of a kLadderTokens-token
// step (kLadderTokens / length, at least 1), times `headsQ`.
constexpr int kLadderMinLength = 512;
constexpr int kLadderMaxLength = 16384;
constexpr int kLadderTokens = 16384;
std::vector<Bucket> lengthLadder(int headsQ, int batch);
// The batch the ladder assumes at `length` when the caller hinted none.
int ladderBatch(int length);

// The problem a bucket is timed on: its sizes exactly, batch x heads split as
// batch = max(1, bh / 16), heads = bh / batch, MHA, layout BSHD, with the LSE. For user
// code bounded by its tuning shape (below), that shape itself, exactly.
ForwardShape timingShape(const generator::KernelSpec &spec, const Bucket &bucket);

// The small problems every candidate must pass before it is timed: sequence
// lengths that are not multiples of any tile, seqlen_q < seqlen_k and the
// reverse (causal rows that see no key), MHA and GQA; clamped into the tuning shape
// for user code bounded by it.
std::vector<ForwardShape> correctnessShapes(const generator::KernelSpec &spec);

// User code that reads args.tensor, run while tuning with the caller's tuning args
// whose tensors are sized for spec.features.tuningShape (known): no problem the tuner
// runs may index past it.
bool boundedByTuningShape(const generator::KernelSpec &spec);
// `shape` with its batch, query heads and lengths (per sequence too) no larger than
// the tuning shape's, its KV heads still dividing its query heads; as it is when the
// spec is not bounded.
ForwardShape withinTuningShape(const generator::KernelSpec &spec, ForwardShape shape);

} // namespace flashjit::tuner
