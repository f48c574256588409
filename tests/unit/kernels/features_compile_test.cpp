// Attention features (issue 28) through NVRTC, no GPU needed: each built-in feature
// alone and three example user mods (a relative-position score_mod, a document
// mask_mod reading a tensor argument, a prefix-LM mask_mod reading an int argument),
// for fwd_mma on sm_80 and sm_90a and fwd_wgmma on sm_90a, fp16 and bf16 at head dims
// 64 and 128 with the default tiles: each compiles with no register spills (and for
// fwd_wgmma no serialized wgmma or ignored setmaxnreg: compileEmitted refuses those).
// The fp32 and emulating references compile with the same features. A user mod with a
// syntax error fails with NVRTC's log naming the user's own line (score_mod(2)), and an
// error after the user code names the generated source's real line. The binary key
// follows the user's text. Prints the compile times.
#include "generator/bwd_wgmma.h"
#include "generator/emit.h"
#include "runtime/nvrtc.h"
#include "support/error.h"
#include "tuner/loaded_kernel.h"
#include "tuner/variants.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

using namespace flashjit;
using generator::DType;
using generator::Family;

namespace {

struct FamilyTarget {
  Family family;
  const char *target;
};

struct FeatureCase {
  const char *name;
  bool causal;
  generator::Features features;
};

// The cases: each built-in feature alone, then the example mods (examples/mods/).
std::vector<FeatureCase> featureCases() {
  std::vector<FeatureCase> cases;
  auto add = [&](const char *name, bool causal, auto set) {
    generator::Features f;
    set(f);
    cases.push_back({name, causal, f});
  };
  add("window256_0_causal", true, [](auto &f) {
    f.window = true;
    f.windowLeft = 256;
    f.windowRight = 0;
  });
  add("window128_128", false, [](auto &f) {
    f.window = true;
    f.windowLeft = 128;
    f.windowRight = 128;
  });
  add("softcap30", false, [](auto &f) { f.softcap = 30; });
  add("alibi", true, [](auto &f) { f.alibi = true; });
  add("score_mod_relative_bias", false, [](auto &f) {
    f.scoreMod = "return score + 0.01f * (float)(kv_idx - q_idx);\n";
  });
  add("mask_mod_document", true, [](auto &f) {
    f.maskMod = "const int *doc = (const int *)args.tensor[0];\n"
                "return doc[q_idx] == doc[kv_idx];\n";
  });
  // Not causal: the tile a tensor-reading mask runs untuned (fwd_wgmma d 64 spilled once).
  add("mask_mod_document_noncausal", false, [](auto &f) {
    f.maskMod = "const int *doc = (const int *)args.tensor[0];\n"
                "return doc[q_idx] == doc[kv_idx];\n";
  });
  add("mask_mod_prefix_lm", false, [](auto &f) {
    f.maskMod = "return kv_idx <= q_idx || kv_idx < args.integer[0];\n";
  });
  return cases;
}

generator::KernelSpec specOf(FamilyTarget ft, DType dtype, int d, const FeatureCase &c) {
  generator::KernelSpec spec;
  spec.family = ft.family;
  spec.dtype = dtype;
  spec.headDim = spec.headDimV = d;
  spec.causal = c.causal;
  spec.target = ft.target;
  spec.features = c.features;
  return spec;
}

class FeaturesCompile
    : public ::testing::TestWithParam<std::tuple<FamilyTarget, FeatureCase>> {};

// "<family>_<target>_<case>", e.g. "dec_mma_sm_90a_alibi".
std::string caseName(const ::testing::TestParamInfo<FeaturesCompile::ParamType> &info) {
  const FamilyTarget &ft = std::get<0>(info.param);
  return std::string(generator::familyName(ft.family)) + "_" + ft.target + "_" +
         std::get<1>(info.param).name;
}

TEST_P(FeaturesCompile, DefaultTilesCompileWithoutSpills) {
  auto [ft, c] = GetParam();
  std::vector<double> times;
  for (DType dtype : {DType::FP16, DType::BF16})
    for (int d : {64, 128}) {
      generator::KernelSpec spec = specOf(ft, dtype, d, c);
      generator::TileConfig tile = generator::defaultTile(spec);
      auto kernel = generator::emitKernel(spec, tile);
      ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
      ASSERT_NE(kernel->source.find("struct FjFeatures"), std::string::npos);
      ASSERT_NE(kernel->source.find("FjFeatures> FjConfig"), std::string::npos)
          << "the kernel's config takes the features";
      auto binary = tuner::compileEmitted(*kernel, ft.target);
      ASSERT_TRUE(bool(binary)) << spec.key() << " " << tile.key() << ": "
                                << llvm::toString(binary.takeError());
      EXPECT_GT(binary->cubin.size(), 1000u);
      EXPECT_GT(binary->registers, 0) << spec.key();
      EXPECT_EQ(binary->spillStoreBytes, 0) << spec.key() << " " << tile.key();
      EXPECT_EQ(binary->spillLoadBytes, 0) << spec.key() << " " << tile.key();
      // What the tuner would say of it (spills, serialized or ignored instructions).
      EXPECT_EQ(tuner::compileRejection(binary->spillStoreBytes + binary->spillLoadBytes,
                                        binary->log),
                "")
          << spec.key() << " " << tile.key();
      times.push_back(binary->compileMs);
      std::printf("  %-72s %-18s %4d regs  %4d B spill  %4d B stack  %6.0f ms\n",
                  spec.key().c_str(), tile.key().c_str(), binary->registers,
                  binary->spillStoreBytes + binary->spillLoadBytes, binary->stackFrameBytes,
                  binary->compileMs);
    }
  std::sort(times.begin(), times.end());
  std::printf("  compile ms: min %.0f  median %.0f  max %.0f\n", times.front(),
              times[times.size() / 2], times.back());
}

INSTANTIATE_TEST_SUITE_P(
    Features, FeaturesCompile,
    ::testing::Combine(::testing::Values(FamilyTarget{Family::FwdMma, "sm_80"},
                                         FamilyTarget{Family::FwdMma, "sm_90a"},
                                         FamilyTarget{Family::FwdWgmma, "sm_90a"}),
                       ::testing::ValuesIn(featureCases())),
    caseName);

// The decode kernels take every feature (0.13: the built-in ones; 0.14: the user's code):
// dec_mma's default tiles compile without spills, on sm_80 and sm_90a.
INSTANTIATE_TEST_SUITE_P(
    DecodeFeatures, FeaturesCompile,
    ::testing::Combine(::testing::Values(FamilyTarget{Family::DecMma, "sm_80"},
                                         FamilyTarget{Family::DecMma, "sm_90a"}),
                       ::testing::ValuesIn(featureCases())),
    caseName);

// Over an FP8 cache too (0.14): each case's default tile at d 64 and 128, on sm_80 and
// sm_90a, without spills.
TEST(FeaturesCompileDecodeFp8Cache, EveryCaseCompilesWithoutSpills) {
  for (const char *target : {"sm_80", "sm_90a"})
    for (const FeatureCase &c : featureCases())
      for (int d : {64, 128}) {
        generator::KernelSpec spec = specOf({Family::DecMma, target}, DType::E4M3, d, c);
        spec.outDtype = DType::BF16;
        generator::TileConfig tile = generator::defaultTile(spec);
        auto kernel = generator::emitKernel(spec, tile);
        ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
        auto binary = tuner::compileEmitted(*kernel, target);
        ASSERT_TRUE(bool(binary)) << spec.key() << " " << tile.key() << ": "
                                  << llvm::toString(binary.takeError());
        EXPECT_EQ(binary->spillStoreBytes + binary->spillLoadBytes, 0)
            << spec.key() << " " << tile.key();
      }
}

// The backward pass takes every feature but score_mod (0.9): bwd_mma's default tiles
// compile without spills, on sm_80 and sm_90a.
std::vector<FeatureCase> backwardFeatureCases() {
  std::vector<FeatureCase> cases = featureCases();
  llvm::erase_if(cases, [](const FeatureCase &c) { return !c.features.scoreMod.empty(); });
  return cases;
}
// bwd_wgmma takes them but soft-capping with ALiBi (and at head dim 64 soft-capping with
// causal or a window, bwdWgmmaFeatureRefusal): its default tiles compile without spills
// or serialized wgmma too.
std::vector<FeatureCase> wgmmaBackwardFeatureCases() {
  std::vector<FeatureCase> cases = backwardFeatureCases();
  llvm::erase_if(cases, [](const FeatureCase &c) {
    return generator::bwdWgmmaFeatureRefusal(
               specOf({Family::BwdWgmma, "sm_90a"}, DType::BF16, 64, c))
        .has_value();
  });
  return cases;
}
INSTANTIATE_TEST_SUITE_P(
    WgmmaBackwardFeatures, FeaturesCompile,
    ::testing::Combine(::testing::Values(FamilyTarget{Family::BwdWgmma, "sm_90a"}),
                       ::testing::ValuesIn(wgmmaBackwardFeatureCases())),
    caseName);

INSTANTIATE_TEST_SUITE_P(
    BackwardFeatures, FeaturesCompile,
    ::testing::Combine(::testing::Values(FamilyTarget{Family::BwdMma, "sm_80"},
                                         FamilyTarget{Family::BwdMma, "sm_90a"}),
                       ::testing::ValuesIn(backwardFeatureCases())),
    caseName);

// bwd_wgmma's features in every combination it takes, causal or not, at each head dim:
// the default tile compiles without spills or serialized wgmma (the rule that sends
// soft-capping with causal or a window at head dim 64 to bwd_mma, bwdWgmmaFeatureRefusal,
// comes from here; ALiBi with no mask fits since its steps split masked and unmasked).
TEST(FeaturesCompileWgmmaBackward, EveryCombinationItTakesFits) {
  std::vector<FeatureCase> cases;
  auto add = [&](const char *name, auto set) {
    generator::Features f;
    set(f);
    cases.push_back({name, false, f});
  };
  add("window", [](auto &f) { f.window = true, f.windowLeft = 100, f.windowRight = 20; });
  add("alibi", [](auto &f) { f.alibi = true; });
  add("window_alibi", [](auto &f) {
    f.window = true, f.windowLeft = 256, f.windowRight = -1;
    f.alibi = true;
  });
  add("mask_mod", [](auto &f) { f.maskMod = "return kv_idx <= q_idx || kv_idx < args.integer[0];\n"; });
  add("alibi_mask_mod", [](auto &f) {
    f.alibi = true;
    f.maskMod = "return q_idx / 97 == kv_idx / 97;\n";
  });
  add("softcap", [](auto &f) { f.softcap = 30; });
  add("softcap_window", [](auto &f) {
    f.softcap = 20;
    f.window = true, f.windowLeft = 100, f.windowRight = 20;
  });
  add("softcap_mask_mod", [](auto &f) {
    f.softcap = 30;
    f.maskMod = "return q_idx / 97 == kv_idx / 97;\n";
  });
  int compiled = 0, refused = 0;
  for (const FeatureCase &base : cases)
    for (bool causal : {false, true})
      for (int d : {64, 128, 256}) {
        FeatureCase c = base;
        c.causal = causal;
        generator::KernelSpec spec = specOf({Family::BwdWgmma, "sm_90a"}, DType::BF16, d, c);
        if (generator::bwdWgmmaFeatureRefusal(spec)) {
          ++refused;
          continue;
        }
        generator::TileConfig tile = generator::defaultTile(spec);
        auto kernel = generator::emitKernel(spec, tile);
        ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
        auto binary = tuner::compileEmitted(*kernel, "sm_90a");
        ASSERT_TRUE(bool(binary)) << spec.key() << ": " << llvm::toString(binary.takeError());
        EXPECT_EQ(tuner::compileRejection(binary->spillStoreBytes + binary->spillLoadBytes,
                                          binary->log),
                  "")
            << spec.key() << " " << tile.key();
        ++compiled;
      }
  // At head dim 64: soft-capping with causal (alone or with the mask_mod) or with the
  // window (causal or not).
  EXPECT_EQ(refused, 4);
  std::printf("  %d bwd_wgmma feature kernels compiled, %d left to bwd_mma\n", compiled,
              refused);
}

// Every feature at once (the hook's longest path) on fwd_mma: no spills either.
TEST(FeaturesCompileCombined, AllFeaturesTogetherOnFwdMma) {
  FeatureCase all{"all", true, {}};
  all.features.window = true;
  all.features.windowLeft = 256;
  all.features.windowRight = 0;
  all.features.softcap = 30;
  all.features.alibi = true;
  all.features.scoreMod = "return score + 0.01f * (float)(kv_idx - q_idx);\n";
  all.features.maskMod = "const int *doc = (const int *)args.tensor[0];\n"
                         "return doc[q_idx] == doc[kv_idx];\n";
  for (const char *target : {"sm_80", "sm_90a"})
    for (int d : {64, 128}) {
      generator::KernelSpec spec = specOf({Family::FwdMma, target}, DType::BF16, d, all);
      generator::TileConfig tile = generator::defaultTile(spec);
      auto kernel = generator::emitKernel(spec, tile);
      ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
      auto binary = tuner::compileEmitted(*kernel, target);
      ASSERT_TRUE(bool(binary)) << spec.key() << ": " << llvm::toString(binary.takeError());
      EXPECT_EQ(binary->spillStoreBytes + binary->spillLoadBytes, 0)
          << spec.key() << " " << tile.key();
      std::printf("  %-90s %-18s %4d regs  %6.0f ms\n", spec.key().c_str(), tile.key().c_str(),
                  binary->registers, binary->compileMs);
    }
}

// The references the checkers build for a spec with features (tuner::forwardReference,
// the backward checker's): fp32 and emulating the dtype, with every case's features.
TEST(FeaturesCompileReference, EveryCaseCompilesInBothModes) {
  std::vector<double> times;
  for (const FeatureCase &c : featureCases())
    for (DType dtype : {DType::FP16, DType::BF16})
      for (bool emulate : {false, true}) {
        auto kernel = generator::emitReference(dtype, emulate, "sm_80", c.features);
        ASSERT_TRUE(bool(kernel)) << c.name << ": " << llvm::toString(kernel.takeError());
        ASSERT_NE(kernel->source.find("struct FjFeatures"), std::string::npos) << c.name;
        auto binary = tuner::compileEmitted(*kernel, "sm_80");
        ASSERT_TRUE(bool(binary)) << c.name << " " << generator::dtypeName(dtype).str()
                                  << (emulate ? " emulated" : " fp32") << ": "
                                  << llvm::toString(binary.takeError());
        times.push_back(binary->compileMs);
        if (!c.features.scoreMod.empty())
          continue;  // the backward pass takes no score_mod
        auto backward = generator::emitBackwardReference(dtype, emulate, "sm_80", c.features);
        ASSERT_TRUE(bool(backward)) << c.name << ": " << llvm::toString(backward.takeError());
        ASSERT_NE(backward->source.find("struct FjFeatures"), std::string::npos) << c.name;
        auto backwardBinary = tuner::compileEmitted(*backward, "sm_80");
        ASSERT_TRUE(bool(backwardBinary)) << c.name << " backward: "
                                          << llvm::toString(backwardBinary.takeError());
        times.push_back(backwardBinary->compileMs);
      }
  std::sort(times.begin(), times.end());
  std::printf("  %zu references, compile ms: min %.0f  median %.0f  max %.0f\n", times.size(),
              times.front(), times[times.size() / 2], times.back());
}

// NVRTC's message for a user mod that does not compile, as the CLI and the C API
// report it (runtime::compile's error, with the log).
std::string compileError(FamilyTarget ft, const generator::Features &features) {
  FeatureCase c{"user", false, features};
  generator::KernelSpec spec = specOf(ft, DType::BF16, 64, c);
  auto kernel = generator::emitKernel(spec, generator::defaultTile(spec));
  if (!kernel)
    return "emit failed: " + llvm::toString(kernel.takeError());
  auto binary = tuner::compileEmitted(*kernel, ft.target);
  if (binary)
    return "";
  ErrorReport report = takeErrorReport(binary.takeError());
  EXPECT_EQ(report.code, ErrorCode::Compile);
  return report.message;
}

// Where NVRTC's log puts its errors: "file(line)" of each "file(line): error" line.
std::vector<std::string> errorPlaces(llvm::StringRef message) {
  std::vector<std::string> places;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  message.split(lines, '\n');
  for (llvm::StringRef line : lines) {
    size_t at = line.find("): error");
    if (at != llvm::StringRef::npos)
      places.push_back(line.take_front(at + 1).trim().str());
  }
  return places;
}

TEST(FeaturesCompileErrors, SyntaxErrorNamesTheUsersLine) {
  for (FamilyTarget ft : {FamilyTarget{Family::FwdMma, "sm_80"},
                          FamilyTarget{Family::FwdWgmma, "sm_90a"}}) {
    generator::Features score;
    score.scoreMod = "float x = score * 2.0f;\nreturn x + ;\n";  // line 2 is broken
    std::string message = compileError(ft, score);
    EXPECT_EQ(errorPlaces(message), std::vector<std::string>{"score_mod(2)"}) << message;

    generator::Features mask;
    // Line 2 lacks its ';': EDG notices at the next token, on line 3.
    mask.maskMod = "// a document mask\nconst int *doc = (const int *)args.tensor[0]\n"
                   "return doc[q_idx] == doc[kv_idx];\n";
    message = compileError(ft, mask);
    EXPECT_EQ(errorPlaces(message), std::vector<std::string>{"mask_mod(3)"}) << message;

    generator::Features undeclared;
    undeclared.scoreMod = "return score + bias;\n";  // line 1: no such name
    message = compileError(ft, undeclared);
    EXPECT_EQ(errorPlaces(message), std::vector<std::string>{"score_mod(1)"}) << message;
    EXPECT_NE(message.find("\"bias\" is undefined"), std::string::npos) << message;
  }
}

// Past the user's code the lines are the generated source's own again: an error there
// names flashjit_kernel.cu and the line it is on.
TEST(FeaturesCompileErrors, ErrorAfterTheUserCodeNamesTheSourcesLine) {
  FeatureCase c{"user", false, {}};
  c.features.scoreMod = "return score + 0.01f * (float)(kv_idx - q_idx);\n";
  c.features.maskMod = "return kv_idx <= q_idx || kv_idx < args.integer[0];\n";
  generator::KernelSpec spec = specOf({Family::FwdMma, "sm_80"}, DType::BF16, 64, c);
  auto kernel = generator::emitKernel(spec, generator::defaultTile(spec));
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  // An error on the last line, after both functions.
  if (kernel->source.back() != '\n')
    kernel->source += '\n';
  int line = 1 + (int)std::count(kernel->source.begin(), kernel->source.end(), '\n');
  kernel->source += "static_assert(sizeof(int) == 0, \"planted after the user code\");\n";
  auto binary = tuner::compileEmitted(*kernel, "sm_80");
  ASSERT_FALSE(bool(binary));
  std::string message = takeErrorReport(binary.takeError()).message;
  EXPECT_EQ(errorPlaces(message),
            std::vector<std::string>{std::string(generator::kProgramName) + "(" +
                                     std::to_string(line) + ")"})
      << message;
}

// The binary key (DESIGN.md: a hash of the source, the options, NVRTC's version and the
// target) follows the user's text, since the source embeds it.
TEST(FeaturesBinaryKey, FollowsTheUserCodeText) {
  auto keyOf = [](const std::string &score, const std::string &mask, bool alibi = false) {
    FeatureCase c{"user", false, {}};
    c.features.scoreMod = score;
    c.features.maskMod = mask;
    c.features.alibi = alibi;
    generator::KernelSpec spec = specOf({Family::FwdMma, "sm_80"}, DType::BF16, 64, c);
    auto kernel = generator::emitKernel(spec, generator::defaultTile(spec));
    EXPECT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    if (!kernel)
      return std::string();
    return tuner::binaryKey(kernel->source, kernel->options, "13.0", spec.target);
  };
  const std::string bias = "return score + 0.01f * (float)(kv_idx - q_idx);\n";
  const std::string prefix = "return kv_idx <= q_idx || kv_idx < args.integer[0];\n";
  EXPECT_EQ(keyOf(bias, ""), keyOf(std::string(bias), ""));
  EXPECT_EQ(keyOf("", prefix), keyOf("", prefix));
  EXPECT_NE(keyOf(bias, ""), keyOf("return score + 0.02f * (float)(kv_idx - q_idx);\n", ""));
  EXPECT_NE(keyOf(bias, ""), keyOf(bias + "// a comment\n", ""));
  EXPECT_NE(keyOf("", prefix), keyOf("", "return kv_idx <= q_idx;\n"));
  EXPECT_NE(keyOf(bias, ""), keyOf("", ""));
  EXPECT_NE(keyOf(bias, prefix), keyOf(bias, prefix, true));
  EXPECT_EQ(keyOf("", ""), keyOf("", ""));
}

} // namespace
