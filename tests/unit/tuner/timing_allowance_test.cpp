// How long a tune's timing may take (no GPU): what the budget leaves, and the floor that
// a cold tune's compiling earns it, so that the binaries it paid for are screened.
#include "tuner/screening.h"

#include <gtest/gtest.h>

using flashjit::tuner::TimingPlan;
using flashjit::tuner::timingAllowance;

namespace {

TimingPlan plan(double budget, double spent, double build, double share = 0.25) {
  TimingPlan p;
  p.budgetSeconds = budget;
  p.spentSeconds = spent;
  p.buildSeconds = build;
  p.buildShare = share;
  return p;
}

TEST(TimingAllowance, TheBudgetsRestWhereBuildingLeftEnough) {
  EXPECT_DOUBLE_EQ(timingAllowance(plan(30, 4, 3.5)), 26);
  EXPECT_DOUBLE_EQ(timingAllowance(plan(3, 0.2, 0.1)), 2.8) << "a warm cache: the budget";
}

TEST(TimingAllowance, ACompileThatOverranTheBudgetEarnsAShareOfItself) {
  // The shipped fwd_wgmma d 64 rows of 0.11.0: 3 s budget, 5.3 s compiling, 0.7 s
  // checking; the old rule screened the first of 62 candidates only.
  EXPECT_DOUBLE_EQ(timingAllowance(plan(3, 6.2, 6.0)), 1.5);
  EXPECT_DOUBLE_EQ(timingAllowance(plan(3, 3.1, 3.0)), 0.75) << "the larger of the two";
}

TEST(TimingAllowance, ShareZeroIsTheBudgetAlone) {
  // Nothing left: only the first candidate is screened, and timed in full.
  EXPECT_DOUBLE_EQ(timingAllowance(plan(3, 6.2, 6.0, 0)), 0);
  EXPECT_DOUBLE_EQ(timingAllowance(plan(3, 6.2, 6.0, -1)), 0) << "a negative share counts as 0";
}

} // namespace
