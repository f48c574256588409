// Shipping a cache: export a compact DB for some devices, merge DBs tuned on several
// machines, verify a DB. Used by `flashjit cache` (tools/cmd_cache.cpp) and its tests.
#pragma once

#include "cache/cache.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace flashjit::cache {

struct ShipReport {
  int tunings = 0, binaries = 0;      // rows written
  std::vector<std::string> conflicts; // same key, different winner or different bytes
  std::vector<std::string> notes;     // rows skipped (bad checksum), winners with no binary
};

// Writes `out` (replaced atomically): every tuning row for these device keys found in
// `cache` (user DB first, the first row per key wins) and the binaries they point at, in
// journal mode DELETE so it can be read from a read-only directory.
llvm::Expected<ShipReport> exportDb(Cache &cache, llvm::ArrayRef<std::string> deviceKeys,
                                    llvm::StringRef out);

// Writes `out` (replaced atomically) from flashjit DBs: per tuning key the faster winner
// (lower median time; the earlier input on a tie), its binary from the same input where
// it has one, and every other binary of every input. A key whose inputs disagree on the
// winner is reported as a conflict. An input that cannot be read is an error.
llvm::Expected<ShipReport> mergeDbs(llvm::ArrayRef<std::string> inputs, llvm::StringRef out);

struct VerifyReport {
  std::string path;
  int schemaVersion = 0;
  int binaries = 0, tunings = 0;
  std::vector<std::string> problems; // integrity, schema, checksums
  std::vector<std::string> notes;    // e.g. winners whose binary is not in this DB
  bool ok() const { return problems.empty(); }
};

// Integrity check, schema version and every row's checksum. Opens the file read-only and
// changes nothing, not even a corrupt file.
VerifyReport verifyDb(llvm::StringRef path);

} // namespace flashjit::cache
