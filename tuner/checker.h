// The correctness gate: a candidate kernel's output against the reference, on random
// inputs, with the bar of DESIGN.md:
//   max|out - ref| <= 2 * max|naive_same_dtype - ref| + 1e-5
// where ref is the textbook formula in fp32 and naive_same_dtype the same formula
// rounding like the input dtype. Outputs are poisoned (NaN) before every run, so an
// element the kernel did not write fails; NaN never passes; the LSE is checked too.
#pragma once

#include "generator/spec.h"
#include "tuner/forward_problem.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace flashjit::tuner {

struct CheckReport {
  bool passed = false;
  double maxError = 0;     // max |out - ref|
  double naiveError = 0;   // max |naive_same_dtype - ref|
  double tolerance = 0;    // 2 * naiveError + 1e-5
  double lseError = 0;     // max |lse - ref_lse| over rows that see keys
  long long badValues = 0; // NaN/inf in the output, or LSE mismatches in -inf-ness
  std::string summary() const;
};

class ForwardChecker {
public:
  // Random inputs (normal, fixed seed) for the shape, and both references, once.
  static llvm::Expected<std::unique_ptr<ForwardChecker>>
  create(const generator::KernelSpec &spec, const ForwardShape &shape, uint64_t seed,
         CUstream stream);

  // Runs the kernel on the inputs (outputs poisoned first) and compares.
  llvm::Expected<CheckReport> check(const ForwardKernel &kernel, CUstream stream);

  // Runs the kernel and returns its raw output bits (for bitwise rerun checks).
  llvm::Expected<std::vector<uint16_t>> run(const ForwardKernel &kernel, CUstream stream);

  const ForwardShape &shape() const { return shape_; }
  const ForwardBuffers &buffers() const { return buffers_; }

private:
  ForwardChecker() = default;
  generator::KernelSpec spec_;
  ForwardShape shape_;
  ForwardBuffers buffers_;
  std::vector<float> ref_, refLse_, naive_;
};

} // namespace flashjit::tuner
