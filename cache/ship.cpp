#include "cache/ship.h"

#include "cache/rows.h"
#include "cache/schema.h"
#include "support/error.h"
#include "support/hash.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"

#include <sqlite3.h>

#include <cstdio>
#include <map>
#include <set>
#include <unistd.h>

namespace flashjit::cache {
namespace {

// A DB written to a temporary file next to `out`, renamed over it when complete, so a
// reader never sees half a DB and a failure leaves the old file as it was.
class ShipWriter {
public:
  static llvm::Expected<std::unique_ptr<ShipWriter>> create(llvm::StringRef out) {
    std::unique_ptr<ShipWriter> writer(new ShipWriter);
    writer->out_ = out.str();
    writer->temp_ = out.str() + ".tmp-" + std::to_string(getpid());
    llvm::sys::fs::remove(writer->temp_);
    llvm::Expected<std::unique_ptr<sql::Connection>> c = sql::Connection::open(
        writer->temp_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, writer->temp_);
    if (!c)
      return c.takeError();
    writer->c_ = std::move(*c);
    if (llvm::Error error = writer->c_->exec("PRAGMA journal_mode = DELETE; BEGIN IMMEDIATE"))
      return std::move(error);
    if (llvm::Error error = schema::createOrMigrate(*writer->c_))
      return std::move(error);
    return std::move(writer);
  }
  ~ShipWriter() {
    c_.reset();
    if (!done_)
      llvm::sys::fs::remove(temp_);
  }
  sql::Connection &connection() { return *c_; }

  // Commits, compacts and renames over `out`.
  llvm::Error finish() {
    if (llvm::Error error = c_->exec("COMMIT; VACUUM"))
      return error;
    c_.reset();
    if (std::error_code ec = llvm::sys::fs::rename(temp_, out_))
      return makeError(ErrorCode::Cache, "cannot write {0}: {1}", out_, ec.message());
    done_ = true;
    return llvm::Error::success();
  }

private:
  std::string out_, temp_;
  std::unique_ptr<sql::Connection> c_;
  bool done_ = false;
};

// Opens a flashjit DB to read, without writing anything next to it.
llvm::Expected<std::unique_ptr<sql::Connection>> openForReading(llvm::StringRef path) {
  if (!llvm::sys::fs::is_regular_file(path))
    return makeError(ErrorCode::Cache, "{0}: not a regular file", path);
  llvm::SmallString<256> absolute(path);
  llvm::sys::fs::make_absolute(absolute);
  llvm::Expected<std::unique_ptr<sql::Connection>> c = sql::Connection::open(
      sql::fileUri(absolute, "mode=ro"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, path.str());
  if (!c)
    return c.takeError();
  sqlite3_busy_timeout((*c)->raw(), 10000);
  return c;
}

llvm::Expected<int> readableVersion(sql::Connection &c) {
  llvm::Expected<schema::Probe> found = schema::probeConsistently(c);
  if (!found)
    return found.takeError();
  if (found->verdict == schema::Verdict::Current || found->verdict == schema::Verdict::Older)
    return found->version;
  if (found->verdict == schema::Verdict::Newer)
    return makeError(ErrorCode::Cache, "{0}: schema version {1} is newer than this build ({2})",
                     c.label(), found->version, schema::kCurrentVersion);
  return makeError(ErrorCode::Cache, "{0}: {1}", c.label(),
                   found->detail.empty() ? "not a flashjit cache" : found->detail);
}

bool faster(const TuningRow &a, const TuningRow &b) {
  return a.medianUs > 0 && (b.medianUs <= 0 || a.medianUs < b.medianUs);
}

} // namespace

llvm::Expected<ShipReport> exportDb(Cache &cache, llvm::ArrayRef<std::string> deviceKeys,
                                    llvm::StringRef out) {
  if (deviceKeys.empty())
    return makeError(ErrorCode::InvalidValue, "cache export: name at least one device key");
  llvm::Expected<std::vector<Found<TuningRow>>> all = cache.allTunings();
  if (!all)
    return all.takeError();
  llvm::Expected<std::unique_ptr<ShipWriter>> writer = ShipWriter::create(out);
  if (!writer)
    return writer.takeError();
  sql::Connection &c = (*writer)->connection();

  ShipReport report;
  std::set<std::string> wanted(deviceKeys.begin(), deviceKeys.end());
  llvm::StringSet<> keys, binaries;
  for (const Found<TuningRow> &found : *all) {
    const TuningRow &row = found.row;
    if (!wanted.count(row.key.deviceKey) || !keys.insert(row.key.hash()).second)
      continue;
    if (llvm::Error error = rows::upsertTuning(c, row))
      return std::move(error);
    ++report.tunings;
    if (!binaries.insert(row.binaryKey).second)
      continue;
    llvm::Expected<std::optional<Found<BinaryRow>>> binary = cache.findBinary(row.binaryKey);
    if (!binary)
      return binary.takeError();
    if (!*binary) {
      report.notes.push_back(
          llvm::formatv("{0}: winner {1} has no binary in any DB", row.key.text(), row.config));
      continue;
    }
    const BinaryRow &stored = (*binary)->row;
    if (llvm::Error error = rows::upsertBinary(c, stored, stored.createdAt * 1000))
      return std::move(error);
    ++report.binaries;
  }
  if (llvm::Error error = (*writer)->finish())
    return std::move(error);
  return report;
}

llvm::Expected<ShipReport> mergeDbs(llvm::ArrayRef<std::string> inputs, llvm::StringRef out) {
  if (inputs.empty())
    return makeError(ErrorCode::InvalidValue, "cache merge: name at least one input");
  std::vector<std::unique_ptr<sql::Connection>> sources;
  for (const std::string &input : inputs) {
    llvm::Expected<std::unique_ptr<sql::Connection>> c = openForReading(input);
    if (!c)
      return c.takeError();
    llvm::Expected<int> version = readableVersion(**c);
    if (!version)
      return version.takeError();
    sources.push_back(std::move(*c));
  }

  // Winners first: tuning rows are small.
  ShipReport report;
  struct Winner {
    TuningRow row;
    size_t input;
  };
  std::map<std::string, Winner> winners; // by key hash; ordered for a stable output
  for (size_t i = 0; i < sources.size(); ++i) {
    llvm::Expected<std::vector<rows::Checked<TuningRow>>> found =
        rows::selectTunings(*sources[i], nullptr);
    if (!found)
      return found.takeError();
    for (rows::Checked<TuningRow> &candidate : *found) {
      if (!candidate.valid) {
        report.notes.push_back(llvm::formatv("{0}: tuning row {1} fails its checksum; skipped",
                                             inputs[i], candidate.row.key.text()));
        continue;
      }
      auto [it, inserted] = winners.try_emplace(candidate.row.key.hash(), Winner{candidate.row, i});
      if (inserted)
        continue;
      Winner &current = it->second;
      bool replace = faster(candidate.row, current.row);
      if (candidate.row.config != current.row.config) {
        const Winner kept = replace ? Winner{candidate.row, i} : current;
        const Winner lost = replace ? current : Winner{candidate.row, i};
        report.conflicts.push_back(
            llvm::formatv("{0}: kept {1} ({2} us, {3}) over {4} ({5} us, {6})", kept.row.key.text(),
                          kept.row.config, kept.row.medianUs, inputs[kept.input], lost.row.config,
                          lost.row.medianUs, inputs[lost.input]));
      }
      if (replace)
        current = Winner{std::move(candidate.row), i};
    }
  }

  llvm::Expected<std::unique_ptr<ShipWriter>> writer = ShipWriter::create(out);
  if (!writer)
    return writer.takeError();
  sql::Connection &c = (*writer)->connection();
  llvm::StringMap<size_t> winnerInput; // binary key -> the input whose winner names it
  for (auto &[hash, winner] : winners) {
    if (llvm::Error error = rows::upsertTuning(c, winner.row))
      return std::move(error);
    ++report.tunings;
    winnerInput.try_emplace(winner.row.binaryKey, winner.input);
  }

  // Binaries, streamed. Pass 0 takes each winner's binary from the winner's input, so a
  // winner keeps the exact bytes it was measured with; pass 1 takes the rest, first
  // input first.
  // Same key, same bytes is no conflict even when compile times or dates differ.
  auto contentOf = [](const BinaryRow &b) { return xxhashHex(b.cubin) + xxhashHex(b.ptx); };
  llvm::StringMap<std::string> written; // key -> content hash
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < sources.size(); ++i) {
      llvm::Error error =
          rows::forEachBinary(*sources[i], [&](rows::Checked<BinaryRow> &&binary) -> llvm::Error {
            const std::string &key = binary.row.key;
            auto owner = winnerInput.find(key);
            bool wanted =
                pass == 0 ? owner != winnerInput.end() && owner->second == i : !written.count(key);
            if (pass == 1 && binary.valid && written.count(key) &&
                written[key] != contentOf(binary.row))
              report.conflicts.push_back(
                  llvm::formatv("binary {0} ({1}) differs between inputs; kept the first", key,
                                binary.row.keyText));
            if (!wanted)
              return llvm::Error::success();
            if (!binary.valid) {
              if (pass == 1)
                report.notes.push_back(
                    llvm::formatv("{0}: binary {1} fails its checksum; skipped", inputs[i], key));
              return llvm::Error::success();
            }
            written[key] = contentOf(binary.row);
            ++report.binaries;
            return rows::upsertBinary(c, binary.row, binary.row.createdAt * 1000);
          });
      if (error)
        return std::move(error);
    }
  }
  for (auto &[hash, winner] : winners)
    if (!written.count(winner.row.binaryKey))
      report.notes.push_back(llvm::formatv("{0}: winner {1} has no binary in any input",
                                           winner.row.key.text(), winner.row.config));
  if (llvm::Error error = (*writer)->finish())
    return std::move(error);
  return report;
}

VerifyReport verifyDb(llvm::StringRef path) {
  VerifyReport report;
  report.path = path.str();
  auto problem = [&](llvm::Error error) {
    report.problems.push_back(llvm::toString(std::move(error)));
  };
  llvm::Expected<std::unique_ptr<sql::Connection>> opened = openForReading(path);
  if (!opened) {
    problem(opened.takeError());
    return report;
  }
  sql::Connection &c = **opened;

  if (llvm::Expected<sql::Statement> check = c.prepare("PRAGMA integrity_check(20)")) {
    while (true) {
      llvm::Expected<bool> row = check->step();
      if (!row) {
        problem(row.takeError());
        break;
      }
      if (!*row)
        break;
      if (check->text(0) != "ok")
        report.problems.push_back("integrity: " + check->text(0));
    }
  } else {
    problem(check.takeError());
  }

  llvm::Expected<int> version = readableVersion(c);
  if (!version) {
    problem(version.takeError());
    return report;
  }
  report.schemaVersion = *version;

  llvm::StringSet<> binaryKeys;
  if (llvm::Error error = rows::forEachBinary(c, [&](rows::Checked<BinaryRow> &&b) {
        ++report.binaries;
        binaryKeys.insert(b.row.key);
        if (!b.valid)
          report.problems.push_back(
              llvm::formatv("binary {0} ({1}) fails its checksum", b.row.key, b.row.keyText));
        return llvm::Error::success();
      }))
    problem(std::move(error));
  llvm::Expected<std::vector<rows::Checked<TuningRow>>> tunings = rows::selectTunings(c, nullptr);
  if (!tunings) {
    problem(tunings.takeError());
    return report;
  }
  for (const rows::Checked<TuningRow> &t : *tunings) {
    ++report.tunings;
    if (!t.valid)
      report.problems.push_back(
          llvm::formatv("tuning row {0} fails its checksum", t.row.key.text()));
    else if (!binaryKeys.count(t.row.binaryKey))
      report.notes.push_back(llvm::formatv("{0}: winner {1} has no binary in this DB",
                                           t.row.key.text(), t.row.config));
  }
  return report;
}

} // namespace flashjit::cache
