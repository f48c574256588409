// Which kernel families serve a target (no GPU): fwd_wgmma with its fwd_mma fallback on
// sm_90a, fwd_mma alone elsewhere, $FLASHJIT_FAMILY overriding, and the refusal of a
// family the target cannot run; the backward pass's family per spec (bwd_wgmma on
// sm_90a for the head dims it takes, bwd_mma otherwise) and $FLASHJIT_BACKWARD_FAMILY.
#include "tuner/family.h"
#include "tests/scoped_env.h"

#include "support/error.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

using namespace flashjit;
using flashjit::testing::ScopedEnv;
using generator::Family;
using tuner::FamilyPlan;

namespace {

FamilyPlan planOf(const char *target, const char *forced = "", const char *forcedBackward = "") {
  auto plan = tuner::familyPlan(target, forced, forcedBackward);
  EXPECT_TRUE(bool(plan)) << target << " " << forced << " " << forcedBackward << ": "
                          << llvm::toString(plan.takeError());
  return plan ? *plan : FamilyPlan{};
}

ErrorReport failureOf(const char *target, const char *forced) {
  auto plan = tuner::familyPlan(target, forced);
  EXPECT_FALSE(bool(plan)) << target << " " << forced;
  return plan ? ErrorReport{} : takeErrorReport(plan.takeError());
}

TEST(FamilyPlan, HopperGetsWgmmaWithAnMmaFallback) {
  for (const char *forced : {"", "auto", " AUTO "}) {
    FamilyPlan plan = planOf("sm_90a", forced);
    EXPECT_EQ(plan.primary, Family::FwdWgmma) << forced;
    ASSERT_TRUE(plan.fallback.has_value()) << forced;
    EXPECT_EQ(*plan.fallback, Family::FwdMma);
    EXPECT_FALSE(plan.forced);
    EXPECT_EQ(plan.families(), (std::vector<Family>{Family::FwdWgmma, Family::FwdMma}));
    EXPECT_EQ(plan.describe(), "fwd_wgmma (fwd_mma fallback)");
  }
}

TEST(FamilyPlan, OtherTargetsGetMmaAlone) {
  // sm_90 without "a" has no wgmma/setmaxnreg: fwd_mma there too.
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_120"}) {
    FamilyPlan plan = planOf(target);
    EXPECT_EQ(plan.primary, Family::FwdMma) << target;
    EXPECT_FALSE(plan.fallback.has_value()) << target;
    EXPECT_EQ(plan.families(), std::vector<Family>{Family::FwdMma});
    EXPECT_EQ(plan.describe(), "fwd_mma");
  }
}

TEST(FamilyPlan, ForcedFamilies) {
  FamilyPlan mma = planOf("sm_90a", "fwd_mma");
  EXPECT_EQ(mma.primary, Family::FwdMma);
  EXPECT_FALSE(mma.fallback.has_value()) << "fwd_mma takes every argument";
  EXPECT_TRUE(mma.forced);
  EXPECT_EQ(planOf("sm_80", "FWD_MMA").primary, Family::FwdMma);

  FamilyPlan wgmma = planOf("sm_90a", "fwd_wgmma");
  EXPECT_EQ(wgmma.primary, Family::FwdWgmma);
  ASSERT_TRUE(wgmma.fallback.has_value()) << "forcing wgmma must not lose varlen";
  EXPECT_EQ(*wgmma.fallback, Family::FwdMma);
  EXPECT_TRUE(wgmma.forced);

  ErrorReport off = failureOf("sm_80", "fwd_wgmma");
  EXPECT_EQ(off.code, ErrorCode::NotSupported);
  EXPECT_NE(off.message.find("sm_90a"), std::string::npos) << off.message;
  EXPECT_NE(off.message.find("'sm_80'"), std::string::npos) << off.message;

  ErrorReport bad = failureOf("sm_90a", "fwd_fast");
  EXPECT_EQ(bad.code, ErrorCode::InvalidValue);
  EXPECT_NE(bad.message.find("'fwd_fast'"), std::string::npos) << bad.message;
  EXPECT_NE(bad.message.find("auto, fwd_mma or fwd_wgmma"), std::string::npos) << bad.message;
}

TEST(FamilyPlan, EnvironmentVariableOverrides) {
  {
    ScopedEnv env("FLASHJIT_FAMILY", "fwd_mma");
    auto plan = tuner::familyPlanFromEnv("sm_90a");
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->primary, Family::FwdMma);
    EXPECT_TRUE(plan->forced);
  }
  {
    ScopedEnv env("FLASHJIT_FAMILY", "");
    auto plan = tuner::familyPlanFromEnv("sm_90a");
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->primary, Family::FwdWgmma) << "empty: the default";
  }
  {
    ScopedEnv env("FLASHJIT_FAMILY", "fwd_wgmma");
    auto plan = tuner::familyPlanFromEnv("sm_86");
    ASSERT_FALSE(bool(plan));
    ErrorReport report = takeErrorReport(plan.takeError());
    EXPECT_EQ(report.code, ErrorCode::NotSupported);
    EXPECT_EQ(report.message.rfind("$FLASHJIT_FAMILY: ", 0), 0u) << report.message;
  }
}

generator::KernelSpec specOf(int d, int dv = 0) {
  generator::KernelSpec spec;
  spec.headDim = d;
  spec.headDimV = dv ? dv : d;
  return spec;
}

// backwardFamilyFor, expected to succeed.
Family backwardOf(const FamilyPlan &plan, int d, int dv = 0) {
  auto family = tuner::backwardFamilyFor(plan, specOf(d, dv));
  EXPECT_TRUE(bool(family)) << d << "/" << dv << ": " << llvm::toString(family.takeError());
  return family ? *family : Family::FwdMma;
}

TEST(FamilyPlan, BackwardIsWgmmaOnHopperForTheHeadDimsItTakes) {
  for (const char *forced : {"", "auto", " Auto "}) {
    FamilyPlan plan = planOf("sm_90a", "", forced);
    EXPECT_EQ(plan.backward, Family::BwdWgmma) << forced;
    EXPECT_FALSE(plan.backwardForced) << forced;
    EXPECT_EQ(backwardOf(plan, 64), Family::BwdWgmma);
    EXPECT_EQ(backwardOf(plan, 128), Family::BwdWgmma);
    EXPECT_EQ(backwardOf(plan, 256), Family::BwdWgmma);
    // Multiples of 16 on padded panels (generator::bwdWgmmaPaddedHeadDim).
    for (int d : {32, 40, 72, 96, 192})
      EXPECT_EQ(backwardOf(plan, d), Family::BwdWgmma) << d;
    // head_dim and head_dim_v apart, each from 32.
    for (auto [d, dv] : {std::pair{128, 64}, std::pair{192, 128}, std::pair{40, 72}})
      EXPECT_EQ(backwardOf(plan, d, dv), Family::BwdWgmma) << d << "/" << dv;
    // The others run bwd_mma, which takes every head dim.
    for (auto [d, dv] : {std::pair{24, 24}, std::pair{16, 16}, std::pair{8, 8},
                         std::pair{128, 16}, std::pair{24, 128}})
      EXPECT_EQ(backwardOf(plan, d, dv), Family::BwdMma) << d << "/" << dv;
  }
  // The forward's override leaves the backward's choice alone.
  EXPECT_EQ(planOf("sm_90a", "fwd_mma").backward, Family::BwdWgmma);
}

// With attention features: bwd_wgmma takes the window, ALiBi and mask_mod; soft-capping
// goes to bwd_mma (an error when bwd_wgmma is forced).
TEST(FamilyPlan, BackwardWithFeatures) {
  FamilyPlan plan = planOf("sm_90a");
  generator::KernelSpec windowed = specOf(128);
  windowed.features.window = true, windowed.features.windowLeft = 256;
  windowed.features.windowRight = 0;
  windowed.features.alibi = true;
  auto family = tuner::backwardFamilyFor(plan, windowed);
  ASSERT_TRUE(bool(family)) << llvm::toString(family.takeError());
  EXPECT_EQ(*family, Family::BwdWgmma);
  generator::KernelSpec capped = windowed;
  capped.features.softcap = 30;
  family = tuner::backwardFamilyFor(plan, capped);
  ASSERT_TRUE(bool(family)) << llvm::toString(family.takeError());
  EXPECT_EQ(*family, Family::BwdMma);
  auto forced = tuner::backwardFamilyFor(planOf("sm_90a", "", "bwd_wgmma"), capped);
  ASSERT_FALSE(bool(forced));
  ErrorReport report = takeErrorReport(forced.takeError());
  EXPECT_EQ(report.code, ErrorCode::NotSupported);
  EXPECT_NE(report.message.find("does not take softcap"), std::string::npos) << report.message;
}

TEST(FamilyPlan, BackwardIsMmaElsewhere) {
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_120"}) {
    FamilyPlan plan = planOf(target);
    EXPECT_EQ(plan.backward, Family::BwdMma) << target;
    for (int d : {64, 128, 256})
      EXPECT_EQ(backwardOf(plan, d), Family::BwdMma) << target << " d" << d;
  }
}

TEST(FamilyPlan, ForcedBackwardFamilies) {
  FamilyPlan mma = planOf("sm_90a", "", "BWD_MMA");
  EXPECT_EQ(mma.backward, Family::BwdMma);
  EXPECT_TRUE(mma.backwardForced);
  EXPECT_FALSE(mma.forced) << "the forward's choice is its own";
  EXPECT_EQ(backwardOf(mma, 128), Family::BwdMma);

  FamilyPlan wgmma = planOf("sm_90a", "", "bwd_wgmma");
  EXPECT_EQ(wgmma.backward, Family::BwdWgmma);
  EXPECT_TRUE(wgmma.backwardForced);
  EXPECT_EQ(backwardOf(wgmma, 64), Family::BwdWgmma);
  EXPECT_EQ(backwardOf(wgmma, 256), Family::BwdWgmma);
  // Forced, a head dim it cannot take is an error, not a silent bwd_mma.
  EXPECT_EQ(backwardOf(wgmma, 192), Family::BwdWgmma);
  auto d24 = tuner::backwardFamilyFor(wgmma, specOf(24));
  ASSERT_FALSE(bool(d24));
  ErrorReport report = takeErrorReport(d24.takeError());
  EXPECT_EQ(report.code, ErrorCode::NotSupported);
  EXPECT_NE(report.message.find("$FLASHJIT_BACKWARD_FAMILY"), std::string::npos)
      << report.message;
  EXPECT_NE(report.message.find("24"), std::string::npos) << report.message;

  auto off = tuner::familyPlan("sm_80", "", "bwd_wgmma");
  ASSERT_FALSE(bool(off));
  ErrorReport offReport = takeErrorReport(off.takeError());
  EXPECT_EQ(offReport.code, ErrorCode::NotSupported);
  EXPECT_NE(offReport.message.find("'sm_80'"), std::string::npos) << offReport.message;
  EXPECT_NE(offReport.message.find("sm_90a"), std::string::npos) << offReport.message;

  // Not a backward family: a typo, or the forward's and decode's families.
  for (const char *bad : {"bwd_fast", "fwd_mma", "dec_mma"}) {
    auto plan = tuner::familyPlan("sm_90a", "", bad);
    ASSERT_FALSE(bool(plan)) << bad;
    ErrorReport r = takeErrorReport(plan.takeError());
    EXPECT_EQ(r.code, ErrorCode::InvalidValue) << bad;
    EXPECT_NE(r.message.find("auto, bwd_mma or bwd_wgmma"), std::string::npos) << r.message;
  }
}

TEST(FamilyPlan, ForwardOverrideRefusesOtherOperationsFamilies) {
  for (const char *bad : {"bwd_mma", "bwd_wgmma", "dec_mma"}) {
    ErrorReport r = failureOf("sm_90a", bad);
    EXPECT_EQ(r.code, ErrorCode::InvalidValue) << bad;
    EXPECT_NE(r.message.find("auto, fwd_mma or fwd_wgmma"), std::string::npos) << r.message;
  }
}

TEST(FamilyPlan, BackwardEnvironmentVariableOverrides) {
  {
    ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", "bwd_mma");
    auto plan = tuner::familyPlanFromEnv("sm_90a");
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->backward, Family::BwdMma);
    EXPECT_TRUE(plan->backwardForced);
    EXPECT_EQ(plan->primary, Family::FwdWgmma) << "the forward keeps its default";
  }
  for (const char *value : {"", "auto"}) {
    ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", value);
    auto plan = tuner::familyPlanFromEnv("sm_90a");
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->backward, Family::BwdWgmma) << "'" << value << "': the default";
    EXPECT_FALSE(plan->backwardForced);
  }
  {
    ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", "bwd_wgmma");
    auto plan = tuner::familyPlanFromEnv("sm_90a");
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->backward, Family::BwdWgmma);
    EXPECT_TRUE(plan->backwardForced);
    auto d24 = tuner::backwardFamilyFor(*plan, specOf(24));
    ASSERT_FALSE(bool(d24));
    ErrorReport report = takeErrorReport(d24.takeError());
    EXPECT_EQ(report.code, ErrorCode::NotSupported);
    EXPECT_NE(report.message.find("$FLASHJIT_BACKWARD_FAMILY"), std::string::npos);
  }
  {
    ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", "bwd_wgmma");
    auto plan = tuner::familyPlanFromEnv("sm_86");
    ASSERT_FALSE(bool(plan));
    ErrorReport report = takeErrorReport(plan.takeError());
    EXPECT_EQ(report.code, ErrorCode::NotSupported);
    EXPECT_EQ(report.message.rfind("$FLASHJIT_BACKWARD_FAMILY: ", 0), 0u) << report.message;
  }
  {
    ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", "fwd_wgmma");
    auto plan = tuner::familyPlanFromEnv("sm_90a");
    ASSERT_FALSE(bool(plan));
    ErrorReport report = takeErrorReport(plan.takeError());
    EXPECT_EQ(report.code, ErrorCode::InvalidValue);
    EXPECT_EQ(report.message.rfind("$FLASHJIT_BACKWARD_FAMILY: ", 0), 0u) << report.message;
  }
  {
    // Each variable's error names that variable.
    ScopedEnv forward("FLASHJIT_FAMILY", "bwd_wgmma");
    ScopedEnv backward("FLASHJIT_BACKWARD_FAMILY", "bwd_mma");
    auto plan = tuner::familyPlanFromEnv("sm_90a");
    ASSERT_FALSE(bool(plan));
    ErrorReport report = takeErrorReport(plan.takeError());
    EXPECT_EQ(report.message.rfind("$FLASHJIT_FAMILY: ", 0), 0u) << report.message;
  }
}

} // namespace
