#include "cache/store.h"

#include "cache/schema.h"
#include "support/error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace flashjit::cache {
namespace {

constexpr size_t kMaxIdle = 16;
constexpr int kOpenFlags = SQLITE_OPEN_NOMUTEX; // a connection serves one thread at a time

// ---- fork(): no SQLite state may cross it ------------------------------------------
// SQLite keeps per-process lock bookkeeping per file. A child that inherits it believes
// it holds locks it does not, and a new connection there would share that belief. So
// before fork() every pooled file connection is closed (the parent reopens lazily), and
// the child, seeing a new pid, never touches what it inherited (Store::acquire).

std::mutex &registryMutex() {
  static auto *mutex = new std::mutex;
  return *mutex;
}
std::vector<Store *> &registry() {
  static auto *stores = new std::vector<Store *>;
  return *stores;
}
void prepareFork() {
  registryMutex().lock();
  for (Store *store : registry())
    store->lockForFork();
}
void parentAfterFork() {
  for (Store *store : registry())
    store->unlockAfterFork();
  registryMutex().unlock();
}
void childAfterFork() {
  for (Store *store : registry())
    store->unlockAfterFork();
  registryMutex().unlock();
}

// flock() on "<db>.lock": shared while a connection opens the DB and its -wal/-shm,
// exclusive while a corrupt DB is renamed, so no opener pairs a new DB with old files.
class FileLock {
public:
  FileLock(const std::string &path, int operation) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0)
      while (flock(fd_, operation) != 0 && errno == EINTR) {
      }
  }
  ~FileLock() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  FileLock(const FileLock &) = delete;

private:
  int fd_ = -1;
};

sql::FileId statId(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), true};
}

llvm::Error corruptError(const std::string &message) {
  return llvm::make_error<sql::SqliteError>(SQLITE_NOTADB, message);
}

std::string timestamp() {
  time_t now = time(nullptr);
  struct tm parts;
  localtime_r(&now, &parts);
  char text[32];
  strftime(text, sizeof text, "%Y%m%d-%H%M%S", &parts);
  return text;
}

bool onReadOnlyFilesystem(const std::string &path) {
  struct statvfs info;
  return statvfs(path.c_str(), &info) == 0 && (info.f_flag & ST_RDONLY);
}

} // namespace

// ---- lifetime -------------------------------------------------------------------------

Store::Store(StoreConfig config) : config_(std::move(config)), pid_(getpid()) {
  if (config_.kind == StoreKind::Memory)
    config_.path = ":memory:";
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(prepareFork, parentAfterFork, childAfterFork); });
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().push_back(this);
}

Store::~Store() {
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    llvm::erase_value(registry(), this);
  }
  idle_.clear(); // connections inherited from another process leak themselves
}

llvm::Expected<std::unique_ptr<Store>> Store::open(StoreConfig config) {
  std::unique_ptr<Store> store(new Store(std::move(config)));
  if (llvm::Error error = store->openFirst())
    return std::move(error);
  return std::move(store);
}

// Opens one connection now so that problems show at open time, not at first lookup.
llvm::Error Store::openFirst() {
  auto deadline = std::chrono::steady_clock::now() + config_.busyTimeout;
  llvm::Expected<std::unique_ptr<sql::Connection>> first = acquire(deadline);
  if (!first) {
    if (config_.kind == StoreKind::User && schemaVersion_ > schema::kCurrentVersion) {
      llvm::consumeError(first.takeError());
      usable_ = false; // note_ says why; the cache warns and works without it
      return llvm::Error::success();
    }
    if (config_.kind != StoreKind::Shipped)
      return first.takeError();
    disable(llvm::toString(first.takeError()));
    return llvm::Error::success();
  }
  giveBack(std::move(*first));
  return llvm::Error::success();
}

std::string Store::note() const {
  std::lock_guard<std::mutex> lock(mu_);
  return note_;
}

void Store::warn(const std::string &message) {
  if (config_.warn)
    config_.warn(message);
}

void Store::disable(const std::string &reason) {
  if (!usable_.exchange(false)) // warn once
    return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    note_ = reason;
  }
  warn(llvm::formatv("shipped cache DB {0} ignored: {1}", config_.path, reason).str());
}

// ---- the pool -------------------------------------------------------------------------

llvm::Expected<std::unique_ptr<sql::Connection>>
Store::acquire(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (pid_ != getpid()) {
    // A forked child: what the pool holds belongs to the parent. Connections leak
    // themselves when destroyed in another process.
    idle_.clear();
    pid_ = getpid();
    ++generation_;
    memoryOut_ = 0;
  }
  if (config_.kind == StoreKind::Memory) {
    // One in-memory DB, so one connection: wait for it. (A forked child starts a new,
    // empty one: it must not use the parent's.)
    returned_.wait(lock, [&] { return !idle_.empty() || memoryOut_ == 0; });
    ++memoryOut_;
  }
  if (!idle_.empty()) {
    std::unique_ptr<sql::Connection> connection = std::move(idle_.back());
    idle_.pop_back();
    return std::move(connection);
  }
  uint64_t generation = generation_;
  lock.unlock();
  llvm::Expected<std::unique_ptr<sql::Connection>> connection = connect(deadline);
  if (!connection) {
    if (config_.kind == StoreKind::Memory) {
      lock.lock();
      --memoryOut_;
      returned_.notify_all();
    }
    return connection.takeError();
  }
  (*connection)->generation = generation;
  return connection;
}

void Store::giveBack(std::unique_ptr<sql::Connection> connection) {
  std::unique_lock<std::mutex> lock(mu_);
  if (connection->openerPid() != getpid())
    return; // inherited: destroyed without closing
  bool current = connection->generation == generation_;
  if (config_.kind == StoreKind::Memory && current)
    --memoryOut_;
  if (current && idle_.size() < kMaxIdle)
    idle_.push_back(std::move(connection));
  returned_.notify_all();
  lock.unlock();
  connection.reset(); // a stale or surplus connection closes outside the lock
}

void Store::lockForFork() {
  mu_.lock();
  if (config_.kind != StoreKind::Memory)
    idle_.clear(); // the parent reopens lazily; the child inherits no SQLite file state
}

void Store::unlockAfterFork() { mu_.unlock(); }

// ---- running a transaction ----------------------------------------------------------------

llvm::Error Store::run(sql::TxKind kind, llvm::function_ref<llvm::Error(sql::Connection &)> body,
                       std::optional<std::chrono::milliseconds> timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout.value_or(config_.busyTimeout);
  for (int attempt = 0;; ++attempt) {
    if (!usable())
      return llvm::Error::success();
    llvm::Expected<std::unique_ptr<sql::Connection>> connection = acquire(deadline);
    llvm::Error error = llvm::Error::success();
    sql::FileId file;
    if (connection) {
      file = (*connection)->file;
      error =
          sql::retryWhileBusy(deadline, [&] { return sql::transaction(**connection, kind, body); });
      giveBack(std::move(*connection));
    } else {
      error = connection.takeError();
    }
    if (!error)
      return error;
    int code = sql::sqliteCode(error);
    if (config_.kind == StoreKind::Shipped) {
      disable(llvm::toString(std::move(error)));
      return llvm::Error::success();
    }
    if (config_.kind != StoreKind::User || !sql::isCorruption(code) || attempt >= 2)
      return error;
    moveAside(llvm::toString(std::move(error)), file);
  }
}

// ---- opening ------------------------------------------------------------------------------

llvm::Expected<std::unique_ptr<sql::Connection>>
Store::connect(std::chrono::steady_clock::time_point deadline) {
  switch (config_.kind) {
  case StoreKind::User:
    return connectUser(deadline);
  case StoreKind::Shipped:
    return connectShipped();
  case StoreKind::Memory:
    return connectMemory();
  }
  return corruptError("unknown store kind");
}

llvm::Expected<std::unique_ptr<sql::Connection>>
Store::connectUser(std::chrono::steady_clock::time_point deadline) {
  for (int attempt = 0;; ++attempt) {
    sql::FileId file;
    llvm::Expected<std::unique_ptr<sql::Connection>> connection = openUserFile(deadline, file);
    if (connection)
      return connection;
    llvm::Error error = connection.takeError();
    if (!sql::isCorruption(sql::sqliteCode(error)) || attempt >= 2)
      return std::move(error);
    moveAside(llvm::toString(std::move(error)), file);
  }
}

llvm::Expected<std::unique_ptr<sql::Connection>>
Store::openUserFile(std::chrono::steady_clock::time_point deadline, sql::FileId &file) {
  const std::string &path = config_.path;
  llvm::StringRef parent = llvm::sys::path::parent_path(path);
  if (!parent.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(parent))
      return makeError(ErrorCode::Cache, "cache DB {0}: cannot create {1}: {2}", path, parent,
                       ec.message());

  FileLock lock(path + ".lock", LOCK_SH);
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    file = statId(path);
    return corruptError(llvm::formatv("cache DB {0} is not a regular file", path).str());
  }

  llvm::Expected<std::unique_ptr<sql::Connection>> opened =
      sql::Connection::open(path, kOpenFlags | SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, path);
  if (!opened)
    return opened.takeError();
  std::unique_ptr<sql::Connection> connection = std::move(*opened);
  file = connection->file = statId(path); // under the lock: the file we opened
  sql::Connection &c = *connection;

  sqlite3_busy_timeout(c.raw(),
                       static_cast<int>(std::min<int64_t>(config_.busyTimeout.count(), 1000)));
  // Never delete -wal/-shm on close: SQLite deletes them by name, and after a corrupt DB
  // has been moved aside that name belongs to the rebuilt DB.
  int persistWal = 1;
  sqlite3_file_control(c.raw(), "main", SQLITE_FCNTL_PERSIST_WAL, &persistWal);

  // Look before touching anything: a newer or foreign file must be left as it is.
  auto probe = [&]() -> llvm::Expected<schema::Probe> {
    std::optional<schema::Probe> found;
    if (llvm::Error error = sql::retryWhileBusy(deadline, [&]() -> llvm::Error {
          llvm::Expected<schema::Probe> probed = schema::probeConsistently(c);
          if (!probed) {
            // A plain SQLITE_ERROR this early ("unsupported file format", a schema this
            // SQLite cannot parse) means the file cannot be read: as good as corrupt.
            llvm::Error error = probed.takeError();
            if (sql::sqliteCode(error) == SQLITE_ERROR)
              return corruptError(llvm::toString(std::move(error)));
            return error;
          }
          found = *probed;
          return llvm::Error::success();
        }))
      return std::move(error);
    return *found;
  };
  llvm::Expected<schema::Probe> found = probe();
  if (!found)
    return found.takeError();
  auto newer = [&]() -> llvm::Error {
    std::lock_guard<std::mutex> guard(mu_);
    note_ = llvm::formatv("schema version {0} is newer than this build ({1})", found->version,
                          schema::kCurrentVersion);
    return makeError(ErrorCode::Cache, "cache DB {0}: {1}", path, note_);
  };
  schemaVersion_ = found->version;
  if (found->verdict == schema::Verdict::Newer)
    return newer();
  if (found->verdict == schema::Verdict::Foreign)
    return corruptError(llvm::formatv("cache DB {0}: {1}", path, found->detail).str());

  bool empty = found->verdict == schema::Verdict::Empty;
  if (llvm::Error error = sql::retryWhileBusy(deadline, [&]() -> llvm::Error {
        if (empty) // before the first table: lets eviction give space back to the file system
          if (llvm::Error error = c.exec("PRAGMA auto_vacuum = INCREMENTAL"))
            return error;
        llvm::Expected<std::string> mode = c.queryText("PRAGMA journal_mode = WAL");
        if (!mode)
          return mode.takeError();
        return c.exec("PRAGMA synchronous = FULL; PRAGMA journal_size_limit = 16777216");
      })) {
    // SQLite refuses to write a file whose header asks for a newer file format; when
    // the file system would let us write, that header is damage.
    if (sql::sqliteCode(error) == SQLITE_READONLY && access(path.c_str(), W_OK) == 0)
      return corruptError(llvm::toString(std::move(error)));
    return std::move(error);
  }
  if (found->verdict == schema::Verdict::Current)
    return std::move(connection);

  if (llvm::Error error = sql::retryWhileBusy(deadline, [&] {
        return sql::transaction(c, sql::TxKind::Write, schema::createOrMigrate);
      }))
    return std::move(error);
  found = probe();
  if (!found)
    return found.takeError();
  schemaVersion_ = found->version;
  if (found->verdict == schema::Verdict::Current)
    return std::move(connection);
  if (found->verdict == schema::Verdict::Newer) // a newer build got there first
    return newer();
  return corruptError(llvm::formatv("cache DB {0}: schema could not be created", path).str());
}

llvm::Expected<std::unique_ptr<sql::Connection>> Store::connectShipped() {
  const std::string &path = config_.path;
  if (shippedUri_.empty()) {
    // First open: decide how to read it from what the file is, without SQLite's help.
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      return corruptError(llvm::formatv("cannot read: {0}", strerror(errno)).str());
    if (!S_ISREG(st.st_mode))
      return corruptError("not a regular file");
    char header[100] = {};
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? ::read(fd, header, sizeof header) : -1;
    if (fd >= 0)
      ::close(fd);
    if (got != static_cast<ssize_t>(sizeof header) ||
        std::memcmp(header, "SQLite format 3", 16) != 0)
      return corruptError("not an SQLite database");
    // Bytes 18-19 are 2 for WAL: reading a WAL file without write access needs -shm
    // files, so it is read as an immutable snapshot instead.
    bool wal = header[18] == 2 || header[19] == 2;
    bool immutable =
        config_.immutable || wal || access(path.c_str(), W_OK) != 0 || onReadOnlyFilesystem(path);
    if (wal) {
      std::string note = "in WAL mode, read as an immutable snapshot (ship files written by "
                         "`flashjit cache export`)";
      warn(llvm::formatv("shipped cache DB {0} is {1}", path, note).str());
      std::lock_guard<std::mutex> guard(mu_);
      note_ = note;
    }
    shippedUri_ = sql::fileUri(path, immutable ? "mode=ro&immutable=1" : "mode=ro");
  }
  llvm::Expected<std::unique_ptr<sql::Connection>> opened =
      sql::Connection::open(shippedUri_, kOpenFlags | SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, path);
  if (!opened)
    return opened.takeError();
  std::unique_ptr<sql::Connection> connection = std::move(*opened);
  sqlite3_busy_timeout(connection->raw(), 1000);
  llvm::Expected<schema::Probe> found = schema::probeConsistently(*connection);
  if (!found)
    return found.takeError();
  switch (found->verdict) {
  case schema::Verdict::Current:
  case schema::Verdict::Older:
    schemaVersion_ = found->version;
    return std::move(connection);
  case schema::Verdict::Newer:
    schemaVersion_ = found->version;
    return corruptError(llvm::formatv("schema version {0} is newer than this build ({1})",
                                      found->version, schema::kCurrentVersion)
                            .str());
  case schema::Verdict::Empty:
    return corruptError("not a flashjit cache (empty)");
  case schema::Verdict::Foreign:
    break;
  }
  return corruptError(found->detail);
}

llvm::Expected<std::unique_ptr<sql::Connection>> Store::connectMemory() {
  llvm::Expected<std::unique_ptr<sql::Connection>> opened = sql::Connection::open(
      ":memory:", kOpenFlags | SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, ":memory:");
  if (!opened)
    return opened.takeError();
  sql::Connection &c = **opened;
  if (llvm::Error error = c.exec("PRAGMA auto_vacuum = INCREMENTAL"))
    return std::move(error);
  if (llvm::Error error = sql::transaction(c, sql::TxKind::Write, schema::createOrMigrate))
    return std::move(error);
  schemaVersion_ = schema::kCurrentVersion;
  return opened;
}

// ---- a corrupt user DB ------------------------------------------------------------------

void Store::moveAside(const std::string &reason, sql::FileId broken) {
  const std::string &path = config_.path;
  std::string movedTo;
  std::string failure;
  {
    FileLock lock(path + ".lock", LOCK_EX);
    sql::FileId current = statId(path);
    // Another process may already have moved it aside and built a new one: keep that.
    if (current.known && (!broken.known || current == broken)) {
      std::string base = path + ".corrupt-" + timestamp();
      std::string target = base;
      for (int n = 1; llvm::sys::fs::exists(target); ++n)
        target = base + "." + std::to_string(n);
      if (::rename(path.c_str(), target.c_str()) == 0) {
        movedTo = target;
        for (const char *suffix : {"-wal", "-shm", "-journal"})
          ::rename((path + suffix).c_str(), (target + suffix).c_str());
      } else {
        failure = strerror(errno);
      }
    }
  }
  std::vector<std::unique_ptr<sql::Connection>> stale;
  {
    std::lock_guard<std::mutex> guard(mu_);
    ++generation_;
    stale.swap(idle_);
  }
  stale.clear();
  if (!movedTo.empty())
    warn(llvm::formatv("cache DB {0} is unusable ({1}); moved aside to {2} and rebuilt", path,
                       reason, movedTo)
             .str());
  else if (!failure.empty())
    warn(llvm::formatv("cache DB {0} is unusable ({1}) and could not be moved aside: {2}", path,
                       reason, failure)
             .str());
}

} // namespace flashjit::cache
