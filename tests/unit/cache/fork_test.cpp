// A connection is never carried across fork(): the child opens its own and both
// processes keep working on the same file.
#include "tests/unit/cache/fixtures.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;

namespace {

// Runs `child` in a forked process; its return value is the exit status.
int inChild(const std::function<int()> &child) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(child());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int childUses(Cache &cache, int id, int parentRow) {
  auto parentRows = cache.findTuned(makeKey(parentRow));
  if (!parentRows || !parentRows->has_value() || !(*parentRows)->binary)
    return 1;
  BinaryRow b = makeBinary(id);
  TuningRow t = makeTuning(makeKey(id), b);
  if (llvm::Error error = cache.publish(&b, &t)) {
    llvm::consumeError(std::move(error));
    return 2;
  }
  auto mine = cache.findTuned(makeKey(id));
  return mine && mine->has_value() && sameBinary((*mine)->binary->row, b) ? 0 : 3;
}

} // namespace

TEST(CacheFork, ChildAndParentBothKeepWorking) {
  TempDir dir;
  std::string path = dir.file("cache.sqlite");
  CacheOptions options;
  options.userPath = path;
  auto opened = Cache::open(options);
  ASSERT_TRUE(bool(opened));
  Cache &cache = **opened;
  BinaryRow b = makeBinary(1);
  TuningRow t = makeTuning(makeKey(1), b);
  ASSERT_FALSE(cache.publish(&b, &t));

  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(inChild([&] { return childUses(cache, 100 + round, 1); }), 0) << round;
    // The parent sees the child's row and still writes.
    auto childRow = cache.findTuned(makeKey(100 + round));
    ASSERT_TRUE(bool(childRow) && childRow->has_value());
    BinaryRow mine = makeBinary(200 + round);
    ASSERT_FALSE(cache.publish(&mine, nullptr));
  }
  // Children of children, several at once.
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = fork();
    if (pid == 0)
      _exit(inChild([&] { return childUses(cache, 300 + i, 100); }) ||
            childUses(cache, 400 + i, 1));
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(RawDb(path).one("SELECT count(*) FROM tunings"), "12");
  EXPECT_EQ(RawDb(path).one("PRAGMA integrity_check"), "ok");
}

TEST(CacheFork, InMemoryCacheStartsEmptyInTheChild) {
  CacheOptions options;
  options.userPath = "";
  auto opened = Cache::open(options);
  ASSERT_TRUE(bool(opened));
  Cache &cache = **opened;
  BinaryRow b = makeBinary(1);
  ASSERT_FALSE(cache.publish(&b, nullptr));
  int status = inChild([&] {
    auto found = cache.findBinary(b.key); // the parent's connection is not used
    if (!found || found->has_value())
      return 1;
    BinaryRow c = makeBinary(2);
    if (cache.publish(&c, nullptr))
      return 2;
    return cache.findBinary(c.key)->has_value() ? 0 : 3;
  });
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(cache.findBinary(b.key)->has_value()) << "the parent keeps its rows";
  EXPECT_FALSE(cache.findBinary(makeBinary(2).key)->has_value());
}
