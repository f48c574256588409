// Tuning winners as text: the measured rows of a cache, without binaries, in a JSON file
// that can be reviewed and committed (data/winners/), and read back by the build-time
// sweep that fills the system cache (`flashjit tune --compile-only --winners F`), which
// compiles each winner's tile with the local toolkit. Every field of the row is kept:
// where, when, by which flashjit and generator it was measured, and the candidates.
#pragma once

#include "cache/cache.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace flashjit::cache {

// {"format": "flashjit-winners", "version": 1, "winners": [{...}, ...]}; rows sorted by
// tuning key text so that a file changes only where its winners do; a row's fields one a
// line, its clocks and candidates (the tuner's JSON) each on one line.
std::string winnersToJson(llvm::ArrayRef<TuningRow> rows);

// The rows of such a file; anything malformed is an error naming the winner and field.
llvm::Expected<std::vector<TuningRow>> winnersFromJson(llvm::StringRef text,
                                                       llvm::StringRef fileName);

// The winners for these device keys (every key when empty) in `cache`, the first row per
// tuning key in lookup order.
llvm::Expected<std::vector<TuningRow>> winnersFor(Cache &cache,
                                                  llvm::ArrayRef<std::string> deviceKeys);

// Winners files combined as `mergeDbs` combines DBs: per tuning key the faster row (the
// earlier input on a tie); a key whose inputs name different winners is a conflict
// ("<key text>: <config> <us> us against <config> <us> us").
struct WinnersMerge {
  std::vector<TuningRow> rows;
  std::vector<std::string> conflicts;
};
WinnersMerge mergeWinners(llvm::ArrayRef<std::vector<TuningRow>> inputs);

} // namespace flashjit::cache
