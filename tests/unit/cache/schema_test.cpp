// Schema versions: migration of an older user DB, newer DBs skipped, foreign files.
#include "tests/unit/cache/open_cache.h"

#include "cache/rows.h"
#include "cache/schema.h"

#include <gtest/gtest.h>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;

namespace {

std::string quote(const std::string &text) { return "x'" + llvm::toHex(text) + "'"; }

// A DB of schema `version` holding one binary and the tuning row that points at it,
// written with plain SQL as an older build would have.
void fabricate(const std::string &path, int version, const BinaryRow &b, const TuningRow &t) {
  RawDb raw(path);
  ASSERT_EQ(raw.exec(schema::createStatementsForVersion(version)), "");
  ASSERT_EQ(
      raw.exec(llvm::formatv(
                   "INSERT INTO binaries VALUES('{0}', '{1}', '{2}', '{3}', {4}, {5}, {6}, {7}, "
                   "{8}, '{9}', {10}, {11})",
                   b.key, b.keyText, b.target, b.nvrtcVersion, b.registers, b.spillBytes,
                   b.sharedBytes, b.compileMs, b.createdAt, rows::checksum(b), quote(b.cubin),
                   quote(b.ptx))
                   .str()),
      "");
  ASSERT_EQ(
      raw.exec(
          llvm::formatv("INSERT INTO tunings VALUES('{0}', '{1}', '{2}', '{3}', '{4}', '{5}', {6}, "
                        "'{7}', '{8}', {9}, {10}, '{11}', '{12}', {13}, '{14}', '{15}')",
                        t.key.hash(), t.key.text(), t.key.spec, t.key.bucket, t.key.deviceKey,
                        t.key.generatorFingerprint, t.key.protocolVersion, t.config, t.binaryKey,
                        t.medianUs, t.tflops, t.candidatesJson, t.clocksJson, t.tunedAt,
                        t.flashjitVersion, rows::checksum(t))
              .str()),
      "");
}

struct Fixture {
  BinaryRow binary = makeBinary(3, 9000);
  TuningRow tuning = makeTuning(makeKey(3), binary);
  Fixture() {
    binary.createdAt = 1700000000;
    binary.compileMs = 250; // exactly printable, so the SQL literal is the same double
    tuning.medianUs = 42;
    tuning.tflops = 512;
    tuning.tunedAt = 1700000001;
    tuning.flashjitVersion = "0.0.9";
  }
};

} // namespace

TEST(CacheSchema, OlderUserDbIsMigratedWithItsRows) {
  TempDir dir;
  Fixture f;
  std::string path = dir.file("cache.sqlite");
  fabricate(path, 1, f.binary, f.tuning);
  {
    RawDb raw(path);
    ASSERT_EQ(raw.one("PRAGMA user_version"), "1");
    ASSERT_EQ(raw.one("SELECT count(*) FROM sqlite_schema WHERE name = 'binary_use'"), "0");
  }
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  ASSERT_TRUE(cache);
  EXPECT_TRUE(cache->persistent());
  auto found = cache->findTuned(f.tuning.key);
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_TRUE(sameTuning((*found)->tuning.row, f.tuning));
  ASSERT_TRUE((*found)->binary.has_value());
  EXPECT_TRUE(sameBinary((*found)->binary->row, f.binary));
  RawDb raw(path);
  EXPECT_EQ(raw.one("PRAGMA user_version"), std::to_string(schema::kCurrentVersion));
  EXPECT_EQ(raw.one("SELECT bytes FROM binary_use WHERE key = '" + f.binary.key + "'"),
            std::to_string(f.binary.cubin.size() + f.binary.ptx.size()));
  EXPECT_EQ(warnings.size(), 0u);
}

TEST(CacheSchema, OlderShippedDbIsReadAsIs) {
  TempDir dir;
  Fixture f;
  std::string path = dir.file("ship.sqlite");
  fabricate(path, 1, f.binary, f.tuning);
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache("", {path}, &warnings);
  auto found = cache->findTuned(f.tuning.key);
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_TRUE(sameBinary((*found)->binary->row, f.binary));
  EXPECT_EQ(RawDb(path).one("PRAGMA user_version"), "1") << "shipped DBs are never written";
}

TEST(CacheSchema, NewerUserDbIsSkippedAndLeftAlone) {
  TempDir dir;
  Fixture f;
  std::string path = dir.file("cache.sqlite");
  fabricate(path, schema::kCurrentVersion, f.binary, f.tuning);
  RawDb(path).exec("PRAGMA user_version = 99");
  std::string before = readFile(path);
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  ASSERT_TRUE(cache);
  EXPECT_TRUE(warnings.any("newer than this build")) << "a warning says why";
  EXPECT_FALSE(cache->persistent());
  std::vector<DatabaseInfo> dbs = cache->databases();
  ASSERT_EQ(dbs.size(), 2u);
  EXPECT_EQ(dbs[0].path, path);
  EXPECT_FALSE(dbs[0].usable);
  EXPECT_EQ(dbs[0].schemaVersion, 99);
  EXPECT_EQ(dbs[1].path, ":memory:");
  auto found = cache->findTuning(f.tuning.key);
  ASSERT_TRUE(bool(found));
  EXPECT_FALSE(found->has_value()) << "rows of a newer schema are not read";
  EXPECT_FALSE(cache->publish(&f.binary, &f.tuning)) << "works in memory";
  found = cache->findTuning(f.tuning.key);
  ASSERT_TRUE(bool(found) && found->has_value());
  cache.reset();
  EXPECT_EQ(readFile(path), before);
  EXPECT_FALSE(llvm::sys::fs::exists(path + ".corrupt")) << "not treated as corrupt";
  for (const std::string &entry : dir.entries())
    EXPECT_EQ(entry.find(".corrupt-"), std::string::npos) << entry;
}

TEST(CacheSchema, NewerShippedDbIsSkippedWithAWarning) {
  TempDir dir;
  Fixture f;
  std::string path = dir.file("ship.sqlite");
  fabricate(path, schema::kCurrentVersion, f.binary, f.tuning);
  RawDb(path).exec("PRAGMA user_version = 7");
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache("", {path}, &warnings);
  ASSERT_TRUE(cache);
  EXPECT_TRUE(warnings.any("newer than this build"));
  auto found = cache->findTuning(f.tuning.key);
  ASSERT_TRUE(bool(found));
  EXPECT_FALSE(found->has_value());
  std::vector<DatabaseInfo> dbs = cache->databases();
  ASSERT_EQ(dbs.size(), 2u);
  EXPECT_FALSE(dbs[1].usable);
  EXPECT_EQ(dbs[1].schemaVersion, 7);
  EXPECT_NE(cache->explainMiss(f.tuning.key).find("skipped"), std::string::npos);
}

TEST(CacheSchema, ForeignSqliteFileAtTheUserPathIsMovedAside) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  RawDb(path).exec("CREATE TABLE notes(text); INSERT INTO notes VALUES('mine')");
  std::string before = readFile(path);
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  ASSERT_TRUE(cache);
  EXPECT_TRUE(cache->persistent());
  EXPECT_TRUE(warnings.any("not a flashjit cache"));
  int asideCount = 0;
  for (const std::string &entry : dir.entries())
    if (llvm::StringRef(entry).startswith("cache.sqlite.corrupt-") &&
        !llvm::StringRef(entry).endswith("-wal") && !llvm::StringRef(entry).endswith("-shm")) {
      ++asideCount;
      EXPECT_EQ(readFile(dir.file(entry)), before) << "kept byte for byte";
    }
  EXPECT_EQ(asideCount, 1);
}
