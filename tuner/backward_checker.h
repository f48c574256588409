// The backward pass's correctness gate: dQ, dK and dV of a candidate against the
// backward reference on random inputs (q, k, v and dO normal; o and lse from the fp32
// forward reference, o rounded to the dtype as a forward kernel would give it), each
// output held to DESIGN.md's bar: max|out - ref| <= 2 * max|naive_same_dtype - ref| +
// 1e-5. The gradients and the workspace are poisoned (NaN) before every run, so an
// element the kernels did not write, or scratch they read before writing, fails.
#pragma once

#include "generator/spec.h"
#include "tuner/backward_kernel.h"
#include "tuner/backward_problem.h"
#include "tuner/checker.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace flashjit::tuner {

class BackwardChecker : public Checker {
public:
  // Whether a kernel that walks a block mask's steps (BackwardKernel::hasBlockSteps) is
  // given them, built for the problem first: per sequence and head, or shared by the
  // heads (and by the sequences, without cu_seqlens), as fj_block_mask_options allow for
  // a mask_mod that reads neither. A kernel that reads keep bits
  // (BackwardEntries::stepBits) gets them for every partly masked step, or with
  // PerHeadFewBits for the first 3 built (the rest call mask_mod: both ways in one run).
  enum class BlockSteps { None, PerHead, Shared, PerHeadFewBits };
  // `deterministic`: the kernels run in deterministic mode (dQ by its own kernel).
  static llvm::Expected<std::unique_ptr<BackwardChecker>>
  create(const generator::KernelSpec &spec, const ForwardShape &shape, uint64_t seed,
         CUstream stream, bool deterministic = false, BlockSteps blockSteps = BlockSteps::None);

  llvm::Expected<CheckReport> check(const LoadedKernel &kernel, CUstream stream) override;
  const ForwardShape &shape() const override { return shape_; }

  // Runs the kernel and returns the raw bits of dq, dk and dv, concatenated (for
  // bitwise rerun checks).
  llvm::Expected<std::vector<uint16_t>> run(const BackwardKernel &kernel, CUstream stream);

  // The same with any launcher of the problem's parameters (the C API's fj_backward, in
  // its tests): it gets them with the workspace bound to workspace() and must leave
  // dq, dk and dv written when the stream is done.
  using Launch = std::function<llvm::Error(const FjBackwardParams &params, CUstream stream)>;
  llvm::Expected<std::vector<uint16_t>> runWith(const Launch &launch, CUstream stream);
  llvm::Expected<CheckReport> checkWith(const Launch &launch, CUstream stream);
  const runtime::DeviceBuffer &workspace() const { return buffers_.workspace; }

private:
  BackwardChecker() = default;
  // kernel.launch, after building the block mask's steps when blockSteps_ says so.
  Launch launcherFor(const BackwardKernel &kernel);
  struct Output {
    const char *name;
    runtime::DeviceBuffer *buffer;
    std::vector<long long> indices;
    std::vector<float> ref, naive;
  };
  generator::KernelSpec spec_;
  ForwardShape shape_;
  BackwardBuffers buffers_;
  std::vector<Output> outputs_;  // dq, dk, dv
  BlockSteps blockSteps_ = BlockSteps::None;
  runtime::DeviceBuffer stepsBuffer_;
};

} // namespace flashjit::tuner
