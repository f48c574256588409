// The FP8 (e4m3) KV cache of the decode kernels (C API 0.12) without a GPU:
// desc.kv_cache_dtype (what it takes, what it needs, what an older struct_size reads as),
// and the FP8 cache's rules in fj_validate_decode_args and fj_validate_kv_append_args
// (strides of whole 16-byte chunks, the descale factors' pointers and strides, the
// 0.4..0.11-sized argument structs), each refusal with its status and a message naming
// the field. The kernels themselves are tested on a device.
#include "api_fixtures.h"
#include "decode_fixtures.h"

#include "api/validate.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

using namespace flashjit;
using namespace flashjit::apitest;

namespace {

constexpr fj_status kInvalid = FJ_ERROR_INVALID_VALUE;
constexpr fj_status kNotSupported = FJ_ERROR_NOT_SUPPORTED;

// 0.7 .. 0.11's sizeof(fj_attention_desc): it ends with out_dtype and reserved_07.
constexpr size_t kDescSize011 = offsetof(fj_attention_desc, kv_cache_dtype);
// 0.4 .. 0.11's sizeof of the decode and append argument structs.
constexpr size_t kDecodeArgsSize011 = offsetof(fj_decode_args, k_descale);
constexpr size_t kAppendArgsSize011 = offsetof(fj_kv_append_args, k_descale);

const float *fakeFactors(uintptr_t i) { return static_cast<const float *>(fakeDevicePointer(i)); }

template <typename T> T *shifted(T *p, int bytes) {
  return reinterpret_cast<T *>(
      const_cast<char *>(reinterpret_cast<const char *>(p)) + bytes);
}

// validDesc() (bf16, d128, 8 query heads over 2 KV heads, causal) with decode kernels.
fj_attention_desc decodeDesc() {
  fj_attention_desc desc = validDesc();
  desc.decode = 1;
  return desc;
}

// The same over an FP8 cache.
fj_attention_desc fp8CacheDesc() {
  fj_attention_desc desc = decodeDesc();
  desc.kv_cache_dtype = FJ_DTYPE_E4M3;
  return desc;
}

// validDecodeArgs, contiguousDecodeArgs and validAppendArgs: decode_fixtures.h (at d128
// with 2 KV heads every cache stride is a multiple of 16: 128, 256, 4096).

// The same append on a contiguous cache.
fj_kv_append_args contiguousAppendArgs(const fj_attention_desc &desc) {
  return onContiguousCache(validAppendArgs(desc));
}

// Sets the descale fields of decode or append arguments.
template <typename Args>
void setDescale(Args &a, const float *k, const float *v, int64_t batchStride,
                int64_t headStride) {
  a.k_descale = k, a.v_descale = v;
  a.descale_batch_stride = batchStride, a.descale_head_stride = headStride;
}

// The status is `expected`, the message starts with "<entry>: " and names each fragment.
::testing::AssertionResult refused(fj_status status, fj_status expected, const char *entry,
                                   const std::vector<std::string> &fragments) {
  const std::string message = fj_last_error_message();
  if (status != expected)
    return ::testing::AssertionFailure()
           << "status " << fj_status_string(status) << ", expected "
           << fj_status_string(expected) << " (message: \"" << message << "\")";
  if (message.rfind(std::string(entry) + ": ", 0) != 0)
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" does not start with \"" << entry << ": \"";
  for (const std::string &fragment : fragments)
    if (message.find(fragment) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" does not mention \"" << fragment << "\"";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult descRefused(const fj_attention_desc &desc, fj_status expected,
                                       const std::vector<std::string> &fragments) {
  return refused(fj_validate_attention_desc(&desc), expected, "fj_validate_attention_desc",
                 fragments);
}

// The cache strides the two argument structs share, by name.
template <typename Args> struct CacheStride {
  const char *name;
  int64_t Args::*member;
};

template <typename Args> std::vector<CacheStride<Args>> cacheStrides() {
  return {{"k_page_stride", &Args::k_page_stride}, {"k_row_stride", &Args::k_row_stride},
          {"k_head_stride", &Args::k_head_stride}, {"v_page_stride", &Args::v_page_stride},
          {"v_row_stride", &Args::v_row_stride},   {"v_head_stride", &Args::v_head_stride}};
}

// ---- the description ------------------------------------------------------------------

TEST(Fp8CacheDesc, SixteenBitCacheValues) {
  for (int dtype : {(int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16})
    for (int decode : {0, 1})
      for (int cache : {0, dtype}) {
        fj_attention_desc desc = validDesc();
        desc.dtype = dtype, desc.decode = decode, desc.kv_cache_dtype = cache;
        EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)))
            << "dtype " << dtype << " decode " << decode << " kv_cache_dtype " << cache;
        const api::AttentionDesc c = checked(desc);
        EXPECT_EQ(c.kvCacheDtype, dtype);
        EXPECT_FALSE(c.fp8Cache());
      }
  // A description made by fj_attention_desc_init has kv_cache_dtype 0.
  fj_attention_desc desc;
  fj_attention_desc_init(&desc);
  EXPECT_EQ(desc.kv_cache_dtype, 0);
  EXPECT_EQ(desc.struct_size, sizeof(fj_attention_desc));
}

TEST(Fp8CacheDesc, E4m3CacheWithSixteenBitDtypeAndDecodePasses) {
  for (int dtype : {(int)FJ_DTYPE_BF16, (int)FJ_DTYPE_FP16})
    for (auto [d, dv] : {std::pair{128, 0}, std::pair{64, 0}, std::pair{256, 0},
                         std::pair{16, 0}, std::pair{128, 64}, std::pair{192, 128}}) {
      fj_attention_desc desc = fp8CacheDesc();
      desc.dtype = dtype, desc.head_dim = d, desc.head_dim_v = dv;
      EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)))
          << "dtype " << dtype << " d" << d << " dv" << dv;
      const api::AttentionDesc c = checked(desc);
      EXPECT_TRUE(c.fp8Cache());
      EXPECT_EQ(c.kvCacheDtype, FJ_DTYPE_E4M3);
      EXPECT_EQ(c.dtype, dtype) << "q and o keep the 16-bit dtype";
      EXPECT_EQ(c.outDtype, dtype);
      EXPECT_TRUE(c.decode);
    }
  // With the backward pass as well (the forward and backward passes are not affected).
  fj_attention_desc desc = fp8CacheDesc();
  desc.backward = 1;
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
}

TEST(Fp8CacheDesc, E4m3CacheNeedsDecode) {
  fj_attention_desc desc = fp8CacheDesc();
  desc.decode = 0;
  EXPECT_TRUE(descRefused(desc, kInvalid,
                          {"desc->kv_cache_dtype is FJ_DTYPE_E4M3", "desc->decode"}));
  desc.backward = 1;  // the backward pass alone does not read the cache either
  EXPECT_TRUE(descRefused(desc, kInvalid, {"desc->decode"}));
}

// An FP8 dtype with an FP8 cache and decode: checkFp8Desc refuses decode for FP8 first.
TEST(Fp8CacheDesc, E4m3CacheWithE4m3DtypeAndDecodeIsNotSupported) {
  fj_attention_desc desc = fp8CacheDesc();
  desc.dtype = FJ_DTYPE_E4M3;
  desc.out_dtype = FJ_DTYPE_BF16;
  EXPECT_TRUE(descRefused(desc, kNotSupported, {"desc->decode"}));
}

// An FP8 dtype with an FP8 cache and no decode: refused, though kv_cache_dtype equals the
// dtype (an FP8 description has no decode kernels, so no cache type of its own); and an
// FP8 dtype with kv_cache_dtype 0 is no FP8 cache (a decode call's strides are not held
// to its rule).
TEST(Fp8CacheDesc, E4m3CacheWithE4m3DtypeIsNotSupported) {
  fj_attention_desc desc = validDesc();
  desc.dtype = FJ_DTYPE_E4M3;
  desc.out_dtype = FJ_DTYPE_BF16;
  desc.kv_cache_dtype = FJ_DTYPE_E4M3;
  EXPECT_TRUE(descRefused(desc, kNotSupported, {"desc->kv_cache_dtype", "FP8 dtype"}));
  desc.kv_cache_dtype = 0;
  auto checked = api::checkDesc(&desc);
  ASSERT_TRUE(bool(checked)) << llvm::toString(checked.takeError());
  EXPECT_FALSE(checked->fp8Cache());
}

TEST(Fp8CacheDesc, E4m3CacheNeedsHeadDimsMultipleOf16) {
  struct Case {
    int d, dv;
    const char *named;
  };
  for (Case c : {Case{72, 0, "head_dim 72"}, Case{128, 40, "head_dim_v 40"},
                 Case{8, 0, "head_dim 8"}, Case{24, 16, "head_dim 24"},
                 Case{64, 56, "head_dim_v 56"}}) {
    fj_attention_desc desc = fp8CacheDesc();
    desc.head_dim = c.d, desc.head_dim_v = c.dv;
    EXPECT_TRUE(descRefused(desc, kNotSupported,
                            {"desc->kv_cache_dtype", c.named, "multiples of 16"}))
        << c.d << "/" << c.dv;
    // The same head dims with a 16-bit cache are fine (multiples of 8).
    desc.kv_cache_dtype = 0;
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc))) << c.d << "/" << c.dv;
  }
}

TEST(Fp8CacheDesc, OtherCacheTypesAreInvalid) {
  struct Case {
    int dtype, cache;
  };
  for (Case c : {Case{FJ_DTYPE_BF16, 7}, Case{FJ_DTYPE_BF16, FJ_DTYPE_FP16},
                 Case{FJ_DTYPE_FP16, FJ_DTYPE_BF16}, Case{FJ_DTYPE_BF16, -1},
                 Case{FJ_DTYPE_BF16, 0x7fffffff}}) {
    for (int decode : {0, 1}) {
      fj_attention_desc desc = validDesc();
      desc.dtype = c.dtype, desc.decode = decode, desc.kv_cache_dtype = c.cache;
      const std::string value = "desc->kv_cache_dtype is " + std::to_string(c.cache);
      EXPECT_TRUE(descRefused(desc, kInvalid, {value, "FJ_DTYPE_E4M3"}))
          << "dtype " << c.dtype << " kv_cache_dtype " << c.cache << " decode " << decode;
    }
  }
  // fj_validate_decode_args checks the description first, with its own entry's name.
  fj_attention_desc desc = decodeDesc();
  desc.kv_cache_dtype = 7;
  fj_decode_args args = validDecodeArgs(desc);
  EXPECT_TRUE(refused(fj_validate_decode_args(&desc, &args), kInvalid,
                      "fj_validate_decode_args", {"desc->kv_cache_dtype is 7"}));
  fj_kv_append_args append = validAppendArgs(desc);
  EXPECT_TRUE(refused(fj_validate_kv_append_args(&desc, &append), kInvalid,
                      "fj_validate_kv_append_args", {"desc->kv_cache_dtype is 7"}));
}

// 0.7 .. 0.11's description ends before kv_cache_dtype: whatever the caller's memory
// holds there (and in reserved_07, that version's tail padding) is not read, and the
// description has a 16-bit cache.
TEST(Fp8CacheDesc, DescriptionOf011SizeHasSixteenBitCache) {
  static_assert(kDescSize011 == offsetof(fj_attention_desc, reserved_07) + sizeof(int32_t),
                "0.11's description ends with reserved_07");
  for (int32_t garbage : {0x7fffffff, (int32_t)FJ_DTYPE_E4M3, 7, -1}) {
    OldDescInBiggerBuffer old(decodeDesc(), offsetof(fj_attention_desc, reserved_07),
                              kDescSize011);
    old.desc.kv_cache_dtype = garbage;
    old.desc.reserved_07 = 0x7fffffff;
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&old.desc))) << garbage;
    const api::AttentionDesc c = checked(old.desc);
    EXPECT_FALSE(c.fp8Cache()) << garbage;
    EXPECT_EQ(c.kvCacheDtype, FJ_DTYPE_BF16) << garbage;
    EXPECT_TRUE(c.decode);
    // Its decode and append calls follow a 16-bit cache's rules: strides that are
    // multiples of 8 but not of 16 pass.
    fj_decode_args args = validDecodeArgs(decodeDesc());
    args.k_row_stride = 264;
    EXPECT_TRUE(succeeds(fj_validate_decode_args(&old.desc, &args))) << garbage;
    fj_kv_append_args append = validAppendArgs(decodeDesc());
    append.v_head_stride = 136;
    EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&old.desc, &append))) << garbage;
  }
  // And 0.11's size with a 0.7-only caller that filled out_dtype: still read.
  OldDescInBiggerBuffer old(decodeDesc(), offsetof(fj_attention_desc, reserved_07),
                            kDescSize011);
  old.desc.out_dtype = FJ_DTYPE_FP16;  // not the dtype (bf16): refused, so it was read
  EXPECT_TRUE(descRefused(old.desc, kInvalid, {"desc->out_dtype is 1"}));
}

TEST(Fp8CacheDesc, ReservedFieldsOfAFullSizeDescriptionAreIgnored) {
  for (int32_t garbage : {0x7fffffff, -1, (int32_t)FJ_DTYPE_E4M3}) {
    fj_attention_desc desc = fp8CacheDesc();
    desc.reserved_07 = garbage;
    desc.reserved_12 = garbage;
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc))) << garbage;
    EXPECT_TRUE(checked(desc).fp8Cache()) << garbage;
    fj_attention_desc plain = decodeDesc();
    plain.reserved_07 = garbage;
    plain.reserved_12 = garbage;
    EXPECT_TRUE(succeeds(fj_validate_attention_desc(&plain))) << garbage;
    EXPECT_FALSE(checked(plain).fp8Cache()) << garbage;
    fj_decode_args args = validDecodeArgs(desc);
    EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &args))) << garbage;
  }
}

// ---- fj_decode_args ---------------------------------------------------------------------

TEST(Fp8CacheDecode, ValidArgumentsPass) {
  const fj_attention_desc desc = fp8CacheDesc();
  for (bool paged : {true, false}) {
    const fj_decode_args base = paged ? validDecodeArgs(desc) : contiguousDecodeArgs(desc);
    const char *layout = paged ? "paged" : "contiguous";
    fj_decode_args a = base;
    EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &a))) << layout << ", no factors";
    // One factor per tensor, one per (sequence, KV head), one per KV head.
    const int64_t hkv = desc.num_heads_kv;
    for (auto [batchStride, headStride] :
         {std::pair<int64_t, int64_t>{0, 0}, std::pair<int64_t, int64_t>{hkv, 1},
          std::pair<int64_t, int64_t>{0, 1}}) {
      a = base;
      setDescale(a, fakeFactors(11), fakeFactors(12), batchStride, headStride);
      EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &a)))
          << layout << " strides " << batchStride << "," << headStride;
    }
    // Only one of the two factors; 4-byte (not 16-byte) aligned pointers.
    a = base;
    setDescale(a, nullptr, shifted(fakeFactors(12), 4), hkv, 1);
    EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &a))) << layout;
    a = base;
    setDescale(a, shifted(fakeFactors(11), 12), nullptr, 0, 0);
    EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &a))) << layout;
    // The largest descale strides.
    a = base;
    setDescale(a, fakeFactors(11), fakeFactors(12), INT64_C(1) << 40, INT64_C(1) << 40);
    EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &a))) << layout;
  }
}

TEST(Fp8CacheDecode, ParametersCarryTheFactors) {
  const fj_attention_desc desc = fp8CacheDesc();
  auto c = api::checkDesc(&desc);
  ASSERT_TRUE((bool)c);
  fj_decode_args a = validDecodeArgs(desc);
  setDescale(a, fakeFactors(11), fakeFactors(12), 2, 1);
  FjDecodeParams p;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkDecodeArgs(*c, &a, p, noWork)));
  EXPECT_FALSE(noWork);
  EXPECT_EQ(p.k_descale, a.k_descale);
  EXPECT_EQ(p.v_descale, a.v_descale);
  EXPECT_EQ(p.descale_batch_stride, 2);
  EXPECT_EQ(p.descale_head_stride, 1);
  EXPECT_EQ(p.k_row_stride, a.k_row_stride);
}

TEST(Fp8CacheDecode, CacheStridesMustBeMultiplesOf16) {
  const fj_attention_desc fp8 = fp8CacheDesc();
  const fj_attention_desc plain = decodeDesc();
  for (bool paged : {true, false})
    for (const auto &field : cacheStrides<fj_decode_args>()) {
      fj_decode_args a = paged ? validDecodeArgs(fp8) : contiguousDecodeArgs(fp8);
      a.*field.member += 8;  // a multiple of 8, not of 16
      const std::string value =
          std::string("args->") + field.name + " is " + std::to_string(a.*field.member);
      EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid,
                          "fj_validate_decode_args",
                          {value, "multiples of 16", "kv_cache_dtype"}))
          << field.name << (paged ? " paged" : " contiguous");
      // A 16-bit cache takes the same strides.
      EXPECT_TRUE(succeeds(fj_validate_decode_args(&plain, &a)))
          << field.name << (paged ? " paged" : " contiguous");
    }
  // The strides the brief names, explicitly.
  fj_decode_args a = validDecodeArgs(fp8);
  a.k_row_stride = 264;
  EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid, "fj_validate_decode_args",
                      {"args->k_row_stride is 264", "multiples of 16"}));
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&plain, &a)));
  // A stride that is not even a multiple of 8 gets the 16-bit rule's message first.
  a = validDecodeArgs(fp8);
  a.k_row_stride = 260;
  EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid, "fj_validate_decode_args",
                      {"args->k_row_stride is 260", "multiple of 8"}));
}

TEST(Fp8CacheDecode, MisalignedFactorsAreRefused) {
  const fj_attention_desc fp8 = fp8CacheDesc();
  for (int bytes : {1, 2, 3}) {
    fj_decode_args a = validDecodeArgs(fp8);
    setDescale(a, shifted(fakeFactors(11), bytes), fakeFactors(12), 0, 0);
    EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid, "fj_validate_decode_args",
                        {"args->k_descale", "4-byte aligned"}))
        << bytes;
    a = validDecodeArgs(fp8);
    setDescale(a, fakeFactors(11), shifted(fakeFactors(12), bytes), 0, 0);
    EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid, "fj_validate_decode_args",
                        {"args->v_descale", "4-byte aligned"}))
        << bytes;
  }
  // A 16-bit cache ignores the factors.
  const fj_attention_desc plain = decodeDesc();
  fj_decode_args a = validDecodeArgs(plain);
  setDescale(a, shifted(fakeFactors(11), 2), shifted(fakeFactors(12), 1), -1, -5);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&plain, &a)));
}

TEST(Fp8CacheDecode, DescaleStridesMustBeInRange) {
  const fj_attention_desc fp8 = fp8CacheDesc();
  struct Case {
    int64_t batch, head;
    const char *named;
  };
  for (Case c : {Case{0, -1, "args->descale_head_stride is -1"},
                 Case{-2, 1, "args->descale_batch_stride is -2"},
                 Case{(INT64_C(1) << 40) + 1, 0, "args->descale_batch_stride is 1099511627777"},
                 Case{0, INT64_MIN, "args->descale_head_stride is"}}) {
    fj_decode_args a = validDecodeArgs(fp8);
    setDescale(a, fakeFactors(11), fakeFactors(12), c.batch, c.head);
    EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid, "fj_validate_decode_args",
                        {c.named, "from 0 to 2^40"}))
        << c.named;
    // Checked with or without factors (the strides are the caller's statement).
    setDescale(a, nullptr, nullptr, c.batch, c.head);
    EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid, "fj_validate_decode_args",
                        {c.named}))
        << c.named;
  }
}

// 0.4 .. 0.11's fj_decode_args ends before the factors: accepted with an FP8 cache, the
// factors read as NULL (and the strides as 0) whatever the caller's memory holds after
// it.
TEST(Fp8CacheDecode, ArgumentsOf011SizeAreAccepted) {
  static_assert(kDecodeArgsSize011 < sizeof(fj_decode_args), "0.12 appended the factors");
  const fj_attention_desc fp8 = fp8CacheDesc();
  for (bool paged : {true, false}) {
    struct {
      fj_decode_args args;
      unsigned char after[32];
    } old;
    std::memset(&old, 0x5A, sizeof(old));  // misaligned pointers, strides beyond 2^40
    const fj_decode_args valid = paged ? validDecodeArgs(fp8) : contiguousDecodeArgs(fp8);
    std::memcpy(&old.args, &valid, kDecodeArgsSize011);
    old.args.struct_size = kDecodeArgsSize011;
    EXPECT_TRUE(succeeds(fj_validate_decode_args(&fp8, &old.args)))
        << (paged ? "paged" : "contiguous");
    auto c = api::checkDesc(&fp8);
    ASSERT_TRUE((bool)c);
    FjDecodeParams p;
    bool noWork = true;
    ASSERT_FALSE(bool(api::checkDecodeArgs(*c, &old.args, p, noWork)));
    EXPECT_EQ(p.k_descale, nullptr);
    EXPECT_EQ(p.v_descale, nullptr);
    EXPECT_EQ(p.descale_batch_stride, 0);
    EXPECT_EQ(p.descale_head_stride, 0);
    // The FP8 cache's stride rule still applies to an old struct.
    old.args.v_row_stride += 8;
    EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &old.args), kInvalid,
                        "fj_validate_decode_args", {"args->v_row_stride", "multiples of 16"}));
  }
  // Below 0.4's size: refused, naming both sizes.
  fj_decode_args a = validDecodeArgs(fp8);
  a.struct_size = kDecodeArgsSize011 - 8;
  const std::string sizes = "sizeof(fj_decode_args) = " + std::to_string(sizeof(a)) +
                            " (or " + std::to_string(kDecodeArgsSize011) +
                            ", its size in flashjit 0.4)";
  EXPECT_TRUE(refused(fj_validate_decode_args(&fp8, &a), kInvalid, "fj_validate_decode_args",
                      {"args->struct_size is " + std::to_string(kDecodeArgsSize011 - 8), sizes}));
}

// ---- fj_kv_append_args ------------------------------------------------------------------

TEST(Fp8CacheAppend, ValidArgumentsPass) {
  const fj_attention_desc desc = fp8CacheDesc();
  for (bool paged : {true, false}) {
    const fj_kv_append_args base = paged ? validAppendArgs(desc) : contiguousAppendArgs(desc);
    const char *layout = paged ? "paged" : "contiguous";
    fj_kv_append_args a = base;
    EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&desc, &a))) << layout;
    const int64_t hkv = desc.num_heads_kv;
    for (auto [batchStride, headStride] :
         {std::pair<int64_t, int64_t>{0, 0}, std::pair<int64_t, int64_t>{hkv, 1}}) {
      a = base;
      setDescale(a, fakeFactors(11), fakeFactors(12), batchStride, headStride);
      EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&desc, &a)))
          << layout << " strides " << batchStride << "," << headStride;
    }
    // The new rows are 16-bit: their strides need only be multiples of 8.
    a = base;
    a.k_new_seq_stride = 264, a.k_new_batch_stride = 2 * 264;
    EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&desc, &a))) << layout;
  }
  auto c = api::checkDesc(&desc);
  ASSERT_TRUE((bool)c);
  fj_kv_append_args a = validAppendArgs(desc);
  setDescale(a, fakeFactors(11), fakeFactors(12), 2, 1);
  FjDecodeParams p;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkKvAppendArgs(*c, &a, p, noWork)));
  EXPECT_EQ(p.k_descale, a.k_descale);
  EXPECT_EQ(p.v_descale, a.v_descale);
  EXPECT_EQ(p.descale_batch_stride, 2);
  EXPECT_EQ(p.descale_head_stride, 1);
}

TEST(Fp8CacheAppend, CacheStridesMustBeMultiplesOf16) {
  const fj_attention_desc fp8 = fp8CacheDesc();
  const fj_attention_desc plain = decodeDesc();
  for (bool paged : {true, false})
    for (const auto &field : cacheStrides<fj_kv_append_args>()) {
      fj_kv_append_args a = paged ? validAppendArgs(fp8) : contiguousAppendArgs(fp8);
      a.*field.member += 8;
      const std::string value =
          std::string("args->") + field.name + " is " + std::to_string(a.*field.member);
      EXPECT_TRUE(refused(fj_validate_kv_append_args(&fp8, &a), kInvalid,
                          "fj_validate_kv_append_args",
                          {value, "multiples of 16", "kv_cache_dtype"}))
          << field.name << (paged ? " paged" : " contiguous");
      EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&plain, &a)))
          << field.name << (paged ? " paged" : " contiguous");
    }
}

TEST(Fp8CacheAppend, FactorsAreChecked) {
  const fj_attention_desc fp8 = fp8CacheDesc();
  fj_kv_append_args a = validAppendArgs(fp8);
  setDescale(a, fakeFactors(11), shifted(fakeFactors(12), 2), 0, 0);
  EXPECT_TRUE(refused(fj_validate_kv_append_args(&fp8, &a), kInvalid,
                      "fj_validate_kv_append_args", {"args->v_descale", "4-byte aligned"}));
  a = validAppendArgs(fp8);
  setDescale(a, shifted(fakeFactors(11), 2), fakeFactors(12), 0, 0);
  EXPECT_TRUE(refused(fj_validate_kv_append_args(&fp8, &a), kInvalid,
                      "fj_validate_kv_append_args", {"args->k_descale", "4-byte aligned"}));
  a = validAppendArgs(fp8);
  setDescale(a, fakeFactors(11), fakeFactors(12), 0, -1);
  EXPECT_TRUE(refused(fj_validate_kv_append_args(&fp8, &a), kInvalid,
                      "fj_validate_kv_append_args", {"args->descale_head_stride is -1"}));
  a = validAppendArgs(fp8);
  setDescale(a, fakeFactors(11), fakeFactors(12), -3, 0);
  EXPECT_TRUE(refused(fj_validate_kv_append_args(&fp8, &a), kInvalid,
                      "fj_validate_kv_append_args", {"args->descale_batch_stride is -3"}));
  // A 16-bit cache ignores them.
  const fj_attention_desc plain = decodeDesc();
  a = validAppendArgs(plain);
  setDescale(a, shifted(fakeFactors(11), 1), shifted(fakeFactors(12), 2), -1, -1);
  EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&plain, &a)));
}

TEST(Fp8CacheAppend, ArgumentsOf011SizeAreAccepted) {
  static_assert(kAppendArgsSize011 < sizeof(fj_kv_append_args), "0.12 appended the factors");
  const fj_attention_desc fp8 = fp8CacheDesc();
  struct {
    fj_kv_append_args args;
    unsigned char after[32];
  } old;
  std::memset(&old, 0x5A, sizeof(old));
  const fj_kv_append_args valid = validAppendArgs(fp8);
  std::memcpy(&old.args, &valid, kAppendArgsSize011);
  old.args.struct_size = kAppendArgsSize011;
  EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&fp8, &old.args)));
  auto c = api::checkDesc(&fp8);
  ASSERT_TRUE((bool)c);
  FjDecodeParams p;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkKvAppendArgs(*c, &old.args, p, noWork)));
  EXPECT_EQ(p.k_descale, nullptr);
  EXPECT_EQ(p.v_descale, nullptr);
  EXPECT_EQ(p.descale_batch_stride, 0);
  EXPECT_EQ(p.descale_head_stride, 0);
  old.args.k_head_stride = 136;
  EXPECT_TRUE(refused(fj_validate_kv_append_args(&fp8, &old.args), kInvalid,
                      "fj_validate_kv_append_args",
                      {"args->k_head_stride is 136", "multiples of 16"}));
  fj_kv_append_args a = validAppendArgs(fp8);
  a.struct_size = kAppendArgsSize011 - 8;
  EXPECT_TRUE(refused(fj_validate_kv_append_args(&fp8, &a), kInvalid,
                      "fj_validate_kv_append_args",
                      {"sizeof(fj_kv_append_args)", "its size in flashjit 0.4"}));
}

} // namespace
