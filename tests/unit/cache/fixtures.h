// Shared by the cache unit tests and the stress programs (tests/stress/): temporary
// directories, deterministic rows, and raw SQLite access to look under the cache.
#pragma once

#include "cache/cache.h"
#include "support/hash.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <sqlite3.h>

#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace flashjit::cache::testing {

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
public:
  TempDir() {
    llvm::SmallString<128> dir;
    std::error_code ec = llvm::sys::fs::createUniqueDirectory("flashjit-cache-test", dir);
    if (ec)
      std::abort();
    path_ = std::string(dir);
  }
  ~TempDir() {
    // chmod back first: a test may have made it read-only.
    llvm::sys::fs::setPermissions(path_, llvm::sys::fs::all_all);
    llvm::sys::fs::remove_directories(path_);
  }
  TempDir(const TempDir &) = delete;
  const std::string &path() const { return path_; }
  std::string file(llvm::StringRef name) const { return path_ + "/" + name.str(); }
  // Names of the entries in the directory, sorted.
  std::set<std::string> entries() const {
    std::set<std::string> names;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(path_, ec), end; it != end && !ec; it.increment(ec))
      names.insert(std::string(llvm::sys::path::filename(it->path())));
    return names;
  }

private:
  std::string path_;
};

// Deterministic bytes: any value, any length.
inline std::string bytes(uint64_t seed, size_t size) {
  std::mt19937_64 random(seed * 0x9E3779B97F4A7C15ull + 1);
  std::string out(size, '\0');
  for (char &c : out)
    c = static_cast<char>(random());
  return out;
}

// The binary key as the real caller computes it: source + options + NVRTC + target.
inline std::string binaryKey(llvm::StringRef source, llvm::StringRef options, llvm::StringRef nvrtc,
                             llvm::StringRef target) {
  return sha256Hex((source + "\n" + options + "\n" + nvrtc + "\n" + target).str());
}

struct Versions {
  std::string nvrtc = "13.0";
  std::string target = "sm_90a";
  std::string fingerprint = "f00dfeed";
  int protocol = 1;
};

inline BinaryRow makeBinary(int i, size_t cubinBytes = 3000, const Versions &v = {}) {
  BinaryRow b;
  std::string source = llvm::formatv("// kernel {0}\nextern \"C\" __global__ void k{0}();", i);
  b.key = binaryKey(source, "-O3 -arch=" + v.target, v.nvrtc, v.target);
  b.keyText = llvm::formatv("fwd_mma.bf16.d128.dv128.causal.{0}/cfg{1}", v.target, i);
  b.target = v.target;
  b.nvrtcVersion = v.nvrtc;
  b.cubin = bytes(i, cubinBytes);
  b.ptx = i % 2 ? bytes(i + 1000003, cubinBytes / 3) : std::string();
  b.registers = 128 + i % 40;
  b.spillBytes = i % 3;
  b.sharedBytes = 49152 + i;
  b.compileMs = 100.5 + i;
  return b;
}

inline TuningKey makeKey(int i, const Versions &v = {},
                         llvm::StringRef device = "NVIDIA_H200.sm90.132sm") {
  TuningKey k;
  k.spec = llvm::formatv("fwd_mma.bf16.d{0}.dv{0}.causal.{1}", 64 + 8 * (i % 8), v.target);
  k.bucket = llvm::formatv("q{0}.k{0}.bh64", 128 * (1 + i / 8)); // unique per i
  k.deviceKey = device.str();
  k.generatorFingerprint = v.fingerprint;
  k.protocolVersion = v.protocol;
  return k;
}

inline TuningRow makeTuning(const TuningKey &key, const BinaryRow &binary, double medianUs = 0,
                            int config = 0) {
  TuningRow t;
  t.key = key;
  t.config = llvm::formatv("bm128.bn64.w4.s{0}", config);
  t.binaryKey = binary.key;
  t.medianUs = medianUs ? medianUs : 10.0 + binary.registers;
  t.tflops = 400.25;
  t.candidatesJson =
      R"([{"config":"bm64.bn64.w4.s2","us":12.5},{"config":"bm256","rejected":"smem"}])";
  t.clocksJson = R"({"sm_mhz":1980,"mem_mhz":2619})";
  return t;
}

inline bool sameBinary(const BinaryRow &a, const BinaryRow &b) {
  return a.key == b.key && a.keyText == b.keyText && a.target == b.target &&
         a.nvrtcVersion == b.nvrtcVersion && a.cubin == b.cubin && a.ptx == b.ptx &&
         a.registers == b.registers && a.spillBytes == b.spillBytes &&
         a.sharedBytes == b.sharedBytes && a.compileMs == b.compileMs;
}

inline bool sameTuning(const TuningRow &a, const TuningRow &b) {
  return a.key.text() == b.key.text() && a.config == b.config && a.binaryKey == b.binaryKey &&
         a.medianUs == b.medianUs && a.tflops == b.tflops && a.candidatesJson == b.candidatesJson &&
         a.clocksJson == b.clocksJson;
}

// Collects warnings from a Cache (thread-safe).
struct Warnings {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(llvm::StringRef)> sink() {
    return [this](llvm::StringRef line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line.str());
    };
  }
  bool any(llvm::StringRef needle) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const std::string &line : lines)
      if (llvm::StringRef(line).contains(needle))
        return true;
    return false;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex);
    return lines.size();
  }
};

// Raw SQLite on a file, to look under the cache or damage it on purpose.
class RawDb {
public:
  explicit RawDb(const std::string &path, bool readOnly = false) {
    int flags = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK)
      error_ = sqlite3_errmsg(db_);
    sqlite3_busy_timeout(db_, 10000);
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb &) = delete;
  // Runs statements; returns "" or the error message.
  std::string exec(const std::string &sql) {
    char *message = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) == SQLITE_OK)
      return "";
    std::string text = message ? message : "error";
    sqlite3_free(message);
    return text;
  }
  // First column of each row, as text; on error a single "error: ..." entry.
  std::vector<std::string> column(const std::string &sql) {
    std::vector<std::string> out;
    sqlite3_stmt *stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      out.push_back(std::string("error: ") + sqlite3_errmsg(db_));
      return out;
    }
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const unsigned char *text = sqlite3_column_text(stmt, 0);
      out.push_back(text ? reinterpret_cast<const char *>(text) : "");
    }
    if (rc != SQLITE_DONE)
      out.push_back(std::string("error: ") + sqlite3_errmsg(db_));
    sqlite3_finalize(stmt);
    return out;
  }
  std::string one(const std::string &sql) {
    std::vector<std::string> rows = column(sql);
    return rows.empty() ? "" : rows[0];
  }
  const std::string &openError() const { return error_; }

private:
  sqlite3 *db_ = nullptr;
  std::string error_;
};

inline std::string readFile(const std::string &path) {
  std::string out;
  if (FILE *f = fopen(path.c_str(), "rb")) {
    char buffer[65536];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, f)) > 0)
      out.append(buffer, n);
    fclose(f);
  }
  return out;
}

inline void writeFile(const std::string &path, llvm::StringRef data) {
  if (FILE *f = fopen(path.c_str(), "wb")) {
    fwrite(data.data(), 1, data.size(), f);
    fclose(f);
  }
}

} // namespace flashjit::cache::testing
