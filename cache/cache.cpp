#include "cache/impl.h"

#include "support/env.h"
#include "support/error.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <sqlite3.h>

#include <cmath>
#include <ctime>

namespace flashjit::cache {
namespace {

std::string absolutePath(llvm::StringRef path) {
  llvm::SmallString<256> absolute(path);
  llvm::sys::fs::make_absolute(absolute);
  return std::string(absolute);
}

llvm::Error checkField(llvm::StringRef name, llvm::StringRef value) {
  if (value.empty())
    return makeError(ErrorCode::InvalidValue, "cache: {0} is empty", name);
  if (value.contains('|'))
    return makeError(ErrorCode::InvalidValue, "cache: {0} '{1}' contains '|'", name, value);
  return llvm::Error::success();
}

llvm::Error checkNumber(llvm::StringRef name, double value) {
  if (!std::isfinite(value))
    return makeError(ErrorCode::InvalidValue, "cache: {0} is not finite", name);
  return llvm::Error::success();
}

llvm::Error validate(const TuningKey &k) {
  for (auto [name, value] : {std::pair<const char *, const std::string *>{"spec", &k.spec},
                             {"bucket", &k.bucket},
                             {"device key", &k.deviceKey},
                             {"generator fingerprint", &k.generatorFingerprint}})
    if (llvm::Error error = checkField(name, *value))
      return error;
  return llvm::Error::success();
}

llvm::Error validate(const BinaryRow &b) {
  for (auto [name, value] : {std::pair<const char *, const std::string *>{"binary key", &b.key},
                             {"binary key text", &b.keyText},
                             {"target", &b.target},
                             {"NVRTC version", &b.nvrtcVersion}})
    if (value->empty())
      return makeError(ErrorCode::InvalidValue, "cache: {0} is empty", name);
  return checkNumber("compile time", b.compileMs);
}

llvm::Error validate(const TuningRow &t) {
  if (llvm::Error error = validate(t.key))
    return error;
  if (t.config.empty() || t.binaryKey.empty())
    return makeError(ErrorCode::InvalidValue, "cache: tuning row for {0} has no winner",
                     t.key.text());
  if (llvm::Error error = checkNumber("median time", t.medianUs))
    return error;
  return checkNumber("throughput", t.tflops);
}

// Reads the rows just written, inside the publishing transaction. A damaged b-tree can
// accept a write and then answer a read of it with another row; SQLite need not notice,
// but this does, and the store then rebuilds the DB and publishes again. So an
// acknowledged publish is readable at the moment it is acknowledged.
llvm::Error readBack(sql::Connection &c, const BinaryRow *b, const TuningRow *t) {
  bool ok = true;
  if (b) {
    llvm::Expected<std::optional<rows::Checked<BinaryRow>>> got = rows::selectBinary(c, b->key);
    if (!got)
      return got.takeError();
    ok = *got && (*got)->valid && (*got)->storedChecksum == rows::checksum(*b);
  }
  if (t && ok) {
    llvm::Expected<std::optional<rows::Checked<TuningRow>>> got =
        rows::selectTuning(c, t->key.hash());
    if (!got)
      return got.takeError();
    ok = *got && (*got)->valid && (*got)->storedChecksum == rows::checksum(*t);
  }
  if (ok)
    return llvm::Error::success();
  return llvm::make_error<sql::SqliteError>(
      SQLITE_CORRUPT,
      llvm::formatv("cache DB {0}: a row just written read back differently", c.label()).str());
}

int64_t now() { return static_cast<int64_t>(time(nullptr)); }
int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One query's result in a read transaction on `store`. The query may run more than once
// (Store::run retries), and not at all on a shipped store disabled by a failure: the
// result is then T's empty value (a miss).
template <typename T, typename Query> llvm::Expected<T> readOnce(Store &store, Query query) {
  T out{};
  if (llvm::Error error = store.run(sql::TxKind::Read, [&](sql::Connection &c) -> llvm::Error {
        llvm::Expected<T> result = query(c);
        if (!result)
          return result.takeError();
        out = std::move(*result);
        return llvm::Error::success();
      }))
    return std::move(error);
  return std::move(out);
}

} // namespace

llvm::StringRef sourceName(Source source) {
  switch (source) {
  case Source::User: return "user";
  case Source::Shipped: return "shipped";
  case Source::System: return "system";
  }
  return "?";
}

// ---- Impl -------------------------------------------------------------------------------

std::vector<Store *> Cache::Impl::order() const {
  std::vector<Store *> stores{user.get()};
  for (const auto &store : shipped)
    if (store->usable())
      stores.push_back(store.get());
  return stores;
}

void Cache::Impl::warn(llvm::StringRef message) {
  std::lock_guard<std::mutex> lock(warnMutex_);
  if (options.warn)
    options.warn(message);
  else
    llvm::errs() << "flashjit: warning: " << message << "\n";
}

void Cache::Impl::dropBadBinary(Store &store, const rows::Checked<BinaryRow> &bad) {
  warn(llvm::formatv("cache DB {0}: binary {1} ({2}) does not match its checksum; treated as "
                     "a miss",
                     store.path(), bad.row.key, bad.row.keyText)
           .str());
  if (store.kind() == StoreKind::Shipped)
    return;
  if (llvm::Error error = store.run(sql::TxKind::Write, [&](sql::Connection &c) {
        return rows::deleteBinaryIf(c, bad.row.key, bad.storedChecksum);
      }))
    warn(llvm::toString(std::move(error)));
}

void Cache::Impl::dropBadTuning(Store &store, const rows::Checked<TuningRow> &bad) {
  warn(llvm::formatv("cache DB {0}: tuning row {1} does not match its checksum; treated as a "
                     "miss",
                     store.path(), bad.row.key.text())
           .str());
  if (store.kind() == StoreKind::Shipped)
    return;
  std::string keyHash = bad.row.key.hash();
  if (llvm::Error error = store.run(sql::TxKind::Write, [&](sql::Connection &c) {
        return rows::deleteTuningIf(c, keyHash, bad.storedChecksum);
      }))
    warn(llvm::toString(std::move(error)));
}

void Cache::Impl::noteUse(const Store &store, llvm::StringRef key) {
  if (store.kind() == StoreKind::Shipped)
    return;
  std::lock_guard<std::mutex> lock(usesMutex_);
  uses_[key] = nowMs();
}

llvm::StringMap<int64_t> Cache::Impl::takeUses() {
  std::lock_guard<std::mutex> lock(usesMutex_);
  return std::exchange(uses_, {});
}

llvm::Error Cache::Impl::flushUses(sql::Connection &c, const llvm::StringMap<int64_t> &uses) {
  for (const auto &use : uses) {
    llvm::Expected<sql::Statement> s =
        c.prepare("UPDATE binary_use SET last_used = max(last_used, ?2) WHERE key = ?1");
    if (!s)
      return s.takeError();
    s->bind(1, use.getKey()).bind(2, use.getValue());
    if (llvm::Error error = s->run())
      return error;
  }
  return llvm::Error::success();
}

// ---- Cache ------------------------------------------------------------------------------

Cache::Cache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Cache::~Cache() {
  // Record this process's binary uses; a busy DB must not hold up the exit for long.
  llvm::StringMap<int64_t> uses = impl_->takeUses();
  if (!uses.empty())
    llvm::consumeError(impl_->user->run(
        sql::TxKind::Write, [&](sql::Connection &c) { return impl_->flushUses(c, uses); },
        std::chrono::milliseconds(2000)));
}

llvm::Expected<std::unique_ptr<Cache>> Cache::open(CacheOptions options) {
  if (options.busyTimeoutMs < 0)
    return makeError(ErrorCode::InvalidValue, "cache: negative busy timeout");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl &cache = *impl;
  auto warn = [&cache](llvm::StringRef message) { cache.warn(message); };
  StoreConfig base;
  base.busyTimeout = std::chrono::milliseconds(cache.options.busyTimeoutMs);
  base.warn = warn;

  std::string userPath = cache.options.userPath ? *cache.options.userPath : defaultUserCachePath();
  if (!userPath.empty()) {
    StoreConfig config = base;
    config.kind = StoreKind::User;
    config.path = absolutePath(userPath);
    llvm::Expected<std::unique_ptr<Store>> store = Store::open(config);
    DatabaseInfo skipped{config.path, Source::User, false, 0, ""};
    if (!store) {
      skipped.note = llvm::toString(store.takeError());
      warn(llvm::formatv("cannot use the user cache DB {0} ({1}); results are kept in memory "
                         "only",
                         config.path, skipped.note)
               .str());
      cache.userSkipped = skipped;
    } else if (!(*store)->usable()) {
      skipped.note = (*store)->note();
      skipped.schemaVersion = (*store)->schemaVersion();
      warn(llvm::formatv("user cache DB {0} skipped: {1}; results are kept in memory only",
                         config.path, skipped.note)
               .str());
      cache.userSkipped = skipped;
    } else {
      cache.user = std::move(*store);
    }
  }
  if (!cache.user) {
    StoreConfig config = base;
    config.kind = StoreKind::Memory;
    llvm::Expected<std::unique_ptr<Store>> store = Store::open(config);
    if (!store)
      return store.takeError();
    cache.user = std::move(*store);
  }

  std::vector<std::string> systemPaths =
      cache.options.systemPaths ? *cache.options.systemPaths : defaultSystemCachePaths();
  auto openReadOnly = [&](const std::string &path, bool system) -> llvm::Error {
    StoreConfig config = base;
    config.kind = StoreKind::Shipped;
    config.system = system;
    config.path = absolutePath(path);
    config.immutable = cache.options.shippedImmutable;
    llvm::Expected<std::unique_ptr<Store>> store = Store::open(config);
    if (!store)
      return store.takeError(); // shipped stores report problems by not being usable
    cache.shipped.push_back(std::move(*store));
    return llvm::Error::success();
  };
  for (const std::string &path : cache.options.shippedPaths)
    if (llvm::Error error = openReadOnly(path, false))
      return std::move(error);
  for (const std::string &path : systemPaths)
    if (llvm::Error error = openReadOnly(path, true))
      return std::move(error);
  return std::unique_ptr<Cache>(new Cache(std::move(impl)));
}

bool Cache::persistent() const { return impl_->user->kind() == StoreKind::User; }

std::string Cache::userPath() const { return persistent() ? impl_->user->path() : ""; }

std::vector<DatabaseInfo> Cache::databases() const {
  std::vector<DatabaseInfo> infos;
  auto describe = [&](const Store &store) {
    DatabaseInfo info;
    info.path = store.path();
    info.source = Impl::sourceOf(store);
    info.usable = store.usable();
    info.schemaVersion = store.schemaVersion();
    info.note = store.note();
    infos.push_back(std::move(info));
  };
  if (impl_->userSkipped)
    infos.push_back(*impl_->userSkipped);
  describe(*impl_->user);
  for (const auto &store : impl_->shipped)
    describe(*store);
  return infos;
}

llvm::Expected<std::optional<Found<BinaryRow>>> Cache::findBinary(llvm::StringRef key) {
  for (Store *store : impl_->order()) {
    auto read = readOnce<std::optional<rows::Checked<BinaryRow>>>(
        *store, [&](sql::Connection &c) { return rows::selectBinary(c, key); });
    if (!read)
      return read.takeError();
    std::optional<rows::Checked<BinaryRow>> &found = *read;
    if (!found)
      continue;
    if (!found->valid) {
      impl_->dropBadBinary(*store, *found);
      continue; // a later DB may hold a good copy
    }
    impl_->noteUse(*store, key);
    return Found<BinaryRow>{std::move(found->row), Impl::sourceOf(*store), store->path()};
  }
  return std::nullopt;
}

llvm::Expected<std::optional<Found<TuningRow>>> Cache::findTuning(const TuningKey &key) {
  llvm::Expected<std::optional<Tuned>> tuned = findTuned(key);
  if (!tuned)
    return tuned.takeError();
  if (!*tuned)
    return std::nullopt;
  return std::move((*tuned)->tuning);
}

llvm::Expected<std::optional<Tuned>> Cache::findTuned(const TuningKey &key) {
  std::string keyHash = key.hash();
  for (Store *store : impl_->order()) {
    std::optional<rows::Checked<TuningRow>> tuning;
    std::optional<rows::Checked<BinaryRow>> binary;
    // One read transaction: the row and the binary it names as of the same moment.
    if (llvm::Error error = store->run(sql::TxKind::Read, [&](sql::Connection &c) -> llvm::Error {
          tuning.reset();
          binary.reset();
          llvm::Expected<std::optional<rows::Checked<TuningRow>>> t =
              rows::selectTuning(c, keyHash);
          if (!t)
            return t.takeError();
          tuning = std::move(*t);
          if (!tuning || !tuning->valid)
            return llvm::Error::success();
          llvm::Expected<std::optional<rows::Checked<BinaryRow>>> b =
              rows::selectBinary(c, tuning->row.binaryKey);
          if (!b)
            return b.takeError();
          binary = std::move(*b);
          return llvm::Error::success();
        }))
      return std::move(error);
    if (!tuning)
      continue;
    if (!tuning->valid) {
      impl_->dropBadTuning(*store, *tuning);
      continue;
    }
    Tuned result{{std::move(tuning->row), Impl::sourceOf(*store), store->path()}, std::nullopt};
    if (binary && binary->valid) {
      impl_->noteUse(*store, binary->row.key);
      result.binary =
          Found<BinaryRow>{std::move(binary->row), Impl::sourceOf(*store), store->path()};
    } else {
      if (binary)
        impl_->dropBadBinary(*store, *binary);
      llvm::Expected<std::optional<Found<BinaryRow>>> elsewhere =
          findBinary(result.tuning.row.binaryKey);
      if (!elsewhere)
        return elsewhere.takeError();
      result.binary = std::move(*elsewhere);
    }
    return result;
  }
  return std::nullopt;
}

llvm::Expected<std::vector<Found<TuningRow>>> Cache::tuningsFor(const TuningKey &family) {
  std::vector<Found<TuningRow>> result;
  llvm::StringSet<> seen;
  for (Store *store : impl_->order()) {
    auto found = readOnce<std::vector<rows::Checked<TuningRow>>>(
        *store, [&](sql::Connection &c) { return rows::selectTunings(c, &family); });
    if (!found)
      return found.takeError();
    for (rows::Checked<TuningRow> &row : *found) {
      if (!row.valid)
        impl_->dropBadTuning(*store, row);
      else if (seen.insert(row.row.key.hash()).second)
        result.push_back({std::move(row.row), Impl::sourceOf(*store), store->path()});
    }
  }
  return result;
}

llvm::Expected<std::vector<Found<TuningRow>>> Cache::allTunings() {
  std::vector<Found<TuningRow>> result;
  for (Store *store : impl_->order()) {
    auto found = readOnce<std::vector<rows::Checked<TuningRow>>>(
        *store, [&](sql::Connection &c) { return rows::selectTunings(c, nullptr); });
    if (!found)
      return found.takeError();
    for (rows::Checked<TuningRow> &row : *found) {
      if (!row.valid)
        impl_->dropBadTuning(*store, row);
      else
        result.push_back({std::move(row.row), Impl::sourceOf(*store), store->path()});
    }
  }
  return result;
}

llvm::Error Cache::publish(const BinaryRow *binary, const TuningRow *tuning) {
  if (!binary && !tuning)
    return makeError(ErrorCode::InvalidValue, "cache: nothing to publish");
  std::optional<BinaryRow> b;
  std::optional<TuningRow> t;
  int64_t time = now();
  if (binary) {
    if (llvm::Error error = validate(*binary))
      return error;
    b = *binary;
    if (!b->createdAt)
      b->createdAt = time;
  }
  if (tuning) {
    if (llvm::Error error = validate(*tuning))
      return error;
    t = *tuning;
    if (!t->tunedAt)
      t->tunedAt = time;
    if (t->flashjitVersion.empty())
      t->flashjitVersion = flashjitVersion();
  }
  llvm::StringMap<int64_t> uses = impl_->takeUses();
  uint64_t maxBytes = impl_->options.maxUserBytes;
  return impl_->user->run(sql::TxKind::Write, [&](sql::Connection &c) -> llvm::Error {
    if (llvm::Error error = impl_->flushUses(c, uses))
      return error;
    if (b)
      if (llvm::Error error = rows::upsertBinary(c, *b, nowMs()))
        return error;
    if (t)
      if (llvm::Error error = rows::upsertTuning(c, *t))
        return error;
    if (llvm::Error error = readBack(c, b ? &*b : nullptr, t ? &*t : nullptr))
      return error;
    return evictUnreferenced(c, maxBytes, b ? llvm::StringRef(b->key) : llvm::StringRef());
  });
}

llvm::Error Cache::clear() {
  impl_->takeUses();
  return impl_->user->run(sql::TxKind::Write, [](sql::Connection &c) {
    return c.exec("DELETE FROM tunings; DELETE FROM binaries; DELETE FROM binary_use; "
                  "PRAGMA incremental_vacuum;");
  });
}

} // namespace flashjit::cache
