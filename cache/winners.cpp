#include "cache/winners.h"

#include "support/error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace flashjit::cache {
namespace {

constexpr const char *kFormat = "flashjit-winners";
constexpr int kVersion = 1;
// The fields that hold the tuner's JSON columns (embedded), written each on one line.
constexpr llvm::StringLiteral kClocks = "clocks", kCandidates = "candidates";

std::string compact(const llvm::json::Value &value) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << value;
  return os.str();
}

// The tuner's JSON columns are stored as text; in the file they are JSON values, so a
// reader sees them as data, when that gives back the same text; otherwise (not JSON, or
// spaced or ordered differently) they stay strings, so a round trip is exact.
llvm::json::Value embedded(const std::string &text) {
  if (text.empty())
    return nullptr;
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return text;
  }
  if (compact(*parsed) != text)
    return text;
  return std::move(*parsed);
}

std::string unembedded(const llvm::json::Value *value) {
  if (!value || value->kind() == llvm::json::Value::Null)
    return "";
  if (auto text = value->getAsString())
    return text->str();
  return compact(*value);
}

} // namespace

std::string winnersToJson(llvm::ArrayRef<TuningRow> input) {
  std::vector<const TuningRow *> rows;
  for (const TuningRow &row : input)
    rows.push_back(&row);
  std::sort(rows.begin(), rows.end(), [](const TuningRow *a, const TuningRow *b) {
    return a->key.text() < b->key.text();
  });
  std::vector<llvm::json::Object> winners;
  for (const TuningRow *r : rows) {
    llvm::json::Object winner{
        {"spec", r->key.spec},
        {"bucket", r->key.bucket},
        {"device_key", r->key.deviceKey},
        {"generator_fingerprint", r->key.generatorFingerprint},
        {"protocol_version", r->key.protocolVersion},
        {"config", r->config},
        {"median_us", r->medianUs},
        {"tflops", r->tflops},
        {"tuned_at", r->tunedAt},
        {"flashjit_version", r->flashjitVersion},
        {"measured_binary_key", r->binaryKey},
        {kClocks, embedded(r->clocksJson)},
        {kCandidates, embedded(r->candidatesJson)},
    };
    // Absent rather than empty, so that files written before them read back the same.
    if (!r->codeSha256.empty())
      winner["code_sha256"] = r->codeSha256;
    if (!r->carriedFrom.empty())
      winner["carried_from"] = r->carriedFrom;
    winners.push_back(std::move(winner));
  }
  // One field a line, as reviewers read a row, but the tuner's JSON columns each on one
  // line: indented, a row's candidates took three quarters of the shipped files' bytes.
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::json::OStream j(os, 2);
  j.object([&] {
    j.attribute("format", kFormat);
    j.attribute("version", kVersion);
    j.attributeArray("winners", [&] {
      for (const llvm::json::Object &fields : winners) {
        std::vector<llvm::StringRef> keys;
        for (const auto &field : fields)
          keys.push_back(field.first);
        llvm::sort(keys); // the order the indented writer gave, so diffs stay small
        j.object([&] {
          for (llvm::StringRef key : keys) {
            const llvm::json::Value &value = *fields.get(key);
            if (key == kClocks || key == kCandidates) {
              j.attributeBegin(key);
              j.rawValue([&](llvm::raw_ostream &raw) { raw << value; });
              j.attributeEnd();
            } else {
              j.attribute(key, value);
            }
          }
        });
      }
    });
  });
  os << "\n";
  return os.str();
}

llvm::Expected<std::vector<TuningRow>> winnersFromJson(llvm::StringRef text,
                                                       llvm::StringRef fileName) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return makeError(ErrorCode::InvalidValue, "{0}: not JSON: {1}", fileName,
                     llvm::toString(parsed.takeError()));
  const llvm::json::Object *file = parsed->getAsObject();
  if (!file || file->getString("format").getValueOr("") != kFormat)
    return makeError(ErrorCode::InvalidValue, "{0}: not a flashjit winners file (no \"format\": "
                     "\"{1}\")", fileName, kFormat);
  if (file->getInteger("version").getValueOr(0) != kVersion)
    return makeError(ErrorCode::NotSupported, "{0}: winners file version {1}; this flashjit "
                     "reads version {2}", fileName,
                     file->getInteger("version").getValueOr(0), kVersion);
  const llvm::json::Array *winners = file->getArray("winners");
  if (!winners)
    return makeError(ErrorCode::InvalidValue, "{0}: no \"winners\" array", fileName);
  std::vector<TuningRow> rows;
  for (size_t i = 0; i < winners->size(); ++i) {
    const llvm::json::Object *w = (*winners)[i].getAsObject();
    auto missing = [&](llvm::StringRef field) {
      return makeError(ErrorCode::InvalidValue, "{0}: winner {1}: \"{2}\" is missing or of the "
                       "wrong type", fileName, i, field);
    };
    if (!w)
      return missing("(object)");
    TuningRow row;
    for (auto [field, out] : {std::pair<const char *, std::string *>{"spec", &row.key.spec},
                              {"bucket", &row.key.bucket},
                              {"device_key", &row.key.deviceKey},
                              {"generator_fingerprint", &row.key.generatorFingerprint},
                              {"config", &row.config},
                              {"flashjit_version", &row.flashjitVersion},
                              {"measured_binary_key", &row.binaryKey}}) {
      auto value = w->getString(field);
      if (!value || value->empty())
        return missing(field);
      *out = value->str();
    }
    auto protocol = w->getInteger("protocol_version");
    auto tunedAt = w->getInteger("tuned_at");
    auto median = w->getNumber("median_us");
    auto tflops = w->getNumber("tflops");
    if (!protocol)
      return missing("protocol_version");
    if (!tunedAt)
      return missing("tuned_at");
    if (!median)
      return missing("median_us");
    if (!tflops)
      return missing("tflops");
    row.key.protocolVersion = static_cast<int>(*protocol);
    row.tunedAt = *tunedAt;
    row.medianUs = *median;
    row.tflops = *tflops;
    for (auto [field, out] : {std::pair<const char *, std::string *>{"code_sha256", &row.codeSha256},
                              {"carried_from", &row.carriedFrom}})
      if (const llvm::json::Value *value = w->get(field)) {
        if (!value->getAsString())
          return missing(field);
        *out = value->getAsString()->str();
      }
    row.clocksJson = unembedded(w->get(kClocks));
    row.candidatesJson = unembedded(w->get(kCandidates));
    rows.push_back(std::move(row));
  }
  return rows;
}

llvm::Expected<std::vector<TuningRow>> winnersFor(Cache &cache,
                                                  llvm::ArrayRef<std::string> deviceKeys) {
  llvm::Expected<std::vector<Found<TuningRow>>> all = cache.allTunings();
  if (!all)
    return all.takeError();
  std::vector<TuningRow> rows;
  llvm::StringSet<> seen;
  for (Found<TuningRow> &found : *all) {
    if (!deviceKeys.empty() && !llvm::is_contained(deviceKeys, found.row.key.deviceKey))
      continue;
    if (seen.insert(found.row.key.text()).second)
      rows.push_back(std::move(found.row));
  }
  return rows;
}

WinnersMerge mergeWinners(llvm::ArrayRef<std::vector<TuningRow>> inputs) {
  WinnersMerge merged;
  llvm::StringMap<size_t> index; // key text -> position in merged.rows
  for (const std::vector<TuningRow> &input : inputs)
    for (const TuningRow &row : input) {
      auto [at, fresh] = index.try_emplace(row.key.text(), merged.rows.size());
      if (fresh) {
        merged.rows.push_back(row);
        continue;
      }
      TuningRow &kept = merged.rows[at->second];
      if (kept.config != row.config)
        merged.conflicts.push_back(llvm::formatv("{0}: {1} {2:f2} us against {3} {4:f2} us",
                                                 at->first(), kept.config, kept.medianUs,
                                                 row.config, row.medianUs));
      if (row.medianUs < kept.medianUs)
        kept = row;
    }
  return merged;
}

} // namespace flashjit::cache
