// The dQ accumulator each backward call zeroes (one memset over dqAccumulatorFloats) must
// lie inside the workspace the caller sized with backwardWorkspace, and must cover every
// 64-row group the kernels add to. The device's rule for where a sequence starts
// (templates/bwd_mma.cuh, DqTiled::padded_row0) is restated here.
#include "tuner/backward_problem.h"

#include "generator/bwd_wgmma.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace flashjit;
using namespace flashjit::tuner;

namespace {

long long roundUp64(long long x) { return (x + 63) / 64 * 64; }

// DqTiled::padded_row0: where sequence b's rows start in the tiled accumulator.
long long paddedRow0(const FjForwardParams &p, long long q0, int b) {
  if (p.cu_seqlens_q == nullptr)
    return (long long)b * roundUp64(p.seqlen_q);
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
    // bwd_mma's accumulator is head_dim wide, bwd_wgmma's tiled one its padded head dim,
    // which holds head_dim_v too.
    for (auto [headDim, headDimV] : {std::pair{32, 32}, std::pair{64, 64}, std::pair{96, 96},
                                     std::pair{128, 128}, std::pair{256, 256},
                                     std::pair{192, 128}, std::pair{64, 128},
                                     std::pair{40, 256}}) {
      const BackwardWorkspace w =
          backwardWorkspace(p.heads_q, rows, p.batch, headDim, headDimV, false);
      ASSERT_TRUE(w.hasDqAccum);
      for (bool tiled : {false, true}) {
        const int columns =
            tiled ? generator::bwdWgmmaPaddedHeadDim(std::max(headDim, headDimV)) : headDim;
        ASSERT_LE(w.dqAccum + dqAccumulatorFloats(p, tiled, columns) * sizeof(float), w.bytes)
            << "batch " << p.batch << " seqlen_q " << p.seqlen_q << " heads " << p.heads_q
            << " head_dim " << headDim << "/" << headDimV << (varlen ? " varlen" : "")
            << (tiled ? " tiled" : "");
      }
    }
  });
}

TEST(BackwardWorkspace, ZeroedRowsCoverEveryGroupTheKernelsAdd) {
  forRandomBatches(27, [](const Batch &batch, bool varlen) {
    const FjForwardParams &p = batch.params;
    const long long zeroedRows = (long long)(dqAccumulatorFloats(p, true, 64) / p.heads_q / 64);
    long long previousEnd = 0;
    for (int b = 0; b < p.batch; ++b) {
      if (batch.lengths[b] == 0)
        continue;
      const long long q0 = varlen ? batch.starts[b] : (long long)b * p.seqlen_q;
      const long long start = paddedRow0(p, q0, b);
      ASSERT_EQ(start % 64, 0);
      ASSERT_GE(start, previousEnd) << "sequence " << b << " shares a 64-row group";
      previousEnd = start + roundUp64(batch.lengths[b]);  // whole groups are added to
      ASSERT_LE(previousEnd, zeroedRows) << "sequence " << b << " adds past the zeroed rows";
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
}

// The main pass's tile counter lies in every workspace, deterministic or not, and just
// before the dQ accumulator, so that the launch's one memset zeroes both
// (BackwardKernel::zeroScratch).
TEST(BackwardWorkspace, TileCounterPrecedesTheAccumulator) {
  for (bool deterministic : {false, true}) {
    const BackwardWorkspace w = backwardWorkspace(16, 16 * 1000, 16, 128, 128, deterministic);
    EXPECT_GE(w.tileCounter, w.dpsum + 16 * 1000 * sizeof(float));
    EXPECT_LE(w.tileCounter + kBackwardCounterBytes, w.bytes);
    EXPECT_EQ(w.tileCounter % 256, 0u);
    if (!deterministic) {
      EXPECT_EQ(w.tileCounter + kBackwardCounterBytes, w.dqAccum);
    }
    char base[1] = {};
    FjBackwardParams params{};
    bindWorkspace(params, w, base);
    EXPECT_EQ(reinterpret_cast<char *>(params.tile_counter), base + w.tileCounter);
    EXPECT_EQ(params.dq_accum == nullptr, deterministic);
  }
}
