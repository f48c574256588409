// The system layer: read-only DBs installed with flashjit, searched after the user DB and
// the application's shipped DBs; how they are found; and that a DB from another toolkit
// or generator gives misses, never its rows.
#include "tests/unit/cache/open_cache.h"
#include "tests/scoped_env.h"

#include "support/env.h"

#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace flashjit;
using namespace flashjit::cache;
using namespace flashjit::cache::testing;
using flashjit::testing::ScopedEnv;

namespace {


// A DB at `path` holding key 1's winner (config `config`) and its binary.
void fill(const std::string &path, int config, const Versions &v = {}) {
  std::unique_ptr<Cache> cache = openCache(path);
  ASSERT_TRUE(cache);
  BinaryRow b = makeBinary(1, 3000, v);
  TuningRow t = makeTuning(makeKey(1, v), b, 10, config);
  publishOrFail(*cache, &b, &t);
}

} // namespace

TEST(CacheSystem, SearchedAfterUserAndShipped) {
  TempDir dir;
  fill(dir.file("user.sqlite"), 1);
  fill(dir.file("ship.sqlite"), 2);
  fill(dir.file("system.sqlite"), 3);
  Versions v;
  BinaryRow b = makeBinary(1, 3000, v);

  auto winner = [&](std::unique_ptr<Cache> cache) -> std::pair<Source, std::string> {
    auto t = cache->findTuned(makeKey(1));
    if (!t || !t->has_value()) {
      ADD_FAILURE() << "no row";
      if (!t)
        llvm::consumeError(t.takeError());
      return {Source::User, ""};
    }
    EXPECT_TRUE((*t)->binary.has_value());
    return {(*t)->tuning.source, (*t)->tuning.row.config};
  };
  auto [s1, c1] = winner(openCache(dir.file("user.sqlite"), {dir.file("ship.sqlite")}, nullptr,
                                   false, {dir.file("system.sqlite")}));
  EXPECT_EQ(s1, Source::User);
  EXPECT_EQ(c1, "bm128.bn64.w4.s1");
  auto [s2, c2] = winner(openCache("", {dir.file("ship.sqlite")}, nullptr, false,
                                   {dir.file("system.sqlite")}));
  EXPECT_EQ(s2, Source::Shipped);
  EXPECT_EQ(c2, "bm128.bn64.w4.s2");
  auto [s3, c3] = winner(openCache("", {}, nullptr, false, {dir.file("system.sqlite")}));
  EXPECT_EQ(s3, Source::System);
  EXPECT_EQ(c3, "bm128.bn64.w4.s3");

  std::unique_ptr<Cache> cache = openCache("", {}, nullptr, false, {dir.file("system.sqlite")});
  auto binary = cache->findBinary(b.key);
  ASSERT_TRUE(bool(binary) && binary->has_value());
  EXPECT_EQ((*binary)->source, Source::System);
  EXPECT_TRUE(sameBinary((*binary)->row, b));
  std::vector<DatabaseInfo> dbs = cache->databases();
  ASSERT_EQ(dbs.size(), 2u);
  EXPECT_EQ(dbs.back().source, Source::System);
  EXPECT_TRUE(dbs.back().usable);
  EXPECT_EQ(sourceName(Source::System), "system");
}

TEST(CacheSystem, NeverWrittenNorCreated) {
  TempDir dir;
  fill(dir.file("system.sqlite"), 3);
  std::string before = readFile(dir.file("system.sqlite"));
  std::unique_ptr<Cache> cache = openCache("", {}, nullptr, false, {dir.file("system.sqlite")});
  BinaryRow b = makeBinary(2);
  TuningRow t = makeTuning(makeKey(2), b);
  publishOrFail(*cache, &b, &t); // goes to the (in-memory) user DB
  cache.reset();
  EXPECT_EQ(readFile(dir.file("system.sqlite")), before);

  Warnings warnings;
  std::unique_ptr<Cache> missing =
      openCache("", {}, &warnings, false, {dir.file("not-there.sqlite")});
  ASSERT_TRUE(missing);
  EXPECT_FALSE(llvm::sys::fs::exists(dir.file("not-there.sqlite")));
  EXPECT_FALSE(missing->databases().back().usable);
}

// A toolkit change alters every binary key and a new generator every tuning key: a
// system DB built before either answers with misses (and says why), not with its rows.
TEST(CacheSystem, ToolkitOrGeneratorSkewIsAMissNotALoad) {
  TempDir dir;
  Versions built; // NVRTC 13.0, generator f00dfeed
  fill(dir.file("system.sqlite"), 3, built);
  std::unique_ptr<Cache> cache = openCache("", {}, nullptr, false, {dir.file("system.sqlite")});

  Versions newToolkit = built;
  newToolkit.nvrtc = "13.1";
  BinaryRow wanted = makeBinary(1, 3000, newToolkit);
  auto binary = cache->findBinary(wanted.key);
  ASSERT_TRUE(bool(binary));
  EXPECT_FALSE(binary->has_value());
  EXPECT_NE(cache->explainBinaryMiss(wanted.keyText, wanted.target, "13.1").find("NVRTC version"),
            std::string::npos);

  Versions newGenerator = built;
  newGenerator.fingerprint = "0badc0de";
  auto tuned = cache->findTuned(makeKey(1, newGenerator));
  ASSERT_TRUE(bool(tuned));
  EXPECT_FALSE(tuned->has_value());
  EXPECT_NE(cache->explainMiss(makeKey(1, newGenerator)).find("generator fingerprint changed"),
            std::string::npos);
}

TEST(CacheSystem, FoundThroughTheEnvironmentOrBesideTheBinary) {
  {
    ScopedEnv env("FLASHJIT_SYSTEM_CACHE", "/a/one.sqlite::/b/two.sqlite");
    EXPECT_EQ(defaultSystemCachePaths(),
              (std::vector<std::string>{"/a/one.sqlite", "/b/two.sqlite"}));
  }
  {
    ScopedEnv env("FLASHJIT_SYSTEM_CACHE", "");
    EXPECT_TRUE(defaultSystemCachePaths().empty()) << "set and empty: no system DB";
  }
  ScopedEnv env("FLASHJIT_SYSTEM_CACHE", nullptr);
  std::vector<std::string> candidates = installedSystemCachePaths();
  ASSERT_EQ(candidates.size(), 2u);
  for (const std::string &path : candidates) {
    EXPECT_TRUE(llvm::sys::path::is_absolute(path)) << path;
    EXPECT_TRUE(llvm::StringRef(path).endswith("/share/flashjit/system.sqlite")) << path;
  }
  // This test binary is <build>/bin/unit_cache: <build>/share/... first. Whatever is
  // found is one of the candidates, and exists.
  std::vector<std::string> found = defaultSystemCachePaths();
  EXPECT_LE(found.size(), 1u);
  for (const std::string &path : found) {
    EXPECT_TRUE(llvm::is_contained(candidates, path)) << path;
    EXPECT_TRUE(llvm::sys::fs::is_regular_file(path)) << path;
  }
}
