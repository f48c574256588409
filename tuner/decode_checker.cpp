#include "tuner/decode_checker.h"

#include "support/error.h"
#include "tuner/check_support.h"
#include "tuner/decode_kernel.h"

namespace flashjit::tuner {

llvm::Expected<std::unique_ptr<DecodeChecker>>
DecodeChecker::create(const generator::KernelSpec &spec, const ForwardShape &shape,
                      uint64_t seed, CUstream stream) {
  auto checker = std::unique_ptr<DecodeChecker>(new DecodeChecker());
  checker->shape_ = shape;
  checker->shape_.headDim = spec.headDim;
  checker->shape_.headDimV = spec.headDimV;
  // The reference: the same attention as a plain variable-length forward problem.
  generator::KernelSpec forward = spec;
  forward.family = generator::Family::FwdMma;
  forward.features = {};
  auto reference =
      ForwardChecker::create(forward, decodeAsForward(checker->shape_), seed, stream);
  if (!reference)
    return reference.takeError();
  checker->reference_ = std::move(*reference);
  auto k = downloadAll<uint16_t>(checker->reference_->buffers().k);
  if (!k)
    return k.takeError();
  auto v = downloadAll<uint16_t>(checker->reference_->buffers().v);
  if (!v)
    return v.takeError();
  auto buffers = allocateDecodeBuffers(spec.dtype, checker->shape_, *k, *v, seed + 1);
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
  if (llvm::Error err = reference_->poisonOutputs())
    return std::move(err);
  // q, o and the lse are the reference problem's own (packed rows b * seqQ + i, the
  // lse as [heads, total rows]), so its comparison reads what the kernel wrote.
  const ForwardBuffers &r = reference_->buffers();
  FjDecodeParams p = makeDecodeParams(shape_, buffers_);
  p.q = (const void *)r.q.ptr();
  p.o = (void *)r.o.ptr();
  p.lse = shape_.withLse ? (float *)r.lse.ptr() : nullptr;
  p.lse_batch_stride = shape_.seqQ;
  p.lse_head_stride = (long long)shape_.batch * shape_.seqQ;
  const DecodeSplits splits = kernel->plan(p, shape_.decodeSplits);
  p.num_splits = splits.numSplits;
  p.tiles_per_split = splits.tilesPerSplit;
  if (p.num_splits > 1) {
    if (llvm::Error err = buffers_.workspace.fill(0xFF))
      return std::move(err);
    bindDecodeWorkspace(p, shape_.headDimV, (void *)buffers_.workspace.ptr());
  }
  if (llvm::Error err = kernel->launch(p, stream))
    return std::move(err);
  auto report = reference_->compareOutputs(stream);
  if (report)
    report->output = llvm::formatv("o ({0} split{1})", p.num_splits, p.num_splits > 1 ? "s" : "");
  return report;
}

} // namespace flashjit::tuner
