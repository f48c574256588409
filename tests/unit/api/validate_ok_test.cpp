// What the validators must accept (no-ops, strides of size-1 dimensions, other
// layouts, newer struct versions), and the status / message machinery itself.
#include "api_fixtures.h"

#include <cstring>
#include <thread>
#include <vector>

using namespace flashjit::apitest;

namespace {

TEST(ApiValidate, BaselineIsValid) {
  fj_attention_desc desc = validDesc();
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  fj_forward_args args = validArgs(desc);
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

TEST(ApiValidate, NullStructs) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  EXPECT_TRUE(failsWith(fj_validate_attention_desc(nullptr), FJ_ERROR_INVALID_VALUE,
                        {"desc is NULL"}));
  EXPECT_TRUE(failsWith(fj_validate_forward_args(nullptr, &args), FJ_ERROR_INVALID_VALUE,
                        {"desc is NULL"}));
  EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"args is NULL"}));
}

TEST(ApiValidate, ZeroSizesAreNoOpsWithoutPointers) {
  fj_attention_desc desc = validDesc();
  for (int which = 0; which < 2; ++which) {
    fj_forward_args args;
    fj_forward_args_init(&args);  // every pointer NULL, every stride 0
    args.batch = which == 0 ? 0 : 3;
    args.seqlen_q = which == 0 ? 100 : 0;
    args.seqlen_k = 50;
    EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "case " << which;
  }
}

TEST(ApiValidate, NoKeysNeedsNoKeyTensors) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  args.seqlen_k = 0;
  args.k = args.v = nullptr;
  args.k_seq_stride = args.v_seq_stride = 0;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

TEST(ApiValidate, StridesOfSizeOneDimensionsAreFree) {
  fj_attention_desc desc = validDesc();
  desc.num_heads_q = 4;
  desc.num_heads_kv = 1;  // MQA: k and v have one head
  fj_forward_args args = validArgs(desc);
  args.batch = 1;
  args.seqlen_q = 1;  // decoding: one query row
  args.q_batch_stride = args.k_batch_stride = args.v_batch_stride = args.o_batch_stride = 0;
  args.q_seq_stride = args.o_seq_stride = 0;
  args.k_head_stride = args.v_head_stride = 0;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  args.k_head_stride = 3;  // never multiplied by a non-zero index: not checked
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

TEST(ApiValidate, HeadMajorLayoutAndPadding) {
  fj_attention_desc desc = validDesc();
  desc.head_dim = 72;  // not a power of two
  desc.head_dim_v = 40;
  fj_forward_args args = validArgs(desc);
  // BHSD ([batch, heads, seq, dim]) with rows padded to 80 elements.
  args.q_seq_stride = 80, args.q_head_stride = 80 * args.seqlen_q;
  args.q_batch_stride = args.q_head_stride * desc.num_heads_q;
  args.k_seq_stride = 80, args.k_head_stride = 80 * args.seqlen_k;
  args.k_batch_stride = args.k_head_stride * desc.num_heads_kv;
  args.v_seq_stride = 40, args.v_head_stride = 40 * args.seqlen_k;
  args.v_batch_stride = args.v_head_stride * desc.num_heads_kv;
  args.o_seq_stride = 40, args.o_head_stride = 40 * args.seqlen_q;
  args.o_batch_stride = args.o_head_stride * desc.num_heads_q;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

TEST(ApiValidate, VarlenIgnoresBatchStrides) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  args.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
  args.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
  args.q_batch_stride = args.k_batch_stride = -3;  // unused with cu_seqlens
  args.lse = (float *)fakeDevicePointer(8);
  args.total_q = 200;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  args.lse = nullptr;
  args.total_q = 0;  // needed only for lse
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

TEST(ApiValidate, NewerStructVersionsWithUnusedFieldsAreAccepted) {
  struct NewerDesc {
    fj_attention_desc known;
    int32_t futureField[4];
  } newer;
  std::memset(&newer, 0, sizeof(newer));
  newer.known = validDesc();
  newer.known.struct_size = sizeof(newer);
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&newer.known)));
  newer.futureField[2] = 1;  // a request this version would ignore
  EXPECT_TRUE(failsWith(fj_validate_attention_desc(&newer.known), FJ_ERROR_NOT_SUPPORTED,
                        {"desc has struct_size", "does not know"}));
}

// A caller built against 0.1's header passes a description without `backward`: it is
// accepted and the missing field reads as 0, whatever lies after the struct in memory.
TEST(ApiValidate, OlderDescriptionWithoutBackwardIsAccepted) {
  struct OldDescInBiggerBuffer {
    fj_attention_desc desc;
    int32_t garbage[4];
  } old;
  std::memset(&old, 0x5A, sizeof(old));
  fj_attention_desc valid = validDesc();
  std::memcpy(&old.desc, &valid, offsetof(fj_attention_desc, backward));
  old.desc.struct_size = offsetof(fj_attention_desc, backward);
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&old.desc)));
  fj_forward_args args = validArgs(valid);
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&old.desc, &args)));
}

TEST(ApiValidate, InitFunctionsSetStructSize) {
  fj_context_options options;
  std::memset(&options, 0xAB, sizeof(options));
  fj_context_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(options));
  EXPECT_EQ(options.tune_mode, FJ_TUNE_AUTO);
  EXPECT_EQ(options.user_cache_path, nullptr);
  fj_attention_desc desc;
  std::memset(&desc, 0xAB, sizeof(desc));
  fj_attention_desc_init(&desc);
  EXPECT_EQ(desc.struct_size, sizeof(desc));
  EXPECT_EQ(desc.head_dim, 0);
  // An initialised description without a dtype is caught, not taken as fp16.
  EXPECT_TRUE(failsWith(fj_validate_attention_desc(&desc), FJ_ERROR_INVALID_VALUE,
                        {"desc->dtype is 0"}));
  fj_context_options_init(nullptr);  // harmless
  fj_attention_desc_init(nullptr);
  fj_forward_args_init(nullptr);
}

TEST(ApiStatus, EveryStatusHasItsName) {
  const std::pair<fj_status, const char *> names[] = {
      {FJ_SUCCESS, "FJ_SUCCESS"},
      {FJ_ERROR_INVALID_VALUE, "FJ_ERROR_INVALID_VALUE"},
      {FJ_ERROR_NOT_SUPPORTED, "FJ_ERROR_NOT_SUPPORTED"},
      {FJ_ERROR_NO_DEVICE, "FJ_ERROR_NO_DEVICE"},
      {FJ_ERROR_COMPILE, "FJ_ERROR_COMPILE"},
      {FJ_ERROR_CUDA, "FJ_ERROR_CUDA"},
      {FJ_ERROR_CACHE, "FJ_ERROR_CACHE"},
      {FJ_ERROR_NOT_FOUND, "FJ_ERROR_NOT_FOUND"},
      {FJ_ERROR_OUT_OF_MEMORY, "FJ_ERROR_OUT_OF_MEMORY"},
      {FJ_ERROR_INTERNAL, "FJ_ERROR_INTERNAL"},
  };
  for (auto [status, name] : names)
    EXPECT_EQ(std::string(fj_status_string(status)).rfind(name, 0), 0u) << name;
  EXPECT_STREQ(fj_status_string((fj_status)1234), "FJ_UNKNOWN_STATUS");
}

TEST(ApiStatus, VersionMatchesTheHeader) {
  std::string expected = std::to_string(FLASHJIT_VERSION_MAJOR) + "." +
                         std::to_string(FLASHJIT_VERSION_MINOR) + "." +
                         std::to_string(FLASHJIT_VERSION_PATCH);
  EXPECT_EQ(expected, fj_version());
}

TEST(ApiStatus, LastErrorIsPerThreadAndKeptBySuccess) {
  fj_attention_desc desc = validDesc();
  desc.head_dim = 100;
  ASSERT_EQ(fj_validate_attention_desc(&desc), FJ_ERROR_NOT_SUPPORTED);
  std::string mine = fj_last_error_message();
  ASSERT_NE(mine.find("desc->head_dim is 100"), std::string::npos) << mine;

  std::string otherBefore, otherAfter;
  std::thread other([&] {
    otherBefore = fj_last_error_message();
    fj_attention_desc bad = validDesc();
    bad.num_heads_kv = 0;
    (void)fj_validate_attention_desc(&bad);
    otherAfter = fj_last_error_message();
  });
  other.join();
  EXPECT_EQ(otherBefore, "");
  EXPECT_NE(otherAfter.find("desc->num_heads_kv is 0"), std::string::npos) << otherAfter;
  EXPECT_EQ(mine, fj_last_error_message()) << "another thread's failure leaked here";

  desc.head_dim = 64;
  ASSERT_EQ(fj_validate_attention_desc(&desc), FJ_SUCCESS);
  EXPECT_EQ(mine, fj_last_error_message()) << "a success must not change the message";
}

TEST(ApiStatus, ConcurrentValidationIsIndependent) {
  // Many threads failing differently at once: each sees its own message.
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 2000; ++i) {
        fj_attention_desc desc = validDesc();
        desc.head_dim = 8 * (t + 1) + 1;  // unique per thread, never valid
        (void)fj_validate_attention_desc(&desc);
        std::string expected = "desc->head_dim is " + std::to_string(desc.head_dim);
        if (std::string(fj_last_error_message()).find(expected) == std::string::npos)
          ++wrong[t];
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int t = 0; t < 8; ++t)
    EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

} // namespace
