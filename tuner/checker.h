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
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace flashjit::tuner {

// The outcome of running a candidate against its operation's reference, with the bar
// above applied to each output.
struct CheckReport {
  bool passed = false;
  double maxError = 0;     // max |out - ref| (of the output furthest over its bar)
  double naiveError = 0;   // max |naive_same_dtype - ref| of that output
  double tolerance = 0;    // 2 * naiveError + 1e-5 (FP8: 3 *, FlashAttention-3's bar)
  double lseError = 0;     // forward: max |lse - ref_lse| over rows that see keys
  long long badValues = 0; // NaN/inf (unwritten: poisoned) elements, LSE -inf mismatches
  std::string output;      // which output the figures are of ("dq", ...); "" for o
  std::string summary() const;
};

// One problem a candidate must pass, of any operation: inputs and references made
// once, then any number of kernels checked against them.
class Checker {
public:
  virtual ~Checker() = default;
  // Runs the kernel on the inputs (outputs poisoned first) and compares.
  virtual llvm::Expected<CheckReport> check(const LoadedKernel &kernel, CUstream stream) = 0;
  virtual const ForwardShape &shape() const = 0;
};

// The forward reference (fp32, or emulating the dtype's rounding), built once per
// (dtype, mode, target, features, FP8's output type) in each context that asks.
llvm::Expected<const ReferenceKernel *>
forwardReference(generator::DType dtype, bool emulate, const std::string &target,
                 const generator::Features &features = {},
                 generator::DType outDtype = generator::DType::BF16);

class ForwardChecker : public Checker {
public:
  // Random inputs (normal, fixed seed) for the shape, and both references, once.
  // `adjustInputs`, when given, may change the inputs before the references run (the
  // decode of an FP8 cache puts K and V on the values it dequantizes to).
  using InputHook = std::function<llvm::Error(ForwardBuffers &)>;
  static llvm::Expected<std::unique_ptr<ForwardChecker>>
  create(const generator::KernelSpec &spec, const ForwardShape &shape, uint64_t seed,
         CUstream stream, const InputHook &adjustInputs = nullptr);

  llvm::Expected<CheckReport> check(const LoadedKernel &kernel, CUstream stream) override;

  // Whether run() builds a block mask first (kernels with a mask_mod), and with keep bits
  // for every partly masked tile or for none. With bits, a kernel that orders its walk
  // (LaunchGeometry::blockOrder) takes the order whatever it promises; without, its own
  // walk: so the two runs check both walks.
  enum class BlockMaskUse { None, WithBits, WithoutBits };
  // Runs the kernel and returns its raw output bits (for bitwise rerun checks).
  llvm::Expected<std::vector<uint16_t>> run(const ForwardKernel &kernel, CUstream stream,
                                            BlockMaskUse blockMask = BlockMaskUse::None);

  const ForwardShape &shape() const override { return shape_; }
  const ForwardBuffers &buffers() const { return buffers_; }
  ForwardBuffers &buffers() { return buffers_; }

  // For kernels of other operations that compute the same attention (decode): fill O
  // and the LSE with NaN, let the caller's kernel write them (in this problem's layout),
  // then compare what is there with the references.
  llvm::Error poisonOutputs();
  llvm::Expected<CheckReport> compareOutputs(CUstream stream);

private:
  llvm::Expected<CheckReport> compare(const std::vector<uint16_t> &o);
  ForwardChecker() = default;
  generator::KernelSpec spec_;
  ForwardShape shape_;
  ForwardBuffers buffers_;
  std::vector<float> ref_, refLse_, naive_;
  // FP8: max |lse_naive - lse_ref|, the naive computation's own LSE error (FP8 tensor
  // cores sum Q K^T with a shorter accumulator than fp32, so the kernel's LSE is measured
  // against the naive's instead of a fixed bar).
  double naiveLseError_ = 0;
};

} // namespace flashjit::tuner
