// Decode and append arguments the API's unit tests share: valid calls on a paged cache
// (and its contiguous form) for a description, built on fake device pointers.
#pragma once

#include "api_fixtures.h"

#include <cstdint>

namespace flashjit::apitest {

inline const int32_t *fakeInts(uintptr_t i) {
  return static_cast<const int32_t *>(fakeDevicePointer(i));
}

// validDesc() (bf16, d128, 8 query heads over 2 KV heads, causal) decoding one query row
// per sequence, batch 4, against a paged cache of 512 pages of 16 tokens, sequences of
// up to 1000 keys (63 pages: the table has room for 64).
inline fj_decode_args validDecodeArgs(const fj_attention_desc &desc) {
  fj_decode_args a;
  fj_decode_args_init(&a);
  a.q = fakeDevicePointer(1);
  a.k_cache = fakeDevicePointer(2);
  a.v_cache = fakeDevicePointer(3);
  a.o = fakeDevicePointer(4);
  a.lse = static_cast<float *>(fakeDevicePointer(5));
  a.block_table = fakeInts(6);
  a.cache_seqlens = fakeInts(7);
  a.batch = 4, a.seqlen_q = 1, a.seqlen_k = 1000;
  a.page_size = 16, a.num_pages = 512, a.table_stride = 64;
  const int64_t d = desc.head_dim, dv = desc.head_dim_v ? desc.head_dim_v : d;
  const int64_t hq = desc.num_heads_q, hkv = desc.num_heads_kv;
  a.q_head_stride = d, a.q_seq_stride = hq * d, a.q_batch_stride = a.seqlen_q * hq * d;
  a.k_head_stride = d, a.k_row_stride = hkv * d, a.k_page_stride = a.page_size * hkv * d;
  a.v_head_stride = dv, a.v_row_stride = hkv * dv, a.v_page_stride = a.page_size * hkv * dv;
  a.o_head_stride = dv, a.o_seq_stride = hq * dv, a.o_batch_stride = a.seqlen_q * hq * dv;
  return a;
}

// Decode or append arguments moved to a contiguous cache, [batch, seqlen_k, heads_kv, dim].
template <typename Args> Args onContiguousCache(Args a) {
  a.block_table = nullptr;
  a.page_size = a.num_pages = a.table_stride = 0;
  a.k_page_stride = a.seqlen_k * a.k_row_stride;
  a.v_page_stride = a.seqlen_k * a.v_row_stride;
  return a;
}

// The same call on a contiguous cache.
inline fj_decode_args contiguousDecodeArgs(const fj_attention_desc &desc) {
  return onContiguousCache(validDecodeArgs(desc));
}

// Appending 2 new rows per sequence to the paged cache of validDecodeArgs.
inline fj_kv_append_args validAppendArgs(const fj_attention_desc &desc) {
  const fj_decode_args d = validDecodeArgs(desc);
  fj_kv_append_args a;
  fj_kv_append_args_init(&a);
  a.k_cache = const_cast<void *>(d.k_cache), a.v_cache = const_cast<void *>(d.v_cache);
  a.block_table = d.block_table, a.cache_seqlens = d.cache_seqlens;
  a.batch = d.batch, a.seqlen_k = d.seqlen_k;
  a.page_size = d.page_size, a.num_pages = d.num_pages, a.table_stride = d.table_stride;
  a.k_page_stride = d.k_page_stride, a.k_row_stride = d.k_row_stride;
  a.k_head_stride = d.k_head_stride;
  a.v_page_stride = d.v_page_stride, a.v_row_stride = d.v_row_stride;
  a.v_head_stride = d.v_head_stride;
  a.k_new = fakeDevicePointer(8), a.v_new = fakeDevicePointer(9);
  a.new_len = 2;
  const int64_t dk = desc.head_dim, hkv = desc.num_heads_kv;
  a.k_new_head_stride = dk, a.k_new_seq_stride = hkv * dk, a.k_new_batch_stride = 2 * hkv * dk;
  a.v_new_head_stride = dk, a.v_new_seq_stride = hkv * dk, a.v_new_batch_stride = 2 * hkv * dk;
  return a;
}

} // namespace flashjit::apitest
