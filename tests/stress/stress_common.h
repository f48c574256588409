// Shared by the cache stress programs: rows derived from ids (so a verifier can rebuild
// exactly what a writer published), process helpers, and pass/fail reporting.
#pragma once

#include "tests/unit/cache/fixtures.h"

#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace flashjit::cache::stress {

using testing::bytes;

// Every row a stress writer publishes is a function of (a, b, c): the binary (blob sizes
// vary from 1 byte to `maxBlob`) and the tuning row that points at it.
struct Published {
  BinaryRow binary;
  TuningRow tuning;
};

inline Published rowFor(uint64_t a, uint64_t b, uint64_t c, size_t maxBlob = 16384) {
  std::string id = llvm::formatv("{0}.{1}.{2}", a, b, c);
  uint64_t seed = std::hash<std::string>()(id);
  Published p;
  p.binary.key = sha256Hex("binary " + id);
  p.binary.keyText = "stress/" + id;
  p.binary.target = "sm_90a";
  p.binary.nvrtcVersion = "13.0";
  p.binary.cubin = bytes(seed, 1 + seed % maxBlob);
  p.binary.ptx = bytes(seed + 1, seed % 7 ? 0 : seed % 999);
  p.binary.registers = int(seed % 255);
  p.binary.compileMs = double(seed % 1000) / 8;
  p.binary.createdAt = 1700000000 + int64_t(c);
  p.tuning.key = {"stress.p" + std::to_string(a),
                  "t" + std::to_string(b) + ".s" + std::to_string(c), "STRESS.sm90.132sm", "fp", 1};
  p.tuning.config = "cfg" + id;
  p.tuning.binaryKey = p.binary.key;
  p.tuning.medianUs = 1 + double(seed % 100000) / 64;
  p.tuning.tflops = 100;
  p.tuning.candidatesJson = "[]";
  p.tuning.clocksJson = "{}";
  p.tuning.tunedAt = 1700000000;
  p.tuning.flashjitVersion = "stress";
  return p;
}

// Checks that the cache holds exactly this row and binary; returns "" or what is wrong.
inline std::string check(Cache &cache, const Published &p) {
  auto found = cache.findTuned(p.tuning.key);
  if (!found)
    return "lookup failed: " + llvm::toString(found.takeError());
  if (!found->has_value())
    return "missing tuning row " + p.tuning.key.text();
  if (!testing::sameTuning((*found)->tuning.row, p.tuning))
    return "wrong tuning row " + p.tuning.key.text();
  if (!(*found)->binary)
    return "missing binary for " + p.tuning.key.text();
  if (!testing::sameBinary((*found)->binary->row, p.binary))
    return "wrong binary for " + p.tuning.key.text();
  return "";
}

inline std::unique_ptr<Cache> openUser(const std::string &path,
                                       std::atomic<int> *warnings = nullptr) {
  CacheOptions options;
  options.userPath = path;
  options.warn = [warnings](llvm::StringRef line) {
    if (warnings)
      ++*warnings;
    llvm::errs() << "[pid " << getpid() << "] warning: " << line << "\n";
  };
  auto cache = Cache::open(options);
  if (!cache) {
    llvm::errs() << "[pid " << getpid() << "] open failed: " << llvm::toString(cache.takeError())
                 << "\n";
    return nullptr;
  }
  if (!(*cache)->persistent()) { // fell back to memory: its writes would prove nothing
    llvm::errs() << "[pid " << getpid() << "] the user DB could not be used\n";
    return nullptr;
  }
  return std::move(*cache);
}

// Starts `count` children running `body(index)`; the exit code is its return value.
template <typename Body> std::vector<pid_t> spawn(int count, Body body) {
  std::vector<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      int code = body(i);
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  return pids;
}

// Waits for every child; returns how many did not exit with 0.
inline int waitAll(const std::vector<pid_t> &pids) {
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ++failed;
  }
  return failed;
}

// Failures are counted and the first few printed; the exit code says pass or fail.
class Verdict {
public:
  void fail(const std::string &what) {
    if (failures_++ < 20)
      llvm::errs() << "FAIL: " << what << "\n";
  }
  void expect(bool ok, const std::string &what) {
    if (!ok)
      fail(what);
  }
  int failures() const { return failures_; }
  int exitCode(const char *name) const {
    llvm::outs() << name << ": " << (failures_ ? "FAILED" : "passed") << " (" << failures_
                 << " failures)\n";
    return failures_ ? 1 : 0;
  }

private:
  int failures_ = 0;
};

inline std::string integrity(const std::string &path, const char *pragma = "integrity_check") {
  testing::RawDb raw(path);
  std::vector<std::string> rows = raw.column(std::string("PRAGMA ") + pragma);
  return llvm::join(rows, "; ");
}

inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace flashjit::cache::stress
