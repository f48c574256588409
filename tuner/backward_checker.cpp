#include "tuner/backward_checker.h"

#include "support/error.h"
#include "tuner/check_support.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <random>

namespace flashjit::tuner {
namespace {

llvm::Expected<const BackwardReferenceKernel *>
backwardReference(const generator::KernelSpec &spec, bool emulate) {
  return referenceInContext<BackwardReferenceKernel>(
      llvm::formatv("bwd.{0}.{1}.{2}{3}", generator::dtypeName(spec.dtype), emulate, spec.target,
                    spec.features.keySuffix())
          .str(),
      [&] {
        return BackwardReferenceKernel::build(spec.dtype, emulate, spec.target, spec.features);
      });
}

llvm::Expected<runtime::DeviceBuffer> allocateFloats(long long count) {
  return runtime::DeviceBuffer::allocate(std::max<long long>(count, 4) * 4);
}

// The forward's o (fp32 reference, rounded to the dtype) and lse, as a forward kernel
// would have written them: the inputs the backward pass is given.
llvm::Error writeForwardOutputs(const generator::KernelSpec &spec, const ForwardShape &shape,
                                BackwardBuffers &b, CUstream stream) {
  auto ref = forwardReference(spec.dtype, false, spec.target, spec.features);
  if (!ref)
    return ref.takeError();
  ForwardShape withLse = shape;
  withLse.withLse = true;
  FjForwardParams p32 = makeParams(withLse, b.fwd, /*fp32Output=*/true);
  if (llvm::Error err = (*ref)->launch(p32, shape.headDim, shape.headDimV, spec.causal, stream))
    return err;
  if (llvm::Error err = runtime::synchronizeStream(stream))
    return err;
  auto o32 = downloadAll<float>(b.fwd.o32);
  if (!o32)
    return o32.takeError();
  std::vector<uint16_t> o16(b.fwd.o.size() / 2, 0);
  for (size_t i = 0; i < o16.size() && i < o32->size(); ++i)
    o16[i] = floatToHalf(spec.dtype, std::isfinite((*o32)[i]) ? (*o32)[i] : 0.f);
  return b.fwd.o.upload(o16.data(), o16.size() * 2);
}

} // namespace

llvm::Expected<std::unique_ptr<BackwardChecker>>
BackwardChecker::create(const generator::KernelSpec &spec, const ForwardShape &shape,
                        uint64_t seed, CUstream stream, bool deterministic,
                        BlockSteps blockSteps) {
  auto checker = std::unique_ptr<BackwardChecker>(new BackwardChecker());
  checker->spec_ = spec;
  checker->blockSteps_ = blockSteps;
  checker->shape_ = withFeatureInputs(spec, shape);  // ALiBi's slopes, a mod's arguments
  checker->shape_.headDim = spec.headDim;
  checker->shape_.headDimV = spec.headDimV;
  checker->shape_.withLse = true;
  const ForwardShape &s = checker->shape_;
  auto buffers = allocateBackwardBuffers(s, /*withFp32Outputs=*/true, deterministic);
  if (!buffers)
    return buffers.takeError();
  checker->buffers_ = std::move(*buffers);
  BackwardBuffers &b = checker->buffers_;
  std::mt19937_64 rng(seed);
  for (runtime::DeviceBuffer *buffer : {&b.fwd.q, &b.fwd.k, &b.fwd.v, &b.dout})
    if (llvm::Error err = fillNormal(*buffer, spec.dtype, rng))
      return std::move(err);
  if (llvm::Error err = writeForwardOutputs(spec, s, b, stream))
    return std::move(err);

  // The references: fp32 into dq32/dk32/dv32, the dtype's rounding into dq/dk/dv.
  auto ref32 = backwardReference(spec, false);
  if (!ref32)
    return ref32.takeError();
  auto naive = backwardReference(spec, true);
  if (!naive)
    return naive.takeError();
  const long long stats = (long long)s.headsQ * s.totalQ();
  auto lseRef = allocateFloats(stats);
  if (!lseRef)
    return lseRef.takeError();
  auto dpsumRef = allocateFloats(stats);
  if (!dpsumRef)
    return dpsumRef.takeError();
  for (runtime::DeviceBuffer *out : {&b.dq32, &b.dk32, &b.dv32, &b.dq, &b.dk, &b.dv})
    if (llvm::Error err = out->fill(0xFF))
      return std::move(err);
  float *lse = reinterpret_cast<float *>(lseRef->ptr());
  float *dpsum = reinterpret_cast<float *>(dpsumRef->ptr());
  FjBackwardParams p32 = makeBackwardParams(s, b, /*fp32Outputs=*/true);
  if (llvm::Error err = (*ref32)->launch(p32, s.headDim, s.headDimV, spec.causal, lse, dpsum,
                                         stream))
    return std::move(err);
  FjBackwardParams p16 = makeBackwardParams(s, b, /*fp32Outputs=*/false);
  if (llvm::Error err = (*naive)->launch(p16, s.headDim, s.headDimV, spec.causal, lse, dpsum,
                                         stream))
    return std::move(err);
  if (llvm::Error err = runtime::synchronizeStream(stream))
    return std::move(err);

  const FjBackwardParams &p = p16;
  checker->outputs_ = {
      {"dq", &b.dq,
       tensorIndices(s, false, s.headsQ, s.headDim, p.dq_batch_stride, p.dq_row_stride,
                     p.dq_head_stride), {}, {}},
      {"dk", &b.dk,
       tensorIndices(s, true, s.headsKV, s.headDim, p.dk_batch_stride, p.dk_row_stride,
                     p.dk_head_stride), {}, {}},
      {"dv", &b.dv,
       tensorIndices(s, true, s.headsKV, s.headDimV, p.dv_batch_stride, p.dv_row_stride,
                     p.dv_head_stride), {}, {}}};
  runtime::DeviceBuffer *fp32[] = {&b.dq32, &b.dk32, &b.dv32};
  for (int n = 0; n < 3; ++n) {
    Output &out = checker->outputs_[n];
    auto ref = downloadAll<float>(*fp32[n]);
    if (!ref)
      return ref.takeError();
    auto low = downloadAll<uint16_t>(*out.buffer);
    if (!low)
      return low.takeError();
    for (long long i : out.indices) {
      if (!std::isfinite((*ref)[i]))
        return makeError(ErrorCode::Internal,
                         "the fp32 backward reference produced a non-finite {0}", out.name);
      out.ref.push_back((*ref)[i]);
      out.naive.push_back(halfToFloat(spec.dtype, (*low)[i]));
    }
  }
  return std::move(checker);
}

BackwardChecker::Launch BackwardChecker::launcherFor(const BackwardKernel &kernel) {
  if (blockSteps_ == BlockSteps::None)
    return [&kernel](const FjBackwardParams &p, CUstream s) { return kernel.launch(p, s); };
  if (!kernel.hasBlockSteps())  // a test that asks for them must not pass without them
    return [&kernel](const FjBackwardParams &, CUstream) -> llvm::Error {
      return makeError(ErrorCode::InvalidValue, "{0} walks no block mask steps",
                       kernel.entries().passes.front());
    };
  return [this, &kernel](const FjBackwardParams &params, CUstream s) -> llvm::Error {
    const FjForwardParams &f = params.fwd;
    const bool shared = blockSteps_ == BlockSteps::Shared;
    BlockStepsShape shape = BlockStepsShape::of(
        kernel.entries(), f.batch, f.heads_kv, f.heads_q / f.heads_kv, f.seqlen_q, f.seqlen_k,
        shared && !f.cu_seqlens_q, shared);
    if (kernel.entries().stepBits)
      shape.bitCapacity =
          blockSteps_ == BlockSteps::PerHeadFewBits ? 3 : shape.entries();
    if (stepsBuffer_.size() < (size_t)shape.bytes()) {
      auto buffer = runtime::DeviceBuffer::allocate((size_t)shape.bytes());
      if (!buffer)
        return buffer.takeError();
      stepsBuffer_ = std::move(*buffer);
    }
    if (llvm::Error err = stepsBuffer_.fill(0xFF))  // the builder writes every count
      return err;
    if (llvm::Error err = kernel.buildBlockSteps(params, shape, stepsBuffer_, s))
      return err;
    FjBackwardParams p = params;
    shape.describe(p, stepsBuffer_.ptr());
    return kernel.launch(p, s);
  };
}

llvm::Expected<std::vector<uint16_t>> BackwardChecker::run(const BackwardKernel &kernel,
                                                           CUstream stream) {
  return runWith(launcherFor(kernel), stream);
}

llvm::Expected<std::vector<uint16_t>> BackwardChecker::runWith(const Launch &launch,
                                                               CUstream stream) {
  BackwardBuffers &b = buffers_;
  for (runtime::DeviceBuffer *buffer : {&b.dq, &b.dk, &b.dv, &b.workspace})
    if (llvm::Error err = buffer->fill(0xFF))
      return std::move(err);
  FjBackwardParams p = makeBackwardParams(shape_, b, /*fp32Outputs=*/false);
  if (llvm::Error err = launch(p, stream))
    return std::move(err);
  if (llvm::Error err = runtime::synchronizeStream(stream))
    return std::move(err);
  std::vector<uint16_t> bits;
  for (const Output &out : outputs_) {
    auto host = downloadAll<uint16_t>(*out.buffer);
    if (!host)
      return host.takeError();
    bits.insert(bits.end(), host->begin(), host->end());
  }
  return bits;
}

llvm::Expected<CheckReport> BackwardChecker::check(const LoadedKernel &loaded, CUstream stream) {
  const BackwardKernel *kernel = BackwardKernel::of(loaded);
  if (!kernel)
    return makeError(ErrorCode::Internal, "the backward checker was given a {0} kernel",
                     generator::operationName(loaded.operation()));
  return checkWith(launcherFor(*kernel), stream);
}

llvm::Expected<CheckReport> BackwardChecker::checkWith(const Launch &launch, CUstream stream) {
  auto bits = runWith(launch, stream);
  if (!bits)
    return bits.takeError();
  CheckReport worst;
  double worstRatio = -1;
  size_t offset = 0;
  for (const Output &out : outputs_) {
    CheckReport r;
    r.output = out.name;
    for (size_t n = 0; n < out.indices.size(); ++n) {
      float x = halfToFloat(spec_.dtype, (*bits)[offset + out.indices[n]]);
      if (!std::isfinite(x)) {
        ++r.badValues;
        continue;
      }
      r.maxError = std::max(r.maxError, (double)std::fabs(x - out.ref[n]));
      r.naiveError = std::max(r.naiveError, (double)std::fabs(out.naive[n] - out.ref[n]));
    }
    offset += out.buffer->size() / 2;
    r.tolerance = 2 * r.naiveError + 1e-5;
    r.passed = r.badValues == 0 && r.maxError <= r.tolerance;
    // The report is of the output furthest over (or nearest to) its bar.
    double ratio = r.badValues ? INFINITY : r.maxError / r.tolerance;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      worst = r;
    }
  }
  return worst;
}

} // namespace flashjit::tuner
