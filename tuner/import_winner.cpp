// A tuning winner from a winners file (cache/winners.h) into a cache, for the build-time
// sweep that fills the system cache: the tile is compiled here (the binary key depends on
// this machine's NVRTC), the measurement is kept as it was recorded.
#include "generator/templates.h"
#include "support/error.h"
#include "tuner/compile_tile.h"
#include "tuner/measure.h"
#include "tuner/tuned_config.h"
#include "tuner/tuner.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit::tuner {

std::optional<std::string> staleReason(const generator::KernelSpec &spec,
                                       const cache::TuningKey &key) {
  const std::string &fingerprint = generator::familyFingerprint(spec.family);
  if (key.generatorFingerprint != fingerprint)
    return llvm::formatv("measured with {0} generator {1}, this build's is {2}: re-measure",
                         generator::familyName(spec.family), key.generatorFingerprint.substr(0, 12),
                         fingerprint.substr(0, 12))
        .str();
  if (const int protocol = measurementProtocol(spec); key.protocolVersion != protocol)
    return llvm::formatv("measured with protocol {0}, this build uses {1}: re-measure",
                         key.protocolVersion, protocol)
        .str();
  return std::nullopt;
}

llvm::Expected<WinnerImport> importWinner(cache::Cache &cache, const cache::TuningRow &winner) {
  WinnerImport result;
  result.label = llvm::formatv("{0} {1} {2}", winner.key.spec, winner.key.bucket,
                               winner.key.deviceKey)
                     .str();
  auto stop = [&](WinnerImport::Status status, std::string why) {
    result.status = status;
    result.why = std::move(why);
    return result;
  };
  llvm::Expected<generator::KernelSpec> spec = generator::KernelSpec::parse(winner.key.spec);
  if (!spec)
    return stop(WinnerImport::Failed, llvm::toString(spec.takeError()));
  if (std::optional<std::string> why = staleReason(*spec, winner.key))
    return stop(WinnerImport::Stale, *why);
  // The split count (decode) is a launch setting: the binary is the tile's.
  llvm::Expected<TunedConfig> config = TunedConfig::parse(winner.config);
  if (!config)
    return stop(WinnerImport::Failed, llvm::toString(config.takeError()));
  const generator::TileConfig &tile = config->tile;
  if (llvm::Error err = generator::validateTile(*spec, tile))
    return stop(WinnerImport::Failed, llvm::toString(std::move(err)));

  llvm::Expected<Variant> v = compileTile(cache, *spec, tile);
  if (!v)
    return v.takeError();
  result.compiledNow = v->compiledNow;
  if (!v->error.empty())
    return stop(WinnerImport::Failed, v->error);
  if (!v->rejection.empty())
    return stop(WinnerImport::Failed, v->rejection);

  cache::TuningRow row = winner;
  row.binaryKey = v->key; // this NVRTC's binary; the measured one is in the winners file
  if (llvm::Error err = cache.publish(nullptr, &row))
    return std::move(err);
  result.status = WinnerImport::Imported;
  return result;
}

} // namespace flashjit::tuner
