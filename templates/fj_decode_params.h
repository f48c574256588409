// Parameters of the decode kernels (family dec_mma): the ABI between the host and the
// generated split-KV decode, combine and append kernels. Plain C, no CUDA.
#pragma once

// Attention of a few new query rows per sequence against a KV cache that is either
// contiguous ([batch, seqlen_k, heads_kv, dim] through the strides, block_table NULL)
// or paged: page p holds page_size consecutive tokens of one sequence,
// k[p * k_page_stride + row * k_row_stride + h * k_head_stride + d], and token j of
// sequence b lives in page block_table[b * table_stride + j / page_size] at row
// j % page_size (the vLLM / FlashAttention kvcache layout).
struct FjDecodeParams {
  const void *q;  // [batch, seqlen_q, heads_q, head_dim]
  const void *k;  // the cache, as above
  const void *v;
  void *o;        // [batch, seqlen_q, heads_q, head_dim_v]
  float *lse;     // optional: lse[b * lse_batch_stride + h * lse_head_stride + i]
  const int *block_table;    // NULL: contiguous (page b is sequence b, batch strides)
  const int *cache_seqlens;  // [batch] keys of each sequence; NULL: seqlen_k for all
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_page_stride, k_row_stride, k_head_stride;  // page: the batch when contiguous
  long long v_page_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  long long lse_batch_stride, lse_head_stride;
  int batch, heads_q, heads_kv;
  int seqlen_q;      // query rows per sequence (bottom-right aligned when causal)
  int seqlen_k;      // the longest cache length (the bound of cache_seqlens)
  int page_size;     // tokens per page (paged only)
  int table_stride;  // entries per block_table row (paged only)
  float scale_log2;  // softmax scale * log2(e)
  // Split-KV: each (sequence, KV head, row tile) is cut into num_splits ranges of
  // tiles_per_split key tiles. With more than one split the kernel writes normalized
  // fp32 partial outputs and their lse to the workspace, and the combine kernel merges
  // them: o_partial[(split * batch * heads_q * seqlen_q + row) * head_dim_v + c] and
  // lse_partial[split * batch * heads_q * seqlen_q + row], row = (b * heads_q + h) *
  // seqlen_q + i.
  int num_splits, tiles_per_split;
  float *o_partial;
  float *lse_partial;
  // The append kernel: new rows k_new/v_new [batch, new_len, heads_kv, dim] written to
  // cache tokens cache_seqlens[b] - new_len .. cache_seqlens[b] - 1 (the lengths count
  // them already).
  const void *k_new;
  const void *v_new;
  int new_len;
  long long k_new_batch_stride, k_new_row_stride, k_new_head_stride;
  long long v_new_batch_stride, v_new_row_stride, v_new_head_stride;
#if !defined(__CUDACC__) || defined(FJ_DECODE_FP8_CACHE) || defined(FJ_DECODE_ALIBI) || \
    defined(FJ_DECODE_MODS)
  // An FP8 (e4m3) cache: a value of (sequence b, KV head h) is its byte's times
  // k_descale[b * descale_batch_stride + h * descale_head_stride] (NULL: 1), v's by
  // v_descale; the append divides by them. The host always passes these fields; a
  // kernel of a 16-bit cache is compiled without them and reads the struct's first part
  // (its parameter, and so its code, is the one it had before FP8 caches existed, which
  // keeps the shipped measurements of those kernels valid: tuner/carry_winners.h).
  const float *k_descale;
  const float *v_descale;
  long long descale_batch_stride, descale_head_stride;
#endif
#if !defined(__CUDACC__) || defined(FJ_DECODE_ALIBI) || defined(FJ_DECODE_MODS)
  // ALiBi's slopes (a kernel compiled with it, which sees the FP8 fields above too, so
  // that the offsets are the host's): the slope of (sequence b, query head h) is
  // alibi_slopes[b * alibi_batch_stride + h], as FjForwardParams'.
  const float *alibi_slopes;
  long long alibi_batch_stride;
#endif
#if !defined(__CUDACC__) || defined(FJ_DECODE_MODS)
  // What the user's score_mod / mask_mod read as `args` (a kernel compiled with them,
  // which sees every field above).
  FjModArgs mod_args;
#endif
};
