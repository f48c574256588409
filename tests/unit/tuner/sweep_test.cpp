// Offline sweeps without a GPU: the cross product and its stable order, the kernel
// families per target, shards and per-device parts, resume from the cache, the progress line and the summary, and a
// --compile-only sweep that fills a cache which a second process then reads with zero
// compilations.
#include "tuner/sweep.h"
#include "tuner/sweep_report.h"

#include "generator/templates.h"
#include "support/error.h"
#include "subprocess.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

using namespace flashjit;
using tuner::Bucket;
using tuner::SweepConfig;
using tuner::SweepItem;
using tuner::SweepResult;

namespace {

SweepConfig smallConfig() {
  SweepConfig c;
  c.families = {generator::Family::FwdMma};
  c.headDims = {64, 128};
  c.dtypes = {generator::DType::BF16};
  c.causal = {false, true};
  c.seqlens = {1024, 8192};
  c.batchHeads = {32};
  return c;
}

std::unique_ptr<cache::Cache> openCache(const std::string &path) {
  cache::CacheOptions options;
  options.userPath = path;
  auto c = cache::Cache::open(options);
  EXPECT_TRUE(bool(c)) << llvm::toString(c.takeError());
  return std::move(*c);
}

TEST(Sweep, CrossProductInAStableSpecMajorOrder) {
  auto items = tuner::tuneItems(smallConfig(), "sm_90a");
  ASSERT_EQ(items.size(), 8u);
  EXPECT_EQ(items[0].label(), "fwd_mma.bf16.d64.dv64.nocausal.sm90a q1024.k1024.bh32");
  EXPECT_EQ(items[1].label(), "fwd_mma.bf16.d64.dv64.nocausal.sm90a q8192.k8192.bh32");
  EXPECT_EQ(items[2].label(), "fwd_mma.bf16.d64.dv64.causal.sm90a q1024.k1024.bh32");
  EXPECT_EQ(items[7].label(), "fwd_mma.bf16.d128.dv128.causal.sm90a q8192.k8192.bh32");
  // Sizes in one bucket and repeated values collapse.
  SweepConfig dup = smallConfig();
  dup.seqlens = {1000, 1024, 8192, 8192};
  dup.headDims = {64, 64, 128};
  EXPECT_EQ(tuner::tuneItems(dup, "sm_90a").size(), 8u);
  // Default sweep: 3 head dims x 2 dtypes x 2 causal x 3 lengths, for each family the C
  // API loads there (sm_90a: fwd_wgmma and its fwd_mma fallback).
  EXPECT_EQ(tuner::tuneItems(tuner::defaultSweep(), "sm_80").size(), 36u);
  EXPECT_EQ(tuner::tuneItems(tuner::defaultSweep(), "sm_90a").size(), 72u);
}

// --ladder-heads: the buckets a no-hint fj_kernel_get tunes, after the cross product's,
// shared ones once.
TEST(Sweep, LadderHeadsAddWhatANoHintGetTunes) {
  SweepConfig c = smallConfig();
  c.headDims = {64};
  c.causal = {false};
  c.ladderHeads = {16};
  auto items = tuner::tuneItems(c, "sm_90a");
  std::vector<std::string> buckets;
  for (const SweepItem &item : items)
    buckets.push_back(item.bucket->key());
  EXPECT_EQ(buckets, (std::vector<std::string>{
                         "q1024.k1024.bh32", "q8192.k8192.bh32", "q512.k512.bh512",
                         "q1024.k1024.bh256", "q2048.k2048.bh128", "q4096.k4096.bh64",
                         "q16384.k16384.bh16"}));  // q8192.bh32 is the cross product's
}

TEST(Sweep, AutoFamiliesAreWhatTheApiLoads) {
  SweepConfig c = smallConfig();
  c.families.clear();  // auto
  EXPECT_EQ(tuner::sweepFamilies(c, "sm_90a"),
            (std::vector<generator::Family>{generator::Family::FwdWgmma,
                                            generator::Family::FwdMma}));
  EXPECT_EQ(tuner::sweepFamilies(c, "sm_86"),
            std::vector<generator::Family>{generator::Family::FwdMma});
  auto items = tuner::tuneItems(c, "sm_90a");
  ASSERT_EQ(items.size(), 16u);
  // A spec's families adjacent, the API's primary first, each family's buckets together.
  EXPECT_EQ(items[0].label(), "fwd_wgmma.bf16.d64.dv64.nocausal.sm90a q1024.k1024.bh32");
  EXPECT_EQ(items[1].label(), "fwd_wgmma.bf16.d64.dv64.nocausal.sm90a q8192.k8192.bh32");
  EXPECT_EQ(items[2].label(), "fwd_mma.bf16.d64.dv64.nocausal.sm90a q1024.k1024.bh32");
  EXPECT_EQ(items[15].label(), "fwd_mma.bf16.d128.dv128.causal.sm90a q8192.k8192.bh32");
  EXPECT_EQ(tuner::tuneItems(c, "sm_80").size(), 8u);

  auto compile = tuner::compileItems(c, {"sm_80", "sm_90a"});
  ASSERT_EQ(compile.size(), 12u);  // 4 specs x (sm_80: fwd_mma; sm_90a: both)
  EXPECT_EQ(compile[0].label(), "fwd_mma.bf16.d64.dv64.nocausal.sm80");
  EXPECT_EQ(compile[1].label(), "fwd_wgmma.bf16.d64.dv64.nocausal.sm90a");
  EXPECT_EQ(compile[2].label(), "fwd_mma.bf16.d64.dv64.nocausal.sm90a");
  for (const SweepItem &item : compile)
    EXPECT_FALSE(bool(generator::validateSpec(item.spec))) << item.label();
}

TEST(Sweep, AnExplicitFamilySkipsTargetsItCannotRunOn) {
  SweepConfig c = smallConfig();
  c.families = {generator::Family::FwdWgmma};
  EXPECT_TRUE(tuner::sweepFamilies(c, "sm_80").empty());
  EXPECT_TRUE(tuner::tuneItems(c, "sm_80").empty());
  EXPECT_EQ(tuner::tuneItems(c, "sm_90a").size(), 8u);
  auto compile = tuner::compileItems(c, {"sm_80", "sm_90a", "sm_89"});
  ASSERT_EQ(compile.size(), 4u);
  for (const SweepItem &item : compile) {
    EXPECT_EQ(item.spec.family, generator::Family::FwdWgmma);
    EXPECT_EQ(item.spec.target, "sm_90a");
  }
  // Both named: each where it runs, in the order given.
  c.families = {generator::Family::FwdMma, generator::Family::FwdWgmma,
                generator::Family::FwdMma};
  EXPECT_EQ(tuner::sweepFamilies(c, "sm_90a"),
            (std::vector<generator::Family>{generator::Family::FwdMma,
                                            generator::Family::FwdWgmma}));
  EXPECT_EQ(tuner::sweepFamilies(c, "sm_80"),
            std::vector<generator::Family>{generator::Family::FwdMma});
}

TEST(Sweep, CompileItemsArePerSpecAndTarget) {
  auto items = tuner::compileItems(smallConfig(), {"sm_80", "sm_90a", "sm_80"});
  ASSERT_EQ(items.size(), 8u);
  for (const SweepItem &item : items)
    EXPECT_FALSE(item.bucket.has_value());
  EXPECT_EQ(items[0].label(), "fwd_mma.bf16.d64.dv64.nocausal.sm80");
  EXPECT_EQ(items[1].label(), "fwd_mma.bf16.d64.dv64.nocausal.sm90a");
  EXPECT_EQ(tuner::defaultCompileTargets(),
            (std::vector<std::string>{"sm_80", "sm_86", "sm_89", "sm_90a"}));
}

TEST(Sweep, ParsesCausalChoice) {
  EXPECT_EQ(*tuner::parseCausalChoice("both"), (std::vector<bool>{false, true}));
  EXPECT_EQ(*tuner::parseCausalChoice("yes"), (std::vector<bool>{true}));
  EXPECT_EQ(*tuner::parseCausalChoice("No"), (std::vector<bool>{false}));
  auto bad = tuner::parseCausalChoice("maybe");
  ASSERT_FALSE(bool(bad));
  llvm::consumeError(bad.takeError());
}

TEST(Sweep, ShardsAreDisjointAndCoverTheSweep) {
  auto items = tuner::tuneItems(tuner::defaultSweep(), "sm_90a");
  for (int n : {1, 3, 4, 7, 50}) {
    std::multiset<std::string> seen;
    for (int i = 0; i < n; ++i) {
      auto shard = tuner::parseShard(std::to_string(i) + "/" + std::to_string(n));
      ASSERT_TRUE(bool(shard));
      auto part = tuner::shardItems(items, *shard);
      EXPECT_LE(part.size(), (items.size() + n - 1) / n);
      for (const SweepItem &item : part)
        seen.insert(item.label());
    }
    EXPECT_EQ(seen.size(), items.size()) << n << " shards";
    for (const SweepItem &item : items)
      EXPECT_EQ(seen.count(item.label()), 1u) << item.label();
  }
  auto second = tuner::shardItems(items, *tuner::parseShard("1/4"));
  EXPECT_EQ(second[0].label(), items[1].label());
  EXPECT_EQ(second[1].label(), items[5].label()) << "i % N == I";
  for (const char *bad : {"4/4", "-1/4", "1/0", "a/b", "1", "1/2/3"}) {
    auto s = tuner::parseShard(bad);
    EXPECT_FALSE(bool(s)) << bad;
    llvm::consumeError(s.takeError());
  }
}

TEST(Sweep, DevicesGetRoundRobinParts) {
  auto items = tuner::tuneItems(smallConfig(), "sm_90a");
  auto parts = tuner::partitionItems(items, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].size(), 3u);
  EXPECT_EQ(parts[1].size(), 3u);
  EXPECT_EQ(parts[2].size(), 2u);
  EXPECT_EQ(parts[1][1].label(), items[4].label());
  EXPECT_EQ(tuner::partitionItems(items, 1)[0].size(), items.size());
}

TEST(Sweep, ResumeSkipsWhatTheCacheHas) {
  cache::CacheOptions options;
  options.userPath = "";
  auto cache = cache::Cache::open(options);
  ASSERT_TRUE(bool(cache));
  const std::string device = "NVIDIA_H200.sm90.132sm";
  auto items = tuner::tuneItems(smallConfig(), "sm_90a");
  for (const SweepItem &item : items) {
    auto done = tuner::itemDone(**cache, item, device);
    ASSERT_TRUE(bool(done));
    EXPECT_FALSE(*done);
  }
  // An interrupted sweep finished items 0 and 3 (rows need a binary key only).
  for (int i : {0, 3}) {
    cache::TuningRow row;
    row.key.spec = items[i].spec.key();
    row.key.bucket = items[i].bucket->key();
    row.key.deviceKey = device;
    row.key.generatorFingerprint = generator::familyFingerprint(items[i].spec.family);
    row.key.protocolVersion = tuner::kMeasurementProtocolVersion;
    row.config = "bm128.bn64.w8.s2";
    row.binaryKey = "0123";
    row.medianUs = 100 + i;
    row.tflops = 400;
    row.candidatesJson = row.clocksJson = "{}";
    ASSERT_FALSE(bool((*cache)->publish(nullptr, &row)));
  }
  std::vector<std::string> pending;
  for (const SweepItem &item : items) {
    auto done = tuner::itemDone(**cache, item, device);
    ASSERT_TRUE(bool(done));
    if (!*done)
      pending.push_back(item.label());
  }
  EXPECT_EQ(pending.size(), 6u);
  EXPECT_EQ(std::count(pending.begin(), pending.end(), items[0].label()), 0);
  EXPECT_EQ(std::count(pending.begin(), pending.end(), items[3].label()), 0);
  // Another device's rows do not count.
  auto other = tuner::itemDone(**cache, items[0], "NVIDIA_A100.sm80.108sm");
  ASSERT_TRUE(bool(other));
  EXPECT_FALSE(*other);

  auto gpu = tuner::lookupGpu("H200");
  ASSERT_TRUE(bool(gpu));
  auto cached = tuner::cachedResult(**cache, items[3], device, &*gpu);
  ASSERT_TRUE(bool(cached)) << llvm::toString(cached.takeError());
  EXPECT_EQ(cached->status, SweepResult::Cached);
  EXPECT_EQ(cached->tile, "bm128.bn64.w8.s2");
  EXPECT_DOUBLE_EQ(cached->us, 103);
  EXPECT_GT(cached->rooflineFraction, 0);
}

TEST(SweepReport, DurationsEtaAndTheProgressLine) {
  EXPECT_EQ(tuner::formatDuration(8.4), "8s");
  EXPECT_EQ(tuner::formatDuration(185), "3m05s");
  EXPECT_EQ(tuner::formatDuration(7620), "2h07m");
  EXPECT_EQ(tuner::formatDuration(-1), "?");
  EXPECT_LT(tuner::etaSeconds(0, 10, 5), 0);
  EXPECT_DOUBLE_EQ(tuner::etaSeconds(2, 10, 20), 80);
  EXPECT_DOUBLE_EQ(tuner::etaSeconds(10, 10, 20), 0);
  tuner::ProgressState s;
  s.done = 3;
  s.total = 24;
  s.elapsedSeconds = 30;
  s.current = "fwd_mma.bf16.d128.dv128.causal.sm90a q4096.k4096.bh32";
  s.best = "512.0 TFLOP/s (x)";
  std::string line = tuner::progressLine(s);
  EXPECT_NE(line.find("[  3/24  12%]"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 3m30s"), std::string::npos) << line;
  EXPECT_NE(line.find("now: fwd_mma.bf16.d128"), std::string::npos) << line;
  EXPECT_NE(line.find("best: 512.0 TFLOP/s"), std::string::npos) << line;
}

TEST(SweepReport, ProgressBarLinesAndSummaryTable) {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto items = tuner::tuneItems(smallConfig(), "sm_90a");
  tuner::ProgressBar bar(os, 2, /*interactive=*/false);
  SweepResult a;
  a.item = items[0];
  a.status = SweepResult::Tuned;
  a.tile = "bm128.bn64.w8.s2";
  a.us = 250;
  a.tflops = 300;
  a.rooflineFraction = 0.4;
  a.seconds = 6.5;
  a.compiled = 18;
  bar.started(a.item, 0);
  bar.finished(a);
  SweepResult b;
  b.item = items[1];
  b.message = "no candidate passed";
  bar.started(b.item, 0);
  bar.finished(b);
  bar.close();
  os.flush();
  EXPECT_NE(text.find("[  1/2  50%]"), std::string::npos) << text;
  EXPECT_NE(text.find("300.0 TFLOP/s"), std::string::npos) << text;
  EXPECT_NE(text.find("FAILED: no candidate passed"), std::string::npos) << text;
  EXPECT_NE(text.find("1 failed"), std::string::npos) << text;

  std::string table;
  llvm::raw_string_ostream ts(table);
  tuner::printSummary(ts, {a, b});
  ts.flush();
  for (const char *column : {"spec", "bucket", "winner", "us", "TFLOP/s", "%roofline",
                             "q1024.k1024.bh32", "250.0", "40.0%", "tuned", "FAILED"})
    EXPECT_NE(table.find(column), std::string::npos) << column << "\n" << table;
}

// ---- a compile-only sweep read by a second process ----

const char *kChildDbVariable = "FLASHJIT_TEST_COMPILE_ONLY_DB";

std::vector<SweepItem> compileOnlyItems() {
  SweepConfig c = smallConfig();
  c.headDims = {64};
  return tuner::compileItems(c, {"sm_80", "sm_90a"});
}

// Run only as the child of the test below (disabled otherwise): fills the DB.
TEST(CompileOnlyProcess, DISABLED_FillCache) {
  const char *path = std::getenv(kChildDbVariable);
  ASSERT_NE(path, nullptr);
  auto cache = openCache(path);
  auto items = compileOnlyItems();
  tuner::SweepOutcome outcome = tuner::runCompileSweep(*cache, items, 2, {});
  ASSERT_EQ(outcome.results.size(), items.size());
  for (const SweepResult &r : outcome.results)
    EXPECT_EQ(r.status, SweepResult::Compiled) << r.item.label() << ": " << r.message;
  EXPECT_EQ(outcome.counters.compilations, (int)items.size());
}

TEST(CompileOnlyProcess, SecondProcessReadsWithZeroCompilations) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("flashjit-sweep-test", dir));
  std::string db = (dir + "/deploy.sqlite").str();

  // Process 1: a build machine fills the cache.
  std::string error;
  int rc = flashjit::testing::runTestInChild("CompileOnlyProcess.DISABLED_FillCache",
                                             {std::string(kChildDbVariable) + "=" + db}, error);
  ASSERT_EQ(rc, 0) << "the filling process failed: " << error;

  // Process 2 (this one, which has compiled nothing): everything is there.
  auto cache = openCache(db);
  auto items = compileOnlyItems();
  for (const SweepItem &item : items) {
    auto done = tuner::itemDone(*cache, item, "");
    ASSERT_TRUE(bool(done)) << llvm::toString(done.takeError());
    EXPECT_TRUE(*done) << item.label();
  }
  tuner::SweepOutcome again = tuner::runCompileSweep(*cache, items, 2, {});
  EXPECT_EQ(again.counters.compilations, 0);
  for (const SweepResult &r : again.results)
    EXPECT_EQ(r.status, SweepResult::Cached) << r.item.label() << ": " << r.message;

  // A deployment in cached mode finds its fallback kernels without compiling.
  tuner::TunerOptions options;
  options.mode = tuner::TuneMode::Cached;
  options.deviceKey = "NVIDIA_A100-SXM4-80GB.sm80.108sm";
  tuner::Tuner t(nullptr, *cache, options);
  for (const SweepItem &item : items) {
    auto sel = t.heuristicDefault(item.spec);
    ASSERT_TRUE(bool(sel)) << llvm::toString(sel.takeError());
    EXPECT_EQ(sel->origin, tuner::Origin::UserCache);
  }
  EXPECT_EQ(t.counters().compilations, 0);
  cache.reset();
  llvm::sys::fs::remove_directories(dir);
}

} // namespace

// --backward with --family auto sweeps what fj_kernel_get loads for desc.backward: on
// sm_90a bwd_wgmma for the head dims it takes and bwd_mma for the others, elsewhere
// bwd_mma.
TEST(Sweep, AutoBackwardIsTheApisChoicePerHeadDim) {
  SweepConfig c = smallConfig();
  c.families.clear();  // auto
  c.backward = true;
  c.headDims = {64, 128, 256};
  c.causal = {false};
  c.seqlens = {1024};
  EXPECT_EQ(tuner::sweepFamilies(c, "sm_90a"),
            (std::vector<generator::Family>{generator::Family::FwdWgmma,
                                            generator::Family::FwdMma,
                                            generator::Family::BwdWgmma}));
  auto backwardLabels = [](const std::vector<SweepItem> &items) {
    std::vector<std::string> labels;
    for (const SweepItem &item : items)
      if (generator::operationOf(item.spec.family) == generator::Operation::Backward)
        labels.push_back(item.label());
    return labels;
  };
  EXPECT_EQ(backwardLabels(tuner::tuneItems(c, "sm_90a")),
            (std::vector<std::string>{"bwd_wgmma.bf16.d64.dv64.nocausal.sm90a q1024.k1024.bh32",
                                      "bwd_wgmma.bf16.d128.dv128.nocausal.sm90a q1024.k1024.bh32",
                                      "bwd_wgmma.bf16.d256.dv256.nocausal.sm90a q1024.k1024.bh32"}));
  EXPECT_EQ(backwardLabels(tuner::tuneItems(c, "sm_80")),
            (std::vector<std::string>{"bwd_mma.bf16.d64.dv64.nocausal.sm80 q1024.k1024.bh32",
                                      "bwd_mma.bf16.d128.dv128.nocausal.sm80 q1024.k1024.bh32",
                                      "bwd_mma.bf16.d256.dv256.nocausal.sm80 q1024.k1024.bh32"}));
  std::vector<std::string> leftOut;
  auto compile = tuner::compileItems(c, {"sm_80", "sm_90a"}, &leftOut);
  EXPECT_TRUE(leftOut.empty()) << llvm::join(leftOut, "\n");
  EXPECT_EQ(backwardLabels(compile),
            (std::vector<std::string>{"bwd_mma.bf16.d64.dv64.nocausal.sm80",
                                      "bwd_wgmma.bf16.d64.dv64.nocausal.sm90a",
                                      "bwd_mma.bf16.d128.dv128.nocausal.sm80",
                                      "bwd_wgmma.bf16.d128.dv128.nocausal.sm90a",
                                      "bwd_mma.bf16.d256.dv256.nocausal.sm80",
                                      "bwd_wgmma.bf16.d256.dv256.nocausal.sm90a"}));
}

// --family bwd_wgmma: only sm_90a, and only the head dims it takes; the others are left
// out and said so, not failed.
TEST(Sweep, AnExplicitBwdWgmmaLeavesOutHeadDimsItCannotTake) {
  SweepConfig c = smallConfig();
  c.families = {generator::Family::BwdWgmma};
  c.headDims = {64, 24, 128, 16};
  c.causal = {true};
  c.seqlens = {1024};
  EXPECT_TRUE(tuner::sweepFamilies(c, "sm_80").empty());
  std::vector<std::string> leftOut;
  auto compile = tuner::compileItems(c, {"sm_80", "sm_90a"}, &leftOut);
  std::vector<std::string> labels;
  for (const SweepItem &item : compile)
    labels.push_back(item.label());
  EXPECT_EQ(labels, (std::vector<std::string>{"bwd_wgmma.bf16.d64.dv64.causal.sm90a",
                                              "bwd_wgmma.bf16.d128.dv128.causal.sm90a"}));
  ASSERT_EQ(leftOut.size(), 2u) << llvm::join(leftOut, "\n");
  EXPECT_EQ(llvm::StringRef(leftOut[0]).split(':').first, "bwd_wgmma.bf16.d24.dv24.causal.sm90a");
  EXPECT_EQ(llvm::StringRef(leftOut[1]).split(':').first,
            "bwd_wgmma.bf16.d16.dv16.causal.sm90a");
  EXPECT_NE(leftOut[0].find("bwd_mma runs the others"), std::string::npos) << leftOut[0];
  std::vector<std::string> tuneLeftOut;
  EXPECT_EQ(tuner::tuneItems(c, "sm_90a", &tuneLeftOut).size(), 2u);
  EXPECT_EQ(tuneLeftOut.size(), 2u);
}

// The system cache's sweep includes the backward pass, which has no tile at d256 on
// sm_86 / sm_89 (256 bytes of shared memory short): those specs are left out and said
// so, instead of failing the sweep.
TEST(Sweep, CompileItemsLeaveOutSpecsWithNoFittingTile) {
  SweepConfig c;
  c.headDims = {64, 256};
  c.dtypes = {generator::DType::BF16};
  c.causal = {false};
  c.seqlens = {1024};
  c.batchHeads = {32};
  c.families = {generator::Family::BwdMma};
  std::vector<std::string> leftOut;
  auto items = tuner::compileItems(c, {"sm_80", "sm_86", "sm_89", "sm_90a"}, &leftOut);
  std::vector<std::string> labels;
  for (const SweepItem &item : items)
    labels.push_back(item.label());
  EXPECT_EQ(labels.size(), 6u) << llvm::join(labels, ", ");
  ASSERT_EQ(leftOut.size(), 2u);
  EXPECT_EQ(llvm::StringRef(leftOut[0]).split(':').first, "bwd_mma.bf16.d256.dv256.nocausal.sm86");
  EXPECT_EQ(llvm::StringRef(leftOut[1]).split(':').first, "bwd_mma.bf16.d256.dv256.nocausal.sm89");
  EXPECT_NE(leftOut[0].find("shared memory"), std::string::npos) << leftOut[0];
}

// --decode: the decode family after the others, at decode buckets (packed rows per KV
// head, KV lengths, sequence x KV head pairs), never at the forward's; FP8 gets the
// decode kernels of an FP8 cache (bf16 q and o), and its forward on sm_80 is left out,
// said so.
TEST(Sweep, DecodeSpecsGetDecodeBuckets) {
  SweepConfig c = smallConfig();
  c.families.clear();  // auto
  c.decode = true;
  c.headDims = {128};
  c.dtypes = {generator::DType::BF16, generator::DType::E4M3};
  c.causal = {false};
  c.seqlens = {1024};
  c.decodeQueryLens = {1};
  c.decodeHeads = {{32, 8}, {32, 32}, {8, 8}};
  c.decodeBatches = {1, 4};
  c.decodeKvLens = {1000, 4096};
  EXPECT_EQ(tuner::sweepFamilies(c, "sm_80"),
            (std::vector<generator::Family>{generator::Family::FwdMma,
                                            generator::Family::DecMma}));
  std::vector<std::string> leftOut;
  std::vector<std::string> decode;
  for (const SweepItem &item : tuner::tuneItems(c, "sm_80", &leftOut))
    if (item.spec.family == generator::Family::DecMma)
      decode.push_back(item.bucket->key());
  // 8/8 at batch 4 packs like 32/32 at batch 1: no bucket of its own there.
  const std::vector<std::string> buckets = {"q4.k1024.bh8",   "q4.k4096.bh8",  "q4.k1024.bh32",
                                            "q4.k4096.bh32",  "q1.k1024.bh32", "q1.k4096.bh32",
                                            "q1.k1024.bh128", "q1.k4096.bh128", "q1.k1024.bh8",
                                            "q1.k4096.bh8"};
  std::vector<std::string> both = buckets;  // bf16, then the FP8 cache
  both.insert(both.end(), buckets.begin(), buckets.end());
  EXPECT_EQ(decode, both);
  bool e4m3Said = false;
  for (const std::string &why : leftOut)
    e4m3Said |= llvm::StringRef(why).startswith("fwd_mma.e4m3");
  EXPECT_TRUE(e4m3Said) << llvm::join(leftOut, "\n");
  c.decode = false;
  for (const SweepItem &item : tuner::tuneItems(c, "sm_80"))
    EXPECT_NE(item.spec.family, generator::Family::DecMma) << item.label();
  c.families = {generator::Family::DecMma};  // --family dec_mma: decode alone
  for (const SweepItem &item : tuner::tuneItems(c, "sm_80"))
    EXPECT_EQ(item.spec.family, generator::Family::DecMma) << item.label();
}
