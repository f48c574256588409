// Which kernel families serve a target (no GPU): fwd_wgmma with its fwd_mma fallback on
// sm_90a, fwd_mma alone elsewhere, $FLASHJIT_FAMILY overriding, and the refusal of a
// family the target cannot run.
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

FamilyPlan planOf(const char *target, const char *forced = "") {
  auto plan = tuner::familyPlan(target, forced);
  EXPECT_TRUE(bool(plan)) << target << " " << forced << ": " << llvm::toString(plan.takeError());
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

} // namespace
