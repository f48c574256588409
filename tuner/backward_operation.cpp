// The backward pass as the tuner sees it (tuner/operation.h): bwd_mma and bwd_wgmma.
#include "support/error.h"
#include "tuner/backward_checker.h"
#include "tuner/backward_kernel.h"
#include "tuner/backward_problem.h"
#include "tuner/bucket.h"
#include "tuner/operation.h"
#include "tuner/roofline.h"

#include <algorithm>
#include <cmath>

namespace flashjit::tuner {
namespace {

// The backward timing problem: the tensors of the bucket's shape over rotating sets,
// random q, k, v, o and dO, and an lse of log(keys the row sees), what random inputs of
// this scale give, so the probabilities are realistic. Times the whole pass (prep, the
// main kernel, convert) in the default (atomic) mode.
class BackwardTimingProblem final : public TimingProblem {
public:
  static llvm::Expected<std::unique_ptr<BackwardTimingProblem>>
  create(const generator::KernelSpec &spec, const ForwardShape &shape, uint64_t l2Bytes) {
    auto problem = std::unique_ptr<BackwardTimingProblem>(new BackwardTimingProblem());
    problem->shape_ = withFeatureInputs(spec, shape);  // ALiBi's slopes, a mod's arguments
    problem->shape_.withLse = true;
    const ForwardShape &s = problem->shape_;
    std::vector<float> lse = typicalLse(s, spec.causal);
    int sets = 1;
    for (int i = 0; i < sets; ++i) {
      auto buffers = allocateBackwardBuffers(s, /*withFp32Outputs=*/false, /*deterministic=*/false);
      if (!buffers)
        return buffers.takeError();
      BackwardBuffers &b = *buffers;
      if (i == 0)
        sets = rotationSets(b.fwd.q.size() + b.fwd.k.size() + b.fwd.v.size() + b.fwd.o.size() +
                                b.dout.size() + b.dq.size() + b.dk.size() + b.dv.size() +
                                b.workspace.size(),
                            l2Bytes);
      uint64_t seed = 1 + 5 * (uint64_t)i;
      for (runtime::DeviceBuffer *buffer : {&b.fwd.q, &b.fwd.k, &b.fwd.v, &b.fwd.o, &b.dout}) {
        auto host = randomHalves(buffer->size() / 2, spec.dtype, seed++);
        if (llvm::Error err = buffer->upload(host.data(), host.size() * 2))
          return std::move(err);
      }
      if (llvm::Error err = b.fwd.lse.upload(lse.data(), lse.size() * 4))
        return std::move(err);
      problem->sets_.push_back(std::move(b));
    }
    return std::move(problem);
  }

  llvm::Error launch(const LoadedKernel &loaded, int set, CUstream stream) const override {
    const BackwardKernel *kernel = BackwardKernel::of(loaded);
    if (!kernel)
      return makeError(ErrorCode::Internal, "a backward timing problem was given a {0} kernel",
                       generator::operationName(loaded.operation()));
    return kernel->launch(makeBackwardParams(shape_, sets_[set % sets_.size()], false), stream);
  }
  int rotation() const override { return (int)sets_.size(); }
  const ForwardShape &shape() const override { return shape_; }

private:
  // The lse (laid out [batch, heads, seqlen_q], or [heads, total_q] when variable-length)
  // of log(keys row i sees); -inf when it sees none.
  static std::vector<float> typicalLse(const ForwardShape &s, bool causal) {
    const long long totalQ = s.totalQ();
    std::vector<float> lse((size_t)s.headsQ * totalQ);
    long long packed = 0;
    for (int b = 0; b < s.batch; ++b) {
      const int rows = s.varlen() ? s.seqlensQ[b] : s.seqQ;
      const int keys = s.varlen() ? s.seqlensK[b] : s.seqK;
      for (int i = 0; i < rows; ++i) {
        const int seen = causal ? std::clamp(i + 1 + keys - rows, 0, keys) : keys;
        const float value = seen > 0 ? std::log((float)seen) : -INFINITY;
        for (int h = 0; h < s.headsQ; ++h)
          lse[s.varlen() ? h * totalQ + packed + i
                         : ((long long)b * s.headsQ + h) * s.seqQ + i] = value;
      }
      packed += rows;
    }
    return lse;
  }

  BackwardTimingProblem() = default;
  ForwardShape shape_;
  std::vector<BackwardBuffers> sets_;
};

class BackwardOperation final : public Operation {
public:
  generator::Operation id() const override { return generator::Operation::Backward; }

  llvm::Expected<std::unique_ptr<LoadedKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted) const override {
    auto kernel = BackwardKernel::load(cubin, emitted);
    if (!kernel)
      return kernel.takeError();
    return std::unique_ptr<LoadedKernel>(std::move(*kernel));
  }

  // The forward's problems: lengths that are no multiple of any tile, more keys than
  // queries and the reverse (causal rows that see no key), MHA and GQA.
  std::vector<ForwardShape> correctnessShapes(const generator::KernelSpec &spec) const override {
    return tuner::correctnessShapes(spec);
  }

  llvm::Expected<std::unique_ptr<Checker>> makeChecker(const generator::KernelSpec &spec,
                                                       const ForwardShape &shape, uint64_t seed,
                                                       CUstream stream) const override {
    auto checker = BackwardChecker::create(spec, shape, seed, stream);
    if (!checker)
      return checker.takeError();
    return std::unique_ptr<Checker>(std::move(*checker));
  }

  llvm::Expected<std::unique_ptr<TimingProblem>>
  makeTimingProblem(const generator::KernelSpec &spec, const ForwardShape &shape,
                    uint64_t l2Bytes) const override {
    auto problem = BackwardTimingProblem::create(spec, shape, l2Bytes);
    if (!problem)
      return problem.takeError();
    return std::unique_ptr<TimingProblem>(std::move(*problem));
  }

  double flops(const generator::KernelSpec &spec, const ForwardShape &shape) const override {
    return (double)attentionBackwardFlops(attentionShapeOf(spec, shape));
  }

  RooflinePoint floor(const generator::KernelSpec &spec, const ForwardShape &shape,
                      const GpuSpec &gpu) const override {
    AttentionShape a = attentionShapeOf(spec, shape);
    return rooflinePoint(attentionBackwardFlops(a), compulsoryAttentionBackwardBytes(a), gpu);
  }
};

} // namespace

const Operation &backwardOperation() {
  static const BackwardOperation operation;
  return operation;
}

} // namespace flashjit::tuner
