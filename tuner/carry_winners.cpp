#include "tuner/carry_winners.h"

#include "generator/emit.h"
#include "generator/templates.h"
#include "runtime/code_identity.h"
#include "runtime/nvrtc.h"
#include "support/error.h"
#include "support/hash.h"
#include "tuner/tuned_config.h"
#include "tuner/tuner.h"
#include "tuner/variants.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <set>

namespace flashjit::tuner {
namespace {

// The tiles whose code a row's choice rests on: the winner, and every candidate the
// tuner screened or timed against it. Tiles it pruned or skipped were never measured,
// and their code does not enter the hash.
llvm::Expected<std::vector<generator::TileConfig>> measuredTiles(const cache::TuningRow &row) {
  std::set<std::string> seen;
  std::vector<generator::TileConfig> tiles;
  auto add = [&](llvm::StringRef config) -> llvm::Error {
    llvm::Expected<TunedConfig> parsed = TunedConfig::parse(config);
    if (!parsed)
      return parsed.takeError();
    if (seen.insert(parsed->tile.key()).second)
      tiles.push_back(parsed->tile);
    return llvm::Error::success();
  };
  if (llvm::Error err = add(row.config))
    return std::move(err);
  if (row.candidatesJson.empty())
    return tiles;
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(row.candidatesJson);
  if (!parsed)
    return parsed.takeError();
  const llvm::json::Object *record = parsed->getAsObject();
  const llvm::json::Array *candidates = record ? record->getArray("candidates") : nullptr;
  if (!candidates)
    return makeError(ErrorCode::InvalidValue, "the row's candidates have no \"candidates\" list");
  for (const llvm::json::Value &c : *candidates) {
    const llvm::json::Object *candidate = c.getAsObject();
    if (!candidate)
      continue;
    llvm::StringRef fate = candidate->getString("fate").getValueOr("");
    llvm::Optional<llvm::StringRef> tile = candidate->getString("tile");
    if ((fate == "screened" || fate == "timed") && tile)
      if (llvm::Error err = add(*tile))
        return std::move(err);
  }
  return tiles;
}

// The binary key the measuring build had for the winner's source (its flashjit version
// is in the source: a row measured by an earlier release of the same generator had
// another key for the same code).
llvm::Expected<std::string> measuredKey(llvm::StringRef source, llvm::ArrayRef<std::string> options,
                                        const generator::KernelSpec &spec,
                                        llvm::StringRef measuredVersion) {
  llvm::Expected<std::string> nvrtc = runtime::nvrtcVersion();
  if (!nvrtc)
    return nvrtc.takeError();
  return binaryKey(generator::sourceAsOfVersion(source, measuredVersion), options, *nvrtc,
                   spec.target);
}

} // namespace

llvm::Expected<CodeStamp> CodeStamper::stamp(const cache::TuningRow &row) {
  CodeStamp stamp;
  llvm::Expected<generator::KernelSpec> spec = generator::KernelSpec::parse(row.key.spec);
  if (!spec) {
    stamp.error = llvm::toString(spec.takeError());
    return stamp;
  }
  llvm::Expected<std::vector<generator::TileConfig>> tiles = measuredTiles(row);
  if (!tiles) {
    stamp.error = llvm::toString(tiles.takeError());
    return stamp;
  }
  // Emit what this stamper has not seen yet, then compile those to PTX in parallel.
  std::vector<TileCode *> toCompile;
  for (const generator::TileConfig &tile : *tiles) {
    auto [at, fresh] = tiles_.try_emplace(binaryKeyText(*spec, tile));
    if (!fresh)
      continue;
    TileCode &code = at->second;
    llvm::Expected<generator::EmittedKernel> emitted = generator::emitKernel(*spec, tile);
    if (!emitted) {
      code.error = llvm::toString(emitted.takeError());
      continue;
    }
    code.source = std::move(emitted->source);
    code.options = emitted->options;
    // What the generator decides beside the source: how the kernel is launched.
    code.line = llvm::formatv("{0} {1} threads={2} shared={3} block={4}x{5} persistent={6}",
                              tile.key(), llvm::join(code.options, ","), emitted->threads,
                              emitted->sharedBytes, emitted->blockM, emitted->blockN,
                              emitted->persistent)
                    .str();
    toCompile.push_back(&code);
  }
  if (!toCompile.empty()) {
    const unsigned threads =
        threads_ ? threads_ : llvm::hardware_concurrency().compute_thread_count();
    llvm::ThreadPool pool(llvm::hardware_concurrency(
        std::max(1u, std::min<unsigned>(threads, toCompile.size()))));
    for (TileCode *code : toCompile)
      pool.async([code, target = spec->target] {
        runtime::CompileOptions options;
        options.target = target;
        options.options = code->options;
        options.ptxOnly = true;
        llvm::Expected<runtime::CompiledBinary> compiled = runtime::compile(code->source, options);
        llvm::Expected<std::string> hash =
            compiled ? runtime::ptxCodeHash(compiled->ptx)
                     : llvm::Expected<std::string>(compiled.takeError());
        if (!hash)
          code->error = llvm::toString(hash.takeError());
        else
          code->line += " ptx=" + *hash;
      });
    pool.wait();
  }
  // The tiles' lines in tile order, so the stamp does not depend on the candidates' order.
  std::set<std::string> lines;
  for (const generator::TileConfig &tile : *tiles) {
    const TileCode &code = tiles_[binaryKeyText(*spec, tile)];
    if (!code.error.empty()) {
      stamp.error = llvm::formatv("tile {0}: {1}", tile.key(), code.error);
      return stamp;
    }
    lines.insert(code.line + "\n");
  }
  // measuredTiles puts the winner first.
  const TileCode &winner = tiles_[binaryKeyText(*spec, tiles->front())];
  llvm::Expected<std::string> key =
      measuredKey(winner.source, winner.options, *spec, row.flashjitVersion);
  if (!key)
    return key.takeError();
  stamp.winnerBinaryKey = std::move(*key);
  std::string all;
  for (const std::string &line : lines)
    all += line;
  stamp.sha256 = sha256Hex(all);
  return stamp;
}

llvm::Expected<std::vector<cache::TuningRow>>
carryWinners(std::vector<cache::TuningRow> rows, unsigned threads, CarryReport &report,
             llvm::raw_ostream *progress) {
  CodeStamper stamper(threads);

  std::vector<cache::TuningRow> kept;
  for (size_t i = 0; i < rows.size(); ++i) {
    cache::TuningRow &row = rows[i];
    const std::string label = row.key.spec + " " + row.key.bucket;
    auto leaveOut = [&](llvm::StringRef why) {
      ++report.stale[generator::specKeyFamily(row.key.spec).str()];
      report.notes.push_back(llvm::formatv("{0}: left out: {1}", label, why));
    };
    llvm::Expected<generator::KernelSpec> spec = generator::KernelSpec::parse(row.key.spec);
    if (!spec) {
      leaveOut(llvm::toString(spec.takeError()));
      continue;
    }
    // Another measurement protocol: no stamp carries that (staleReason, asked as if the
    // row were of this generator, names only the protocol).
    const std::string &fingerprint = generator::familyFingerprint(spec->family);
    cache::TuningKey asCurrent = row.key;
    asCurrent.generatorFingerprint = fingerprint;
    if (std::optional<std::string> why = staleReason(*spec, asCurrent)) {
      leaveOut(*why);
      continue;
    }
    const bool current = row.key.generatorFingerprint == fingerprint;
    if (current && !row.codeSha256.empty()) {
      kept.push_back(std::move(row));
      continue;
    }
    if (!current && row.codeSha256.empty()) {
      leaveOut("another generator's row without a code stamp");
      continue;
    }
    if (progress)
      *progress << llvm::formatv("[{0}/{1}] {2} {3}\n", i + 1, rows.size(),
                                 current ? "stamping" : "comparing the code of", label);
    llvm::Expected<CodeStamp> stamp = stamper.stamp(row);
    if (!stamp)
      return stamp.takeError();
    if (current) {
      // A stamp says what was measured: only when this build compiles that very binary.
      if (!stamp->error.empty())
        report.notes.push_back(llvm::formatv("{0}: not stamped: {1}", label, stamp->error));
      else if (stamp->winnerBinaryKey != row.binaryKey)
        report.notes.push_back(llvm::formatv(
            "{0}: not stamped: this build's binary of the winner is not the one measured (binary "
            "key {1}, measured {2}: another NVRTC or flashjit version)",
            label, stamp->winnerBinaryKey.substr(0, 12), row.binaryKey.substr(0, 12)));
      else {
        row.codeSha256 = stamp->sha256;
        ++report.stamped;
      }
      kept.push_back(std::move(row));
      continue;
    }
    if (!stamp->error.empty()) {
      leaveOut(stamp->error);
      continue;
    }
    if (stamp->sha256 != row.codeSha256) {
      leaveOut("its code changed");
      continue;
    }
    if (row.carriedFrom.empty())
      row.carriedFrom = row.key.generatorFingerprint;
    row.key.generatorFingerprint = fingerprint;
    ++report.carried[generator::specKeyFamily(row.key.spec).str()];
    kept.push_back(std::move(row));
  }
  return kept;
}

} // namespace flashjit::tuner
