// FP8 (FJ_DTYPE_E4M3, C API 0.7) without a GPU: the description's out_dtype and what an
// FP8 description cannot have yet, the FP8 fields of fj_forward_args (descale factors,
// workspace) and the calls an FP8 kernel refuses (cu_seqlens, no keys, strides that are
// not multiples of 16 bytes), each with its status and a message naming the field; the
// 0.6-sized structs; fj_forward_workspace_size and fj_forward's checks on device-free
// handles; the family an FP8 description gets on each target. The kernels themselves
// are in tests/gpu/api_fp8_test.cpp.
#include "api_fixtures.h"

#include "api/handles.h"
#include "api/live_handles.h"
#include "api/validate.h"
#include "tuner/family.h"

#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

using namespace flashjit;
using namespace flashjit::apitest;

namespace {

// validDesc() in FP8: e4m3, d128, causal, 8 query heads over 2 kv heads, o in bf16 (0).
fj_attention_desc fp8Desc(int outDtype = 0) {
  fj_attention_desc desc = validDesc();
  desc.dtype = FJ_DTYPE_E4M3;
  desc.out_dtype = outDtype;
  return desc;
}

// batch * num_heads_kv * head_dim_v * (seqlen_k rounded up to 64): what the header
// documents for fj_forward_workspace_size, computed here independently.
size_t documentedWorkspace(const fj_attention_desc &desc, int batch, int seqlenK) {
  const size_t dv = desc.head_dim_v ? desc.head_dim_v : desc.head_dim;
  const size_t keys = ((size_t)seqlenK + 63) / 64 * 64;
  return (size_t)batch * desc.num_heads_kv * dv * keys;
}

// validArgs() (batch 2, 128 queries, 256 keys, packed BSHD: every q/k/v stride a multiple
// of 16 at d128) with the workspace an FP8 call needs, exactly.
fj_forward_args fp8Args(const fj_attention_desc &desc) {
  fj_forward_args a = validArgs(desc);
  a.workspace = fakeDevicePointer(9);
  a.workspace_bytes = documentedWorkspace(desc, a.batch, a.seqlen_k);
  return a;
}

const float *fakeFactors(uintptr_t index) {
  return static_cast<const float *>(fakeDevicePointer(index));
}

const float *misaligned(const float *p, int bytes) {
  return reinterpret_cast<const float *>(reinterpret_cast<const char *>(p) + bytes);
}

// ---- the description ----------------------------------------------------------------

TEST(ApiFp8Desc, AcceptedWithEachOutputType) {
  for (int out : {0, (int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16})
    for (int d : {64, 128, 256})
      for (int causal : {0, 1}) {
        fj_attention_desc desc = fp8Desc(out);
        desc.head_dim = d;
        desc.causal = causal;
        EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)))
            << "out_dtype " << out << " d" << d << " causal " << causal;
        fj_forward_args args = fp8Args(desc);
        EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)))
            << "out_dtype " << out << " d" << d << " causal " << causal;
      }
}

TEST(ApiFp8Desc, OutputTypeResolves) {
  EXPECT_EQ(checked(fp8Desc(0)).outDtype, FJ_DTYPE_BF16) << "0: bf16";
  EXPECT_EQ(checked(fp8Desc(FJ_DTYPE_BF16)).outDtype, FJ_DTYPE_BF16);
  EXPECT_EQ(checked(fp8Desc(FJ_DTYPE_FP16)).outDtype, FJ_DTYPE_FP16);
  EXPECT_EQ(checked(fp8Desc(FJ_DTYPE_FP16)).dtype, FJ_DTYPE_E4M3);
  // 16-bit descriptions: o has the dtype, whether out_dtype is 0 or says so.
  for (int dtype : {(int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16})
    for (int out : {0, dtype}) {
      fj_attention_desc desc = validDesc();
      desc.dtype = dtype;
      desc.out_dtype = out;
      EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc))) << dtype << "/" << out;
      EXPECT_EQ(checked(desc).outDtype, dtype) << dtype << "/" << out;
    }
}

TEST(ApiFp8Desc, UnknownDtypeNamesE4m3AmongTheChoices) {
  fj_attention_desc desc = validDesc();
  desc.dtype = 4;
  EXPECT_TRUE(failsWith(fj_validate_attention_desc(&desc), FJ_ERROR_INVALID_VALUE,
                        {"desc->dtype is 4", "FJ_DTYPE_FP16 (1)", "FJ_DTYPE_BF16 (2)",
                         "FJ_DTYPE_E4M3 (3)"}));
}

TEST(ApiFp8Desc, OutputTypeMustBeSixteenBit) {
  for (int out : {(int)FJ_DTYPE_E4M3, 7, -1}) {
    fj_attention_desc desc = fp8Desc(out);
    const std::string value = "desc->out_dtype is " + std::to_string(out);
    EXPECT_TRUE(failsWith(fj_validate_attention_desc(&desc), FJ_ERROR_INVALID_VALUE,
                          {"fj_validate_attention_desc: ", value.c_str(), "FJ_DTYPE_BF16",
                           "FJ_DTYPE_FP16"}))
        << out;
    fj_forward_args args = fp8Args(fp8Desc());
    EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &args), FJ_ERROR_INVALID_VALUE,
                          {"fj_validate_forward_args: ", value.c_str()}))
        << out;
  }
}

TEST(ApiFp8Desc, SixteenBitDtypeTakesNoOtherOutputType) {
  struct Case {
    int dtype, out;
  };
  for (Case c : {Case{FJ_DTYPE_BF16, FJ_DTYPE_FP16}, Case{FJ_DTYPE_FP16, FJ_DTYPE_BF16},
                 Case{FJ_DTYPE_BF16, FJ_DTYPE_E4M3}, Case{FJ_DTYPE_FP16, 9}}) {
    fj_attention_desc desc = validDesc();
    desc.dtype = c.dtype;
    desc.out_dtype = c.out;
    const std::string value = "desc->out_dtype is " + std::to_string(c.out);
    EXPECT_TRUE(failsWith(fj_validate_attention_desc(&desc), FJ_ERROR_INVALID_VALUE,
                          {value.c_str(), "16-bit", "leave it 0"}))
        << c.dtype << "/" << c.out;
  }
}

// What the FP8 kernel is not yet: features, the backward pass, decode. Not supported (a
// valid request this version cannot serve), and the message says what was asked.
TEST(ApiFp8Desc, FeaturesBackwardAndDecodeAreNotSupported) {
  struct Case {
    const char *name;
    void (*mutate)(fj_attention_desc &);
    std::vector<const char *> fragments;
  };
  const Case cases[] = {
      {"window", [](fj_attention_desc &d) { d.window = 1, d.window_left = 128; },
       {"FJ_DTYPE_E4M3", "attention features"}},
      {"alibi", [](fj_attention_desc &d) { d.alibi = 1; },
       {"FJ_DTYPE_E4M3", "attention features"}},
      {"softcap", [](fj_attention_desc &d) { d.softcap = 30.f; },
       {"FJ_DTYPE_E4M3", "attention features"}},
      {"score_mod", [](fj_attention_desc &d) { d.score_mod = "return score;"; },
       {"FJ_DTYPE_E4M3", "attention features"}},
      {"mask_mod", [](fj_attention_desc &d) { d.mask_mod = "return true;"; },
       {"FJ_DTYPE_E4M3", "attention features"}},
      {"backward", [](fj_attention_desc &d) { d.backward = 1; },
       {"FJ_DTYPE_E4M3", "desc->backward", "forward pass alone"}},
      {"decode", [](fj_attention_desc &d) { d.decode = 1; },
       {"FJ_DTYPE_E4M3", "desc->decode", "forward pass alone"}},
  };
  for (const Case &c : cases)
    for (int out : {0, (int)FJ_DTYPE_FP16}) {
      fj_attention_desc desc = fp8Desc(out);
      c.mutate(desc);
      std::vector<const char *> fragments = c.fragments;
      EXPECT_EQ(fj_validate_attention_desc(&desc), FJ_ERROR_NOT_SUPPORTED)
          << c.name << ": " << fj_last_error_message();
      std::string message = fj_last_error_message();
      for (const char *fragment : fragments)
        EXPECT_NE(message.find(fragment), std::string::npos)
            << c.name << ": \"" << message << "\" does not mention \"" << fragment << "\"";
      fj_forward_args args = fp8Args(fp8Desc());
      EXPECT_EQ(fj_validate_forward_args(&desc, &args), FJ_ERROR_NOT_SUPPORTED) << c.name;
      // The same request in 16 bits is fine: it is FP8 that refuses it.
      desc.dtype = FJ_DTYPE_BF16;
      desc.out_dtype = 0;
      EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc))) << c.name << " in bf16";
    }
  // A feature with backward or decode is refused whichever check sees it first.
  fj_attention_desc both = fp8Desc();
  both.window = 1, both.window_left = 64, both.backward = 1;
  EXPECT_EQ(fj_validate_attention_desc(&both), FJ_ERROR_NOT_SUPPORTED);
  both.backward = 0, both.decode = 1;
  EXPECT_EQ(fj_validate_attention_desc(&both), FJ_ERROR_NOT_SUPPORTED);
  // A bad out_dtype is a bad value before it is an unsupported request.
  fj_attention_desc bad = fp8Desc(7);
  bad.backward = 1;
  EXPECT_TRUE(failsWith(fj_validate_attention_desc(&bad), FJ_ERROR_INVALID_VALUE,
                        {"desc->out_dtype is 7"}));
}

// ---- forward arguments --------------------------------------------------------------

// One bad FP8 call: how it spoils fp8Desc() / fp8Args(), its status and its fragments.
std::vector<BadInput> badFp8Inputs() {
  using D = fj_attention_desc;
  using A = fj_forward_args;
  std::vector<BadInput> cases = {
      // What the FP8 kernel cannot take (a 16-bit kernel's fwd_mma fallback would).
      {"CuSeqlensWithoutTotalK",
       [](D &, A &a) {
         a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
         a.total_q = 256, a.total_k = 0;
       },
       FJ_ERROR_INVALID_VALUE, {"args->total_q is 256 and total_k 0", "needs both"}},
      {"CuSeqlensWithoutTotalQ",
       [](D &, A &a) {
         a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
         a.total_q = 0, a.total_k = 512;
       },
       FJ_ERROR_INVALID_VALUE, {"args->total_q is 0 and total_k 512", "packed row counts"}},
      {"CuSeqlensWorkspaceOfUnpaddedBatch",
       [](D &d, A &a) {
         a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
         a.total_q = 256, a.total_k = 512;  // fp8Args' workspace: 2 * 256 keys, no gaps
       },
       FJ_ERROR_INVALID_VALUE, {"args->workspace_bytes is 131072", "needs 294912"}},
      {"NoKeys", [](D &, A &a) { a.seqlen_k = 0; }, FJ_ERROR_NOT_SUPPORTED,
       {"args->seqlen_k is 0", "at least one key"}},
      {"NoKeysNoKeyTensors",
       [](D &, A &a) {
         a.seqlen_k = 0;
         a.k = a.v = nullptr;
       },
       FJ_ERROR_NOT_SUPPORTED, {"args->seqlen_k is 0"}},
      // Descale factors: 4-byte aligned (NULL is 1), strides 0 .. 2^40.
      {"QDescaleMisaligned",
       [](D &, A &a) { a.q_descale = misaligned(fakeFactors(10), 2); },
       FJ_ERROR_INVALID_VALUE, {"args->q_descale is 0x", "4-byte aligned"}},
      {"KDescaleMisaligned",
       [](D &, A &a) { a.k_descale = misaligned(fakeFactors(11), 1); },
       FJ_ERROR_INVALID_VALUE, {"args->k_descale is", "4-byte aligned"}},
      {"VDescaleMisaligned",
       [](D &, A &a) { a.v_descale = misaligned(fakeFactors(12), 3); },
       FJ_ERROR_INVALID_VALUE, {"args->v_descale is", "4-byte aligned"}},
      {"DescaleBatchStrideNegative", [](D &, A &a) { a.descale_batch_stride = -1; },
       FJ_ERROR_INVALID_VALUE, {"args->descale_batch_stride is -1", "from 0 to 2^40"}},
      {"DescaleHeadStrideNegative", [](D &, A &a) { a.descale_head_stride = -2; },
       FJ_ERROR_INVALID_VALUE, {"args->descale_head_stride is -2", "from 0 to 2^40"}},
      {"DescaleBatchStrideAbove2To40",
       [](D &, A &a) { a.descale_batch_stride = (INT64_C(1) << 40) + 1; },
       FJ_ERROR_INVALID_VALUE, {"args->descale_batch_stride is 1099511627777", "2^40"}},
      {"DescaleHeadStrideHuge", [](D &, A &a) { a.descale_head_stride = INT64_MAX; },
       FJ_ERROR_INVALID_VALUE, {"args->descale_head_stride is 9223372036854775807"}},
      // The workspace (v transposed): required, 16-byte aligned, large enough.
      {"WorkspaceNull", [](D &, A &a) { a.workspace = nullptr; }, FJ_ERROR_INVALID_VALUE,
       {"args->workspace is NULL", "131072 bytes", "fj_forward_workspace_size"}},
      {"WorkspaceNullAndNoBytes",
       [](D &, A &a) {
         a.workspace = nullptr;
         a.workspace_bytes = 0;
       },
       FJ_ERROR_INVALID_VALUE, {"args->workspace is NULL"}},
      {"WorkspaceMisaligned", [](D &, A &a) { a.workspace = (char *)a.workspace + 8; },
       FJ_ERROR_INVALID_VALUE, {"args->workspace is 0x", "16-byte aligned"}},
      {"WorkspaceOneByteShort", [](D &, A &a) { a.workspace_bytes -= 1; },
       FJ_ERROR_INVALID_VALUE,
       {"args->workspace_bytes is 131071", "needs 131072", "fj_forward_workspace_size"}},
      {"WorkspaceBytesZero", [](D &, A &a) { a.workspace_bytes = 0; }, FJ_ERROR_INVALID_VALUE,
       {"args->workspace_bytes is 0", "needs 131072"}},
      // Keys are rounded up to 64: 257 keys need 320 per row of v^T, not 257.
      {"WorkspaceSizedForUnroundedKeys",
       [](D &, A &a) {
         a.seqlen_k = 257;
         a.k_batch_stride = a.v_batch_stride = 257 * 2 * 128;
         a.workspace_bytes = (size_t)2 * 2 * 128 * 257;
       },
       FJ_ERROR_INVALID_VALUE, {"args->workspace_bytes is 131584", "needs 163840"}},
      // head_dim_v, not head_dim, sizes it: 2 x 2 x 64 x 256 = 65536, one byte short.
      {"WorkspaceOfHeadDimV",
       [](D &d, A &a) {
         d.head_dim_v = 64;
         a.v_head_stride = 64, a.v_seq_stride = 128, a.v_batch_stride = 256 * 128;
         a.o_head_stride = 64, a.o_seq_stride = 8 * 64, a.o_batch_stride = 128 * 8 * 64;
         a.workspace_bytes = 65535;
       },
       FJ_ERROR_INVALID_VALUE, {"args->workspace_bytes is 65535", "needs 65536"}},
      // The common checks still run first, and name their field.
      {"QNull", [](D &, A &a) { a.q = nullptr; }, FJ_ERROR_INVALID_VALUE, {"args->q is NULL"}},
      {"StrideNotMultipleOf8", [](D &, A &a) { a.k_seq_stride = 260; }, FJ_ERROR_INVALID_VALUE,
       {"args->k_seq_stride is 260", "multiple of 8"}},
  };
  // Every q, k and v stride: a multiple of 8 elements (what 16-bit kernels take) but not
  // of 16 (FP8 elements are bytes, and TMA needs 16-byte strides). o is 16-bit: exempt.
  const std::vector<StrideField> strides = forwardStrides(/*withO=*/false);
  static std::vector<std::string> names;  // the test names must outlive the table
  names.reserve(strides.size());
  for (const StrideField &field : strides) {
    auto member = field.member;
    names.push_back(std::string(field.name) + "NotMultipleOf16");
    cases.push_back({names.back().c_str(), [member](D &, A &a) { a.*member += 8; },
                     FJ_ERROR_NOT_SUPPORTED,
                     {field.name, "multiples of 16 elements (16 bytes)"}});
  }
  return cases;
}

class Fp8BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(Fp8BadInputTest, ReturnsStatusAndNamesTheField) {
  fj_attention_desc desc = fp8Desc();
  fj_forward_args args = fp8Args(desc);
  ASSERT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "the baseline must pass";
  expectRejected(GetParam(), desc, args);
}

INSTANTIATE_TEST_SUITE_P(ApiFp8, Fp8BadInputTest, ::testing::ValuesIn(badFp8Inputs()),
                         [](const ::testing::TestParamInfo<BadInput> &info) {
                           return std::string(info.param.name);
                         });

TEST(ApiFp8Args, FactorsAndWorkspaceReachTheKernelParameters) {
  fj_attention_desc desc = fp8Desc();
  fj_forward_args args = fp8Args(desc);
  args.q_descale = fakeFactors(10);
  args.k_descale = fakeFactors(11);
  args.v_descale = fakeFactors(12);
  args.descale_batch_stride = desc.num_heads_kv;  // FlashAttention-3's [batch, heads_kv]
  args.descale_head_stride = 1;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  FjForwardParams params;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork)));
  EXPECT_FALSE(noWork);
  EXPECT_EQ(params.q_descale, args.q_descale);
  EXPECT_EQ(params.k_descale, args.k_descale);
  EXPECT_EQ(params.v_descale, args.v_descale);
  EXPECT_EQ(params.descale_batch_stride, desc.num_heads_kv);
  EXPECT_EQ(params.descale_head_stride, 1);
  EXPECT_EQ(params.v_transposed, args.workspace);
}

TEST(ApiFp8Args, AcceptedLayoutsOfFactors) {
  fj_attention_desc desc = fp8Desc();
  // NULL factors (1), one factor per tensor (strides 0), some NULL and some not.
  fj_forward_args args = fp8Args(desc);
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "NULL: 1";
  args.q_descale = fakeFactors(10);
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "q only";
  args.k_descale = fakeFactors(11);
  args.v_descale = fakeFactors(12);
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "per tensor";
  // Head-major [heads_kv, batch] and the limits of the strides.
  args.descale_batch_stride = 1, args.descale_head_stride = args.batch;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "head-major";
  args.descale_batch_stride = args.descale_head_stride = INT64_C(1) << 40;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "2^40";
  // Strides without factors are not used, but still checked.
  args.q_descale = args.k_descale = args.v_descale = nullptr;
  args.descale_batch_stride = 3, args.descale_head_stride = 0;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

TEST(ApiFp8Args, AcceptedLayoutsOfTensors) {
  fj_attention_desc desc = fp8Desc();
  // A larger workspace than needed, and rows padded by 16 bytes.
  fj_forward_args args = fp8Args(desc);
  args.workspace_bytes += 1000;
  args.q_seq_stride += 16, args.q_batch_stride = args.q_seq_stride * args.seqlen_q;
  args.k_seq_stride += 16, args.k_batch_stride = args.k_seq_stride * args.seqlen_k;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  // o is 16-bit: its strides need only be multiples of 8 elements (16 bytes).
  args.o_seq_stride += 8, args.o_batch_stride = args.o_seq_stride * args.seqlen_q;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  // [batch, heads, seq, dim] at d64.
  desc.head_dim = 64;
  args = fp8Args(desc);
  for (auto [batch, seq, head, heads, rows] :
       {std::tuple{&args.q_batch_stride, &args.q_seq_stride, &args.q_head_stride, 8, 128},
        std::tuple{&args.k_batch_stride, &args.k_seq_stride, &args.k_head_stride, 2, 256},
        std::tuple{&args.v_batch_stride, &args.v_seq_stride, &args.v_head_stride, 2, 256},
        std::tuple{&args.o_batch_stride, &args.o_seq_stride, &args.o_head_stride, 8, 128}}) {
    *seq = 64, *head = 64 * rows, *batch = (int64_t)64 * rows * heads;
  }
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  // MQA with one kv head and one sequence: strides of size-1 dimensions may be 0.
  desc.num_heads_kv = 1;
  args = fp8Args(desc);
  args.batch = 1;
  args.workspace_bytes = documentedWorkspace(desc, 1, args.seqlen_k);
  args.k_head_stride = args.v_head_stride = 0;
  args.q_batch_stride = args.k_batch_stride = args.v_batch_stride = args.o_batch_stride = 0;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

// Head dims that are not multiples of 16: packed rows are not 16-byte strides, so the
// caller pads them (a clear refusal, not a fallback: FP8 has no other kernel).
TEST(ApiFp8Args, HeadDim40NeedsPaddedRows) {
  fj_attention_desc desc = fp8Desc();
  desc.head_dim = 40;
  ASSERT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  fj_forward_args args = fp8Args(desc);
  EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &args), FJ_ERROR_NOT_SUPPORTED,
                        {"args->q_head_stride is 40", "multiples of 16"}));
  // Heads padded to 48 elements.
  for (auto [batch, seq, head, heads, rows] :
       {std::tuple{&args.q_batch_stride, &args.q_seq_stride, &args.q_head_stride, 8, 128},
        std::tuple{&args.k_batch_stride, &args.k_seq_stride, &args.k_head_stride, 2, 256},
        std::tuple{&args.v_batch_stride, &args.v_seq_stride, &args.v_head_stride, 2, 256}}) {
    *head = 48, *seq = (int64_t)48 * heads, *batch = (int64_t)48 * heads * rows;
  }
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

// No work (batch or seqlen_q 0) is a no-op for FP8 as for 16 bits: nothing is read or
// written, so neither pointers nor a workspace are needed.
TEST(ApiFp8Args, NoWorkNeedsNothing) {
  fj_attention_desc desc = fp8Desc();
  for (int which = 0; which < 2; ++which) {
    fj_forward_args args;
    fj_forward_args_init(&args);
    args.batch = which == 0 ? 0 : 2;
    args.seqlen_q = which == 0 ? 100 : 0;
    args.seqlen_k = 50;
    EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "case " << which;
  }
}

// The FP8 fields are read only for an FP8 description: a 16-bit one ignores them.
TEST(ApiFp8Args, SixteenBitDescriptionIgnoresTheFp8Fields) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  args.q_descale = misaligned(fakeFactors(10), 1);
  args.descale_batch_stride = -5;
  args.descale_head_stride = INT64_MAX;
  args.workspace = (char *)fakeDevicePointer(9) + 3;
  args.workspace_bytes = 1;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  FjForwardParams params;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork)));
  EXPECT_EQ(params.q_descale, nullptr);
  EXPECT_EQ(params.v_transposed, nullptr);
  // ... and strides that are multiples of 8 but not 16 are fine in 16 bits.
  args = validArgs(desc);
  args.q_seq_stride += 8, args.q_batch_stride = args.q_seq_stride * args.seqlen_q;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  // And seqlen_k 0, and cu_seqlens.
  args = validArgs(desc);
  args.seqlen_k = 0;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

// ---- struct versions ------------------------------------------------------------------

// 0.6's forward arguments end at block_mask: accepted for a 16-bit description, the FP8
// fields read as NULL / 0 whatever the caller's memory holds after the struct.
TEST(ApiFp8Versions, ForwardArgumentsOf06SizeAreAccepted) {
  const size_t sizeof06 = offsetof(fj_forward_args, q_descale);
  static_assert(offsetof(fj_forward_args, q_descale) ==
                    offsetof(fj_forward_args, block_mask) + sizeof(fj_block_mask),
                "0.6's sizeof is where q_descale starts");
  struct OldArgsInBiggerBuffer {
    fj_forward_args args;
    unsigned char garbage[32];
  };
  for (int dtype : {(int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16}) {
    fj_attention_desc desc = validDesc();
    desc.dtype = dtype;
    OldArgsInBiggerBuffer old;
    std::memset(&old, 0x5A, sizeof(old));
    fj_forward_args valid = validArgs(desc);
    std::memcpy(&old.args, &valid, sizeof06);
    old.args.struct_size = sizeof06;
    EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &old.args))) << dtype;
    FjForwardParams params;
    bool noWork = true;
    ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &old.args, params, noWork)));
    EXPECT_EQ(params.q_descale, nullptr);
    EXPECT_EQ(params.v_transposed, nullptr);
  }
  // An FP8 description needs the workspace such a caller cannot give: refused, naming it
  // (not read from the garbage after the struct).
  fj_attention_desc desc = fp8Desc();
  OldArgsInBiggerBuffer old;
  std::memset(&old, 0x5A, sizeof(old));
  fj_forward_args valid = fp8Args(desc);
  std::memcpy(&old.args, &valid, sizeof06);
  old.args.struct_size = sizeof06;
  EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &old.args), FJ_ERROR_INVALID_VALUE,
                        {"args->workspace is NULL"}));
  // This version's size, with the garbage in the struct's own FP8 fields, is read.
  old.args.struct_size = sizeof(fj_forward_args);
  EXPECT_FALSE(succeeds(fj_validate_forward_args(&desc, &old.args)));
}

// A description whose struct_size ends before out_dtype reads it as 0: bf16 for FP8, the
// dtype otherwise.
TEST(ApiFp8Versions, DescriptionEndingBeforeOutDtypeReadsItAsZero) {
  const size_t fields06 = offsetof(fj_attention_desc, out_dtype);
  for (int dtype : {(int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16, (int)FJ_DTYPE_E4M3}) {
    fj_attention_desc valid = validDesc();
    valid.dtype = dtype;
    OldDescInBiggerBuffer old(valid, fields06, fields06);
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&old.desc))) << dtype;
    EXPECT_EQ(checked(old.desc).outDtype, dtype == FJ_DTYPE_E4M3 ? FJ_DTYPE_BF16 : dtype)
        << dtype;
  }
}

// A caller built against 0.6's header passes struct_size = its sizeof, which ends with
// tune_lengths and 4 bytes of tail padding (a struct filled field by field leaves
// whatever was there). 0.7 keeps those bytes as reserved_06, never read, and puts
// out_dtype after them, so 0.6's sizeof reads only up to tune_lengths (as 0.5 did with
// reserved_04).
TEST(ApiFp8Versions, DescriptionOf06SizeWithGarbagePaddingIsAccepted) {
  const size_t fields06 = offsetof(fj_attention_desc, tune_lengths) + sizeof(int32_t);
  const size_t sizeof06 = (fields06 + alignof(fj_attention_desc) - 1) /
                          alignof(fj_attention_desc) * alignof(fj_attention_desc);
  fj_attention_desc valid = validDesc();
  OldDescInBiggerBuffer old(valid, fields06, sizeof06);
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&old.desc))) << "size " << sizeof06;
  EXPECT_EQ(checked(old.desc).outDtype, FJ_DTYPE_BF16);
}

// ---- device-free handles: fj_forward_workspace_size, fj_forward's checks -------------

// A context with no device, registered as live, and a kernel of `desc` adopted by it:
// enough for the entry points that only read the handle's description.
struct DeviceFreeKernel {
  fj_context_s *context = nullptr;
  fj_kernel_s *kernel = nullptr;
  explicit DeviceFreeKernel(const fj_attention_desc &desc) {
    context = new fj_context_s();
    api::LiveHandles::get().add(context);
    kernel = new fj_kernel_s();
    kernel->desc = checked(desc);
    api::adoptKernel(*context, kernel);
  }
  ~DeviceFreeKernel() {
    EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));
    EXPECT_TRUE(succeeds(fj_context_destroy(context)));
  }
};

TEST(ApiFp8Kernel, WorkspaceSizeIsTheDocumentedOne) {
  struct Shape {
    int batch, seqlenK;
  };
  for (int dv : {0, 64, 256})
    for (int heads : {1, 2, 8}) {
      fj_attention_desc desc = fp8Desc();
      desc.head_dim_v = dv;
      desc.num_heads_kv = heads;
      DeviceFreeKernel k(desc);
      for (Shape s : {Shape{2, 256}, Shape{2, 257}, Shape{1, 1}, Shape{3, 64}, Shape{3, 65},
                      Shape{2, 389}, Shape{65535, 1 << 24}, Shape{0, 100}, Shape{4, 0}}) {
        fj_forward_args args;
        fj_forward_args_init(&args);  // only the sizes are read: no pointers, no strides
        args.batch = s.batch;
        args.seqlen_k = s.seqlenK;
        size_t bytes = 12345;
        ASSERT_TRUE(succeeds(fj_forward_workspace_size(k.kernel, &args, &bytes)))
            << "batch " << s.batch << " seqlen_k " << s.seqlenK;
        EXPECT_EQ(bytes, documentedWorkspace(desc, s.batch, s.seqlenK))
            << "dv " << dv << " heads_kv " << heads << " batch " << s.batch << " seqlen_k "
            << s.seqlenK;
        // What the validator requires is what the size function says.
        if (bytes != 0 && s.seqlenK < 4096) {
          fj_forward_args call = fp8Args(desc);
          call.batch = s.batch;
          call.seqlen_k = s.seqlenK;
          call.k_batch_stride = (int64_t)s.seqlenK * call.k_seq_stride;
          call.v_batch_stride = (int64_t)s.seqlenK * call.v_seq_stride;
          call.workspace_bytes = bytes;
          EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &call)));
          call.workspace_bytes = bytes - 1;
          EXPECT_EQ(fj_validate_forward_args(&desc, &call), FJ_ERROR_INVALID_VALUE);
        }
      }
    }
  EXPECT_EQ(documentedWorkspace(fp8Desc(), 2, 389), (size_t)2 * 2 * 128 * 448);
}

// With cu_seqlens: num_heads_kv * head_dim_v * (total_k rounded up to 64 + 320 * batch),
// as the header documents; batch strides are not read.
TEST(ApiFp8Kernel, WorkspaceSizeOfVariableLengthBatches) {
  fj_attention_desc desc = fp8Desc();  // 2 kv heads of 128
  DeviceFreeKernel k(desc);
  struct Shape {
    int batch, longest;
    int64_t totalK;
    size_t bytes;
  };
  for (Shape s : {Shape{2, 300, 512, (size_t)2 * 128 * (512 + 640)},
                  Shape{3, 100, 257, (size_t)2 * 128 * (320 + 960)},
                  Shape{1, 1, 1, (size_t)2 * 128 * (64 + 320)}}) {
    fj_forward_args call = fp8Args(desc);
    call.batch = s.batch;
    call.seqlen_k = s.longest;
    call.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
    call.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
    call.total_q = call.seqlen_q;  // at most batch x seqlen_q
    call.total_k = s.totalK;
    call.q_batch_stride = call.k_batch_stride = call.v_batch_stride = 3;  // not read
    size_t bytes = 0;
    ASSERT_TRUE(succeeds(fj_forward_workspace_size(k.kernel, &call, &bytes)));
    EXPECT_EQ(bytes, s.bytes) << "batch " << s.batch << " total_k " << s.totalK;
    call.workspace_bytes = bytes;
    EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &call)));
    FjForwardParams params;
    bool noWork = true;
    ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &call, params, noWork)));
    EXPECT_EQ(params.total_k, s.totalK);
    EXPECT_EQ(params.v_transposed, call.workspace);
    call.workspace_bytes = bytes - 1;
    EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &call), FJ_ERROR_INVALID_VALUE,
                          {"args->workspace_bytes is"}));
  }
}

// Sizes V^T cannot take are refused before any size is computed: more packed rows than
// batch sequences of the longest length hold, and V^T beyond TMA's reach (2^31 key
// columns, 2^40 bytes a batch). A packed total_k near 2^56 once overflowed the size
// (tests/fuzz/corpus/api/fp8_varlen_total_k_overflow).
TEST(ApiFp8Kernel, WorkspaceSizesBeyondWhatTmaAddresses) {
  fj_attention_desc desc = fp8Desc();  // 2 kv heads of 128
  DeviceFreeKernel k(desc);
  fj_forward_args call = fp8Args(desc);  // batch 2, 128 queries, 256 keys
  call.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
  call.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
  call.total_q = 256;
  call.total_k = INT64_C(72056494526300736);
  size_t bytes = 7;
  for (auto check : {std::function<fj_status()>([&] {
                       return fj_forward_workspace_size(k.kernel, &call, &bytes);
                     }),
                     std::function<fj_status()>(
                         [&] { return fj_validate_forward_args(&desc, &call); })}) {
    call.total_k = INT64_C(72056494526300736);
    EXPECT_TRUE(failsWith(check(), FJ_ERROR_INVALID_VALUE,
                          {"args->total_k is 72056494526300736", "batch (2) sequences of at "
                                                                  "most 256 rows"}));
    call.total_k = 512;
    call.total_q = 257;
    EXPECT_TRUE(failsWith(check(), FJ_ERROR_INVALID_VALUE, {"args->total_q is 257"}));
    call.total_q = 256;
  }
  // 2^30 keys of 8 kv heads of 128: 2^40 bytes a batch, one past TMA's strides.
  desc.num_heads_q = desc.num_heads_kv = 8;
  DeviceFreeKernel wide(desc);
  fj_forward_args huge;
  fj_forward_args_init(&huge);
  huge.batch = 1;
  huge.seqlen_k = 1 << 30;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(wide.kernel, &huge, &bytes),
                        FJ_ERROR_NOT_SUPPORTED,
                        {"FP8 kernels cannot take 1073741824 keys (seqlen_k)", "2^40 bytes"}));
  huge.seqlen_k = (1 << 30) - 64;
  EXPECT_TRUE(succeeds(fj_forward_workspace_size(wide.kernel, &huge, &bytes)));
  EXPECT_EQ(bytes, (size_t)8 * 128 * ((1 << 30) - 64));
}

TEST(ApiFp8Kernel, WorkspaceSizeOfSixteenBitKernelsIsZero) {
  for (int dtype : {(int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16}) {
    fj_attention_desc desc = validDesc();
    desc.dtype = dtype;
    DeviceFreeKernel k(desc);
    fj_forward_args args = validArgs(desc);
    size_t bytes = 12345;
    ASSERT_TRUE(succeeds(fj_forward_workspace_size(k.kernel, &args, &bytes)));
    EXPECT_EQ(bytes, 0u) << dtype;
  }
}

TEST(ApiFp8Kernel, WorkspaceSizeChecksItsArguments) {
  fj_attention_desc desc = fp8Desc();
  DeviceFreeKernel k(desc);
  fj_forward_args args = fp8Args(desc);
  size_t bytes = 0;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(nullptr, &args, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"fj_forward_workspace_size: ", "kernel is NULL"}));
  fj_kernel_s dead;
  dead.magic = api::kDeadMagic;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(&dead, &args, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"is not a live kernel"}));
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(k.kernel, &args, nullptr),
                        FJ_ERROR_INVALID_VALUE, {"bytes (the output pointer) is NULL"}));
  bytes = 777;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(k.kernel, nullptr, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"args is NULL"}));
  EXPECT_EQ(bytes, 0u) << "a failure leaves 0, not a stale size";
  args.struct_size = 8;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(k.kernel, &args, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"args->struct_size is 8"}));
  args = fp8Args(desc);
  args.batch = -1;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(k.kernel, &args, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"args->batch is -1"}));
  args.batch = 2;
  args.seqlen_k = -3;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(k.kernel, &args, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"args->seqlen_k is -3"}));
  args.seqlen_k = (1 << 30) + 1;
  EXPECT_TRUE(failsWith(fj_forward_workspace_size(k.kernel, &args, &bytes),
                        FJ_ERROR_NOT_SUPPORTED, {"args->seqlen_k is 1073741825"}));
  // A 0.6-sized struct carries the sizes: accepted.
  args = fp8Args(desc);
  args.struct_size = offsetof(fj_forward_args, q_descale);
  ASSERT_TRUE(succeeds(fj_forward_workspace_size(k.kernel, &args, &bytes)));
  EXPECT_EQ(bytes, documentedWorkspace(desc, 2, 256));
}

// fj_forward checks an FP8 call before anything touches a device: a kernel with a
// description and no variants reports the argument error, and reaches dispatch (which
// has nothing to launch: INTERNAL) only with a complete call.
TEST(ApiFp8Kernel, ForwardChecksFp8ArgumentsFirst) {
  fj_kernel_s kernel;
  fj_attention_desc desc = fp8Desc();
  kernel.desc = checked(desc);
  fj_forward_args args = fp8Args(desc);
  args.workspace = nullptr;
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: args->workspace is NULL"}));
  args = fp8Args(desc);
  args.workspace_bytes -= 64;
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: args->workspace_bytes is 131008"}));
  args = fp8Args(desc);
  args.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
  args.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: args->total_q is 0 and total_k 0"}));
  args = fp8Args(desc);
  args.seqlen_k = 0;
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_NOT_SUPPORTED,
                        {"fj_forward: args->seqlen_k is 0"}));
  args = fp8Args(desc);
  args.v_seq_stride += 8;
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_NOT_SUPPORTED,
                        {"fj_forward: args->v_seq_stride is 264"}));
  args = fp8Args(desc);
  args.batch = 0;
  EXPECT_TRUE(succeeds(fj_forward(&kernel, &args, nullptr))) << "a no-op";
  args = fp8Args(desc);
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_INTERNAL,
                        {"no variant to dispatch to"}));
}

// ---- the family an FP8 description gets ----------------------------------------------

std::vector<generator::KernelSpec> fp8SpecsFor(const fj_attention_desc &desc,
                                               const char *target, const char *forced = "") {
  auto plan = tuner::familyPlan(target, forced);
  EXPECT_TRUE((bool)plan) << llvm::toString(plan.takeError());
  return plan ? api::kernelSpecsFor(checked(desc), target, *plan)
              : std::vector<generator::KernelSpec>{};
}

// fwd_wgmma alone on sm_90a (FP8 has no fallback family); nothing elsewhere or when
// fwd_mma is forced, which fj_kernel_get reports as NOT_SUPPORTED.
TEST(ApiFp8Kernel, FwdWgmmaAloneOnSm90a) {
  auto specs = fp8SpecsFor(fp8Desc(), "sm_90a");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].key(), "fwd_wgmma.e4m3_obf16.d128.dv128.causal.sm90a");
  EXPECT_FALSE(bool(generator::validateSpec(specs[0])));
  specs = fp8SpecsFor(fp8Desc(FJ_DTYPE_FP16), "sm_90a", "fwd_wgmma");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].key(), "fwd_wgmma.e4m3_ofp16.d128.dv128.causal.sm90a");
  EXPECT_TRUE(fp8SpecsFor(fp8Desc(), "sm_90a", "fwd_mma").empty());
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90"})
    EXPECT_TRUE(fp8SpecsFor(fp8Desc(), target).empty()) << target;
  // 16-bit descriptions are unchanged: fwd_wgmma and its fwd_mma fallback.
  EXPECT_EQ(fp8SpecsFor(validDesc(), "sm_90a").size(), 2u);
}

} // namespace
