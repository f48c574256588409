#include "tuner/checker.h"

#include "support/error.h"
#include "tuner/check_support.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>

namespace flashjit::tuner {
namespace {

// The kernels compute the LSE from fp32 scores as the reference does; only the
// summation order and exp2 approximation differ.
constexpr double kLseTolerance = 1e-3;

} // namespace

llvm::Expected<const ReferenceKernel *>
forwardReference(generator::DType dtype, bool emulate, const std::string &target,
                 const generator::Features &features, generator::DType outDtype) {
  return referenceInContext<ReferenceKernel>(
      llvm::formatv("{0}.{1}.{2}{3}.o{4}", generator::dtypeName(dtype), emulate, target,
                    features.keySuffix(), generator::dtypeName(outDtype))
          .str(),
      [&] { return ReferenceKernel::build(dtype, emulate, target, features, outDtype); });
}

namespace {

// Element indices of O (and of the LSE) that the problem defines: every row of every
// sequence, every head, every column. Padding between rows is not part of it.
struct ValidIndices {
  std::vector<long long> out, lse;
};

ValidIndices validIndices(const ForwardShape &shape, const FjForwardParams &p) {
  ValidIndices v;
  v.out = tensorIndices(shape, /*keyRows=*/false, shape.headsQ, shape.headDimV,
                        p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  long long packedRow = 0;
  for (int b = 0; b < shape.batch; ++b) {
    int rows = shape.varlen() ? shape.seqlensQ[b] : shape.seqQ;
    for (int i = 0; i < rows; ++i)
      for (int h = 0; h < shape.headsQ; ++h)
        v.lse.push_back(shape.varlen() ? h * p.lse_head_stride + packedRow + i
                                       : b * p.lse_batch_stride + h * p.lse_head_stride + i);
    packedRow += rows;
  }
  return v;
}

} // namespace

std::string CheckReport::summary() const {
  std::string out = output.empty() ? "out" : output;
  return llvm::formatv("{0}: max|{6}-ref| = {1:e2}, bar = {2:e2} (naive {3:e2}), "
                       "max|lse-ref| = {4:e2}, bad values = {5}",
                       passed ? "pass" : "FAIL", maxError, tolerance, naiveError, lseError,
                       badValues, out)
      .str();
}

llvm::Expected<std::unique_ptr<ForwardChecker>>
ForwardChecker::create(const generator::KernelSpec &spec, const ForwardShape &shape,
                       uint64_t seed, CUstream stream, const InputHook &adjustInputs) {
  auto checker = std::unique_ptr<ForwardChecker>(new ForwardChecker());
  checker->spec_ = spec;
  checker->shape_ = withFeatureInputs(spec, shape);
  checker->shape_.headDim = spec.headDim;
  checker->shape_.headDimV = spec.headDimV;
  auto buffers = allocateBuffers(checker->shape_, /*withFp32Output=*/true);
  if (!buffers)
    return buffers.takeError();
  checker->buffers_ = std::move(*buffers);
  ForwardBuffers &b = checker->buffers_;
  std::mt19937_64 rng(seed);
  for (runtime::DeviceBuffer *buffer : {&b.q, &b.k, &b.v})
    if (auto err = fillNormal(*buffer, spec.dtype, rng))
      return std::move(err);
  if (adjustInputs)
    if (auto err = adjustInputs(b))
      return std::move(err);

  auto ref32 =
      forwardReference(spec.dtype, false, spec.target, spec.features, spec.outDtype);
  if (!ref32)
    return ref32.takeError();
  auto naive = forwardReference(spec.dtype, true, spec.target, spec.features, spec.outDtype);
  if (!naive)
    return naive.takeError();

  const ForwardShape &s = checker->shape_;
  FjForwardParams p32 = makeParams(s, b, /*fp32Output=*/true);
  FjForwardParams p16 = makeParams(s, b, /*fp32Output=*/false);
  if (auto err = b.o32.fill(0xFF))
    return std::move(err);
  if (s.withLse)
    if (auto err = b.lse.fill(0xFF))
      return std::move(err);
  if (auto err = (*ref32)->launch(p32, s.headDim, s.headDimV, spec.causal, stream))
    return std::move(err);
  if (auto err = b.o.fill(0xFF))
    return std::move(err);
  p16.lse = nullptr;
  if (auto err = (*naive)->launch(p16, s.headDim, s.headDimV, spec.causal, stream))
    return std::move(err);
  if (auto err = runtime::synchronizeStream(stream))
    return std::move(err);

  ValidIndices valid = validIndices(s, p32);
  auto o32 = downloadAll<float>(b.o32);
  if (!o32)
    return o32.takeError();
  auto o16 = downloadAll<uint16_t>(b.o);
  if (!o16)
    return o16.takeError();
  checker->ref_.reserve(valid.out.size());
  checker->naive_.reserve(valid.out.size());
  for (long long i : valid.out) {
    checker->ref_.push_back((*o32)[i]);
    checker->naive_.push_back(halfToFloat(spec.outputDtype(), (*o16)[i]));
  }
  if (s.withLse) {
    auto lse = downloadAll<float>(b.lse);
    if (!lse)
      return lse.takeError();
    for (long long i : valid.lse)
      checker->refLse_.push_back((*lse)[i]);
    if (spec.dtype == generator::DType::E4M3) {
      p16.lse = p32.lse;
      if (auto err = b.lse.fill(0xFF))
        return std::move(err);
      if (auto err = (*naive)->launch(p16, s.headDim, s.headDimV, spec.causal, stream))
        return std::move(err);
      if (auto err = runtime::synchronizeStream(stream))
        return std::move(err);
      auto naiveLse = downloadAll<float>(b.lse);
      if (!naiveLse)
        return naiveLse.takeError();
      for (size_t n = 0; n < valid.lse.size(); ++n)
        if (std::isfinite(checker->refLse_[n]))
          checker->naiveLseError_ =
              std::max(checker->naiveLseError_,
                       (double)std::fabs((*naiveLse)[valid.lse[n]] - checker->refLse_[n]));
    }
  }
  for (float x : checker->ref_)
    if (!std::isfinite(x))
      return makeError(ErrorCode::Internal, "the fp32 reference produced a non-finite value");
  return std::move(checker);
}

llvm::Expected<std::vector<uint16_t>> ForwardChecker::run(const ForwardKernel &kernel,
                                                          CUstream stream,
                                                          BlockMaskUse blockMask) {
  if (auto err = poisonOutputs())
    return std::move(err);
  FjForwardParams p = makeParams(shape_, buffers_, false);
  // A block mask per sequence and head, built by the kernel's own builder into a buffer
  // poisoned first (counts of -1: a list the build failed to write computes nothing),
  // with a bit slot for every tile, the walk's order always kept and a tile counter
  // (poisoned too: the launch zeroes it) to hand the tiles out, or with none of them
  // (partly masked tiles call mask_mod; the kernel walks its own static way).
  std::optional<runtime::DeviceBuffer> mask, counter;
  if (blockMask != BlockMaskUse::None) {
    const bool withBits = blockMask == BlockMaskUse::WithBits;
    BlockMaskShape maskShape = kernel.blockMaskShape(p, false, false);
    maskShape.bitCapacity = withBits ? maskShape.entries() : 0;
    if (!withBits)
      maskShape.orderUnits = 0;
    auto buffer = runtime::DeviceBuffer::allocate((size_t)maskShape.bytes());
    if (!buffer)
      return buffer.takeError();
    mask.emplace(std::move(*buffer));
    if (auto err = mask->fill(0xFF))
      return std::move(err);
    if (auto err = kernel.buildBlockMask(p, maskShape, *mask, stream,
                                         /*orderMinGain=*/withBits ? 0.0f : kBlockOrderMinGain))
      return std::move(err);
    maskShape.describe(p, mask->ptr());
    if (withBits) {
      auto words = runtime::DeviceBuffer::allocate(kTileCounterBytes);
      if (!words)
        return words.takeError();
      counter.emplace(std::move(*words));
      if (auto err = counter->fill(0xFF))
        return std::move(err);
    }
  }
  if (auto err = kernel.launch(p, stream, counter ? (void *)counter->ptr() : nullptr))
    return std::move(err);
  if (auto err = runtime::synchronizeStream(stream))
    return std::move(err);
  return downloadAll<uint16_t>(buffers_.o);
}

llvm::Expected<CheckReport> ForwardChecker::check(const LoadedKernel &loaded, CUstream stream) {
  const ForwardKernel *kernel = ForwardKernel::of(loaded);
  if (!kernel)
    return makeError(ErrorCode::Internal, "the forward checker was given a {0} kernel",
                     generator::operationName(loaded.operation()));
  auto out = run(*kernel, stream);
  if (!out)
    return out.takeError();
  auto report = compare(*out);
  // A mask_mod's kernel takes a block mask or not, call by call, and a partly masked
  // tile its keep bits or mask_mod: every way must pass.
  if (!report || !report->passed || !kernel->geometry().blockMask)
    return report;
  for (BlockMaskUse use : {BlockMaskUse::WithBits, BlockMaskUse::WithoutBits}) {
    out = run(*kernel, stream, use);
    if (!out)
      return out.takeError();
    report = compare(*out);
    if (report && !report->passed) {
      report->output = use == BlockMaskUse::WithBits ? "o with a block mask"
                                                     : "o with a block mask without bits";
      return report;
    }
  }
  return report;
}

llvm::Error ForwardChecker::poisonOutputs() {
  if (auto err = buffers_.o.fill(0xFF))
    return err;
  // FP8's V^T workspace too (0xFF is e4m3's NaN): a byte the forward reads that its
  // transpose did not write turns the output into NaN.
  if (buffers_.vTransposed.size() > 0)
    if (auto err = buffers_.vTransposed.fill(0xFF))
      return err;
  if (shape_.withLse)
    return buffers_.lse.fill(0xFF);
  return llvm::Error::success();
}

llvm::Expected<CheckReport> ForwardChecker::compareOutputs(CUstream stream) {
  if (auto err = runtime::synchronizeStream(stream))
    return std::move(err);
  auto out = downloadAll<uint16_t>(buffers_.o);
  if (!out)
    return out.takeError();
  return compare(*out);
}

llvm::Expected<CheckReport> ForwardChecker::compare(const std::vector<uint16_t> &o) {
  const std::vector<uint16_t> *out = &o;
  FjForwardParams p = makeParams(shape_, buffers_, false);
  ValidIndices valid = validIndices(shape_, p);
  CheckReport report;
  for (size_t n = 0; n < valid.out.size(); ++n) {
    float x = halfToFloat(spec_.outputDtype(), (*out)[valid.out[n]]);
    if (!std::isfinite(x)) {
      ++report.badValues;
      continue;
    }
    report.maxError = std::max(report.maxError, (double)std::fabs(x - ref_[n]));
    report.naiveError = std::max(report.naiveError, (double)std::fabs(naive_[n] - ref_[n]));
  }
  if (shape_.withLse) {
    auto lse = downloadAll<float>(buffers_.lse);
    if (!lse)
      return lse.takeError();
    for (size_t n = 0; n < valid.lse.size(); ++n) {
      float got = (*lse)[valid.lse[n]], want = refLse_[n];
      if (std::isinf(want) || std::isinf(got)) {
        if (!(std::isinf(want) && std::isinf(got) && got < 0 && want < 0))
          ++report.badValues;
        continue;
      }
      if (std::isnan(got)) {
        ++report.badValues;
        continue;
      }
      report.lseError = std::max(report.lseError, (double)std::fabs(got - want));
    }
  }
  // FP8: FlashAttention-3's own bar for its FP8 forward, 3x the naive error (the naive
  // in the output's 16-bit type with P cast to e4m3, templates/reference.cuh).
  const bool fp8 = spec_.dtype == generator::DType::E4M3;
  report.tolerance = (fp8 ? 3 : 2) * report.naiveError + 1e-5;
  // Soft-capping's tanh is tanh.approx (fj_features.cuh): relative error 2^-11 on the
  // capped score, so up to softcap * 2^-11 on the LSE, which averages the scores.
  const double lseTolerance =
      std::max(kLseTolerance + (spec_.features.softcap > 0 ? spec_.features.softcap / 1024.0 : 0.0),
               2 * naiveLseError_);
  report.passed = report.badValues == 0 && report.maxError <= report.tolerance &&
                  report.lseError <= lseTolerance;
  return report;
}

} // namespace flashjit::tuner
