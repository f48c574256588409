// The tuner's timing of the candidates that passed the correctness gate, in two stages
// (docs/TUNING.md, "The measurement protocol"):
//   screening: every candidate briefly, in the given order while the budget lasts, then
//              again in the reverse order (the SM clock drifts during a tune; passes in
//              opposite orders give each candidate the same share of the drift);
//   finals:    the few screened near the fastest get the full protocol, dealt out over
//              rounds that visit them in alternating order, so they share the clocks.
#pragma once

#include "tuner/measure.h"
#include "tuner/select.h"
#include "tuner/tune_record.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace flashjit::tuner {

// A candidate to time: its kernel, the record its timings go into, and its tile and
// footprint (`ranked`, whose time this fills in).
struct TimedCandidate {
  const LoadedKernel *kernel = nullptr;
  CandidateRecord *record = nullptr;
  std::string name;  // for errors
  RankedCandidate ranked;
};

struct TimingPlan {
  MeasureOptions measure, screen;
  double budgetSeconds = 30;
  double spentSeconds = 0;  // of the budget, before timing began
  double buildSeconds = 0;  // of spentSeconds: compiling and checking the candidates
  double buildShare = 0.25; // the timing's floor, as a share of buildSeconds
};

// The seconds the timing (screening and finals) may take: what the budget has left, but
// at least `buildShare` of what building and checking the candidates took. A screen costs
// a few ms against the ~1 s of NVRTC a candidate cost (one core), so a cold tune whose
// compiling overran the budget would otherwise throw away all but one of the binaries it
// paid for; the floor bounds the overrun at that share.
double timingAllowance(const TimingPlan &plan);

struct TimingOutcome {
  std::vector<int> finalists;          // indices into the candidates, slowest first
  std::vector<RankedCandidate> ranked; // the finalists, with their full times
  int screened = 0, skippedBudget = 0;
};

// Screens `candidates` (in their order) and times the finalists; every record gets its
// fate (screened, timed or skipped-budget) and measurements. At least one candidate is
// screened and timed in full, whatever the budget; the rest while timingAllowance lasts.
llvm::Expected<TimingOutcome> screenAndTime(llvm::MutableArrayRef<TimedCandidate> candidates,
                                            const TimingProblem &problem, CUstream stream,
                                            const TimingPlan &plan);

} // namespace flashjit::tuner
