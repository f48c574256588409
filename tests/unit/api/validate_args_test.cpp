// Every bad input the C API promises to catch, through the public validators (what
// fj_kernel_get and fj_forward check before they touch a device): each returns its
// status and a message that names the field and the value.
#include "api_fixtures.h"

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

using namespace flashjit::apitest;

namespace {

std::vector<BadInput> badInputs() {
  using D = fj_attention_desc;
  using A = fj_forward_args;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<BadInput> cases = {
      // struct_size
      {"DescStructSizeZero", [](D &d, A &) { d.struct_size = 0; }, FJ_ERROR_INVALID_VALUE,
       {"desc->struct_size is 0", "sizeof(fj_attention_desc)"}},
      {"DescStructSizeTooSmall",
       [](D &d, A &) { d.struct_size = offsetof(fj_attention_desc, backward) - 4; },
       FJ_ERROR_INVALID_VALUE, {"desc->struct_size", "smaller"}},
      {"DescStructSizeGarbage", [](D &d, A &) { d.struct_size = (size_t)1 << 40; },
       FJ_ERROR_INVALID_VALUE, {"desc->struct_size", "1099511627776"}},
      {"ArgsStructSizeTooSmall", [](D &, A &a) { a.struct_size = 8; }, FJ_ERROR_INVALID_VALUE,
       {"args->struct_size is 8", "sizeof(fj_forward_args)"}},
      // dtype
      {"DtypeUnset", [](D &d, A &) { d.dtype = 0; }, FJ_ERROR_INVALID_VALUE,
       {"desc->dtype is 0", "FJ_DTYPE_FP16", "FJ_DTYPE_BF16"}},
      // 3 is FJ_DTYPE_E4M3 since 0.7 (tests/unit/api/fp8_validate_test.cpp): 4 is the
      // first value that is no type.
      {"DtypeTooLarge", [](D &d, A &) { d.dtype = 4; }, FJ_ERROR_INVALID_VALUE,
       {"desc->dtype is 4", "FJ_DTYPE_E4M3 (3)"}},
      {"DtypeNegative", [](D &d, A &) { d.dtype = -1; }, FJ_ERROR_INVALID_VALUE,
       {"desc->dtype is -1"}},
      // head dims
      {"HeadDimZero", [](D &d, A &) { d.head_dim = 0; }, FJ_ERROR_INVALID_VALUE,
       {"desc->head_dim is 0"}},
      {"HeadDimNegative", [](D &d, A &) { d.head_dim = -64; }, FJ_ERROR_INVALID_VALUE,
       {"desc->head_dim is -64"}},
      {"HeadDimNotMultipleOf8", [](D &d, A &) { d.head_dim = 100; }, FJ_ERROR_NOT_SUPPORTED,
       {"desc->head_dim is 100", "multiples of 8 from 8 to 256"}},
      {"HeadDimTooLarge", [](D &d, A &) { d.head_dim = 264; }, FJ_ERROR_NOT_SUPPORTED,
       {"desc->head_dim is 264", "multiples of 8 from 8 to 256"}},
      {"HeadDimVNegative", [](D &d, A &) { d.head_dim_v = -8; }, FJ_ERROR_INVALID_VALUE,
       {"desc->head_dim_v is -8"}},
      {"HeadDimVNotMultipleOf8", [](D &d, A &) { d.head_dim_v = 12; }, FJ_ERROR_NOT_SUPPORTED,
       {"desc->head_dim_v is 12", "multiples of 8"}},
      {"HeadDimVTooLarge", [](D &d, A &) { d.head_dim_v = 512; }, FJ_ERROR_NOT_SUPPORTED,
       {"desc->head_dim_v is 512"}},
      // heads
      {"HeadsQZero", [](D &d, A &) { d.num_heads_q = 0; }, FJ_ERROR_INVALID_VALUE,
       {"desc->num_heads_q is 0"}},
      {"HeadsQNegative", [](D &d, A &) { d.num_heads_q = -4; }, FJ_ERROR_INVALID_VALUE,
       {"desc->num_heads_q is -4"}},
      {"HeadsKVZero", [](D &d, A &) { d.num_heads_kv = 0; }, FJ_ERROR_INVALID_VALUE,
       {"desc->num_heads_kv is 0"}},
      {"HeadsNotMultiple", [](D &d, A &) { d.num_heads_q = 8, d.num_heads_kv = 3; },
       FJ_ERROR_INVALID_VALUE, {"desc->num_heads_q (8)", "desc->num_heads_kv (3)"}},
      {"HeadsKVAboveQ", [](D &d, A &) { d.num_heads_q = 2, d.num_heads_kv = 4; },
       FJ_ERROR_INVALID_VALUE, {"desc->num_heads_q (2)", "multiple"}},
      {"HeadsAboveGridLimit", [](D &d, A &) { d.num_heads_q = 70000, d.num_heads_kv = 1; },
       FJ_ERROR_NOT_SUPPORTED, {"desc->num_heads_q is 70000", "65535"}},
      // softmax scale
      {"ScaleNaN", [nan](D &d, A &) { d.softmax_scale = nan; }, FJ_ERROR_INVALID_VALUE,
       {"desc->softmax_scale", "finite"}},
      {"ScaleInfinite", [inf](D &d, A &) { d.softmax_scale = inf; }, FJ_ERROR_INVALID_VALUE,
       {"desc->softmax_scale", "finite"}},
      {"ScaleNegative", [](D &d, A &) { d.softmax_scale = -0.125f; }, FJ_ERROR_INVALID_VALUE,
       {"desc->softmax_scale is -0.125"}},
      {"ScaleOverflowsBase2", [](D &d, A &) { d.softmax_scale = 3e38f; },
       FJ_ERROR_INVALID_VALUE, {"desc->softmax_scale", "too large"}},
      // hints
      {"SeqlenQHintNegative", [](D &d, A &) { d.seqlen_q_hint = -1; }, FJ_ERROR_INVALID_VALUE,
       {"desc->seqlen_q_hint is -1"}},
      {"SeqlenKHintNegative", [](D &d, A &) { d.seqlen_k_hint = -5; }, FJ_ERROR_INVALID_VALUE,
       {"desc->seqlen_k_hint is -5"}},
      {"BatchHintNegative", [](D &d, A &) { d.batch_hint = -2; }, FJ_ERROR_INVALID_VALUE,
       {"desc->batch_hint is -2"}},
      // sizes
      {"BatchNegative", [](D &, A &a) { a.batch = -1; }, FJ_ERROR_INVALID_VALUE,
       {"args->batch is -1"}},
      {"SeqlenQNegative", [](D &, A &a) { a.seqlen_q = -3; }, FJ_ERROR_INVALID_VALUE,
       {"args->seqlen_q is -3"}},
      {"SeqlenKNegative", [](D &, A &a) { a.seqlen_k = -7; }, FJ_ERROR_INVALID_VALUE,
       {"args->seqlen_k is -7"}},
      {"BatchAboveGridLimit", [](D &, A &a) { a.batch = 65536; }, FJ_ERROR_NOT_SUPPORTED,
       {"args->batch is 65536", "65535"}},
      {"SeqlenAboveLimit", [](D &, A &a) { a.seqlen_k = (1 << 30) + 1; },
       FJ_ERROR_NOT_SUPPORTED, {"args->seqlen_k is 1073741825"}},
      // NULL tensors with work to do
      {"QNull", [](D &, A &a) { a.q = nullptr; }, FJ_ERROR_INVALID_VALUE, {"args->q is NULL"}},
      {"KNull", [](D &, A &a) { a.k = nullptr; }, FJ_ERROR_INVALID_VALUE, {"args->k is NULL"}},
      {"VNull", [](D &, A &a) { a.v = nullptr; }, FJ_ERROR_INVALID_VALUE, {"args->v is NULL"}},
      {"ONull", [](D &, A &a) { a.o = nullptr; }, FJ_ERROR_INVALID_VALUE, {"args->o is NULL"}},
      {"ONullWithoutKeys", [](D &, A &a) { a.seqlen_k = 0, a.o = nullptr; },
       FJ_ERROR_INVALID_VALUE, {"args->o is NULL"}},
      // alignment
      {"QMisaligned", [](D &, A &a) { a.q = (const char *)a.q + 2; }, FJ_ERROR_INVALID_VALUE,
       {"args->q is 0x", "16-byte aligned"}},
      {"KMisaligned", [](D &, A &a) { a.k = (const char *)a.k + 8; }, FJ_ERROR_INVALID_VALUE,
       {"args->k is", "16-byte aligned"}},
      {"VMisaligned", [](D &, A &a) { a.v = (const char *)a.v + 4; }, FJ_ERROR_INVALID_VALUE,
       {"args->v is", "16-byte aligned"}},
      {"OMisaligned", [](D &, A &a) { a.o = (char *)a.o + 1; }, FJ_ERROR_INVALID_VALUE,
       {"args->o is", "16-byte aligned"}},
      {"LseMisaligned",
       [](D &, A &a) { a.lse = (float *)((char *)fakeDevicePointer(5) + 2); },
       FJ_ERROR_INVALID_VALUE, {"args->lse is", "4-byte aligned"}},
      // varlen
      {"CuSeqlensQOnly", [](D &, A &a) { a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6); },
       FJ_ERROR_INVALID_VALUE, {"args->cu_seqlens_q is set", "args->cu_seqlens_k is NULL"}},
      {"CuSeqlensKOnly", [](D &, A &a) { a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(6); },
       FJ_ERROR_INVALID_VALUE, {"args->cu_seqlens_k is set", "args->cu_seqlens_q is NULL"}},
      {"CuSeqlensWithoutMaxSeqlenQ",
       [](D &, A &a) {
         a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
         a.seqlen_q = 0;
       },
       FJ_ERROR_INVALID_VALUE, {"args->seqlen_q is 0", "longest"}},
      {"CuSeqlensWithoutMaxSeqlenK",
       [](D &, A &a) {
         a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
         a.seqlen_k = 0;
       },
       FJ_ERROR_INVALID_VALUE, {"args->seqlen_k is 0", "longest"}},
      {"CuSeqlensMisaligned",
       [](D &, A &a) {
         a.cu_seqlens_q = (const int32_t *)((char *)fakeDevicePointer(6) + 2);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
       },
       FJ_ERROR_INVALID_VALUE, {"args->cu_seqlens_q", "4-byte aligned"}},
      {"VarlenLseWithoutTotalQ",
       [](D &, A &a) {
         a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
         a.lse = (float *)fakeDevicePointer(8);
       },
       FJ_ERROR_INVALID_VALUE, {"args->total_q is 0", "lse"}},
      {"VarlenNegativeTotalK",
       [](D &, A &a) {
         a.cu_seqlens_q = (const int32_t *)fakeDevicePointer(6);
         a.cu_seqlens_k = (const int32_t *)fakeDevicePointer(7);
         a.total_k = -5;
       },
       FJ_ERROR_INVALID_VALUE, {"args->total_k is -5", "packed rows"}},
      // overflow of the addressed span
      {"StrideSpanOverflows",
       [](D &, A &a) { a.k_seq_stride = INT64_C(1) << 60; }, FJ_ERROR_INVALID_VALUE,
       {"args->k", "2^61", "k_seq_stride"}},
      {"StrideSpanWraps",
       [](D &, A &a) { a.o_batch_stride = INT64_MAX - 7; }, FJ_ERROR_INVALID_VALUE,
       {"args->o", "o_batch_stride"}},
  };
  // Every stride: 0 where its dimension is > 1, negative, not a multiple of 8.
  const std::vector<StrideField> strides = forwardStrides();
  static std::vector<std::string> names;  // the test names must outlive the table
  names.reserve(3 * strides.size());
  for (const StrideField &field : strides) {
    auto member = field.member;
    for (auto [kind, value, fragment] :
         {std::tuple{"Zero", INT64_C(0), "is 0, but its dimension has"},
          std::tuple{"Negative", INT64_C(-1024), "is -1024: strides must not be negative"},
          std::tuple{"NotMultipleOf8", INT64_C(1028), "is 1028: must be a multiple of 8"}}) {
      names.push_back(std::string(field.name) + kind);
      cases.push_back({names.back().c_str(),
                       [member, value = value](D &, A &a) { a.*member = value; },
                       FJ_ERROR_INVALID_VALUE,
                       {field.name, fragment}});
    }
  }
  return cases;
}

class BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTest, ReturnsStatusAndNamesTheField) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  ASSERT_TRUE(succeeds(fj_validate_forward_args(&desc, &args))) << "the baseline must pass";
  expectRejected(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Api, BadInputTest, ::testing::ValuesIn(badInputs()),
                         [](const ::testing::TestParamInfo<BadInput> &info) {
                           return std::string(info.param.name);
                         });

} // namespace
