// Thin RAII layer over SQLite's C API, private to cache/: a connection with a cache of
// prepared statements, a statement cursor, an error type that keeps SQLite's result code
// (so callers can tell "busy" from "corrupt"), transactions, and the retry loop that keeps
// SQLITE_BUSY from ever reaching a caller.
#pragma once

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>

struct sqlite3;
struct sqlite3_stmt;

namespace flashjit::cache::sql {

// An SQLite failure: the primary result code plus a message that names the file.
// Converts to ErrorCode::Cache.
class SqliteError : public llvm::ErrorInfo<SqliteError> {
public:
  static char ID;
  SqliteError(int code, std::string message) : code_(code), message_(std::move(message)) {}
  int code() const { return code_; } // primary code: SQLITE_BUSY, SQLITE_CORRUPT, ...
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;

private:
  int code_;
  std::string message_;
};

// The primary SQLite code inside `error` (0 when it holds none); the error is kept.
int sqliteCode(llvm::Error &error);
bool isBusy(int code);       // another connection holds a lock: wait and retry
bool isCorruption(int code); // the file is damaged or not a database

class Connection;

// Which file a connection opened (st_dev, st_ino), to tell "this file" from "a file that
// has since replaced it at the same path".
struct FileId {
  uint64_t dev = 0, ino = 0;
  bool known = false;
  bool operator==(const FileId &o) const {
    return known && o.known && dev == o.dev && ino == o.ino;
  }
};

// A prepared statement borrowed from its connection's cache; reset when it goes away.
class Statement {
public:
  Statement(Connection &connection, sqlite3_stmt *stmt) : connection_(&connection), stmt_(stmt) {}
  Statement(Statement &&other) noexcept;
  Statement(const Statement &) = delete;
  ~Statement();

  // Parameters are 1-based. Text and blobs are copied by SQLite.
  Statement &bind(int index, llvm::StringRef text);
  Statement &bindBlob(int index, llvm::StringRef bytes);
  Statement &bind(int index, int64_t value);
  Statement &bind(int index, double value);

  // true: a row is ready; false: done.
  llvm::Expected<bool> step();
  // Steps to the end, for statements that return no rows.
  llvm::Error run();

  int64_t integer(int column) const; // columns are 0-based
  double real(int column) const;
  std::string text(int column) const; // text or blob bytes, exactly
  bool isNull(int column) const;

private:
  Connection *connection_;
  sqlite3_stmt *stmt_;
};

// One sqlite3 handle, used by one thread at a time. Remembers the process that opened it:
// a connection must never be used or closed by a forked child, so the destructor of a
// connection inherited across fork() leaks the handle instead of closing it.
class Connection {
public:
  // `name` is a path or, with SQLITE_OPEN_URI in flags, a file: URI.
  static llvm::Expected<std::unique_ptr<Connection>> open(const std::string &name, int flags,
                                                          std::string label);
  ~Connection();

  // Statements come from a per-connection cache keyed by their text.
  llvm::Expected<Statement> prepare(llvm::StringRef sql);
  llvm::Error exec(llvm::StringRef sql);                 // one or more statements, no rows wanted
  llvm::Expected<int64_t> queryInt(llvm::StringRef sql); // first column of the first row
  llvm::Expected<std::string> queryText(llvm::StringRef sql);

  // An error for the last failing call on this handle, as SqliteError.
  llvm::Error lastError(int code, llvm::StringRef what) const;

  // Drop the handle without closing it: after fork() the child must not close the
  // parent's connection (closing can checkpoint or unlink files the parent still uses).
  void leak();

  sqlite3 *raw() const { return db_; }
  pid_t openerPid() const { return pid_; }
  const std::string &label() const { return label_; }

  uint64_t generation = 0; // set by the owning store
  FileId file;             // set by the owning store

private:
  Connection(sqlite3 *db, std::string label);
  sqlite3 *db_;
  pid_t pid_;
  std::string label_; // the file, for messages
  llvm::StringMap<sqlite3_stmt *> statements_;
};

// Retries `attempt` while it fails with SQLITE_BUSY/LOCKED, sleeping with growing,
// jittered back-off, until `deadline`. Anything else is returned as is.
llvm::Error retryWhileBusy(std::chrono::steady_clock::time_point deadline,
                           llvm::function_ref<llvm::Error()> attempt);

enum class TxKind { Read, Write };
// BEGIN (or BEGIN IMMEDIATE for writers), body, COMMIT; ROLLBACK when anything fails.
llvm::Error transaction(Connection &connection, TxKind kind,
                        llvm::function_ref<llvm::Error(Connection &)> body);

// A file: URI for `path` with `query` ("mode=ro&immutable=1"), escaping what URIs need.
std::string fileUri(llvm::StringRef path, llvm::StringRef query);

} // namespace flashjit::cache::sql
