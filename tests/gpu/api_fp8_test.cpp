// FP8 (FJ_DTYPE_E4M3, C API 0.7) through the C API on a GPU, as a caller uses it: random
// e4m3 q, k and v with dequantization factors per (sequence, kv head) that differ
// between the tensors, fj_forward into a poisoned bf16 / fp16 o (and lse) with the
// workspace fj_forward_workspace_size asks for, judged against the fp32 reference over
// the dequantized inputs with the bar the tuner's ForwardChecker applies to FP8 kernels
// (tuner/checker.cpp: max|o - ref| <= 3 max|naive - ref| + 1e-5, the naive computing in
// the output's 16-bit type with P rounded to e4m3; the LSE within max(1e-3, twice the
// naive's LSE error)), and also within 0.15 max|ref|, no NaN. Also: the workspace's size
// and a short one refused, factors per tensor (strides 0) and NULL (1), a CUDA graph
// whose replays transpose V again, and FJ_ERROR_NOT_SUPPORTED where FP8 cannot run.
// Heuristic tiles (FJ_TUNE_HEURISTIC), no tuning, no cache on disk. Skips without a
// device, and off sm_90a but for the refusal.
#include "api_asserts.h"
#include "gpu_skip.h"
#include "graph_api.h"
#include "tests/fails_with.h"
#include "tests/scoped_env.h"

#include "flashjit/flashjit.h"
#include "tuner/check_support.h"
#include "tuner/checker.h"
#include "tuner/forward_problem.h"
#include "tuner/half_precision.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace flashjit;
using flashjit::testing::ScopedEnv;
using generator::DType;

namespace {

std::string target() { return flashjit::testing::openTestDevice()->properties().target(); }

#define FJ_REQUIRE_SM90A()                                                                 \
  do {                                                                                     \
    FLASHJIT_REQUIRE_GPU();                                                                \
    if (target() != "sm_90a")                                                              \
      GTEST_SKIP() << "FP8 runs on sm_90a (fwd_wgmma); this device is " << target();       \
  } while (0)

fj_attention_desc fp8Desc(int d, int outDtype, bool causal, int hq = 4, int hkv = 2) {
  fj_attention_desc desc;
  fj_attention_desc_init(&desc);
  desc.dtype = FJ_DTYPE_E4M3;
  desc.out_dtype = outDtype;
  desc.head_dim = d;
  desc.causal = causal;
  desc.num_heads_q = hq;
  desc.num_heads_kv = hkv;
  return desc;
}

std::string descKey(const fj_attention_desc &d) {
  return llvm::formatv("e4m3.o{0}.d{1}.dv{2}.c{3}.h{4}.{5}", d.out_dtype, d.head_dim,
                       d.head_dim_v, d.causal, d.num_heads_q, d.num_heads_kv)
      .str();
}

// What the header documents: batch * num_heads_kv * head_dim_v * (seqlen_k rounded up to
// 64) bytes.
size_t documentedWorkspace(const fj_attention_desc &desc, int batch, int seqlenK) {
  const size_t dv = desc.head_dim_v ? desc.head_dim_v : desc.head_dim;
  return (size_t)batch * desc.num_heads_kv * dv * (((size_t)seqlenK + 63) / 64 * 64);
}

// One context (heuristic tiles, in-memory cache) and the kernels got from it, shared by
// the tests of this file so that each description compiles once; released when a suite
// ends (the next one starts again).
class Fp8Kernels {
public:
  static llvm::Expected<fj_kernel> get(const fj_attention_desc &desc) {
    if (!context_) {
      fj_context_options options;
      fj_context_options_init(&options);
      options.tune_mode = FJ_TUNE_HEURISTIC;
      options.user_cache_path = "";
      if (fj_status status = fj_context_create(&options, &context_))
        return error("fj_context_create", status);
    }
    fj_kernel &kernel = kernels_[descKey(desc)];
    if (!kernel)
      if (fj_status status = fj_kernel_get(context_, &desc, &kernel))
        return error("fj_kernel_get " + descKey(desc), status);
    return kernel;
  }
  static void releaseAll() {
    for (auto &[key, kernel] : kernels_)
      if (kernel)
        FJ_EXPECT_OK(fj_kernel_release(kernel));
    kernels_.clear();
    if (context_)
      FJ_EXPECT_OK(fj_context_destroy(context_));
    context_ = nullptr;
  }

private:
  static llvm::Error error(const std::string &what, fj_status status) {
    return llvm::createStringError(std::errc::invalid_argument, "%s: %s: %s", what.c_str(),
                                   fj_status_string(status), fj_last_error_message());
  }
  static inline fj_context context_ = nullptr;
  static inline std::map<std::string, fj_kernel> kernels_;
};

// A stream of the test device (made current first).
struct Stream {
  CUstream handle = nullptr;
  std::string error;
  Stream() {
    flashjit::testing::openTestDevice();
    auto created = runtime::createStream();
    if (created)
      handle = *created;
    else
      error = llvm::toString(created.takeError());
  }
  ~Stream() { runtime::destroyStream(handle); }
};

// How a call gives its dequantization factors.
enum class Factors {
  PerHead,    // [batch, num_heads_kv]: strides (num_heads_kv, 1)
  PerTensor,  // one factor per tensor: strides 0
  None,       // NULL: 1
};

const char *factorsName(Factors f) {
  return f == Factors::PerHead     ? "per (batch, kv head)"
         : f == Factors::PerTensor ? "per tensor"
                                   : "NULL";
}

struct Fp8Report {
  bool passed = false;
  double maxError = 0, naiveError = 0, tolerance = 0, maxRef = 0, relativeBar = 0;
  double lseError = 0, lseTolerance = 0;
  long long badValues = 0;
  std::string summary() const {
    return llvm::formatv("{0}: max|o-ref| = {1:e2}, bar = {2:e2} (3 x naive {3:e2}) and "
                         "{4:e2} (0.15 max|ref|), max|lse-ref| = {5:e2} (bar {6:e2}), bad "
                         "values = {7}",
                         passed ? "pass" : "FAIL", maxError, tolerance, naiveError, relativeBar,
                         lseError, lseTolerance, badValues)
        .str();
  }
};

// One FP8 attention problem on the device, in the tuner's layout (tuner/forward_problem.h,
// BSHD, packed rows): e4m3 inputs, its factors, the V^T workspace (exactly the documented
// size), a 16-bit o and the lse; and its two references, computed once with the same
// factors the call gives.
class Fp8Problem {
public:
  static llvm::Expected<std::unique_ptr<Fp8Problem>>
  create(const fj_attention_desc &desc, int batch, int seqQ, int seqK, Factors factors,
         uint64_t seed, CUstream stream, std::vector<int> seqlensQ = {},
         std::vector<int> seqlensK = {}) {
    auto p = std::unique_ptr<Fp8Problem>(new Fp8Problem());
    p->desc_ = desc;
    p->factors_ = factors;
    p->out_ = desc.out_dtype == FJ_DTYPE_FP16 ? DType::FP16 : DType::BF16;
    tuner::ForwardShape &s = p->shape_;
    s.batch = batch;
    s.seqQ = seqQ;
    s.seqK = seqK;
    s.headsQ = desc.num_heads_q;
    s.headsKV = desc.num_heads_kv;
    s.headDim = desc.head_dim;
    s.headDimV = desc.head_dim_v ? desc.head_dim_v : desc.head_dim;
    s.softmaxScale = desc.softmax_scale;
    s.withLse = true;
    s.fp8 = true;  // one-byte q, k, v, the descale buffer and the V^T workspace
    s.seqlensQ = std::move(seqlensQ);  // non-empty: a variable-length batch (cu_seqlens),
    s.seqlensK = std::move(seqlensK);  // seqQ and seqK its longest sequences
    auto buffers = tuner::allocateBuffers(s, /*withFp32Output=*/true);
    if (!buffers)
      return buffers.takeError();
    p->b_ = std::move(*buffers);
    tuner::ForwardBuffers &b = p->b_;

    // Random e4m3 inputs (normal samples, rounded to nearest even).
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (runtime::DeviceBuffer *buffer : {&b.q, &b.k, &b.v}) {
      std::vector<uint8_t> host(buffer->size());
      for (uint8_t &x : host)
        x = tuner::floatToE4m3(normal(rng));
      if (llvm::Error e = buffer->upload(host.data(), host.size()))
        return std::move(e);
    }
    // Factors 0.5 .. 2 ([3][batch][heads_kv]: q's, k's, v's), every one of the 3 x batch x
    // heads_kv different where there are at most 13, so a factor of the wrong tensor, head
    // or sequence shows; the first of each tensor (what per-tensor strides read) differ.
    const size_t n = (size_t)batch * s.headsKV;
    std::vector<float> f(3 * n);
    for (size_t t = 0; t < 3; ++t)
      for (size_t i = 0; i < n; ++i)
        f[t * n + i] = 0.5f + 0.125f * (float)((t * 5 + i * 3 + 1) % 13);
    if (b.descales.size() != 4 * f.size())
      return llvm::createStringError(std::errc::invalid_argument,
                                     "the tuner's descale buffer has %zu bytes, not %zu",
                                     b.descales.size(), 4 * f.size());
    if (llvm::Error e = b.descales.upload(f.data(), 4 * f.size()))
      return std::move(e);

    // The references: fp32 into o32 (and the lse), then the naive one into o (and the lse).
    auto ref32 = tuner::forwardReference(DType::E4M3, false, target(), {}, p->out_);
    if (!ref32)
      return ref32.takeError();
    auto naive = tuner::forwardReference(DType::E4M3, true, target(), {}, p->out_);
    if (!naive)
      return naive.takeError();
    FjForwardParams p32 = p->params(true), p16 = p->params(false);
    p16.lse = p32.lse;
    const bool causal = desc.causal != 0;
    for (runtime::DeviceBuffer *buffer : {&b.o32, &b.o, &b.lse})
      if (llvm::Error e = buffer->fill(0xFF))
        return std::move(e);
    if (llvm::Error e = (*ref32)->launch(p32, s.headDim, s.headDimV, causal, stream))
      return std::move(e);
    if (llvm::Error e = runtime::synchronizeStream(stream))
      return std::move(e);
    auto o32 = tuner::downloadAll<float>(b.o32);
    if (!o32)
      return o32.takeError();
    auto lse32 = tuner::downloadAll<float>(b.lse);
    if (!lse32)
      return lse32.takeError();
    if (llvm::Error e = (*naive)->launch(p16, s.headDim, s.headDimV, causal, stream))
      return std::move(e);
    if (llvm::Error e = runtime::synchronizeStream(stream))
      return std::move(e);
    auto o16 = tuner::downloadAll<uint16_t>(b.o);
    if (!o16)
      return o16.takeError();
    auto lse16 = tuner::downloadAll<float>(b.lse);
    if (!lse16)
      return lse16.takeError();

    p->outIndex_ = tuner::tensorIndices(s, /*keyRows=*/false, s.headsQ, s.headDimV,
                                        p16.o_batch_stride, p16.o_row_stride,
                                        p16.o_head_stride);
    for (int bi = 0, packed = 0; bi < s.batch; ++bi) {
      const int rows = s.varlen() ? s.seqlensQ[bi] : s.seqQ;
      for (int i = 0; i < rows; ++i)
        for (int h = 0; h < s.headsQ; ++h)
          p->lseIndex_.push_back(s.varlen() ? h * p16.lse_head_stride + packed + i
                                            : bi * p16.lse_batch_stride +
                                                  h * p16.lse_head_stride + i);
      packed += rows;
    }
    for (long long i : p->outIndex_) {
      p->ref_.push_back((*o32)[i]);
      p->naive_.push_back(tuner::halfToFloat(p->out_, (*o16)[i]));
      if (!std::isfinite(p->ref_.back()))
        return llvm::createStringError(std::errc::invalid_argument,
                                       "the fp32 reference wrote a non-finite value");
    }
    for (long long i : p->lseIndex_) {
      p->refLse_.push_back((*lse32)[i]);
      if (std::isfinite((*lse32)[i]))
        p->naiveLseError_ =
            std::max(p->naiveLseError_, (double)std::fabs((*lse16)[i] - (*lse32)[i]));
    }
    return std::move(p);
  }

  // The call as a caller makes it: q, k, v, o, lse, strides in elements (one byte each
  // for q, k, v), the factors as `factors_` says, and the tuner's V^T buffer as the
  // workspace (generator::fp8TransposedBytes: the documented size).
  fj_forward_args args() const {
    const FjForwardParams p = params(false);
    fj_forward_args a;
    fj_forward_args_init(&a);
    a.q = p.q, a.k = p.k, a.v = p.v, a.o = p.o, a.lse = p.lse;
    a.batch = p.batch, a.seqlen_q = p.seqlen_q, a.seqlen_k = p.seqlen_k;
    a.q_batch_stride = p.q_batch_stride, a.q_seq_stride = p.q_row_stride;
    a.q_head_stride = p.q_head_stride;
    a.k_batch_stride = p.k_batch_stride, a.k_seq_stride = p.k_row_stride;
    a.k_head_stride = p.k_head_stride;
    a.v_batch_stride = p.v_batch_stride, a.v_seq_stride = p.v_row_stride;
    a.v_head_stride = p.v_head_stride;
    a.o_batch_stride = p.o_batch_stride, a.o_seq_stride = p.o_row_stride;
    a.o_head_stride = p.o_head_stride;
    a.q_descale = p.q_descale, a.k_descale = p.k_descale, a.v_descale = p.v_descale;
    a.descale_batch_stride = p.descale_batch_stride;
    a.descale_head_stride = p.descale_head_stride;
    a.workspace = reinterpret_cast<void *>(b_.vTransposed.ptr());
    a.workspace_bytes = b_.vTransposed.size();
    a.cu_seqlens_q = p.cu_seqlens_q, a.cu_seqlens_k = p.cu_seqlens_k;
    a.total_q = p.total_q, a.total_k = p.total_k;
    return a;
  }

  // o and lse all ones (NaN in bf16, fp16 and fp32).
  llvm::Error poison() {
    if (llvm::Error e = b_.o.fill(0xFF))
      return e;
    return b_.lse.fill(0xFF);
  }

  // Poisons, runs fj_forward with `a` on `stream` and waits for it.
  llvm::Error launch(fj_kernel kernel, const fj_forward_args &a, CUstream stream) {
    if (llvm::Error e = poison())
      return e;
    if (fj_status status = fj_forward(kernel, &a, stream))
      return llvm::createStringError(std::errc::invalid_argument, "fj_forward: %s: %s",
                                     fj_status_string(status), fj_last_error_message());
    return runtime::synchronizeStream(stream);
  }

  llvm::Expected<Fp8Report> run(fj_kernel kernel, CUstream stream) {
    if (llvm::Error e = launch(kernel, args(), stream))
      return std::move(e);
    return judge();
  }

  // What o and the lse hold now against the references. `withLse` false: o only (a call
  // that passed lse NULL; its buffer must still be poisoned).
  llvm::Expected<Fp8Report> judge(bool withLse = true) const {
    auto out = tuner::downloadAll<uint16_t>(b_.o);
    if (!out)
      return out.takeError();
    auto lse = tuner::downloadAll<float>(b_.lse);
    if (!lse)
      return lse.takeError();
    Fp8Report r;
    for (size_t n = 0; n < outIndex_.size(); ++n) {
      const float x = tuner::halfToFloat(out_, (*out)[outIndex_[n]]);
      r.maxRef = std::max(r.maxRef, (double)std::fabs(ref_[n]));
      r.naiveError = std::max(r.naiveError, (double)std::fabs(naive_[n] - ref_[n]));
      if (!std::isfinite(x)) {
        ++r.badValues;
        continue;
      }
      r.maxError = std::max(r.maxError, (double)std::fabs(x - ref_[n]));
    }
    for (size_t n = 0; n < lseIndex_.size(); ++n) {
      const float got = (*lse)[lseIndex_[n]], want = refLse_[n];
      if (!withLse) {
        r.badValues += !std::isnan(got);  // not written: still the poison
        continue;
      }
      if (!std::isfinite(want) || !std::isfinite(got)) {
        // A row that sees no key: -inf in both; anything else non-finite is bad.
        if (!(std::isinf(want) && std::isinf(got) && want < 0 && got < 0))
          ++r.badValues;
        continue;
      }
      r.lseError = std::max(r.lseError, (double)std::fabs(got - want));
    }
    r.tolerance = 3 * r.naiveError + 1e-5;
    // Also within 15% of the output's range: the naive rounds the normalised
    // probabilities to e4m3, most of them subnormal on long rows, so 3 x its error can be
    // 40% of max|ref| (one factor per tensor, H100); the kernels stay near 5%.
    r.relativeBar = 0.15 * r.maxRef;
    r.lseTolerance = std::max(1e-3, 2 * naiveLseError_);
    r.passed = r.badValues == 0 && r.maxError <= r.tolerance && r.maxError <= r.relativeBar &&
               r.lseError <= r.lseTolerance;
    return r;
  }

  llvm::Expected<std::vector<uint16_t>> output() const {
    return tuner::downloadAll<uint16_t>(b_.o);
  }
  DType outDtype() const { return out_; }
  tuner::ForwardBuffers &buffers() { return b_; }
  const tuner::ForwardShape &shape() const { return shape_; }

  std::string describe() const {
    const tuner::ForwardShape &s = shape_;
    return llvm::formatv("e4m3->{0} d{1}/{2} {3} heads {4}/{5} batch {6} seq {7}x{8}, factors "
                         "{9}",
                         generator::dtypeName(out_), s.headDim, s.headDimV,
                         desc_.causal ? "causal" : "full", s.headsQ, s.headsKV, s.batch,
                         s.seqQ, s.seqK, factorsName(factors_))
               .str() +
           (s.varlen() ? " (cu_seqlens, longest)" : "");
  }

private:
  Fp8Problem() = default;

  // The kernels' parameters over the buffers, with the factors as `factors_` says (the
  // references read them as the kernel does).
  FjForwardParams params(bool fp32Output) const {
    FjForwardParams p = tuner::makeParams(shape_, b_, fp32Output);
    if (factors_ == Factors::PerTensor)
      p.descale_batch_stride = p.descale_head_stride = 0;
    if (factors_ == Factors::None)
      p.q_descale = p.k_descale = p.v_descale = nullptr;
    return p;
  }

  fj_attention_desc desc_{};
  Factors factors_ = Factors::PerHead;
  DType out_ = DType::BF16;
  tuner::ForwardShape shape_;
  tuner::ForwardBuffers b_;
  std::vector<long long> outIndex_, lseIndex_;
  std::vector<float> ref_, naive_, refLse_;
  double naiveLseError_ = 0;
};

// ---- correctness ---------------------------------------------------------------------

class ApiFp8Forward : public ::testing::TestWithParam<std::tuple<int, int, bool>> {
protected:
  static void TearDownTestSuite() { Fp8Kernels::releaseAll(); }
};

// e4m3 -> bf16 / fp16, d 64 / 128, causal or not, GQA (4 query heads over 2), batch 2,
// odd lengths both ways (more queries than keys: causal rows that see no key, o = 0 and
// lse = -inf).
TEST_P(ApiFp8Forward, MatchesTheReference) {
  FJ_REQUIRE_SM90A();
  auto [d, out, causal] = GetParam();
  fj_attention_desc desc = fp8Desc(d, out, causal);
  FJ_ASSERT_VALUE(kernel, Fp8Kernels::get(desc));

  struct fj_kernel_info info;
  info.struct_size = sizeof(info);
  FJ_ASSERT_OK(fj_kernel_info(*kernel, &info));
  EXPECT_STREQ(info.family, "fwd_wgmma");
  const std::string keyStart = llvm::formatv("fwd_wgmma.e4m3_o{0}.d{1}.dv{1}.",
                                             out == FJ_DTYPE_FP16 ? "fp16" : "bf16", d)
                                   .str();
  EXPECT_EQ(std::string(info.spec_key).rfind(keyStart, 0), 0u) << info.spec_key;
  // FP8 has no fallback family: every variant is an FP8 fwd_wgmma.
  for (int i = 0; i < info.num_variants; ++i) {
    fj_variant_info variant;
    variant.struct_size = sizeof(variant);
    FJ_ASSERT_OK(fj_kernel_variant_info(*kernel, i, &variant));
    EXPECT_NE(std::string(variant.binary_key_text).find("fwd_wgmma.e4m3"), std::string::npos)
        << "variant " << i << ": " << variant.binary_key_text;
  }

  Stream stream;
  ASSERT_NE(stream.handle, nullptr) << stream.error;
  int seed = 0;
  for (auto [sq, sk] : {std::pair{257, 389}, std::pair{389, 257}}) {
    FJ_ASSERT_VALUE(problem, Fp8Problem::create(desc, 2, sq, sk, Factors::PerHead,
                                                100 + d + 7 * out + causal + 2 * seed++,
                                                stream.handle));
    auto report = (*problem)->run(*kernel, stream.handle);
    ASSERT_TRUE((bool)report) << (*problem)->describe() << ": "
                              << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed) << (*problem)->describe() << ": " << report->summary();
    std::printf("[ fp8 ] %s: %s\n", (*problem)->describe().c_str(), report->summary().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Api, ApiFp8Forward,
                         ::testing::Combine(::testing::Values(64, 128),
                                            ::testing::Values((int)FJ_DTYPE_BF16,
                                                              (int)FJ_DTYPE_FP16),
                                            ::testing::Bool()),
                         [](const auto &info) {
                           return "d" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == FJ_DTYPE_FP16 ? "_ofp16"
                                                                            : "_obf16") +
                                  (std::get<2>(info.param) ? "_causal" : "_full");
                         });

class ApiFp8 : public ::testing::Test {
protected:
  static void TearDownTestSuite() { Fp8Kernels::releaseAll(); }
};

// A variable-length batch (cu_seqlens with both packed row counts) runs on fwd_wgmma
// with the workspace fj_forward_workspace_size gives for it, and matches the reference.
TEST_F(ApiFp8, VariableLengthBatch) {
  FJ_REQUIRE_SM90A();
  Stream stream;
  ASSERT_NE(stream.handle, nullptr) << stream.error;
  for (bool causal : {false, true}) {
    fj_attention_desc desc = fp8Desc(128, FJ_DTYPE_BF16, causal);
    FJ_ASSERT_VALUE(kernel, Fp8Kernels::get(desc));
    FJ_ASSERT_VALUE(problem, Fp8Problem::create(desc, 4, 700, 901, Factors::PerHead,
                                                61 + causal, stream.handle,
                                                {700, 1, 129, 300}, {513, 64, 901, 77}));
    fj_forward_args a = (*problem)->args();
    size_t bytes = 0;
    FJ_ASSERT_OK(fj_forward_workspace_size(*kernel, &a, &bytes));
    EXPECT_EQ(bytes, (size_t)2 * 128 * ((1555 + 63) / 64 * 64 + 320 * 4));
    EXPECT_EQ(a.workspace_bytes, bytes);
    auto report = (*problem)->run(*kernel, stream.handle);
    ASSERT_TRUE((bool)report) << (*problem)->describe() << ": "
                              << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed) << (*problem)->describe() << ": " << report->summary();
    std::printf("[ fp8 ] %s: %s\n", (*problem)->describe().c_str(), report->summary().c_str());
  }
}

// One factor per tensor (strides 0) and none (NULL: 1), against references computed the
// same way; and the factors are read: the per-head problem run without them fails.
TEST_F(ApiFp8, FactorsPerTensorAndNull) {
  FJ_REQUIRE_SM90A();
  fj_attention_desc desc = fp8Desc(128, 0, false);  // out_dtype 0: bf16
  FJ_ASSERT_VALUE(kernel, Fp8Kernels::get(desc));
  Stream stream;
  ASSERT_NE(stream.handle, nullptr) << stream.error;
  for (Factors factors : {Factors::PerTensor, Factors::None, Factors::PerHead}) {
    FJ_ASSERT_VALUE(problem, Fp8Problem::create(desc, 2, 257, 389, factors, 31, stream.handle));
    auto report = (*problem)->run(*kernel, stream.handle);
    ASSERT_TRUE((bool)report) << (*problem)->describe() << ": "
                              << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed) << (*problem)->describe() << ": " << report->summary();
    std::printf("[ fp8 ] %s: %s\n", (*problem)->describe().c_str(), report->summary().c_str());
    if (factors != Factors::PerHead)
      continue;
    // The same call without its factors: the output must be judged wrong (else this test
    // could not see factors ignored).
    fj_forward_args a = (*problem)->args();
    a.q_descale = a.k_descale = a.v_descale = nullptr;
    ASSERT_FALSE((bool)(*problem)->launch(*kernel, a, stream.handle));
    auto without = (*problem)->judge();
    ASSERT_TRUE((bool)without);
    EXPECT_FALSE(without->passed) << "factors ignored? " << without->summary();
    std::printf("[ fp8 ] the same without its factors: %s\n", without->summary().c_str());
    // Without lse: o is right and the lse buffer untouched.
    a = (*problem)->args();
    a.lse = nullptr;
    ASSERT_FALSE((bool)(*problem)->launch(*kernel, a, stream.handle));
    auto noLse = (*problem)->judge(/*withLse=*/false);
    ASSERT_TRUE((bool)noLse);
    EXPECT_TRUE(noLse->passed) << "lse NULL: " << noLse->summary();
  }
}

// fj_forward_workspace_size says the documented size; a call with less (or none) is
// refused before anything runs; a larger, offset, uninitialised workspace serves.
TEST_F(ApiFp8, WorkspaceSizeAndShortWorkspace) {
  FJ_REQUIRE_SM90A();
  fj_attention_desc desc = fp8Desc(128, FJ_DTYPE_BF16, true);
  FJ_ASSERT_VALUE(kernel, Fp8Kernels::get(desc));
  for (auto [batch, seqK] : {std::pair{2, 389}, std::pair{1, 1}, std::pair{3, 64},
                             std::pair{3, 65}, std::pair{0, 100}, std::pair{2, 0}}) {
    fj_forward_args sizes;
    fj_forward_args_init(&sizes);  // only the sizes are read
    sizes.batch = batch;
    sizes.seqlen_k = seqK;
    size_t bytes = 1;
    FJ_ASSERT_OK(fj_forward_workspace_size(*kernel, &sizes, &bytes));
    EXPECT_EQ(bytes, documentedWorkspace(desc, batch, seqK)) << batch << " x " << seqK;
  }

  Stream stream;
  ASSERT_NE(stream.handle, nullptr) << stream.error;
  FJ_ASSERT_VALUE(problem, Fp8Problem::create(desc, 2, 257, 389, Factors::PerHead, 47,
                                              stream.handle));
  fj_forward_args a = (*problem)->args();
  size_t needed = 0;
  FJ_ASSERT_OK(fj_forward_workspace_size(*kernel, &a, &needed));
  EXPECT_EQ(needed, (size_t)2 * 2 * 128 * 448);
  EXPECT_EQ(needed, a.workspace_bytes) << "the tuner's V^T buffer is the documented size";

  // Short by one byte, then none: refused, naming the field, and nothing launched.
  ASSERT_FALSE((bool)(*problem)->poison());
  auto poisoned = (*problem)->output();
  ASSERT_TRUE((bool)poisoned);
  a.workspace_bytes = needed - 1;
  const std::string value = "args->workspace_bytes is " + std::to_string(needed - 1);
  EXPECT_TRUE(failsWith(fj_forward(*kernel, &a, stream.handle), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: ", value.c_str(), std::to_string(needed).c_str()}));
  a.workspace = nullptr;
  a.workspace_bytes = needed;
  EXPECT_TRUE(failsWith(fj_forward(*kernel, &a, stream.handle), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: args->workspace is NULL"}));
  ASSERT_FALSE((bool)runtime::synchronizeStream(stream.handle));
  auto after = (*problem)->output();
  ASSERT_TRUE((bool)after);
  EXPECT_EQ(*after, *poisoned) << "a refused call wrote o";

  // A larger workspace, at an offset of 256 bytes, full of garbage.
  FJ_ASSERT_VALUE(big, runtime::DeviceBuffer::allocate(needed + 4096));
  ASSERT_FALSE((bool)big->fill(0xA5));
  a = (*problem)->args();
  a.workspace = reinterpret_cast<void *>(big->ptr() + 256);
  a.workspace_bytes = needed + 4096 - 256;
  ASSERT_FALSE((bool)(*problem)->launch(*kernel, a, stream.handle));
  auto report = (*problem)->judge();
  ASSERT_TRUE((bool)report);
  EXPECT_TRUE(report->passed) << "larger workspace: " << report->summary();

  // What an FP8 kernel refuses at the call (the CPU tests check every case's message).
  a = (*problem)->args();
  a.seqlen_k = 0;
  EXPECT_TRUE(failsWith(fj_forward(*kernel, &a, stream.handle), FJ_ERROR_NOT_SUPPORTED,
                        {"args->seqlen_k is 0"}));
  a = (*problem)->args();
  a.q_seq_stride += 8, a.q_batch_stride += 8 * 257;
  EXPECT_TRUE(failsWith(fj_forward(*kernel, &a, stream.handle), FJ_ERROR_NOT_SUPPORTED,
                        {"args->q_batch_stride", "multiples of 16"}));
  // fj_forward_dispatch_info takes the call and names the FP8 variant.
  a = (*problem)->args();
  fj_dispatch_info dispatch;
  dispatch.struct_size = sizeof(dispatch);
  FJ_ASSERT_OK(fj_forward_dispatch_info(*kernel, &a, &dispatch));
  EXPECT_GE(dispatch.variant, 0);
}

// fj_forward captured in a CUDA graph (global capture mode: anything unsafe inside
// fails it): replays give the eager bits, and transpose V again each time (V negated
// between replays negates o exactly).
TEST_F(ApiFp8, GraphCaptureAndReplay) {
  FJ_REQUIRE_SM90A();
  GraphApi graph = GraphApi::load();
  ASSERT_TRUE(graph.complete()) << "the driver lacks the graph API";
  fj_attention_desc desc = fp8Desc(128, FJ_DTYPE_FP16, true);
  FJ_ASSERT_VALUE(kernel, Fp8Kernels::get(desc));
  Stream stream;
  ASSERT_NE(stream.handle, nullptr) << stream.error;
  FJ_ASSERT_VALUE(problem, Fp8Problem::create(desc, 2, 333, 517, Factors::PerHead, 5,
                                              stream.handle));
  auto eager = (*problem)->run(*kernel, stream.handle);
  ASSERT_TRUE((bool)eager) << llvm::toString(eager.takeError());
  ASSERT_TRUE(eager->passed) << eager->summary();
  auto eagerBits = (*problem)->output();
  ASSERT_TRUE((bool)eagerBits);

  ASSERT_FALSE((bool)(*problem)->poison());
  ASSERT_FALSE((bool)runtime::synchronizeStream(stream.handle));
  ASSERT_EQ(graph.beginCapture(stream.handle, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  fj_forward_args a = (*problem)->args();
  fj_status status = fj_forward(*kernel, &a, stream.handle);
  CUgraph captured = nullptr;
  CUresult ended = graph.endCapture(stream.handle, &captured);
  ASSERT_EQ(status, FJ_SUCCESS) << fj_last_error_message();
  ASSERT_EQ(ended, CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(graph.instantiate(&exec, captured, 0), CUDA_SUCCESS);
  auto notRun = (*problem)->output();
  ASSERT_TRUE((bool)notRun);
  EXPECT_NE(*notRun, *eagerBits) << "capturing must not have run the kernel";

  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_FALSE((bool)(*problem)->poison());
    ASSERT_EQ(graph.launch(exec, stream.handle), CUDA_SUCCESS);
    ASSERT_FALSE((bool)runtime::synchronizeStream(stream.handle));
    auto replayed = (*problem)->output();
    ASSERT_TRUE((bool)replayed);
    EXPECT_EQ(*replayed, *eagerBits) << "replay " << replay;
  }
  // V negated (the sign bit of every e4m3 byte), then replayed: o negated.
  runtime::DeviceBuffer &v = (*problem)->buffers().v;
  std::vector<uint8_t> host(v.size());
  ASSERT_FALSE((bool)v.download(host.data(), host.size()));
  for (uint8_t &x : host)
    x ^= 0x80;
  ASSERT_FALSE((bool)v.upload(host.data(), host.size()));
  ASSERT_FALSE((bool)(*problem)->poison());
  ASSERT_EQ(graph.launch(exec, stream.handle), CUDA_SUCCESS);
  ASSERT_FALSE((bool)runtime::synchronizeStream(stream.handle));
  auto negated = (*problem)->output();
  ASSERT_TRUE((bool)negated);
  long long mismatches = 0;
  for (size_t i = 0; i < negated->size(); ++i) {
    const float want = -tuner::halfToFloat(DType::FP16, (*eagerBits)[i]);
    const float got = tuner::halfToFloat(DType::FP16, (*negated)[i]);
    mismatches += !(got == want || (std::isnan(got) && std::isnan(want)));
  }
  EXPECT_EQ(mismatches, 0) << "the replay did not read the new V";
  graph.execDestroy(exec);
  graph.destroy(captured);
}

// Where FP8 cannot run, fj_kernel_get says so: a device other than sm_90a, or fwd_mma
// forced by $FLASHJIT_FAMILY (read by fj_context_create).
TEST_F(ApiFp8, NotSupportedWithoutFwdWgmma) {
  FLASHJIT_REQUIRE_GPU();
  std::optional<ScopedEnv> forced;
  if (target() == "sm_90a")
    forced.emplace("FLASHJIT_FAMILY", "fwd_mma");
  fj_context_options options;
  fj_context_options_init(&options);
  options.tune_mode = FJ_TUNE_HEURISTIC;
  options.user_cache_path = "";
  fj_context context = nullptr;
  FJ_ASSERT_OK(fj_context_create(&options, &context));
  fj_attention_desc desc = fp8Desc(128, 0, true);
  fj_kernel kernel = reinterpret_cast<fj_kernel>(0x1);
  EXPECT_TRUE(failsWith(fj_kernel_get(context, &desc, &kernel), FJ_ERROR_NOT_SUPPORTED,
                        {"fj_kernel_get: ", "FJ_DTYPE_E4M3", "sm_90a"}));
  EXPECT_EQ(kernel, nullptr);
  // What no FP8 kernel takes is refused before the device is considered.
  desc.backward = 1;
  EXPECT_TRUE(failsWith(fj_kernel_get(context, &desc, &kernel), FJ_ERROR_NOT_SUPPORTED,
                        {"desc->backward"}));
  FJ_EXPECT_OK(fj_context_destroy(context));
}

} // namespace
