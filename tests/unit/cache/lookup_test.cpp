// Publishing and finding rows: round trips, persistence, lookup order, families.
#include "tests/unit/cache/open_cache.h"

#include "support/env.h"
#include "support/error.h"

#include <gtest/gtest.h>

#include <thread>

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::testing;

TEST(CacheLookup, InMemoryWhenPersistenceIsOff) {
  std::unique_ptr<Cache> cache = openCache("");
  ASSERT_TRUE(cache);
  EXPECT_FALSE(cache->persistent());
  EXPECT_EQ(cache->userPath(), "");
  BinaryRow b = makeBinary(1);
  TuningRow t = makeTuning(makeKey(1), b);
  publishOrFail(*cache, &b, &t);
  auto found = cache->findTuned(makeKey(1));
  ASSERT_TRUE(bool(found));
  ASSERT_TRUE(found->has_value());
  EXPECT_TRUE(sameTuning((*found)->tuning.row, t));
  ASSERT_TRUE((*found)->binary.has_value());
  EXPECT_TRUE(sameBinary((*found)->binary->row, b));
  EXPECT_EQ((*found)->binary->source, Source::User);
}

TEST(CacheLookup, RoundTripIsExactAndPersists) {
  TempDir dir;
  std::string path = dir.file("sub/dir/cache.sqlite"); // parents are created
  std::vector<BinaryRow> binaries;
  {
    std::unique_ptr<Cache> cache = openCache(path);
    ASSERT_TRUE(cache);
    EXPECT_TRUE(cache->persistent());
    EXPECT_EQ(cache->userPath(), path);
    for (int i = 0; i < 8; ++i) {
      binaries.push_back(makeBinary(i, i * 5000)); // 0 bytes up to several pages
      TuningRow t = makeTuning(makeKey(i), binaries[i]);
      publishOrFail(*cache, &binaries[i], &t);
    }
  }
  std::unique_ptr<Cache> cache = openCache(path);
  ASSERT_TRUE(cache);
  for (int i = 0; i < 8; ++i) {
    auto b = cache->findBinary(binaries[i].key);
    ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
    ASSERT_TRUE(b->has_value()) << i;
    EXPECT_TRUE(sameBinary((*b)->row, binaries[i])) << i;
    EXPECT_GT((*b)->row.createdAt, 0) << "filled by the cache";
    EXPECT_EQ((*b)->path, path);
    auto t = cache->findTuning(makeKey(i));
    ASSERT_TRUE(bool(t));
    ASSERT_TRUE(t->has_value());
    EXPECT_TRUE(sameTuning((*t)->row, makeTuning(makeKey(i), binaries[i])));
    EXPECT_EQ((*t)->row.flashjitVersion, flashjitVersion());
    EXPECT_GT((*t)->row.tunedAt, 0);
  }
  auto missing = cache->findBinary("0000");
  ASSERT_TRUE(bool(missing));
  EXPECT_FALSE(missing->has_value());

  RawDb raw(path);
  EXPECT_EQ(raw.one("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.one("PRAGMA user_version"), "2");
  EXPECT_EQ(raw.one("PRAGMA auto_vacuum"), "2"); // incremental
  EXPECT_EQ(raw.one("SELECT count(*) FROM tunings"), "8");
  EXPECT_NE(raw.one("SELECT key_text FROM tunings LIMIT 1").find("|gen=f00dfeed|protocol=1"),
            std::string::npos)
      << "readable key strings beside the hashes";
}

TEST(CacheLookup, SameKeyIsReplaced) {
  std::unique_ptr<Cache> cache = openCache("");
  BinaryRow a = makeBinary(1), b = makeBinary(2);
  TuningRow first = makeTuning(makeKey(1), a, 20.0, 1);
  TuningRow second = makeTuning(makeKey(1), b, 30.0, 2);
  publishOrFail(*cache, &a, &first);
  publishOrFail(*cache, &b, &second);
  auto found = cache->findTuned(makeKey(1));
  ASSERT_TRUE(bool(found) && found->has_value());
  EXPECT_EQ((*found)->tuning.row.config, second.config);
  EXPECT_EQ((*found)->binary->row.key, b.key);
  auto all = cache->allTunings();
  ASSERT_TRUE(bool(all));
  EXPECT_EQ(all->size(), 1u);
}

TEST(CacheLookup, UserFirstThenShippedInOrder) {
  TempDir dir;
  BinaryRow b = makeBinary(1);
  auto fill = [&](const std::string &path, int config, bool withBinary) {
    std::unique_ptr<Cache> cache = openCache(path);
    TuningRow t = makeTuning(makeKey(1), b, 10, config);
    publishOrFail(*cache, withBinary ? &b : nullptr, &t);
    TuningRow only = makeTuning(makeKey(2), b, 10, 100 + config); // a second key everywhere
    publishOrFail(*cache, nullptr, &only);
  };
  fill(dir.file("user.sqlite"), 1, false);
  fill(dir.file("shipA.sqlite"), 2, true);
  fill(dir.file("shipB.sqlite"), 3, true);
  std::unique_ptr<Cache> cache =
      openCache(dir.file("user.sqlite"), {dir.file("shipA.sqlite"), dir.file("shipB.sqlite")});
  auto t = cache->findTuned(makeKey(1));
  ASSERT_TRUE(bool(t) && t->has_value());
  EXPECT_EQ((*t)->tuning.source, Source::User);
  EXPECT_EQ((*t)->tuning.row.config, "bm128.bn64.w4.s1");
  ASSERT_TRUE((*t)->binary.has_value()) << "the binary is found in a later DB";
  EXPECT_EQ((*t)->binary->source, Source::Shipped);
  EXPECT_EQ((*t)->binary->path, dir.file("shipA.sqlite"));

  std::unique_ptr<Cache> shippedOnly =
      openCache("", {dir.file("shipB.sqlite"), dir.file("shipA.sqlite")});
  t = shippedOnly->findTuned(makeKey(1));
  ASSERT_TRUE(bool(t) && t->has_value());
  EXPECT_EQ((*t)->tuning.path, dir.file("shipB.sqlite"));
  EXPECT_EQ((*t)->tuning.row.config, "bm128.bn64.w4.s3");
  auto all = cache->allTunings();
  ASSERT_TRUE(bool(all));
  EXPECT_EQ(all->size(), 6u) << "ls shows every DB's rows";
}

TEST(CacheLookup, TuningsForEveryBucketUserFirstNoDuplicates) {
  TempDir dir;
  BinaryRow b = makeBinary(1);
  TuningKey family = makeKey(0);
  auto keyFor = [&](const char *bucket) {
    TuningKey k = family;
    k.bucket = bucket;
    return k;
  };
  {
    std::unique_ptr<Cache> shipped = openCache(dir.file("ship.sqlite"));
    for (const char *bucket : {"q128.k128.bh64", "q256.k256.bh64"}) {
      TuningRow t = makeTuning(keyFor(bucket), b, 10, 7);
      publishOrFail(*shipped, &b, &t);
    }
    TuningKey otherDevice = keyFor("q512.k512.bh64");
    otherDevice.deviceKey = "NVIDIA_A100.sm80.108sm";
    TuningRow t = makeTuning(otherDevice, b);
    publishOrFail(*shipped, &b, &t);
  }
  std::unique_ptr<Cache> cache = openCache(dir.file("user.sqlite"), {dir.file("ship.sqlite")});
  TuningRow mine = makeTuning(keyFor("q256.k256.bh64"), b, 9, 1);
  publishOrFail(*cache, &b, &mine);
  TuningKey query = family;
  query.bucket = "ignored";
  auto rows = cache->tuningsFor(query);
  ASSERT_TRUE(bool(rows));
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].source, Source::User);
  EXPECT_EQ((*rows)[0].row.key.bucket, "q256.k256.bh64");
  EXPECT_EQ((*rows)[0].row.config, "bm128.bn64.w4.s1");
  EXPECT_EQ((*rows)[1].source, Source::Shipped);
  EXPECT_EQ((*rows)[1].row.key.bucket, "q128.k128.bh64");
}

TEST(CacheLookup, BadArgumentsAreInvalidValue) {
  std::unique_ptr<Cache> cache = openCache("");
  auto codeOf = [](llvm::Error error) { return takeErrorReport(std::move(error)).code; };
  EXPECT_EQ(codeOf(cache->publish(nullptr, nullptr)), ErrorCode::InvalidValue);
  BinaryRow b = makeBinary(1);
  b.key.clear();
  EXPECT_EQ(codeOf(cache->publish(&b, nullptr)), ErrorCode::InvalidValue);
  b = makeBinary(1);
  b.compileMs = std::nan("");
  EXPECT_EQ(codeOf(cache->publish(&b, nullptr)), ErrorCode::InvalidValue);
  TuningKey k = makeKey(1);
  k.bucket = "a|b";
  TuningRow t = makeTuning(k, makeBinary(1));
  EXPECT_EQ(codeOf(cache->publish(nullptr, &t)), ErrorCode::InvalidValue);
  t = makeTuning(makeKey(1), makeBinary(1));
  t.config.clear();
  EXPECT_EQ(codeOf(cache->publish(nullptr, &t)), ErrorCode::InvalidValue);
  CacheOptions options;
  options.userPath = "";
  options.busyTimeoutMs = -1;
  EXPECT_EQ(codeOf(Cache::open(options).takeError()), ErrorCode::InvalidValue);
}

TEST(CacheLookup, ManyThreadsOneCache) {
  TempDir dir;
  for (std::string path : {dir.file("cache.sqlite"), std::string()}) {
    std::unique_ptr<Cache> cache = openCache(path);
    ASSERT_TRUE(cache);
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int thread = 0; thread < 6; ++thread)
      threads.emplace_back([&, thread] {
        for (int i = 0; i < 40; ++i) {
          int id = thread * 1000 + i;
          BinaryRow b = makeBinary(id, 700);
          TuningRow t = makeTuning(makeKey(id), b);
          if (cache->publish(&b, &t)) {
            ++failures;
            continue;
          }
          auto found = cache->findTuned(makeKey(id));
          if (!found || !found->has_value() || !(*found)->binary ||
              !sameBinary((*found)->binary->row, b))
            ++failures;
          if (!found)
            llvm::consumeError(found.takeError());
        }
      });
    for (std::thread &t : threads)
      t.join();
    EXPECT_EQ(failures.load(), 0) << (path.empty() ? "in memory" : path);
    auto all = cache->allTunings();
    ASSERT_TRUE(bool(all));
    EXPECT_EQ(all->size(), 240u);
  }
}
