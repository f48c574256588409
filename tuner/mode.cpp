#include "tuner/mode.h"

#include "support/env.h"
#include "support/error.h"

namespace flashjit::tuner {

llvm::Expected<TuneMode> parseTuneMode(llvm::StringRef name) {
  for (TuneMode mode :
       {TuneMode::Default, TuneMode::Cached, TuneMode::Heuristic, TuneMode::Exhaustive})
    if (name.trim().equals_insensitive(tuneModeName(mode)))
      return mode;
  return makeError(ErrorCode::InvalidValue,
                   "unknown tune mode '{0}' (expected default, cached, heuristic or "
                   "exhaustive)",
                   name);
}

llvm::StringRef tuneModeName(TuneMode mode) {
  switch (mode) {
  case TuneMode::Default: return "default";
  case TuneMode::Cached: return "cached";
  case TuneMode::Heuristic: return "heuristic";
  case TuneMode::Exhaustive: return "exhaustive";
  }
  return "unknown";
}

llvm::Expected<TuneMode> tuneModeFromEnv(TuneMode fallback) {
  std::optional<std::string> value = getEnv("FLASHJIT_TUNE");
  if (!value || value->empty())
    return fallback;
  llvm::Expected<TuneMode> mode = parseTuneMode(*value);
  if (!mode)
    return makeError(ErrorCode::InvalidValue, "$FLASHJIT_TUNE: {0}",
                     llvm::toString(mode.takeError()));
  return mode;
}

} // namespace flashjit::tuner
