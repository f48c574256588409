// The measurement protocol's arithmetic (no GPU): what an interleaved round of the full
// protocol takes, and what the full protocol costs for a kernel of a given time.
#include "generator/templates.h"
#include "tuner/measure.h"
#include "tuner/tuner.h"

#include <gtest/gtest.h>

using flashjit::tuner::MeasureOptions;
namespace generator = flashjit::generator;
namespace tuner = flashjit::tuner;

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

// A forward mask_mod is timed under its block mask (protocol 4); every other spec as
// before (3), so its rows stay current across the change and the mask_mod's do not.
TEST(MeasurementProtocol, OnlyForwardMaskModSpecsTakeTheBlockMaskProtocol) {
  generator::KernelSpec plain;
  plain.family = generator::Family::FwdWgmma;
  generator::KernelSpec masked = plain;
  masked.features.maskMod = "return kv_idx <= q_idx;";
  generator::KernelSpec backward = masked;
  backward.family = generator::Family::BwdWgmma;
  generator::KernelSpec scored = plain;
  scored.features.scoreMod = "return score;";
  EXPECT_EQ(tuner::measurementProtocol(plain), tuner::kMeasurementProtocolVersion);
  EXPECT_EQ(tuner::measurementProtocol(scored), tuner::kMeasurementProtocolVersion);
  EXPECT_EQ(tuner::measurementProtocol(backward), tuner::kMeasurementProtocolVersion)
      << "the backward is timed without a block mask";
  EXPECT_EQ(tuner::measurementProtocol(masked), tuner::kBlockMaskProtocolVersion);
  masked.family = generator::Family::FwdMma;
  EXPECT_EQ(tuner::measurementProtocol(masked), tuner::kBlockMaskProtocolVersion);
}

TEST(MeasurementProtocol, AMaskModRowTimedWithoutItsBlockMaskIsStale) {
  generator::KernelSpec masked;
  masked.family = generator::Family::FwdWgmma;
  masked.features.maskMod = "return kv_idx <= q_idx;";
  flashjit::cache::TuningKey key;
  key.generatorFingerprint = generator::familyFingerprint(masked.family);
  key.protocolVersion = tuner::kMeasurementProtocolVersion;
  std::optional<std::string> why = tuner::staleReason(masked, key);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("protocol 3, this build uses 4"), std::string::npos) << *why;
  key.protocolVersion = tuner::kBlockMaskProtocolVersion;
  EXPECT_FALSE(tuner::staleReason(masked, key).has_value());
  generator::KernelSpec plain = masked;
  plain.features.maskMod.clear();
  key.protocolVersion = tuner::kMeasurementProtocolVersion;
  EXPECT_FALSE(tuner::staleReason(plain, key).has_value())
      << "a plain row keeps its protocol";
}

} // namespace
