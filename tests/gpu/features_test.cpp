// Attention features (issue 28) on the GPU, every forward family against the fp32
// reference with the same features applied (written out on its own in reference.cuh):
// sliding windows (one- and two-sided, with and without causal), soft-capping, ALiBi,
// a user score_mod, user mask_mods (prefix-LM from an int argument, a document mask
// from a tensor argument, documents from an int), a score_mod that drops keys with -inf,
// and a combination; mask_mod kernels run both with and without a block mask (the
// checker builds one);
// fp16 and bf16, causal and not, head dims 64 and 128 (and one 256), odd lengths,
// MHA/GQA/MQA and variable-length batches. Outputs are poisoned before each run
// (tuner/checker.cpp).
#include "feature_cases.h"
#include "kernel_pool.h"

#include "runtime/driver.h"

#include <algorithm>
#include <memory>
#include <tuple>

using namespace flashjit;
using namespace flashjit::testing;

namespace {

// Document ids of up to kMaxRows positions: documents of 97 rows, so that every tested
// length has several boundaries and none falls on a tile edge.
constexpr int kMaxRows = 4096;

// The device array the document mask reads (args.tensor[0]), made once.
const void *documentIds() {
  static std::unique_ptr<runtime::DeviceBuffer> buffer = [] {
    std::vector<int> ids(kMaxRows);
    for (int i = 0; i < kMaxRows; ++i)
      ids[i] = i / 97;
    auto allocated = runtime::DeviceBuffer::allocate(4 * ids.size());
    if (!allocated) {
      llvm::consumeError(allocated.takeError());
      return std::unique_ptr<runtime::DeviceBuffer>();
    }
    auto b = std::make_unique<runtime::DeviceBuffer>(std::move(*allocated));
    if (llvm::Error err = b->upload(ids.data(), 4 * ids.size())) {
      llvm::consumeError(std::move(err));
      return std::unique_ptr<runtime::DeviceBuffer>();
    }
    return b;
  }();
  return buffer ? reinterpret_cast<const void *>(buffer->ptr()) : nullptr;
}

std::vector<NamedFeatures> featureCases() {
  std::vector<NamedFeatures> cases = builtinFeatureCases();
  cases.push_back(namedFeatures("score_mod_bias", [](auto &f) {
    f.scoreMod = "return score + 0.05f * (float)((kv_idx - q_idx) % 7) + 0.1f * (float)h;";
  }));
  cases.push_back(namedFeatures("score_mod_drop", [](auto &f) {
    // drops every third key: a mask through the scores
    f.scoreMod = "if (kv_idx % 3 == 1)\n  return -INFINITY;\nreturn score;";
  }));
  cases.push_back(prefixLmCase());
  cases.push_back(namedFeatures("mask_mod_document", [](auto &f) {
    f.maskMod = "const int *doc = (const int *)args.tensor[0];\n"
                "return doc[q_idx] == doc[kv_idx];";
    f.hasTuningArgs = true;
    f.tuningArgs.tensor[0] = documentIds();
  }));
  // Documents of 300 rows: tiles wholly inside one (kept without the mask when a block
  // mask is given), tiles across a boundary, tiles between documents (skipped).
  cases.push_back(namedFeatures("mask_mod_long_documents", [](auto &f) {
    f.maskMod = "return q_idx / args.integer[0] == kv_idx / args.integer[0];";
    f.hasTuningArgs = true;
    f.tuningArgs.integer[0] = 300;
  }));
  cases.push_back(windowSoftcapAlibiCase());
  return cases;
}

std::vector<generator::Family> familiesHere() {
  std::vector<generator::Family> families = {generator::Family::FwdMma};
  if (openTestDevice() && openTestDevice()->properties().target() == "sm_90a")
    families.push_back(generator::Family::FwdWgmma);
  return families;
}

KernelSpec featureSpec(generator::Family family, int d, DType dtype, bool causal,
                       const generator::Features &features) {
  KernelSpec spec = specFor(d, d, dtype, causal, family);
  spec.features = features;
  return spec;
}

class Features
    : public ::testing::TestWithParam<std::tuple<generator::Family, DType, bool, int>> {
protected:
  static void SetUpTestSuite() {
    if (!openTestDevice())
      return;
    std::vector<std::pair<KernelSpec, TileConfig>> all;
    for (generator::Family family : familiesHere())
      for (DType dtype : {DType::FP16, DType::BF16})
        for (bool causal : {false, true})
          for (int d : {64, 128})
            for (const NamedFeatures &c : featureCases()) {
              KernelSpec spec = featureSpec(family, d, dtype, causal, c.features);
              all.emplace_back(spec, generator::defaultTile(spec));
            }
    KernelPool::get().prepare(all);
  }
};

TEST_P(Features, MatchReference) {
  FLASHJIT_REQUIRE_GPU();
  auto [family, dtype, causal, d] = GetParam();
  if (family == generator::Family::FwdWgmma &&
      openTestDevice()->properties().target() != "sm_90a")
    GTEST_SKIP() << "fwd_wgmma needs sm_90a";
  int checked = 0;
  for (const NamedFeatures &c : featureCases()) {
    KernelSpec spec = featureSpec(family, d, dtype, causal, c.features);
    TileConfig tile = generator::defaultTile(spec);
    uint64_t seed = 77;
    for (const auto &[name, shape] : featureCheckShapes()) {
      EXPECT_EQ(checkShape(spec, tile, shape, ++seed), "")
          << c.name << " " << spec.key() << " " << tile.key() << " " << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, (int)(featureCases().size() * featureCheckShapes().size()));
}

std::string featuresParamName(
    const ::testing::TestParamInfo<std::tuple<generator::Family, DType, bool, int>> &info) {
  return std::string(generator::familyName(std::get<0>(info.param))) +
         (std::get<1>(info.param) == DType::BF16 ? "_bf16" : "_fp16") +
         (std::get<2>(info.param) ? "_causal" : "_full") + "_d" +
         std::to_string(std::get<3>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Grid, Features,
    ::testing::Combine(::testing::Values(generator::Family::FwdMma, generator::Family::FwdWgmma),
                       ::testing::Values(DType::FP16, DType::BF16), ::testing::Bool(),
                       ::testing::Values(64, 128)),
    featuresParamName);

// Every tile the tuner may pick for a windowed kernel: the window's first and last key
// tiles move with block_n and block_m.
TEST(FeaturesTiles, WindowOverTileShapes) {
  FLASHJIT_REQUIRE_GPU();
  generator::Features window;
  window.window = true;
  window.windowLeft = 200;
  window.windowRight = 10;
  for (generator::Family family : familiesHere()) {
    KernelSpec spec = featureSpec(family, 128, DType::BF16, true, window);
    std::vector<TileConfig> tiles =
        family == generator::Family::FwdWgmma
            ? std::vector<TileConfig>{{64, 64, 8, 2}, {128, 80, 12, 2}, {192, 112, 16, 2}}
            : std::vector<TileConfig>{{64, 32, 4, 3}, {128, 64, 8, 2}, {128, 128, 4, 2}};
    for (const TileConfig &tile : tiles) {
      if (llvm::Error err = generator::validateTile(spec, tile)) {
        llvm::consumeError(std::move(err));
        continue;
      }
      EXPECT_EQ(checkShape(spec, tile, shapeOf(2, 4, 2, 777, 901), 5), "")
          << spec.key() << " " << tile.key();
    }
  }
}

// Causal windows about one key tile wide: from block_n keys to the left fwd_wgmma gives
// the diagonal's tile the causal kernel's own first-tile softmax at d = 64 with 128-key
// tiles (no row's left bound can cut that tile), below it the loop masks the tile. Both
// sides of that line, per tile (and the other family's tiles alike). With ALiBi too,
// and narrower windows: causal ALiBi alone takes that softmax on every d = 64 tile, and
// beside a window it must not (its first-tile path masks the causal bound only; windows
// from block_n - 1 keys never cut the diagonal's tile, narrower ones do).
TEST(FeaturesTiles, CausalWindowAboutOneKeyTile) {
  FLASHJIT_REQUIRE_GPU();
  for (generator::Family family : familiesHere())
    for (TileConfig tile : {TileConfig{128, 128, 12, 2}, TileConfig{192, 128, 16, 2},
                            TileConfig{128, 64, 8, 2}, TileConfig{64, 64, 4, 2}})
      for (int left : {17, tile.blockN / 2 + 1, tile.blockN - 1, tile.blockN, tile.blockN + 1})
        for (bool alibi : {false, true}) {
          if (!alibi && left < tile.blockN - 1)
            continue; // the loop's masked first tile, as for every narrower window
          generator::Features window;
          window.window = true;
          window.windowLeft = left;
          window.windowRight = 0;
          window.alibi = alibi;
          KernelSpec spec = featureSpec(family, 64, DType::BF16, true, window);
          if (llvm::Error err = generator::validateTile(spec, tile)) {
            llvm::consumeError(std::move(err));
            continue;
          }
          EXPECT_EQ(checkShape(spec, tile, shapeOf(2, 4, 2, 777, 901), 7 + left), "")
              << spec.key() << " " << tile.key();
        }
}

// Windows wider than a tile pair (block_m + block_n): the tiles at the window's left edge
// are far from the diagonal's, and the tiles between them are whole (the kernels' first-
// and last-tile paths then meet different tiles than in the narrow windows above).
TEST(FeaturesTiles, WindowWiderThanTiles) {
  FLASHJIT_REQUIRE_GPU();
  for (auto [left, right] : {std::pair{600, 0}, std::pair{450, 330}}) {
    generator::Features window;
    window.window = true;
    window.windowLeft = left;
    window.windowRight = right;
    for (generator::Family family : familiesHere())
      for (bool causal : {false, true})
        for (int d : {64, 128}) {
          KernelSpec spec = featureSpec(family, d, DType::BF16, causal, window);
          for (auto [sq, sk] : {std::pair{1500, 1709}, std::pair{1709, 1500}})
            EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shapeOf(2, 4, 2, sq, sk),
                                 13 + sq),
                      "")
                << spec.key() << " " << sq << "x" << sk;
        }
  }
}

// A variable-length batch of three sequences: its lengths, the grid by the longest.
tuner::ForwardShape varlenShape(std::vector<int> seqlensQ, std::vector<int> seqlensK) {
  tuner::ForwardShape shape = shapeOf((int)seqlensQ.size(), 4, 2, 0, 0);
  shape.seqQ = *std::max_element(seqlensQ.begin(), seqlensQ.end());
  shape.seqK = *std::max_element(seqlensK.begin(), seqlensK.end());
  shape.seqlensQ = std::move(seqlensQ);
  shape.seqlensK = std::move(seqlensK);
  return shape;
}

// Each window (left, right, causal) of fwd_wgmma at d 64 and 128, bf16, on each tile
// (bm, block_n from blockNs, warps) that fits, against the reference over the shapes.
void checkWindowTiles(const std::vector<std::tuple<int, int, bool>> &windows, int blockM,
                      int warps, std::initializer_list<int> blockNs,
                      const std::vector<tuner::ForwardShape> &shapes, uint64_t seedBase) {
  for (auto [left, right, causal] : windows) {
    generator::Features window;
    window.window = true;
    window.windowLeft = left;
    window.windowRight = right;
    for (int d : {64, 128})
      for (int blockN : blockNs) {
        KernelSpec spec = featureSpec(generator::Family::FwdWgmma, d, DType::BF16, causal, window);
        TileConfig tile{blockM, blockN, warps, 2};
        if (llvm::Error err = generator::validateTile(spec, tile)) {
          llvm::consumeError(std::move(err));
          continue;
        }
        uint64_t seed = seedBase + left + right + blockN;
        for (const tuner::ForwardShape &shape : shapes)
          EXPECT_EQ(checkShape(spec, tile, shape, ++seed), "")
              << spec.key() << " " << tile.key() << " " << shape.seqQ << "x" << shape.seqK;
      }
  }
}

// Windows on three-consumer tiles: fwd_wgmma's warpgroups each walk only the key tiles
// their own 64 rows see and pass over the rest of the work tile's walk (kNarrowWalks),
// at its start (past their diagonals, or their window's right side) and at its end
// (before their window's left side). Over the block_n that take it, causal or not, left,
// right or both bounds, lengths either way round (diagonals moved), a block whose
// last warpgroups have no rows (113 rows), and a variable-length batch.
TEST(FeaturesTiles, WindowWalksNarrowPerWarpgroup) {
  FLASHJIT_REQUIRE_GPU();
  if (openTestDevice()->properties().target() != "sm_90a")
    GTEST_SKIP() << "fwd_wgmma needs sm_90a";
  checkWindowTiles({{100, 0, true}, {300, 0, true}, {70, -1, true}, {40, 40, false},
                    {-1, 50, false}, {250, -1, false}},
                   192, 16, {64, 96, 128},
                   {shapeOf(2, 4, 2, 777, 901), shapeOf(2, 4, 2, 901, 777),
                    shapeOf(1, 2, 1, 113, 500), varlenShape({37, 700, 250}, {200, 700, 129})},
                   31);
}

// A window's left edge on two-consumer tiles of 128 keys or more: fwd_wgmma masks a tile
// that crosses its rows' left bounds and no other bound inside the loop, under the
// previous tile's P V, and keeps the fast softmax (kLeftEdgeInLoop); a tile that also
// crosses a diagonal, a right bound or the sequence end takes the exact path. Windows
// whose left edge lies next to the diagonal's tile (129 keys) and far from it, causal or
// not, lengths either way round, and a variable-length batch.
TEST(FeaturesTiles, WindowLeftEdgeMaskedInLoop) {
  FLASHJIT_REQUIRE_GPU();
  if (openTestDevice()->properties().target() != "sm_90a")
    GTEST_SKIP() << "fwd_wgmma needs sm_90a";
  checkWindowTiles({{129, 0, true}, {300, 0, true}, {1000, 0, true}, {500, 200, false},
                    {700, -1, false}},
                   128, 12, {128, 176},
                   {shapeOf(2, 4, 2, 1500, 1709), shapeOf(2, 4, 2, 1709, 1500),
                    varlenShape({37, 1300, 250}, {200, 1300, 129})},
                   71);
}

// ALiBi over tile shapes. Non-causal fwd_wgmma walks its key tiles from the diagonal
// outwards and takes the fast softmax off the tiles where the bias rises; the order and
// that rule move with block_m and block_n, and with seqlen_q > seqlen_k (diagonals left
// of the first key). Both causal and not, a tile on one side of a warp's diagonals
// takes the bias in two parts (a row's shift and a key's part, on fwd_wgmma from the
// tensor cores), one that straddles them whole: which tiles do moves with the tile shape
// too. d 64 adds fwd_wgmma's widest key tiles (the bias panel's keys up to 192).
TEST(FeaturesTiles, AlibiOverTileShapes) {
  FLASHJIT_REQUIRE_GPU();
  generator::Features alibi;
  alibi.alibi = true;
  for (generator::Family family : familiesHere())
    for (int d : {128, 64})
      for (auto [dtype, causal] : {std::pair{DType::FP16, false}, std::pair{DType::BF16, false},
                                   std::pair{DType::BF16, true}}) {
        if (d == 64 && family != generator::Family::FwdWgmma)
          continue;
        KernelSpec spec = featureSpec(family, d, dtype, causal, alibi);
        std::vector<TileConfig> tiles =
            family != generator::Family::FwdWgmma
                ? std::vector<TileConfig>{{64, 32, 4, 3}, {128, 64, 8, 2}}
            : d == 128
                ? std::vector<TileConfig>{{64, 96, 8, 3}, {128, 80, 12, 2}, {128, 128, 12, 3},
                                          {192, 96, 16, 2}}
                : std::vector<TileConfig>{{128, 176, 12, 2}, {192, 128, 16, 2},
                                          {192, 192, 16, 2}, {64, 64, 8, 4}};
        for (const TileConfig &tile : tiles) {
          if (llvm::Error err = generator::validateTile(spec, tile)) {
            llvm::consumeError(std::move(err));
            continue;
          }
          for (auto [sq, sk] : {std::pair{777, 901}, std::pair{901, 777}, std::pair{2000, 2000}})
            EXPECT_EQ(checkShape(spec, tile, shapeOf(2, 4, 2, sq, sk), 11 + sq), "")
                << spec.key() << " " << tile.key() << " " << sq << "x" << sk;
        }
      }
}

// d = 256 (one consumer-heavy tile each) with the combined features.
TEST(FeaturesTiles, HeadDim256) {
  FLASHJIT_REQUIRE_GPU();
  generator::Features f = featureCases().back().features;
  for (generator::Family family : familiesHere())
    for (bool causal : {false, true}) {
      KernelSpec spec = featureSpec(family, 256, DType::FP16, causal, f);
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shapeOf(2, 4, 2, 301, 517), 9),
                "")
          << spec.key();
    }
}

} // namespace
