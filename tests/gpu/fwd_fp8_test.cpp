// FP8 (e4m3) fwd_wgmma against the fp32 reference over the dequantized inputs, on the
// GPU: head dims x output types x causal x odd sequence pairs x MHA/GQA/MQA, tile shapes,
// and scores that rise after a row's first tile. The inputs are random e4m3 values with
// per-(sequence, kv head) descale factors that differ between q, k and v (tuner/
// forward_problem.cpp), so a factor applied to the wrong tensor or head fails.
// The bar is DESIGN.md's rule with the naive computation an FP8 kernel is measured
// against: P rounded to e4m3 before P V, O to its 16-bit type (templates/reference.cuh).
// Skips off Hopper.
#include "kernel_pool.h"

#include <cmath>
#include <tuple>

using namespace flashjit;
using namespace flashjit::testing;

namespace {

#define FLASHJIT_REQUIRE_SM90A()                                                                   \
  do {                                                                                             \
    FLASHJIT_REQUIRE_GPU();                                                                        \
    if (openTestDevice()->properties().target() != "sm_90a")                                       \
      GTEST_SKIP() << "FP8 fwd_wgmma needs an sm_90a device, this one is "                         \
                   << openTestDevice()->properties().target();                                     \
  } while (0)

KernelSpec fp8Spec(int d, int dv, DType out, bool causal) {
  KernelSpec spec = specFor(d, dv, DType::E4M3, causal, generator::Family::FwdWgmma);
  spec.outDtype = out;
  return spec;
}

// FP8 head dims are multiples of 16 (validateSpec); 80 and 96 pad to a 128-byte row.
constexpr int kFp8HeadDims[] = {64, 80, 96, 128, 192, 256};

class FwdFp8Grid : public ::testing::TestWithParam<std::tuple<int, DType, bool>> {
protected:
  static void SetUpTestSuite() {
    if (!openTestDevice() || openTestDevice()->properties().target() != "sm_90a")
      return;
    std::vector<std::pair<KernelSpec, TileConfig>> all;
    for (int d : kFp8HeadDims)
      for (DType out : {DType::BF16, DType::FP16})
        for (bool causal : {false, true}) {
          KernelSpec spec = fp8Spec(d, d, out, causal);
          all.emplace_back(spec, generator::defaultTile(spec));
        }
    KernelPool::get().prepare(all);
  }
};

// Every sequence pair of the foundation grid x MHA/GQA/MQA, batch 2.
TEST_P(FwdFp8Grid, MatchesReference) {
  FLASHJIT_REQUIRE_SM90A();
  auto [d, out, causal] = GetParam();
  KernelSpec spec = fp8Spec(d, d, out, causal);
  TileConfig tile = generator::defaultTile(spec);
  int checked = 0;
  for (auto [sq, sk] : kSeqPairs)
    for (const Heads &heads : kHeads) {
      if (sk == 1 && sq == 4096 && d > 128)
        continue;  // the reference's 4096-row pass at d > 128 adds seconds, no coverage
      tuner::ForwardShape shape = shapeOf(2, heads.q, heads.kv, sq, sk);
      EXPECT_EQ(checkShape(spec, tile, shape, 3000 + sq * 7 + sk), "")
          << spec.key() << " " << tile.key() << " seq (" << sq << ", " << sk << ") "
          << heads.name;
      ++checked;
    }
  EXPECT_GE(checked, 18);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, FwdFp8Grid,
                         ::testing::Combine(::testing::ValuesIn(kFp8HeadDims),
                                            ::testing::Values(DType::BF16, DType::FP16),
                                            ::testing::Bool()),
                         [](const auto &info) {
                           return "d" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == DType::BF16 ? "_obf16" : "_ofp16") +
                                  (std::get<2>(info.param) ? "_causal" : "_full");
                         });

// Every block_n FP8 takes (64 to 256; those that are not multiples of 64 read V^T in
// 32-key panels), one to three consumer warpgroups, deep rings, at lengths that are not
// multiples of the tiles, and head_dim_v != head_dim.
TEST(FwdFp8, TileShapesAndHeadDimV) {
  FLASHJIT_REQUIRE_SM90A();
  const std::tuple<int, int, TileConfig> cases[] = {
      {64, 64, {192, 128, 16, 2}},  {64, 64, {128, 256, 12, 2}},  {64, 64, {64, 64, 8, 3}},
      {128, 128, {128, 192, 12, 2}}, {128, 128, {128, 256, 12, 2}}, {128, 128, {192, 64, 16, 3}},
      {128, 64, {128, 128, 12, 2}},  {64, 128, {128, 128, 12, 2}},  {256, 256, {128, 64, 12, 2}},
      {256, 128, {128, 128, 12, 2}}, {128, 128, {128, 224, 12, 2}}, {64, 64, {192, 160, 16, 2}},
      {128, 128, {128, 160, 12, 3}}, {128, 128, {128, 96, 12, 2}},  {64, 64, {64, 224, 8, 2}},
      {256, 256, {128, 96, 12, 2}},  {128, 64, {128, 224, 12, 2}}, {128, 128, {192, 96, 16, 2}}};
  for (auto [d, dv, tile] : cases)
    for (bool causal : {false, true}) {
      KernelSpec spec = fp8Spec(d, dv, DType::BF16, causal);
      EXPECT_EQ(checkShape(spec, tile, shapeOf(2, 4, 2, 301, 457), 5), "")
          << spec.key() << " " << tile.key();
    }
}

// Scores that rise after a row's first tile by more than the rescale slack and by
// hundreds (log2): P must stay inside e4m3's range (448) on the fast softmax's path,
// which rebases a row once a thread's share of it passes 256.
TEST(FwdFp8, ScoresThatRiseAfterTheFirstTile) {
  FLASHJIT_REQUIRE_SM90A();
  for (auto [d, tile] : {std::pair{64, TileConfig{192, 128, 16, 2}},
                         std::pair{128, TileConfig{128, 128, 12, 2}},
                         std::pair{128, TileConfig{192, 96, 16, 2}},
                         std::pair{128, TileConfig{128, 224, 12, 2}},
                         std::pair{256, TileConfig{128, 64, 12, 2}},
                         std::pair{256, TileConfig{128, 96, 12, 2}}})
    for (bool causal : {false, true})
      for (float spread : {2.f, 16.f, 64.f}) {
        KernelSpec spec = fp8Spec(d, d, DType::BF16, causal);
        tuner::ForwardShape shape = shapeOf(2, 4, 2, 515, 1029);
        shape.softmaxScale = spread / std::sqrt((float)d);
        EXPECT_EQ(checkShape(spec, tile, shape, 21), "")
            << spec.key() << " " << tile.key() << " scale " << shape.softmaxScale;
      }
}

// Variable-length batches: lengths around the tiles' and the transpose's multiples (1,
// 64, 65, 161, 191, 225, 1029), so that a sequence's last key tile (64 to 256 keys, a
// multiple of 32) ends past its V^T columns, by up to 223 at 225 keys and 224-key
// tiles; the checker poisons the V^T workspace with e4m3 NaN, so a tile that read
// another sequence's columns, or columns the transpose never wrote, fails.
TEST(FwdFp8, VariableLengthBatch) {
  FLASHJIT_REQUIRE_SM90A();
  const std::tuple<int, DType, TileConfig> cases[] = {
      {64, DType::BF16, {192, 128, 16, 2}},  {64, DType::FP16, {128, 256, 12, 2}},
      {128, DType::BF16, {128, 192, 12, 2}}, {128, DType::FP16, {128, 64, 12, 3}},
      {128, DType::BF16, {128, 256, 12, 2}}, {256, DType::BF16, {128, 64, 12, 2}},
      {256, DType::FP16, {128, 128, 12, 2}}, {128, DType::BF16, {128, 224, 12, 2}},
      {64, DType::FP16, {192, 160, 16, 2}}};
  for (auto [d, out, tile] : cases)
    for (bool causal : {false, true}) {
      KernelSpec spec = fp8Spec(d, d, out, causal);
      tuner::ForwardShape shape = shapeOf(8, 6, 2, 1029, 1029);  // longest lengths
      shape.seqlensQ = {1, 300, 77, 1029, 64, 191, 129, 200};
      shape.seqlensK = {17, 65, 513, 1029, 64, 1, 225, 161};
      shape.withLse = true;
      EXPECT_EQ(checkShape(spec, tile, shape, 13), "")
          << spec.key() << " " << tile.key() << " varlen";
    }
}

// Strided layouts: [batch, heads, seq, dim] and padded rows (multiples of 16 bytes).
TEST(FwdFp8, StridedLayouts) {
  FLASHJIT_REQUIRE_SM90A();
  for (tuner::Layout layout : {tuner::Layout::BSHD, tuner::Layout::BHSD})
    for (int padding : {0, 32})
      for (bool causal : {false, true}) {
        KernelSpec spec = fp8Spec(128, 128, DType::FP16, causal);
        tuner::ForwardShape shape = shapeOf(3, 8, 2, 333, 517);
        shape.layout = layout;
        shape.rowPadding = padding;
        EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 11), "")
            << spec.key() << (layout == tuner::Layout::BSHD ? " BSHD" : " BHSD")
            << " padding " << padding;
      }
}

} // namespace
