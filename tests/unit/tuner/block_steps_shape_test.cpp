// The backward block mask's buffer (tuner::BlockStepsShape): lists, bit slots, counts,
// the builder's counter and the keep bits, each 16-byte aligned and apart, and the
// pointers describe() gives the kernels at those offsets. The device side reads slot s's
// bits at block_step_bits + s * (block_n * ceil(block_m / 32)) words
// (bwd_mma::StepBits).
#include "tuner/backward_kernel.h"

#include "buffer_regions.h"

#include <gtest/gtest.h>

using namespace flashjit;
using namespace flashjit::tuner;

namespace {

generator::BackwardEntries entriesOf(int queryRowsPerStep, int keysPerCta) {
  generator::BackwardEntries e;
  e.queryRowsPerStep = queryRowsPerStep;
  e.keysPerCta = keysPerCta;
  return e;
}

TEST(BlockStepsShape, RegionsAreAlignedAndApart) {
  for (bool shared : {false, true})
    for (int bm : {64, 128})
      for (int seqlen : {1, 77, 1000, 4097}) {
        BlockStepsShape s = BlockStepsShape::of(entriesOf(bm, 128), 3, 2, 4, seqlen, seqlen + 5,
                                                shared, shared);
        SCOPED_TRACE(testing::Message() << "bm " << bm << " seqlen " << seqlen
                                        << (shared ? " shared" : ""));
        EXPECT_EQ(s.batches, shared ? 1 : 3);
        EXPECT_EQ(s.heads, shared ? 1 : 2);
        EXPECT_EQ(s.keyBlocks, (seqlen + 5 + 127) / 128);
        EXPECT_EQ(s.capacity, 4ll * ((seqlen + bm - 1) / bm));
        EXPECT_EQ(s.bytesPerSlot(), 128ll * (bm / 32) * 4);
        s.bitCapacity = 7;
        expectRegionsAlignedAndApart({{0, s.entries() * 4},
                                      {s.slotsOffset(), s.entries() * 4},
                                      {s.countsOffset(), s.lists() * 4},
                                      {s.usedOffset(), 4},
                                      {s.bitsOffset(), 7 * s.bytesPerSlot()}},
                                     s.bytes());
        FjBackwardParams p{};
        const uint64_t base = 1ull << 40;
        s.describe(p, base);
        EXPECT_EQ((uint64_t)p.block_steps, base);
        EXPECT_EQ((uint64_t)p.block_step_slots, base + s.slotsOffset());
        EXPECT_EQ((uint64_t)p.block_step_counts, base + s.countsOffset());
        EXPECT_EQ((uint64_t)p.block_step_bits, base + s.bitsOffset());
        EXPECT_EQ(p.block_step_bits_capacity, 7);
        EXPECT_EQ(p.block_steps_capacity, s.capacity);
        EXPECT_EQ(p.block_steps_head_stride, shared ? 0 : s.keyBlocks);
        EXPECT_EQ(p.block_steps_batch_stride, shared ? 0 : 2ll * s.keyBlocks);
      }
}

// Without bits (kernels that do not read them, or a first build that only counts), the
// buffer ends at the bits' offset.
TEST(BlockStepsShape, NoBitsNoBitBytes) {
  BlockStepsShape s = BlockStepsShape::of(entriesOf(64, 128), 2, 2, 1, 300, 300, false, false);
  EXPECT_EQ(s.bitCapacity, 0);
  EXPECT_EQ(s.bytes(), s.bitsOffset());
}

} // namespace
