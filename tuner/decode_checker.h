// The decode operation's correctness gate: a dec_mma kernel's output over a paged (or
// contiguous) cache against the forward references run on the same tensors as a
// variable-length problem, with the forward's bar (tuner/checker.h).
#pragma once

#include "tuner/checker.h"
#include "tuner/decode_problem.h"

#include <functional>
#include <memory>

namespace flashjit::tuner {

class DecodeChecker : public Checker {
public:
  // Random q, k, v, the references, then the cache built from the same k and v.
  static llvm::Expected<std::unique_ptr<DecodeChecker>>
  create(const generator::KernelSpec &spec, const ForwardShape &shape, uint64_t seed,
         CUstream stream);

  llvm::Expected<CheckReport> check(const LoadedKernel &kernel, CUstream stream) override;
  const ForwardShape &shape() const override { return shape_; }

  // The same check with the caller's own launch (e.g. through the C API): `launch` gets
  // the problem's parameters (q, o and the lse [batch, heads_q, seqlen_q] poisoned,
  // num_splits from shape().decodeSplits or 0, no workspace bound) and the buffers.
  using Launch = std::function<llvm::Error(const FjDecodeParams &, const DecodeBuffers &)>;
  llvm::Expected<CheckReport> checkWith(const Launch &launch, CUstream stream);

private:
  DecodeChecker() = default;
  ForwardShape shape_;
  std::unique_ptr<ForwardChecker> reference_;
  DecodeBuffers buffers_;
};

} // namespace flashjit::tuner
