// Shipping: export -> merge -> lookup, read-only deployment, version skew, verify.
#include "tests/unit/cache/open_cache.h"

#include "cache/ship.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;

namespace {

const char *kH200 = "NVIDIA_H200.sm90.132sm";
const char *kA100 = "NVIDIA_A100.sm80.108sm";

// A machine's cache: rows [first, first + count) for `device`, winners timed at `us`.
struct Machine {
  std::vector<BinaryRow> binaries;
  std::vector<TuningRow> tunings;
};
Machine tune(Cache &cache, const char *device, int first, int count, double us, int config) {
  Machine m;
  for (int i = first; i < first + count; ++i) {
    BinaryRow b = makeBinary(i * 10 + config, 2000 + i * 300);
    TuningRow t = makeTuning(makeKey(i, {}, device), b, us + i, config);
    EXPECT_FALSE(cache.publish(&b, &t));
    m.binaries.push_back(b);
    m.tunings.push_back(t);
  }
  return m;
}

} // namespace

TEST(CacheShip, ExportMergeLookupKeepsEveryWinnerByteForByte) {
  TempDir dir;
  std::unique_ptr<Cache> one = openCache(dir.file("one.sqlite"));
  std::unique_ptr<Cache> two = openCache(dir.file("two.sqlite"));
  // Keys 0..9 on both machines: machine two is faster on 5..9 with another config.
  Machine h200a = tune(*one, kH200, 0, 10, 20.0, 1);
  Machine h200b = tune(*two, kH200, 5, 10, 15.0, 2);
  Machine a100 = tune(*one, kA100, 0, 4, 30.0, 3); // not exported
  {
    llvm::Expected<ShipReport> report = exportDb(*one, {kH200}, dir.file("ship1.sqlite"));
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_EQ(report->tunings, 10);
    EXPECT_EQ(report->binaries, 10);
    report = exportDb(*two, {kH200}, dir.file("ship2.sqlite"));
    ASSERT_TRUE(bool(report));
  }
  llvm::Expected<ShipReport> merged =
      mergeDbs({dir.file("ship1.sqlite"), dir.file("ship2.sqlite")}, dir.file("all.sqlite"));
  ASSERT_TRUE(bool(merged)) << llvm::toString(merged.takeError());
  EXPECT_EQ(merged->tunings, 15);
  EXPECT_EQ(merged->conflicts.size(), 5u) << "keys 5..9 had two different winners";
  EXPECT_EQ(RawDb(dir.file("all.sqlite")).one("PRAGMA journal_mode"), "delete");

  std::unique_ptr<Cache> deployed = openCache("", {dir.file("all.sqlite")});
  auto expectWinner = [&](const TuningRow &t, const BinaryRow &b) {
    auto found = deployed->findTuned(t.key);
    ASSERT_TRUE(bool(found) && found->has_value()) << t.key.text();
    EXPECT_TRUE(sameTuning((*found)->tuning.row, t)) << t.key.text();
    ASSERT_TRUE((*found)->binary.has_value());
    EXPECT_TRUE(sameBinary((*found)->binary->row, b)) << t.key.text();
  };
  for (int i = 0; i < 5; ++i) // only machine one tuned these
    expectWinner(h200a.tunings[i], h200a.binaries[i]);
  for (int i = 0; i < 10; ++i) // machine two is faster on 5..9 and alone on 10..14
    expectWinner(h200b.tunings[i], h200b.binaries[i]);
  auto absent = deployed->findTuning(a100.tunings[0].key);
  ASSERT_TRUE(bool(absent));
  EXPECT_FALSE(absent->has_value()) << "export keeps only the device keys asked for";
  VerifyReport verified = verifyDb(dir.file("all.sqlite"));
  EXPECT_TRUE(verified.ok());
  EXPECT_EQ(verified.tunings, 15);
}

TEST(CacheShip, MergeTakesTheWinnersBinaryFromTheWinnersInput) {
  TempDir dir;
  BinaryRow slow = makeBinary(1), fast = makeBinary(1);
  fast.cubin = bytes(999, 1234); // same key, other bytes (a nondeterministic compiler)
  TuningRow slowRow = makeTuning(makeKey(1), slow, 50, 1);
  TuningRow fastRow = makeTuning(makeKey(1), fast, 10, 1);
  {
    std::unique_ptr<Cache> a = openCache(dir.file("a.sqlite"));
    ASSERT_FALSE(a->publish(&slow, &slowRow));
    std::unique_ptr<Cache> b = openCache(dir.file("b.sqlite"));
    ASSERT_FALSE(b->publish(&fast, &fastRow));
  }
  llvm::Expected<ShipReport> merged =
      mergeDbs({dir.file("a.sqlite"), dir.file("b.sqlite")}, dir.file("out.sqlite"));
  ASSERT_TRUE(bool(merged));
  EXPECT_EQ(merged->conflicts.size(), 1u) << "the binary bytes differ";
  std::unique_ptr<Cache> cache = openCache("", {dir.file("out.sqlite")});
  auto found = cache->findTuned(makeKey(1));
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_EQ((*found)->tuning.row.medianUs, 10);
  EXPECT_EQ((*found)->binary->row.cubin, fast.cubin);
}

TEST(CacheShip, MergeRejectsAnUnreadableInput) {
  TempDir dir;
  writeFile(dir.file("junk.sqlite"), "not a database at all, not even close.............");
  llvm::Expected<ShipReport> merged = mergeDbs({dir.file("junk.sqlite")}, dir.file("out.sqlite"));
  EXPECT_FALSE(bool(merged));
  llvm::consumeError(merged.takeError());
  EXPECT_FALSE(llvm::sys::fs::exists(dir.file("out.sqlite")));
}

TEST(CacheShip, ReadOnlyDeployServesLookupsAndLeavesNoFileBehind) {
  TempDir build, deploy;
  {
    std::unique_ptr<Cache> cache = openCache(build.file("cache.sqlite"));
    tune(*cache, kH200, 0, 6, 10.0, 1);
    ASSERT_TRUE(bool(exportDb(*cache, {kH200}, deploy.file("kernels.sqlite"))));
  }
  std::set<std::string> before = deploy.entries();
  ASSERT_EQ(before, std::set<std::string>{"kernels.sqlite"});
  ASSERT_EQ(chmod(deploy.path().c_str(), 0555), 0);
  ASSERT_EQ(chmod(deploy.file("kernels.sqlite").c_str(), 0444), 0);
  for (bool immutable : {false, true}) {
    Warnings warnings;
    std::unique_ptr<Cache> cache =
        openCache("", {deploy.file("kernels.sqlite")}, &warnings, immutable);
    ASSERT_TRUE(cache);
    for (int i = 0; i < 6; ++i) {
      auto found = cache->findTuned(makeKey(i, {}, kH200));
      ASSERT_TRUE(bool(found) && found->has_value()) << i;
      EXPECT_EQ((*found)->tuning.source, Source::Shipped);
      EXPECT_TRUE((*found)->binary.has_value());
      // Checked while the connection is open: no -wal, -shm or -journal appears.
      EXPECT_EQ(deploy.entries(), before);
    }
    EXPECT_EQ(warnings.size(), 0u);
    cache.reset();
    EXPECT_EQ(deploy.entries(), before);
  }
}

TEST(CacheShip, VersionSkewMissesEveryTime) {
  TempDir dir;
  Versions built;
  std::string path = dir.file("cache.sqlite");
  const int rows = 40;
  {
    std::unique_ptr<Cache> cache = openCache(path);
    for (int i = 0; i < rows; ++i) {
      BinaryRow b = makeBinary(i, 500, built);
      TuningRow t = makeTuning(makeKey(i, built), b);
      ASSERT_FALSE(cache->publish(&b, &t));
    }
  }
  Versions nvrtc = built, target = built, generator = built, protocol = built;
  nvrtc.nvrtc = "13.1";
  target.target = "sm_90";
  generator.fingerprint = "0ddba11";
  protocol.protocol = 2;
  std::unique_ptr<Cache> cache = openCache(path);
  int hitsSame = 0, hitsSkewed = 0;
  for (int i = 0; i < rows; ++i) {
    // The unchanged build hits, which shows the skewed lookups below could have hit.
    hitsSame += cache->findTuning(makeKey(i, built))->has_value();
    hitsSame += cache->findBinary(makeBinary(i, 500, built).key)->has_value();
    for (const Versions &skew : {nvrtc, target})
      hitsSkewed += cache->findBinary(makeBinary(i, 500, skew).key)->has_value();
    for (const Versions &skew : {generator, protocol, target})
      hitsSkewed += cache->findTuning(makeKey(i, skew))->has_value();
  }
  EXPECT_EQ(hitsSame, 2 * rows);
  EXPECT_EQ(hitsSkewed, 0);

  // Schema skew: the same file from a "newer build" is never read.
  cache.reset();
  RawDb(path).exec("PRAGMA user_version = 3");
  Warnings warnings;
  for (bool asShipped : {false, true}) {
    std::unique_ptr<Cache> newer =
        asShipped ? openCache("", {path}, &warnings) : openCache(path, {}, &warnings);
    int hits = 0;
    for (int i = 0; i < rows; ++i)
      hits += newer->findTuning(makeKey(i, built))->has_value();
    EXPECT_EQ(hits, 0) << (asShipped ? "shipped" : "user");
  }
}

TEST(CacheShip, VerifyFindsBadChecksumsAndDamage) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  {
    std::unique_ptr<Cache> cache = openCache(path);
    tune(*cache, kH200, 0, 4, 10.0, 1);
  }
  VerifyReport clean = verifyDb(path);
  EXPECT_TRUE(clean.ok());
  EXPECT_EQ(clean.schemaVersion, 2);
  EXPECT_EQ(clean.binaries, 4);
  EXPECT_EQ(clean.tunings, 4);
  RawDb(path).exec("UPDATE tunings SET config = 'bm1' WHERE rowid = 1");
  VerifyReport bad = verifyDb(path);
  EXPECT_FALSE(bad.ok());
  ASSERT_EQ(bad.problems.size(), 1u);
  EXPECT_NE(bad.problems[0].find("fails its checksum"), std::string::npos);
  writeFile(dir.file("junk"), bytes(3, 3000));
  EXPECT_FALSE(verifyDb(dir.file("junk")).ok());
  EXPECT_FALSE(verifyDb(dir.file("absent")).ok());
}

TEST(CacheShip, ClearEmptiesTheUserDb) {
  TempDir dir;
  std::unique_ptr<Cache> cache = openCache(dir.file("cache.sqlite"));
  tune(*cache, kH200, 0, 3, 10.0, 1);
  ASSERT_FALSE(cache->clear());
  auto all = cache->allTunings();
  ASSERT_TRUE(bool(all));
  EXPECT_TRUE(all->empty());
  EXPECT_FALSE(cache->findBinary(makeBinary(11).key)->has_value());
}
