// One handle, every length (docs/TUNING.md): desc.tune_lengths and its resolution, the
// 0.4-sized description, the launch counters' bucket packing, and the checks of
// fj_forward_dispatch_info (no GPU: the dispatch itself is in tests/gpu/api_lengths_test).
#include "api_fixtures.h"

#include "api/handles.h"
#include "api/live_handles.h"
#include "api/validate.h"

#include <cstring>
#include <string>

using namespace flashjit;
using namespace flashjit::apitest;

namespace {

TEST(ApiTuneLengths, AutoTunesTheLadderOnlyWhenNoLengthIsHinted) {
  fj_attention_desc desc = validDesc();
  EXPECT_TRUE(checked(desc).tunesLadder()) << "no hint: every length";
  desc.batch_hint = 4;
  EXPECT_TRUE(checked(desc).tunesLadder()) << "a batch alone says nothing of the lengths";
  desc.seqlen_q_hint = 4096;
  EXPECT_FALSE(checked(desc).tunesLadder()) << "a hinted length: that bucket";
  desc.tune_lengths = FJ_TUNE_LENGTHS_LADDER;
  EXPECT_TRUE(checked(desc).tunesLadder());
  desc.seqlen_q_hint = 0;
  desc.tune_lengths = FJ_TUNE_LENGTHS_HINTED;
  EXPECT_FALSE(checked(desc).tunesLadder());
}

TEST(ApiTuneLengths, HintsResolveAndSayWhatTheCallerGave) {
  fj_attention_desc desc = validDesc();
  api::AttentionDesc d = checked(desc);
  EXPECT_EQ(d.seqQHint, 1024);
  EXPECT_EQ(d.batchHint, 1) << "decode's default batch";
  EXPECT_FALSE(d.seqHinted);
  EXPECT_FALSE(d.batchHinted);
  desc.seqlen_q_hint = 300;
  desc.batch_hint = 3;
  d = checked(desc);
  EXPECT_TRUE(d.seqHinted);
  EXPECT_TRUE(d.batchHinted);
  EXPECT_EQ(d.batchHint, 3);
}

TEST(ApiTuneLengths, AnUnknownValueIsNamed) {
  fj_attention_desc desc = validDesc();
  for (int bad : {-1, 3, 1 << 30}) {
    desc.tune_lengths = bad;
    EXPECT_TRUE(failsWith(fj_validate_attention_desc(&desc), FJ_ERROR_INVALID_VALUE,
                          {"desc->tune_lengths is", "FJ_TUNE_LENGTHS_LADDER (2)"}))
        << bad;
  }
}

// 0.4's description ends with `decode` and 4 bytes of padding, where tune_lengths is
// now: garbage there (a struct filled field by field) is not a request.
TEST(ApiTuneLengths, DescriptionOf04SizeReadsAsAuto) {
  const size_t fields04 = offsetof(fj_attention_desc, decode) + sizeof(int32_t);
  const size_t sizeof04 = (fields04 + 7) / 8 * 8;
  for (size_t size : {fields04, sizeof04}) {
    fj_attention_desc valid = validDesc();
    valid.decode = 1;
    OldDescInBiggerBuffer old(valid, fields04, size);
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&old.desc))) << "size " << size;
    api::AttentionDesc d = checked(old.desc);
    EXPECT_EQ(d.tuneLengths, FJ_TUNE_LENGTHS_AUTO) << "size " << size;
    EXPECT_TRUE(d.decode) << "size " << size;
  }
  // This version's size with a value is read.
  fj_attention_desc desc = validDesc();
  desc.tune_lengths = FJ_TUNE_LENGTHS_HINTED;
  EXPECT_EQ(checked(desc).tuneLengths, FJ_TUNE_LENGTHS_HINTED);
}

TEST(ApiTuneLengths, PackedBucketsRoundTrip) {
  for (tuner::Bucket b : {tuner::Bucket{1, 1, 1}, tuner::Bucket{16384, 512, 2048},
                          tuner::Bucket{1 << 30, 1 << 30, 1 << 30}}) {
    const uint32_t packed = api::packBucket(b);
    EXPECT_NE(packed, 0u) << "0 means none";
    EXPECT_EQ(api::unpackBucket(packed), b) << b.key();
  }
}

TEST(ApiTuneLengths, DispatchInfoChecksItsArguments) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  fj_dispatch_info info;
  info.struct_size = sizeof(info);
  EXPECT_TRUE(failsWith(fj_forward_dispatch_info(nullptr, &args, &info), FJ_ERROR_INVALID_VALUE,
                        {"kernel is NULL"}));

  auto *context = new fj_context_s();
  api::LiveHandles::get().add(context);
  auto *kernel = new fj_kernel_s();
  kernel->desc = checked(desc);
  api::adoptKernel(*context, kernel);
  EXPECT_TRUE(failsWith(fj_forward_dispatch_info(kernel, &args, nullptr),
                        FJ_ERROR_INVALID_VALUE, {"info is NULL"}));
  fj_forward_args bad = args;
  bad.seqlen_q = -3;
  EXPECT_TRUE(failsWith(fj_forward_dispatch_info(kernel, &bad, &info), FJ_ERROR_INVALID_VALUE,
                        {"seqlen_q"}));
  fj_dispatch_info small;
  small.struct_size = 4;
  EXPECT_TRUE(failsWith(fj_forward_dispatch_info(kernel, &args, &small),
                        FJ_ERROR_INVALID_VALUE, {"struct_size is 4"}));

  // No work (batch 0): nothing would launch, and the call's bucket is still said.
  fj_forward_args empty = args;
  empty.batch = 0;
  ASSERT_TRUE(succeeds(fj_forward_dispatch_info(kernel, &empty, &info)));
  EXPECT_EQ(info.variant, -1);
  EXPECT_EQ(info.tuned, 0);
  EXPECT_EQ(std::string(info.bucket), "q128.k256.bh1");

  // Counters of a handle that never launched.
  struct fj_kernel_info kinfo;
  kinfo.struct_size = sizeof(kinfo);
  kernel->variants.emplace_back();
  kernel->buckets.push_back({});
  kernel->bucketKeys.push_back("q1.k1.bh1");
  kernel->tileKeys.push_back("bm64.bn64.w4.s2");
  ASSERT_TRUE(succeeds(fj_kernel_info(kernel, &kinfo)));
  EXPECT_EQ(kinfo.forward_calls, 0);
  EXPECT_EQ(kinfo.forward_calls_untuned, 0);
  EXPECT_EQ(std::string(kinfo.last_untuned_bucket), "");
  // A 0.4 caller's fj_variant_info (no `calls`) is still served.
  struct {
    fj_variant_info info;
    unsigned char after[16];
  } old;
  std::memset(&old, 0x5A, sizeof(old));
  old.info.struct_size = offsetof(fj_variant_info, calls);
  ASSERT_TRUE(succeeds(fj_kernel_variant_info(kernel, 0, &old.info)));
  EXPECT_EQ(old.after[0], 0x5A) << "nothing written past the caller's struct";
  // A 0.7 caller's (no `num_splits`): `calls` written, `num_splits` left as it was.
  std::memset(&old, 0x5A, sizeof(old));
  old.info.struct_size = offsetof(fj_variant_info, num_splits);
  ASSERT_TRUE(succeeds(fj_kernel_variant_info(kernel, 0, &old.info)));
  EXPECT_EQ(old.info.calls, 0);
  unsigned char splitsBytes[sizeof(old.info.num_splits)];
  std::memcpy(splitsBytes, &old.info.num_splits, sizeof(splitsBytes));
  for (unsigned char byte : splitsBytes)
    EXPECT_EQ(byte, 0x5A) << "num_splits is past a 0.7 caller's struct";
  fj_variant_info now;
  now.struct_size = sizeof(now);
  ASSERT_TRUE(succeeds(fj_kernel_variant_info(kernel, 0, &now)));
  EXPECT_EQ(now.num_splits, 0) << "not a decode variant";
  EXPECT_EQ(fj_kernel_release(kernel), FJ_SUCCESS);
  EXPECT_EQ(fj_context_destroy(context), FJ_SUCCESS);
}

} // namespace
