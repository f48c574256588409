// Why a lookup missed: the part of the key that had no match, found by relaxing the key
// one field at a time over every usable DB.
#include "cache/impl.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <set>

namespace flashjit::cache {
namespace {

// "a, b, c" (at most five, then "...").
std::string listOf(const std::set<std::string> &values) {
  std::vector<std::string> shown(values.begin(), values.end());
  bool more = shown.size() > 5;
  shown.resize(std::min<size_t>(shown.size(), 5));
  return llvm::join(shown, ", ") + (more ? ", ..." : "");
}

// Runs a query with one bound text over every usable DB, collecting the rows' columns.
llvm::Error collect(const std::vector<Store *> &stores, llvm::StringRef query,
                    llvm::StringRef value, int columns,
                    std::vector<std::vector<std::string>> &out) {
  out.clear();
  for (Store *store : stores) {
    std::vector<std::vector<std::string>> rows;
    if (llvm::Error error = store->run(sql::TxKind::Read, [&](sql::Connection &c) -> llvm::Error {
          rows.clear();
          llvm::Expected<sql::Statement> s = c.prepare(query);
          if (!s)
            return s.takeError();
          s->bind(1, value);
          while (true) {
            llvm::Expected<bool> row = s->step();
            if (!row)
              return row.takeError();
            if (!*row)
              return llvm::Error::success();
            std::vector<std::string> fields;
            for (int i = 0; i < columns; ++i)
              fields.push_back(s->text(i));
            rows.push_back(std::move(fields));
          }
        }))
      return error;
    llvm::append_range(out, rows);
  }
  return llvm::Error::success();
}

// Mentions the DBs that were not searched, which is often the real reason for a miss.
std::string skippedDbs(const Cache::Impl &impl) {
  std::string text;
  for (const auto &store : impl.shipped)
    if (!store->usable())
      text += llvm::formatv("; skipped {0}: {1}", store->path(), store->note()).str();
  return text;
}

} // namespace

std::string Cache::explainMiss(const TuningKey &key) {
  llvm::Expected<std::optional<Tuned>> hit = findTuned(key);
  if (!hit)
    return "lookup failed: " + llvm::toString(hit.takeError());
  if (*hit)
    return llvm::formatv("no miss: found in {0}", (*hit)->tuning.path);

  // Rows of the same spec: (device key, fingerprint, protocol, bucket).
  std::vector<std::vector<std::string>> rows;
  if (llvm::Error error = collect(impl_->order(),
                                  "SELECT device_key, generator_fingerprint, "
                                  "protocol_version, bucket FROM tunings WHERE spec = ?1",
                                  key.spec, 4, rows))
    return "lookup failed: " + llvm::toString(std::move(error));
  std::string skipped = skippedDbs(*impl_);
  if (rows.empty())
    return llvm::formatv("no row for spec {0}{1}", key.spec, skipped);

  std::string protocol = std::to_string(key.protocolVersion);
  auto values = [&](int column, auto keep) {
    std::set<std::string> found;
    for (const auto &row : rows)
      if (keep(row))
        found.insert(row[column]);
    return found;
  };
  auto sameDevice = [&](const std::vector<std::string> &r) { return r[0] == key.deviceKey; };
  auto sameGenerator = [&](const std::vector<std::string> &r) {
    return sameDevice(r) && r[1] == key.generatorFingerprint;
  };
  auto sameProtocol = [&](const std::vector<std::string> &r) {
    return sameGenerator(r) && r[2] == protocol;
  };

  std::set<std::string> devices = values(0, [](auto &) { return true; });
  if (!devices.count(key.deviceKey))
    return llvm::formatv("no row for device key {0} (spec {1} is tuned for: {2}){3}", key.deviceKey,
                         key.spec, listOf(devices), skipped);
  std::set<std::string> generators = values(1, sameDevice);
  if (!generators.count(key.generatorFingerprint))
    return llvm::formatv("generator fingerprint changed (rows have {0}, this build has {1})"
                         "{2}",
                         listOf(generators), key.generatorFingerprint, skipped);
  std::set<std::string> protocols = values(2, sameGenerator);
  if (!protocols.count(protocol))
    return llvm::formatv("measurement protocol version differs (rows have {0}, this build "
                         "uses {1}){2}",
                         listOf(protocols), protocol, skipped);
  std::set<std::string> buckets = values(3, sameProtocol);
  if (buckets.count(key.bucket))
    return llvm::formatv("the row for bucket {0} does not match its checksum (treated as a "
                         "miss){1}",
                         key.bucket, skipped);
  return llvm::formatv("no row for bucket {0} (tuned buckets: {1}){2}", key.bucket, listOf(buckets),
                       skipped);
}

std::string Cache::explainBinaryMiss(llvm::StringRef keyText, llvm::StringRef target,
                                     llvm::StringRef nvrtcVersion) {
  std::vector<std::vector<std::string>> rows;
  if (llvm::Error error = collect(impl_->order(),
                                  "SELECT target, nvrtc_version FROM binaries WHERE "
                                  "key_text = ?1",
                                  keyText, 2, rows))
    return "lookup failed: " + llvm::toString(std::move(error));
  std::string skipped = skippedDbs(*impl_);
  if (rows.empty())
    return llvm::formatv("no binary for {0}{1}", keyText, skipped);
  std::set<std::string> targets, versions;
  for (const auto &row : rows)
    targets.insert(row[0]);
  if (!targets.count(target.str()))
    return llvm::formatv("target differs (cached for {0}, wanted {1}){2}", listOf(targets), target,
                         skipped);
  for (const auto &row : rows)
    if (row[0] == target)
      versions.insert(row[1]);
  if (!versions.count(nvrtcVersion.str()))
    return llvm::formatv("NVRTC version differs (cached with {0}, this process has {1}){2}",
                         listOf(versions), nvrtcVersion, skipped);
  return llvm::formatv("source or compile options changed (a binary for {0}, {1}, NVRTC {2} "
                       "is cached under another key){3}",
                       keyText, target, nvrtcVersion, skipped);
}

} // namespace flashjit::cache
