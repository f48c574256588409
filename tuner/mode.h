// How the tuner may answer a request for a kernel: from the cache only, by tuning,
// by the model alone, or by tuning the whole space. Chosen per Tuner, and by
// $FLASHJIT_TUNE for processes that do not choose.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit::tuner {

enum class TuneMode {
  Default,    // use the cache; tune on a miss
  Cached,     // never compile or tune: a miss is an error (locked-down deployments)
  Heuristic,  // no timing: the model's tile for the bucket, compiled
  Exhaustive, // tune on a miss, with no pruning by the model (only what cannot fit)
};

// "default", "cached", "heuristic", "exhaustive" (case-insensitive).
llvm::Expected<TuneMode> parseTuneMode(llvm::StringRef name);
llvm::StringRef tuneModeName(TuneMode mode);

// $FLASHJIT_TUNE when set (an error for a bad value, naming the variable), else
// `fallback`.
llvm::Expected<TuneMode> tuneModeFromEnv(TuneMode fallback);

} // namespace flashjit::tuner
