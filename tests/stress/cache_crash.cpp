// Writers killed with SIGKILL at random points (while opening, creating the schema,
// writing, checkpointing), round after round on one DB. Passes when after every round the
// DB passes quick_check and every acknowledged row is there, byte for byte.
// A writer acknowledges a row by appending its id to a file once publish() has returned.
//   stress_cache_crash --rounds 100 --writers 4 --max-delay-ms 80
#include "tests/stress/stress_common.h"

#include "llvm/Support/CommandLine.h"

#include <fstream>
#include <random>
#include <thread>

using namespace flashjit::cache;
using namespace flashjit::cache::stress;
namespace cl = llvm::cl;

static cl::opt<int> rounds("rounds", cl::desc("kill rounds"), cl::init(100));
static cl::opt<int> writers("writers", cl::desc("writer processes per round"), cl::init(4));
static cl::opt<int> maxDelayMs("max-delay-ms", cl::desc("longest a round runs before the kill"),
                               cl::init(80));
static cl::opt<unsigned> seed("seed", cl::desc("random seed"), cl::init(1));
static cl::opt<int> maxBlob("max-blob", cl::desc("largest cubin in bytes"), cl::init(65536));

static std::string ackPath(const std::string &dir, int round, int w) {
  return llvm::formatv("{0}/acks-{1}-{2}.txt", dir, round, w);
}

// Publishes until killed; each acknowledged id is one write() of a whole line.
static int writer(const std::string &dir, int round, int w) {
  int acks = ::open(ackPath(dir, round, w).c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  std::unique_ptr<Cache> cache = openUser(dir + "/cache.sqlite");
  if (!cache || acks < 0)
    return 2;
  for (int seq = 0;; ++seq) {
    Published p = rowFor(round, w, seq, maxBlob);
    if (llvm::Error error = cache->publish(&p.binary, &p.tuning)) {
      llvm::errs() << "publish: " << llvm::toString(std::move(error)) << "\n";
      return 3;
    }
    std::string line = std::to_string(seq) + "\n";
    if (write(acks, line.data(), line.size()) != ssize_t(line.size()))
      return 4;
  }
}

static std::vector<int> acknowledged(const std::string &dir, int round, int w) {
  std::ifstream in(ackPath(dir, round, w));
  std::vector<int> seqs;
  for (int seq; in >> seq;)
    seqs.push_back(seq);
  return seqs;
}

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "cache crash (SIGKILL) stress test\n");
  testing::TempDir dir;
  std::string path = dir.file("cache.sqlite");
  std::mt19937 random(seed);
  Verdict verdict;
  size_t total = 0;
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < rounds; ++round) {
    std::vector<pid_t> pids = spawn(writers, [&](int w) { return writer(dir.path(), round, w); });
    int delay = std::uniform_int_distribution<int>(0, maxDelayMs)(random);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    for (pid_t pid : pids)
      kill(pid, SIGKILL);
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      // A writer that stopped by itself failed (it only stops when killed).
      verdict.expect(WIFSIGNALED(status),
                     llvm::formatv("round {0}: a writer exited with {1}", round,
                                   WIFEXITED(status) ? WEXITSTATUS(status) : -1));
    }

    std::string quick = integrity(path, "quick_check");
    verdict.expect(quick == "ok", llvm::formatv("round {0}: quick_check: {1}", round, quick));
    std::unique_ptr<Cache> cache = openUser(path);
    verdict.expect(bool(cache), "cannot reopen after the kill");
    if (!cache)
      break;
    // This round's rows, and every 10 rounds all rows so far.
    int from = round % 10 == 9 || round + 1 == rounds ? 0 : round;
    for (int r = from; r <= round; ++r)
      for (int w = 0; w < writers; ++w)
        for (int seq : acknowledged(dir.path(), r, w)) {
          total += r == round;
          std::string problem = check(*cache, rowFor(r, w, seq, maxBlob));
          verdict.expect(problem.empty(), llvm::formatv("round {0}: {1}", r, problem));
        }
  }
  testing::RawDb raw(path);
  llvm::outs() << llvm::formatv("{0} rounds of {1} writers killed in {2:f1} s: {3} acknowledged "
                                "rows verified, {4} rows in the DB\n",
                                int(rounds), int(writers), secondsSince(start), total,
                                raw.one("SELECT count(*) FROM tunings"));
  std::string full = integrity(path);
  verdict.expect(full == "ok", "integrity_check: " + full);
  return verdict.exitCode("stress_cache_crash");
}
