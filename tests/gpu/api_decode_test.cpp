// fj_decode on a GPU through the C API: handles got with desc.decode = 1 run over paged
// (shuffled pages, last page partly full) and contiguous caches, against the fp32
// forward reference on the same tensors (tuner::DecodeChecker; outputs and lse poisoned
// first), with the workspace fj_decode_workspace_size asks for; and the calls it must
// refuse: a handle without decode, no or too small a workspace. The same over an FP8
// cache (desc.kv_cache_dtype, 0.12).
#include "api_context.h"
#include "gpu_skip.h"

#include "flashjit/flashjit.h"
#include "support/error.h"
#include "tuner/decode_checker.h"

#include <algorithm>
#include <cstring>

using namespace flashjit;

namespace {

using ApiContext = apitest::HeuristicContext;

struct Kernel {
  fj_kernel handle = nullptr;
  ~Kernel() {
    if (handle)
      fj_kernel_release(handle);
  }
};

fj_attention_desc decodeDesc(fj_dtype dtype, int d, int hq, int hkv, bool causal, bool decode) {
  fj_attention_desc desc;
  fj_attention_desc_init(&desc);
  desc.dtype = dtype;
  desc.head_dim = d;
  desc.causal = causal;
  desc.num_heads_q = hq;
  desc.num_heads_kv = hkv;
  desc.decode = decode;
  return desc;
}

// The C API's arguments for the checker's parameters.
fj_decode_args argsOf(const FjDecodeParams &p, const tuner::DecodeBuffers &b) {
  fj_decode_args a;
  fj_decode_args_init(&a);
  a.q = p.q, a.k_cache = p.k, a.v_cache = p.v, a.o = p.o, a.lse = p.lse;
  a.block_table = p.block_table, a.cache_seqlens = p.cache_seqlens;
  a.batch = p.batch, a.seqlen_q = p.seqlen_q, a.seqlen_k = p.seqlen_k;
  a.page_size = p.block_table ? p.page_size : 0;
  a.num_pages = p.block_table ? b.pages : 0;
  a.table_stride = p.block_table ? p.table_stride : 0;
  a.q_batch_stride = p.q_batch_stride, a.q_seq_stride = p.q_row_stride;
  a.q_head_stride = p.q_head_stride;
  a.k_page_stride = p.k_page_stride, a.k_row_stride = p.k_row_stride;
  a.k_head_stride = p.k_head_stride;
  a.v_page_stride = p.v_page_stride, a.v_row_stride = p.v_row_stride;
  a.v_head_stride = p.v_head_stride;
  a.o_batch_stride = p.o_batch_stride, a.o_seq_stride = p.o_row_stride;
  a.o_head_stride = p.o_head_stride;
  a.num_splits = p.num_splits;
  a.k_descale = p.k_descale, a.v_descale = p.v_descale;  // an FP8 cache's (else NULL)
  a.descale_batch_stride = p.descale_batch_stride;
  a.descale_head_stride = p.descale_head_stride;
  a.alibi_slopes = p.alibi_slopes, a.alibi_batch_stride = p.alibi_batch_stride;  // with ALiBi
  std::memcpy(&a.mod_args, &p.mod_args, sizeof(a.mod_args));  // with user code
  return a;
}

struct Case {
  fj_dtype dtype;
  int d, hq, hkv;
  bool causal;
  int seqQ, page, splits;
  std::vector<int> lens;
  // Features (0.13): a window's sides (-1 unbounded; both -1: none) and a softcap.
  int windowLeft = -1, windowRight = -1;
  float softcap = 0.f;
  bool alibi = false;  // the checker's made-up slopes, [batch, heads_q]
  // The user's code (0.14) and its args, which the tuner (desc.tuning_mod_args), the
  // reference and fj_decode all get.
  const char *scoreMod = nullptr, *maskMod = nullptr;
  fj_mod_args modArgs = {};
};

// Runs one case through fj_decode (its workspace asked for) and the decode checker; an
// FP8 cache (desc.kv_cache_dtype) when fp8Cache. "" or the failure.
std::string checkCase(const ApiContext &ctx, const Case &c, bool fp8Cache, uint64_t seed) {
  fj_attention_desc desc = decodeDesc(c.dtype, c.d, c.hq, c.hkv, c.causal, true);
  desc.kv_cache_dtype = fp8Cache ? FJ_DTYPE_E4M3 : 0;
  const bool window = c.windowLeft >= 0 || c.windowRight >= 0;
  desc.window = window;
  desc.window_left = window ? c.windowLeft : 0;
  desc.window_right = window ? c.windowRight : 0;
  desc.softcap = c.softcap;
  desc.alibi = c.alibi;
  desc.score_mod = c.scoreMod;
  desc.mask_mod = c.maskMod;
  desc.tuning_mod_args = &c.modArgs;
  Kernel kernel;
  if (fj_kernel_get(ctx.handle, &desc, &kernel.handle) != FJ_SUCCESS)
    return std::string("fj_kernel_get: ") + fj_last_error_message();
  generator::KernelSpec spec;
  spec.family = generator::Family::DecMma;
  spec.dtype = c.dtype == FJ_DTYPE_FP16 ? generator::DType::FP16 : generator::DType::BF16;
  if (fp8Cache) {
    spec.outDtype = spec.dtype;
    spec.dtype = generator::DType::E4M3;
  }
  spec.headDim = spec.headDimV = c.d;
  spec.causal = c.causal;
  spec.features.window = window;
  spec.features.windowLeft = c.windowLeft;
  spec.features.windowRight = c.windowRight;
  spec.features.softcap = c.softcap;
  spec.features.alibi = c.alibi;
  spec.features.scoreMod = c.scoreMod ? c.scoreMod : "";
  spec.features.maskMod = c.maskMod ? c.maskMod : "";
  spec.features.hasTuningArgs = true;
  std::memcpy(&spec.features.tuningArgs, &c.modArgs, sizeof(c.modArgs));
  tuner::ForwardShape shape;
  shape.batch = (int)c.lens.size();
  shape.headsQ = c.hq;
  shape.headsKV = c.hkv;
  shape.seqQ = c.seqQ;
  shape.seqK = *std::max_element(c.lens.begin(), c.lens.end());
  shape.seqlensK = c.lens;
  shape.pageSize = c.page;
  shape.decodeSplits = c.splits;
  auto checker = tuner::DecodeChecker::create(spec, shape, seed, nullptr);
  if (!checker)
    return llvm::toString(checker.takeError());
  runtime::DeviceBuffer workspace;
  auto report = (*checker)->checkWith(
      [&](const FjDecodeParams &p, const tuner::DecodeBuffers &b) -> llvm::Error {
        fj_decode_args args = argsOf(p, b);
        size_t bytes = 0;
        if (fj_decode_workspace_size(kernel.handle, &args, &bytes) != FJ_SUCCESS)
          return makeError(ErrorCode::Internal, "fj_decode_workspace_size: {0}",
                           fj_last_error_message());
        if (bytes) {
          auto buffer = runtime::DeviceBuffer::allocate(bytes);
          if (!buffer)
            return buffer.takeError();
          workspace = std::move(*buffer);
          args.workspace = (void *)workspace.ptr();
          args.workspace_bytes = bytes;
        }
        if (fj_decode(kernel.handle, &args, nullptr) != FJ_SUCCESS)
          return makeError(ErrorCode::Internal, "fj_decode: {0}", fj_last_error_message());
        return llvm::Error::success();
      },
      nullptr);
  if (!report)
    return llvm::toString(report.takeError());
  return report->passed ? "" : report->summary();
}

} // namespace

// An FP8 cache (kv_cache_dtype FJ_DTYPE_E4M3) through the C API: the factors of every
// (sequence, KV head) passed in fj_decode_args, fp16 and bf16 queries.
TEST(ApiDecodeGpu, Fp8CacheMatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  ApiContext ctx;
  const Case cases[] = {
      {FJ_DTYPE_BF16, 128, 32, 8, false, 1, 16, 0, {5000, 17, 1025}},
      {FJ_DTYPE_FP16, 128, 32, 8, true, 5, 64, 0, {3, 4099}},
      {FJ_DTYPE_BF16, 64, 16, 1, false, 16, 32, 4, {1500, 301, 9}},
      {FJ_DTYPE_FP16, 256, 8, 2, true, 3, 0, 0, {12000, 700}},
  };
  int checked = 0;
  for (const Case &c : cases)
    EXPECT_EQ(checkCase(ctx, c, true, 40 + checked++), "") << "case " << checked - 1;
  EXPECT_EQ(checked, 4);
}

TEST(ApiDecodeGpu, MatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  ApiContext ctx;
  const Case cases[] = {
      {FJ_DTYPE_BF16, 128, 32, 8, false, 1, 16, 0, {5000, 17, 1025}},
      {FJ_DTYPE_BF16, 128, 32, 8, true, 5, 64, 0, {3, 4099}},
      {FJ_DTYPE_FP16, 64, 8, 8, true, 1, 0, 1, {777, 2048}},
      {FJ_DTYPE_FP16, 64, 16, 1, false, 16, 32, 4, {1500, 301, 9}},
      {FJ_DTYPE_BF16, 256, 8, 2, true, 3, 256, 0, {12000}},
  };
  int checked = 0;
  for (const Case &c : cases)
    EXPECT_EQ(checkCase(ctx, c, false, 21 + checked++), "") << "case " << checked - 1;
  EXPECT_EQ(checked, 5);
}

// The window, soft-capping and ALiBi (0.13) through the C API: a handle whose forward and
// decode kernels both take them, its decode against the reference with the same features
// (ALiBi's slopes in fj_decode_args).
TEST(ApiDecodeGpu, FeaturesMatchReference) {
  FLASHJIT_REQUIRE_GPU();
  ApiContext ctx;
  const Case cases[] = {
      {FJ_DTYPE_BF16, 128, 32, 8, true, 1, 16, 0, {5000, 17, 1025}, 1000, 0, 0.f},
      {FJ_DTYPE_FP16, 128, 32, 8, false, 5, 64, 0, {3, 4099}, 64, -1, 50.f},
      {FJ_DTYPE_BF16, 64, 16, 1, true, 16, 0, 4, {1500, 301, 9}, -1, -1, 30.f},
      {FJ_DTYPE_BF16, 128, 32, 8, true, 1, 16, 0, {5000, 17, 1025}, -1, -1, 0.f, true},
      {FJ_DTYPE_FP16, 128, 16, 4, false, 3, 64, 0, {3000, 130}, 512, -1, 0.f, true},
  };
  int checked = 0;
  for (const Case &c : cases)
    EXPECT_EQ(checkCase(ctx, c, false, 60 + checked++), "") << "case " << checked - 1;
  EXPECT_EQ(checked, 5);
}

// The user's score_mod and mask_mod (0.14) through the C API, their args in
// fj_decode_args.mod_args, alone and with the window and causal.
TEST(ApiDecodeGpu, UserModsMatchReference) {
  FLASHJIT_REQUIRE_GPU();
  ApiContext ctx;
  fj_mod_args args = {};
  args.scalar[0] = 0.5f;
  args.integer[0] = 5;
  const char *score = "return score - args.scalar[0] * (float)((kv_idx + 2 * h) % 5);";
  const char *mask = "return (kv_idx + q_idx + b) % args.integer[0] != 0;";
  Case cases[] = {
      {FJ_DTYPE_BF16, 128, 32, 8, false, 1, 16, 0, {5000, 17, 1025}},
      {FJ_DTYPE_FP16, 128, 16, 4, true, 3, 64, 0, {3000, 130}, 512, 0},
      {FJ_DTYPE_BF16, 64, 16, 1, false, 16, 0, 4, {1500, 301, 9}},
  };
  int checked = 0;
  for (Case &c : cases) {
    c.scoreMod = checked == 2 ? nullptr : score;
    c.maskMod = checked == 0 ? nullptr : mask;
    c.modArgs = args;
    EXPECT_EQ(checkCase(ctx, c, false, 80 + checked++), "") << "case " << checked - 1;
  }
  EXPECT_EQ(checked, 3);
}

// The features over an FP8 cache (0.14) through the C API: the factors, the slopes and
// the user code's args all in fj_decode_args.
TEST(ApiDecodeGpu, Fp8CacheFeaturesMatchReference) {
  FLASHJIT_REQUIRE_GPU();
  ApiContext ctx;
  Case cases[] = {
      {FJ_DTYPE_BF16, 128, 32, 8, true, 1, 16, 0, {5000, 17, 1025}, 1000, 0, 30.f},
      {FJ_DTYPE_FP16, 128, 16, 4, false, 3, 64, 0, {3000, 130}, -1, -1, 0.f, true},
  };
  cases[1].scoreMod = "return score - args.scalar[0] * (float)((kv_idx + 2 * h) % 5);";
  cases[1].maskMod = "return (kv_idx + q_idx + b) % args.integer[0] != 0;";
  cases[1].modArgs.scalar[0] = 0.5f;
  cases[1].modArgs.integer[0] = 5;
  int checked = 0;
  for (const Case &c : cases)
    EXPECT_EQ(checkCase(ctx, c, true, 90 + checked++), "") << "case " << checked - 1;
  EXPECT_EQ(checked, 2);
}

TEST(ApiDecodeGpu, RefusesWhatItCannotRun) {
  FLASHJIT_REQUIRE_GPU();
  ApiContext ctx;
  generator::KernelSpec spec;
  spec.family = generator::Family::DecMma;
  spec.headDim = spec.headDimV = 128;
  tuner::ForwardShape shape;
  shape.batch = 1, shape.headsQ = 8, shape.headsKV = 8, shape.seqQ = 1, shape.seqK = 8192;
  shape.seqlensK = {8192};
  shape.pageSize = 64;
  auto checker = tuner::DecodeChecker::create(spec, shape, 5, nullptr);
  ASSERT_TRUE((bool)checker) << llvm::toString(checker.takeError());
  for (bool decode : {false, true}) {
    fj_attention_desc desc = decodeDesc(FJ_DTYPE_BF16, 128, 8, 8, false, decode);
    Kernel kernel;
    ASSERT_EQ(fj_kernel_get(ctx.handle, &desc, &kernel.handle), FJ_SUCCESS)
        << fj_last_error_message();
    auto report = (*checker)->checkWith(
        [&](const FjDecodeParams &p, const tuner::DecodeBuffers &b) -> llvm::Error {
          fj_decode_args args = argsOf(p, b);
          args.num_splits = 8;  // needs a workspace
          EXPECT_EQ(fj_decode(kernel.handle, &args, nullptr), FJ_ERROR_INVALID_VALUE);
          std::string message = fj_last_error_message();
          EXPECT_NE(message.find(decode ? "workspace" : "desc.decode"), std::string::npos)
              << message;
          return llvm::Error::success();
        },
        nullptr);
    ASSERT_TRUE((bool)report);
    EXPECT_FALSE(report->passed);  // nothing was written: the poison is still there
    EXPECT_GT(report->badValues, 0);
  }
}
