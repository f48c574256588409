#include "tuner/tune_record.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>

namespace flashjit::tuner {
namespace {

llvm::json::Object shapeJson(const ForwardShape &s) {
  return llvm::json::Object{{"batch", s.batch},
                            {"heads_q", s.headsQ},
                            {"heads_kv", s.headsKV},
                            {"seqlen_q", s.seqQ},
                            {"seqlen_k", s.seqK},
                            {"layout", s.layout == Layout::BSHD ? "BSHD" : "BHSD"},
                            {"lse", s.withLse}};
}

// Times in microseconds, rounded to what the events resolve.
double us(double value) { return std::round(value * 1000) / 1000; }

llvm::json::Object measureJson(const MeasureOptions &m) {
  return llvm::json::Object{{"warmup_ms", m.warmupMs},
                            {"target_ms", m.targetMs},
                            {"min_runs", m.minRuns},
                            {"max_runs", m.maxRuns},
                            {"warmup_launches", m.warmupLaunches},
                            {"statistic", "median of per-launch event times"}};
}

llvm::json::Object candidateJson(const CandidateRecord &c) {
  llvm::json::Object o{{"tile", c.tile.key()}, {"fate", fateName(c.fate)}};
  if (c.splits > 0)
    o["splits"] = c.splits;
  if (!c.reason.empty())
    o["reason"] = c.reason;
  if (c.modelUs > 0)
    o["model_us"] = us(c.modelUs);
  if (c.sharedBytes > 0)
    o["shared_bytes"] = c.sharedBytes;
  if (c.registers >= 0) {
    o["registers"] = c.registers;
    o["spill_bytes"] = c.spillBytes;
    o["compile_ms"] = std::round(c.compileMs);
    o["from_cache"] = c.fromCache;
  }
  if (c.checked) {
    o["max_error"] = c.maxError;
    o["tolerance"] = c.tolerance;
  }
  if (c.screened) {
    o["screen_median_us"] = us(c.screenedUs());
    o["screen_pass_us"] = llvm::json::Array{
        us(c.screen.medianUs), us(c.screenReverseUs > 0 ? c.screenReverseUs : c.screen.medianUs)};
    o["screen_runs"] = c.screen.runs;
  }
  if (c.timed) {
    const Measurement &m = c.measurement;
    o["median_us"] = us(m.medianUs);
    o["min_us"] = us(m.minUs);
    o["p10_us"] = us(m.p10Us);
    o["p90_us"] = us(m.p90Us);
    o["runs"] = m.runs;
    o["rotation"] = m.rotation;
    if (!c.roundMediansUs.empty()) {
      llvm::json::Array rounds;
      for (double r : c.roundMediansUs)
        rounds.push_back(us(r));
      o["round_medians_us"] = std::move(rounds);
    }
    o["ranked_us"] = us(c.rankedUs > 0 ? c.rankedUs : m.medianUs);
  }
  if (c.winner)
    o["winner"] = true;
  return o;
}

} // namespace

llvm::StringRef fateName(CandidateFate fate) {
  switch (fate) {
  case CandidateFate::PrunedFit: return "pruned-fit";
  case CandidateFate::PrunedModel: return "pruned-model";
  case CandidateFate::CompileFailed: return "compile-failed";
  case CandidateFate::RejectedCompile: return "rejected-compile";
  case CandidateFate::LoadFailed: return "load-failed";
  case CandidateFate::Wrong: return "wrong";
  case CandidateFate::SkippedBudget: return "skipped-budget";
  case CandidateFate::Screened: return "screened";
  case CandidateFate::Timed: return "timed";
  }
  return "unknown";
}

std::string candidatesJson(const TuneRecord &r) {
  llvm::json::Array checks, candidates, ties;
  for (const ForwardShape &s : r.checkShapes)
    checks.push_back(shapeJson(s));
  for (const CandidateRecord &c : r.candidates)
    candidates.push_back(candidateJson(c));
  for (const std::string &t : r.ties)
    ties.push_back(t);
  llvm::json::Object o{
      {"protocol", r.protocol},
      {"spec", r.spec},
      {"bucket", r.bucket},
      {"mode", r.mode},
      {"timing_shape", shapeJson(r.timingShape)},
      {"check_shapes", std::move(checks)},
      {"measure", measureJson(r.measure)},
      {"screen", measureJson(r.screen)},
      {"tie_tolerance", r.tieTolerance},
      {"ties", std::move(ties)},
      {"winner", r.winner},
      {"budget_s", r.budgetSeconds},
      {"elapsed_s", std::round(r.elapsedSeconds * 1000) / 1000},
      {"compile_s", std::round(r.compileSeconds * 1000) / 1000},
      {"check_s", std::round(r.checkSeconds * 1000) / 1000},
      {"time_s", std::round(r.timeSeconds * 1000) / 1000},
      {"compiled", r.compiled},
      {"candidates", std::move(candidates)},
  };
  return llvm::formatv("{0}", llvm::json::Value(std::move(o))).str();
}

std::string clocksJson(const runtime::ClockReading &before, const runtime::ClockReading &after,
                       int driverPeakKHz) {
  llvm::json::Object o;
  if (before.available && after.available) {
    o["source"] = "nvml";
    o["pci_bus_id"] = before.pciBusId;
    o["sm_mhz_before"] = before.smMHz;
    o["sm_mhz_after"] = after.smMHz;
    if (after.maxSmMHz)
      o["sm_mhz_max"] = after.maxSmMHz;
    if (after.memoryMHz)
      o["memory_mhz"] = after.memoryMHz;
  } else {
    o["source"] = "unavailable";
    o["reason"] = !before.available ? before.reason : after.reason;
  }
  o["driver_peak_sm_mhz"] = driverPeakKHz / 1000;
  return llvm::formatv("{0}", llvm::json::Value(std::move(o))).str();
}

} // namespace flashjit::tuner
