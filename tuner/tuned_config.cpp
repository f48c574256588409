#include "tuner/tuned_config.h"

#include "support/error.h"
#include "tuner/decode_kernel.h"

namespace flashjit::tuner {

std::string TunedConfig::key() const {
  return splits > 0 ? tile.key() + "+splits" + std::to_string(splits) : tile.key();
}

llvm::Expected<TunedConfig> TunedConfig::parse(llvm::StringRef key) {
  auto [tileText, launchText] = key.split('+');
  TunedConfig config;
  llvm::Expected<generator::TileConfig> tile = generator::TileConfig::parse(tileText);
  const bool tileOk = bool(tile);
  if (tileOk)
    config.tile = *tile;
  else
    llvm::consumeError(tile.takeError());  // the message below says what a config is
  if (!tileOk ||
      (key.contains('+') &&
       (!launchText.consume_front("splits") || launchText.getAsInteger(10, config.splits) ||
        config.splits < 1 || config.splits > kMaxDecodeSplits)))
    return makeError(ErrorCode::InvalidValue,
                     "bad tuned config '{0}' (expected a tile, e.g. bm16.bn64.w4.s2, and for "
                     "decode optionally a split count of 1 to {1}: bm16.bn64.w4.s2+splits8)",
                     key, kMaxDecodeSplits);
  return config;
}

} // namespace flashjit::tuner
