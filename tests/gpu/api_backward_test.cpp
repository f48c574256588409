// fj_backward on a GPU, through the C API only (the harness computes the reference):
// gradients of kernels got with desc.backward = 1 against the backward reference over
// dtypes, head dims, causal, MHA/GQA/MQA, varlen and deterministic mode, with the
// backward family fj_kernel_get picks (bwd_wgmma on sm_90a for d 64/128) and with
// $FLASHJIT_BACKWARD_FAMILY=bwd_mma; a forced bwd_wgmma refused where it cannot run; and
// the calls it must refuse without writing anything (no backward pass in the handle, no
// or too small a workspace, no lse); and a mask_mod's backward with the forward's block
// mask (bwd_wgmma walks its steps): the same bar, and fewer calls of the mask.
#include "api/validate.h"
#include "api_context.h"
#include "generator/bwd_wgmma.h"
#include "gpu_skip.h"

#include "flashjit/flashjit.h"
#include "tests/scoped_env.h"
#include "tuner/backward_checker.h"

#include <cstring>
#include <string>

using namespace flashjit;
using flashjit::testing::ScopedEnv;

namespace {

using ApiContext = apitest::HeuristicContext;

struct Case {
  fj_dtype dtype;
  int d, dv, hq, hkv;
  bool causal, varlen, deterministic;
  int seqQ, seqK;
};

fj_attention_desc descOf(const Case &c, bool backward) {
  fj_attention_desc desc;
  fj_attention_desc_init(&desc);
  desc.dtype = c.dtype;
  desc.head_dim = c.d;
  desc.head_dim_v = c.dv;
  desc.causal = c.causal;
  desc.num_heads_q = c.hq;
  desc.num_heads_kv = c.hkv;
  desc.backward = backward;
  return desc;
}

tuner::ForwardShape shapeOf(const Case &c) {
  tuner::ForwardShape s;
  s.batch = c.varlen ? 3 : 2;
  s.headsQ = c.hq;
  s.headsKV = c.hkv;
  s.seqQ = c.seqQ;
  s.seqK = c.seqK;
  s.headDim = c.d;
  s.headDimV = c.dv;
  if (c.varlen) {
    s.seqlensQ = {c.seqQ, 1, c.seqQ / 3};
    s.seqlensK = {c.seqK / 2, c.seqK, 5};
  }
  return s;
}

bool hopper() {
  return flashjit::testing::openTestDevice()->properties().target() == "sm_90a";
}

// The backward family fj_kernel_get gives a case under $FLASHJIT_BACKWARD_FAMILY =
// `forced` ("" for auto): bwd_wgmma on sm_90a for the head dims it takes (each a multiple
// of 8 from 32 to 256; d 96 / dv 64 on 128's panels).
generator::Family expectedFamily(const Case &c, const std::string &forced) {
  generator::KernelSpec probe;
  probe.headDim = c.d;
  probe.headDimV = c.dv;
  const bool wgmmaTakes = generator::bwdWgmmaSupportsHeadDims(probe);
  return forced != "bwd_mma" && hopper() && wgmmaTakes ? generator::Family::BwdWgmma
                                                       : generator::Family::BwdMma;
}

generator::KernelSpec specOf(const Case &c, const std::string &forced = "") {
  generator::KernelSpec spec;
  spec.family = expectedFamily(c, forced);
  spec.dtype = c.dtype == FJ_DTYPE_FP16 ? generator::DType::FP16 : generator::DType::BF16;
  spec.headDim = c.d;
  spec.headDimV = c.dv;
  spec.causal = c.causal;
  spec.target = flashjit::testing::openTestDevice()->properties().target();
  return spec;
}

// The C API's arguments for the checker's parameters (pointers and strides as laid out).
fj_backward_args argsOf(const FjBackwardParams &p, const tuner::ForwardShape &s,
                        const runtime::DeviceBuffer &workspace, bool deterministic) {
  fj_backward_args a;
  fj_backward_args_init(&a);
  const FjForwardParams &f = p.fwd;
  a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.lse = f.lse, a.dout = p.dout;
  a.dq = p.dq, a.dk = p.dk, a.dv = p.dv;
  a.batch = f.batch, a.seqlen_q = f.seqlen_q, a.seqlen_k = f.seqlen_k;
  a.q_batch_stride = f.q_batch_stride, a.q_seq_stride = f.q_row_stride;
  a.q_head_stride = f.q_head_stride;
  a.k_batch_stride = f.k_batch_stride, a.k_seq_stride = f.k_row_stride;
  a.k_head_stride = f.k_head_stride;
  a.v_batch_stride = f.v_batch_stride, a.v_seq_stride = f.v_row_stride;
  a.v_head_stride = f.v_head_stride;
  a.o_batch_stride = f.o_batch_stride, a.o_seq_stride = f.o_row_stride;
  a.o_head_stride = f.o_head_stride;
  a.dout_batch_stride = p.dout_batch_stride, a.dout_seq_stride = p.dout_row_stride;
  a.dout_head_stride = p.dout_head_stride;
  a.dq_batch_stride = p.dq_batch_stride, a.dq_seq_stride = p.dq_row_stride;
  a.dq_head_stride = p.dq_head_stride;
  a.dk_batch_stride = p.dk_batch_stride, a.dk_seq_stride = p.dk_row_stride;
  a.dk_head_stride = p.dk_head_stride;
  a.dv_batch_stride = p.dv_batch_stride, a.dv_seq_stride = p.dv_row_stride;
  a.dv_head_stride = p.dv_head_stride;
  if (s.varlen()) {
    a.cu_seqlens_q = f.cu_seqlens_q, a.cu_seqlens_k = f.cu_seqlens_k;
    a.total_q = s.totalQ(), a.total_k = s.totalK();
  }
  a.deterministic = deterministic;
  a.workspace = reinterpret_cast<void *>(workspace.ptr());
  a.workspace_bytes = workspace.size();
  return a;
}

llvm::Error statusError(const char *call, fj_status status) {
  return llvm::createStringError(std::errc::invalid_argument, "%s: %s: %s", call,
                                 fj_status_string(status), fj_last_error_message());
}

// The parameter: $FLASHJIT_BACKWARD_FAMILY for the context ("": unset, the default).
class ApiBackwardFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(ApiBackwardFamilies, GradientsPassTheBar) {
  FLASHJIT_REQUIRE_GPU();
  const std::string forced = GetParam();
  if (!forced.empty() && !hopper())
    GTEST_SKIP() << "bwd_mma is the default backward family off sm_90a: nothing more to test";
  ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", forced.empty() ? nullptr : forced.c_str());
  ApiContext context;
  ASSERT_NE(context.handle, nullptr);
  const Case cases[] = {
      {FJ_DTYPE_BF16, 128, 128, 8, 2, true, false, false, 257, 389},
      {FJ_DTYPE_FP16, 64, 64, 4, 4, false, false, false, 300, 77},
      {FJ_DTYPE_BF16, 256, 256, 4, 1, true, false, false, 130, 130},
      {FJ_DTYPE_FP16, 96, 64, 6, 3, false, false, true, 200, 333},
      {FJ_DTYPE_BF16, 128, 128, 6, 2, true, true, false, 500, 400},
      {FJ_DTYPE_BF16, 64, 64, 4, 2, true, true, true, 333, 444},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(specOf(c, forced).key() + (c.varlen ? " varlen" : "") +
                 (c.deterministic ? " deterministic" : ""));
    fj_attention_desc desc = descOf(c, true);
    fj_kernel kernel = nullptr;
    ASSERT_EQ(fj_kernel_get(context.handle, &desc, &kernel), FJ_SUCCESS)
        << fj_last_error_message();
    struct fj_kernel_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(fj_kernel_info(kernel, &info), FJ_SUCCESS);
    EXPECT_EQ(std::string(info.backward_family),
              generator::familyName(expectedFamily(c, forced)).str());
    EXPECT_GE(info.num_backward_variants, 1);
    tuner::ForwardShape shape = shapeOf(c);
    auto checker = tuner::BackwardChecker::create(specOf(c, forced), shape, 77 + c.d, nullptr,
                                                  c.deterministic);
    ASSERT_TRUE((bool)checker) << llvm::toString(checker.takeError());
    const runtime::DeviceBuffer &workspace = (*checker)->workspace();
    auto report = (*checker)->checkWith(
        [&](const FjBackwardParams &p, CUstream stream) -> llvm::Error {
          fj_backward_args a = argsOf(p, shape, workspace, c.deterministic);
          size_t needed = 0;
          if (fj_status st = fj_backward_workspace_size(kernel, &a, &needed))
            return statusError("fj_backward_workspace_size", st);
          if (needed > workspace.size())
            return llvm::createStringError(std::errc::invalid_argument,
                                           "the workspace needs %zu bytes, the harness has %zu",
                                           needed, (size_t)workspace.size());
          if (fj_status st = fj_backward(kernel, &a, stream))
            return statusError("fj_backward", st);
          return llvm::Error::success();
        },
        nullptr);
    ASSERT_TRUE((bool)report) << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed) << report->summary();
    EXPECT_EQ(fj_kernel_release(kernel), FJ_SUCCESS);
  }
}

INSTANTIATE_TEST_SUITE_P(BackwardFamily, ApiBackwardFamilies,
                         ::testing::Values(std::string(), std::string("bwd_mma")),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param.empty() ? std::string("auto") : info.param;
                         });

// $FLASHJIT_BACKWARD_FAMILY=bwd_wgmma: fj_context_create refuses it off sm_90a, and on
// sm_90a fj_kernel_get refuses a description whose head dims it does not take (rather
// than a silent bwd_mma); both name the variable.
TEST(ApiBackwardGpu, ForcedBwdWgmmaIsRefusedWhereItCannotRun) {
  FLASHJIT_REQUIRE_GPU();
  ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", "bwd_wgmma");
  fj_context_options options;
  fj_context_options_init(&options);
  options.tune_mode = FJ_TUNE_HEURISTIC;
  options.user_cache_path = "";
  fj_context context = nullptr;
  fj_status status = fj_context_create(&options, &context);
  if (!hopper()) {
    EXPECT_EQ(status, FJ_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(context, nullptr);
    EXPECT_NE(std::string(fj_last_error_message()).find("$FLASHJIT_BACKWARD_FAMILY"),
              std::string::npos)
        << fj_last_error_message();
    return;
  }
  ASSERT_EQ(status, FJ_SUCCESS) << fj_last_error_message();
  const Case d24{FJ_DTYPE_BF16, 24, 24, 4, 2, true, false, false, 100, 120};
  fj_attention_desc desc = descOf(d24, true);
  fj_kernel kernel = nullptr;
  EXPECT_EQ(fj_kernel_get(context, &desc, &kernel), FJ_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(kernel, nullptr);
  EXPECT_NE(std::string(fj_last_error_message()).find("$FLASHJIT_BACKWARD_FAMILY"),
            std::string::npos)
      << fj_last_error_message();
  // The head dims it takes get it: 64, and 96 on 128's panels.
  for (int d : {64, 96}) {
    const Case taken{FJ_DTYPE_BF16, d, d, 4, 2, true, false, false, 100, 120};
    desc = descOf(taken, true);
    ASSERT_EQ(fj_kernel_get(context, &desc, &kernel), FJ_SUCCESS) << fj_last_error_message();
    struct fj_kernel_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(fj_kernel_info(kernel, &info), FJ_SUCCESS);
    EXPECT_STREQ(info.backward_family, "bwd_wgmma") << d;
    EXPECT_EQ(fj_kernel_release(kernel), FJ_SUCCESS);
  }
  EXPECT_EQ(fj_context_destroy(context), FJ_SUCCESS);
}

TEST(ApiBackwardGpu, RefusedCallsWriteNothing) {
  FLASHJIT_REQUIRE_GPU();
  ApiContext context;
  ASSERT_NE(context.handle, nullptr);
  const Case c{FJ_DTYPE_BF16, 64, 64, 4, 2, true, false, false, 100, 120};
  fj_attention_desc forwardOnly = descOf(c, false), withBackward = descOf(c, true);
  fj_kernel fwd = nullptr, both = nullptr;
  ASSERT_EQ(fj_kernel_get(context.handle, &forwardOnly, &fwd), FJ_SUCCESS);
  ASSERT_EQ(fj_kernel_get(context.handle, &withBackward, &both), FJ_SUCCESS);
  struct fj_kernel_info info;
  info.struct_size = sizeof(info);
  ASSERT_EQ(fj_kernel_info(fwd, &info), FJ_SUCCESS);
  EXPECT_STREQ(info.backward_family, "");
  EXPECT_EQ(info.num_backward_variants, 0);

  tuner::ForwardShape shape = shapeOf(c);
  auto checker = tuner::BackwardChecker::create(specOf(c), shape, 5, nullptr, false);
  ASSERT_TRUE((bool)checker) << llvm::toString(checker.takeError());
  const runtime::DeviceBuffer &workspace = (*checker)->workspace();
  int refused = 0;
  // Every launch is refused: the gradients keep their poison, which the report counts.
  auto report = (*checker)->checkWith(
      [&](const FjBackwardParams &p, CUstream stream) -> llvm::Error {
        fj_backward_args good = argsOf(p, shape, workspace, false);
        fj_backward_args a = good;
        refused += fj_backward(fwd, &a, stream) == FJ_ERROR_INVALID_VALUE &&
                   std::strstr(fj_last_error_message(), "desc.backward") != nullptr;
        a.workspace = nullptr;
        refused += fj_backward(both, &a, stream) == FJ_ERROR_INVALID_VALUE &&
                   std::strstr(fj_last_error_message(), "fj_backward_workspace_size") != nullptr;
        a = good;
        a.workspace_bytes = 256;
        refused += fj_backward(both, &a, stream) == FJ_ERROR_INVALID_VALUE;
        a = good;
        a.lse = nullptr;
        refused += fj_backward(both, &a, stream) == FJ_ERROR_INVALID_VALUE &&
                   std::strstr(fj_last_error_message(), "args->lse") != nullptr;
        a = good;
        a.dk_seq_stride = 4;
        refused += fj_backward(both, &a, stream) == FJ_ERROR_INVALID_VALUE &&
                   std::strstr(fj_last_error_message(), "dk_seq_stride") != nullptr;
        return llvm::Error::success();
      },
      nullptr);
  ASSERT_TRUE((bool)report) << llvm::toString(report.takeError());
  EXPECT_EQ(refused, 5);
  EXPECT_FALSE(report->passed) << "a refused call wrote the gradients: " << report->summary();
  EXPECT_GT(report->badValues, 0);
  EXPECT_EQ(fj_kernel_release(fwd), FJ_SUCCESS);
  EXPECT_EQ(fj_kernel_release(both), FJ_SUCCESS);
}

// Documents of 300 rows (whole blocks kept, whole ones dropped, some split), counting the
// mask's calls in the int at args.tensor[0]: fj_backward with the forward's block mask
// passes the bar (per head, and in deterministic mode whose dq pass walks every block)
// and calls the mask less than without it (never on bwd_wgmma, whose partly masked steps
// test keep bits, outside deterministic mode), with the backward family the context picks
// and, on sm_90a, with $FLASHJIT_BACKWARD_FAMILY=bwd_mma; the gradients without the mask
// pass too.
TEST(ApiBackwardGpu, BlockMaskSkipsStepsAndKeepsTheGradients) {
  FLASHJIT_REQUIRE_GPU();
  const char *kCounting = "atomicAdd((int *)args.tensor[0], 1);\n"
                          "return q_idx / args.integer[0] == kv_idx / args.integer[0];";
  auto counter = runtime::DeviceBuffer::allocate(16);
  ASSERT_TRUE((bool)counter) << llvm::toString(counter.takeError());
  for (const std::string forced : {"", "bwd_mma"}) {
  if (!forced.empty() && !hopper())
    continue;  // bwd_mma is the default off sm_90a
  ScopedEnv env("FLASHJIT_BACKWARD_FAMILY", forced.empty() ? nullptr : forced.c_str());
  ApiContext context;
  ASSERT_NE(context.handle, nullptr);
  const Case cases[] = {
      {FJ_DTYPE_BF16, 128, 128, 8, 2, false, false, false, 1000, 1000},
      {FJ_DTYPE_BF16, 128, 128, 8, 2, true, false, true, 777, 1029},
      {FJ_DTYPE_FP16, 64, 64, 4, 4, true, true, false, 900, 700},
  };
  for (const Case &c : cases) {
    generator::KernelSpec spec = specOf(c, forced);
    spec.features.maskMod = kCounting;
    spec.features.hasTuningArgs = true;
    spec.features.tuningArgs.tensor[0] = reinterpret_cast<const void *>(counter->ptr());
    spec.features.tuningArgs.integer[0] = 300;
    SCOPED_TRACE(spec.key() + (c.varlen ? " varlen" : "") +
                 (c.deterministic ? " deterministic" : ""));
    fj_attention_desc desc = descOf(c, true);
    desc.mask_mod = kCounting;
    fj_kernel kernel = nullptr;
    ASSERT_EQ(fj_kernel_get(context.handle, &desc, &kernel), FJ_SUCCESS)
        << fj_last_error_message();
    tuner::ForwardShape shape = shapeOf(c);
    auto checker = tuner::BackwardChecker::create(spec, shape, 91, nullptr, c.deterministic);
    ASSERT_TRUE((bool)checker) << llvm::toString(checker.takeError());
    const runtime::DeviceBuffer &workspace = (*checker)->workspace();
    fj_block_mask mask = nullptr;
    long long calls[2] = {-1, -1};
    for (int withMask : {1, 0}) {
      auto report = (*checker)->checkWith(
          [&](const FjBackwardParams &p, CUstream stream) -> llvm::Error {
            fj_backward_args a = argsOf(p, shape, workspace, c.deterministic);
            static_assert(sizeof(a.mod_args) == sizeof(p.fwd.mod_args), "one layout");
            std::memcpy(&a.mod_args, &p.fwd.mod_args, sizeof(a.mod_args));
            const fj_forward_args forward = api::forwardPart(a);
            if (withMask && !mask)
              if (fj_status st = fj_block_mask_create(kernel, &forward, nullptr, stream, &mask))
                return statusError("fj_block_mask_create", st);
            a.block_mask = withMask ? mask : nullptr;
            if (llvm::Error e = runtime::synchronizeStream(stream))
              return e;
            if (llvm::Error e = counter->fill(0))
              return e;
            if (fj_status st = fj_backward(kernel, &a, stream))
              return statusError("fj_backward", st);
            if (llvm::Error e = runtime::synchronizeStream(stream))
              return e;
            int value = 0;
            if (llvm::Error e = counter->download(&value, sizeof value))
              return e;
            calls[withMask] = value;
            return llvm::Error::success();
          },
          nullptr);
      ASSERT_TRUE((bool)report) << llvm::toString(report.takeError());
      EXPECT_TRUE(report->passed) << (withMask ? "with" : "without") << " the block mask: "
                                  << report->summary();
    }
    // bwd_wgmma's partly masked steps test the mask's keep bits; bwd_mma's and the
    // deterministic dq pass call the mask on the blocks that documents split.
    struct fj_kernel_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(fj_kernel_info(kernel, &info), FJ_SUCCESS);
    if (std::string(info.backward_family) == "bwd_wgmma" && !c.deterministic)
      EXPECT_EQ(calls[1], 0) << "partly masked steps test keep bits";
    else
      EXPECT_GT(calls[1], 0) << "documents split by the blocks call the mask";
    EXPECT_LT(calls[1], calls[0]) << "the mask's calls with the block mask and without";
    EXPECT_EQ(fj_block_mask_destroy(mask), FJ_SUCCESS) << fj_last_error_message();
    EXPECT_EQ(fj_kernel_release(kernel), FJ_SUCCESS) << fj_last_error_message();
  }
  }
}

} // namespace
