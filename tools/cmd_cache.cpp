// `flashjit cache ACTION`: list, export, merge, verify and clear kernel cache DBs.
// The work is done by cache/ (cache.h, ship.h); this file parses and prints.
#include "cache/cache.h"
#include "cache/ship.h"
#include "cache/winners.h"
#include "tools/command.h"
#include "generator/spec.h"
#include "tuner/bucket.h"
#include "tuner/carry_winners.h"
#include "tuner/tuner.h"

#include "support/error.h"

#include "llvm/ADT/MapVector.h"

#include <map>

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace {

cl::SubCommand
    cacheCommand("cache",
                 "Inspect and ship the kernel cache:\n"
                 "  ls [--call Q,K,BH]                list tuning rows (user DB, --shipped, system);\n"
                 "     [--decode-call B,Q,K,HQ/HKV]   --call: the row each spec's handles run a\n"
                 "                                    call of that shape on (--decode-call: a\n"
                 "                                    decode step's, for the decode specs)\n"
                 "  export --device-key K --out F     write a compact DB to ship (--format json:\n"
                 "                                    the winners alone, as text)\n"
                 "  merge A B... --out F              combine DBs, keeping the faster winner\n"
                 "                                    (--format json: winners files; with\n"
                 "                                    --current-only, without the rows this\n"
                 "                                    build would not load; --carry: keeping\n"
                 "                                    those whose code it compiles unchanged)\n"
                 "  verify [DB...]                    check integrity, schema and checksums\n"
                 "  clear                             delete every row of the user DB");
cl::list<std::string> arguments(cl::Positional, cl::desc("<ls|export|merge|verify|clear> [DB...]"),
                                cl::sub(cacheCommand));
cl::opt<std::string> userDb("user",
                            cl::desc("The user DB (default: $FLASHJIT_CACHE, else "
                                     "$XDG_CACHE_HOME or ~/.cache /flashjit/cache.sqlite)"),
                            cl::value_desc("file"), cl::sub(cacheCommand));
cl::list<std::string> shippedDbs("shipped", cl::desc("A shipped DB, searched after the user DB"),
                                 cl::value_desc("file"), cl::sub(cacheCommand));
cl::list<std::string> systemDbs("system",
                                cl::desc("A system DB, searched after the shipped ones (default: "
                                         "$FLASHJIT_SYSTEM_CACHE, else share/flashjit/"
                                         "system.sqlite beside this installation)"),
                                cl::value_desc("file"), cl::sub(cacheCommand));
cl::opt<std::string> format("format",
                            cl::desc("export, merge: sqlite (a DB to ship, the default) or json "
                                     "(the winners and their measurements, no binaries: what "
                                     "`flashjit tune --compile-only --winners` reads)"),
                            cl::init("sqlite"), cl::sub(cacheCommand));
cl::opt<bool> currentOnly("current-only",
                          cl::desc("merge --format json: leave out the rows this build would "
                                   "never load (another generator for their family, or another "
                                   "measurement protocol), listing their families as stale"),
                          cl::sub(cacheCommand));
cl::opt<bool> carry("carry",
                    cl::desc("merge --format json: as --current-only, but a row of another "
                             "generator whose machine code this build compiles unchanged is "
                             "kept, carried to this generator; current rows without a code "
                             "stamp get one (compiles each row's measured tiles with NVRTC; "
                             "no GPU)"),
                    cl::sub(cacheCommand));
cl::list<std::string> deviceKeys("device-key",
                                 cl::desc("export: a device key to include (repeat or "
                                          "separate with commas)"),
                                 cl::value_desc("key"), cl::CommaSeparated, cl::sub(cacheCommand));
cl::opt<std::string> callShape("call",
                              cl::desc("ls: for a call of seqlen_q,seqlen_k,batch*heads_q, the "
                                       "bucket each spec's handles run it on: its own "
                                       "(tuned) or the nearest tuned one"),
                              cl::value_desc("q,k,bh"), cl::sub(cacheCommand));
cl::opt<std::string> decodeCallShape(
    "decode-call",
    cl::desc("ls: for a decode step of batch,seqlen_q,seqlen_k,heads_q/heads_kv, the decode "
             "bucket (query rows packed per KV head, keys, batch*heads_kv) each decode "
             "spec's handles run it on"),
    cl::value_desc("b,q,k,hq/hkv"), cl::sub(cacheCommand));
cl::opt<std::string> outPath("out", cl::desc("export, merge: the DB to write"),
                             cl::value_desc("file"), cl::sub(cacheCommand));

int fail(Error error) {
  errs() << "flashjit cache: " << toString(std::move(error)) << "\n";
  return 1;
}

int usage(const Twine &message) {
  errs() << "flashjit cache: " << message << " (see `flashjit cache --help`)\n";
  return 2;
}

std::string userPathOrDefault() {
  return userDb.getNumOccurrences() ? userDb.getValue() : flashjit::cache::defaultUserCachePath();
}

// Opens the cache for reading: a user DB that does not exist yet is not created.
Expected<std::unique_ptr<flashjit::cache::Cache>> openForReading() {
  flashjit::cache::CacheOptions options;
  std::string user = userPathOrDefault();
  options.userPath = sys::fs::exists(user) ? user : "";
  options.shippedPaths.assign(shippedDbs.begin(), shippedDbs.end());
  if (systemDbs.getNumOccurrences())
    options.systemPaths = std::vector<std::string>(systemDbs.begin(), systemDbs.end());
  return flashjit::cache::Cache::open(std::move(options));
}

void printNotes(const char *what, const std::vector<std::string> &lines) {
  for (const std::string &line : lines)
    outs() << "  " << what << ": " << line << "\n";
}

// Columns padded to their widest cell.
void printTable(const std::vector<std::vector<std::string>> &rows) {
  std::vector<size_t> widths;
  for (const auto &row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      widths.resize(std::max(widths.size(), row.size()));
      widths[i] = std::max(widths[i], row[i].size());
    }
  for (const auto &row : rows) {
    for (size_t i = 0; i < row.size(); ++i)
      outs() << (i ? "  " : "")
             << (i + 1 < row.size() ? left_justify(row[i], widths[i]) : left_justify(row[i], 0));
    outs() << "\n";
  }
}

// Whether a spec key names a decode kernel (its family's operation).
bool isDecodeSpec(StringRef spec) {
  Expected<flashjit::generator::Family> family =
      flashjit::generator::parseFamily(flashjit::generator::specKeyFamily(spec));
  if (!family) {
    consumeError(family.takeError());
    return false;
  }
  return flashjit::generator::operationOf(*family) == flashjit::generator::Operation::Decode;
}

// Per (spec, device) of the rows whose spec is a decode one or not (`decode`), what a
// handle's dispatch does with a call of bucket `wanted` (tuner::nearestBucket over the
// tuned buckets, as fj_forward and fj_decode).
void printDispatch(ArrayRef<flashjit::cache::Found<flashjit::cache::TuningRow>> rows,
                   const flashjit::tuner::Bucket &wanted, bool decode) {
  // Rows grouped by (spec, device) in the order they were listed.
  using Group = std::pair<std::string, std::string>;
  MapVector<Group, std::vector<flashjit::tuner::Bucket>, std::map<Group, unsigned>> groups;
  for (const auto &found : rows) {
    if (isDecodeSpec(found.row.key.spec) != decode)
      continue;
    auto bucket = flashjit::tuner::Bucket::parse(found.row.key.bucket);
    if (!bucket) {
      consumeError(bucket.takeError());  // not a forward/backward/decode bucket key
      continue;
    }
    groups[{found.row.key.spec, found.row.key.deviceKey}].push_back(*bucket);
  }
  std::vector<std::vector<std::string>> table{{"SPEC", "DEVICE", "RUNS ON", "TUNED"}};
  for (const auto &[group, buckets] : groups) {
    const flashjit::tuner::Bucket &chosen =
        buckets[flashjit::tuner::nearestBucket(buckets, wanted)];
    table.push_back({group.first, group.second, chosen.key(),
                     chosen == wanted
                         ? "yes"
                         : formatv("no (nearest of {0} tuned)", buckets.size()).str()});
  }
  printTable(table);
}

// --call: for the forward and backward specs.
int listCall(ArrayRef<flashjit::cache::Found<flashjit::cache::TuningRow>> rows) {
  SmallVector<StringRef, 3> parts;
  StringRef(callShape).split(parts, ',');
  int sizes[3] = {0, 0, 0};
  if (parts.size() != 3 || parts[0].trim().getAsInteger(10, sizes[0]) ||
      parts[1].trim().getAsInteger(10, sizes[1]) || parts[2].trim().getAsInteger(10, sizes[2]) ||
      sizes[0] < 1 || sizes[1] < 1 || sizes[2] < 1)
    return usage("--call '" + callShape + "': expected seqlen_q,seqlen_k,batch*heads_q, each "
                 ">= 1 (e.g. 2048,2048,128)");
  const flashjit::tuner::Bucket wanted =
      flashjit::tuner::Bucket::forShape(sizes[0], sizes[1], sizes[2]);
  outs() << formatv("\na call of {0}x{1} (batch*heads {2}) is bucket {3} (decode specs: "
                    "--decode-call):\n",
                    sizes[0], sizes[1], sizes[2], wanted.key());
  printDispatch(rows, wanted, false);
  return 0;
}

// --decode-call: for the decode specs, whose buckets count packed rows.
int listDecodeCall(ArrayRef<flashjit::cache::Found<flashjit::cache::TuningRow>> rows) {
  SmallVector<StringRef, 4> parts;
  StringRef(decodeCallShape).split(parts, ',');
  int batch = 0, seqQ = 0, seqK = 0;
  std::optional<std::pair<int, int>> heads;  // (query heads, KV heads)
  if (parts.size() == 4)
    heads = flashjit::tools::parseHeadLayout(parts[3]);
  if (!heads || parts[0].trim().getAsInteger(10, batch) ||
      parts[1].trim().getAsInteger(10, seqQ) || parts[2].trim().getAsInteger(10, seqK) ||
      batch < 1 || seqQ < 1 || seqK < 1)
    return usage("--decode-call '" + decodeCallShape +
                 "': expected batch,seqlen_q,seqlen_k,heads_q/heads_kv, sizes >= 1 and the KV "
                 "heads dividing the query heads (e.g. 16,1,4096,32/8)");
  const auto [headsQ, headsKV] = *heads;
  const flashjit::tuner::Bucket wanted =
      flashjit::tuner::Bucket::forDecode(seqQ, seqK, batch, headsQ, headsKV);
  outs() << formatv("\na decode step of {0} x {1} rows against {2} keys, heads {3}/{4}, is "
                    "bucket {5}:\n",
                    batch, seqQ, seqK, headsQ, headsKV, wanted.key());
  printDispatch(rows, wanted, true);
  return 0;
}

int list() {
  Expected<std::unique_ptr<flashjit::cache::Cache>> cache = openForReading();
  if (!cache)
    return fail(cache.takeError());
  for (const flashjit::cache::DatabaseInfo &db : (*cache)->databases()) {
    StringRef role = flashjit::cache::sourceName(db.source);
    if (db.path == ":memory:")
      continue;
    outs() << formatv("{0} {1}: ", role, db.path)
           << (db.usable ? formatv("schema {0}", db.schemaVersion).str() : "skipped, " + db.note)
           << "\n";
  }
  Expected<std::vector<flashjit::cache::Found<flashjit::cache::TuningRow>>> rows =
      (*cache)->allTunings();
  if (!rows)
    return fail(rows.takeError());
  std::vector<std::vector<std::string>> table{{"KEY", "DEVICE", "WINNER", "TIME_US", "DB"}};
  for (const auto &found : *rows) {
    const flashjit::cache::TuningRow &row = found.row;
    table.push_back({row.key.spec + "/" + row.key.bucket, row.key.deviceKey, row.config,
                     formatv("{0:f2}", row.medianUs).str(), found.path});
  }
  printTable(table);
  outs() << rows->size() << " tuning rows\n";
  if (callShape.getNumOccurrences())
    if (int status = listCall(*rows))
      return status;
  if (decodeCallShape.getNumOccurrences())
    return listDecodeCall(*rows);
  return 0;
}

// The winners as JSON, written to a temporary file and renamed over --out.
int writeWinners(ArrayRef<flashjit::cache::TuningRow> rows) {
  std::string temp = outPath + ".tmp";
  {
    std::error_code ec;
    raw_fd_ostream os(temp, ec);
    if (ec)
      return fail(flashjit::makeError(flashjit::ErrorCode::InvalidValue, "--out {0}: {1}", temp,
                                      ec.message()));
    os << flashjit::cache::winnersToJson(rows);
    os.close();
    if (os.has_error())
      return fail(flashjit::makeError(flashjit::ErrorCode::InvalidValue, "writing {0}: {1}",
                                      temp, os.error().message()));
  }
  if (std::error_code ec = sys::fs::rename(temp, outPath))
    return fail(flashjit::makeError(flashjit::ErrorCode::InvalidValue, "--out {0}: {1}",
                                    outPath.getValue(), ec.message()));
  outs() << formatv("wrote {0}: {1} tuning winners\n", outPath, rows.size());
  return 0;
}

int exportWinners(flashjit::cache::Cache &cache, ArrayRef<std::string> keys) {
  Expected<std::vector<flashjit::cache::TuningRow>> rows = flashjit::cache::winnersFor(cache, keys);
  if (!rows)
    return fail(rows.takeError());
  return writeWinners(*rows);
}

int exportDb() {
  if (outPath.empty() || (deviceKeys.empty() && format != "json"))
    return usage("export needs --device-key and --out (--format json: --out; every device "
                 "when no --device-key)");
  Expected<std::unique_ptr<flashjit::cache::Cache>> cache = openForReading();
  if (!cache)
    return fail(cache.takeError());
  std::vector<std::string> keys(deviceKeys.begin(), deviceKeys.end());
  if (format == "json")
    return exportWinners(**cache, keys);
  if (format != "sqlite")
    return usage("--format '" + format + "': expected sqlite or json");
  Expected<flashjit::cache::ShipReport> report = flashjit::cache::exportDb(**cache, keys, outPath);
  if (!report)
    return fail(report.takeError());
  outs() << formatv("wrote {0}: {1} tuning rows, {2} binaries\n", outPath, report->tunings,
                    report->binaries);
  printNotes("note", report->notes);
  return 0;
}

// Winners files merged (scripts/retune-winners.sh: the rows of the families a template
// change left current, and the re-tuned rows of the others). "stale families: A B" names
// the families whose rows --current-only left out, for scripts to re-tune.
int mergeWinnersFiles(ArrayRef<std::string> inputs) {
  std::vector<std::vector<flashjit::cache::TuningRow>> files;
  std::map<std::string, int> staleRows; // family -> rows left out
  flashjit::tuner::CarryReport carryReport;
  for (const std::string &path : inputs) {
    ErrorOr<std::unique_ptr<MemoryBuffer>> text = MemoryBuffer::getFile(path);
    if (!text)
      return fail(flashjit::makeError(flashjit::ErrorCode::InvalidValue, "{0}: {1}", path,
                                      text.getError().message()));
    Expected<std::vector<flashjit::cache::TuningRow>> rows =
        flashjit::cache::winnersFromJson((*text)->getBuffer(), path);
    if (!rows)
      return fail(rows.takeError());
    if (carry) {
      Expected<std::vector<flashjit::cache::TuningRow>> carried =
          flashjit::tuner::carryWinners(std::move(*rows), 0, carryReport, &errs());
      if (!carried)
        return fail(carried.takeError());
      *rows = std::move(*carried);
    } else if (currentOnly)
      llvm::erase_if(*rows, [&](const flashjit::cache::TuningRow &row) {
        Expected<flashjit::generator::KernelSpec> spec =
            flashjit::generator::KernelSpec::parse(row.key.spec);
        std::optional<std::string> why;
        if (!spec)
          why = toString(spec.takeError());
        else
          why = flashjit::tuner::staleReason(*spec, row.key);
        if (why)
          ++staleRows[flashjit::generator::specKeyFamily(row.key.spec).str()];
        return why.has_value();
      });
    files.push_back(std::move(*rows));
  }
  for (const auto &[family, rows] : carryReport.stale)
    staleRows[family] += rows;
  flashjit::cache::WinnersMerge merged = flashjit::cache::mergeWinners(files);
  if (int status = writeWinners(merged.rows))
    return status;
  outs() << formatv("  {0} conflicts\n", merged.conflicts.size());
  printNotes("conflict", merged.conflicts);
  if (carry) {
    outs() << formatv("  {0} rows stamped with their code\n", carryReport.stamped);
    if (!carryReport.carried.empty()) {
      outs() << "  carried to this generator, their code unchanged:";
      for (const auto &[family, rows] : carryReport.carried)
        outs() << formatv(" {0} ({1} rows)", family, rows);
      outs() << "\n";
    }
    printNotes("carry", carryReport.notes);
  }
  if (!staleRows.empty()) {
    outs() << "  left out as stale:";
    for (const auto &[family, rows] : staleRows)
      outs() << formatv(" {0} ({1} rows)", family, rows);
    outs() << "\nstale families:";
    for (const auto &entry : staleRows)
      outs() << " " << entry.first;
    outs() << "\n";
  }
  return 0;
}

int merge(ArrayRef<std::string> inputs) {
  if (outPath.empty() || inputs.empty())
    return usage("merge needs input DBs and --out");
  if (format == "json")
    return mergeWinnersFiles(inputs);
  if (format != "sqlite")
    return usage("--format '" + format + "': expected sqlite or json");
  if (currentOnly || carry)
    return usage("--current-only and --carry merge winners files (--format json)");
  Expected<flashjit::cache::ShipReport> report = flashjit::cache::mergeDbs(inputs, outPath);
  if (!report)
    return fail(report.takeError());
  outs() << formatv("wrote {0}: {1} tuning rows, {2} binaries, {3} conflicts\n", outPath,
                    report->tunings, report->binaries, report->conflicts.size());
  printNotes("conflict", report->conflicts);
  printNotes("note", report->notes);
  return 0;
}

int verify(ArrayRef<std::string> files) {
  std::vector<std::string> paths(files.begin(), files.end());
  if (paths.empty()) {
    std::string user = userPathOrDefault();
    if (!user.empty() && sys::fs::exists(user))
      paths.push_back(user);
    paths.insert(paths.end(), shippedDbs.begin(), shippedDbs.end());
    if (systemDbs.getNumOccurrences())
      paths.insert(paths.end(), systemDbs.begin(), systemDbs.end());
    else
      llvm::append_range(paths, flashjit::cache::defaultSystemCachePaths());
  }
  if (paths.empty())
    return usage("no DB to verify");
  bool allOk = true;
  for (const std::string &path : paths) {
    flashjit::cache::VerifyReport report = flashjit::cache::verifyDb(path);
    allOk &= report.ok();
    outs() << formatv("{0}: {1} (schema {2}, {3} binaries, {4} tuning rows)\n", path,
                      report.ok() ? "ok" : "FAILED", report.schemaVersion, report.binaries,
                      report.tunings);
    printNotes("problem", report.problems);
    printNotes("note", report.notes);
  }
  return allOk ? 0 : 1;
}

int clear() {
  flashjit::cache::CacheOptions options;
  options.userPath = userPathOrDefault();
  if (options.userPath->empty())
    return usage("no user DB ($FLASHJIT_CACHE is empty); name one with --user");
  Expected<std::unique_ptr<flashjit::cache::Cache>> cache =
      flashjit::cache::Cache::open(std::move(options));
  if (!cache)
    return fail(cache.takeError());
  if (!(*cache)->persistent())
    return fail(flashjit::makeError(flashjit::ErrorCode::Cache, "cannot open the user DB"));
  if (Error error = (*cache)->clear())
    return fail(std::move(error));
  outs() << "cleared " << (*cache)->userPath() << "\n";
  return 0;
}

int run() {
  if (arguments.empty())
    return usage("name an action: ls, export, merge, verify or clear");
  std::vector<std::string> rest(arguments.begin() + 1, arguments.end());
  std::string action = arguments[0];
  if (action == "ls")
    return list();
  if (action == "export")
    return exportDb();
  if (action == "merge")
    return merge(rest);
  if (action == "verify")
    return verify(rest);
  if (action == "clear")
    return clear();
  return usage("unknown action '" + action + "'");
}

flashjit::tools::RegisterCommand registration(cacheCommand, &run);

} // namespace
