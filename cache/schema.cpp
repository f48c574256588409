#include "cache/schema.h"

#include "cache/rows.h"

#include "support/error.h"

#include "llvm/ADT/StringSet.h"

#include <sqlite3.h>

#include <optional>

namespace flashjit::cache::schema {
namespace {

// Step i turns version i into version i + 1. Never edit a step once released: add one.
// Blobs are the last columns so that scans of the metadata never read them.
const char *const kSteps[] = {
    // 0 -> 1
    R"sql(
CREATE TABLE binaries(
  key           TEXT PRIMARY KEY NOT NULL, -- sha256 hex, computed by the caller
  key_text      TEXT NOT NULL,             -- readable: spec/config
  target        TEXT NOT NULL,             -- exact target, e.g. sm_90a
  nvrtc_version TEXT NOT NULL,
  registers     INTEGER NOT NULL,
  spill_bytes   INTEGER NOT NULL,
  shared_bytes  INTEGER NOT NULL,
  compile_ms    REAL NOT NULL,
  created_at    INTEGER NOT NULL,          -- unix seconds
  checksum      TEXT NOT NULL,             -- xxhash64 of every field above and below
  cubin         BLOB NOT NULL,
  ptx           BLOB NOT NULL
);
CREATE INDEX binaries_by_text ON binaries(key_text);
CREATE TABLE tunings(
  key                   TEXT PRIMARY KEY NOT NULL, -- sha256 hex of key_text
  key_text              TEXT NOT NULL,             -- spec|bucket|device|gen=..|protocol=..
  spec                  TEXT NOT NULL,
  bucket                TEXT NOT NULL,
  device_key            TEXT NOT NULL,
  generator_fingerprint TEXT NOT NULL,
  protocol_version      INTEGER NOT NULL,
  config                TEXT NOT NULL,             -- the winner
  binary_key            TEXT NOT NULL,
  median_us             REAL NOT NULL,
  tflops                REAL NOT NULL,
  candidates_json       TEXT NOT NULL,
  clocks_json           TEXT NOT NULL,
  tuned_at              INTEGER NOT NULL,
  flashjit_version      TEXT NOT NULL,
  checksum              TEXT NOT NULL
);
CREATE INDEX tunings_by_family
  ON tunings(spec, device_key, generator_fingerprint, protocol_version);
CREATE INDEX tunings_by_binary ON tunings(binary_key);
)sql",
    // 1 -> 2
    R"sql(
CREATE TABLE binary_use(
  key       TEXT PRIMARY KEY NOT NULL,
  last_used INTEGER NOT NULL, -- unix milliseconds
  bytes     INTEGER NOT NULL
);
CREATE INDEX binary_use_by_time ON binary_use(last_used);
INSERT OR IGNORE INTO binary_use(key, last_used, bytes)
  SELECT key, created_at * 1000, length(cubin) + length(ptx) FROM binaries;
)sql",
};
static_assert(sizeof(kSteps) / sizeof(kSteps[0]) == kCurrentVersion,
              "one migration step per schema version");

// The tables each version must have.
bool hasTablesOf(const llvm::StringSet<> &tables, int version) {
  if (version >= 1 && !(tables.count("binaries") && tables.count("tunings")))
    return false;
  if (version >= 2 && !tables.count("binary_use"))
    return false;
  return true;
}

} // namespace

llvm::Expected<Probe> probe(sql::Connection &connection) {
  llvm::Expected<int64_t> applicationId = connection.queryInt("PRAGMA application_id");
  if (!applicationId)
    return applicationId.takeError();
  llvm::Expected<int64_t> version = connection.queryInt("PRAGMA user_version");
  if (!version)
    return version.takeError();
  llvm::StringSet<> tables;
  {
    llvm::Expected<sql::Statement> list =
        connection.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'");
    if (!list)
      return list.takeError();
    while (true) {
      llvm::Expected<bool> row = list->step();
      if (!row)
        return row.takeError();
      if (!*row)
        break;
      tables.insert(list->text(0));
    }
  }

  // Every flashjit DB is UTF-8; another encoding in the header is damage, and would make
  // every key read back in the wrong bytes.
  llvm::Expected<std::string> encoding = connection.queryText("PRAGMA encoding");
  if (!encoding)
    return encoding.takeError();

  Probe result;
  result.version = static_cast<int>(*version);
  if (*applicationId == 0 && *version == 0 && tables.empty()) {
    result.verdict = Verdict::Empty;
  } else if (*encoding != "UTF-8") {
    result.detail = "text encoding " + *encoding + " (flashjit writes UTF-8)";
  } else if (*applicationId != kApplicationId) {
    result.detail = llvm::formatv("not a flashjit cache (application_id {0:x})", *applicationId);
  } else if (*version > kCurrentVersion) {
    result.verdict = Verdict::Newer;
  } else if (*version < kOldestReadable || !hasTablesOf(tables, result.version)) {
    result.detail = llvm::formatv("schema version {0} with missing tables", *version);
  } else if (llvm::Error damaged = rows::checkColumns(connection, result.version)) {
    int code = sql::sqliteCode(damaged);
    if (sql::isBusy(code) || sql::isCorruption(code))
      return std::move(damaged);
    result.detail = "damaged schema: " + llvm::toString(std::move(damaged));
  } else {
    result.verdict = *version == kCurrentVersion ? Verdict::Current : Verdict::Older;
  }
  return result;
}

llvm::Expected<Probe> probeConsistently(sql::Connection &connection) {
  std::optional<Probe> found;
  if (llvm::Error error =
          sql::transaction(connection, sql::TxKind::Read, [&](sql::Connection &c) -> llvm::Error {
            llvm::Expected<Probe> probed = probe(c);
            if (!probed)
              return probed.takeError();
            found = *probed;
            return llvm::Error::success();
          }))
    return std::move(error);
  return *found;
}

llvm::Error createOrMigrate(sql::Connection &connection) {
  llvm::Expected<Probe> found = probe(connection);
  if (!found)
    return found.takeError();
  if (found->verdict != Verdict::Empty && found->verdict != Verdict::Older)
    return llvm::Error::success(); // someone else did it, or not ours to touch
  int from = found->verdict == Verdict::Empty ? 0 : found->version;
  for (int step = from; step < kCurrentVersion; ++step)
    if (llvm::Error error = connection.exec(kSteps[step]))
      return error;
  return connection.exec(llvm::formatv("PRAGMA application_id = {0}; PRAGMA user_version = {1}",
                                       kApplicationId, kCurrentVersion)
                             .str());
}

std::string createStatementsForVersion(int version) {
  std::string statements;
  for (int step = 0; step < version && step < kCurrentVersion; ++step)
    statements += kSteps[step];
  statements += llvm::formatv("PRAGMA application_id = {0}; PRAGMA user_version = {1};",
                              kApplicationId, version)
                    .str();
  return statements;
}

} // namespace flashjit::cache::schema
