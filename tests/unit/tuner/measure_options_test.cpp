// The measurement protocol's arithmetic (no GPU): what an interleaved round of the full
// protocol takes, and what the full protocol costs for a kernel of a given time.
#include "tuner/measure.h"

#include <gtest/gtest.h>

using flashjit::tuner::MeasureOptions;

namespace {

TEST(MeasureOptions, FourRoundsShareTheFullProtocolsLaunches) {
  MeasureOptions full;
  MeasureOptions round = full.round(4);
  EXPECT_DOUBLE_EQ(round.targetMs, full.targetMs / 4);
  EXPECT_EQ(round.minRuns, 3) << "10 runs at least over 4 rounds: 3 each, rounded up";
  EXPECT_EQ(round.maxRuns, 50);
  EXPECT_EQ(round.warmupLaunches, 1);
  EXPECT_DOUBLE_EQ(round.warmupMs, 0);
  EXPECT_DOUBLE_EQ(full.round(0).targetMs, full.targetMs) << "at least one round";
}

TEST(MeasureOptions, CostCountsWarmUpAndClampedRuns) {
  MeasureOptions full;  // 20 ms warm-up, 100 ms of launches, 10 to 200 runs
  EXPECT_DOUBLE_EQ(full.costMs(1), 20 + 100);
  EXPECT_DOUBLE_EQ(full.costMs(0.1), 20 + 200 * 0.1) << "1000 runs clamp to 200";
  EXPECT_DOUBLE_EQ(full.costMs(20), 3 * 20 + 10 * 20) << "3 warm-up launches, 10 runs at least";
}

} // namespace
