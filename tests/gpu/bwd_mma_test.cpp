// The backward families against the backward reference on the GPU (DESIGN.md's
// correctness bar), each over the head dims it takes: bwd_mma (every target, the whole
// grid) and bwd_wgmma (sm_90a only, multiples of 8 from 32 to 256; skipped elsewhere). dQ, dK
// and dV of every head dim x fp16/bf16 x causal, over sequence pairs that are not
// multiples of the tiles, MHA/GQA/MQA, with poisoned outputs; variable-length batches,
// strided layouts, softmax scales, every tile of the tuner's space on one shape, more
// key blocks than a CTA an SM (bwd_wgmma's persistent grid), and deterministic mode (its
// gradients checked, and bitwise-identical over 100 reruns of a 4000 x 4000 problem);
// Both families also with head_dim_v != head_dim.
#include "backward_check.h"
#include "kernel_pool.h"

#include "generator/bwd_wgmma.h"
#include "tuner/backward_checker.h"
#include "tuner/space.h"

#include "llvm/ADT/STLExtras.h"

#include <tuple>

using namespace flashjit;
using namespace flashjit::testing;
using generator::Family;

namespace {

KernelSpec bwdSpec(int d, int dv, DType dtype, bool causal, Family family = Family::BwdMma) {
  return specFor(d, dv, dtype, causal, family);
}

// Whether the test device runs `family` (bwd_wgmma: sm_90a only).
bool deviceRuns(Family family) {
  return family != Family::BwdWgmma || openTestDevice()->properties().target() == "sm_90a";
}

// Skips a test of a family the device cannot run, with the reason.
#define FLASHJIT_REQUIRE_FAMILY(family)                                                            \
  do {                                                                                             \
    FLASHJIT_REQUIRE_GPU();                                                                        \
    if (!deviceRuns(family))                                                                       \
      GTEST_SKIP() << generator::familyName(family).str() << " needs an sm_90a device, this one "  \
                   << "is " << openTestDevice()->properties().target();                            \
  } while (0)

// The head dims of `wanted` that `family` takes (bwd_wgmma: bwdWgmmaSupportsHeadDims;
// bwd_mma: all).
std::vector<int> headDimsOf(Family family, std::vector<int> wanted) {
  if (family != Family::BwdWgmma)
    return wanted;
  llvm::erase_if(wanted, [family](int d) {
    return !generator::bwdWgmmaSupportsHeadDims(specFor(d, d, DType::BF16, false, family));
  });
  return wanted;
}

// Test names of the family parameter: "bwd_mma".
std::string familyParamName(const ::testing::TestParamInfo<Family> &info) {
  return generator::familyName(info.param).str();
}

tuner::ForwardShape shapeOf(int batch, int hq, int hkv, int sq, int sk, int d, int dv) {
  tuner::ForwardShape shape = flashjit::testing::shapeOf(batch, hq, hkv, sq, sk);
  shape.headDim = d;
  shape.headDimV = dv;
  return shape;
}

// The backward grid's sequence pairs: the forward's, without the two longest (the
// fp32 reference's cost grows with N^2 per row; 1023 x 1024 keeps a full multi-block
// problem), plus a pair with no queries seeing some key blocks.
const std::pair<int, int> kBwdSeqPairs[] = {{1, 1},     {1, 147},     {113, 203},
                                            {128, 128}, {1023, 1024}, {300, 77}};

// Every spec of the grid a family takes, with its default tile.
std::vector<std::pair<KernelSpec, TileConfig>> bwdGridKernels(Family family) {
  std::vector<std::pair<KernelSpec, TileConfig>> all;
  for (int d : headDimsOf(family, {std::begin(kHeadDims), std::end(kHeadDims)}))
    for (DType dtype : {DType::FP16, DType::BF16})
      for (bool causal : {false, true}) {
        KernelSpec spec = bwdSpec(d, d, dtype, causal, family);
        all.emplace_back(spec, generator::defaultTile(spec));
      }
  return all;
}

class BwdGrid : public ::testing::TestWithParam<std::tuple<Family, int, DType, bool>> {
protected:
  static void SetUpTestSuite() {
    if (!openTestDevice())
      return;
    for (Family family : {Family::BwdMma, Family::BwdWgmma})
      if (deviceRuns(family))
        KernelPool::get().prepare(bwdGridKernels(family));
  }
};

TEST_P(BwdGrid, MatchesReference) {
  auto [family, d, dtype, causal] = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  KernelSpec spec = bwdSpec(d, d, dtype, causal, family);
  TileConfig tile = generator::defaultTile(spec);
  int checked = 0;
  for (auto [sq, sk] : kBwdSeqPairs)
    for (const Heads &heads : kHeads) {
      tuner::ForwardShape shape = shapeOf(2, heads.q, heads.kv, sq, sk, d, d);
      EXPECT_EQ(checkBackward(spec, tile, shape, 2000 + sq * 7 + sk, false), "")
          << spec.key() << " " << tile.key() << " seq (" << sq << ", " << sk << ") "
          << heads.name;
      ++checked;
    }
  EXPECT_EQ(checked, 18);
}

// "bwd_mma_d128_bf16_causal".
std::string bwdGridParamName(
    const ::testing::TestParamInfo<std::tuple<Family, int, DType, bool>> &info) {
  auto [family, d, dtype, causal] = info.param;
  return generator::familyName(family).str() + "_" +
         gridParamName(::testing::TestParamInfo<std::tuple<int, DType, bool>>(
             std::make_tuple(d, dtype, causal), info.index));
}

INSTANTIATE_TEST_SUITE_P(BwdMma, BwdGrid,
                         ::testing::Combine(::testing::Values(Family::BwdMma),
                                            ::testing::ValuesIn(kHeadDims),
                                            ::testing::Values(DType::FP16, DType::BF16),
                                            ::testing::Bool()),
                         bwdGridParamName);
// Every head dim of the grid: 64, 128 and 256, and the others on their panels (zeros
// past the head dim: generator::bwdWgmmaPaddedHeadDim).
INSTANTIATE_TEST_SUITE_P(BwdWgmma, BwdGrid,
                         ::testing::Combine(::testing::Values(Family::BwdWgmma),
                                            ::testing::ValuesIn(kHeadDims),
                                            ::testing::Values(DType::FP16, DType::BF16),
                                            ::testing::Bool()),
                         bwdGridParamName);

// The checks below, for each backward family.
class Bwd : public ::testing::TestWithParam<Family> {};

TEST_P(Bwd, VariableLengthBatch) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  for (bool deterministic : {false, true})
    for (bool causal : {false, true})
      for (int d : headDimsOf(family, {64, 72, 96, 128, 192, 256})) {
        KernelSpec spec = bwdSpec(d, d, DType::BF16, causal, family);
        tuner::ForwardShape shape = shapeOf(4, 6, 2, 700, 699, d, d);
        shape.seqlensQ = {1, 300, 77, 700};
        shape.seqlensK = {17, 300, 513, 699};
        EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec), shape, 7, deterministic), "")
            << spec.key() << " varlen" << (deterministic ? " deterministic" : "");
      }
}

TEST_P(Bwd, StridedLayouts) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  // bwd_mma at a head dim no other test strides; bwd_wgmma at each of its own.
  const std::vector<int> dims = family == Family::BwdMma ? std::vector<int>{96}
                                                         : std::vector<int>{64, 128, 256};
  for (int d : dims)
    for (tuner::Layout layout : {tuner::Layout::BSHD, tuner::Layout::BHSD})
      for (int padding : {0, 24})
        for (bool causal : {false, true}) {
          KernelSpec spec = bwdSpec(d, d, DType::FP16, causal, family);
          tuner::ForwardShape shape = shapeOf(3, 8, 2, 333, 517, d, d);
          shape.layout = layout;
          shape.rowPadding = padding;
          EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec), shape, 11, false), "")
              << spec.key() << (layout == tuner::Layout::BSHD ? " BSHD" : " BHSD") << " padding "
              << padding;
        }
}

// head_dim_v != head_dim; bwd_wgmma computes them on the panels that hold the larger
// (d 256 / dv 128 with its split head dim), each with its own valid columns.
TEST_P(Bwd, HeadDimVDiffers) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  for (auto [d, dv] : {std::pair{128, 64}, std::pair{64, 128}, std::pair{40, 72},
                       std::pair{192, 128}, std::pair{256, 128}})
    for (bool causal : {false, true}) {
      KernelSpec spec = bwdSpec(d, dv, DType::BF16, causal, family);
      tuner::ForwardShape shape = shapeOf(2, 4, 2, 257, 389, d, dv);
      for (bool deterministic : {false, true})
        EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec), shape, 5, deterministic), "")
            << spec.key() << (deterministic ? " deterministic" : "");
    }
}

TEST_P(Bwd, SoftmaxScale) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  for (float scale : {0.03f, 0.5f}) {
    KernelSpec spec = bwdSpec(64, 64, DType::FP16, true, family);
    tuner::ForwardShape shape = shapeOf(2, 4, 4, 200, 300, 64, 64);
    shape.softmaxScale = scale;
    EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec), shape, 9, false), "")
        << "scale " << scale;
  }
}

// Every tile of the tuner's space that fits (what a tune may pick), on one odd shape.
TEST_P(Bwd, EveryTileOfTheSpace) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  const runtime::DeviceProperties &props = openTestDevice()->properties();
  std::vector<std::pair<KernelSpec, TileConfig>> wanted;
  for (int d : headDimsOf(family, {64, 128, 256}))
    for (bool causal : {false, true}) {
      KernelSpec spec = bwdSpec(d, d, DType::BF16, causal, family);
      tuner::DeviceModel device = tuner::deviceModelFor(props);
      for (const tuner::SpaceEntry &e :
           tuner::buildSpace(spec, tuner::Bucket::forShape(1024, 1024, 32), device,
                             {/*pruneByModel=*/false}))
        if (e.verdict == tuner::Verdict::Candidate)
          wanted.emplace_back(spec, e.tile);
    }
  KernelPool::get().prepare(wanted);
  int checked = 0, unusable = 0;
  for (const auto &[spec, tile] : wanted) {
    std::string error;
    ASSERT_NE(KernelPool::get().find(spec, tile, error), nullptr) << error;
    if (int spilled = KernelPool::get().spillBytes(spec, tile)) {
      ++unusable;  // the tuner rejects a tile that spills (reported, not a failure)
      std::printf("  %s %s spills %d bytes\n", spec.key().c_str(), tile.key().c_str(), spilled);
      continue;
    }
    tuner::ForwardShape shape = shapeOf(2, 4, 2, 257, 389, spec.headDim, spec.headDimV);
    EXPECT_EQ(checkBackward(spec, tile, shape, 3, false), "") << spec.key() << " " << tile.key();
    ++checked;
  }
  std::printf("  %d tiles checked, %d not usable\n", checked, unusable);
  EXPECT_GT(checked, 0);
}

// Deterministic mode: the gradients are right, and bitwise identical over 100 reruns
// of a 4000 x 4000 problem (atomics would reorder fp32 additions of dQ).
TEST_P(Bwd, DeterministicModeIsBitwiseReproducible) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  for (bool causal : {false, true}) {
    KernelSpec spec = bwdSpec(128, 128, DType::BF16, causal, family);
    TileConfig tile = generator::defaultTile(spec);
    EXPECT_EQ(checkBackward(spec, tile, shapeOf(2, 4, 2, 257, 389, 128, 128), 4, true), "")
        << spec.key() << " deterministic";
    std::string error;
    const tuner::LoadedKernel *loaded = KernelPool::get().find(spec, tile, error);
    ASSERT_NE(loaded, nullptr) << error;
    const tuner::BackwardKernel *kernel = tuner::BackwardKernel::of(*loaded);
    ASSERT_NE(kernel, nullptr);
    auto checker = tuner::BackwardChecker::create(spec, shapeOf(1, 8, 2, 4000, 4000, 128, 128),
                                                  21, nullptr, /*deterministic=*/true);
    ASSERT_TRUE((bool)checker) << llvm::toString(checker.takeError());
    auto first = (*checker)->run(*kernel, nullptr);
    ASSERT_TRUE((bool)first) << llvm::toString(first.takeError());
    int differing = 0;
    for (int i = 1; i < 100; ++i) {
      auto again = (*checker)->run(*kernel, nullptr);
      ASSERT_TRUE((bool)again) << llvm::toString(again.takeError());
      differing += *again != *first;
    }
    EXPECT_EQ(differing, 0) << spec.key() << ": runs differing from the first of 100";
  }
}

// More key blocks than a grid of one CTA an SM (bwd_wgmma's persistent main pass): each
// CTA walks several blocks, causal ones heaviest first, so that K and V of one block load
// under the end of the one before, the Q/dO ring and the dQ slices run on across blocks.
// MHA and GQA, lengths that are not multiples of the tiles, a variable-length batch
// whose short sequences leave tiles of the walk without keys, and deterministic mode.
TEST_P(Bwd, ManyBlocksPerCta) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  int checked = 0;
  for (int d : headDimsOf(family, {64, 128}))
    for (bool causal : {false, true}) {
      KernelSpec spec = bwdSpec(d, d, causal ? DType::FP16 : DType::BF16, causal, family);
      TileConfig tile = generator::defaultTile(spec);
      // 8 key blocks x 8 heads x 6 sequences = 384 tiles at 128 keys a block.
      EXPECT_EQ(checkBackward(spec, tile, shapeOf(6, 8, 8, 1000, 1001, d, d), 31, false), "")
          << spec.key() << " MHA";
      EXPECT_EQ(checkBackward(spec, tile, shapeOf(4, 12, 4, 900, 1100, d, d), 32, causal), "")
          << spec.key() << " GQA" << (causal ? " deterministic" : "");
      tuner::ForwardShape varlen = shapeOf(10, 8, 4, 1000, 1001, d, d);
      varlen.seqlensQ = {1000, 3, 512, 129, 77, 1000, 640, 1, 256, 999};
      varlen.seqlensK = {1001, 130, 511, 128, 900, 17, 640, 1000, 256, 1};
      EXPECT_EQ(checkBackward(spec, tile, varlen, 33, false), "") << spec.key() << " varlen";
      checked += 3;
    }
  EXPECT_EQ(checked, 12);
}

// Small shapes of each head dim, for compute-sanitizer (memcheck, racecheck):
//   compute-sanitizer --tool racecheck gpu_tests --gtest_filter='Families/Bwd.SanitizerShapes/*'
TEST_P(Bwd, SanitizerShapes) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  for (int d : headDimsOf(family, {64, 96, 128, 192, 256}))
    for (bool deterministic : {false, true}) {
      KernelSpec spec = bwdSpec(d, d, DType::BF16, true, family);
      EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                              shapeOf(1, 2, 1, 77, 150, d, d), 13, deterministic),
                "")
          << spec.key() << (deterministic ? " deterministic" : "");
    }
}

// ManyBlocksPerCta's walks, at a size compute-sanitizer finishes in minutes: 528 tiles
// of one or two query steps, four or so a CTA on a grid of one CTA an SM, so that racecheck
// sees K/V loads under the previous tile, the claimed causal walk's tile slots, and the
// dQ slices cross tiles (deterministic too):
//   compute-sanitizer --tool racecheck gpu_tests --gtest_filter='Families/Bwd.WalkSanitizerShapes/*'
TEST_P(Bwd, WalkSanitizerShapes) {
  const Family family = GetParam();
  FLASHJIT_REQUIRE_FAMILY(family);
  for (int d : headDimsOf(family, {64, 128}))
    for (bool causal : {false, true}) {
      KernelSpec spec = bwdSpec(d, d, DType::BF16, causal, family);
      TileConfig tile = generator::defaultTile(spec);
      for (bool deterministic : {false, true}) {
        if (deterministic && (!causal || d != 64))
          continue;
        EXPECT_EQ(checkBackward(spec, tile, shapeOf(44, 4, 4, 100, 257, d, d), 41, deterministic),
                  "")
            << spec.key() << (deterministic ? " deterministic" : "");
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Families, Bwd, ::testing::Values(Family::BwdMma, Family::BwdWgmma),
                         familyParamName);

} // namespace
