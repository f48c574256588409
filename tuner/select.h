// Choosing the winner among measured candidates, deterministically: times that
// differ by less than the measured noise are ties, and ties go to the smaller
// resource footprint, so that two tunes on the same device pick the same tile
// (or tiles within the noise of each other) even when the fastest swaps places.
#pragma once

#include "generator/spec.h"

#include "llvm/ADT/ArrayRef.h"

#include <vector>

namespace flashjit::tuner {

struct RankedCandidate {
  generator::TileConfig tile;
  int splits = 0;  // split-KV kernels: the split count timed (0: the heuristic's)
  int sharedBytes = 0;
  int registers = 0;
  double medianUs = 0;
  double spread = 0; // relative (p90 - p10) / median of its measurement
};

// The relative band around the fastest median within which candidates tie:
// the fastest candidate's own spread, at least 1% and at most 2% (so a winner chosen
// by footprint is never more than 2% slower than the fastest).
double tieTolerance(double bestSpread);

// The footprint order that breaks ties: less shared memory, then fewer registers,
// then the smaller tile key string, then the split heuristic before fixed counts and
// fewer splits before more (less workspace). A strict total order on distinct
// (tile, splits).
bool smallerFootprint(const RankedCandidate &a, const RankedCandidate &b);

// Indices of the candidates tied with the fastest (the fastest included).
std::vector<int> tiedWithFastest(llvm::ArrayRef<RankedCandidate> candidates);

// Candidates worth the full measurement after a screening pass: those within `band` of
// the fastest screened time, fastest first, at most `limit` of them; never empty when
// any candidate has a valid time (the fastest always goes on).
std::vector<int> finalists(llvm::ArrayRef<RankedCandidate> screened, double band = 0.10,
                           int limit = 4);

// Index of the winner: the smallest footprint among those tied with the fastest.
// -1 when there is none. Candidates with a non-positive or non-finite time are
// ignored.
int pickWinner(llvm::ArrayRef<RankedCandidate> candidates);

} // namespace flashjit::tuner
