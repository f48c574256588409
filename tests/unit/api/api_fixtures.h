// A valid description and matching forward arguments for the C API tests, and a
// check that a call failed with the expected status and a message naming the field.
#pragma once

#include "api/validate.h"
#include "flashjit/flashjit.h"
#include "tests/fails_with.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace flashjit::apitest {

// Aligned, never dereferenced (validation only looks at the addresses).
inline void *fakeDevicePointer(uintptr_t index) {
  return reinterpret_cast<void *>((uintptr_t)0x7f0000000000 + index * 0x10000000);
}

inline fj_attention_desc validDesc() {
  fj_attention_desc desc;
  fj_attention_desc_init(&desc);
  desc.dtype = FJ_DTYPE_BF16;
  desc.head_dim = 128;
  desc.head_dim_v = 0;
  desc.causal = 1;
  desc.num_heads_q = 8;
  desc.num_heads_kv = 2;
  return desc;
}

// An older version's description as its caller hands it over: the first `fields` bytes
// of `valid`, struct_size `size`, and 0x5A in the rest of the struct and in the memory
// after it (the caller's, never a request).
struct OldDescInBiggerBuffer {
  fj_attention_desc desc;
  unsigned char garbage[32];
  OldDescInBiggerBuffer(const fj_attention_desc &valid, size_t fields, size_t size) {
    std::memset(&desc, 0x5A, sizeof(desc));
    std::memset(garbage, 0x5A, sizeof(garbage));
    std::memcpy(&desc, &valid, fields);
    desc.struct_size = size;
  }
};

// BSHD, packed: batch 2, 128 queries, 256 keys.
inline fj_forward_args validArgs(const fj_attention_desc &desc) {
  fj_forward_args a;
  fj_forward_args_init(&a);
  a.q = fakeDevicePointer(1);
  a.k = fakeDevicePointer(2);
  a.v = fakeDevicePointer(3);
  a.o = fakeDevicePointer(4);
  a.batch = 2;
  a.seqlen_q = 128;
  a.seqlen_k = 256;
  const int64_t d = desc.head_dim, dv = desc.head_dim_v ? desc.head_dim_v : d;
  const int64_t hq = desc.num_heads_q, hkv = desc.num_heads_kv;
  a.q_head_stride = d, a.q_seq_stride = hq * d, a.q_batch_stride = a.seqlen_q * hq * d;
  a.k_head_stride = d, a.k_seq_stride = hkv * d, a.k_batch_stride = a.seqlen_k * hkv * d;
  a.v_head_stride = dv, a.v_seq_stride = hkv * dv, a.v_batch_stride = a.seqlen_k * hkv * dv;
  a.o_head_stride = dv, a.o_seq_stride = hq * dv, a.o_batch_stride = a.seqlen_q * hq * dv;
  return a;
}

// The description as api::checkDesc reads it (a failure is reported, and gives the
// default description).
inline api::AttentionDesc checked(const fj_attention_desc &desc) {
  auto out = api::checkDesc(&desc);
  EXPECT_TRUE((bool)out) << (out ? "" : llvm::toString(out.takeError()));
  return out ? *out : api::AttentionDesc{};
}

// The stride fields of fj_forward_args, by name: q's, k's and v's, then (withO) o's.
struct StrideField {
  const char *name;
  int64_t fj_forward_args::*member;
};

inline std::vector<StrideField> forwardStrides(bool withO = true) {
  using A = fj_forward_args;
  std::vector<StrideField> fields = {
      {"q_batch_stride", &A::q_batch_stride}, {"q_seq_stride", &A::q_seq_stride},
      {"q_head_stride", &A::q_head_stride},   {"k_batch_stride", &A::k_batch_stride},
      {"k_seq_stride", &A::k_seq_stride},     {"k_head_stride", &A::k_head_stride},
      {"v_batch_stride", &A::v_batch_stride}, {"v_seq_stride", &A::v_seq_stride},
      {"v_head_stride", &A::v_head_stride},
  };
  if (withO)
    fields.insert(fields.end(), {{"o_batch_stride", &A::o_batch_stride},
                                 {"o_seq_stride", &A::o_seq_stride},
                                 {"o_head_stride", &A::o_head_stride}});
  return fields;
}

inline ::testing::AssertionResult succeeds(fj_status status) {
  if (status == FJ_SUCCESS)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << fj_status_string(status) << ": "
                                       << fj_last_error_message();
}

// One bad input of the table-driven rejection tests: how it spoils a valid description
// and arguments, the status fj_validate_forward_args must return and the fragments its
// message must name.
struct BadInput {
  const char *name;
  std::function<void(fj_attention_desc &, fj_forward_args &)> mutate;
  fj_status status;
  std::vector<const char *> fragments;
};

inline void PrintTo(const BadInput &input, std::ostream *os) { *os << input.name; }

// Spoils `desc` and `args` with `bad` and checks the status and the message.
inline void expectRejected(const BadInput &bad, fj_attention_desc desc, fj_forward_args args) {
  bad.mutate(desc, args);
  fj_status status = fj_validate_forward_args(&desc, &args);
  std::string message = fj_last_error_message();
  EXPECT_EQ(status, bad.status) << fj_status_string(status) << ": " << message;
  for (const char *fragment : bad.fragments)
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message \"" << message << "\" does not mention \"" << fragment << "\"";
  EXPECT_EQ(message.rfind("fj_validate_forward_args: ", 0), 0u) << message;
}

// The same from validDesc() / validArgs().
inline void expectRejected(const BadInput &bad) {
  const fj_attention_desc desc = validDesc();
  expectRejected(bad, desc, validArgs(desc));
}

} // namespace flashjit::apitest
