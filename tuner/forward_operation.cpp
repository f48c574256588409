// The forward pass as the tuner sees it (tuner/operation.h): fwd_mma and fwd_wgmma.
#include "tuner/bucket.h"
#include "tuner/checker.h"
#include "tuner/operation.h"
#include "tuner/roofline.h"

namespace flashjit::tuner {
namespace {

class ForwardOperation final : public Operation {
public:
  generator::Operation id() const override { return generator::Operation::Forward; }

  llvm::Expected<std::unique_ptr<LoadedKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted) const override {
    auto kernel = ForwardKernel::load(cubin, emitted.entryName, LaunchGeometry::of(emitted));
    if (!kernel)
      return kernel.takeError();
    return std::unique_ptr<LoadedKernel>(std::move(*kernel));
  }

  std::vector<ForwardShape> correctnessShapes(const generator::KernelSpec &spec) const override {
    return tuner::correctnessShapes(spec);
  }

  llvm::Expected<std::unique_ptr<Checker>> makeChecker(const generator::KernelSpec &spec,
                                                       const ForwardShape &shape, uint64_t seed,
                                                       CUstream stream) const override {
    auto checker = ForwardChecker::create(spec, shape, seed, stream);
    if (!checker)
      return checker.takeError();
    return std::unique_ptr<Checker>(std::move(*checker));
  }

  llvm::Expected<std::unique_ptr<TimingProblem>>
  makeTimingProblem(const generator::KernelSpec &spec, const ForwardShape &shape,
                    uint64_t l2Bytes) const override {
    auto problem =
        ForwardTimingProblem::create(spec.dtype, withFeatureInputs(spec, shape), l2Bytes);
    if (!problem)
      return problem.takeError();
    return std::unique_ptr<TimingProblem>(std::move(*problem));
  }

  double flops(const generator::KernelSpec &spec, const ForwardShape &shape) const override {
    return (double)attentionFlops(attentionShapeOf(spec, shape));
  }

  RooflinePoint floor(const generator::KernelSpec &spec, const ForwardShape &shape,
                      const GpuSpec &gpu) const override {
    AttentionShape a = attentionShapeOf(spec, shape);
    // GpuSpec's peak is the 16-bit tensor cores'; 8-bit ones run at twice that (sm_89,
    // sm_90), so an FP8 kernel's floor is half the time.
    GpuSpec peak = gpu;
    if (spec.dtype == generator::DType::E4M3)
      peak.peakFlops *= 2;
    return rooflinePoint(attentionFlops(a), compulsoryAttentionBytes(a, shape.withLse), peak);
  }
};

} // namespace

const Operation &forwardOperation() {
  static const ForwardOperation operation;
  return operation;
}

} // namespace flashjit::tuner
