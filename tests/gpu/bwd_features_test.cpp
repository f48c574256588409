// Attention features in the backward pass (issue 28, bwd_mma) against the backward
// reference with the same features (written out on its own in reference_bwd.cuh):
// sliding windows (one- and two-sided, with and without causal, one wider than a block),
// soft-capping (a cap well into tanh's bend too: its derivative scales dS), ALiBi, user
// mask_mods (prefix-LM and documents, both from an int argument), and all three built-in
// ones at once; fp16 and bf16, causal and not, head dims 64 and 128 (and 96 and 256 on
// one case each), odd lengths, MHA/GQA/MQA, a variable-length batch, deterministic mode.
// Gradients and workspace are poisoned before each run (tuner/backward_checker.cpp).
#include "backward_check.h"
#include "feature_cases.h"
#include "kernel_pool.h"

#include <tuple>

using namespace flashjit;
using namespace flashjit::testing;
using generator::Family;

namespace {

std::vector<NamedFeatures> featureCases() {
  std::vector<NamedFeatures> cases = builtinFeatureCases();
  // A window wider than a block.
  cases.push_back(namedFeatures(
      "window_left300", [](auto &f) { f.window = true, f.windowLeft = 300, f.windowRight = 0; }));
  cases.push_back(prefixLmCase());
  cases.push_back(namedFeatures("mask_mod_documents", [](auto &f) {
    f.maskMod = "return q_idx / args.integer[0] == kv_idx / args.integer[0];";
    f.hasTuningArgs = true;
    f.tuningArgs.integer[0] = 97;
  }));
  cases.push_back(windowSoftcapAlibiCase());
  return cases;
}

KernelSpec featureSpec(int d, DType dtype, bool causal, const generator::Features &features) {
  KernelSpec spec = specFor(d, d, dtype, causal, Family::BwdMma);
  spec.features = features;
  return spec;
}

tuner::ForwardShape withHeadDim(tuner::ForwardShape shape, int d) {
  shape.headDim = shape.headDimV = d;
  return shape;
}

class BwdFeatures : public ::testing::TestWithParam<std::tuple<int, DType, bool, int>> {
protected:
  static void SetUpTestSuite() {
    if (!openTestDevice())
      return;
    std::vector<std::pair<KernelSpec, TileConfig>> all;
    for (DType dtype : {DType::FP16, DType::BF16})
      for (bool causal : {false, true})
        for (int d : {64, 128})
          for (const NamedFeatures &c : featureCases()) {
            KernelSpec spec = featureSpec(d, dtype, causal, c.features);
            all.emplace_back(spec, generator::defaultTile(spec));
          }
    KernelPool::get().prepare(all);
  }
};

TEST_P(BwdFeatures, MatchReference) {
  FLASHJIT_REQUIRE_GPU();
  auto [d, dtype, causal, index] = GetParam();
  const NamedFeatures c = featureCases()[index];
  KernelSpec spec = featureSpec(d, dtype, causal, c.features);
  TileConfig tile = generator::defaultTile(spec);
  int checked = 0;
  for (const auto &[name, shape] : featureCheckShapes()) {
    EXPECT_EQ(checkBackward(spec, tile, withHeadDim(shape, d), 300 + checked, false), "")
        << spec.key() << " " << tile.key() << " " << name;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

INSTANTIATE_TEST_SUITE_P(
    BwdMma, BwdFeatures,
    ::testing::Combine(::testing::Values(64, 128), ::testing::Values(DType::FP16, DType::BF16),
                       ::testing::Bool(),
                       ::testing::Range(0, static_cast<int>(featureCases().size()))),
    [](const auto &info) {
      const int index = std::get<3>(info.param);
      return std::string(featureCases()[index].name) + "_d" +
             std::to_string(std::get<0>(info.param)) + "_" +
             generator::dtypeName(std::get<1>(info.param)).str() +
             (std::get<2>(info.param) ? "_causal" : "");
    });

// Deterministic mode (dQ by its own kernel, which walks the key blocks a window leaves),
// every tile of the space, head dims 96 and 256 (two passes), and a small shape for the
// sanitizers:
//   compute-sanitizer --tool memcheck gpu_tests --gtest_filter='BwdFeaturesMore.*'
TEST(BwdFeaturesMore, DeterministicMode) {
  FLASHJIT_REQUIRE_GPU();
  for (const NamedFeatures &c : featureCases())
    for (bool causal : {false, true}) {
      KernelSpec spec = featureSpec(128, DType::BF16, causal, c.features);
      EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                              withHeadDim(shapeOf(2, 4, 2, 257, 389), 128), 7, true),
                "")
          << spec.key() << " deterministic";
    }
}

TEST(BwdFeaturesMore, OtherHeadDims) {
  FLASHJIT_REQUIRE_GPU();
  for (int d : {96, 256})
    for (const char *name : {"window_70_45", "softcap2", "alibi"})
      for (const NamedFeatures &c : featureCases())
        if (std::string(c.name) == name) {
          KernelSpec spec = featureSpec(d, DType::BF16, true, c.features);
          for (bool deterministic : {false, true})
            EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                                    withHeadDim(shapeOf(2, 4, 2, 300, 333), d), 11,
                                    deterministic),
                      "")
                << spec.key() << (deterministic ? " deterministic" : "");
        }
}

TEST(BwdFeaturesMore, SanitizerShapes) {
  FLASHJIT_REQUIRE_GPU();
  for (const NamedFeatures &c : featureCases())
    for (bool deterministic : {false, true}) {
      KernelSpec spec = featureSpec(64, DType::BF16, true, c.features);
      EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                              withHeadDim(shapeOf(1, 2, 1, 77, 150), 64), 13, deterministic),
                "")
          << spec.key() << (deterministic ? " deterministic" : "");
    }
}

} // namespace
