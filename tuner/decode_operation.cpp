// The decode operation as the tuner sees it (tuner/operation.h): dec_mma, split-KV
// attention of a few query rows per sequence over a paged KV cache.
#include "support/error.h"
#include "tuner/bucket.h"
#include "tuner/decode_checker.h"
#include "tuner/decode_kernel.h"
#include "tuner/decode_problem.h"
#include "tuner/operation.h"
#include "tuner/roofline.h"

#include <algorithm>

namespace flashjit::tuner {
namespace {

// Pages of the timing problem: a common serving size (vLLM's default is 16,
// FlashAttention's 256); every row looks its page up either way.
constexpr int kTimingPageSize = 64;

// The timing problem: the bucket's shape over a paged cache with shuffled pages, in
// rotating sets past twice the L2, with the heuristic's split count.
class DecodeTimingProblem final : public TimingProblem {
public:
  static llvm::Expected<std::unique_ptr<DecodeTimingProblem>>
  create(const generator::KernelSpec &spec, const ForwardShape &shape, uint64_t l2Bytes) {
    auto problem = std::unique_ptr<DecodeTimingProblem>(new DecodeTimingProblem());
    problem->shape_ = withFeatureInputs(spec, shape);  // made-up slopes, the tuning args
    problem->shape_.headDim = spec.headDim;
    problem->shape_.headDimV = spec.headDimV;
    if (problem->shape_.pageSize == 0)
      problem->shape_.pageSize = kTimingPageSize;
    int sets = 1;
    for (int i = 0; i < sets; ++i) {
      auto buffers = allocateDecodeBuffers(spec.dtype, problem->shape_, {}, {}, 1 + 7 * i,
                                           spec.outputDtype());
      if (!buffers)
        return buffers.takeError();
      if (i == 0)
        sets = rotationSets(buffers->k.size() + buffers->v.size() + buffers->q.size() +
                                buffers->o.size(),
                            l2Bytes);
      problem->sets_.push_back(std::move(*buffers));
    }
    return std::move(problem);
  }

  llvm::Error launch(const LoadedKernel &loaded, int set, CUstream stream) const override {
    const DecodeKernel *kernel = DecodeKernel::of(loaded);
    if (!kernel)
      return makeError(ErrorCode::Internal, "a decode timing problem was given a {0} kernel",
                       generator::operationName(loaded.operation()));
    const DecodeBuffers &b = sets_[set % sets_.size()];
    FjDecodeParams p = makeDecodeParams(shape_, b);
    const DecodeSplits splits = kernel->plan(p, shape_.decodeSplits);
    p.num_splits = splits.numSplits;
    p.tiles_per_split = splits.tilesPerSplit;
    if (p.num_splits > 1)
      bindDecodeWorkspace(p, shape_.headDimV, (void *)b.workspace.ptr());
    return kernel->launch(p, stream);
  }
  int rotation() const override { return (int)sets_.size(); }
  const ForwardShape &shape() const override { return shape_; }

private:
  DecodeTimingProblem() = default;
  ForwardShape shape_;
  std::vector<DecodeBuffers> sets_;
};

class DecodeOperation final : public Operation {
public:
  generator::Operation id() const override { return generator::Operation::Decode; }

  llvm::Expected<std::unique_ptr<LoadedKernel>>
  load(llvm::StringRef cubin, const generator::EmittedKernel &emitted) const override {
    auto kernel = DecodeKernel::load(cubin, emitted);
    if (!kernel)
      return kernel.takeError();
    return std::unique_ptr<LoadedKernel>(std::move(*kernel));
  }

  // Decode steps of 1 and 7 query rows, MHA and GQA, cache lengths that are no multiple
  // of any tile or page (one of them shorter than the query rows: causal rows that see
  // no key), shuffled pages of 16 and a contiguous cache, one split and several; for
  // user code that reads tensors, clamped into the shape its tuning args are sized for
  // (tuner::withinTuningShape), or, when that is not known, within the forward's checks
  // (tuner::correctnessShapes: at most 2 sequences, 2 query heads and 389 rows and keys).
  std::vector<ForwardShape> correctnessShapes(const generator::KernelSpec &spec) const override {
    auto shape = [&](int batch, int hq, int hkv, int sq, std::vector<int> lens, int page,
                     int splits) {
      ForwardShape s;
      s.batch = batch, s.headsQ = hq, s.headsKV = hkv, s.seqQ = sq;
      s.seqK = *std::max_element(lens.begin(), lens.end());
      s.seqlensK = std::move(lens);
      s.headDim = spec.headDim, s.headDimV = spec.headDimV;
      s.pageSize = page, s.decodeSplits = splits;
      return withinTuningShape(spec, s);
    };
    if (spec.features.readsTensors() && !boundedByTuningShape(spec))
      return {shape(2, 2, 1, 1, {389, 77}, 16, 0), shape(2, 2, 1, 7, {5, 257}, 0, 3),
              shape(1, 2, 2, 3, {300}, 32, 1)};
    return {shape(3, 8, 2, 1, {1003, 77, 2050}, 16, 0),
            shape(2, 6, 1, 7, {5, 613}, 0, 3),
            shape(2, 4, 4, 3, {300, 129}, 32, 1)};
  }

  llvm::Expected<std::unique_ptr<Checker>> makeChecker(const generator::KernelSpec &spec,
                                                       const ForwardShape &shape, uint64_t seed,
                                                       CUstream stream) const override {
    auto checker = DecodeChecker::create(spec, shape, seed, stream);
    if (!checker)
      return checker.takeError();
    return std::unique_ptr<Checker>(std::move(*checker));
  }

  llvm::Expected<std::unique_ptr<TimingProblem>>
  makeTimingProblem(const generator::KernelSpec &spec, const ForwardShape &shape,
                    uint64_t l2Bytes) const override {
    auto problem = DecodeTimingProblem::create(spec, shape, l2Bytes);
    if (!problem)
      return problem.takeError();
    return std::unique_ptr<TimingProblem>(std::move(*problem));
  }

  std::vector<int> splitCountsToTime(const LoadedKernel &loaded,
                                     const ForwardShape &shape) const override {
    const DecodeKernel *kernel = DecodeKernel::of(loaded);
    if (!kernel)
      return {};
    return kernel->splitCountsToTime(decodeSizes(shape));
  }
  std::unique_ptr<LoadedKernel> withSplits(const LoadedKernel &loaded, int splits,
                                           const ForwardShape &tunedOn) const override {
    const DecodeKernel *kernel = DecodeKernel::of(loaded);
    return kernel ? kernel->withSplits(splits, decodeSizes(tunedOn)) : nullptr;
  }

  double flops(const generator::KernelSpec &spec, const ForwardShape &shape) const override {
    return (double)attentionFlops(attentionShapeOf(spec, shape));
  }

  // Decode is memory-bound: the floor is K and V read once (plus q, o), at HBM speed.
  RooflinePoint floor(const generator::KernelSpec &spec, const ForwardShape &shape,
                      const GpuSpec &gpu) const override {
    AttentionShape a = attentionShapeOf(spec, shape);
    return rooflinePoint(attentionFlops(a), compulsoryAttentionBytes(a, shape.withLse), gpu);
  }
};

} // namespace

const Operation &decodeOperation() {
  static const DecodeOperation operation;
  return operation;
}

} // namespace flashjit::tuner
