#include "tuner/decode_checker.h"

#include "support/error.h"
#include "tuner/check_support.h"
#include "tuner/decode_kernel.h"

#include <tuple>

namespace flashjit::tuner {

llvm::Expected<std::unique_ptr<DecodeChecker>>
DecodeChecker::create(const generator::KernelSpec &spec, const ForwardShape &shape,
                      uint64_t seed, CUstream stream) {
  auto checker = std::unique_ptr<DecodeChecker>(new DecodeChecker());
  // ALiBi's made-up slopes and the user code's args, the kernel's and the reference's.
  checker->shape_ = withFeatureInputs(spec, shape);
  checker->shape_.headDim = spec.headDim;
  checker->shape_.headDimV = spec.headDimV;
  // The reference: the same attention as a variable-length forward problem with the
  // same features (the window, soft-capping, ALiBi with the same made-up slopes, the
  // user's score_mod and mask_mod with the same args). An
  // FP8 cache's is the 16-bit problem whose K and V are the values the cache dequantizes
  // to (so the kernel's result must match it to the 16-bit kernels' bar).
  const bool fp8 = spec.dtype == generator::DType::E4M3;
  generator::KernelSpec forward = spec;
  forward.family = generator::Family::FwdMma;
  forward.dtype = spec.outputDtype();
  const ForwardShape &decodeShape = checker->shape_;
  auto onCacheValues = [&](ForwardBuffers &b) -> llvm::Error {
    for (auto [buffer, ofV, dim] : {std::tuple{&b.k, false, decodeShape.headDim},
                                    std::tuple{&b.v, true, decodeShape.headDimV}}) {
      auto rows = downloadAll<uint16_t>(*buffer);
      if (!rows)
        return rows.takeError();
      quantizeDecodeRows(decodeShape, forward.dtype, ofV, dim, *rows);
      if (llvm::Error err = buffer->upload(rows->data(), rows->size() * 2))
        return err;
    }
    return llvm::Error::success();
  };
  auto reference = ForwardChecker::create(forward, decodeAsForward(checker->shape_), seed,
                                          stream, fp8 ? ForwardChecker::InputHook(onCacheValues)
                                                      : ForwardChecker::InputHook());
  if (!reference)
    return reference.takeError();
  checker->reference_ = std::move(*reference);
  auto k = downloadAll<uint16_t>(checker->reference_->buffers().k);
  if (!k)
    return k.takeError();
  auto v = downloadAll<uint16_t>(checker->reference_->buffers().v);
  if (!v)
    return v.takeError();
  auto buffers =
      allocateDecodeBuffers(spec.dtype, checker->shape_, *k, *v, seed + 1, spec.outputDtype());
  if (!buffers)
    return buffers.takeError();
  checker->buffers_ = std::move(*buffers);
  return std::move(checker);
}

llvm::Expected<CheckReport> DecodeChecker::check(const LoadedKernel &loaded, CUstream stream) {
  const DecodeKernel *kernel = DecodeKernel::of(loaded);
  if (!kernel)
    return makeError(ErrorCode::Internal, "the decode checker was given a {0} kernel",
                     generator::operationName(loaded.operation()));
  int splitsRun = 1;
  auto report = checkWith(
      [&](const FjDecodeParams &given, const DecodeBuffers &b) -> llvm::Error {
        FjDecodeParams p = given;
        const DecodeSplits splits = kernel->plan(p, shape_.decodeSplits);
        p.num_splits = splitsRun = splits.numSplits;
        p.tiles_per_split = splits.tilesPerSplit;
        if (p.num_splits > 1) {
          if (llvm::Error err = buffers_.workspace.fill(0xFF))
            return err;
          bindDecodeWorkspace(p, shape_.headDimV, (void *)b.workspace.ptr());
        }
        return kernel->launch(p, stream);
      },
      stream);
  if (report)
    report->output = llvm::formatv("o ({0} split{1})", splitsRun, splitsRun > 1 ? "s" : "");
  return report;
}

llvm::Expected<CheckReport> DecodeChecker::checkWith(const Launch &launch, CUstream stream) {
  if (llvm::Error err = reference_->poisonOutputs())
    return std::move(err);
  if (llvm::Error err = buffers_.lse.fill(0xFF))
    return std::move(err);
  // q and o are the reference problem's own (packed rows b * seqQ + i: the decode
  // layout), so its comparison reads what the kernel wrote; the lse is the decode's
  // [batch, heads, seqQ], moved into the reference's [heads, rows] afterwards.
  ForwardBuffers &r = reference_->buffers();
  FjDecodeParams p = makeDecodeParams(shape_, buffers_);
  p.q = (const void *)r.q.ptr();
  p.o = (void *)r.o.ptr();
  p.num_splits = shape_.decodeSplits;
  if (llvm::Error err = launch(p, buffers_))
    return std::move(err);
  if (shape_.withLse) {
    if (llvm::Error err = runtime::synchronizeStream(stream))
      return std::move(err);
    auto lse = downloadAll<float>(buffers_.lse);
    if (!lse)
      return lse.takeError();
    const long long rows = (long long)shape_.batch * shape_.seqQ;
    std::vector<float> packed((size_t)(shape_.headsQ * rows));
    for (int b = 0; b < shape_.batch; ++b)
      for (int h = 0; h < shape_.headsQ; ++h)
        for (int i = 0; i < shape_.seqQ; ++i)
          packed[h * rows + (long long)b * shape_.seqQ + i] =
              (*lse)[((size_t)b * shape_.headsQ + h) * shape_.seqQ + i];
    if (llvm::Error err = r.lse.upload(packed.data(), packed.size() * 4))
      return std::move(err);
  }
  return reference_->compareOutputs(stream);
}

} // namespace flashjit::tuner
