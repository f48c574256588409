// fwd_wgmma (sm_90a) against the reference on the GPU: the foundation grid
// (head dims x fp16/bf16 x causal x sequence pairs x MHA/GQA/MQA), strided
// layouts, head_dim_v != head_dim, every tile shape the tuner may pick, scores
// that rise far after a row's first tile, query tiles in which some warpgroups
// have no row, 250 bitwise-identical reruns (races), and a clear refusal of the
// arguments TMA cannot take. Skips off Hopper.
#include "kernel_pool.h"

#include <cmath>
#include <tuple>

using namespace flashjit;
using namespace flashjit::testing;

namespace {

constexpr generator::Family kWgmma = generator::Family::FwdWgmma;

// Hopper only: skips the test elsewhere, with the reason.
#define FLASHJIT_REQUIRE_SM90A()                                                                   \
  do {                                                                                             \
    FLASHJIT_REQUIRE_GPU();                                                                        \
    if (openTestDevice()->properties().target() != "sm_90a")                                       \
      GTEST_SKIP() << "fwd_wgmma needs an sm_90a device, this one is "                             \
                   << openTestDevice()->properties().target();                                     \
  } while (0)

KernelSpec wgmmaSpec(int d, int dv, DType dtype, bool causal) {
  return specFor(d, dv, dtype, causal, kWgmma);
}

class FwdWgmmaGrid : public ::testing::TestWithParam<std::tuple<int, DType, bool>> {
protected:
  static void SetUpTestSuite() {
    if (openTestDevice() && openTestDevice()->properties().target() == "sm_90a")
      KernelPool::get().prepare(gridKernels(kWgmma));
  }
};

TEST_P(FwdWgmmaGrid, MatchesReference) {
  FLASHJIT_REQUIRE_SM90A();
  auto [d, dtype, causal] = GetParam();
  EXPECT_EQ(checkGridShapes(wgmmaSpec(d, d, dtype, causal)), 21);
}

INSTANTIATE_TEST_SUITE_P(AllHeadDims, FwdWgmmaGrid,
                         ::testing::Combine(::testing::ValuesIn(kHeadDims),
                                            ::testing::Values(DType::FP16, DType::BF16),
                                            ::testing::Bool()),
                         gridParamName);

TEST(FwdWgmma, StridedLayouts) {
  FLASHJIT_REQUIRE_SM90A();
  for (tuner::Layout layout : {tuner::Layout::BSHD, tuner::Layout::BHSD})
    for (int padding : {0, 24})
      for (bool causal : {false, true}) {
        KernelSpec spec = wgmmaSpec(96, 96, DType::FP16, causal);
        tuner::ForwardShape shape = shapeOf(3, 8, 2, 333, 517);
        shape.layout = layout;
        shape.rowPadding = padding;
        EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 11), "")
            << spec.key() << (layout == tuner::Layout::BSHD ? " BSHD" : " BHSD") << " padding "
            << padding;
      }
}

TEST(FwdWgmma, HeadDimVDiffers) {
  FLASHJIT_REQUIRE_SM90A();
  for (auto [d, dv] : {std::pair{128, 64}, std::pair{64, 128}, std::pair{40, 72},
                       std::pair{192, 128}, std::pair{256, 96}})
    for (bool causal : {false, true}) {
      KernelSpec spec = wgmmaSpec(d, dv, DType::BF16, causal);
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shapeOf(2, 4, 4, 257, 311), 5), "")
          << spec.key();
    }
}

TEST(FwdWgmma, EveryTileShapeOfTheSpace) {
  FLASHJIT_REQUIRE_SM90A();
  // One, two and three consumer warpgroups (three with and without the softmax/P V
  // overlap); narrow and wide key tiles; deep rings.
  const std::pair<int, TileConfig> cases[] = {
      {64, {64, 64, 8, 2}},   {64, {192, 128, 16, 2}},  {64, {192, 192, 16, 2}},
      {64, {128, 16, 12, 4}}, {128, {128, 176, 12, 2}}, {128, {128, 96, 12, 3}},
      {128, {64, 128, 8, 2}}, {128, {192, 80, 16, 2}},  {256, {128, 80, 12, 2}},
      {256, {64, 64, 8, 3}}};
  for (auto [d, tile] : cases)
    for (bool causal : {false, true}) {
      KernelSpec spec = wgmmaSpec(d, d, DType::FP16, causal);
      EXPECT_EQ(checkShape(spec, tile, shapeOf(2, 2, 1, 301, 457), 3), "")
          << spec.key() << " " << tile.key();
    }
}

// Scores that rise after a row's first key tile, by a little, by more than the rescale
// slack (O and the sum rescaled) and by hundreds of units (log2): a large softmax scale
// spreads the random scores that far, so every case meets rises of each size. It guards
// the online softmax's rescaling, and any softmax that skips the tile max: two such
// versions, one without its rebase and one without its second pass, failed it (docs/
// PERF.md, v5.8).
TEST(FwdWgmma, ScoresThatRiseAfterTheFirstTile) {
  FLASHJIT_REQUIRE_SM90A();
  const std::pair<int, TileConfig> cases[] = {{64, {128, 128, 12, 2}},
                                              {64, {192, 96, 16, 2}},
                                              {128, {128, 128, 12, 2}},
                                              {128, {192, 64, 16, 2}},
                                              {256, {128, 64, 12, 2}}};
  for (auto [d, tile] : cases)
    for (DType dtype : {DType::BF16, DType::FP16})
      for (bool causal : {false, true})
        for (float spread : {2.f, 16.f, 64.f}) {
          KernelSpec spec = wgmmaSpec(d, d, dtype, causal);
          tuner::ForwardShape shape = shapeOf(2, 4, 2, 515, 1029);
          shape.softmaxScale = spread / std::sqrt((float)d);
          EXPECT_EQ(checkShape(spec, tile, shape, 21), "")
              << spec.key() << " " << tile.key() << " scale " << shape.softmaxScale;
        }
}

// Query lengths whose last tile leaves one or two consumer warpgroups without a row.
// Without a mask, three-consumer tiles pass over the tile in those warpgroups (freeing
// its K/V stages) and walk the heads' blocks rotated; the warpgroups with rows must
// still see every key tile (more tiles than stages, so a stage freed twice or never
// shows as a wrong O or a hang). Two-consumer tiles (with and without the overlap and
// ping-pong turns) compute such rows and must not store them. Causal and not, keys as
// many as the queries or more.
TEST(FwdWgmma, WarpgroupsWithoutRows) {
  FLASHJIT_REQUIRE_SM90A();
  const std::pair<int, TileConfig> cases[] = {{64, {128, 128, 12, 2}},
                                              {64, {128, 256, 12, 2}},
                                              {64, {192, 80, 16, 3}},
                                              {64, {192, 128, 16, 2}},
                                              {256, {128, 80, 12, 2}}};
  for (auto [d, tile] : cases)
    for (bool causal : {false, true})
      // 40 rows in the last tile: one warpgroup has rows; 100 with three: two have.
      for (int rows : {40, 100}) {
        if (rows > (tile.blockM / 64 - 1) * 64)
          continue;
        const int sq = 3 * tile.blockM + rows;
        for (int sk : {sq, 1100}) {
          KernelSpec spec = wgmmaSpec(d, d, DType::BF16, causal);
          EXPECT_EQ(checkShape(spec, tile, shapeOf(2, 4, 2, sq, sk), 13), "")
              << spec.key() << " " << tile.key() << " seq (" << sq << ", " << sk << ")";
        }
      }
}

// Races show up as run-to-run differences: the same inputs must give the same
// bits.
TEST(FwdWgmma, BitwiseIdenticalReruns) {
  FLASHJIT_REQUIRE_SM90A();
  for (bool causal : {false, true}) {
    KernelSpec spec = wgmmaSpec(128, 128, DType::BF16, causal);
    TileConfig tile = generator::defaultTile(spec);
    std::string error;
    const tuner::LoadedKernel *loaded = KernelPool::get().find(spec, tile, error);
    ASSERT_NE(loaded, nullptr) << error;
    const tuner::ForwardKernel *kernel = tuner::ForwardKernel::of(*loaded);
    ASSERT_NE(kernel, nullptr);
    auto checker = tuner::ForwardChecker::create(spec, shapeOf(1, 16, 16, 4000, 4000), 21, nullptr);
    ASSERT_TRUE((bool)checker) << llvm::toString(checker.takeError());
    auto first = (*checker)->run(*kernel, nullptr);
    ASSERT_TRUE((bool)first) << llvm::toString(first.takeError());
    int differing = 0;
    for (int i = 1; i < 250; ++i) {
      auto again = (*checker)->run(*kernel, nullptr);
      ASSERT_TRUE((bool)again) << llvm::toString(again.takeError());
      differing += *again != *first;
    }
    EXPECT_EQ(differing, 0) << spec.key() << ": runs differing from the first of 250";
  }
}

// Small shapes of each head dim, for compute-sanitizer (memcheck, racecheck):
//   compute-sanitizer --tool racecheck gpu_tests
//   --gtest_filter=FwdWgmma.SanitizerShapes
TEST(FwdWgmma, SanitizerShapes) {
  FLASHJIT_REQUIRE_SM90A();
  for (int d : {64, 96, 128, 192, 256})
    for (bool causal : {false, true}) {
      KernelSpec spec = wgmmaSpec(d, d, DType::BF16, causal);
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shapeOf(1, 2, 1, 150, 200), 9), "")
          << spec.key();
    }
  // 70 rows in a 192-row tile: the third consumer warpgroup passes over it.
  KernelSpec spec = wgmmaSpec(64, 64, DType::BF16, false);
  EXPECT_EQ(checkShape(spec, TileConfig{192, 80, 16, 3}, shapeOf(1, 2, 1, 70, 200), 9), "")
      << spec.key() << " bm192.bn80.w16.s3";
}

// Causal work on a grid of more pairs of query blocks than CTAs: full rounds of pairs,
// then a last round split into single blocks, one or two per CTA (odd block counts leave
// a middle block with no partner; seq_k > seq_q moves the diagonal). Every block must be
// computed once: a block left out keeps its poison, one done twice races.
TEST(FwdWgmma, CausalLastRoundInSingleBlocks) {
  FLASHJIT_REQUIRE_SM90A();
  const int sms = openTestDevice()->properties().smCount;
  for (int d : {64, 128, 256}) {
    KernelSpec spec = wgmmaSpec(d, d, DType::BF16, true);
    TileConfig tile = generator::defaultTile(spec);
    for (auto [sq, sk] : {std::pair{1100, 1100}, {1000, 1300}, {2048, 2048}})
      // 1.3 or 1.8 rounds of pairs on this device: a last round of fewer blocks than
      // CTAs, or of more (some CTAs take two).
      for (int tenths : {13, 18}) {
        const int blocks = (sq + tile.blockM - 1) / tile.blockM, pairs = (blocks + 1) / 2;
        const int heads = 4, batch = (sms * tenths / 10 + pairs * heads - 1) / (pairs * heads);
        EXPECT_EQ(checkShape(spec, tile, shapeOf(batch, heads, heads, sq, sk), 31), "")
            << spec.key() << " " << tile.key() << " seq (" << sq << ", " << sk << ") batch "
            << batch;
      }
  }
}

// Causal shapes whose diagonal tiles start at a work tile's first row: square tiles and
// aligned lengths (equal, or k longer by a multiple of the tile), in both element types;
// the last shape's lengths are not multiples of the tile. (docs/PERF.md v5.12 masked such
// tiles on the tensor cores; this checked it, and keeps checking the aligned case.)
TEST(FwdWgmma, CausalAlignedDiagonals) {
  FLASHJIT_REQUIRE_SM90A();
  for (DType dtype : {DType::BF16, DType::FP16})
    for (auto [d, tileKey] : {std::pair{64, "bm128.bn128.w12.s2"}, {64, "bm64.bn64.w8.s2"},
                              {96, "bm128.bn128.w12.s2"}, {128, "bm64.bn64.w8.s2"}}) {
      KernelSpec spec = wgmmaSpec(d, d, dtype, true);
      TileConfig tile = llvm::cantFail(TileConfig::parse(tileKey));
      for (auto [sq, sk] : {std::pair{1024, 1024}, {256, 640}, {384, 384}, {1000, 1128}})
        EXPECT_EQ(checkShape(spec, tile, shapeOf(2, 3, 3, sq, sk), 41), "")
            << spec.key() << " " << tile.key() << " seq (" << sq << ", " << sk << ")";
    }
}

// Variable-length batches through TMA: the packed rows are one sequence to the tensor
// maps, so a tile's loads run into the next sequence (masked, never stored) and past the
// last one (zero fill). Lengths of 1, shorter than a tile, not multiples of one, q
// longer than k (causal rows that see no key) and GQA; the default tiles and one of
// three consumer warpgroups (192 rows, beyond the longest sequence's last block).
TEST(FwdWgmma, VariableLengthBatch) {
  FLASHJIT_REQUIRE_SM90A();
  for (bool causal : {false, true})
    for (auto [d, tileKey] : {std::pair{64, ""}, {96, ""}, {128, ""}, {256, ""},
                              {128, "bm192.bn128.w16.s2"}}) {
      KernelSpec spec = wgmmaSpec(d, d, DType::BF16, causal);
      TileConfig tile = generator::defaultTile(spec);
      if (*tileKey)
        tile = llvm::cantFail(TileConfig::parse(tileKey));
      tuner::ForwardShape shape;
      shape.batch = 5;
      shape.headsQ = 6;
      shape.headsKV = 2;
      shape.seqlensQ = {1, 300, 77, 1024, 250};
      shape.seqlensK = {17, 300, 513, 999, 130};
      shape.seqQ = 1024;
      shape.seqK = 999;
      shape.withLse = true;
      EXPECT_EQ(checkShape(spec, tile, shape, 7), "") << spec.key() << " " << tile.key()
                                                     << " varlen";
    }
}

} // namespace
