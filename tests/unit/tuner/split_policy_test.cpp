// How decode splits a call that requests no count (tuner/decode_kernel.h, SplitPolicy):
// the heuristic's one wave, a tuned count kept for calls of its problem's size and
// scaled by CTAs for others, the 2-key-tile minimum, and explicit requests (no GPU).
#include "tuner/decode_kernel.h"

#include <gtest/gtest.h>

using namespace flashjit;
using tuner::SplitPolicy;

namespace {

// A decode step: `batch` sequences of `keys` keys, 1 query row, 32 query / 8 KV heads
// (4 packed rows: one row tile of 16).
FjDecodeParams step(int batch, int keys) {
  FjDecodeParams p{};
  p.batch = batch;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seqlen_q = 1;
  p.seqlen_k = keys;
  return p;
}

SplitPolicy policy() {
  SplitPolicy s;
  s.blockM = 16;
  s.blockN = 64;
  s.residentSlots = 132 * 4;
  return s;
}

} // namespace

TEST(SplitPolicy, TheHeuristicFillsOneWave) {
  SplitPolicy s = policy();
  EXPECT_EQ(s.ctas(step(2, 4096)), 16);
  EXPECT_EQ(s.plan(step(2, 4096)).numSplits, 32) << "528 slots / 16 CTAs = 33, cut at 64/2";
  EXPECT_EQ(s.plan(step(16, 4096)).numSplits, 4) << "528 / 128, rounded down";
  EXPECT_EQ(s.plan(step(64, 4096)).numSplits, 1);
  EXPECT_EQ(s.plan(step(1, 200)).numSplits, 2) << "4 key tiles: at least 2 a split";
}

TEST(SplitPolicy, ATunedCountKeepsItsProblemsCtasInFlight) {
  SplitPolicy s = policy();
  s.tunedSplits = 8;
  s.tunedCtas = s.ctas(step(16, 4096));  // the bucket's timing problem: 128 CTAs
  EXPECT_EQ(s.plan(step(16, 4096)).numSplits, 8) << "the tuned problem's size: its count";
  EXPECT_EQ(s.plan(step(16, 3000)).numSplits, 8) << "fewer keys, same CTAs";
  EXPECT_EQ(s.plan(step(9, 4096)).numSplits, 13) << "1024 / 72 = 14: 64 tiles as 13 of 5";
  EXPECT_EQ(s.plan(step(64, 4096)).numSplits, 2) << "a far bucket's call: 4x the CTAs";
  EXPECT_EQ(s.plan(step(512, 4096)).numSplits, 1);
  EXPECT_EQ(s.plan(step(16, 300)).numSplits, 3) << "5 key tiles: at least 2 a split";
  EXPECT_EQ(s.plan(step(16, 4096), 5).numSplits, 5) << "a request wins over the tuning";
  EXPECT_EQ(s.plan(step(16, 4096), 1000).numSplits, 64) << "capped at the key tiles";
}

TEST(SplitPolicy, NoSplitIsLeftEmptyAndNoneExceedsTheMost) {
  SplitPolicy s = policy();
  s.tunedSplits = tuner::kMaxDecodeSplits;
  s.tunedCtas = 1000;
  for (int keys : {1, 63, 64, 65, 1000, 4097, 1 << 20})
    for (int batch : {1, 3, 100}) {
      const tuner::DecodeSplits d = s.plan(step(batch, keys));
      const long long tiles = (keys + 63) / 64;
      EXPECT_GE(d.numSplits, 1);
      EXPECT_LE(d.numSplits, tuner::kMaxDecodeSplits);
      EXPECT_LT((long long)(d.numSplits - 1) * d.tilesPerSplit, tiles) << keys << " " << batch;
      EXPECT_GE((long long)d.numSplits * d.tilesPerSplit, tiles) << keys << " " << batch;
    }
}

// A window's left side (0.13): the splits share the key tiles of the rows' windows, at
// most window_left + seqlen_q keys and a tile for the unaligned start, never more than
// the cache's own; every such range is covered (tiles_per_split x splits).
TEST(SplitPolicy, AWindowSplitsItsOwnTilesAlone) {
  SplitPolicy s = policy();
  s.windowLeft = 4096;
  EXPECT_EQ(s.keyTiles(step(1, 65536)), (4096 + 1 + 64 + 63) / 64) << "66 tiles, not 1024";
  EXPECT_EQ(s.keyTiles(step(1, 1000)), 16) << "a cache shorter than the window: its own";
  FjDecodeParams speculative = step(1, 65536);
  speculative.seqlen_q = 16;
  EXPECT_EQ(s.keyTiles(speculative), (4096 + 16 + 64 + 63) / 64);
  for (int batch : {1, 4, 64}) {
    const FjDecodeParams p = step(batch, 65536);
    const tuner::DecodeSplits d = s.plan(p);
    EXPECT_GE((long long)d.tilesPerSplit * d.numSplits, s.keyTiles(p)) << batch;
    EXPECT_LE(d.numSplits, s.keyTiles(p)) << batch;
  }
  SplitPolicy whole = policy();
  EXPECT_GT(whole.plan(step(1, 65536)).tilesPerSplit, s.plan(step(1, 65536)).tilesPerSplit);
}
