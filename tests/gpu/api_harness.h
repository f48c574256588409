// For the C API's GPU tests: one attention problem on the device (random inputs, the
// fp32 and same-dtype references computed once by tuner::ReferenceKernel), the
// fj_forward_args that describe it, and a run of a C API kernel over it judged by the
// DESIGN.md bar (max|out - ref| <= 2 max|naive - ref| + 1e-5, outputs poisoned first,
// NaN never passes, LSE checked).
#pragma once

#include "flashjit/flashjit.h"
#include "tuner/forward_problem.h"
#include "tuner/half_precision.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace flashjit::apitest {

struct ApiReport {
  bool passed = false;
  double maxError = 0, naiveError = 0, lseError = 0;
  long long badValues = 0;
  std::string summary() const {
    return llvm::formatv("{0}: max|out-ref| = {1:e2}, bar = {2:e2}, max|lse-ref| = {3:e2}, "
                         "bad values = {4}",
                         passed ? "pass" : "FAIL", maxError, 2 * naiveError + 1e-5, lseError,
                         badValues)
        .str();
  }
};

inline generator::DType dtypeOf(const fj_attention_desc &desc) {
  return desc.dtype == FJ_DTYPE_FP16 ? generator::DType::FP16 : generator::DType::BF16;
}

class ApiProblem {
public:
  // `shape` gives sizes and layout; head dims and heads are taken from `desc`.
  static llvm::Expected<std::unique_ptr<ApiProblem>>
  create(const fj_attention_desc &desc, tuner::ForwardShape shape, uint64_t seed,
         const std::string &target, CUstream stream) {
    auto p = std::unique_ptr<ApiProblem>(new ApiProblem());
    p->desc_ = desc;
    shape.headDim = desc.head_dim;
    shape.headDimV = desc.head_dim_v ? desc.head_dim_v : desc.head_dim;
    shape.headsQ = desc.num_heads_q;
    shape.headsKV = desc.num_heads_kv;
    shape.softmaxScale = desc.softmax_scale;
    p->shape_ = shape;
    auto buffers = tuner::allocateBuffers(shape, /*withFp32Output=*/true);
    if (!buffers)
      return buffers.takeError();
    p->b_ = std::move(*buffers);
    const generator::DType dtype = dtypeOf(desc);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (runtime::DeviceBuffer *buffer : {&p->b_.q, &p->b_.k, &p->b_.v}) {
      std::vector<uint16_t> host(buffer->size() / 2);
      for (uint16_t &x : host)
        x = dtype == generator::DType::BF16 ? tuner::floatToBf16(normal(rng))
                                            : tuner::floatToFp16(normal(rng));
      if (llvm::Error e = buffer->upload(host.data(), host.size() * 2))
        return std::move(e);
    }
    // The references: fp32 into o32 (and the LSE), the same-dtype one into o.
    auto ref32 = reference(dtype, false, target);
    if (!ref32)
      return ref32.takeError();
    auto naive = reference(dtype, true, target);
    if (!naive)
      return naive.takeError();
    FjForwardParams p32 = tuner::makeParams(shape, p->b_, true);
    FjForwardParams p16 = tuner::makeParams(shape, p->b_, false);
    p16.lse = nullptr;
    bool causal = desc.causal != 0;
    if (llvm::Error e = (*ref32)->launch(p32, shape.headDim, shape.headDimV, causal, stream))
      return std::move(e);
    if (llvm::Error e = (*naive)->launch(p16, shape.headDim, shape.headDimV, causal, stream))
      return std::move(e);
    if (llvm::Error e = runtime::synchronizeStream(stream))
      return std::move(e);
    p->indices(p16);
    auto o32 = download<float>(p->b_.o32);
    auto o16 = download<uint16_t>(p->b_.o);
    if (!o32 || !o16)
      return o32 ? o16.takeError() : o32.takeError();
    for (long long i : p->outIndex_) {
      p->ref_.push_back((*o32)[i]);
      p->naive_.push_back(p->toFloat((*o16)[i]));
    }
    if (shape.withLse) {
      auto lse = download<float>(p->b_.lse);
      if (!lse)
        return lse.takeError();
      for (long long i : p->lseIndex_)
        p->refLse_.push_back((*lse)[i]);
    }
    return std::move(p);
  }

  // The problem as C API arguments (strides as tuner::stridesFor lays them out).
  fj_forward_args args() const {
    fj_forward_args a;
    fj_forward_args_init(&a);
    const tuner::ForwardShape &s = shape_;
    a.q = reinterpret_cast<const void *>(b_.q.ptr());
    a.k = reinterpret_cast<const void *>(b_.k.ptr());
    a.v = reinterpret_cast<const void *>(b_.v.ptr());
    a.o = reinterpret_cast<void *>(b_.o.ptr());
    a.lse = s.withLse ? reinterpret_cast<float *>(b_.lse.ptr()) : nullptr;
    a.batch = s.batch;
    a.seqlen_q = s.seqQ;
    a.seqlen_k = s.seqK;
    tuner::Strides q = tuner::stridesFor(s, s.headsQ, s.headDim, s.seqQ);
    tuner::Strides k = tuner::stridesFor(s, s.headsKV, s.headDim, s.seqK);
    tuner::Strides v = tuner::stridesFor(s, s.headsKV, s.headDimV, s.seqK);
    tuner::Strides o = tuner::stridesFor(s, s.headsQ, s.headDimV, s.seqQ);
    a.q_batch_stride = q.batch, a.q_seq_stride = q.row, a.q_head_stride = q.head;
    a.k_batch_stride = k.batch, a.k_seq_stride = k.row, a.k_head_stride = k.head;
    a.v_batch_stride = v.batch, a.v_seq_stride = v.row, a.v_head_stride = v.head;
    a.o_batch_stride = o.batch, a.o_seq_stride = o.row, a.o_head_stride = o.head;
    if (s.varlen()) {
      a.cu_seqlens_q = reinterpret_cast<const int32_t *>(b_.cuSeqlensQ.ptr());
      a.cu_seqlens_k = reinterpret_cast<const int32_t *>(b_.cuSeqlensK.ptr());
      a.total_q = s.totalQ();
      a.total_k = s.totalK();
    }
    return a;
  }

  // Poisons the outputs (NaN), runs fj_forward on `stream` and waits for it.
  llvm::Error launch(fj_kernel kernel, CUstream stream) {
    if (llvm::Error e = poison())
      return e;
    fj_forward_args a = args();
    fj_status status = fj_forward(kernel, &a, stream);
    if (status != FJ_SUCCESS)
      return llvm::createStringError(std::errc::invalid_argument, "fj_forward: %s: %s",
                                     fj_status_string(status), fj_last_error_message());
    return runtime::synchronizeStream(stream);
  }

  llvm::Error poison() {
    if (llvm::Error e = b_.o.fill(0xFF))
      return e;
    return shape_.withLse ? b_.lse.fill(0xFF) : llvm::Error::success();
  }

  // The current output bits (after launch() or a graph replay).
  llvm::Expected<std::vector<uint16_t>> output() const { return download<uint16_t>(b_.o); }

  // Judges what is in the output buffers now.
  llvm::Expected<ApiReport> judge() const {
    auto out = download<uint16_t>(b_.o);
    if (!out)
      return out.takeError();
    ApiReport r;
    for (size_t n = 0; n < outIndex_.size(); ++n) {
      float x = toFloat((*out)[outIndex_[n]]);
      if (!std::isfinite(x)) {
        ++r.badValues;
        continue;
      }
      r.maxError = std::max(r.maxError, (double)std::fabs(x - ref_[n]));
      r.naiveError = std::max(r.naiveError, (double)std::fabs(naive_[n] - ref_[n]));
    }
    if (shape_.withLse) {
      auto lse = download<float>(b_.lse);
      if (!lse)
        return lse.takeError();
      for (size_t n = 0; n < lseIndex_.size(); ++n) {
        float got = (*lse)[lseIndex_[n]], want = refLse_[n];
        if (std::isinf(want) || std::isinf(got) || std::isnan(got)) {
          if (!(std::isinf(want) && std::isinf(got) && got < 0 && want < 0))
            ++r.badValues;
          continue;
        }
        r.lseError = std::max(r.lseError, (double)std::fabs(got - want));
      }
    }
    r.passed = r.badValues == 0 && r.maxError <= 2 * r.naiveError + 1e-5 && r.lseError <= 1e-3;
    return r;
  }

  // launch() then judge().
  llvm::Expected<ApiReport> run(fj_kernel kernel, CUstream stream) {
    if (llvm::Error e = launch(kernel, stream))
      return std::move(e);
    return judge();
  }

  const tuner::ForwardShape &shape() const { return shape_; }
  tuner::ForwardBuffers &buffers() { return b_; }
  std::string describe() const {
    const tuner::ForwardShape &s = shape_;
    return llvm::formatv("{0} d{1}/{2} {3} heads {4}/{5} batch {6} seq {7}x{8} {9}{10}{11}{12}",
                         desc_.dtype == FJ_DTYPE_FP16 ? "fp16" : "bf16", s.headDim, s.headDimV,
                         desc_.causal ? "causal" : "full", s.headsQ, s.headsKV, s.batch, s.seqQ,
                         s.seqK, s.layout == tuner::Layout::BSHD ? "BSHD" : "BHSD",
                         s.rowPadding ? llvm::formatv(" pad{0}", s.rowPadding).str() : "",
                         s.varlen() ? " varlen" : "", s.withLse ? " lse" : "")
        .str();
  }

private:
  ApiProblem() = default;

  static llvm::Expected<const tuner::ReferenceKernel *>
  reference(generator::DType dtype, bool emulate, const std::string &target) {
    static std::mutex mutex;
    static std::map<std::string, std::unique_ptr<tuner::ReferenceKernel>> kernels;
    std::lock_guard<std::mutex> lock(mutex);
    auto &slot = kernels[llvm::formatv("{0}.{1}.{2}", (int)dtype, emulate, target).str()];
    if (!slot) {
      auto built = tuner::ReferenceKernel::build(dtype, emulate, target);
      if (!built)
        return built.takeError();
      slot = std::move(*built);
    }
    return slot.get();
  }

  template <typename T>
  static llvm::Expected<std::vector<T>> download(const runtime::DeviceBuffer &buffer) {
    std::vector<T> host(buffer.size() / sizeof(T));
    if (llvm::Error e = buffer.download(host.data(), host.size() * sizeof(T)))
      return std::move(e);
    return std::move(host);
  }

  float toFloat(uint16_t bits) const {
    return desc_.dtype == FJ_DTYPE_FP16 ? tuner::fp16ToFloat(bits) : tuner::bf16ToFloat(bits);
  }

  // Elements of O and the LSE that the problem defines (padding excluded).
  void indices(const FjForwardParams &p) {
    const tuner::ForwardShape &s = shape_;
    long long packed = 0;
    for (int b = 0; b < s.batch; ++b) {
      int rows = s.varlen() ? s.seqlensQ[b] : s.seqQ;
      for (int i = 0; i < rows; ++i)
        for (int h = 0; h < s.headsQ; ++h) {
          long long base = s.varlen() ? (packed + i) * p.o_row_stride
                                      : b * p.o_batch_stride + i * p.o_row_stride;
          base += h * p.o_head_stride;
          for (int c = 0; c < s.headDimV; ++c)
            outIndex_.push_back(base + c);
          lseIndex_.push_back(s.varlen() ? h * p.lse_head_stride + packed + i
                                         : b * p.lse_batch_stride + h * p.lse_head_stride + i);
        }
      packed += rows;
    }
  }

  fj_attention_desc desc_{};
  tuner::ForwardShape shape_;
  tuner::ForwardBuffers b_;
  std::vector<long long> outIndex_, lseIndex_;
  std::vector<float> ref_, naive_, refLse_;
};

} // namespace flashjit::apitest
