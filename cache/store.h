// One cache DB file (or the in-memory stand-in for a missing user DB): how it is opened,
// a pool of connections for this process, and what happens when the file is busy,
// corrupt, from another version, or inherited across fork(). Private to cache/.
#pragma once

#include "cache/sqlite.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace flashjit::cache {

enum class StoreKind {
  User,    // read-write, WAL; created, migrated, or moved aside and rebuilt as needed
  Shipped, // read-only; skipped with a warning when it cannot be used
  Memory,  // the user role when persistence is off: lives as long as the process
};

struct StoreConfig {
  StoreKind kind = StoreKind::User;
  std::string path; // absolute; ignored for Memory
  std::chrono::milliseconds busyTimeout{60000};
  bool immutable = false; // Shipped: always open with immutable=1
  bool system = false;    // Shipped: the system layer (installed with flashjit)
  std::function<void(llvm::StringRef)> warn;
};

class Store {
public:
  // User: fails only when no usable file can be had at the path; a newer schema gives a
  // store that is not usable(). Shipped: never fails; a file that cannot be used gives a
  // store that is not usable(), with a warning. Memory: an empty in-memory DB.
  static llvm::Expected<std::unique_ptr<Store>> open(StoreConfig config);
  ~Store();

  // Runs `body` in a transaction on a connection opened by this process. The body may
  // run more than once (after a busy wait, or on a rebuilt DB), so it must reset what it
  // collects. SQLITE_BUSY is retried until the timeout. On a user DB a corrupt file is
  // moved aside and rebuilt and the body runs again; on a shipped DB any failure disables
  // the store with a warning and the call succeeds with the body not run (a miss).
  llvm::Error run(sql::TxKind kind, llvm::function_ref<llvm::Error(sql::Connection &)> body,
                  std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  StoreKind kind() const { return config_.kind; }
  bool system() const { return config_.system; }
  const std::string &path() const { return config_.path; } // ":memory:" for Memory
  bool usable() const { return usable_.load(); }
  std::string note() const; // why it is not usable, or a remark about how it is read
  int schemaVersion() const { return schemaVersion_.load(); }

  // Called around fork() for every live store (see store.cpp).
  void lockForFork();
  void unlockAfterFork();

private:
  explicit Store(StoreConfig config);
  llvm::Error openFirst();
  llvm::Expected<std::unique_ptr<sql::Connection>>
  acquire(std::chrono::steady_clock::time_point deadline);
  void giveBack(std::unique_ptr<sql::Connection> connection);
  llvm::Expected<std::unique_ptr<sql::Connection>>
  connect(std::chrono::steady_clock::time_point deadline);
  llvm::Expected<std::unique_ptr<sql::Connection>>
  connectUser(std::chrono::steady_clock::time_point deadline);
  llvm::Expected<std::unique_ptr<sql::Connection>>
  openUserFile(std::chrono::steady_clock::time_point deadline, sql::FileId &file);
  llvm::Expected<std::unique_ptr<sql::Connection>> connectShipped();
  llvm::Expected<std::unique_ptr<sql::Connection>> connectMemory();
  void moveAside(const std::string &reason, sql::FileId broken);
  void disable(const std::string &reason);
  void warn(const std::string &message);

  StoreConfig config_;
  std::string shippedUri_;
  std::atomic<bool> usable_{true};
  std::atomic<int> schemaVersion_{0}; // set by whichever thread connects

  mutable std::mutex mu_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<sql::Connection>> idle_;
  pid_t pid_;               // the process the pooled connections belong to
  uint64_t generation_ = 0; // bumped when the file is moved aside or the process forks
  int memoryOut_ = 0;       // Memory: connections lent out (at most one exists)
  std::string note_;
};

} // namespace flashjit::cache
