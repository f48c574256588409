// The attention features of 0.3 through the C API, without a GPU: a description with
// them is accepted and becomes a spec that carries them; each bad value is rejected with
// its status and a message naming the field; descriptions and arguments of an older
// size (ending before the new fields) still read as the plain kernel.
#include "api_fixtures.h"

#include "api/handles.h"
#include "api/validate.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace flashjit;
using namespace flashjit::apitest;

namespace {

const char *kScoreMod = "return score + args.scalar[0] * (q_idx - kv_idx);";
const char *kMaskMod = "return (kv_idx & 1) == 0;";

fj_attention_desc featureDesc() {
  fj_attention_desc desc = validDesc();  // bf16, d128, causal, 8 / 2 heads
  desc.window = 1;
  desc.window_left = 256;
  desc.window_right = 0;
  desc.softcap = 30.0f;
  desc.alibi = 1;
  desc.score_mod = kScoreMod;
  desc.mask_mod = kMaskMod;
  return desc;
}

fj_forward_args featureArgs(const fj_attention_desc &desc) {
  fj_forward_args args = validArgs(desc);
  args.alibi_slopes = static_cast<const float *>(fakeDevicePointer(9));
  args.alibi_batch_stride = desc.num_heads_q;
  return args;
}

TEST(ApiFeatures, GoodDescriptionIsAcceptedAndRead) {
  fj_attention_desc desc = featureDesc();
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  fj_forward_args args = featureArgs(desc);
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  const generator::Features f = checked(desc).features;
  EXPECT_TRUE(f.window);
  EXPECT_EQ(f.windowLeft, 256);
  EXPECT_EQ(f.windowRight, 0);
  EXPECT_EQ(f.softcap, 30.0f);
  EXPECT_TRUE(f.alibi);
  EXPECT_EQ(f.scoreMod, kScoreMod);
  EXPECT_EQ(f.maskMod, kMaskMod);
  EXPECT_FALSE(f.hasTuningArgs);
}

TEST(ApiFeatures, EachFeatureAloneIsAccepted) {
  std::vector<std::function<void(fj_attention_desc &)>> alone = {
      [](fj_attention_desc &d) { d.window = 1, d.window_left = -1, d.window_right = 0; },
      [](fj_attention_desc &d) { d.window = 1, d.window_left = 0, d.window_right = -1; },
      [](fj_attention_desc &d) { d.window = 7, d.window_left = 0, d.window_right = 0; },
      [](fj_attention_desc &d) { d.softcap = 50.0f; },
      [](fj_attention_desc &d) { d.alibi = 1; },
      [](fj_attention_desc &d) { d.score_mod = kScoreMod; },
      [](fj_attention_desc &d) { d.mask_mod = kMaskMod; },
  };
  for (size_t i = 0; i < alone.size(); ++i) {
    fj_attention_desc desc = validDesc();
    alone[i](desc);
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc))) << "case " << i;
    EXPECT_TRUE(checked(desc).features.any()) << "case " << i;
  }
}

TEST(ApiFeatures, EmptyUserCodeIsNone) {
  fj_attention_desc desc = validDesc();
  desc.score_mod = "";
  desc.mask_mod = "";
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  EXPECT_FALSE(checked(desc).features.any());
}

TEST(ApiFeatures, UserCodeUpToTheLimitIsCopied) {
  std::string code(generator::kMaxUserCodeBytes, ' ');
  code.replace(0, 13, "return score;");
  fj_attention_desc desc = validDesc();
  desc.score_mod = code.c_str();
  const generator::Features f = checked(desc).features;
  EXPECT_EQ(f.scoreMod, code);
  EXPECT_NE(f.scoreMod.data(), code.data());  // a copy: the caller's text is not retained
}

TEST(ApiFeatures, TuningModArgsAreCopied) {
  fj_mod_args tuning{};
  tuning.tensor[0] = fakeDevicePointer(20);
  tuning.scalar[1] = 0.5f;
  tuning.integer[3] = 42;
  fj_attention_desc desc = validDesc();
  desc.score_mod = "return score * args.scalar[1] + *(const float *)args.tensor[0];";
  desc.tuning_mod_args = &tuning;
  const generator::Features f = checked(desc).features;
  ASSERT_TRUE(f.hasTuningArgs);
  EXPECT_EQ(f.tuningArgs.tensor[0], tuning.tensor[0]);
  EXPECT_EQ(f.tuningArgs.scalar[1], 0.5f);
  EXPECT_EQ(f.tuningArgs.integer[3], 42);
}

// The shape the tuning args' tensors are sized for is the hinted one, unset hints as
// docs/API.md resolves them (1024 queries, as many keys, 1 sequence).
TEST(ApiFeatures, TuningShapeIsTheHintedShape) {
  fj_attention_desc desc = validDesc();
  desc.num_heads_q = 6, desc.num_heads_kv = 2;
  desc.seqlen_q_hint = 300, desc.seqlen_k_hint = 200, desc.batch_hint = 3;
  generator::Features::TuningShape s = checked(desc).features.tuningShape;
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.headsQ, 6);
  EXPECT_EQ(s.headsKV, 2);
  EXPECT_EQ(s.seqQ, 300);
  EXPECT_EQ(s.seqK, 200);
  desc.seqlen_q_hint = desc.seqlen_k_hint = desc.batch_hint = 0;
  s = checked(desc).features.tuningShape;
  EXPECT_EQ(s.batch, 1);
  EXPECT_EQ(s.seqQ, 1024);
  EXPECT_EQ(s.seqK, 1024);
}

// What fj_forward launches with: the slopes and the user code's args, as given.
TEST(ApiFeatures, ForwardParamsCarryTheSlopesAndModArgs) {
  fj_attention_desc desc = featureDesc();
  fj_forward_args args = featureArgs(desc);
  args.mod_args.tensor[2] = fakeDevicePointer(21);
  args.mod_args.scalar[0] = -1.25f;
  args.mod_args.integer[1] = 7;
  FjForwardParams params;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork)));
  EXPECT_FALSE(noWork);
  EXPECT_EQ(params.alibi_slopes, args.alibi_slopes);
  EXPECT_EQ(params.alibi_batch_stride, desc.num_heads_q);
  EXPECT_EQ(params.mod_args.tensor[2], args.mod_args.tensor[2]);
  EXPECT_EQ(params.mod_args.scalar[0], -1.25f);
  EXPECT_EQ(params.mod_args.integer[1], 7);
}

TEST(ApiFeatures, SlopesAreIgnoredWithoutAlibi) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  args.alibi_slopes = reinterpret_cast<const float *>(3);  // misaligned, but unread
  args.alibi_batch_stride = -5;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  FjForwardParams params;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork)));
  EXPECT_EQ(params.alibi_slopes, nullptr);
  EXPECT_EQ(params.alibi_batch_stride, 0);
}

TEST(ApiFeatures, ShareOfSlopesAcrossTheBatch) {
  fj_attention_desc desc = validDesc();
  desc.alibi = 1;
  fj_forward_args args = featureArgs(desc);
  args.alibi_batch_stride = 0;  // [num_heads_q], one slope per head for every sequence
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

TEST(ApiFeatures, NoWorkNeedsNoSlopes) {
  fj_attention_desc desc = validDesc();
  desc.alibi = 1;
  fj_forward_args args;
  fj_forward_args_init(&args);
  args.batch = 0;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
}

// The spec fj_kernel_get compiles carries the features; its key names them.
TEST(ApiFeatures, SpecsCarryTheFeatures) {
  fj_attention_desc desc = validDesc();
  desc.window = 1, desc.window_left = 256, desc.window_right = -1;
  desc.softcap = 30.0f;
  desc.alibi = 1;
  api::AttentionDesc d = checked(desc);
  auto specs = api::kernelSpecsFor(d, "sm_90a", *tuner::familyPlan("sm_90a"));
  ASSERT_EQ(specs.size(), 2u);
  for (const generator::KernelSpec &spec : specs) {
    EXPECT_TRUE(spec.features == d.features) << spec.key();
    EXPECT_NE(spec.key().find(".win256_inf"), std::string::npos) << spec.key();
    EXPECT_NE(spec.key().find(".cap30"), std::string::npos) << spec.key();
    EXPECT_NE(spec.key().find(".alibi"), std::string::npos) << spec.key();
    EXPECT_FALSE(bool(generator::validateSpec(spec))) << spec.key();
  }
  fj_attention_desc plain = validDesc();
  auto plainSpecs = api::kernelSpecsFor(checked(plain), "sm_80", *tuner::familyPlan("sm_80"));
  ASSERT_EQ(plainSpecs.size(), 1u);
  EXPECT_EQ(plainSpecs[0].key(), "fwd_mma.bf16.d128.dv128.causal.sm80");
}

// ---- rejections ----------------------------------------------------------------------

std::vector<BadInput> badFeatures() {
  using D = fj_attention_desc;
  using A = fj_forward_args;
  static const std::string tooLong(generator::kMaxUserCodeBytes + 1, ' ');
  return {
      {"WindowBothUnbounded", [](D &d, A &) { d.window = 1, d.window_left = d.window_right = -1; },
       FJ_ERROR_INVALID_VALUE, {"desc->window_left and desc->window_right are both -1"}},
      {"WindowLeftNegative", [](D &d, A &) { d.window = 1, d.window_left = -5; },
       FJ_ERROR_INVALID_VALUE, {"desc->window_left is -5", "-1 for unbounded"}},
      {"WindowRightNegative", [](D &d, A &) { d.window = 1, d.window_right = -2; },
       FJ_ERROR_INVALID_VALUE, {"desc->window_right is -2"}},
      {"WindowSidesWithoutWindow", [](D &d, A &) { d.window_left = 128; },
       FJ_ERROR_INVALID_VALUE, {"desc->window_left is 128 but desc->window is 0"}},
      {"SoftcapNaN", [](D &d, A &) { d.softcap = std::numeric_limits<float>::quiet_NaN(); },
       FJ_ERROR_INVALID_VALUE, {"desc->softcap is nan", "finite and >= 0"}},
      {"SoftcapInfinite", [](D &d, A &) { d.softcap = std::numeric_limits<float>::infinity(); },
       FJ_ERROR_INVALID_VALUE, {"desc->softcap is inf"}},
      {"SoftcapNegative", [](D &d, A &) { d.softcap = -30.0f; }, FJ_ERROR_INVALID_VALUE,
       {"desc->softcap is -30"}},
      {"ScoreModTooLong", [](D &d, A &) { d.score_mod = tooLong.c_str(); },
       FJ_ERROR_INVALID_VALUE, {"desc->score_mod is longer than 65536 bytes"}},
      {"MaskModTooLong", [](D &d, A &) { d.mask_mod = tooLong.c_str(); },
       FJ_ERROR_INVALID_VALUE, {"desc->mask_mod is longer than 65536 bytes"}},
      {"BackwardWithScoreMod", [](D &d, A &) { d.backward = 1, d.score_mod = kScoreMod; },
       FJ_ERROR_NOT_SUPPORTED,
       {"desc->backward is set with a score_mod", "cannot differentiate"}},
      {"AlibiWithoutSlopes", [](D &d, A &) { d.alibi = 1; }, FJ_ERROR_INVALID_VALUE,
       {"args->alibi_slopes is NULL", "desc->alibi"}},
      {"AlibiSlopesMisaligned",
       [](D &d, A &a) {
         d.alibi = 1;
         a.alibi_slopes = reinterpret_cast<const float *>(
             static_cast<const char *>(fakeDevicePointer(9)) + 2);
       },
       FJ_ERROR_INVALID_VALUE, {"args->alibi_slopes", "not 4-byte aligned"}},
      {"AlibiBatchStrideNegative",
       [](D &d, A &a) {
         d.alibi = 1;
         a.alibi_slopes = static_cast<const float *>(fakeDevicePointer(9));
         a.alibi_batch_stride = -8;
       },
       FJ_ERROR_INVALID_VALUE, {"args->alibi_batch_stride is -8", ">= 0"}},
      {"AlibiBatchStrideOverflows",
       [](D &d, A &a) {
         d.alibi = 1;
         a.alibi_slopes = static_cast<const float *>(fakeDevicePointer(9));
         a.alibi_batch_stride = INT64_C(1) << 62;
       },
       FJ_ERROR_INVALID_VALUE, {"args->alibi_batch_stride is 4611686018427387904", "2^61"}},
      {"AlibiScaleTooSmall",  // the kernels divide the slopes by it
       [](D &d, A &a) {
         d.alibi = 1;
         d.softmax_scale = 1e-20f;
         a.alibi_slopes = static_cast<const float *>(fakeDevicePointer(9));
       },
       FJ_ERROR_INVALID_VALUE, {"desc->softmax_scale is", "with ALiBi", "2^-60"}},
  };
}

class BadFeatureTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadFeatureTest, ReturnsStatusAndNamesTheField) { expectRejected(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Api, BadFeatureTest, ::testing::ValuesIn(badFeatures()),
                         [](const ::testing::TestParamInfo<BadInput> &info) {
                           return std::string(info.param.name);
                         });

// fj_backward can never run for a description with features: its arguments are refused.
// The backward pass takes a window, softcap, ALiBi and mask_mod (0.9), not a score_mod.
TEST(ApiFeatures, BackwardWithFeatures) {
  fj_attention_desc desc = validDesc();
  desc.backward = 1;
  desc.window = 1, desc.window_left = 64, desc.window_right = 0;
  desc.softcap = 30.0f;
  desc.mask_mod = "return true;";
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  fj_backward_args args;
  fj_backward_args_init(&args);
  EXPECT_TRUE(succeeds(fj_validate_backward_args(&desc, &args)));  // batch 0: no work
  desc.score_mod = kScoreMod;
  EXPECT_TRUE(failsWith(fj_validate_backward_args(&desc, &args), FJ_ERROR_NOT_SUPPORTED,
                        {"desc->backward is set with a score_mod"}));
}

// ---- older struct sizes ----------------------------------------------------------------

// 0.2's description: sizeof 56 in its header, `backward` then 4 bytes of padding where
// `window` now is. A caller that filled it field by field leaves garbage there; the
// memory after it is the caller's too. Neither is a request: the kernel is the plain one.
TEST(ApiFeatures, DescriptionOf02SizeReadsAsPlain) {
  const size_t fields02 = offsetof(fj_attention_desc, backward) + sizeof(int32_t);
  const size_t sizeof02 = (fields02 + 7) / 8 * 8;
  for (size_t size : {offsetof(fj_attention_desc, backward), fields02, sizeof02}) {
    fj_attention_desc valid = validDesc();
    valid.backward = 1;
    OldDescInBiggerBuffer old(valid, std::min(size, fields02), size);
    old.desc.score_mod = reinterpret_cast<const char *>(8);  // must never be read
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&old.desc))) << "size " << size;
    api::AttentionDesc d = checked(old.desc);
    EXPECT_FALSE(d.features.any()) << "size " << size;
    EXPECT_EQ(d.backward, size >= fields02) << "size " << size;
  }
}

// 0.2's forward arguments end at total_k: accepted, no slopes, no mod args.
TEST(ApiFeatures, ForwardArgumentsOf02SizeAreAccepted) {
  fj_attention_desc desc = validDesc();
  struct OldArgsInBiggerBuffer {
    fj_forward_args args;
    unsigned char garbage[32];
  } old;
  std::memset(&old, 0x5A, sizeof(old));
  fj_forward_args valid = validArgs(desc);
  std::memcpy(&old.args, &valid, offsetof(fj_forward_args, alibi_slopes));
  old.args.struct_size = offsetof(fj_forward_args, alibi_slopes);
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &old.args)));
  FjForwardParams params;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &old.args, params, noWork)));
  EXPECT_EQ(params.mod_args.tensor[0], nullptr);
  EXPECT_EQ(params.mod_args.integer[0], 0);
  // ... but ALiBi needs its slopes, which such a caller cannot give.
  desc.alibi = 1;
  EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &old.args), FJ_ERROR_INVALID_VALUE,
                        {"args->alibi_slopes is NULL"}));
  old.args.struct_size = offsetof(fj_forward_args, alibi_slopes) - 8;
  EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &old.args), FJ_ERROR_INVALID_VALUE,
                        {"args->struct_size", "its size in flashjit 0.2"}));
}

} // namespace

// A struct_size that ends inside one of the description's host pointers is no version's
// size: it would hand the validator an address made of the caller's low bytes and zeros
// (found by fuzz_api_args: 77 cut score_mod). Refused, naming the pointer; the sizes
// around each pointer stay accepted.
TEST(ApiFeatures, StructSizeInsideAHostPointerIsRefused) {
  struct Pointer {
    size_t offset;
    const char *name;
  };
  for (Pointer p : {Pointer{offsetof(fj_attention_desc, score_mod), "score_mod"},
                    Pointer{offsetof(fj_attention_desc, mask_mod), "mask_mod"},
                    Pointer{offsetof(fj_attention_desc, tuning_mod_args), "tuning_mod_args"}}) {
    for (size_t cut = p.offset + 1; cut < p.offset + sizeof(void *); ++cut) {
      fj_attention_desc desc = validDesc();
      desc.score_mod = desc.mask_mod = "return score;";  // heap-like bytes in every pointer
      desc.struct_size = cut;
      const std::string size = "struct_size is " + std::to_string(cut) + ":";
      EXPECT_TRUE(failsWith(fj_validate_attention_desc(&desc), FJ_ERROR_INVALID_VALUE,
                            {size.c_str(), p.name}))
          << "size " << cut;
    }
    fj_attention_desc whole = validDesc();
    whole.struct_size = p.offset;  // ends before the pointer: it reads as NULL
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&whole))) << "size " << p.offset;
  }
}
