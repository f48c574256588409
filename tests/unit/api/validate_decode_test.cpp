// fj_validate_decode_args and fj_validate_kv_append_args (what fj_decode and fj_kv_append
// check before they launch): valid arguments pass, every bad field gets its status and a
// message naming it; and, on handles built without a device, the decode entry points'
// order of checks, the handle's variant ranges and what fj_kernel_info says of them.
#include "api_fixtures.h"
#include "decode_fixtures.h"

#include "api/handles.h"
#include "api/live_handles.h"

#include <cstring>
#include <functional>
#include <vector>

using namespace flashjit;
using namespace flashjit::apitest;

namespace {

template <typename Args> struct Bad {
  const char *name;
  std::function<void(fj_attention_desc &, Args &)> mutate;
  fj_status status;
  std::vector<const char *> fragments;
};
using BadDecode = Bad<fj_decode_args>;
using BadAppend = Bad<fj_kv_append_args>;

template <typename Args> void PrintTo(const Bad<Args> &input, std::ostream *os) {
  *os << input.name;
}

void expectMessage(fj_status status, fj_status expected, const char *entry,
                   const std::vector<const char *> &fragments) {
  std::string message = fj_last_error_message();
  EXPECT_EQ(status, expected) << fj_status_string(status) << ": " << message;
  for (const char *fragment : fragments)
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message \"" << message << "\" does not mention \"" << fragment << "\"";
  EXPECT_EQ(message.rfind(std::string(entry) + ": ", 0), 0u) << message;
}

class ValidateDecode : public ::testing::TestWithParam<BadDecode> {};

TEST_P(ValidateDecode, IsRejectedWithItsField) {
  fj_attention_desc desc = validDesc();
  fj_decode_args args = validDecodeArgs(desc);
  GetParam().mutate(desc, args);
  expectMessage(fj_validate_decode_args(&desc, &args), GetParam().status,
                "fj_validate_decode_args", GetParam().fragments);
}

using D = fj_attention_desc;
using A = fj_decode_args;
constexpr fj_status kInvalid = FJ_ERROR_INVALID_VALUE;
constexpr fj_status kNotSupported = FJ_ERROR_NOT_SUPPORTED;

char *shifted(const void *p, int bytes) {
  return const_cast<char *>(static_cast<const char *>(p)) + bytes;
}

INSTANTIATE_TEST_SUITE_P(
    BadFields, ValidateDecode,
    ::testing::Values(
        BadDecode{"StructSizeTooSmall", [](D &, A &a) { a.struct_size = 16; }, kInvalid,
                  {"args->struct_size is 16", "sizeof(fj_decode_args)"}},
        BadDecode{"StructSizeGarbage", [](D &, A &a) { a.struct_size = 1u << 30; }, kInvalid,
                  {"args->struct_size is 1073741824"}},
        // Pointers.
        BadDecode{"NoQ", [](D &, A &a) { a.q = nullptr; }, kInvalid, {"args->q is NULL"}},
        BadDecode{"NoKCache", [](D &, A &a) { a.k_cache = nullptr; }, kInvalid,
                  {"args->k_cache is NULL"}},
        BadDecode{"NoVCache", [](D &, A &a) { a.v_cache = nullptr; }, kInvalid,
                  {"args->v_cache is NULL"}},
        BadDecode{"NoO", [](D &, A &a) { a.o = nullptr; }, kInvalid, {"args->o is NULL"}},
        BadDecode{"MisalignedQ", [](D &, A &a) { a.q = shifted(a.q, 8); }, kInvalid,
                  {"args->q", "16-byte aligned"}},
        BadDecode{"MisalignedKCache", [](D &, A &a) { a.k_cache = shifted(a.k_cache, 2); },
                  kInvalid, {"args->k_cache", "16-byte aligned"}},
        BadDecode{"MisalignedVCache", [](D &, A &a) { a.v_cache = shifted(a.v_cache, 4); },
                  kInvalid, {"args->v_cache", "16-byte aligned"}},
        BadDecode{"MisalignedO", [](D &, A &a) { a.o = shifted(a.o, 8); }, kInvalid,
                  {"args->o", "16-byte aligned"}},
        BadDecode{"MisalignedLse",
                  [](D &, A &a) { a.lse = reinterpret_cast<float *>(shifted(a.lse, 2)); },
                  kInvalid, {"args->lse", "4-byte aligned"}},
        BadDecode{"MisalignedBlockTable",
                  [](D &, A &a) {
                    a.block_table = reinterpret_cast<const int32_t *>(shifted(a.block_table, 2));
                  },
                  kInvalid, {"args->block_table", "4-byte aligned"}},
        BadDecode{"MisalignedCacheSeqlens",
                  [](D &, A &a) {
                    a.cache_seqlens =
                        reinterpret_cast<const int32_t *>(shifted(a.cache_seqlens, 1));
                  },
                  kInvalid, {"args->cache_seqlens", "4-byte aligned"}},
        BadDecode{"MisalignedWorkspace",
                  [](D &, A &a) { a.workspace = shifted(fakeDevicePointer(10), 4); }, kInvalid,
                  {"args->workspace", "16-byte aligned"}},
        // Strides.
        BadDecode{"QSeqStrideNotMultipleOf8",
                  [](D &, A &a) { a.seqlen_q = 2, a.q_seq_stride = 1020; }, kInvalid,
                  {"args->q_seq_stride is 1020", "multiple of 8"}},
        BadDecode{"KRowStrideNotMultipleOf8", [](D &, A &a) { a.k_row_stride = 260; },
                  kInvalid, {"args->k_row_stride is 260", "multiple of 8"}},
        BadDecode{"KHeadStrideNegative", [](D &, A &a) { a.k_head_stride = -128; }, kInvalid,
                  {"args->k_head_stride is -128", "negative"}},
        BadDecode{"VPageStrideNegative", [](D &, A &a) { a.v_page_stride = -4096; },
                  kInvalid, {"args->v_page_stride is -4096"}},
        BadDecode{"VRowStrideZero", [](D &, A &a) { a.v_row_stride = 0; }, kInvalid,
                  {"args->v_row_stride is 0"}},
        BadDecode{"OHeadStrideZero", [](D &, A &a) { a.o_head_stride = 0; }, kInvalid,
                  {"args->o_head_stride is 0"}},
        BadDecode{"OBatchStrideOdd", [](D &, A &a) { a.o_batch_stride = 1023; }, kInvalid,
                  {"args->o_batch_stride is 1023"}},
        BadDecode{"PoolSpanOverflows", [](D &, A &a) { a.k_page_stride = INT64_C(1) << 60; },
                  kInvalid, {"args->k_cache", "2^61"}},
        // Sizes and grid limits.
        BadDecode{"NegativeBatch", [](D &, A &a) { a.batch = -1; }, kInvalid,
                  {"args->batch is -1"}},
        BadDecode{"NegativeSeqlenQ", [](D &, A &a) { a.seqlen_q = -3; }, kInvalid,
                  {"args->seqlen_q is -3"}},
        BadDecode{"NegativeSeqlenK", [](D &, A &a) { a.seqlen_k = -1; }, kInvalid,
                  {"args->seqlen_k is -1"}},
        BadDecode{"BatchOverGrid", [](D &, A &a) { a.batch = 70000; }, kNotSupported,
                  {"args->batch is 70000", "65535"}},
        BadDecode{"BatchTimesKvHeadsOverGrid", [](D &, A &a) { a.batch = 40000; },
                  kNotSupported, {"args->batch is 40000", "batch * num_heads_kv = 80000"}},
        // 4 query heads per KV head: 262141 queries are 1048564 packed rows, 65536 tiles.
        BadDecode{"QueryRowsOverGrid", [](D &, A &a) { a.seqlen_q = 262141; }, kNotSupported,
                  {"args->seqlen_q is 262141", "1048564", "at most 1048560"}},
        BadDecode{"SeqlenKOverLimit", [](D &, A &a) { a.seqlen_k = (1 << 30) + 1; },
                  kNotSupported, {"args->seqlen_k is 1073741825"}},
        BadDecode{"NumSplitsNegative", [](D &, A &a) { a.num_splits = -1; }, kInvalid,
                  {"args->num_splits is -1", "0 (automatic) or 1 to 128"}},
        BadDecode{"NumSplitsTooMany", [](D &, A &a) { a.num_splits = 129; }, kInvalid,
                  {"args->num_splits is 129"}},
        // The paged layout.
        BadDecode{"PageSizeZero", [](D &, A &a) { a.page_size = 0; }, kInvalid,
                  {"args->page_size is 0", "block_table"}},
        BadDecode{"PageSizeNegative", [](D &, A &a) { a.page_size = -16; }, kInvalid,
                  {"args->page_size is -16"}},
        BadDecode{"NumPagesZero", [](D &, A &a) { a.num_pages = 0; }, kInvalid,
                  {"args->num_pages is 0"}},
        BadDecode{"TableStrideTooSmall", [](D &, A &a) { a.table_stride = 62; }, kInvalid,
                  {"args->table_stride is 62", "ceil(1000 / 16) = 63"}},
        BadDecode{"TableStrideNegative", [](D &, A &a) { a.table_stride = -1; }, kInvalid,
                  {"args->table_stride is -1"}},
        BadDecode{"TableTooSmallForOddPageSize",
                  [](D &, A &a) { a.page_size = 7, a.table_stride = 142; }, kInvalid,
                  {"args->table_stride is 142", "ceil(1000 / 7) = 143"}},
        // The description.
        BadDecode{"AlibiWithoutSlopes", [](D &d, A &) { d.alibi = 1; }, kInvalid,
                  {"args->alibi_slopes is NULL", "desc->alibi"}},
        BadDecode{"AlibiSlopesMisaligned",
                  [](D &d, A &a) {
                    d.alibi = 1;
                    a.alibi_slopes = reinterpret_cast<const float *>(0x1002);
                  },
                  kInvalid, {"alibi_slopes", "4-byte"}},
        BadDecode{"AlibiBatchStrideNegative",
                  [](D &d, A &a) {
                    d.alibi = 1;
                    a.alibi_slopes = reinterpret_cast<const float *>(0x1000);
                    a.alibi_batch_stride = -1;
                  },
                  kInvalid, {"args->alibi_batch_stride is -1"}},
        BadDecode{"DescriptionChecked", [](D &d, A &) { d.head_dim = 100; }, kNotSupported,
                  {"desc->head_dim is 100"}}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(ValidateDecodeOk, PagedAndContiguousCachesPass) {
  fj_attention_desc desc = validDesc();
  fj_decode_args paged = validDecodeArgs(desc);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &paged)));
  desc.decode = 1;
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &paged)));
  // Any page size; the table exactly as wide as the longest sequence needs.
  paged.page_size = 7, paged.table_stride = 143;
  paged.k_page_stride = 7 * paged.k_row_stride, paged.v_page_stride = 7 * paged.v_row_stride;
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &paged)));
  // Automatic or explicit splits; a workspace; no lse and no lengths.
  paged.num_splits = 128;
  paged.workspace = fakeDevicePointer(10), paged.workspace_bytes = 1 << 20;
  paged.lse = nullptr, paged.cache_seqlens = nullptr;
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &paged)));

  // Contiguous: page_size, num_pages and table_stride are ignored, whatever they hold.
  fj_decode_args contiguous = contiguousDecodeArgs(desc);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &contiguous)));
  contiguous.page_size = -5, contiguous.num_pages = -1, contiguous.table_stride = -7;
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &contiguous)));
  // ... but the cache's strides are checked over [batch, seqlen_k].
  contiguous.k_page_stride = 12;
  EXPECT_TRUE(failsWith(fj_validate_decode_args(&desc, &contiguous), FJ_ERROR_INVALID_VALUE,
                        {"args->k_page_stride is 12"}));

  // Several query rows (speculative decoding), MQA, head_dim_v differing, not causal.
  fj_attention_desc mqa = validDesc();
  mqa.num_heads_kv = 1, mqa.head_dim_v = 64, mqa.causal = 0;
  fj_decode_args spec = validDecodeArgs(mqa);
  spec.seqlen_q = 4;
  spec.q_batch_stride *= 4, spec.o_batch_stride *= 4;
  spec.k_head_stride = spec.v_head_stride = 0;  // one KV head: its stride is never used
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&mqa, &spec)));
  // The largest query block the grid takes: 65535 tiles of 16 packed rows.
  spec.seqlen_q = 65535 * 16 / 8;
  spec.q_batch_stride = (int64_t)spec.seqlen_q * spec.q_seq_stride;
  spec.o_batch_stride = (int64_t)spec.seqlen_q * spec.o_seq_stride;
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&mqa, &spec)));
}

TEST(ValidateDecodeOk, EmptyProblemsNeedNoPointers) {
  fj_attention_desc desc = validDesc();
  fj_decode_args args;
  fj_decode_args_init(&args);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &args)));  // batch 0
  args.batch = 3;  // seqlen_q 0
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &args)));
  // No keys: the caches are never read (each row gets o = 0, lse = -inf).
  fj_decode_args noKeys = contiguousDecodeArgs(desc);
  noKeys.seqlen_k = 0;
  noKeys.k_cache = noKeys.v_cache = nullptr;
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &noKeys)));
  // A paged table's shape is still checked with no work: it is a caller's mistake.
  args = validDecodeArgs(desc);
  args.batch = 0, args.page_size = 0;
  EXPECT_TRUE(failsWith(fj_validate_decode_args(&desc, &args), FJ_ERROR_INVALID_VALUE,
                        {"args->page_size is 0"}));
}

TEST(ValidateDecodeOk, ParametersAreTheKernelsAbi) {
  fj_attention_desc desc = validDesc();
  desc.softmax_scale = 0.5f;
  auto checked = api::checkDesc(&desc);
  ASSERT_TRUE((bool)checked);
  fj_decode_args a = validDecodeArgs(desc);
  a.num_splits = 3;
  FjDecodeParams p;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkDecodeArgs(*checked, &a, p, noWork)));
  EXPECT_FALSE(noWork);
  EXPECT_EQ(p.q, a.q);
  EXPECT_EQ(p.k, a.k_cache);
  EXPECT_EQ(p.block_table, a.block_table);
  EXPECT_EQ(p.cache_seqlens, a.cache_seqlens);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.heads_q, 8);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.seqlen_q, 1);
  EXPECT_EQ(p.seqlen_k, 1000);
  EXPECT_EQ(p.page_size, 16);
  EXPECT_EQ(p.table_stride, 64);
  EXPECT_EQ(p.k_page_stride, a.k_page_stride);
  EXPECT_EQ(p.q_row_stride, a.q_seq_stride);
  EXPECT_EQ(p.o_row_stride, a.o_seq_stride);
  EXPECT_EQ(p.lse_head_stride, 1);
  EXPECT_EQ(p.lse_batch_stride, 8);
  EXPECT_FLOAT_EQ(p.scale_log2, 0.5f * 1.4426950408889634f);
  EXPECT_EQ(p.num_splits, 3);  // the request: fj_decode plans it
  EXPECT_EQ(p.tiles_per_split, 0);
  EXPECT_EQ(p.o_partial, nullptr);
  // Contiguous: the page stride steps over sequences; no table, no page fields.
  a = contiguousDecodeArgs(desc);
  a.page_size = 16;
  ASSERT_FALSE(bool(api::checkDecodeArgs(*checked, &a, p, noWork)));
  EXPECT_EQ(p.block_table, nullptr);
  EXPECT_EQ(p.page_size, 0);
  EXPECT_EQ(p.k_page_stride, 1000 * 2 * 128);
}

TEST(ValidateDecodeOk, InitAndNullAreHandled) {
  fj_decode_args args;
  std::memset(&args, 0xAB, sizeof(args));
  fj_decode_args_init(&args);
  EXPECT_EQ(args.struct_size, sizeof(args));
  EXPECT_EQ(args.block_table, nullptr);
  EXPECT_EQ(args.num_splits, 0);
  EXPECT_EQ(args.workspace, nullptr);
  fj_decode_args_init(nullptr);
  fj_kv_append_args append;
  std::memset(&append, 0xAB, sizeof(append));
  fj_kv_append_args_init(&append);
  EXPECT_EQ(append.struct_size, sizeof(append));
  EXPECT_EQ(append.new_len, 0);
  fj_kv_append_args_init(nullptr);
  fj_attention_desc desc = validDesc();
  EXPECT_TRUE(failsWith(fj_validate_decode_args(&desc, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_validate_decode_args: args is NULL"}));
  EXPECT_TRUE(failsWith(fj_validate_kv_append_args(&desc, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_validate_kv_append_args: args is NULL"}));
  fj_decode_args valid = validDecodeArgs(desc);
  EXPECT_TRUE(failsWith(fj_validate_decode_args(nullptr, &valid), FJ_ERROR_INVALID_VALUE,
                        {"desc is NULL"}));
  // A newer header's struct: accepted while its unknown tail is zero.
  struct Newer {
    fj_decode_args args;
    uint64_t extra;
  } newer{valid, 0};
  newer.args.struct_size = sizeof(newer);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &newer.args)));
  newer.extra = 1;
  EXPECT_TRUE(failsWith(fj_validate_decode_args(&desc, &newer.args), FJ_ERROR_NOT_SUPPORTED,
                        {"non-zero byte"}));
}

// ---- the description ------------------------------------------------------------------

TEST(ValidateDecodeDesc, DecodeFlagIsReadAndTakesFeatures) {
  fj_attention_desc desc = validDesc();
  desc.decode = 1;
  desc.backward = 1;  // both: fine
  auto checked = api::checkDesc(&desc);
  ASSERT_TRUE((bool)checked);
  EXPECT_TRUE(checked->decode);
  EXPECT_TRUE(checked->backward);
  desc.backward = 0;
  // The window and soft-capping the decode kernels take (0.13), and their arguments pass.
  desc.window = 1, desc.window_left = 4096, desc.window_right = 0, desc.softcap = 50.f;
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  fj_decode_args args = validDecodeArgs(desc);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &args)));
  // ALiBi too (0.13), with its slopes in the decode arguments.
  desc.alibi = 1;
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  args.alibi_slopes = reinterpret_cast<const float *>(0x1000);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &args)));
  desc.alibi = 0;
  desc.window = 0, desc.window_left = desc.window_right = 0, desc.softcap = 0.f;
  // The user's mods (0.14), their args passed as given.
  desc.score_mod = "return score + args.scalar[0];";
  desc.mask_mod = "return kv_idx % 3 != 1;";
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
  args.alibi_slopes = nullptr;
  args.mod_args.scalar[0] = 0.5f;
  args.mod_args.integer[2] = 7;
  args.mod_args.tensor[1] = reinterpret_cast<const void *>(0x1234);
  EXPECT_TRUE(succeeds(fj_validate_decode_args(&desc, &args)));
  auto checked2 = api::checkDesc(&desc);
  ASSERT_TRUE((bool)checked2);
  FjDecodeParams params;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkDecodeArgs(*checked2, &args, params, noWork)));
  EXPECT_EQ(params.mod_args.scalar[0], 0.5f);
  EXPECT_EQ(params.mod_args.integer[2], 7);
  EXPECT_EQ(params.mod_args.tensor[1], reinterpret_cast<const void *>(0x1234));
  // Over an FP8 cache too (0.14).
  desc.kv_cache_dtype = FJ_DTYPE_E4M3;
  desc.window = 1, desc.window_left = 4096, desc.softcap = 50.f, desc.alibi = 1;
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&desc)));
}

// A 0.13 fj_decode_args ends at alibi_batch_stride: accepted, mod_args read as zeros
// whatever the caller's memory after it holds.
TEST(ValidateDecodeDesc, DecodeArgsOf013SizeHaveNoModArgs) {
  fj_attention_desc desc = validDesc();
  desc.decode = 1;
  desc.score_mod = "return score + args.scalar[0];";
  auto checked = api::checkDesc(&desc);
  ASSERT_TRUE((bool)checked);
  struct {
    fj_decode_args args;
    unsigned char junk[64];
  } buffer;
  std::memset(&buffer, 0x7f, sizeof buffer);
  fj_decode_args good = validDecodeArgs(desc);
  good.struct_size = offsetof(fj_decode_args, mod_args);
  std::memcpy(&buffer.args, &good, offsetof(fj_decode_args, mod_args));
  FjDecodeParams params;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkDecodeArgs(*checked, &buffer.args, params, noWork)));
  EXPECT_EQ(params.mod_args.scalar[0], 0.f);
  EXPECT_EQ(params.mod_args.tensor[0], nullptr);
}

// 0.3's description ends at tuning_mod_args: accepted, decode reads as 0 even when the
// caller's memory after it holds anything.
TEST(ValidateDecodeDesc, DescriptionOf03SizeHasNoDecode) {
  const size_t size03 = offsetof(fj_attention_desc, decode);
  OldDescInBiggerBuffer old(validDesc(), size03, size03);
  EXPECT_TRUE(succeeds(fj_validate_attention_desc(&old.desc)));
  auto checked = api::checkDesc(&old.desc);
  ASSERT_TRUE((bool)checked);
  EXPECT_FALSE(checked->decode);
}

// ---- fj_kv_append's arguments -----------------------------------------------------------

class ValidateAppend : public ::testing::TestWithParam<BadAppend> {};

TEST_P(ValidateAppend, IsRejectedWithItsField) {
  fj_attention_desc desc = validDesc();
  fj_kv_append_args args = validAppendArgs(desc);
  GetParam().mutate(desc, args);
  expectMessage(fj_validate_kv_append_args(&desc, &args), GetParam().status,
                "fj_validate_kv_append_args", GetParam().fragments);
}

using P = fj_kv_append_args;

INSTANTIATE_TEST_SUITE_P(
    BadFields, ValidateAppend,
    ::testing::Values(
        BadAppend{"StructSizeTooSmall", [](D &, P &a) { a.struct_size = 8; }, kInvalid,
                  {"args->struct_size is 8", "sizeof(fj_kv_append_args)"}},
        BadAppend{"NoKNew", [](D &, P &a) { a.k_new = nullptr; }, kInvalid,
                  {"args->k_new is NULL"}},
        BadAppend{"NoVNew", [](D &, P &a) { a.v_new = nullptr; }, kInvalid,
                  {"args->v_new is NULL"}},
        BadAppend{"NoKCache", [](D &, P &a) { a.k_cache = nullptr; }, kInvalid,
                  {"args->k_cache is NULL"}},
        BadAppend{"MisalignedVNew", [](D &, P &a) { a.v_new = shifted(a.v_new, 8); },
                  kInvalid, {"args->v_new", "16-byte aligned"}},
        BadAppend{"MisalignedVCache", [](D &, P &a) { a.v_cache = shifted(a.v_cache, 8); },
                  kInvalid, {"args->v_cache", "16-byte aligned"}},
        BadAppend{"KNewSeqStrideNotMultipleOf8",
                  [](D &, P &a) { a.k_new_seq_stride = 100; }, kInvalid,
                  {"args->k_new_seq_stride is 100", "multiple of 8"}},
        BadAppend{"VNewBatchStrideNegative", [](D &, P &a) { a.v_new_batch_stride = -512; },
                  kInvalid, {"args->v_new_batch_stride is -512"}},
        BadAppend{"KRowStrideZero", [](D &, P &a) { a.k_row_stride = 0; }, kInvalid,
                  {"args->k_row_stride is 0"}},
        BadAppend{"NegativeNewLen", [](D &, P &a) { a.new_len = -1; }, kInvalid,
                  {"args->new_len is -1"}},
        BadAppend{"NewLenOverSeqlenK", [](D &, P &a) { a.new_len = 1001; }, kInvalid,
                  {"args->new_len is 1001", "args->seqlen_k (1000)"}},
        BadAppend{"NegativeBatch", [](D &, P &a) { a.batch = -2; }, kInvalid,
                  {"args->batch is -2"}},
        BadAppend{"BatchOverGrid", [](D &, P &a) { a.batch = 65536; }, kNotSupported,
                  {"args->batch is 65536"}},
        BadAppend{"PageSizeZero", [](D &, P &a) { a.page_size = 0; }, kInvalid,
                  {"args->page_size is 0"}},
        BadAppend{"NumPagesZero", [](D &, P &a) { a.num_pages = 0; }, kInvalid,
                  {"args->num_pages is 0"}},
        BadAppend{"TableStrideTooSmall", [](D &, P &a) { a.table_stride = 10; }, kInvalid,
                  {"args->table_stride is 10", "= 63"}},
        BadAppend{"MisalignedBlockTable",
                  [](D &, P &a) {
                    a.block_table = reinterpret_cast<const int32_t *>(shifted(a.block_table, 2));
                  },
                  kInvalid, {"args->block_table", "4-byte aligned"}},
        BadAppend{"MisalignedCacheSeqlens",
                  [](D &, P &a) {
                    a.cache_seqlens =
                        reinterpret_cast<const int32_t *>(shifted(a.cache_seqlens, 2));
                  },
                  kInvalid, {"args->cache_seqlens", "4-byte aligned"}},
        BadAppend{"DescriptionChecked", [](D &d, P &) { d.head_dim = 100; }, kNotSupported,
                  {"head_dim"}}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(ValidateAppendOk, GoodAndEmptyAppendsPass) {
  fj_attention_desc desc = validDesc();
  fj_kv_append_args args = validAppendArgs(desc);
  EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&desc, &args)));
  // Contiguous: the page fields are ignored.
  args.block_table = nullptr, args.page_size = 0, args.table_stride = 0, args.num_pages = 0;
  args.k_page_stride = args.seqlen_k * args.k_row_stride;
  args.v_page_stride = args.seqlen_k * args.v_row_stride;
  EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&desc, &args)));
  // Nothing to append: no pointer is read.
  fj_kv_append_args none;
  fj_kv_append_args_init(&none);
  none.batch = 8, none.seqlen_k = 100;
  EXPECT_TRUE(succeeds(fj_validate_kv_append_args(&desc, &none)));

  auto checked = api::checkDesc(&desc);
  ASSERT_TRUE((bool)checked);
  args = validAppendArgs(desc);
  FjDecodeParams p;
  bool noWork = true;
  ASSERT_FALSE(bool(api::checkKvAppendArgs(*checked, &args, p, noWork)));
  EXPECT_FALSE(noWork);
  EXPECT_EQ(p.new_len, 2);
  EXPECT_EQ(p.k_new, args.k_new);
  EXPECT_EQ(p.k_new_row_stride, args.k_new_seq_stride);
  EXPECT_EQ(p.v_new_batch_stride, args.v_new_batch_stride);
  EXPECT_EQ(p.k, args.k_cache);
  EXPECT_EQ(p.table_stride, 64);
}

// ---- the entry points on handles built without a device ----------------------------------

fj_context_s *deviceFreeContext() {
  auto *context = new fj_context_s();
  api::LiveHandles::get().add(context);
  return context;
}

// A handle with `forward`, `backward` and `decode` variants (unloaded: nothing is ever
// launched), as getKernel lays them out.
fj_kernel_s *kernelWithVariants(fj_context_s *context, const fj_attention_desc &desc,
                                int forward, int backward, int decode) {
  auto *kernel = new fj_kernel_s();
  auto checked = api::checkDesc(&desc);
  EXPECT_TRUE((bool)checked);
  kernel->desc = *checked;
  kernel->specKey = "fwd_mma.bf16.d128.dv128.causal.sm80";
  kernel->family = "fwd_mma";
  auto add = [&](int count) {
    for (int i = 0; i < count; ++i) {
      kernel->variants.emplace_back();
      kernel->buckets.push_back(kernel->variants.back().bucket);
      kernel->bucketKeys.push_back("q1.k1024.bh8");
      kernel->tileKeys.push_back("bm16.bn64.w4.s3");
    }
  };
  add(forward);
  kernel->familyVariants = forward;
  kernel->backwardBegin = (int)kernel->variants.size();
  add(backward);
  if (backward)
    kernel->backwardFamily = "bwd_mma";
  kernel->decodeBegin = (int)kernel->variants.size();
  add(decode);
  if (decode)
    kernel->decodeFamily = "dec_mma";
  api::adoptKernel(*context, kernel);
  return kernel;
}

TEST(ApiDecode, AHandleWithoutDecodeSaysHowToGetOne) {
  fj_context_s *context = deviceFreeContext();
  fj_attention_desc desc = validDesc();
  fj_kernel_s *kernel = kernelWithVariants(context, desc, 1, 1, 0);
  fj_decode_args args = validDecodeArgs(desc);
  EXPECT_TRUE(failsWith(fj_decode(kernel, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_decode: ", "has no decode kernels", "desc.decode = 1"}));
  size_t bytes = 7;
  EXPECT_TRUE(failsWith(fj_decode_workspace_size(kernel, &args, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"desc.decode = 1"}));
  EXPECT_EQ(bytes, 0u);
  fj_kv_append_args append = validAppendArgs(desc);
  EXPECT_TRUE(failsWith(fj_kv_append(kernel, &append, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_kv_append: ", "desc.decode = 1"}));
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));

  // Decode without backward: the backward range is empty, not the decode one.
  kernel = kernelWithVariants(context, desc, 1, 0, 2);
  fj_backward_args backward;
  fj_backward_args_init(&backward);
  EXPECT_TRUE(failsWith(fj_backward(kernel, &backward, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"has no backward pass"}));
  EXPECT_TRUE(failsWith(fj_backward_workspace_size(kernel, &backward, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"has no backward pass"}));
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}

TEST(ApiDecode, ArgumentsAreCheckedBeforeAnythingElse) {
  fj_context_s *context = deviceFreeContext();
  fj_attention_desc desc = validDesc();
  fj_kernel_s *kernel = kernelWithVariants(context, desc, 1, 0, 1);
  fj_decode_args args = validDecodeArgs(desc);
  args.k_row_stride = 12;
  EXPECT_TRUE(failsWith(fj_decode(kernel, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_decode: args->k_row_stride is 12"}));
  EXPECT_TRUE(failsWith(fj_decode(kernel, nullptr, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"args is NULL"}));
  // No work: nothing dispatched, nothing launched.
  args = validDecodeArgs(desc);
  args.batch = 0;
  EXPECT_TRUE(succeeds(fj_decode(kernel, &args, nullptr)));
  size_t bytes = 7;
  EXPECT_TRUE(succeeds(fj_decode_workspace_size(kernel, &args, &bytes)));
  EXPECT_EQ(bytes, 0u);
  // The variant here is not loaded: dispatch reports it rather than launching.
  args.batch = 4;
  EXPECT_TRUE(failsWith(fj_decode(kernel, &args, nullptr), FJ_ERROR_INTERNAL,
                        {"no decode variant to dispatch to"}));
  EXPECT_TRUE(failsWith(fj_decode_workspace_size(kernel, &args, &bytes), FJ_ERROR_INTERNAL,
                        {"no decode variant to dispatch to"}));
  // The workspace query reads the sizes only, with the same rules.
  args.num_splits = 200;
  EXPECT_TRUE(failsWith(fj_decode_workspace_size(kernel, &args, &bytes),
                        FJ_ERROR_INVALID_VALUE, {"fj_decode_workspace_size: ",
                                                 "args->num_splits is 200"}));
  args.num_splits = 0;
  args.batch = 40000;
  EXPECT_TRUE(failsWith(fj_decode_workspace_size(kernel, &args, &bytes),
                        FJ_ERROR_NOT_SUPPORTED, {"batch * num_heads_kv = 80000"}));
  EXPECT_TRUE(failsWith(fj_decode_workspace_size(kernel, &args, nullptr),
                        FJ_ERROR_INVALID_VALUE, {"bytes (the output pointer) is NULL"}));
  fj_kv_append_args append = validAppendArgs(desc);
  append.new_len = 0;
  EXPECT_TRUE(succeeds(fj_kv_append(kernel, &append, nullptr)));
  append.new_len = 2000;
  EXPECT_TRUE(failsWith(fj_kv_append(kernel, &append, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_kv_append: args->new_len is 2000"}));
  append.new_len = 1;
  EXPECT_TRUE(failsWith(fj_kv_append(kernel, &append, nullptr), FJ_ERROR_INTERNAL,
                        {"is not a decode kernel"}));
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));

  fj_kernel_s dead;
  dead.magic = api::kDeadMagic;
  EXPECT_TRUE(failsWith(fj_decode(&dead, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"is not a live kernel"}));
  EXPECT_TRUE(failsWith(fj_kv_append(nullptr, &append, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_kv_append: kernel is NULL"}));
}

TEST(ApiDecode, KernelInfoCountsEachRange) {
  fj_context_s *context = deviceFreeContext();
  fj_attention_desc desc = validDesc();
  fj_kernel_s *kernel = kernelWithVariants(context, desc, 2, 3, 4);
  struct fj_kernel_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_TRUE(succeeds(fj_kernel_info(kernel, &info)));
  EXPECT_EQ(info.num_variants, 9);
  EXPECT_STREQ(info.backward_family, "bwd_mma");
  EXPECT_EQ(info.num_backward_variants, 3);
  EXPECT_STREQ(info.decode_family, "dec_mma");
  EXPECT_EQ(info.num_decode_variants, 4);
  // 0.3's struct ends before the decode fields: they are not written.
  struct OldInfoInBiggerBuffer {
    struct fj_kernel_info info;
    unsigned char guard[16];
  } old;
  std::memset(&old, 0x5A, sizeof(old));
  old.info.struct_size = offsetof(struct fj_kernel_info, decode_family);
  ASSERT_TRUE(succeeds(fj_kernel_info(kernel, &old.info)));
  EXPECT_EQ(old.info.num_backward_variants, 3);
  const unsigned char *tail = reinterpret_cast<const unsigned char *>(&old.info) +
                              offsetof(struct fj_kernel_info, decode_family);
  for (size_t i = 0; i < sizeof(old) - offsetof(struct fj_kernel_info, decode_family); ++i)
    ASSERT_EQ(tail[i], 0x5A) << "byte " << i << " past 0.3's fj_kernel_info was written";
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));

  kernel = kernelWithVariants(context, desc, 1, 0, 0);
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_TRUE(succeeds(fj_kernel_info(kernel, &info)));
  EXPECT_STREQ(info.decode_family, "");
  EXPECT_EQ(info.num_decode_variants, 0);
  EXPECT_EQ(info.num_backward_variants, 0);
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}

TEST(ApiDecode, EveryTargetPlansDecMma) {
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90a"}) {
    auto plan = tuner::familyPlan(target);
    ASSERT_TRUE((bool)plan) << llvm::toString(plan.takeError());
    EXPECT_EQ(plan->decode, generator::Family::DecMma) << target;
  }
}

} // namespace
