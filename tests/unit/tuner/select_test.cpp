// Choosing the winner: ties within the noise go to the smaller footprint, so the
// choice does not depend on which of two equal kernels happened to measure faster,
// nor on the order the candidates were timed in (no GPU).
#include "tuner/select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace flashjit;
using tuner::RankedCandidate;

namespace {

RankedCandidate cand(const char *tile, int shared, int regs, double us, double spread = 0) {
  RankedCandidate c;
  c.tile = *generator::TileConfig::parse(tile);
  c.sharedBytes = shared;
  c.registers = regs;
  c.medianUs = us;
  c.spread = spread;
  return c;
}

TEST(Select, ClearlyFasterWins) {
  std::vector<RankedCandidate> c = {cand("bm128.bn64.w8.s2", 98304, 214, 100.0),
                                    cand("bm64.bn64.w4.s2", 49152, 200, 95.0)};
  EXPECT_EQ(tuner::pickWinner(c), 1);
  c[1].medianUs = 110;
  EXPECT_EQ(tuner::pickWinner(c), 0) << "a smaller footprint does not beat a 10% gap";
}

TEST(Select, TiesWithinOnePercentGoToTheSmallerFootprint) {
  std::vector<RankedCandidate> c = {cand("bm128.bn64.w8.s2", 98304, 214, 100.0),
                                    cand("bm64.bn64.w4.s2", 49152, 228, 100.8),
                                    cand("bm128.bn32.w8.s2", 65536, 173, 103.0)};
  EXPECT_EQ(tuner::pickWinner(c), 1);
  auto ties = tuner::tiedWithFastest(c);
  EXPECT_EQ(ties, (std::vector<int>{0, 1}));
}

TEST(Select, FootprintOrderIsSharedThenRegistersThenKey) {
  std::vector<RankedCandidate> c = {cand("bm128.bn64.w8.s3", 49152, 200, 100.0),
                                    cand("bm128.bn64.w8.s2", 49152, 180, 100.0),
                                    cand("bm64.bn64.w4.s2", 49152, 180, 100.0)};
  EXPECT_EQ(tuner::pickWinner(c), 1) << "fewer registers; then 'bm128...' < 'bm64...'";
  c[2].registers = 170;
  EXPECT_EQ(tuner::pickWinner(c), 2);
}

TEST(Select, MeasuredSpreadWidensTheBandUpToTwoPercent) {
  std::vector<RankedCandidate> c = {cand("bm128.bn64.w8.s2", 98304, 214, 100.0, 0.018),
                                    cand("bm64.bn64.w4.s2", 49152, 200, 101.5)};
  EXPECT_EQ(tuner::pickWinner(c), 1) << "1.5% is inside a 1.8% spread";
  c[0].spread = 0.012;
  EXPECT_EQ(tuner::pickWinner(c), 0);
  c[0].spread = 0.5;  // very noisy: still no more than 2%
  c[1].medianUs = 102.5;
  EXPECT_EQ(tuner::pickWinner(c), 0);
  EXPECT_DOUBLE_EQ(tuner::tieTolerance(0), 0.01);
  EXPECT_DOUBLE_EQ(tuner::tieTolerance(0.015), 0.015);
  EXPECT_DOUBLE_EQ(tuner::tieTolerance(1.0), 0.02);
  EXPECT_DOUBLE_EQ(tuner::tieTolerance(NAN), 0.01);
}

TEST(Select, FinalistsAreTheScreenedNearTheFastestAndNeverNone) {
  std::vector<RankedCandidate> c = {cand("bm128.bn64.w8.s2", 1, 1, 109.0),
                                    cand("bm64.bn64.w4.s2", 1, 1, 100.0),
                                    cand("bm64.bn32.w4.s2", 1, 1, 111.0),
                                    cand("bm128.bn32.w8.s2", 1, 1, 103.0),
                                    cand("bm256.bn32.w8.s2", 1, 1, NAN)};
  EXPECT_EQ(tuner::finalists(c), (std::vector<int>{1, 3, 0}));
  EXPECT_EQ(tuner::finalists(c, 0.10, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(tuner::finalists(c, 0.001), (std::vector<int>{1})) << "the fastest always goes on";
  EXPECT_EQ(tuner::finalists(c, 0.10, 0), (std::vector<int>{1}));
  EXPECT_TRUE(tuner::finalists({cand("bm64.bn64.w4.s2", 1, 1, 0)}).empty());
}

TEST(Select, OrderOfCandidatesDoesNotMatter) {
  std::vector<RankedCandidate> c = {cand("bm128.bn64.w8.s2", 98304, 214, 100.0),
                                    cand("bm64.bn64.w4.s2", 49152, 228, 100.5),
                                    cand("bm64.bn32.w4.s2", 32768, 171, 100.7),
                                    cand("bm256.bn64.w8.s2", 131072, 255, 99.8)};
  std::string expected = c[tuner::pickWinner(c)].tile.key();
  EXPECT_EQ(expected, "bm64.bn32.w4.s2");
  std::sort(c.begin(), c.end(), [](auto &a, auto &b) { return a.tile.key() < b.tile.key(); });
  do {
    EXPECT_EQ(c[tuner::pickWinner(c)].tile.key(), expected);
  } while (std::next_permutation(c.begin(), c.end(), [](auto &a, auto &b) {
    return a.tile.key() < b.tile.key();
  }));
}

TEST(Select, IgnoresMissingTimes) {
  std::vector<RankedCandidate> none;
  EXPECT_EQ(tuner::pickWinner(none), -1);
  std::vector<RankedCandidate> c = {cand("bm64.bn32.w4.s2", 1, 1, 0),
                                    cand("bm64.bn64.w4.s2", 2, 2, NAN),
                                    cand("bm128.bn64.w8.s2", 3, 3, 50)};
  EXPECT_EQ(tuner::pickWinner(c), 2);
}

} // namespace

TEST(Select, TiedSplitCountsGoToTheHeuristicThenToFewerSplits) {
  // One decode tile timed at the heuristic's split count (0) and at fixed ones: the
  // same footprint, so the tie goes to the heuristic (it adapts to the bucket's other
  // shapes), else to the fewest splits (the least workspace).
  auto at = [](int splits, double us) {
    RankedCandidate c = cand("bm16.bn64.w4.s2", 20480, 168, us);
    c.splits = splits;
    return c;
  };
  std::vector<RankedCandidate> c = {at(8, 10.0), at(0, 10.05), at(4, 10.1)};
  EXPECT_EQ(tuner::pickWinner(c), 1);
  c = {at(8, 10.0), at(16, 10.05), at(4, 10.1)};
  EXPECT_EQ(tuner::pickWinner(c), 2);
  c = {at(8, 10.0), at(0, 12.0), at(4, 11.0)};
  EXPECT_EQ(tuner::pickWinner(c), 0) << "a clearly faster split count wins";
}
