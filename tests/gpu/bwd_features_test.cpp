// Attention features in the backward pass (issue 28) against the backward reference with
// the same features (written out on its own in reference_bwd.cuh), on bwd_mma (every
// case) and bwd_wgmma (sm_90a; every case but soft-capping, which it does not take):
// sliding windows (one- and two-sided, with and without causal, one wider than a block),
// soft-capping (a cap well into tanh's bend too: its derivative scales dS), ALiBi, user
// mask_mods (prefix-LM and documents, both from an int argument), all three built-in ones
// at once, and a window with ALiBi and documents; fp16 and bf16, causal and not, head dims 64 and 128 (and 96, 192 and
// 256 on one case each, bwd_wgmma's padded panels among them), odd lengths, MHA/GQA/MQA, a
// variable-length batch, deterministic mode.
// Gradients and workspace are poisoned before each run (tuner/backward_checker.cpp).
#include "backward_check.h"
#include "feature_cases.h"
#include "kernel_pool.h"

#include "generator/bwd_wgmma.h"

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
  cases.push_back(namedFeatures("window_alibi_documents", [](auto &f) {
    f.window = true, f.windowLeft = 150, f.windowRight = 20;
    f.alibi = true;
    f.maskMod = "return q_idx / args.integer[0] == kv_idx / args.integer[0];";
    f.hasTuningArgs = true;
    f.tuningArgs.integer[0] = 97;
  }));
  return cases;
}

KernelSpec featureSpec(int d, DType dtype, bool causal, const generator::Features &features,
                       Family family = Family::BwdMma) {
  KernelSpec spec = specFor(d, d, dtype, causal, family);
  spec.features = features;
  return spec;
}

// Whether the spec's family takes its features (bwd_wgmma: not soft-capping, nor ALiBi
// with no mask at head dim 64; generator::bwdWgmmaFeatureRefusal).
bool takes(const KernelSpec &spec) {
  return spec.family != Family::BwdWgmma || !generator::bwdWgmmaFeatureRefusal(spec);
}

bool onHopper() {
  return openTestDevice() && openTestDevice()->properties().target() == "sm_90a";
}

// (family, d, dtype, causal, case) of the grid: each family's cases.
using GridParam = std::tuple<Family, int, DType, bool, int>;
std::vector<GridParam> gridParams() {
  std::vector<GridParam> params;
  for (Family family : {Family::BwdMma, Family::BwdWgmma})
    for (int d : {64, 128})
      for (DType dtype : {DType::FP16, DType::BF16})
        for (bool causal : {false, true})
          for (int i = 0; i < (int)featureCases().size(); ++i) {
            // Built by hand: specFor asks the device for its target, and the parameters
            // are made when the tests are listed, with or without one.
            KernelSpec probe;
            probe.family = family, probe.dtype = dtype, probe.causal = causal;
            probe.headDim = probe.headDimV = d;
            probe.features = featureCases()[i].features;
            if (takes(probe))
              params.emplace_back(family, d, dtype, causal, i);
          }
  return params;
}

tuner::ForwardShape withHeadDim(tuner::ForwardShape shape, int d) {
  shape.headDim = shape.headDimV = d;
  return shape;
}

class BwdFeatures : public ::testing::TestWithParam<GridParam> {
protected:
  static void SetUpTestSuite() {
    if (!openTestDevice())
      return;
    std::vector<std::pair<KernelSpec, TileConfig>> all;
    for (auto [family, d, dtype, causal, index] : gridParams())
      if (family != Family::BwdWgmma || onHopper()) {
        KernelSpec spec = featureSpec(d, dtype, causal, featureCases()[index].features, family);
        all.emplace_back(spec, generator::defaultTile(spec));
      }
    KernelPool::get().prepare(all);
  }
};

TEST_P(BwdFeatures, MatchReference) {
  FLASHJIT_REQUIRE_GPU();
  auto [family, d, dtype, causal, index] = GetParam();
  if (family == Family::BwdWgmma && !onHopper())
    GTEST_SKIP() << "bwd_wgmma needs an sm_90a device";
  const NamedFeatures c = featureCases()[index];
  KernelSpec spec = featureSpec(d, dtype, causal, c.features, family);
  TileConfig tile = generator::defaultTile(spec);
  int checked = 0;
  for (const auto &[name, shape] : featureCheckShapes()) {
    EXPECT_EQ(checkBackward(spec, tile, withHeadDim(shape, d), 300 + checked, false), "")
        << spec.key() << " " << tile.key() << " " << name;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

INSTANTIATE_TEST_SUITE_P(Grid, BwdFeatures, ::testing::ValuesIn(gridParams()),
                         [](const auto &info) {
                           const int index = std::get<4>(info.param);
                           return generator::familyName(std::get<0>(info.param)).str() + "_" +
                                  featureCases()[index].name + "_d" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  generator::dtypeName(std::get<2>(info.param)).str() +
                                  (std::get<3>(info.param) ? "_causal" : "");
                         });

// Deterministic mode (dQ by its own kernel, which walks the key blocks a window leaves),
// every tile of the space, head dims 96 and 256 (two passes), and a small shape for the
// sanitizers:
//   compute-sanitizer --tool memcheck gpu_tests --gtest_filter='BwdFeaturesMore.*'
// bwd_mma, and bwd_wgmma on sm_90a.
std::vector<Family> familiesHere() {
  std::vector<Family> families = {Family::BwdMma};
  if (onHopper())
    families.push_back(Family::BwdWgmma);
  return families;
}

TEST(BwdFeaturesMore, DeterministicMode) {
  FLASHJIT_REQUIRE_GPU();
  for (Family family : familiesHere())
    for (const NamedFeatures &c : featureCases())
      for (bool causal : {false, true}) {
        KernelSpec spec = featureSpec(128, DType::BF16, causal, c.features, family);
        if (!takes(spec))
          continue;
        EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                                withHeadDim(shapeOf(2, 4, 2, 257, 389), 128), 7, true),
                  "")
            << spec.key() << " deterministic";
      }
}

TEST(BwdFeaturesMore, OtherHeadDims) {
  FLASHJIT_REQUIRE_GPU();
  for (Family family : familiesHere())
    for (int d : {96, 192, 256})
      for (const char *name : {"window_70_45", "softcap2", "alibi", "mask_mod_documents"})
        for (const NamedFeatures &c : featureCases()) {
          KernelSpec spec = featureSpec(d, DType::BF16, true, c.features, family);
          if (std::string(c.name) != name || !takes(spec))
            continue;
          for (bool deterministic : {false, true})
            EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                                    withHeadDim(shapeOf(2, 4, 2, 300, 333), d), 11,
                                    deterministic),
                      "")
                << spec.key() << (deterministic ? " deterministic" : "");
        }
}

// head_dim != head_dim_v: the features act on the scores, whose head dim is head_dim;
// bwd_wgmma computes on the panels that hold the larger.
TEST(BwdFeaturesMore, HeadDimVDiffers) {
  FLASHJIT_REQUIRE_GPU();
  for (Family family : familiesHere())
    for (auto [d, dv] : {std::pair{192, 128}, std::pair{128, 64}})
      for (const char *name : {"window_70_45", "softcap2", "alibi", "mask_mod_documents"})
        for (const NamedFeatures &c : featureCases()) {
          KernelSpec spec = featureSpec(d, DType::BF16, true, c.features, family);
          spec.headDimV = dv;
          if (std::string(c.name) != name || !takes(spec))
            continue;
          tuner::ForwardShape shape = shapeOf(2, 4, 2, 300, 333);
          shape.headDim = d;
          shape.headDimV = dv;
          for (bool deterministic : {false, true})
            EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec), shape, 17, deterministic),
                      "")
                << spec.key() << (deterministic ? " deterministic" : "");
        }
}

TEST(BwdFeaturesMore, SanitizerShapes) {
  FLASHJIT_REQUIRE_GPU();
  for (Family family : familiesHere())
    for (const NamedFeatures &c : featureCases())
      for (bool deterministic : {false, true}) {
        KernelSpec spec = featureSpec(64, DType::BF16, true, c.features, family);
        if (!takes(spec))
          continue;
        EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                                withHeadDim(shapeOf(1, 2, 1, 77, 150), 64), 13, deterministic),
                  "")
            << spec.key() << (deterministic ? " deterministic" : "");
      }
}

// How a failure names the block-mask mode it ran in.
const char *stepsName(tuner::BackwardChecker::BlockSteps steps) {
  using Steps = tuner::BackwardChecker::BlockSteps;
  return steps == Steps::Shared ? " shared" : steps == Steps::PerHeadFewBits ? " few bits" : "";
}

// A mask_mod's backward kernels with a block mask's steps (the backward's block sparsity:
// dropped steps skipped, fully kept ones run without calling mask_mod, partly kept ones
// by their keep bits on bwd_wgmma, or by mask_mod where they have none: the "few bits"
// mode gives bits to the first 3 only): the same bar against the reference, per head and
// shared by the heads (and sequences), on the grid's
// shapes and one where documents of 300 rows leave whole blocks kept and whole ones
// dropped; bwd_wgmma at d 64/128/256 (sm_90a), bwd_mma at 64/128 (any GPU).
TEST(BwdFeaturesMore, BlockMaskSteps) {
  FLASHJIT_REQUIRE_GPU();
  using Steps = tuner::BackwardChecker::BlockSteps;
  std::vector<NamedFeatures> cases;
  for (const NamedFeatures &c : featureCases())
    if (!c.features.maskMod.empty())
      cases.push_back(c);
  cases.push_back(namedFeatures("mask_mod_documents300", [](auto &f) {
    f.maskMod = "return q_idx / args.integer[0] == kv_idx / args.integer[0];";
    f.hasTuningArgs = true;
    f.tuningArgs.integer[0] = 300;
  }));
  auto shapes = featureCheckShapes();
  shapes.push_back({"1500x1500 GQA", shapeOf(2, 4, 2, 1500, 1500)});
  int checked = 0;
  for (Family family : familiesHere())
  for (const NamedFeatures &c : cases)
    for (int d : {64, 128, 256})
      for (bool causal : {false, true}) {
        if (family == Family::BwdMma && d == 256)
          continue;
        KernelSpec spec =
            featureSpec(d, d == 128 && causal ? DType::FP16 : DType::BF16, causal, c.features,
                        family);
        ASSERT_TRUE(takes(spec)) << spec.key();
        for (const auto &[name, shape] : shapes)
          for (Steps steps : {Steps::PerHead, Steps::Shared, Steps::PerHeadFewBits}) {
            if ((steps == Steps::Shared && d != 128) || (steps == Steps::PerHeadFewBits && d != 64))
              continue;
            EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec), withHeadDim(shape, d),
                                    500 + checked++, false, steps),
                      "")
                << spec.key() << " " << name << stepsName(steps);
          }
        // dK and dV from the steps, dQ by the deterministic pass (which walks every block).
        EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec),
                                withHeadDim(shapeOf(2, 4, 2, 257, 389), d), 17, true,
                                Steps::PerHead),
                  "")
            << spec.key() << " deterministic";
      }
}

} // namespace

// Small shapes for compute-sanitizer (memcheck, racecheck; docs/GPU-TESTING.md): the
// step lists' builder and walk, per head and shared, with a variable-length batch.
TEST(BwdFeaturesMore, BlockMaskStepsSanitizerShapes) {
  FLASHJIT_REQUIRE_GPU();
  using Steps = tuner::BackwardChecker::BlockSteps;
  tuner::ForwardShape varlen = shapeOf(3, 4, 2, 0, 0);
  varlen.seqlensQ = {37, 150, 1};
  varlen.seqlensK = {100, 150, 129};
  varlen.seqQ = 150;
  varlen.seqK = 150;
  std::vector<NamedFeatures> cases = {prefixLmCase()};
  for (const NamedFeatures &c : featureCases())
    if (std::string(c.name) == "mask_mod_documents")
      cases.push_back(c);
  ASSERT_EQ(cases.size(), 2u);
  for (Family family : familiesHere())
  for (const NamedFeatures &c : cases)
    for (bool causal : {false, true})
      for (Steps steps : {Steps::PerHead, Steps::Shared, Steps::PerHeadFewBits}) {
        KernelSpec spec = featureSpec(64, DType::BF16, causal, c.features, family);
        for (const tuner::ForwardShape &shape : {shapeOf(1, 2, 1, 77, 150), varlen})
          EXPECT_EQ(checkBackward(spec, generator::defaultTile(spec), withHeadDim(shape, 64),
                                  19, false, steps),
                    "")
              << spec.key() << stepsName(steps);
      }
}
