// Cache::Impl, shared by the files that implement Cache (cache.cpp, explain.cpp).
// Private to cache/.
#pragma once

#include "cache/cache.h"
#include "cache/rows.h"
#include "cache/store.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <mutex>

namespace flashjit::cache {

class Cache::Impl {
public:
  CacheOptions options;
  std::unique_ptr<Store> user;                 // StoreKind::User, or Memory when persistence is off
  // Usable or not: the shipped DBs in the order given, then the system DBs.
  std::vector<std::unique_ptr<Store>> shipped;
  std::optional<DatabaseInfo> userSkipped;     // the user DB asked for, when not usable

  // Lookup order: the user DB, then the shipped and system DBs still usable.
  std::vector<Store *> order() const;
  static Source sourceOf(const Store &store) {
    if (store.kind() != StoreKind::Shipped)
      return Source::User;
    return store.system() ? Source::System : Source::Shipped;
  }
  void warn(llvm::StringRef message);

  // A row that failed its checksum: warned about, and deleted from the user DB (only if
  // still the same bytes) so that the next publish replaces it.
  void dropBadBinary(Store &store, const rows::Checked<BinaryRow> &bad);
  void dropBadTuning(Store &store, const rows::Checked<TuningRow> &bad);

  // Uses of user-DB binaries, written to binary_use with the next write (LRU).
  void noteUse(const Store &store, llvm::StringRef key);
  llvm::StringMap<int64_t> takeUses();
  llvm::Error flushUses(sql::Connection &c, const llvm::StringMap<int64_t> &uses);

private:
  std::mutex warnMutex_;
  std::mutex usesMutex_;
  llvm::StringMap<int64_t> uses_;
};

// Deletes least-recently-used binaries that no tuning row points at until the DB's used
// pages fit in `maxBytes` (with 10% headroom), never `keep`. Runs inside a write transaction.
llvm::Error evictUnreferenced(sql::Connection &c, uint64_t maxBytes, llvm::StringRef keep);

} // namespace flashjit::cache
