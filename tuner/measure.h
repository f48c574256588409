// The measurement protocol: how a kernel's time is taken, so that numbers from two
// tunes, two machines or two versions mean the same thing. Versioned: a tuning row
// records the protocol it was measured with, and a change here bumps the version so
// old rows are not compared with new ones.
//
//   - random inputs (never zeros), uploaded once;
//   - inputs rotated over as many buffer sets as it takes to exceed twice the L2, so
//     no launch finds the previous launch's data in cache;
//   - warm-up launches first (clocks ramp, caches of code and TLBs fill);
//   - each launch timed with its own pair of device events; the median is the result.
#pragma once

#include "generator/spec.h"
#include "tuner/forward_problem.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace flashjit::tuner {

// Rows measured under another version are never compared or reused (docs/TUNING.md).
// 3: decode tunes its split count with the tile, and its buckets count packed rows.
constexpr int kMeasurementProtocolVersion = 3;
// 4: a forward spec with a mask_mod has its candidates timed under their block mask
// (ForwardTimingProblem). Only those specs are measured another way, so only they take
// it: an upgrade re-measures their rows and keeps every other.
constexpr int kBlockMaskProtocolVersion = 4;
// The protocol a spec's rows are measured under (one of the two above).
int measurementProtocol(const generator::KernelSpec &spec);

struct MeasureOptions {
  double warmupMs = 20;     // at least this long, and at least `warmupLaunches` launches
  double targetMs = 100;    // aim for about this much timed work
  int minRuns = 10, maxRuns = 200;
  int warmupLaunches = 3;

  // One of the tuner's two screening passes: a twentieth of the work, enough to tell a
  // tile 10% slower from the fastest, not to rank the near-equal (the finalists get the
  // full protocol). One warm-up launch: the GPU is busy already, it only loads the code.
  static MeasureOptions screening() { return {0, 5, 3, 25, 1}; }
  // One of `rounds` interleaved rounds that together take this protocol's launches: a
  // share of the work and runs, one warm-up launch (the GPU is busy already).
  MeasureOptions round(int rounds) const;
  // What the full protocol costs for a kernel of `launchMs`, in milliseconds.
  double costMs(double launchMs) const;
};

struct Measurement {
  double medianUs = 0, minUs = 0, p10Us = 0, p90Us = 0;
  int runs = 0;
  int rotation = 1;  // buffer sets the launches cycled through
  // Relative spread (p90 - p10) / median: what "equal within noise" means.
  double spread() const { return medianUs > 0 ? (p90Us - p10Us) / medianUs : 0; }
};

// A problem to time kernels of one operation on: its inputs, rotated over sets of
// buffers (random data, never zeros), and how a kernel is launched on one set.
class TimingProblem {
public:
  virtual ~TimingProblem() = default;
  // Readies what launches of `kernel` need beside the inputs (e.g. a mask_mod kernel's
  // block mask), outside the timed launches; sample() calls it first, and launch() takes
  // only the kernel prepared last.
  virtual llvm::Error prepare(const LoadedKernel &kernel, CUstream stream) const {
    return llvm::Error::success();
  }
  // Launches `kernel` (asynchronously) on rotation set `set` (0 <= set < rotation()).
  virtual llvm::Error launch(const LoadedKernel &kernel, int set, CUstream stream) const = 0;
  virtual int rotation() const = 0;
  virtual const ForwardShape &shape() const = 0;

  // The protocol above: warm-up, then each launch between its own events.
  llvm::Expected<Measurement> time(const LoadedKernel &kernel, CUstream stream,
                                   const MeasureOptions &options = {}) const;
  // The per-launch times (microseconds) that time() summarizes, unsorted: for callers
  // that pool the launches of several rounds.
  llvm::Expected<std::vector<double>> sample(const LoadedKernel &kernel, CUstream stream,
                                             const MeasureOptions &options = {}) const;
};

// How many buffer sets of `bytesPerSet` make the rotation exceed twice the L2 (1 to 32).
int rotationSets(uint64_t bytesPerSet, uint64_t l2Bytes);

// Random 16-bit values in [-1, 1) of the dtype, made quickly (a xorshift generator):
// timing inputs only need to be random-looking and not zero.
std::vector<uint16_t> randomHalves(size_t count, generator::DType dtype, uint64_t seed);
// The same for FP8 e4m3 inputs, one byte a value.
std::vector<uint8_t> randomE4m3(size_t count, uint64_t seed);

// The forward pass's timing problem.
// A mask_mod's kernel (one whose module builds block masks) is timed as its callers run
// it fast: under the block mask of the timing shape, built by the kernel itself (its own
// tiles) with keep bits and the walk's order as fj_block_mask_create builds them, and with
// a tile counter. Without the mask such a kernel computes every tile and calls mask_mod
// on each score, which ranks tiles by a cost the block mask removes.
class ForwardTimingProblem : public TimingProblem {
public:
  static llvm::Expected<std::unique_ptr<ForwardTimingProblem>>
  create(generator::DType dtype, const ForwardShape &shape, uint64_t l2Bytes, uint64_t seed = 1);

  llvm::Error prepare(const LoadedKernel &kernel, CUstream stream) const override;
  llvm::Error launch(const LoadedKernel &kernel, int set, CUstream stream) const override;
  int rotation() const override { return (int)sets_.size(); }
  const ForwardShape &shape() const override { return shape_; }
  // Parameters of rotation set `i` (for callers that launch kernels themselves), with
  // the block mask of the kernel prepared last, if it has one.
  FjForwardParams params(int i) const;

private:
  // Builds `kernel`'s block mask of the timing shape into prepared_ (none for no work).
  llvm::Error buildBlockMask(const ForwardKernel &kernel, CUstream stream) const;

  ForwardShape shape_;
  std::vector<ForwardBuffers> sets_;
  // The kernel prepare() readied last and its block mask (a mask_mod's kernel only): the
  // mask's shape and buffer, and the tile counter its persistent walk takes.
  struct Prepared {
    const LoadedKernel *kernel = nullptr;
    bool blockMask = false;
    BlockMaskShape maskShape;
    runtime::DeviceBuffer mask, counter;
  };
  mutable Prepared prepared_;
};

// Median of a sample (sorted copy).
double median(std::vector<double> values);

// Median, min, p10 and p90 of per-launch times (microseconds).
Measurement summarize(std::vector<double> us, int rotation);

} // namespace flashjit::tuner
