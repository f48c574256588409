// Many processes publishing the same tuning key at the same instant. Passes when the DB
// ends with exactly one row for the key, every process read back a consistent pair (the
// row's winner and the binary it points at belong to the same publisher), and the file
// passes integrity_check. Odd rounds publish one identical binary from every process (a
// deterministic compiler); even rounds a different binary per process. Round 0 also races
// the creation of the DB itself.
//   stress_cache_same_key --processes 32 --rounds 6
#include "tests/stress/stress_common.h"

#include "llvm/Support/CommandLine.h"

using namespace flashjit::cache;
using namespace flashjit::cache::stress;
namespace cl = llvm::cl;

static cl::opt<int> processes("processes", cl::desc("publishing processes"), cl::init(32));
static cl::opt<int> rounds("rounds", cl::desc("rounds (one key each)"), cl::init(6));

// What process `p` publishes in `round`: the tuning key is the same for all processes.
static Published candidate(int round, int p) {
  bool identical = round % 2 == 1;
  Published row = rowFor(1000 + round, 0, identical ? 0 : p);
  row.tuning.key = rowFor(1000 + round, 0, 0).tuning.key;
  row.tuning.config = "winner-of-" + std::to_string(identical ? 0 : p);
  return row;
}

// Which publisher a (row, binary) pair comes from, or -1 when they do not match.
static int publisherOf(int round, const TuningRow &row, const BinaryRow &binary) {
  for (int p = 0; p < processes; ++p) {
    Published c = candidate(round, p);
    if (testing::sameTuning(row, c.tuning) && testing::sameBinary(binary, c.binary))
      return p;
  }
  return -1;
}

static int publisher(const std::string &path, int round, int p, int startFd) {
  char go;
  if (read(startFd, &go, 1) < 0) // blocks until the parent closes the pipe: all start at once
    return 2;
  std::unique_ptr<Cache> cache = openUser(path);
  if (!cache)
    return 3;
  Published mine = candidate(round, p);
  if (llvm::Error error = cache->publish(&mine.binary, &mine.tuning)) {
    llvm::errs() << "publish: " << llvm::toString(std::move(error)) << "\n";
    return 4;
  }
  auto found = cache->findTuned(mine.tuning.key);
  if (!found || !found->has_value() || !(*found)->binary) {
    llvm::errs() << "process " << p << ": no consistent row after publishing\n";
    return 5;
  }
  if (publisherOf(round, (*found)->tuning.row, (*found)->binary->row) < 0) {
    llvm::errs() << "process " << p << ": row and binary from different publishers\n";
    return 6;
  }
  return 0;
}

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "cache same-key stress test\n");
  testing::TempDir dir;
  std::string path = dir.file("cache.sqlite");
  Verdict verdict;
  for (int round = 0; round < rounds; ++round) {
    int start[2];
    if (pipe(start) != 0)
      return 2;
    std::vector<pid_t> pids = spawn(processes, [&](int p) {
      close(start[1]);
      return publisher(path, round, p, start[0]);
    });
    close(start[0]);
    close(start[1]); // go
    int failed = waitAll(pids);
    verdict.expect(failed == 0, llvm::formatv("round {0}: {1} processes failed", round, failed));

    TuningKey key = candidate(round, 0).tuning.key;
    testing::RawDb raw(path);
    verdict.expect(raw.one("SELECT count(*) FROM tunings WHERE key = '" + key.hash() + "'") == "1",
                   llvm::formatv("round {0}: not exactly one row for the key", round));
    if (round % 2 == 1)
      verdict.expect(raw.one("SELECT count(*) FROM binaries WHERE key = '" +
                             candidate(round, 0).binary.key + "'") == "1",
                     llvm::formatv("round {0}: not exactly one binary", round));
    std::unique_ptr<Cache> cache = openUser(path);
    auto found = cache ? cache->findTuned(key) : llvm::Expected<std::optional<Tuned>>(std::nullopt);
    bool consistent = found && found->has_value() && (*found)->binary &&
                      publisherOf(round, (*found)->tuning.row, (*found)->binary->row) >= 0;
    verdict.expect(consistent, llvm::formatv("round {0}: final row inconsistent", round));
    if (!found)
      llvm::consumeError(found.takeError());
    else if (consistent)
      llvm::outs() << llvm::formatv(
          "round {0}: {1} processes, one row, won by process {2}\n", round, int(processes),
          publisherOf(round, (*found)->tuning.row, (*found)->binary->row));
  }
  std::string check = integrity(path);
  verdict.expect(check == "ok", "integrity_check: " + check);
  return verdict.exitCode("stress_cache_same_key");
}
