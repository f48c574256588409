// What a tune records with its result (DESIGN.md: "a row records the clocks seen,
// the candidates tried with their times, and the winner"): every candidate with its
// fate, the problems it was checked and timed on, the protocol, and the clocks.
// Serialized to the JSON kept in the tuning row.
#pragma once

#include "generator/spec.h"
#include "runtime/clocks.h"
#include "tuner/forward_problem.h"
#include "tuner/measure.h"

#include "llvm/Support/JSON.h"

#include <string>
#include <vector>

namespace flashjit::tuner {

enum class CandidateFate {
  PrunedFit,       // cannot fit the target (never compiled)
  PrunedModel,     // the model says it cannot win (never compiled)
  CompileFailed,   // NVRTC or the generator refused it
  RejectedCompile, // spills, or the log reports serialized/ignored instructions
  LoadFailed,      // the driver would not load it
  Wrong,           // failed the correctness bar: never selected
  SkippedBudget,   // passed the bar, not timed: the budget ran out
  Screened,        // timed briefly; more than 10% slower than the fastest (or not
                   // among the 4 fastest): no full timing
  Timed,           // a finalist: screened, then timed with the full protocol
};
llvm::StringRef fateName(CandidateFate fate); // "pruned-fit", ..., "timed"

struct CandidateRecord {
  generator::TileConfig tile;
  int splits = 0;             // split-KV kernels: the split count it was timed at (0: the
                              // heuristic's); the tuning row's config (tuned_config.h)
  CandidateFate fate = CandidateFate::PrunedFit;
  std::string reason;         // why it was pruned or rejected
  double modelUs = 0;         // the model's time (0 when not estimated)
  int sharedBytes = 0;
  int registers = -1;         // from ptxas (-1: not compiled)
  int spillBytes = 0;
  double compileMs = 0;
  bool fromCache = false;     // its binary was already cached
  bool checked = false;       // ran against the reference
  double maxError = 0, tolerance = 0;
  bool screened = false;
  Measurement screen;         // the first (forward) screening pass
  double screenReverseUs = 0; // the median of the second (reverse) screening pass
  // What the finalists are chosen by: the mean of both passes' medians (the forward
  // pass's alone before the reverse pass has run).
  double screenedUs() const {
    return screenReverseUs > 0 ? 0.5 * (screen.medianUs + screenReverseUs) : screen.medianUs;
  }
  bool timed = false;
  Measurement measurement;    // the full timing (finalists only): all rounds' launches
  std::vector<double> roundMediansUs; // the median of each interleaved round
  double rankedUs = 0;        // what the winner was chosen by: the measurement's median
  bool winner = false;
};

struct TuneRecord {
  std::string spec, bucket, mode;
  int protocol = 0;  // measurementProtocol(spec)
  ForwardShape timingShape;
  std::vector<ForwardShape> checkShapes;
  MeasureOptions measure, screen;
  double tieTolerance = 0;
  std::vector<std::string> ties;  // tiles tied with the fastest, the winner among them
  std::string winner;
  double budgetSeconds = 0, elapsedSeconds = 0;
  double compileSeconds = 0, checkSeconds = 0, timeSeconds = 0;
  int compiled = 0;
  std::vector<CandidateRecord> candidates;
};

// The tuning row's candidates_json: the record, protocol version included.
std::string candidatesJson(const TuneRecord &record);

// The tuning row's clocks_json: the SM clock before and after the timed runs (NVML),
// or {"source": "unavailable", "reason": ...}; the driver's peak clock either way.
std::string clocksJson(const runtime::ClockReading &before, const runtime::ClockReading &after,
                       int driverPeakKHz);

} // namespace flashjit::tuner
