// fwd_mma against the reference on the GPU (DESIGN.md's correctness bar): every
// head dim of the grid x fp16/bf16 x causal, over sequence pairs that are not
// multiples of the tiles, MHA/GQA/MQA, plus variable-length batches and strided
// layouts.
#include "kernel_pool.h"

#include <tuple>

using namespace flashjit;
using namespace flashjit::testing;

namespace {

class FwdMmaGrid : public ::testing::TestWithParam<std::tuple<int, DType, bool>> {
protected:
  static void SetUpTestSuite() {
    if (openTestDevice())
      KernelPool::get().prepare(gridKernels(generator::Family::FwdMma));
  }
};

TEST_P(FwdMmaGrid, MatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  auto [d, dtype, causal] = GetParam();
  EXPECT_EQ(checkGridShapes(specFor(d, d, dtype, causal)), 21);
}

INSTANTIATE_TEST_SUITE_P(AllHeadDims, FwdMmaGrid,
                         ::testing::Combine(::testing::ValuesIn(kHeadDims),
                                            ::testing::Values(DType::FP16, DType::BF16),
                                            ::testing::Bool()),
                         gridParamName);

TEST(FwdMma, VariableLengthBatch) {
  FLASHJIT_REQUIRE_GPU();
  for (bool causal : {false, true})
    for (int d : {64, 72, 128}) {
      KernelSpec spec = specFor(d, d, DType::BF16, causal);
      tuner::ForwardShape shape;
      shape.batch = 4;
      shape.headsQ = 6;
      shape.headsKV = 2;
      shape.seqlensQ = {1, 300, 77, 1024};
      shape.seqlensK = {17, 300, 513, 999};
      shape.seqQ = 1024;
      shape.seqK = 999;
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 7), "")
          << spec.key() << " varlen";
    }
}

TEST(FwdMma, StridedLayouts) {
  FLASHJIT_REQUIRE_GPU();
  for (tuner::Layout layout : {tuner::Layout::BSHD, tuner::Layout::BHSD})
    for (int padding : {0, 24})
      for (bool causal : {false, true}) {
        KernelSpec spec = specFor(96, 96, DType::FP16, causal);
        tuner::ForwardShape shape;
        shape.batch = 3;
        shape.headsQ = 8;
        shape.headsKV = 2;
        shape.seqQ = 333;
        shape.seqK = 517;
        shape.layout = layout;
        shape.rowPadding = padding;
        EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 11), "")
            << spec.key() << (layout == tuner::Layout::BSHD ? " BSHD" : " BHSD") << " padding "
            << padding;
      }
}

TEST(FwdMma, HeadDimVDiffers) {
  FLASHJIT_REQUIRE_GPU();
  for (auto [d, dv] :
       {std::pair{128, 64}, std::pair{64, 128}, std::pair{40, 72}, std::pair{192, 128}})
    for (bool causal : {false, true}) {
      KernelSpec spec = specFor(d, dv, DType::BF16, causal);
      tuner::ForwardShape shape;
      shape.batch = 2;
      shape.headsQ = 4;
      shape.headsKV = 4;
      shape.seqQ = 257;
      shape.seqK = 311;
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 5), "") << spec.key();
    }
}

TEST(FwdMma, EveryTileShapeOfTheSpace) {
  FLASHJIT_REQUIRE_GPU();
  // Tiles other than the defaults: one and two 16-row tiles per warp, 3 stages.
  for (TileConfig tile :
       {TileConfig{64, 64, 4, 2}, TileConfig{128, 64, 4, 2}, TileConfig{128, 32, 8, 3},
        TileConfig{64, 128, 4, 2}, TileConfig{16, 16, 1, 2}})
    for (bool causal : {false, true}) {
      KernelSpec spec = specFor(64, 64, DType::FP16, causal);
      tuner::ForwardShape shape;
      shape.batch = 2;
      shape.headsQ = 2;
      shape.headsKV = 1;
      shape.seqQ = 301;
      shape.seqK = 457;
      EXPECT_EQ(checkShape(spec, tile, shape, 3), "") << spec.key() << " " << tile.key();
    }
}

} // namespace
