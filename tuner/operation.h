// What the tuner needs of one operation (the forward pass, the backward pass, ...):
// how a built variant is loaded, the problems that gate it on correctness, the problem
// it is timed on, and its FLOP count. The generic machinery (tune.cpp, tuner.cpp,
// screening.cpp, the sweep, the CLI) reaches an operation only through this interface
// (DESIGN.md, "Adding an operation"); each operation's host code lives in its own files
// (forward_*.cpp, backward_*.cpp).
#pragma once

#include "generator/emit.h"
#include "generator/spec.h"
#include "runtime/driver.h"
#include "tuner/checker.h"
#include "tuner/forward_problem.h"
#include "tuner/loaded_kernel.h"
#include "tuner/measure.h"
#include "tuner/roofline.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace flashjit::tuner {

// The operation itself.
class Operation {
public:
  virtual ~Operation() = default;
  virtual generator::Operation id() const = 0;

  // The kernels of a compiled variant, loaded in the current context.
  virtual llvm::Expected<std::unique_ptr<LoadedKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted) const = 0;

  // The small problems every candidate must pass before it is timed.
  virtual std::vector<ForwardShape> correctnessShapes(const generator::KernelSpec &spec) const = 0;
  virtual llvm::Expected<std::unique_ptr<Checker>>
  makeChecker(const generator::KernelSpec &spec, const ForwardShape &shape, uint64_t seed,
              CUstream stream) const = 0;

  // The problem a bucket is timed on, with its inputs rotated over enough sets to
  // exceed twice the L2 (measure.h).
  virtual llvm::Expected<std::unique_ptr<TimingProblem>>
  makeTimingProblem(const generator::KernelSpec &spec, const ForwardShape &shape,
                    uint64_t l2Bytes) const = 0;

  // Split-KV operations (decode) tune their split count together with the tile
  // (docs/TUNING.md, "The space", decode): the explicit counts worth timing for `kernel`
  // on `shape` besides its heuristic's, and the kernel launching with the count tuned on
  // `tunedOn` (sharing its loaded module). Other operations have none: {} and null.
  virtual std::vector<int> splitCountsToTime(const LoadedKernel &kernel,
                                             const ForwardShape &shape) const {
    return {};
  }
  virtual std::unique_ptr<LoadedKernel> withSplits(const LoadedKernel &kernel, int splits,
                                                   const ForwardShape &tunedOn) const {
    return nullptr;
  }

  // Useful FLOPs of one run on `shape` (the papers' count), for TFLOP/s.
  virtual double flops(const generator::KernelSpec &spec, const ForwardShape &shape) const = 0;

  // The roofline's floor for one run on `shape` (tuner/roofline.h): the larger of the
  // FLOPs at peak and the compulsory bytes (every tensor moved once) at HBM bandwidth.
  virtual RooflinePoint floor(const generator::KernelSpec &spec, const ForwardShape &shape,
                              const GpuSpec &gpu) const = 0;
};

// The operation a family's kernels perform.
const Operation &operationFor(generator::Family family);

// The operations, one definition each (forward_operation.cpp, backward_operation.cpp,
// decode_operation.cpp).
const Operation &forwardOperation();
const Operation &backwardOperation();
const Operation &decodeOperation();

// Throughput of one run of `us` microseconds, 0 when not timed.
double usefulTflops(const generator::KernelSpec &spec, const ForwardShape &shape, double us);

} // namespace flashjit::tuner
