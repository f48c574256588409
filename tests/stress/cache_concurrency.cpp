// Many processes x threads publishing to one user DB for a while. Passes when every
// acknowledged write is present and exact afterwards, no call failed (so no SQLITE_BUSY or
// "locked" reached a caller), and the DB passes integrity_check.
//   stress_cache_concurrency --processes 16 --threads 4 --seconds 20
#include "tests/stress/stress_common.h"

#include "llvm/Support/CommandLine.h"

#include <fstream>
#include <mutex>
#include <random>
#include <thread>

using namespace flashjit::cache;
using namespace flashjit::cache::stress;
namespace cl = llvm::cl;

static cl::opt<int> processes("processes", cl::desc("writer processes"), cl::init(16));
static cl::opt<int> threads("threads", cl::desc("writer threads per process"), cl::init(4));
static cl::opt<double> seconds("seconds", cl::desc("how long to write"), cl::init(20));
static cl::opt<int> maxBlob("max-blob", cl::desc("largest cubin in bytes"), cl::init(16384));
static cl::opt<std::string> dirOption("dir", cl::desc("where to put the DB (default: a temp dir)"));

// One writer process: `threads` threads publish (and re-read some of what they wrote)
// until the deadline, then the acknowledged ids go to acks-<process>.txt.
static int writer(const std::string &dir, int process) {
  std::unique_ptr<Cache> cache = openUser(dir + "/cache.sqlite");
  if (!cache)
    return 2;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  std::mutex mutex;
  std::vector<std::pair<int, int>> acked;
  std::atomic<int> errors{0}, busy{0}, reads{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937 random(process * 1000 + t);
      std::vector<char> done; // done[seq]: acknowledged
      for (int seq = 0; std::chrono::steady_clock::now() < deadline; ++seq) {
        done.push_back(0);
        Published p = rowFor(process, t, seq, maxBlob);
        if (llvm::Error error = cache->publish(&p.binary, &p.tuning)) {
          std::string text = llvm::toString(std::move(error));
          ++errors;
          if (llvm::StringRef(text).contains_insensitive("busy") ||
              llvm::StringRef(text).contains_insensitive("locked"))
            ++busy;
          llvm::errs() << "publish failed: " << text << "\n";
          continue;
        }
        done[seq] = 1;
        {
          std::lock_guard<std::mutex> lock(mutex);
          acked.emplace_back(t, seq);
        }
        if (seq % 3 == 0) { // read back an earlier acknowledged row of this thread
          int earlier = std::uniform_int_distribution<int>(0, seq)(random);
          std::string problem =
              done[earlier] ? check(*cache, rowFor(process, t, earlier, maxBlob)) : "";
          if (!problem.empty()) {
            ++errors;
            llvm::errs() << "read back: " << problem << "\n";
          }
          ++reads;
        }
      }
    });
  for (std::thread &thread : pool)
    thread.join();
  std::ofstream out(dir + "/acks-" + std::to_string(process) + ".txt");
  for (auto [t, seq] : acked)
    out << t << " " << seq << "\n";
  out.close();
  if (errors)
    llvm::errs() << "process " << process << ": " << errors << " errors (" << busy
                 << " busy/locked)\n";
  return errors || !out ? 1 : 0;
}

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "cache concurrency stress test\n");
  std::unique_ptr<testing::TempDir> temp;
  std::string dir = dirOption;
  if (dir.empty()) {
    temp = std::make_unique<testing::TempDir>();
    dir = temp->path();
  }
  Verdict verdict;
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids = spawn(processes, [&](int p) { return writer(dir, p); });
  int failedWriters = waitAll(pids);
  double elapsed = secondsSince(start);
  verdict.expect(failedWriters == 0,
                 std::to_string(failedWriters) + " writer processes reported errors");

  // Every acknowledged write, byte for byte.
  std::unique_ptr<Cache> cache = openUser(dir + "/cache.sqlite");
  verdict.expect(bool(cache), "cannot open the DB to verify");
  size_t total = 0;
  for (int p = 0; cache && p < processes; ++p) {
    std::ifstream in(dir + "/acks-" + std::to_string(p) + ".txt");
    verdict.expect(bool(in), "no acks from process " + std::to_string(p));
    int t, seq;
    while (in >> t >> seq) {
      ++total;
      std::string problem = check(*cache, rowFor(p, t, seq, maxBlob));
      verdict.expect(problem.empty(), problem);
    }
  }
  cache.reset();
  std::string check = integrity(dir + "/cache.sqlite");
  verdict.expect(check == "ok", "integrity_check: " + check);
  testing::RawDb raw(dir + "/cache.sqlite");
  llvm::outs() << llvm::formatv(
      "{0} processes x {1} threads for {2:f1} s: {3} acknowledged writes ({4:f0}/s), "
      "{5} rows in the DB, all verified\n",
      int(processes), int(threads), elapsed, total, total / elapsed,
      raw.one("SELECT count(*) FROM tunings"));
  verdict.expect(total > 0, "nothing was written");
  return verdict.exitCode("stress_cache_concurrency");
}
