#include "tuner/screening.h"

#include "support/elapsed.h"
#include "support/error.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>

namespace flashjit::tuner {
namespace {

using Clock = std::chrono::steady_clock;

// The finals: candidates screened within 10% of the fastest, at most 4, timed over 4
// interleaved rounds.
constexpr double kFinalistBand = 0.10;
constexpr int kFinalists = 4;
constexpr int kFinalRounds = 4;

llvm::Error timingFailed(const TimedCandidate &c, llvm::Error error) {
  return makeError(ErrorCode::Cuda, "timing {0}: {1}", c.name, llvm::toString(std::move(error)));
}

} // namespace

double timingAllowance(const TimingPlan &plan) {
  return std::max(plan.budgetSeconds - plan.spentSeconds,
                  std::max(plan.buildShare, 0.0) * plan.buildSeconds);
}

llvm::Expected<TimingOutcome> screenAndTime(llvm::MutableArrayRef<TimedCandidate> candidates,
                                            const TimingProblem &problem, CUstream stream,
                                            const TimingPlan &plan) {
  Clock::time_point start = Clock::now();
  const double allowance = timingAllowance(plan);
  TimingOutcome out;

  // Screening, forward: while what the timing has spent, plus the reverse pass over those
  // screened so far (it costs what the forward pass did), plus one finalist, fits the
  // allowance.
  std::vector<int> screened;
  double finalistSeconds = 0;  // the full protocol's cost for one candidate
  for (int i = 0; i < (int)candidates.size(); ++i) {
    TimedCandidate &c = candidates[i];
    if (!screened.empty() && 2 * secondsSince(start) + finalistSeconds > allowance) {
      c.record->fate = CandidateFate::SkippedBudget;
      c.record->reason =
          allowance > plan.budgetSeconds - plan.spentSeconds
              ? llvm::formatv("the timing's {0:F1} s ran out ({1} of the {2:F1} s of "
                              "compiling and checking, past the {3} s budget)",
                              allowance, plan.buildShare, plan.buildSeconds, plan.budgetSeconds)
                    .str()
              : llvm::formatv("the {0} s budget ran out", plan.budgetSeconds).str();
      ++out.skippedBudget;
      continue;
    }
    MeasureOptions options = plan.screen;
    if (screened.empty()) { // the first launches of a tune also bring the clocks up
      options.warmupMs = std::max(options.warmupMs, plan.measure.warmupMs);
      options.warmupLaunches = std::max(options.warmupLaunches, plan.measure.warmupLaunches);
    }
    llvm::Expected<Measurement> m = problem.time(*c.kernel, stream, options);
    if (!m)
      return timingFailed(c, m.takeError());
    if (screened.empty())
      finalistSeconds = plan.measure.costMs(m->medianUs * 1e-3) * 1e-3;
    c.record->fate = CandidateFate::Screened;
    c.record->screened = true;
    c.record->screen = *m;
    screened.push_back(i);
  }
  out.screened = (int)screened.size();

  // Screening, reverse.
  std::vector<RankedCandidate> screenedTimes(screened.size());
  for (int k = (int)screened.size() - 1; k >= 0; --k) {
    TimedCandidate &c = candidates[screened[k]];
    llvm::Expected<Measurement> m = problem.time(*c.kernel, stream, plan.screen);
    if (!m)
      return timingFailed(c, m.takeError());
    c.record->screenReverseUs = m->medianUs;
    screenedTimes[k] = c.ranked;
    screenedTimes[k].medianUs = c.record->screenedUs();
    screenedTimes[k].spread = std::max(c.record->screen.spread(), m->spread());
  }

  // The finals: as many as the allowance has time left for, at least one; each ranked by
  // the median of all its launches over the rounds.
  double room = (allowance - secondsSince(start)) / std::max(finalistSeconds, 1e-6);
  std::vector<int> finals =
      finalists(screenedTimes, kFinalistBand, (int)std::clamp(room, 1.0, (double)kFinalists));
  std::reverse(finals.begin(), finals.end());  // slowest first
  MeasureOptions round = plan.measure.round(kFinalRounds);
  std::vector<std::vector<double>> launches(finals.size());
  for (int r = 0; r < kFinalRounds; ++r) {
    for (size_t k = 0; k < finals.size(); ++k) {
      size_t j = r % 2 ? finals.size() - 1 - k : k;  // slowest first, then fastest first
      TimedCandidate &c = candidates[screened[finals[j]]];
      llvm::Expected<std::vector<double>> us = problem.sample(*c.kernel, stream, round);
      if (!us)
        return timingFailed(c, us.takeError());
      c.record->roundMediansUs.push_back(median(*us));
      launches[j].insert(launches[j].end(), us->begin(), us->end());
    }
  }
  for (size_t j = 0; j < finals.size(); ++j) {
    TimedCandidate &c = candidates[screened[finals[j]]];
    Measurement m = summarize(std::move(launches[j]), problem.rotation());
    c.record->fate = CandidateFate::Timed;
    c.record->timed = true;
    c.record->measurement = m;
    c.record->rankedUs = m.medianUs;
    RankedCandidate r = c.ranked;
    r.medianUs = m.medianUs;
    r.spread = m.spread();
    out.ranked.push_back(r);
    out.finalists.push_back(screened[finals[j]]);
  }
  return out;
}

} // namespace flashjit::tuner
