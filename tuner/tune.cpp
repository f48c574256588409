// One tune of (spec, bucket): prune, build, gate on correctness, time, pick, publish.
#include "support/elapsed.h"
#include "support/error.h"
#include "tuner/roofline.h"
#include "tuner/screening.h"
#include "tuner/select.h"
#include "tuner/space.h"
#include "tuner/tune_record.h"
#include "tuner/tuned_config.h"
#include "tuner/tuner_impl.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace flashjit::tuner {
namespace {

using Clock = std::chrono::steady_clock;

// A candidate on its way through the gates.
struct Candidate {
  CandidateRecord *record;
  Variant *variant;
  std::unique_ptr<LoadedKernel> kernel;
};

} // namespace

llvm::Expected<CUstream> Tuner::Impl::tuneStream() {
  if (!stream) {
    llvm::Expected<CUstream> created = runtime::createStream();
    if (!created)
      return created.takeError();
    stream = *created;
  }
  return stream;
}

llvm::Expected<std::vector<Checker *>> Tuner::Impl::checkersFor(const generator::KernelSpec &spec) {
  // A checker runs the kernels, and made its reference, with the spec's tuning args: the
  // caller's device pointers, valid for one fj_kernel_get, not part of the spec's key.
  // Such a spec's checkers serve the one tune that made them; a later tune of the same
  // spec (another bucket) makes its own, as its args may point elsewhere, or at other
  // contents, by then.
  const bool oneTune = spec.features.hasTuningArgs;
  auto &list = oneTune ? tuningArgsCheckers : checkers[spec.key()];
  if (oneTune)
    list.clear();
  if (list.empty()) {
    llvm::Expected<CUstream> s = tuneStream();
    if (!s)
      return s.takeError();
    const Operation &operation = operationFor(spec.family);
    uint64_t seed = 1;
    for (const ForwardShape &shape : operation.correctnessShapes(spec)) {
      auto checker = operation.makeChecker(spec, shape, seed++, *s);
      if (!checker) {
        list.clear();
        return checker.takeError();
      }
      list.push_back(std::move(*checker));
    }
  }
  std::vector<Checker *> result;
  for (auto &c : list)
    result.push_back(c.get());
  return result;
}

llvm::Expected<Selection> Tuner::Impl::tune(const generator::KernelSpec &spec,
                                            const Bucket &bucket, bool exhaustive) {
  Clock::time_point start = Clock::now();
  if (llvm::Error err = device->makeCurrent())
    return std::move(err);
  const runtime::DeviceProperties &props = device->properties();
  log(llvm::formatv("tuning {0} at {1} ({2} mode)", spec.key(), bucket.key(),
                    exhaustive ? "exhaustive" : "default")
          .str());

  TuneRecord record;
  record.spec = spec.key();
  record.protocol = measurementProtocol(spec);
  record.bucket = bucket.key();
  record.mode = exhaustive ? "exhaustive" : "default";
  record.timingShape = timingShape(spec, bucket);
  record.checkShapes = operationFor(spec.family).correctnessShapes(spec);
  record.measure = options.measure;
  record.screen = options.screen;
  record.budgetSeconds = options.budgetSeconds;
  TuneReport report;

  // 1. The space, pruned before compiling.
  SpaceOptions spaceOptions;
  spaceOptions.pruneByModel = !exhaustive;
  spaceOptions.only = options.candidates;
  std::vector<SpaceEntry> space = buildSpace(spec, bucket, deviceModelFor(props), spaceOptions);
  // Timed in this order until the budget runs out: heuristic mode's tile first. Where the
  // model ties (every d = 64 fwd_wgmma tile predicts the same time), the rest follow by
  // footprint, and a cold start's compiling can leave time for one timing only.
  leadWithHeuristicChoice(space, spec, bucket);
  report.space = (int)space.size();
  std::vector<generator::TileConfig> tiles;
  for (const SpaceEntry &e : space) {
    CandidateRecord c;
    c.tile = e.tile;
    c.sharedBytes = generator::sharedBytes(spec, e.tile);
    c.modelUs = e.estimate.modelSeconds * 1e6;
    if (!std::isfinite(c.modelUs))
      c.modelUs = 0;
    if (e.verdict == Verdict::Candidate) {
      tiles.push_back(e.tile);
    } else {
      c.fate = e.verdict == Verdict::PrunedFit ? CandidateFate::PrunedFit
                                               : CandidateFate::PrunedModel;
      c.reason = e.reason;
      ++report.pruned;
    }
    record.candidates.push_back(std::move(c));
  }
  if (tiles.empty())
    return makeError(ErrorCode::NotSupported, "no tile of {0} fits {1} for {2}", spec.key(),
                     props.name, bucket.key());
  // Candidates lead `space` (in timing order), so record i is tile i for i < tiles.size().

  // 2. Binaries: cached or compiled in parallel, published as they are made.
  Clock::time_point compileStart = Clock::now();
  BuildOptions build;
  build.threads = options.compileThreads;
  build.mutateSource = options.mutateSource;
  llvm::Expected<BuildResult> built = buildVariants(cache, spec, tiles, build);
  if (!built)
    return built.takeError();
  compilations += built->compiled;
  report.compiled = built->compiled;
  std::vector<Candidate> alive;
  for (size_t i = 0; i < tiles.size(); ++i) {
    Variant &v = built->variants[i];
    CandidateRecord &c = record.candidates[i];
    if (v.binary) {
      c.registers = v.binary->registers;
      c.spillBytes = v.binary->spillBytes;
      c.compileMs = v.binary->compileMs;
      c.fromCache = !v.compiledNow;
    }
    if (!v.error.empty()) {
      c.fate = CandidateFate::CompileFailed;
      c.reason = v.error;
    } else if (!v.rejection.empty()) {
      c.fate = CandidateFate::RejectedCompile;
      c.reason = v.rejection;
    } else {
      alive.push_back({&c, &v, nullptr});
      continue;
    }
    ++report.rejectedCompile;
  }
  // The user's code does not compile: no tile will, and NVRTC's log says why once.
  for (const Variant &v : built->variants)
    if (v.userCodeFailed(spec))
      return makeError(ErrorCode::Compile, "{0}", v.error);
  for (Candidate &a : alive) {
    auto kernel = operationFor(spec.family).load(a.variant->binary->cubin, a.variant->emitted);
    if (!kernel) {
      a.record->fate = CandidateFate::LoadFailed;
      a.record->reason = llvm::toString(kernel.takeError());
      ++report.rejectedCompile;
      continue;
    }
    a.kernel = std::move(*kernel);
  }
  report.compileSeconds = secondsSince(compileStart);

  // 3. The correctness gate: every shape, before any timing.
  Clock::time_point checkStart = Clock::now();
  llvm::Expected<std::vector<Checker *>> gate = checkersFor(spec);
  if (!gate)
    return gate.takeError();
  llvm::Expected<CUstream> s = tuneStream();
  if (!s)
    return s.takeError();
  std::vector<Candidate *> passed;
  for (Candidate &a : alive) {
    if (!a.kernel)
      continue;
    a.record->checked = true;
    bool ok = true;
    for (Checker *checker : *gate) {
      ++checks;
      llvm::Expected<CheckReport> verdict = checker->check(*a.kernel, *s);
      if (!verdict)
        return makeError(ErrorCode::Cuda, "checking {0}: {1}", a.variant->keyText,
                         llvm::toString(verdict.takeError()));
      a.record->maxError = std::max(a.record->maxError, verdict->maxError);
      a.record->tolerance = std::max(a.record->tolerance, verdict->tolerance);
      if (!verdict->passed) {
        const ForwardShape &sh = checker->shape();
        a.record->reason = llvm::formatv("wrong output on {0}x{1} heads {2}/{3} seq {4}x{5}: {6}",
                                         sh.batch, sh.headsQ, sh.headsQ, sh.headsKV, sh.seqQ,
                                         sh.seqK, verdict->summary());
        ok = false;
        break;
      }
    }
    if (!ok) {
      a.record->fate = CandidateFate::Wrong;
      ++report.rejectedWrong;
      log(llvm::formatv("  rejected {0}: {1}", a.record->tile.key(), a.record->reason).str());
      continue;
    }
    passed.push_back(&a);
  }
  report.checkSeconds = secondsSince(checkStart);
  if (passed.empty()) {
    std::string why;
    for (const CandidateRecord &c : record.candidates)
      if (c.fate != CandidateFate::PrunedFit && c.fate != CandidateFate::PrunedModel)
        why += llvm::formatv("\n  {0}: {1}: {2}", c.tile.key(), fateName(c.fate), c.reason);
    return makeError(ErrorCode::NotSupported, "no candidate of {0} at {1} passed:{2}", spec.key(),
                     bucket.key(), why);
  }

  // 4. Timing (tuner/screening.h): every candidate screened briefly, in the order of
  // step 1 while the budget lasts; the few near the fastest timed in full.
  Clock::time_point timeStart = Clock::now();
  llvm::Expected<std::unique_ptr<TimingProblem>> problem =
      operationFor(spec.family).makeTimingProblem(spec, record.timingShape,
                                                  (uint64_t)props.l2Bytes);
  if (!problem)
    return problem.takeError();
  runtime::ClockReading before = runtime::readClocks(props.ordinal);
  // Every candidate with the split heuristic first, in the order of step 1; then, for
  // split-KV operations, each tile at the other split counts worth timing (the budget
  // may cut those short, never the tiles).
  const Operation &operation = operationFor(spec.family);
  std::vector<std::vector<int>> splitCounts;
  size_t splitVariants = 0;
  for (Candidate *a : passed) {
    splitCounts.push_back(operation.splitCountsToTime(*a->kernel, record.timingShape));
    splitVariants += splitCounts.back().size();
  }
  std::vector<CandidateRecord> splitRecords;  // appended to the record once timed
  splitRecords.reserve(splitVariants);        // TimedCandidate points into it
  std::vector<std::unique_ptr<LoadedKernel>> splitKernels;
  std::vector<TimedCandidate> timed;
  std::vector<Candidate *> ownerOf;  // per timed candidate: its tile's candidate
  auto addTimed = [&](Candidate *a, const LoadedKernel *kernel, CandidateRecord *c) {
    TimedCandidate t;
    t.kernel = kernel;
    t.record = c;
    t.name = a->variant->keyText + (c->splits ? llvm::formatv(" at {0} splits", c->splits).str()
                                              : std::string());
    t.ranked.tile = c->tile;
    t.ranked.splits = c->splits;
    t.ranked.sharedBytes = a->variant->emitted.sharedBytes;
    t.ranked.registers = a->kernel->registers();
    timed.push_back(std::move(t));
    ownerOf.push_back(a);
  };
  for (Candidate *a : passed)
    addTimed(a, a->kernel.get(), a->record);
  for (size_t i = 0; i < passed.size(); ++i)
    for (int n : splitCounts[i]) {
      std::unique_ptr<LoadedKernel> kernel =
          operation.withSplits(*passed[i]->kernel, n, record.timingShape);
      if (!kernel)
        return makeError(ErrorCode::Internal, "{0} cannot launch at a fixed split count",
                         passed[i]->variant->keyText);
      splitRecords.push_back(*passed[i]->record);
      splitRecords.back().splits = n;
      splitKernels.push_back(std::move(kernel));
      addTimed(passed[i], splitKernels.back().get(), &splitRecords.back());
    }
  report.splitVariants = (int)splitVariants;
  TimingPlan plan;
  plan.measure = options.measure;
  plan.screen = options.screen;
  plan.budgetSeconds = options.budgetSeconds;
  plan.spentSeconds = secondsSince(start);
  plan.buildSeconds = report.compileSeconds + report.checkSeconds;
  plan.buildShare = options.buildShare;
  llvm::Expected<TimingOutcome> outcome = screenAndTime(timed, **problem, *s, plan);
  if (!outcome)
    return outcome.takeError();
  report.screened = outcome->screened;
  report.skippedBudget = outcome->skippedBudget;
  report.timed = (int)outcome->finalists.size();
  timings += outcome->screened + report.timed;
  const std::vector<RankedCandidate> &ranked = outcome->ranked;
  runtime::ClockReading after = runtime::readClocks(props.ordinal);
  problem->reset();  // free the timing buffers before anything else is allocated
  report.timeSeconds = secondsSince(timeStart);

  // 5. The winner, ties broken by footprint.
  int w = pickWinner(ranked);
  if (w < 0)
    return makeError(ErrorCode::Internal, "no timed candidate of {0} has a valid time",
                     spec.key());
  const TimedCandidate &won = timed[outcome->finalists[w]];
  Candidate &winner = *ownerOf[outcome->finalists[w]];
  const TunedConfig config{won.record->tile, won.record->splits};
  won.record->winner = true;
  std::vector<int> ties = tiedWithFastest(ranked);
  double fastest = ranked[ties.front()].medianUs;
  for (int t : ties)
    fastest = std::min(fastest, ranked[t].medianUs);
  for (int t : ties)
    record.ties.push_back(TunedConfig{ranked[t].tile, ranked[t].splits}.key());
  for (const RankedCandidate &r : ranked)
    if (r.medianUs == fastest)
      record.tieTolerance = tieTolerance(r.spread);
  record.winner = config.key();
  report.totalSeconds = secondsSince(start);
  report.smClockMHzBefore = before.available ? before.smMHz : 0;
  report.smClockMHzAfter = after.available ? after.smMHz : 0;
  record.elapsedSeconds = report.totalSeconds;
  record.compileSeconds = report.compileSeconds;
  record.checkSeconds = report.checkSeconds;
  record.timeSeconds = report.timeSeconds;
  record.compiled = report.compiled;

  // 6. Publish the winner's binary and the row in one transaction.
  llvm::Expected<cache::TuningKey> key = tuningKey(spec, bucket);
  if (!key)
    return key.takeError();
  cache::TuningRow row;
  row.key = *key;
  for (CandidateRecord &c : splitRecords)
    record.candidates.push_back(std::move(c));
  row.config = config.key();
  row.binaryKey = winner.variant->key;
  row.medianUs = won.record->rankedUs;
  row.tflops = usefulTflops(spec, record.timingShape, row.medianUs);
  row.candidatesJson = candidatesJson(record);
  row.clocksJson = clocksJson(before, after, props.clockKHz);
  if (llvm::Error err = cache.publish(&*winner.variant->binary, &row))
    return std::move(err);
  ++tunes;

  Selection sel = selectionOf(spec, bucket, *winner.variant, Origin::TunedNow);
  sel.splits = config.splits;
  sel.tuningKeyText = key->text();
  sel.registers = winner.kernel->registers();
  sel.tunedUs = row.medianUs;
  sel.tflops = row.tflops;
  sel.report = report;
  const std::string screenedWhat =
      report.splitVariants
          ? llvm::formatv("{0} of {1} candidates screened ({2} tiles, {3} more at fixed "
                          "split counts)",
                          report.screened, report.space + report.splitVariants, report.space,
                          report.splitVariants)
                .str()
          : llvm::formatv("{0} of {1} tiles screened", report.screened, report.space).str();
  sel.note = llvm::formatv("tuned now: {0}, {1} timed, winner {2}{3}", screenedWhat, report.timed,
                           row.config,
                           ties.size() > 1
                               ? llvm::formatv(" (smallest footprint of {0} tied within "
                                               "{1:F1}%)",
                                               ties.size(), record.tieTolerance * 100)
                                     .str()
                               : std::string());
  {
    std::lock_guard<std::mutex> lock(kernelsMutex);
    auto &slot = kernels[loadedKey(*winner.variant, config.splits, bucket)];
    if (!slot) {
      if (config.splits == 0) {
        slot = std::shared_ptr<LoadedKernel>(std::move(winner.kernel));
      } else {
        for (std::unique_ptr<LoadedKernel> &k : splitKernels)
          if (k.get() == won.kernel)
            slot = std::shared_ptr<LoadedKernel>(std::move(k));
      }
    }
    sel.kernel = slot;
  }
  // Say when the budget cut the search short: the winner is then the best of part of it.
  std::string unscreened =
      report.skippedBudget
          ? llvm::formatv(", {0} not screened: the {1} s budget ran out", report.skippedBudget,
                          options.budgetSeconds)
                .str()
          : "";
  log(llvm::formatv("  {0} at {1}: {2}, {3:F1} us, {4:F1} TFLOP/s ({5} compiled, {6} screened"
                    "{7}, {8:F1} s)",
                    spec.key(), bucket.key(), row.config, row.medianUs, row.tflops,
                    report.compiled, report.screened, unscreened, report.totalSeconds)
          .str());
  return std::move(sel);
}

} // namespace flashjit::tuner
