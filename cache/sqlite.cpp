#include "cache/sqlite.h"

#include "support/error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <sqlite3.h>

#include <algorithm>
#include <random>
#include <thread>
#include <unistd.h>

namespace flashjit::cache::sql {

char SqliteError::ID = 0;

void SqliteError::log(llvm::raw_ostream &os) const { os << message_; }

std::error_code SqliteError::convertToErrorCode() const { return makeErrorCode(ErrorCode::Cache); }

int sqliteCode(llvm::Error &error) {
  int code = 0;
  error = llvm::handleErrors(std::move(error), [&](std::unique_ptr<SqliteError> e) -> llvm::Error {
    code = e->code();
    return llvm::Error(std::move(e));
  });
  return code;
}

bool isBusy(int code) { return code == SQLITE_BUSY || code == SQLITE_LOCKED; }

bool isCorruption(int code) {
  return code == SQLITE_CORRUPT || code == SQLITE_NOTADB || code == SQLITE_FORMAT;
}

// ---- Statement --------------------------------------------------------------------

Statement::Statement(Statement &&other) noexcept
    : connection_(other.connection_), stmt_(other.stmt_) {
  other.stmt_ = nullptr;
}

Statement::~Statement() {
  if (stmt_) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

Statement &Statement::bind(int index, llvm::StringRef text) {
  sqlite3_bind_text64(stmt_, index, text.data() ? text.data() : "", text.size(), SQLITE_TRANSIENT,
                      SQLITE_UTF8);
  return *this;
}

Statement &Statement::bindBlob(int index, llvm::StringRef bytes) {
  sqlite3_bind_blob64(stmt_, index, bytes.data() ? bytes.data() : "", bytes.size(),
                      SQLITE_TRANSIENT);
  return *this;
}

Statement &Statement::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement &Statement::bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

llvm::Expected<bool> Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW)
    return true;
  if (rc == SQLITE_DONE)
    return false;
  return connection_->lastError(rc, sqlite3_sql(stmt_));
}

llvm::Error Statement::run() {
  while (true) {
    llvm::Expected<bool> row = step();
    if (!row)
      return row.takeError();
    if (!*row)
      return llvm::Error::success();
  }
}

int64_t Statement::integer(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::real(int column) const { return sqlite3_column_double(stmt_, column); }
bool Statement::isNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::string Statement::text(int column) const {
  // Blob first, then its size: the documented order that avoids a type conversion.
  const void *data = sqlite3_column_blob(stmt_, column);
  int size = sqlite3_column_bytes(stmt_, column);
  if (!data || size <= 0)
    return {};
  return std::string(static_cast<const char *>(data), size);
}

// ---- Connection -------------------------------------------------------------------

Connection::Connection(sqlite3 *db, std::string label)
    : db_(db), pid_(getpid()), label_(std::move(label)) {}

llvm::Expected<std::unique_ptr<Connection>> Connection::open(const std::string &name, int flags,
                                                             std::string label) {
  sqlite3 *db = nullptr;
  int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return llvm::make_error<SqliteError>(
        rc & 0xff, llvm::formatv("cache DB {0}: cannot open: {1}", label, message).str());
  }
  sqlite3_extended_result_codes(db, 0);
  // Defensive mode: no writable_schema tricks or other ways for a file to corrupt itself.
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  return std::unique_ptr<Connection>(new Connection(db, std::move(label)));
}

Connection::~Connection() {
  // Closing can checkpoint or unlink -wal/-shm files the parent still uses.
  if (!db_ || pid_ != getpid())
    return;
  for (auto &entry : statements_)
    sqlite3_finalize(entry.second);
  sqlite3_close_v2(db_);
}

void Connection::leak() {
  db_ = nullptr;
  statements_.clear();
}

llvm::Error Connection::lastError(int code, llvm::StringRef what) const {
  const char *message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(code);
  return llvm::make_error<SqliteError>(
      code & 0xff,
      llvm::formatv("cache DB {0}: {1}: {2}", label_, what.take_front(60), message).str());
}

llvm::Expected<Statement> Connection::prepare(llvm::StringRef sql) {
  auto found = statements_.find(sql);
  if (found != statements_.end())
    return Statement(*this, found->second);
  sqlite3_stmt *stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return lastError(rc, sql);
  }
  statements_[sql] = stmt;
  return Statement(*this, stmt);
}

llvm::Error Connection::exec(llvm::StringRef sql) {
  std::string text = sql.str();
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK)
    return lastError(rc, sql);
  return llvm::Error::success();
}

llvm::Expected<int64_t> Connection::queryInt(llvm::StringRef sql) {
  llvm::Expected<Statement> stmt = prepare(sql);
  if (!stmt)
    return stmt.takeError();
  llvm::Expected<bool> row = stmt->step();
  if (!row)
    return row.takeError();
  return *row ? stmt->integer(0) : 0;
}

llvm::Expected<std::string> Connection::queryText(llvm::StringRef sql) {
  llvm::Expected<Statement> stmt = prepare(sql);
  if (!stmt)
    return stmt.takeError();
  llvm::Expected<bool> row = stmt->step();
  if (!row)
    return row.takeError();
  return *row ? stmt->text(0) : std::string();
}

// ---- Retry and transactions ---------------------------------------------------------

llvm::Error retryWhileBusy(std::chrono::steady_clock::time_point deadline,
                           llvm::function_ref<llvm::Error()> attempt) {
  thread_local std::minstd_rand random(
      static_cast<unsigned>(getpid() ^ std::hash<std::thread::id>()(std::this_thread::get_id()) ^
                            std::chrono::steady_clock::now().time_since_epoch().count()));
  auto delay = std::chrono::microseconds(500);
  while (true) {
    llvm::Error error = attempt();
    if (!error)
      return error;
    if (!isBusy(sqliteCode(error)) || std::chrono::steady_clock::now() >= deadline)
      return error;
    llvm::consumeError(std::move(error));
    // Jitter so that waiting writers do not wake up in lock step.
    auto sleep = std::chrono::microseconds(delay.count() / 2 + random() % (delay.count() / 2 + 1));
    std::this_thread::sleep_for(sleep);
    delay = std::min(delay * 2, std::chrono::microseconds(50000));
  }
}

llvm::Error transaction(Connection &connection, TxKind kind,
                        llvm::function_ref<llvm::Error(Connection &)> body) {
  if (llvm::Error error = connection.exec(kind == TxKind::Write ? "BEGIN IMMEDIATE" : "BEGIN"))
    return error;
  llvm::Error error = body(connection);
  if (!error)
    error = connection.exec("COMMIT");
  if (error && !sqlite3_get_autocommit(connection.raw()))
    llvm::consumeError(connection.exec("ROLLBACK"));
  return error;
}

std::string fileUri(llvm::StringRef path, llvm::StringRef query) {
  // "file:///abs/path" for absolute paths, so a path starting with "//" is never read as
  // an authority; "file:rel/path" otherwise.
  std::string uri = path.startswith("/") ? "file://" : "file:";
  for (char c : path) {
    unsigned char byte = static_cast<unsigned char>(c);
    if (c == '%' || c == '?' || c == '#' || byte < 0x20) {
      uri += '%';
      uri += llvm::hexdigit(byte >> 4);
      uri += llvm::hexdigit(byte & 15);
    } else {
      uri += c;
    }
  }
  if (!query.empty())
    uri += "?" + query.str();
  return uri;
}

} // namespace flashjit::cache::sql
