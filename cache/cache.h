// The flashjit cache: compiled binaries and tuning winners in SQLite, so that a process
// that finds its kernels here starts with no compilation. One writable user DB and any
// number of read-only shipped DBs, then the system DBs installed with flashjit; lookups go
// user first, then shipped in the order given, then system.
// The cache knows nothing of CUDA: binaries are opaque bytes, keys are computed by callers.
// docs/CACHE.md describes files, schema and behaviour.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace flashjit::cache {

// A compiled kernel. `key` is the binary key (sha256 hex of emitted source + compile
// options + NVRTC version + exact target), computed by the caller and opaque here.
struct BinaryRow {
  std::string key, keyText, target, nvrtcVersion; // keyText e.g. "fwd_mma...sm90a/bm128.bn64.w4.s2"
  std::string cubin, ptx; // any bytes; the checksum is computed and verified by the cache
  int registers = 0, spillBytes = 0, sharedBytes = 0;
  double compileMs = 0;
  int64_t createdAt = 0; // unix seconds, filled by the cache when 0
};

// What a tuning result is valid for. Fields must be non-empty and contain no '|'.
struct TuningKey {
  std::string spec;                 // "fwd_mma.bf16.d128.dv128.causal.sm90a"
  std::string bucket;               // "q1024.k1024.bh64"
  std::string deviceKey;            // "NVIDIA_H200.sm90.132sm"
  std::string generatorFingerprint; // hex
  int protocolVersion = 1;
  std::string text() const; // "spec|bucket|device|gen=<fp>|protocol=<n>"
  std::string hash() const; // sha256 hex of text()
};

// A tuning winner. `binaryKey` names the binary the tuner measured; a caller whose NVRTC
// version or target differs must compute its own binary key rather than trust this one.
struct TuningRow {
  TuningKey key;
  std::string config; // the winner, e.g. "bm128.bn64.w4.s2"
  std::string binaryKey;
  double medianUs = 0, tflops = 0;
  std::string candidatesJson, clocksJson; // as given by the tuner
  int64_t tunedAt = 0;                    // unix seconds, filled by the cache when 0
  std::string flashjitVersion;            // filled by the cache when empty
  // Winners files only (cache/winners.h; a DB does not store them): the hash of the
  // machine code the measurement covers (tuner/carry_winners.h), and, for a row a later
  // generator carried because that code had not changed, the generator it was measured
  // with.
  std::string codeSha256, carriedFrom;
};

// Where a row was found: the writable user DB, a DB the application ships, or the system
// DB installed with flashjit (share/flashjit/system.sqlite next to the library).
enum class Source { User, Shipped, System };
llvm::StringRef sourceName(Source source); // "user", "shipped", "system"

template <typename Row> struct Found {
  Row row;
  Source source;
  std::string path; // the DB it came from (":memory:" for the in-memory user DB)
};

// A tuning row and, when some DB has it, the binary it points at, read consistently.
struct Tuned {
  Found<TuningRow> tuning;
  std::optional<Found<BinaryRow>> binary;
};

struct CacheOptions {
  std::optional<std::string> userPath; // nullopt: $FLASHJIT_CACHE / XDG default; "": no user DB
  std::vector<std::string> shippedPaths;
  // Read-only DBs below the shipped ones. nullopt: defaultSystemCachePaths().
  std::optional<std::vector<std::string>> systemPaths;
  uint64_t maxUserBytes = 2ull << 30;        // LRU-evict unreferenced binaries above this
  std::function<void(llvm::StringRef)> warn; // warnings; default: stderr
  // How long a call may wait for other writers before it fails (never with SQLITE_BUSY).
  int busyTimeoutMs = 60000;
  // Open every shipped DB with immutable=1: the deployment promises the files never change.
  // Without it, immutable=1 is used only for files this process cannot write.
  bool shippedImmutable = false;
};

// One DB as the cache sees it, for `flashjit cache ls` and diagnostics.
struct DatabaseInfo {
  std::string path;
  Source source;
  bool usable = false; // false: skipped (newer schema, corrupt, ...); `note` says why
  int schemaVersion = 0;
  std::string note;
};

class Cache { // thread-safe; cheap to query from many threads; safe across fork()
public:
  static llvm::Expected<std::unique_ptr<Cache>> open(CacheOptions options);
  ~Cache();

  llvm::Expected<std::optional<Found<BinaryRow>>> findBinary(llvm::StringRef key);
  llvm::Expected<std::optional<Found<TuningRow>>> findTuning(const TuningKey &key);
  // The tuning row and its binary; the binary is taken from the same DB when it has it.
  llvm::Expected<std::optional<Tuned>> findTuned(const TuningKey &key);
  // Every tuning row for (spec, deviceKey, fingerprint, protocol), any bucket, user rows
  // first (a bucket found in an earlier DB hides the same bucket in later ones).
  llvm::Expected<std::vector<Found<TuningRow>>> tuningsFor(const TuningKey &keyIgnoringBucket);
  // Every tuning row of every usable DB, user first, for listing.
  llvm::Expected<std::vector<Found<TuningRow>>> allTunings();

  // Which part of the key had no match: "no row for device key ...", "generator
  // fingerprint changed ...", "NVRTC version differs ...".
  std::string explainMiss(const TuningKey &key);
  std::string explainBinaryMiss(llvm::StringRef keyText, llvm::StringRef target,
                                llvm::StringRef nvrtcVersion);

  // One transaction on the user DB: the binary (if any) and the tuning row (if any) that
  // points at it. A row with the same key is replaced.
  llvm::Error publish(const BinaryRow *binary, const TuningRow *tuning);
  // Removes every row from the user DB.
  llvm::Error clear();

  bool persistent() const;      // false when there is no user DB (in-memory only)
  std::string userPath() const; // "" when not persistent
  // Every DB: a user DB that was asked for but skipped (with the reason), the user DB in
  // use (":memory:" when not persistent), then the shipped DBs in order, then the system DBs.
  std::vector<DatabaseInfo> databases() const;

  class Impl;

private:
  explicit Cache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// $FLASHJIT_CACHE, else $XDG_CACHE_HOME/flashjit/cache.sqlite, else
// ~/.cache/flashjit/cache.sqlite. "" (persistence off) when $FLASHJIT_CACHE is set empty.
std::string defaultUserCachePath();

// The system cache: $FLASHJIT_SYSTEM_CACHE when set (paths separated by ':'; empty: none),
// else the first of installedSystemCachePaths() that exists. So an installed prefix
// (lib/, bin/, share/) and a build tree built with FLASHJIT_SYSTEM_CACHE=ON find theirs
// without configuration.
std::vector<std::string> defaultSystemCachePaths();
// Where the installed system DB is looked for, whether or not it exists: with <dir> the
// directory of the binary this code is in (libflashjit.so, or the flashjit executable),
// <dir>/../share/flashjit/system.sqlite, then <dir>/../../share/... (a multiarch libdir).
std::vector<std::string> installedSystemCachePaths();

} // namespace flashjit::cache
