// The dQ accumulator each backward call zeroes (one memset over dqAccumulatorFloats) must
// lie inside the workspace the caller sized with backwardWorkspace, and must cover every
// 64-row group (80-row in the transposed layout) the kernels add to. The device's rules
// for where a sequence starts (templates/bwd_mma.cuh, DqTiled::padded_row0 and
// DqTiledTransposed::padded_row0) are restated here.
#include "tuner/backward_problem.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace flashjit;
using namespace flashjit::tuner;

namespace {

long long roundUp(long long x, int to) { return (x + to - 1) / to * to; }

// DqTiled::padded_row0 (groups of 64 rows) and DqTiledTransposed::padded_row0 (80): where
// sequence b's rows start in the tiled accumulator.
long long paddedRow0(const FjForwardParams &p, long long q0, int b, int groupRows) {
  if (p.cu_seqlens_q == nullptr)
    return (long long)b * roundUp(p.seqlen_q, groupRows);
  if (groupRows == 80)
    return (q0 + 160ll * b) / 80 * 80;
  return (q0 + 128ll * b) / 128 * 128;
}

struct Batch {
  FjForwardParams params{};
  std::vector<int> lengths, starts;  // per sequence; starts = cu_seqlens_q
};

Batch makeBatch(std::mt19937 &rng, bool varlen) {
  Batch out;
  FjForwardParams &p = out.params;
  p.batch = std::uniform_int_distribution<int>(1, 48)(rng);
  p.heads_q = std::uniform_int_distribution<int>(1, 32)(rng);
  // Lengths around and on multiples of 64, and arbitrary ones.
  const int pick = std::uniform_int_distribution<int>(0, 2)(rng);
  const int base = std::uniform_int_distribution<int>(1, 40)(rng) * 64;
  p.seqlen_q = pick == 0 ? base : pick == 1 ? base + std::uniform_int_distribution<int>(-3, 3)(rng)
                                            : std::uniform_int_distribution<int>(1, 3000)(rng);
  p.seqlen_q = std::max(p.seqlen_q, 1);
  int total = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int len = varlen ? std::uniform_int_distribution<int>(0, p.seqlen_q)(rng) : p.seqlen_q;
    out.starts.push_back(total);
    out.lengths.push_back(len);
    total += len;
  }
  out.starts.push_back(total);
  if (varlen) {
    p.cu_seqlens_q = out.starts.data();  // only compared with null on the host
    p.total_q = total;
  }
  return out;
}

// 4000 random batches from `seed`, uniform and cu_seqlens in turn.
template <typename Check> void forRandomBatches(unsigned seed, Check check) {
  std::mt19937 rng(seed);
  for (int i = 0; i < 4000; ++i) {
    const bool varlen = i % 2 == 1;
    const Batch batch = makeBatch(rng, varlen);
    check(batch, varlen);
  }
}

} // namespace

TEST(BackwardWorkspace, ZeroedAccumulatorFitsTheWorkspace) {
  forRandomBatches(2026, [](const Batch &batch, bool varlen) {
    const FjForwardParams &p = batch.params;
    const long long rows = varlen ? p.total_q : (long long)p.batch * p.seqlen_q;
    for (int headDim : {32, 64, 96, 128, 256}) {
      const BackwardWorkspace w = backwardWorkspace(p.heads_q, rows, p.batch, headDim, false);
      ASSERT_TRUE(w.hasDqAccum);
      for (bool tiled : {false, true})
        for (int groupRows : {64, 80})
          ASSERT_LE(w.dqAccum + dqAccumulatorFloats(p, tiled, headDim, groupRows) * sizeof(float),
                    w.bytes)
              << "batch " << p.batch << " seqlen_q " << p.seqlen_q << " heads " << p.heads_q
              << " head_dim " << headDim << (varlen ? " varlen" : "")
              << (tiled ? " tiled" : "") << " groups of " << groupRows;
    }
  });
}

TEST(BackwardWorkspace, ZeroedRowsCoverEveryGroupTheKernelsAdd) {
  forRandomBatches(27, [](const Batch &batch, bool varlen) {
    const FjForwardParams &p = batch.params;
    for (int groupRows : {64, 80}) {
      const long long zeroedRows =
          (long long)(dqAccumulatorFloats(p, true, 64, groupRows) / p.heads_q / 64);
      long long previousEnd = 0;
      for (int b = 0; b < p.batch; ++b) {
        if (batch.lengths[b] == 0)
          continue;
        const long long q0 = varlen ? batch.starts[b] : (long long)b * p.seqlen_q;
        const long long start = paddedRow0(p, q0, b, groupRows);
        ASSERT_EQ(start % groupRows, 0);
        ASSERT_GE(start, previousEnd)
            << "sequence " << b << " shares a " << groupRows << "-row group";
        previousEnd = start + roundUp(batch.lengths[b], groupRows);  // whole groups added to
        ASSERT_LE(previousEnd, zeroedRows)
            << "sequence " << b << " adds past the zeroed rows (groups of " << groupRows << ")";
      }
    }
  });
}

TEST(BackwardWorkspace, UniformLengthsOfWholeGroupsZeroNoPadding) {
  FjForwardParams p{};
  p.batch = 16, p.heads_q = 16, p.seqlen_q = 1024;
  EXPECT_EQ(dqAccumulatorFloats(p, true, 128), 16ull * 1024 * 16 * 128);
  EXPECT_EQ(dqAccumulatorFloats(p, false, 128), 16ull * 1024 * 16 * 128);
  p.seqlen_q = 1000;  // rounded up to 1024 rows a sequence
  EXPECT_EQ(dqAccumulatorFloats(p, true, 128), 16ull * 1024 * 16 * 128);
  EXPECT_EQ(dqAccumulatorFloats(p, false, 128), 16ull * 1000 * 16 * 128);
  // 80-row groups: 1000 rows round up to 1040.
  EXPECT_EQ(dqAccumulatorFloats(p, true, 128, 80), 16ull * 1040 * 16 * 128);
}
