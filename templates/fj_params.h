// Parameters of every attention forward kernel: the ABI between the host (which
// fills it) and the generated kernels (which take it by value). Plain C, no CUDA.
#pragma once

// What the user's score_mod / mask_mod code sees as `args` (docs/FEATURES.md): the
// caller's tensors and scalars, passed through unchanged.
struct FjModArgs {
  const void *tensor[4];  // device pointers
  float scalar[4];
  int integer[4];
};

struct FjForwardParams {
  const void *q;  // [batch, seqlen_q, heads_q, head_dim] via the strides below
  const void *k;  // [batch, seqlen_k, heads_kv, head_dim]
  const void *v;  // [batch, seqlen_k, heads_kv, head_dim_v]
  void *o;        // [batch, seqlen_q, heads_q, head_dim_v]
  float *lse;     // optional log-sum-exp (natural log), NULL when not wanted
  // Variable-length batches: prefix sums of the sequence lengths (batch + 1 entries,
  // device memory). When set, the batch strides are ignored and sequence b starts at
  // row cu_seqlens[b]; seqlen_q / seqlen_k hold the maximum lengths.
  const int *cu_seqlens_q;
  const int *cu_seqlens_k;
  // With cu_seqlens: the packed rows of q/o and of k/v (cu_seqlens_q[batch],
  // cu_seqlens_k[batch]), 0 when unknown. The TMA kernels need them to bound their
  // loads; the others ignore them.
  long long total_q, total_k;
  // Strides in elements; the last dimension is contiguous.
  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;
  // lse[b * lse_batch_stride + h * lse_head_stride + row]; with cu_seqlens the batch
  // stride is ignored and row is the packed row cu_seqlens_q[b] + i.
  long long lse_batch_stride, lse_head_stride;
  int batch, heads_q, heads_kv;
  int seqlen_q, seqlen_k;
  float softmax_scale;  // scale applied to q.k before the softmax
  float scale_log2;     // softmax_scale * log2(e): the kernels work in base 2
  // Features (templates/fj_features.cuh), read only by the kernels compiled with them.
  // ALiBi: the slope of head h of sequence b is alibi_slopes[b * alibi_batch_stride + h].
  const float *alibi_slopes;
  long long alibi_batch_stride;
  FjModArgs mod_args;   // the user code's `args`
  // Block sparsity of a mask_mod (templates/fj_block_mask.cuh), read only by kernels
  // compiled with one; NULL: every key tile is computed and masked. Work tile m (the
  // kernel's block of query rows) of sequence b and query head h has the index
  // w = b * block_batch_stride + h * block_head_stride + m (a stride is 0 where the mask
  // is shared), block_counts[w] key tiles to compute, and their entries
  // block_tiles[w * block_tiles_stride + k], ascending: 2 * key tile, + 1 when the tile is
  // partly masked. A partly masked tile's keep bits are at slot block_slots[same index]
  // of block_bits (rows of ceil(block_n / 32) words, block_m rows per slot), or, where
  // the slot is -1 (the mask ran out of slots), mask_mod is called for each score.
  const int *block_counts;
  const int *block_tiles;
  const int *block_slots;
  const unsigned *block_bits;
  int block_batch_stride, block_head_stride, block_tiles_stride;
  int block_bits_capacity;  // slots in block_bits (read by the builder)
  // A persistent kernel's walk (fwd_wgmma, not causal): with a block mask, its CTA c
  // takes the work tiles block_order[c], block_order[c + grid], ... (fj_block_mask.cuh's
  // build_order, balanced by their listed key tiles) when block_order_grid is its grid
  // size; a work tile is (b * heads_q + h) * query blocks + m there. NULL, or
  // block_order[0] == -1 (the order promised too little): its own walk.
  const int *block_order;
  int block_order_grid;
  // FP8 (e4m3) kernels only. Dequantization factors: the tensors hold x / descale, and
  // head h_kv of sequence b scales by descale[b * descale_batch_stride +
  // h_kv * descale_head_stride] (per tensor: both strides 0); NULL: 1.
  const float *q_descale, *k_descale, *v_descale;
  long long descale_batch_stride, descale_head_stride;
  // V transposed for 8-bit wgmma, which reads both operands K-major: written before each
  // forward by the module's transpose kernel (templates/fj_fp8.cuh) as
  // [batch][heads_kv][head_dim_v][vt_keys], vt_keys = seqlen_k rounded up to 64.
  void *v_transposed;
  long long vt_keys;
};
