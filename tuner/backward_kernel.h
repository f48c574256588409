// The backward pass's kernels loaded on the device: a variant's module (prep, the main
// passes, convert, dq; generator::BackwardEntries) launched in order, and the naive
// reference the checker compares it with.
#pragma once

#include "generator/emit.h"
#include "runtime/driver.h"
#include "templates/fj_bwd_params.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <vector>

namespace flashjit::tuner {

class BackwardKernel : public LoadedKernel {
public:
  static llvm::Expected<std::unique_ptr<BackwardKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted);
  // The backward kernel a LoadedKernel is, or null when it is another operation's.
  static const BackwardKernel *of(const LoadedKernel &kernel);

  // Asynchronous: prep, the main passes, then convert (params.dq_accum set) or the
  // deterministic dq kernel (params.dq_accum null). Checks nothing but the launches (the
  // caller validated params and bound the workspace).
  llvm::Error launch(const FjBackwardParams &params, CUstream stream) const;

  generator::Operation operation() const override { return generator::Operation::Backward; }
  int registers() const override { return registers_; }
  const generator::BackwardEntries &entries() const { return entries_; }

private:
  std::unique_ptr<runtime::Module> module_;
  runtime::Kernel prep_, convert_, dq_;
  std::vector<runtime::Kernel> passes_;
  generator::BackwardEntries entries_;
  int threads_ = 0, sharedBytes_ = 0, registers_ = 0;
};

// The naive backward reference (fp32, or emulating the dtype's rounding), with the
// spec's features: generator::emitBackwardReference's two kernels.
class BackwardReferenceKernel {
public:
  static llvm::Expected<std::unique_ptr<BackwardReferenceKernel>>
  build(generator::DType dtype, bool emulateLowPrecision, const std::string &target,
        const generator::Features &features = {});
  // Writes dq, dk and dv of `params` (in fp32, or the dtype when emulating), and the
  // reference's own lse and D into lseRef and dpsumRef (laid out like the lse).
  llvm::Error launch(const FjBackwardParams &params, int headDim, int headDimV, bool causal,
                     float *lseRef, float *dpsumRef, CUstream stream) const;

private:
  std::unique_ptr<runtime::Module> module_;
  runtime::Kernel rows_, keys_;
  int threads_ = 0;
};

} // namespace flashjit::tuner
