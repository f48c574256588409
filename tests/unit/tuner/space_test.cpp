// The candidate space and its pruning (no GPU): enumeration, fit, the register and
// roofline models, exhaustive mode, the test-only candidate list, and the model's
// heuristic choice; for fwd_mma and for fwd_wgmma.
#include "tuner/space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace flashjit;
using generator::DType;
using generator::KernelSpec;
using generator::TileConfig;
using tuner::Bucket;
using tuner::SpaceEntry;
using tuner::Verdict;

namespace {

KernelSpec spec(int d, bool causal = false, const char *target = "sm_90a") {
  KernelSpec s;
  s.dtype = DType::BF16;
  s.headDim = s.headDimV = d;
  s.causal = causal;
  s.target = target;
  return s;
}

KernelSpec wgmma(int d, bool causal = false) {
  KernelSpec s = spec(d, causal);
  s.family = generator::Family::FwdWgmma;
  return s;
}

tuner::DeviceModel h100() {
  auto m = tuner::deviceModelForPreset("H100");
  EXPECT_TRUE(bool(m)) << llvm::toString(m.takeError());
  return *m;
}

int count(const std::vector<SpaceEntry> &space, Verdict v) {
  return (int)std::count_if(space.begin(), space.end(),
                            [&](const SpaceEntry &e) { return e.verdict == v; });
}

const SpaceEntry *find(const std::vector<SpaceEntry> &space, const char *key) {
  for (const SpaceEntry &e : space)
    if (e.tile.key() == key)
      return &e;
  return nullptr;
}

void print(const std::vector<SpaceEntry> &space) {
  for (const SpaceEntry &e : space)
    std::printf("  %-18s %-15s %8.1f us  regs~%3d  %d/SM  %s\n", e.tile.key().c_str(),
                tuner::verdictName(e.verdict).str().c_str(), e.estimate.modelSeconds * 1e6,
                e.estimate.registers, e.estimate.blocksPerSM, e.reason.c_str());
}

TEST(Space, EnumeratesSixteenOrThirtyTwoRowsPerWarp) {
  std::vector<TileConfig> tiles = tuner::enumerateTiles(spec(128));
  // (64,4) (128,4) (128,8) (256,8) x 3 blockN x 2 stages.
  EXPECT_EQ(tiles.size(), 24u);
  std::set<std::string> keys;
  for (const TileConfig &t : tiles) {
    int rows = t.blockM / t.warps;
    EXPECT_TRUE(rows == 16 || rows == 32) << t.key();
    EXPECT_EQ(t.blockN % 16, 0);
    EXPECT_GE(t.stages, 2);
    keys.insert(t.key());
  }
  EXPECT_EQ(keys.size(), tiles.size()) << "duplicates";
  EXPECT_TRUE(keys.count("bm128.bn64.w8.s2"));
  EXPECT_TRUE(keys.count("bm64.bn32.w4.s3"));
  EXPECT_FALSE(keys.count("bm64.bn64.w8.s2")) << "8 rows per warp";
  EXPECT_FALSE(keys.count("bm256.bn64.w4.s2")) << "64 rows per warp";
}

TEST(Space, PrunesWhatCannotFitSharedMemory) {
  // d=256 on sm_86 (99 KB per block): big K/V stages cannot fit.
  auto space = tuner::buildSpace(spec(256, false, "sm_86"), Bucket::forShape(4096, 4096, 32),
                                 h100());
  const SpaceEntry *big = find(space, "bm256.bn128.w8.s3");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->verdict, Verdict::PrunedFit);
  EXPECT_NE(big->reason.find("shared memory"), std::string::npos) << big->reason;
  for (const SpaceEntry &e : space) {
    if (e.verdict != Verdict::PrunedFit) {
      EXPECT_LE(generator::sharedBytes(spec(256, false, "sm_86"), e.tile), 99 * 1024)
          << e.tile.key();
    }
  }
}

TEST(Space, PrunesTilesWhoseAccumulatorsSpill) {
  auto space = tuner::buildSpace(spec(128), Bucket::forShape(4096, 4096, 32), h100());
  print(space);
  // 32 rows per warp x (O: 128 cols + S: 128 keys) = 256 accumulator registers.
  const SpaceEntry *e = find(space, "bm128.bn128.w4.s2");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->verdict, Verdict::PrunedModel);
  EXPECT_NE(e->reason.find("spill"), std::string::npos) << e->reason;
  // 16 rows per warp at the same blockN fits.
  const SpaceEntry *ok = find(space, "bm128.bn128.w8.s2");
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->verdict, Verdict::Candidate) << ok->reason;
  EXPECT_GE(count(space, Verdict::Candidate), 10);
}

TEST(Space, CandidatesComeFirstInModelOrder) {
  auto space = tuner::buildSpace(spec(128, true), Bucket::forShape(2048, 2048, 16), h100());
  bool pruned = false;
  double last = 0;
  for (const SpaceEntry &e : space) {
    if (e.verdict != Verdict::Candidate) {
      pruned = true;
      continue;
    }
    EXPECT_FALSE(pruned) << e.tile.key() << " after a pruned tile";
    EXPECT_GE(e.estimate.modelSeconds, last) << e.tile.key();
    last = e.estimate.modelSeconds;
  }
}

TEST(Space, SmallBucketPrunesTilesThatLeaveTheGpuIdle) {
  // 256 queries x 4 heads: blockM 256 makes 4 CTAs for 132 SMs, blockM 64 makes 16.
  auto space = tuner::buildSpace(spec(64), Bucket::forShape(256, 256, 4), h100());
  print(space);
  const SpaceEntry *big = find(space, "bm256.bn64.w8.s2");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->verdict, Verdict::PrunedModel) << big->reason;
  EXPECT_NE(big->reason.find("cannot win"), std::string::npos);
  const SpaceEntry *small = find(space, "bm64.bn64.w4.s2");
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->verdict, Verdict::Candidate) << small->reason;
}

TEST(Space, ExhaustivePrunesOnlyWhatCannotFit) {
  Bucket b = Bucket::forShape(256, 256, 4);
  tuner::SpaceOptions exhaustive;
  exhaustive.pruneByModel = false;
  auto all = tuner::buildSpace(spec(128), b, h100(), exhaustive);
  auto pruned = tuner::buildSpace(spec(128), b, h100());
  EXPECT_EQ(count(all, Verdict::PrunedModel), 0);
  EXPECT_GT(count(pruned, Verdict::PrunedModel), 0);
  EXPECT_EQ(count(all, Verdict::PrunedFit), count(pruned, Verdict::PrunedFit));
  EXPECT_GT(count(all, Verdict::Candidate), count(pruned, Verdict::Candidate));
}

TEST(Space, CandidateListOverridesTheSpace) {
  tuner::SpaceOptions options;
  options.only = {{128, 64, 8, 2}, {64, 64, 4, 2}, {64, 64, 8, 2} /* 8 rows per warp */};
  auto space = tuner::buildSpace(spec(128), Bucket::forShape(1024, 1024, 32), h100(), options);
  ASSERT_EQ(space.size(), 3u);
  EXPECT_EQ(count(space, Verdict::Candidate), 2);
  EXPECT_EQ(find(space, "bm64.bn64.w8.s2")->verdict, Verdict::PrunedFit);
}

TEST(Space, HeuristicPrefersTheDefaultTileAmongModelTies) {
  KernelSpec s = spec(128);
  const Bucket bucket = Bucket::forShape(16384, 16384, 32);
  auto space = tuner::buildSpace(s, bucket, h100());
  const SpaceEntry *choice = tuner::heuristicChoice(space, s, bucket);
  ASSERT_NE(choice, nullptr);
  EXPECT_EQ(choice->verdict, Verdict::Candidate);
  EXPECT_LE(choice->estimate.modelSeconds, space.front().estimate.modelSeconds * 1.01);
  const SpaceEntry *preferred = find(space, generator::defaultTile(s).key().c_str());
  ASSERT_NE(preferred, nullptr);
  ASSERT_EQ(preferred->verdict, Verdict::Candidate);
  ASSERT_LE(preferred->estimate.modelSeconds, space.front().estimate.modelSeconds * 1.01)
      << "the default tile should tie with the best here";
  EXPECT_EQ(choice->tile, generator::defaultTile(s));
  EXPECT_FALSE(space.front().tile == generator::defaultTile(s)) << "the tie-break is not exercised";
  // Nothing to choose from: no choice.
  tuner::SpaceOptions none;
  none.only = {{64, 64, 8, 2}};
  EXPECT_EQ(tuner::heuristicChoice(tuner::buildSpace(s, Bucket{}, h100(), none), s, Bucket{}),
            nullptr);
}

TEST(Space, TheHeuristicChoiceIsTriedFirst) {
  // d = 64 fwd_wgmma: the model predicts one time for every tile, so its order is the
  // footprint tie-break (bm128.bn64 first); the default tile must lead instead.
  for (bool causal : {false, true}) {
    KernelSpec s = wgmma(64, causal);
    const Bucket bucket = Bucket::forShape(512, 512, 1024);
    auto space = tuner::buildSpace(s, bucket, h100());
    ASSERT_GE(count(space, Verdict::Candidate), 2);
    const generator::TileConfig choice = tuner::heuristicChoice(space, s, bucket)->tile;
    EXPECT_EQ(choice, generator::defaultTile(s));
    EXPECT_FALSE(space.front().tile == choice) << "the reordering is not exercised";
    std::vector<std::string> before;
    for (const SpaceEntry &e : space)
      if (!(e.tile == choice))
        before.push_back(e.tile.key());
    EXPECT_TRUE(tuner::leadWithHeuristicChoice(space, s, bucket));
    EXPECT_EQ(space.front().tile, choice);
    std::vector<std::string> after;
    for (size_t i = 1; i < space.size(); ++i)
      after.push_back(space[i].tile.key());
    EXPECT_EQ(after, before) << "the others keep their order";
  }
  // Nothing to choose from: nothing moves.
  tuner::SpaceOptions none;
  none.only = {{64, 64, 8, 2}};
  auto pruned = tuner::buildSpace(spec(128), Bucket{}, h100(), none);
  EXPECT_FALSE(tuner::leadWithHeuristicChoice(pruned, spec(128), Bucket{}));
}

TEST(Space, ModelCountsCausalWasteAndOccupancy) {
  tuner::DeviceModel gpu = h100();
  Bucket b = Bucket::forShape(1024, 1024, 32);
  auto small = tuner::estimateTile(spec(128, true), {64, 32, 4, 2}, b, gpu);
  auto large = tuner::estimateTile(spec(128, true), {128, 128, 8, 2}, b, gpu);
  EXPECT_GT(large.causalWaste, small.causalWaste);
  EXPECT_GT(small.causalWaste, 0);
  auto full = tuner::estimateTile(spec(128, false), {128, 64, 8, 2}, b, gpu);
  EXPECT_NEAR(full.causalWaste, 0, 1e-9) << "1024 is a multiple of the tiles";
  EXPECT_GE(full.blocksPerSM, 1);
  EXPECT_EQ(full.ctas, 8 * 32);
  EXPECT_GT(full.waveEfficiency, 0.9);
  EXPECT_LE(full.waveEfficiency, 1.0);
}

// ---- fwd_wgmma ------------------------------------------------------------------------

TEST(WgmmaSpace, EnumeratesWarpgroupTilesInAStableOrder) {
  std::vector<TileConfig> tiles = tuner::enumerateTiles(wgmma(128));
  // block_m {64, 128, 192} x 11 block_n x 2 stages.
  EXPECT_EQ(tiles.size(), 66u);
  std::set<std::string> keys;
  std::set<int> blockNs;
  for (const TileConfig &t : tiles) {
    EXPECT_TRUE(t.blockM == 64 || t.blockM == 128 || t.blockM == 192) << t.key();
    EXPECT_EQ(t.warps, 4 * (t.blockM / 64 + 1)) << t.key();
    EXPECT_EQ(t.blockN % 16, 0) << t.key();
    EXPECT_TRUE(t.stages == 2 || t.stages == 3) << t.key();
    blockNs.insert(t.blockN);
    keys.insert(t.key());
  }
  EXPECT_EQ(keys.size(), tiles.size()) << "duplicates";
  EXPECT_EQ(blockNs, (std::set<int>{64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256}));
  EXPECT_TRUE(keys.count("bm128.bn176.w12.s2"));  // FlashAttention-3's d128 tile
  EXPECT_TRUE(keys.count("bm192.bn128.w16.s2"));  // and its d64 one
  // Deterministic: the same list every time, and fwd_mma's space is untouched.
  EXPECT_EQ(tuner::enumerateTiles(wgmma(128)), tiles);
  EXPECT_EQ(tuner::enumerateTiles(wgmma(64)), tiles);
  EXPECT_EQ(tuner::enumerateTiles(spec(128)).size(), 24u);
}

TEST(WgmmaSpace, CandidatesAreValidTilesInModelOrder) {
  for (int d : {64, 96, 128, 192, 256})
    for (bool causal : {false, true}) {
      KernelSpec s = wgmma(d, causal);
      auto space = tuner::buildSpace(s, Bucket::forShape(4096, 4096, 32), h100());
      SCOPED_TRACE(s.key());
      EXPECT_EQ(space.size(), 66u);
      int candidates = count(space, Verdict::Candidate);
      EXPECT_GE(candidates, 2);
      bool pruned = false;
      double last = 0;
      for (const SpaceEntry &e : space) {
        if (e.verdict != Verdict::Candidate) {
          pruned = true;
          EXPECT_FALSE(e.reason.empty()) << e.tile.key();
          continue;
        }
        EXPECT_FALSE(pruned) << e.tile.key() << " after a pruned tile";
        llvm::Error valid = generator::validateTile(s, e.tile);
        EXPECT_FALSE(bool(valid)) << e.tile.key() << ": " << llvm::toString(std::move(valid));
        EXPECT_LE(e.estimate.sharedBytes, 227 * 1024) << e.tile.key();
        EXPECT_EQ(e.estimate.blocksPerSM, 1) << e.tile.key() << ": setmaxnreg takes the "
                                                                "register file";
        EXPECT_GE(e.estimate.modelSeconds, last) << e.tile.key();
        last = e.estimate.modelSeconds;
      }
      // Every tile validateTile accepts and the model keeps is a candidate: no fwd_mma
      // rule (rows per warp, 255 registers) prunes a warpgroup tile.
      for (const SpaceEntry &e : space) {
        if (e.verdict != Verdict::PrunedFit)
          continue;
        llvm::Error invalid = generator::validateTile(s, e.tile);
        EXPECT_TRUE(bool(invalid) || e.estimate.sharedBytes > h100().sharedPerBlock)
            << e.tile.key() << ": " << e.reason;
        llvm::consumeError(std::move(invalid));
      }
      // The same order every time (ties broken by footprint, then key).
      auto again = tuner::buildSpace(s, Bucket::forShape(4096, 4096, 32), h100());
      ASSERT_EQ(again.size(), space.size());
      for (size_t i = 0; i < space.size(); ++i)
        EXPECT_EQ(again[i].tile, space[i].tile) << i;
    }
}

TEST(WgmmaSpace, PrunesByTheRegisterBudgetAndSharedMemory) {
  auto space = tuner::buildSpace(wgmma(256), Bucket::forShape(4096, 4096, 32), h100());
  print(space);
  // 3 consumer warpgroups get 160 registers: S and O of d256 do not fit.
  const SpaceEntry *three = find(space, "bm192.bn64.w16.s2");
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(three->verdict, Verdict::PrunedFit);
  EXPECT_NE(three->reason.find("registers"), std::string::npos) << three->reason;
  // Two consumers at d256: Q plus three stages of 128-key K and V exceed 227 KB.
  const SpaceEntry *big = find(space, "bm128.bn128.w12.s3");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->verdict, Verdict::PrunedFit);
  EXPECT_NE(big->reason.find("shared memory"), std::string::npos) << big->reason;
  // FlashAttention-3's d256 tile stays.
  const SpaceEntry *fa3 = find(space, "bm128.bn80.w12.s2");
  ASSERT_NE(fa3, nullptr);
  EXPECT_EQ(fa3->verdict, Verdict::Candidate) << fa3->reason;
}

TEST(WgmmaSpace, ModelPrefersTwoConsumersAndWideKeyTiles) {
  tuner::DeviceModel gpu = h100();
  Bucket b = Bucket::forShape(8192, 8192, 32);
  KernelSpec s = wgmma(128);
  auto one = tuner::estimateTile(s, {64, 128, 8, 2}, b, gpu);
  auto two = tuner::estimateTile(s, {128, 128, 12, 2}, b, gpu);
  auto narrow = tuner::estimateTile(s, {128, 64, 12, 2}, b, gpu);
  EXPECT_LT(two.modelSeconds, one.modelSeconds) << "one consumer cannot hide its softmax";
  EXPECT_LT(two.modelSeconds, narrow.modelSeconds) << "a fixed cost per key tile";
  EXPECT_EQ(two.registers, 240);
  EXPECT_EQ(tuner::estimateTile(s, {192, 128, 16, 2}, b, gpu).registers, 160);
  EXPECT_EQ(two.accumulatorRegisters, 128 / 2 + 128 / 2);
  EXPECT_EQ(two.ctas, 8192 / 128 * 32);
  // A small bucket: 64-row tiles give the SMs more CTAs to share.
  Bucket small = Bucket::forShape(512, 512, 4);
  auto smallOne = tuner::estimateTile(s, {64, 128, 8, 2}, small, gpu);
  auto smallThree = tuner::estimateTile(s, {192, 128, 16, 2}, small, gpu);
  EXPECT_GT(smallOne.ctas, smallThree.ctas);
  EXPECT_LT(smallOne.modelSeconds, smallThree.modelSeconds);
}

TEST(WgmmaSpace, HeuristicChoiceIsAValidCandidate) {
  for (int d : {64, 128, 256}) {
    KernelSpec s = wgmma(d, true);
    const Bucket bucket = Bucket::forShape(16384, 16384, 32);
    auto space = tuner::buildSpace(s, bucket, h100());
    const SpaceEntry *choice = tuner::heuristicChoice(space, s, bucket);
    ASSERT_NE(choice, nullptr) << s.key();
    EXPECT_EQ(choice->verdict, Verdict::Candidate) << s.key();
    EXPECT_EQ(choice->tile.warps, 4 * (choice->tile.blockM / 64 + 1)) << s.key();
    EXPECT_EQ(choice->tile, tuner::preferredTile(s, bucket)) << s.key();
  }
}

// fwd_wgmma's default tile leads even where the model ranks another first: on an H200
// the model put bm128.bn256 first for d64 non-causal N = 512, 10 % slower than the
// default, and a cold 5 s tune screened that one tile only.
TEST(WgmmaSpace, TheDefaultTileLeadsOverTheModelsFirst) {
  KernelSpec s = wgmma(64, false);
  auto h200 = tuner::deviceModelForPreset("H200");
  ASSERT_TRUE(bool(h200)) << llvm::toString(h200.takeError());
  const Bucket bucket = Bucket::forShape(512, 512, 1024);
  auto space = tuner::buildSpace(s, bucket, *h200);
  ASSERT_FALSE(space.front().tile == generator::defaultTile(s))
      << "the model's first is the default here: the rule is not exercised";
  EXPECT_EQ(tuner::heuristicChoice(space, s, bucket)->tile, generator::defaultTile(s));
}

KernelSpec bwdWgmma(int d, bool causal = false) {
  KernelSpec s = spec(d, causal);
  s.family = generator::Family::BwdWgmma;
  return s;
}

TEST(BwdWgmmaSpace, EnumeratesTwoQueryStepsAndTwoDepths) {
  std::vector<TileConfig> tiles = tuner::enumerateTiles(bwdWgmma(128));
  // block_m {64, 128} x (128 keys, 12 warps) x stages {2, 3}.
  std::vector<std::string> keys;
  for (const TileConfig &t : tiles)
    keys.push_back(t.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"bm64.bn128.w12.s2", "bm64.bn128.w12.s3",
                                            "bm128.bn128.w12.s2", "bm128.bn128.w12.s3"}));
  EXPECT_EQ(tuner::enumerateTiles(bwdWgmma(64)), tiles);
  // Head dim 256: 64 keys a CTA, and one stage besides (the only one that fits).
  std::vector<std::string> split;
  for (const TileConfig &t : tuner::enumerateTiles(bwdWgmma(256)))
    split.push_back(t.key());
  EXPECT_EQ(split, (std::vector<std::string>{"bm64.bn64.w12.s1", "bm64.bn64.w12.s2",
                                             "bm64.bn64.w12.s3", "bm128.bn64.w12.s1",
                                             "bm128.bn64.w12.s2", "bm128.bn64.w12.s3"}));
  // bwd_mma's space is its own, untouched.
  KernelSpec mma = spec(128);
  mma.family = generator::Family::BwdMma;
  EXPECT_EQ(tuner::enumerateTiles(mma).size(), 16u);
}

TEST(BwdWgmmaSpace, EveryHeadDimItTakesHasValidCandidates) {
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      KernelSpec s = bwdWgmma(d, causal);
      SCOPED_TRACE(s.key());
      int valid = 0;
      for (const TileConfig &t : tuner::enumerateTiles(s)) {
        llvm::Error err = generator::validateTile(s, t);
        valid += !err;
        llvm::consumeError(std::move(err));
      }
      EXPECT_GE(valid, 1);
      const Bucket bucket = Bucket::forShape(4096, 4096, 32);
      auto space = tuner::buildSpace(s, bucket, h100());
      print(space);
      EXPECT_EQ(space.size(), d > 128 ? 6u : 4u);  // and one stage at 256
      EXPECT_GE(count(space, Verdict::Candidate), 1);
      for (const SpaceEntry &e : space)
        if (e.verdict == Verdict::Candidate) {
          llvm::Error err = generator::validateTile(s, e.tile);
          EXPECT_FALSE(bool(err)) << e.tile.key() << ": " << llvm::toString(std::move(err));
          EXPECT_GT(e.estimate.modelSeconds, 0) << e.tile.key();
        }
      const SpaceEntry *choice = tuner::heuristicChoice(space, s, bucket);
      ASSERT_NE(choice, nullptr);
      EXPECT_EQ(choice->tile, generator::defaultTile(s));
    }
}

// fwd_wgmma d <= 64: three consumers over 96 keys once the key walk is long (2k keys
// without causal, 4k with it), on grids that fill the GPU; the default elsewhere, and
// for FP8, features and larger head dims.
TEST(WgmmaSpace, LongKeyWalksAtHeadDim64PreferThreeConsumersOver96Keys) {
  auto h200 = tuner::deviceModelForPreset("H200");
  ASSERT_TRUE(bool(h200)) << llvm::toString(h200.takeError());
  const TileConfig long96{192, 96, 16, 2};
  auto choiceFor = [&](const KernelSpec &s, int n, int bh) {
    const Bucket bucket = Bucket::forShape(n, n, bh);
    auto space = tuner::buildSpace(s, bucket, *h200);
    const SpaceEntry *choice = tuner::heuristicChoice(space, s, bucket);
    EXPECT_NE(choice, nullptr) << s.key() << " " << bucket.key();
    return choice ? choice->tile : TileConfig{};
  };
  // The ladder's buckets (16k tokens a step, 32 heads).
  for (bool causal : {false, true})
    for (int n : {512, 1024, 2048, 4096, 8192, 16384}) {
      KernelSpec s = wgmma(64, causal);
      SCOPED_TRACE(s.key() + " N " + std::to_string(n));
      const bool longWalk = n >= (causal ? 4096 : 2048);
      EXPECT_EQ(choiceFor(s, n, 16384 / n * 32), longWalk ? long96 : generator::defaultTile(s));
      EXPECT_EQ(tuner::preferredTile(s, Bucket::forShape(n, n, 16384 / n * 32)),
                longWalk ? long96 : generator::defaultTile(s));
    }
  // One long sequence and head: 22 row tiles of 192 for 132 SMs; not the long-walk tile
  // (the model's own choice, here a smaller tile that makes more CTAs).
  EXPECT_FALSE(choiceFor(wgmma(64, false), 4096, 1) == long96);
  // Not for d 128, FP8 or a feature.
  EXPECT_EQ(choiceFor(wgmma(128, false), 8192, 64), generator::defaultTile(wgmma(128, false)));
  KernelSpec fp8 = wgmma(64, false);
  fp8.dtype = generator::DType::E4M3;
  EXPECT_EQ(tuner::preferredTile(fp8, Bucket::forShape(8192, 8192, 64)),
            generator::defaultTile(fp8));
  KernelSpec windowed = wgmma(64, true);
  windowed.features.window = true;
  windowed.features.windowLeft = 1024;
  windowed.features.windowRight = 0;
  EXPECT_EQ(tuner::preferredTile(windowed, Bucket::forShape(8192, 8192, 64)),
            generator::defaultTile(windowed));
}

} // namespace
