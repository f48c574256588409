// Bounded growth: above maxUserBytes, least-recently-used unreferenced binaries go.
#include "tests/unit/cache/fixtures.h"

#include <gtest/gtest.h>

#include <thread>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;

TEST(CacheEvict, LeastRecentlyUsedUnreferencedBinariesGoFirst) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  const uint64_t limit = 400 * 1024;
  CacheOptions options;
  options.userPath = path;
  options.maxUserBytes = limit;
  auto opened = Cache::open(options);
  ASSERT_TRUE(bool(opened));
  Cache &cache = **opened;

  // Referenced binaries: never evicted, whatever their age.
  std::vector<BinaryRow> referenced;
  for (int i = 0; i < 3; ++i) {
    referenced.push_back(makeBinary(1000 + i, 30000));
    TuningRow t = makeTuning(makeKey(i), referenced.back());
    ASSERT_FALSE(cache.publish(&referenced.back(), &t));
  }
  auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(3)); };
  std::vector<BinaryRow> loose;
  for (int i = 0; i < 8; ++i) { // 8 x 20 KB: still under the limit
    pause();
    loose.push_back(makeBinary(2 * i, 20000)); // even: no PTX, 20 KB each
    ASSERT_FALSE(cache.publish(&loose.back(), nullptr));
  }
  RawDb raw(path);
  ASSERT_EQ(raw.one("SELECT count(*) FROM binaries"), "11") << "nothing evicted below the limit";

  for (int i = 8; i < 30; ++i) {
    pause();
    // The oldest loose binary is in use all along: it stays the most recently used.
    ASSERT_TRUE(cache.findBinary(loose[0].key)->has_value()) << i;
    pause();
    loose.push_back(makeBinary(2 * i, 20000));
    ASSERT_FALSE(cache.publish(&loose.back(), nullptr));
  }

  int64_t used =
      std::stoll(raw.one("PRAGMA page_count")) - std::stoll(raw.one("PRAGMA freelist_count"));
  EXPECT_LE(used * 4096, int64_t(limit)) << "the DB stays within its limit";
  for (const BinaryRow &b : referenced)
    EXPECT_TRUE(cache.findBinary(b.key)->has_value()) << "referenced binaries stay";
  EXPECT_TRUE(cache.findBinary(loose.back().key)->has_value()) << "the newest stays";
  EXPECT_TRUE(cache.findBinary(loose[0].key)->has_value()) << "recently used stays";
  EXPECT_FALSE(cache.findBinary(loose[1].key)->has_value()) << "least recently used goes";
  EXPECT_FALSE(cache.findBinary(loose[2].key)->has_value());
  // Among the loose binaries, the evicted ones are exactly the oldest ones.
  int firstKept = -1;
  for (int i = 1; i < 30; ++i) {
    bool kept = cache.findBinary(loose[i].key)->has_value();
    if (kept && firstKept < 0)
      firstKept = i;
    if (firstKept >= 0) {
      EXPECT_TRUE(kept) << "binary " << i << " evicted although binary " << firstKept
                        << " (older) was kept";
    }
  }
  EXPECT_GT(firstKept, 2);
}
