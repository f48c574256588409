#include "tuner/sweep_report.h"

#include "support/elapsed.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

namespace flashjit::tuner {

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  long long s = std::llround(seconds);
  if (s < 60)
    return llvm::formatv("{0}s", s).str();
  if (s < 3600)
    return llvm::formatv("{0}m{1:D2}s", s / 60, s % 60).str();
  return llvm::formatv("{0}h{1:D2}m", s / 3600, (s % 3600) / 60).str();
}

double etaSeconds(int done, int total, double elapsedSeconds) {
  if (done <= 0)
    return -1;
  return elapsedSeconds / done * std::max(0, total - done);
}

std::string progressLine(const ProgressState &s) {
  int percent = s.total > 0 ? (int)(100.0 * s.done / s.total) : 100;
  std::string line = llvm::formatv("[{0,3}/{1} {2,3}%] {3}", s.done, s.total, percent,
                                   formatDuration(s.elapsedSeconds));
  double eta = etaSeconds(s.done, s.total, s.elapsedSeconds);
  if (s.done < s.total)
    line += ", ETA " + (eta < 0 ? std::string("?") : formatDuration(eta));
  if (s.failed)
    line += llvm::formatv(", {0} failed", s.failed).str();
  if (!s.current.empty())
    line += " | now: " + s.current;
  if (!s.best.empty())
    line += " | best: " + s.best;
  return line;
}

ProgressBar::ProgressBar(llvm::raw_ostream &os, int total, bool interactive, unsigned columns)
    : os_(os), interactive_(interactive), columns_(columns ? columns : 120),
      start_(std::chrono::steady_clock::now()) {
  state_.total = total;
}

ProgressState ProgressBar::stateNow() const {
  ProgressState s = state_;
  s.elapsedSeconds = secondsSince(start_);
  for (const auto &[device, label] : running_) {
    if (!s.current.empty())
      s.current += ", ";
    s.current += device >= 0 ? llvm::formatv("[gpu{0}] {1}", device, label).str() : label;
  }
  return s;
}

void ProgressBar::redraw() {
  std::string line = progressLine(stateNow());
  if (line.size() + 1 > columns_)
    line = line.substr(0, columns_ - 4) + "...";
  line.resize(columns_ - 1, ' ');
  os_ << '\r' << line;
  os_.flush();
}

void ProgressBar::started(const SweepItem &item, int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_.emplace_back(device, item.label());
  if (interactive_)
    redraw();
}

void ProgressBar::finished(const SweepResult &r) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string label = r.item.label();
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (it->first == r.device && it->second == label) {
      running_.erase(it);
      break;
    }
  ++state_.done;
  if (r.status == SweepResult::Failed)
    ++state_.failed;
  if (r.tflops > bestTflops_) {
    bestTflops_ = r.tflops;
    state_.best = llvm::formatv("{0:F1} TFLOP/s ({1})", r.tflops, label).str();
  }
  std::string what;
  if (r.status == SweepResult::Failed)
    what = "FAILED: " + r.message;
  else if (r.us > 0)
    what = llvm::formatv("{0} {1:F1} us {2:F1} TFLOP/s ({3:F0}% of roofline), {4} in {5:F1} s, "
                         "{6} compiled",
                         r.tile, r.us, r.tflops, r.rooflineFraction * 100, statusName(r.status),
                         r.seconds, r.compiled)
               .str();
  else
    what = llvm::formatv("{0} {1} in {2:F1} s", r.tile, statusName(r.status), r.seconds).str();
  if (interactive_) {
    // Failures stay on screen; the rest is in the summary.
    if (r.status == SweepResult::Failed) {
      os_ << '\r' << std::string(columns_ - 1, ' ') << '\r' << label << ": " << what << "\n";
    }
    redraw();
    return;
  }
  ProgressState s = stateNow();
  s.current.clear();
  os_ << progressLine(s) << " | " << label << ": " << what << "\n";
  os_.flush();
}

void ProgressBar::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (interactive_) {
    redraw();
    os_ << "\n";
    os_.flush();
  }
}

SweepProgress ProgressBar::callbacks() {
  SweepProgress p;
  p.started = [this](const SweepItem &item, int device) { started(item, device); };
  p.finished = [this](const SweepResult &r) { finished(r); };
  return p;
}

namespace {
std::string padRight(std::string text, size_t width) {
  if (text.size() < width)
    text.resize(width, ' ');
  return text;
}
} // namespace

void printSummary(llvm::raw_ostream &os, llvm::ArrayRef<SweepResult> results) {
  bool tuning = llvm::any_of(results, [](const SweepResult &r) { return r.item.bucket.has_value(); });
  size_t specWidth = 4;
  for (const SweepResult &r : results)
    specWidth = std::max(specWidth, r.item.spec.key().size());
  if (tuning) {
    os << llvm::formatv("{0} {1,-18} {2,-18} {3,10} {4,9} {5,9} {6,-8} {7,8} {8,8}\n",
                        padRight("spec", specWidth), "bucket",
                        "winner", "us", "TFLOP/s", "%roofline", "status", "tune s", "compiled");
    for (const SweepResult &r : results) {
      std::string us = r.us > 0 ? llvm::formatv("{0:F1}", r.us).str() : "-";
      std::string tf = r.tflops > 0 ? llvm::formatv("{0:F1}", r.tflops).str() : "-";
      std::string pct =
          r.rooflineFraction > 0 ? llvm::formatv("{0:F1}%", r.rooflineFraction * 100).str() : "-";
      std::string secs = r.status == SweepResult::Cached ? "-" : llvm::formatv("{0:F1}", r.seconds).str();
      os << llvm::formatv("{0} {1,-18} {2,-18} {3,10} {4,9} {5,9} {6,-8} {7,8} {8,8}\n",
                          padRight(r.item.spec.key(), specWidth),
                          r.item.bucket ? r.item.bucket->key() : "-",
                          r.tile.empty() ? "-" : r.tile, us, tf, pct, statusName(r.status),
                          secs, r.compiled);
      if (r.status == SweepResult::Failed)
        os << "    " << r.message << "\n";
    }
    return;
  }
  os << llvm::formatv("{0} {1,-18} {2,-9} {3,8}\n",
                      padRight("spec", specWidth), "tile", "status",
                      "s");
  for (const SweepResult &r : results) {
    std::string secs = r.status == SweepResult::Cached ? "-" : llvm::formatv("{0:F1}", r.seconds).str();
    os << llvm::formatv("{0} {1,-18} {2,-9} {3,8}\n", padRight(r.item.spec.key(), specWidth),
                        r.tile, statusName(r.status), secs);
    if (r.status == SweepResult::Failed)
      os << "    " << r.message << "\n";
  }
}

} // namespace flashjit::tuner
