// Parameters of the backward kernels: the ABI between the host and the generated
// backward kernels, as fj_params.h is for the forward. Plain C, no CUDA.
#pragma once

#include "fj_params.h"

// Zeroed floats after each of the workspace's lse-shaped arrays: bwd_wgmma copies a query
// block's lse and D as 16-byte aligned bulk copies of block_m + 4 floats, which may run up
// to block_m + 3 floats past an array's last row and must read finite values there.
#define FJ_BWD_STATS_PAD 256

// Parameters of the backward kernels (dQ, dK, dV of the forward of fj_params.h). `fwd` holds the
// forward's tensors and sizes as the forward kernels read them (o is only read here,
// lse is required); the rest are the gradients and the workspace the host carved.
struct FjBackwardParams {
  struct FjForwardParams fwd;
  const void *dout;  // gradient of o: [batch, seqlen_q, heads_q, head_dim_v]
  void *dq;          // written: shaped like q
  void *dk;          // written: shaped like k (summed over the query heads of a group)
  void *dv;          // written: shaped like v
  long long dout_batch_stride, dout_row_stride, dout_head_stride;
  long long dq_batch_stride, dq_row_stride, dq_head_stride;
  long long dk_batch_stride, dk_row_stride, dk_head_stride;
  long long dv_batch_stride, dv_row_stride, dv_head_stride;
  // Workspace, laid out like lse (fwd.lse_batch_stride, fwd.lse_head_stride), each array
  // followed by FJ_BWD_STATS_PAD floats that the prep kernel zeroes:
  float *lse_log2;  // lse * log2(e), +inf for rows that see no key (so that P = 0)
  float *dpsum;     // D = rowsum(dO * O)
  // fp32 dQ accumulator, zeroed by the host before prep; NULL in deterministic mode (dQ
  // by its own kernel). bwd_mma's is [row][head_q][head_dim] with row = b * seqlen_q + i
  // (or the packed row with cu_seqlens); bwd_wgmma's is tiled in 64 x 64 slices
  // (bwd_mma::DqTiled).
  float *dq_accum;
  // The main pass's tile counter (bwd_wgmma's causal walk claims its tiles from it), in
  // the workspace before dq_accum, zeroed by the host before each call.
  int *tile_counter;
  // Block sparsity of a mask_mod at the main kernel's tiles (NULL: none; fj_block_mask,
  // built by bwd_mma::build_block_steps): the steps key block n of kv head h_kv of
  // sequence b must take, as (query head within the group << 24) | (query block << 1) |
  // partly masked, in walk order, block_steps_capacity slots a list from
  // block_steps + w * block_steps_capacity, w = b * block_steps_batch_stride + h_kv *
  // block_steps_head_stride + n; their count at block_step_counts[w]. Read only by the
  // kernels of a mask_mod (bwd_wgmma's main pass).
  const unsigned *block_steps;
  const int *block_step_counts;
  long long block_steps_batch_stride, block_steps_head_stride;
  int block_steps_capacity;
  // The keep bits of partly masked steps, so that those need not call mask_mod (read by
  // bwd_wgmma): the entry at a list index has slot block_step_slots[same index] of
  // block_step_bits, or -1 (no slot: mask_mod is called). A slot is block_n key rows of
  // ceil(block_m / 32) words, bit q % 32 of word q / 32 for query q of the step
  // (bwd_mma::StepBits); block_step_bits_capacity slots in all, read by the builder.
  const int *block_step_slots;
  const unsigned *block_step_bits;
  int block_step_bits_capacity;
};
