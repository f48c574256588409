// What a sweep shows: a progress line (done/total, ETA, current item, best so far)
// and the summary table. Formatting only; tools/cmd_tune.cpp decides where it goes.
#pragma once

#include "tuner/sweep.h"

#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <mutex>
#include <string>

namespace flashjit::tuner {

// "8s", "3m05s", "2h07m".
std::string formatDuration(double seconds);

// Seconds left at the mean pace so far; negative when nothing is done yet.
double etaSeconds(int done, int total, double elapsedSeconds);

struct ProgressState {
  int done = 0, total = 0, failed = 0;
  double elapsedSeconds = 0;
  std::string current; // items running now
  std::string best;    // best result so far, e.g. "512.3 TFLOP/s (fwd_mma... q4096...)"
};
// "[ 3/24  12%] 41s, ETA 4m10s | now: <current> | best: <best>"
std::string progressLine(const ProgressState &state);

// Thread-safe progress display. Interactive (a terminal): one line redrawn with '\r'.
// Otherwise: one line per finished item.
class ProgressBar {
public:
  ProgressBar(llvm::raw_ostream &os, int total, bool interactive, unsigned columns = 0);
  void started(const SweepItem &item, int device);
  void finished(const SweepResult &result);
  void close(); // ends the redrawn line
  SweepProgress callbacks();

private:
  void redraw();  // with mutex_ held
  ProgressState stateNow() const;

  llvm::raw_ostream &os_;
  bool interactive_;
  unsigned columns_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
  ProgressState state_;
  std::vector<std::pair<int, std::string>> running_; // (device, label)
  double bestTflops_ = 0;
};

// One line per result: spec, bucket, winner, us, TFLOP/s, % of the roofline, status,
// seconds, compilations (tuning); spec, tile, status, seconds (compile-only).
void printSummary(llvm::raw_ostream &os, llvm::ArrayRef<SweepResult> results);

} // namespace flashjit::tuner
