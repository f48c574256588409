// The cache's SQLite schema: versions, creation, migration, and how a file found on disk
// is classified before it is used. Private to cache/.
#pragma once

#include "cache/sqlite.h"

#include <cstdint>
#include <string>

namespace flashjit::cache::schema {

// PRAGMA user_version of the schema this build writes. History:
//   1: binaries + tunings.
//   2: + binary_use (last use and size per binary, for LRU eviction; kept apart from the
//      blobs so that recording a use does not rewrite a cubin).
constexpr int kCurrentVersion = 2;
// The oldest version this build can read without migrating (shipped DBs are never
// migrated: they are read-only). Every version so far only adds tables.
constexpr int kOldestReadable = 1;
// PRAGMA application_id of every flashjit DB ("FJIT"): tells ours from other SQLite files.
constexpr int64_t kApplicationId = 0x464A4954;

// What a DB file holds, as far as the cache is concerned.
enum class Verdict {
  Empty,   // a new file: create the schema
  Current, // ready
  Older,   // ours, an older version: migrate (user DB) or read as is (shipped)
  Newer,   // ours, from a newer build: skip
  Foreign, // not a flashjit cache (or its tables are missing): corrupt for our purposes
};

struct Probe {
  Verdict verdict = Verdict::Foreign;
  int version = 0;
  std::string detail; // why Foreign
};

// Reads application_id, user_version and the table list. Fails on unreadable files.
// Call inside a transaction: read one by one, they could straddle another process's
// schema creation and make a new DB look foreign.
llvm::Expected<Probe> probe(sql::Connection &connection);
// probe() in a read transaction of its own.
llvm::Expected<Probe> probeConsistently(sql::Connection &connection);

// Creates the current schema in an empty DB or migrates an older one to it. Must run
// inside a write transaction; re-probes first, so concurrent openers do the work once.
llvm::Error createOrMigrate(sql::Connection &connection);

// Statements that create version `version` from scratch, for tests that fabricate old DBs.
std::string createStatementsForVersion(int version);

} // namespace flashjit::cache::schema
