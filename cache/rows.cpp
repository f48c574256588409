#include "cache/rows.h"

#include "support/hash.h"

#include <cstring>

namespace flashjit::cache::rows {
namespace {

// Fields as netstrings ("<length>:<bytes>,") so that no two rows encode alike.
class Encoder {
public:
  Encoder &add(llvm::StringRef bytes) {
    buffer_ += std::to_string(bytes.size());
    buffer_ += ':';
    buffer_.append(bytes.data(), bytes.size());
    buffer_ += ',';
    return *this;
  }
  Encoder &add(int64_t value) { return add(llvm::StringRef(std::to_string(value))); }
  // Doubles by bit pattern; -0 as +0 because SQLite may store an integral REAL as an
  // integer and read it back without its sign.
  Encoder &add(double value) {
    if (value == 0)
      value = 0;
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return add(static_cast<int64_t>(bits));
  }
  std::string hash() const { return xxhashHex(buffer_); }
  void reserve(size_t bytes) { buffer_.reserve(bytes); }

private:
  std::string buffer_;
};

constexpr const char *kBinaryColumns =
    "key, key_text, target, nvrtc_version, registers, spill_bytes, shared_bytes, compile_ms, "
    "created_at, checksum, cubin, ptx";
constexpr const char *kTuningColumns =
    "spec, bucket, device_key, generator_fingerprint, protocol_version, config, binary_key, "
    "median_us, tflops, candidates_json, clocks_json, tuned_at, flashjit_version, checksum, key";

Checked<BinaryRow> readBinary(const sql::Statement &s) {
  Checked<BinaryRow> out;
  BinaryRow &r = out.row;
  r.key = s.text(0);
  r.keyText = s.text(1);
  r.target = s.text(2);
  r.nvrtcVersion = s.text(3);
  r.registers = static_cast<int>(s.integer(4));
  r.spillBytes = static_cast<int>(s.integer(5));
  r.sharedBytes = static_cast<int>(s.integer(6));
  r.compileMs = s.real(7);
  r.createdAt = s.integer(8);
  out.storedChecksum = s.text(9);
  r.cubin = s.text(10);
  r.ptx = s.text(11);
  out.valid = out.storedChecksum == checksum(r);
  return out;
}

Checked<TuningRow> readTuning(const sql::Statement &s) {
  Checked<TuningRow> out;
  TuningRow &r = out.row;
  r.key.spec = s.text(0);
  r.key.bucket = s.text(1);
  r.key.deviceKey = s.text(2);
  r.key.generatorFingerprint = s.text(3);
  r.key.protocolVersion = static_cast<int>(s.integer(4));
  r.config = s.text(5);
  r.binaryKey = s.text(6);
  r.medianUs = s.real(7);
  r.tflops = s.real(8);
  r.candidatesJson = s.text(9);
  r.clocksJson = s.text(10);
  r.tunedAt = s.integer(11);
  r.flashjitVersion = s.text(12);
  out.storedChecksum = s.text(13);
  // The stored key must be the hash of the fields read back, or the row answers a
  // question it was not asked.
  out.valid = out.storedChecksum == checksum(r) && s.text(14) == r.key.hash();
  return out;
}

} // namespace

std::string checksum(const BinaryRow &r) {
  Encoder e;
  e.reserve(r.cubin.size() + r.ptx.size() + r.keyText.size() + 256);
  e.add(r.key).add(r.keyText).add(r.target).add(r.nvrtcVersion);
  e.add(int64_t(r.registers)).add(int64_t(r.spillBytes)).add(int64_t(r.sharedBytes));
  e.add(r.compileMs).add(r.createdAt).add(r.cubin).add(r.ptx);
  return e.hash();
}

std::string checksum(const TuningRow &r) {
  Encoder e;
  e.add(r.key.text()).add(r.config).add(r.binaryKey).add(r.medianUs).add(r.tflops);
  e.add(r.candidatesJson).add(r.clocksJson).add(r.tunedAt).add(r.flashjitVersion);
  return e.hash();
}

llvm::Error checkColumns(sql::Connection &c, int version) {
  std::string query = std::string("SELECT ") + kBinaryColumns + " FROM binaries LIMIT 0; " +
                      "SELECT " + kTuningColumns + ", key_text FROM tunings LIMIT 0;";
  if (version >= 2)
    query += "SELECT key, last_used, bytes FROM binary_use LIMIT 0;";
  return c.exec(query);
}

llvm::Expected<std::optional<Checked<BinaryRow>>> selectBinary(sql::Connection &c,
                                                               llvm::StringRef key) {
  llvm::Expected<sql::Statement> s =
      c.prepare(std::string("SELECT ") + kBinaryColumns + " FROM binaries WHERE key = ?1");
  if (!s)
    return s.takeError();
  s->bind(1, key);
  llvm::Expected<bool> row = s->step();
  if (!row)
    return row.takeError();
  if (!*row)
    return std::nullopt;
  return readBinary(*s);
}

llvm::Expected<std::optional<Checked<TuningRow>>> selectTuning(sql::Connection &c,
                                                               llvm::StringRef keyHash) {
  llvm::Expected<sql::Statement> s =
      c.prepare(std::string("SELECT ") + kTuningColumns + " FROM tunings WHERE key = ?1");
  if (!s)
    return s.takeError();
  s->bind(1, keyHash);
  llvm::Expected<bool> row = s->step();
  if (!row)
    return row.takeError();
  if (!*row)
    return std::nullopt;
  return readTuning(*s);
}

llvm::Expected<std::vector<Checked<TuningRow>>> selectTunings(sql::Connection &c,
                                                              const TuningKey *family) {
  std::string query = std::string("SELECT ") + kTuningColumns + " FROM tunings";
  if (family)
    query += " WHERE spec = ?1 AND device_key = ?2 AND generator_fingerprint = ?3"
             " AND protocol_version = ?4";
  query += " ORDER BY key_text";
  llvm::Expected<sql::Statement> s = c.prepare(query);
  if (!s)
    return s.takeError();
  if (family) {
    s->bind(1, family->spec).bind(2, family->deviceKey).bind(3, family->generatorFingerprint);
    s->bind(4, int64_t(family->protocolVersion));
  }
  std::vector<Checked<TuningRow>> rows;
  while (true) {
    llvm::Expected<bool> row = s->step();
    if (!row)
      return row.takeError();
    if (!*row)
      return rows;
    rows.push_back(readTuning(*s));
  }
}

llvm::Error forEachBinary(sql::Connection &c,
                          llvm::function_ref<llvm::Error(Checked<BinaryRow> &&)> visit) {
  llvm::Expected<sql::Statement> s =
      c.prepare(std::string("SELECT ") + kBinaryColumns + " FROM binaries ORDER BY key");
  if (!s)
    return s.takeError();
  while (true) {
    llvm::Expected<bool> row = s->step();
    if (!row)
      return row.takeError();
    if (!*row)
      return llvm::Error::success();
    if (llvm::Error error = visit(readBinary(*s)))
      return error;
  }
}

llvm::Error upsertBinary(sql::Connection &c, const BinaryRow &r, int64_t lastUsed) {
  llvm::Expected<sql::Statement> s =
      c.prepare(std::string("INSERT OR REPLACE INTO binaries(") + kBinaryColumns +
                ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
  if (!s)
    return s.takeError();
  s->bind(1, r.key).bind(2, r.keyText).bind(3, r.target).bind(4, r.nvrtcVersion);
  s->bind(5, int64_t(r.registers)).bind(6, int64_t(r.spillBytes));
  s->bind(7, int64_t(r.sharedBytes)).bind(8, r.compileMs).bind(9, r.createdAt);
  s->bind(10, checksum(r)).bindBlob(11, r.cubin).bindBlob(12, r.ptx);
  if (llvm::Error error = s->run())
    return error;
  llvm::Expected<sql::Statement> use =
      c.prepare("INSERT OR REPLACE INTO binary_use(key, last_used, bytes) VALUES(?1, ?2, ?3)");
  if (!use)
    return use.takeError();
  use->bind(1, r.key).bind(2, lastUsed).bind(3, int64_t(r.cubin.size() + r.ptx.size()));
  return use->run();
}

llvm::Error upsertTuning(sql::Connection &c, const TuningRow &r) {
  llvm::Expected<sql::Statement> s = c.prepare(
      std::string("INSERT OR REPLACE INTO tunings(") + kTuningColumns +
      ", key_text) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
      "?16)");
  if (!s)
    return s.takeError();
  s->bind(1, r.key.spec).bind(2, r.key.bucket).bind(3, r.key.deviceKey);
  s->bind(4, r.key.generatorFingerprint).bind(5, int64_t(r.key.protocolVersion));
  s->bind(6, r.config).bind(7, r.binaryKey).bind(8, r.medianUs).bind(9, r.tflops);
  s->bind(10, r.candidatesJson).bind(11, r.clocksJson).bind(12, r.tunedAt);
  s->bind(13, r.flashjitVersion).bind(14, checksum(r)).bind(15, r.key.hash());
  s->bind(16, r.key.text());
  return s->run();
}

llvm::Error deleteBinaryIf(sql::Connection &c, llvm::StringRef key, llvm::StringRef sum) {
  llvm::Expected<sql::Statement> s =
      c.prepare("DELETE FROM binaries WHERE key = ?1 AND checksum = ?2");
  if (!s)
    return s.takeError();
  s->bind(1, key).bind(2, sum);
  if (llvm::Error error = s->run())
    return error;
  llvm::Expected<sql::Statement> use =
      c.prepare("DELETE FROM binary_use WHERE key = ?1 AND NOT EXISTS"
                " (SELECT 1 FROM binaries WHERE key = ?1)");
  if (!use)
    return use.takeError();
  use->bind(1, key);
  return use->run();
}

llvm::Error deleteTuningIf(sql::Connection &c, llvm::StringRef keyHash, llvm::StringRef sum) {
  llvm::Expected<sql::Statement> s =
      c.prepare("DELETE FROM tunings WHERE key = ?1 AND checksum = ?2");
  if (!s)
    return s.takeError();
  s->bind(1, keyHash).bind(2, sum);
  return s->run();
}

} // namespace flashjit::cache::rows
