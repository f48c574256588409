// The forward block mask's buffer (tuner::BlockMaskShape): counts, lists, bit slots, the
// builder's counter, the persistent walk's order and the keep bits, each 16-byte aligned
// and apart, and the pointers describe() gives the kernels at those offsets. The order
// kernel writes orderUnits ints at block_order (fj::block_mask::build_order); without an
// order, block_order is null and the kernel walks its own way.
#include "tuner/loaded_kernel.h"

#include "buffer_regions.h"

#include <gtest/gtest.h>

using namespace flashjit;
using namespace flashjit::tuner;

namespace {

LaunchGeometry geometryOf(int blockM, int blockN) {
  LaunchGeometry g;
  g.blockM = blockM;
  g.blockN = blockN;
  g.blockMask = true;
  return g;
}

} // namespace

TEST(BlockMaskShape, RegionsAreAlignedAndApart) {
  for (int bm : {64, 128, 192})
    for (int bn : {80, 128, 176})
      for (int seqlen : {1, 77, 1000, 4097})
        for (int64_t units : {0, 3, 1000}) {
          BlockMaskShape s = BlockMaskShape::of(geometryOf(bm, bn), 3, 2, seqlen, seqlen + 5);
          SCOPED_TRACE(testing::Message() << "bm " << bm << " bn " << bn << " seqlen "
                                          << seqlen << " order " << units);
          EXPECT_EQ(s.queryBlocks, (seqlen + bm - 1) / bm);
          EXPECT_EQ(s.keyBlocks, (seqlen + 5 + bn - 1) / bn);
          EXPECT_EQ(s.bytesPerSlot(), (int64_t)bm * ((bn + 31) / 32) * 4);
          s.bitCapacity = 7;
          s.orderUnits = units;
          s.orderGrid = units > 0 ? 132 : 0;
          expectRegionsAlignedAndApart({{0, s.workTiles() * 4},
                                        {s.tilesOffset(), s.entries() * 4},
                                        {s.slotsOffset(), s.entries() * 4},
                                        {s.usedOffset(), 4},
                                        {s.orderOffset(), units * 4},
                                        {s.bitsOffset(), 7 * s.bytesPerSlot()}},
                                       s.bytes());
          FjForwardParams p{};
          const uint64_t base = 1ull << 40;
          s.describe(p, base);
          EXPECT_EQ((uint64_t)p.block_counts, base);
          EXPECT_EQ((uint64_t)p.block_tiles, base + s.tilesOffset());
          EXPECT_EQ((uint64_t)p.block_slots, base + s.slotsOffset());
          EXPECT_EQ((uint64_t)p.block_bits, base + s.bitsOffset());
          EXPECT_EQ(p.block_bits_capacity, 7);
          if (units > 0)
            EXPECT_EQ((uint64_t)p.block_order, base + s.orderOffset());
          else
            EXPECT_EQ(p.block_order, nullptr);
          EXPECT_EQ(p.block_order_grid, s.orderGrid);
        }
}

// Without bits or an order, the buffer ends where they would begin.
TEST(BlockMaskShape, NoBitsNoOrderNoBytes) {
  BlockMaskShape s = BlockMaskShape::of(geometryOf(128, 128), 1, 16, 2048, 2048);
  EXPECT_EQ(s.bitCapacity, 0);
  EXPECT_EQ(s.orderUnits, 0);
  EXPECT_EQ(s.bytes(), s.usedOffset() + 16);
  EXPECT_EQ(s.bitsOffset(), s.orderOffset());
}
