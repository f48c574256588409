// fj_validate_backward_args (what fj_backward checks before it launches): valid
// arguments pass, every bad field gets its status and a message naming it.
#include "api_fixtures.h"

#include <cstring>
#include <functional>
#include <vector>

using namespace flashjit::apitest;

namespace {

// The backward arguments of validArgs(desc): dout like o, each gradient like its input,
// in their own (fake) allocations.
fj_backward_args validBackwardArgs(const fj_attention_desc &desc) {
  fj_forward_args f = validArgs(desc);
  fj_backward_args a;
  fj_backward_args_init(&a);
  a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o;
  a.lse = static_cast<const float *>(fakeDevicePointer(5));
  a.dout = fakeDevicePointer(6);
  a.dq = fakeDevicePointer(7), a.dk = fakeDevicePointer(8), a.dv = fakeDevicePointer(9);
  a.batch = f.batch, a.seqlen_q = f.seqlen_q, a.seqlen_k = f.seqlen_k;
  a.q_batch_stride = f.q_batch_stride, a.q_seq_stride = f.q_seq_stride;
  a.q_head_stride = f.q_head_stride;
  a.k_batch_stride = f.k_batch_stride, a.k_seq_stride = f.k_seq_stride;
  a.k_head_stride = f.k_head_stride;
  a.v_batch_stride = f.v_batch_stride, a.v_seq_stride = f.v_seq_stride;
  a.v_head_stride = f.v_head_stride;
  a.o_batch_stride = f.o_batch_stride, a.o_seq_stride = f.o_seq_stride;
  a.o_head_stride = f.o_head_stride;
  a.dout_batch_stride = f.o_batch_stride, a.dout_seq_stride = f.o_seq_stride;
  a.dout_head_stride = f.o_head_stride;
  a.dq_batch_stride = f.q_batch_stride, a.dq_seq_stride = f.q_seq_stride;
  a.dq_head_stride = f.q_head_stride;
  a.dk_batch_stride = f.k_batch_stride, a.dk_seq_stride = f.k_seq_stride;
  a.dk_head_stride = f.k_head_stride;
  a.dv_batch_stride = f.v_batch_stride, a.dv_seq_stride = f.v_seq_stride;
  a.dv_head_stride = f.v_head_stride;
  return a;
}

struct BadBackward {
  const char *name;
  std::function<void(fj_backward_args &)> mutate;
  fj_status status;
  std::vector<const char *> fragments;
};

void PrintTo(const BadBackward &input, std::ostream *os) { *os << input.name; }

class ValidateBackward : public ::testing::TestWithParam<BadBackward> {};

TEST_P(ValidateBackward, IsRejectedWithItsField) {
  fj_attention_desc desc = validDesc();
  fj_backward_args args = validBackwardArgs(desc);
  GetParam().mutate(args);
  fj_status status = fj_validate_backward_args(&desc, &args);
  EXPECT_EQ(status, GetParam().status) << fj_last_error_message();
  for (const char *fragment : GetParam().fragments)
    EXPECT_NE(std::string(fj_last_error_message()).find(fragment), std::string::npos)
        << "\"" << fj_last_error_message() << "\" does not mention \"" << fragment << "\"";
}

const int32_t *fakeSeqlens(uintptr_t i) {
  return static_cast<const int32_t *>(fakeDevicePointer(i));
}

INSTANTIATE_TEST_SUITE_P(
    BadFields, ValidateBackward,
    ::testing::Values(
        BadBackward{"StructSizeTooSmall", [](fj_backward_args &a) { a.struct_size = 16; },
                    FJ_ERROR_INVALID_VALUE, {"args->struct_size is 16"}},
        BadBackward{"NoLse", [](fj_backward_args &a) { a.lse = nullptr; },
                    FJ_ERROR_INVALID_VALUE, {"args->lse is NULL", "log-sum-exp"}},
        BadBackward{"NoDout", [](fj_backward_args &a) { a.dout = nullptr; },
                    FJ_ERROR_INVALID_VALUE, {"args->dout is NULL"}},
        BadBackward{"NoDq", [](fj_backward_args &a) { a.dq = nullptr; },
                    FJ_ERROR_INVALID_VALUE, {"args->dq is NULL"}},
        BadBackward{"NoDk", [](fj_backward_args &a) { a.dk = nullptr; },
                    FJ_ERROR_INVALID_VALUE, {"args->dk is NULL"}},
        BadBackward{"NoDv", [](fj_backward_args &a) { a.dv = nullptr; },
                    FJ_ERROR_INVALID_VALUE, {"args->dv is NULL"}},
        BadBackward{"NoO", [](fj_backward_args &a) { a.o = nullptr; },
                    FJ_ERROR_INVALID_VALUE, {"args->o is NULL"}},
        BadBackward{"MisalignedDv",
                    [](fj_backward_args &a) { a.dv = static_cast<char *>(a.dv) + 8; },
                    FJ_ERROR_INVALID_VALUE, {"args->dv", "16-byte aligned"}},
        BadBackward{"DoutStrideNotMultipleOf8",
                    [](fj_backward_args &a) { a.dout_seq_stride = 100; },
                    FJ_ERROR_INVALID_VALUE, {"args->dout_seq_stride is 100", "multiple of 8"}},
        BadBackward{"DkNegativeStride", [](fj_backward_args &a) { a.dk_head_stride = -128; },
                    FJ_ERROR_INVALID_VALUE, {"args->dk_head_stride is -128"}},
        BadBackward{"DqZeroStride", [](fj_backward_args &a) { a.dq_seq_stride = 0; },
                    FJ_ERROR_INVALID_VALUE, {"args->dq_seq_stride is 0"}},
        BadBackward{"QStrideChecked", [](fj_backward_args &a) { a.q_seq_stride = 12; },
                    FJ_ERROR_INVALID_VALUE, {"args->q_seq_stride is 12"}},
        BadBackward{"DeterministicNotBoolean", [](fj_backward_args &a) { a.deterministic = 7; },
                    FJ_ERROR_INVALID_VALUE, {"args->deterministic is 7"}},
        BadBackward{"MisalignedWorkspace",
                    [](fj_backward_args &a) {
                      a.workspace = static_cast<char *>(fakeDevicePointer(10)) + 4;
                    },
                    FJ_ERROR_INVALID_VALUE, {"args->workspace", "16-byte aligned"}},
        BadBackward{"VarlenWithoutTotalQ",
                    [](fj_backward_args &a) {
                      a.cu_seqlens_q = fakeSeqlens(11), a.cu_seqlens_k = fakeSeqlens(12);
                    },
                    FJ_ERROR_INVALID_VALUE, {"args->total_q is 0", "cu_seqlens"}},
        BadBackward{"VarlenHalf",
                    [](fj_backward_args &a) { a.cu_seqlens_k = fakeSeqlens(12); },
                    FJ_ERROR_INVALID_VALUE, {"cu_seqlens_k is set", "cu_seqlens_q is NULL"}},
        BadBackward{"NegativeBatch", [](fj_backward_args &a) { a.batch = -1; },
                    FJ_ERROR_INVALID_VALUE, {"args->batch is -1"}}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(ValidateBackwardOk, ValidArgumentsPass) {
  fj_attention_desc desc = validDesc();
  fj_backward_args args = validBackwardArgs(desc);
  EXPECT_TRUE(succeeds(fj_validate_backward_args(&desc, &args)));
  args.deterministic = 1;
  EXPECT_TRUE(succeeds(fj_validate_backward_args(&desc, &args)));
}

TEST(ValidateBackwardOk, EmptyProblemsNeedNoPointers) {
  fj_attention_desc desc = validDesc();
  fj_backward_args args;
  fj_backward_args_init(&args);
  args.batch = 0;
  EXPECT_TRUE(succeeds(fj_validate_backward_args(&desc, &args)));
  // No queries: dk and dv are still written (zeros), so they must be valid; nothing
  // of the forward is read.
  fj_backward_args noQueries = validBackwardArgs(desc);
  noQueries.seqlen_q = 0;
  noQueries.q = noQueries.o = noQueries.dout = nullptr;
  noQueries.lse = nullptr;
  noQueries.dq = nullptr;
  EXPECT_TRUE(succeeds(fj_validate_backward_args(&desc, &noQueries)));
  noQueries.dk = nullptr;
  EXPECT_TRUE(failsWith(fj_validate_backward_args(&desc, &noQueries), FJ_ERROR_INVALID_VALUE,
                        {"args->dk is NULL"}));
}

TEST(ValidateBackwardOk, InitAndNullAreHandled) {
  fj_backward_args args;
  std::memset(&args, 0xAB, sizeof(args));
  fj_backward_args_init(&args);
  EXPECT_EQ(args.struct_size, sizeof(args));
  EXPECT_EQ(args.deterministic, 0);
  EXPECT_EQ(args.workspace, nullptr);
  fj_backward_args_init(nullptr);
  fj_attention_desc desc = validDesc();
  EXPECT_TRUE(failsWith(fj_validate_backward_args(&desc, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"args is NULL"}));
}

} // namespace

// Features (0.9): the backward arguments carry what the forward call had: ALiBi's slopes
// (required with desc.alibi, checked as fj_forward's) and the mask_mod's arguments. A
// struct of 0.2..0.8 (ending at workspace_bytes) is accepted and reads them as zero.
TEST(ValidateBackwardFeatures, AlibiSlopesAreRequiredAndChecked) {
  fj_attention_desc desc = validDesc();
  desc.backward = 1;
  desc.alibi = 1;
  desc.window = 1, desc.window_left = 32, desc.window_right = 0;
  fj_backward_args args = validBackwardArgs(desc);
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(fj_last_error_message()).find("args->alibi_slopes is NULL"),
            std::string::npos)
      << fj_last_error_message();
  args.alibi_slopes = static_cast<const float *>(fakeDevicePointer(11));
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_SUCCESS) << fj_last_error_message();
  args.alibi_batch_stride = -1;
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(fj_last_error_message()).find("alibi_batch_stride"), std::string::npos)
      << fj_last_error_message();
}

TEST(ValidateBackwardFeatures, OlderStructSizeReadsThemAsZero) {
  fj_attention_desc desc = validDesc();
  fj_backward_args args = validBackwardArgs(desc);
  args.struct_size = offsetof(fj_backward_args, alibi_slopes);  // 0.2 .. 0.8
  args.alibi_batch_stride = -1;  // past the caller's struct: never read
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_SUCCESS) << fj_last_error_message();
  desc.alibi = 1;  // then the slopes read as NULL
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(fj_last_error_message()).find("args->alibi_slopes is NULL"),
            std::string::npos)
      << fj_last_error_message();
}

// block_mask (0.10): only with a mask_mod; 0.9's size (ending before it) reads it as NULL
// whatever follows; a size ending inside it is no version's.
TEST(ValidateBackwardFeatures, BlockMaskNeedsAMaskModAndAWholeField) {
  fj_attention_desc desc = validDesc();
  fj_backward_args args = validBackwardArgs(desc);
  args.block_mask = reinterpret_cast<fj_block_mask>(fakeDevicePointer(13));
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(fj_last_error_message()).find("no mask_mod"), std::string::npos)
      << fj_last_error_message();
  const size_t sizeof09 = offsetof(fj_backward_args, block_mask);
  static_assert(offsetof(fj_backward_args, block_mask) % alignof(fj_backward_args) == 0,
                "0.9's sizeof is where block_mask starts");
  args.struct_size = sizeof09;  // the mask past the caller's struct: never read
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_SUCCESS) << fj_last_error_message();
  args.struct_size = sizeof09 + 4;
  EXPECT_EQ(fj_validate_backward_args(&desc, &args), FJ_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(fj_last_error_message()).find("block_mask"), std::string::npos)
      << fj_last_error_message();
}
