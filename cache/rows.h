// Rows <-> SQL: the checksums that cover every stored field, reads that report whether a
// row still matches its checksum, and the writes shared by publish, export and merge.
// Private to cache/.
#pragma once

#include "cache/cache.h"
#include "cache/sqlite.h"

#include <optional>
#include <string>

namespace flashjit::cache::rows {

// xxhash64 (hex) of a canonical encoding of every stored field of the row (blobs too):
// a flipped bit anywhere in a row makes it a miss, never a wrong answer.
std::string checksum(const BinaryRow &row);
std::string checksum(const TuningRow &row);

// A row as read, with the verdict of its checksum.
template <typename Row> struct Checked {
  Row row;
  bool valid = false;
  std::string storedChecksum;
};

llvm::Expected<std::optional<Checked<BinaryRow>>> selectBinary(sql::Connection &c,
                                                               llvm::StringRef key);
llvm::Expected<std::optional<Checked<TuningRow>>> selectTuning(sql::Connection &c,
                                                               llvm::StringRef keyHash);
// Rows of one (spec, device, fingerprint, protocol) family, or every row when null.
llvm::Expected<std::vector<Checked<TuningRow>>> selectTunings(sql::Connection &c,
                                                              const TuningKey *family);
// Every binary, one at a time (blobs can be large).
llvm::Error forEachBinary(sql::Connection &c,
                          llvm::function_ref<llvm::Error(Checked<BinaryRow> &&)> visit);

// Fails unless every column these functions use exists in a DB of schema `version`: a
// damaged schema text (a flipped bit in sqlite_schema) must read as corruption.
llvm::Error checkColumns(sql::Connection &c, int version);

// Inserts or replaces. Rows must be complete (createdAt, tunedAt, version filled).
// `lastUsedMs`: unix milliseconds, the binary's place in the LRU order.
llvm::Error upsertBinary(sql::Connection &c, const BinaryRow &row, int64_t lastUsedMs);
llvm::Error upsertTuning(sql::Connection &c, const TuningRow &row);
// Deletes a row only if it still has the checksum seen when it was found bad, so that a
// good row written meanwhile by another process survives.
llvm::Error deleteBinaryIf(sql::Connection &c, llvm::StringRef key, llvm::StringRef checksum);
llvm::Error deleteTuningIf(sql::Connection &c, llvm::StringRef keyHash, llvm::StringRef checksum);

} // namespace flashjit::cache::rows
