// Damaged files and rows: a corrupt user DB is moved aside and rebuilt, a corrupt shipped
// DB is ignored, a row that fails its checksum is a miss (and is replaced).
#include "tests/unit/cache/open_cache.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;

namespace {

// A healthy DB with rows 0..count-1.
void fill(const std::string &path, int count) {
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  for (int i = 0; i < count; ++i) {
    BinaryRow b = makeBinary(i);
    TuningRow t = makeTuning(makeKey(i), b);
    ASSERT_FALSE(cache->publish(&b, &t));
  }
}

std::vector<std::string> movedAside(const TempDir &dir, llvm::StringRef name) {
  std::vector<std::string> found;
  for (const std::string &entry : dir.entries()) {
    llvm::StringRef e(entry);
    if (e.startswith((name + ".corrupt-").str()) && !e.endswith("-wal") && !e.endswith("-shm"))
      found.push_back(entry);
  }
  return found;
}

// The rebuilt DB works: publish, find, and the file is healthy.
void expectWorking(Cache &cache, const std::string &path) {
  EXPECT_TRUE(cache.persistent());
  BinaryRow b = makeBinary(77);
  TuningRow t = makeTuning(makeKey(77), b);
  llvm::Error error = cache.publish(&b, &t);
  ASSERT_FALSE(error) << llvm::toString(std::move(error));
  auto found = cache.findTuned(makeKey(77));
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_TRUE(sameBinary((*found)->binary->row, b));
  EXPECT_EQ(RawDb(path).one("PRAGMA integrity_check"), "ok");
}

} // namespace

TEST(CacheDamage, GarbageUserDbIsMovedAsideAndRebuilt) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  std::string garbage = bytes(5, 10000);
  writeFile(path, garbage);
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  ASSERT_TRUE(cache);
  std::vector<std::string> aside = movedAside(dir, "cache.sqlite");
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(readFile(dir.file(aside[0])), garbage);
  EXPECT_TRUE(warnings.any("moved aside"));
  expectWorking(*cache, path);
}

TEST(CacheDamage, DirectoryInPlaceOfTheUserDbIsMovedAside) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  ASSERT_FALSE(llvm::sys::fs::create_directory(path));
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  ASSERT_TRUE(cache);
  EXPECT_EQ(movedAside(dir, "cache.sqlite").size(), 1u);
  expectWorking(*cache, path);
}

TEST(CacheDamage, ZeroedHeaderFoundAtOpen) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  fill(path, 5);
  std::string data = readFile(path);
  std::fill(data.begin(), data.begin() + 100, '\0');
  writeFile(path, data);
  llvm::sys::fs::remove(path + "-wal");
  llvm::sys::fs::remove(path + "-shm");
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  ASSERT_TRUE(cache);
  EXPECT_EQ(movedAside(dir, "cache.sqlite").size(), 1u);
  auto found = cache->findTuning(makeKey(1));
  ASSERT_TRUE(bool(found));
  EXPECT_FALSE(found->has_value());
  expectWorking(*cache, path);
}

TEST(CacheDamage, CorruptPageFoundDuringALookupRebuildsAndTheCallGoesOn) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  fill(path, 30);
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  ASSERT_TRUE(cache);
  ASSERT_TRUE(movedAside(dir, "cache.sqlite").empty());
  // Damage every page but the first under the open cache: its next read fails.
  RawDb(path).exec("PRAGMA wal_checkpoint(TRUNCATE)");
  std::string data = readFile(path);
  for (size_t page = 4096; page < data.size(); page += 4096)
    std::fill(data.begin() + page, data.begin() + page + 64, '\xee');
  {
    FILE *f = fopen(path.c_str(), "r+b"); // in place: the open connection sees it
    ASSERT_TRUE(f);
    fwrite(data.data(), 1, data.size(), f);
    fclose(f);
  }
  for (int i = 0; i < 30; ++i) {
    auto found = cache->findTuned(makeKey(i));
    ASSERT_TRUE(bool(found)) << "the call goes on: " << llvm::toString(found.takeError());
    if (found->has_value()) { // a row read before the damage was noticed must be exact
      EXPECT_TRUE(sameTuning((*found)->tuning.row, makeTuning(makeKey(i), makeBinary(i))));
    }
  }
  EXPECT_EQ(movedAside(dir, "cache.sqlite").size(), 1u);
  expectWorking(*cache, path);
}

TEST(CacheDamage, CorruptShippedDbIsIgnoredWithAWarning) {
  TempDir dir;
  std::string good = dir.file("good.sqlite"), bad = dir.file("bad.sqlite");
  fill(good, 3);
  writeFile(bad, bytes(9, 5000));
  std::string notDb = dir.file("missing.sqlite");
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache("", {bad, notDb, dir.path(), good}, &warnings);
  ASSERT_TRUE(cache);
  EXPECT_TRUE(warnings.any("bad.sqlite"));
  EXPECT_TRUE(warnings.any("missing.sqlite"));
  auto found = cache->findTuned(makeKey(2));
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_EQ((*found)->tuning.path, good);
  EXPECT_EQ(readFile(bad).size(), 5000u) << "never written";
  std::vector<DatabaseInfo> dbs = cache->databases();
  ASSERT_EQ(dbs.size(), 5u);
  EXPECT_FALSE(dbs[1].usable);
  EXPECT_FALSE(dbs[2].usable);
  EXPECT_FALSE(dbs[3].usable);
  EXPECT_TRUE(dbs[4].usable);
}

TEST(CacheDamage, BlobFailingItsChecksumIsAMissAndIsReplaced) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  fill(path, 3);
  BinaryRow b = makeBinary(1);
  // One byte of the cubin changes, the checksum column does not: a flipped bit on disk.
  RawDb(path).exec("UPDATE binaries SET cubin = x'5a' || substr(cubin, 2) WHERE key = '" + b.key +
                   "'");
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  auto found = cache->findBinary(b.key);
  ASSERT_TRUE(bool(found));
  EXPECT_FALSE(found->has_value());
  EXPECT_TRUE(warnings.any("does not match its checksum"));
  auto tuned = cache->findTuned(makeKey(1));
  ASSERT_TRUE(bool(tuned) && tuned->has_value()) << "the tuning row itself is fine";
  EXPECT_FALSE((*tuned)->binary.has_value());
  EXPECT_EQ(RawDb(path).one("SELECT count(*) FROM binaries WHERE key = '" + b.key + "'"), "0")
      << "the bad row was removed";
  ASSERT_FALSE(cache->publish(&b, nullptr));
  found = cache->findBinary(b.key);
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_TRUE(sameBinary((*found)->row, b));
}

TEST(CacheDamage, AnyChangedFieldFailsTheChecksum) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  fill(path, 2);
  RawDb raw(path);
  raw.exec("UPDATE tunings SET median_us = median_us * 2");
  raw.exec("UPDATE binaries SET registers = registers + 1");
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache(path, {}, &warnings);
  for (int i = 0; i < 2; ++i) {
    auto t = cache->findTuning(makeKey(i));
    ASSERT_TRUE(bool(t));
    EXPECT_FALSE(t->has_value());
    auto b = cache->findBinary(makeBinary(i).key);
    ASSERT_TRUE(bool(b));
    EXPECT_FALSE(b->has_value());
  }
}

TEST(CacheDamage, BadRowInAShippedDbFallsThroughToTheNext) {
  TempDir dir;
  std::string first = dir.file("a.sqlite"), second = dir.file("b.sqlite");
  fill(first, 2);
  fill(second, 2);
  RawDb(first).exec("UPDATE binaries SET ptx = x'00'");
  for (const std::string &p : {first, second})
    RawDb(p).exec("PRAGMA journal_mode = DELETE");
  Warnings warnings;
  std::unique_ptr<Cache> cache = openCache("", {first, second}, &warnings);
  auto found = cache->findBinary(makeBinary(1).key);
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_EQ((*found)->path, second);
  EXPECT_TRUE(sameBinary((*found)->row, makeBinary(1)));
}

TEST(CacheDamage, TwoUsersOfADamagedDbMoveItAsideOnce) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  fill(path, 30);
  Warnings warnings;
  // Two caches: separate connections, as two processes would have.
  std::unique_ptr<Cache> first = openCache(path, {}, &warnings);
  std::unique_ptr<Cache> second = openCache(path, {}, &warnings);
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(second->findTuning(makeKey(3))->has_value());
  RawDb(path).exec("PRAGMA wal_checkpoint(TRUNCATE)");
  std::string data = readFile(path);
  for (size_t page = 4096; page < data.size(); page += 4096)
    std::fill(data.begin() + page, data.begin() + page + 64, '\xee');
  {
    FILE *f = fopen(path.c_str(), "r+b");
    ASSERT_TRUE(f);
    fwrite(data.data(), 1, data.size(), f);
    fclose(f);
  }
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(bool(first->findTuned(makeKey(i))));
  ASSERT_EQ(movedAside(dir, "cache.sqlite").size(), 1u);
  BinaryRow b = makeBinary(55);
  TuningRow t = makeTuning(makeKey(55), b);
  ASSERT_FALSE(first->publish(&b, &t)) << "the rebuilt DB takes writes";
  // The second cache still reads the old, damaged file: it must find its way to the new
  // one without moving that aside too.
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(bool(second->findTuned(makeKey(i))));
  auto found = second->findTuned(makeKey(55));
  ASSERT_TRUE(bool(found) && found->has_value()) << "the second cache sees the new DB";
  EXPECT_EQ(movedAside(dir, "cache.sqlite").size(), 1u) << "moved aside once";
  EXPECT_EQ(RawDb(path).one("PRAGMA integrity_check"), "ok");
}
