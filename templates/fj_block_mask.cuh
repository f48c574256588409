// Block sparsity for a mask_mod: which key tiles a work tile (a kernel's block of query
// rows) must compute, and which of those need the mask at all. Built once per shape by
// the kernel below (compiled into the same module as the forward kernel it serves, so
// the tiles are that kernel's), then read by the forward families' key walk: a tile the
// mask drops everywhere is never loaded, and a tile it keeps everywhere runs without
// calling the user's code. (FlexAttention's BlockMask plays the same part.)
//
// The classes cover every mask the kernel applies, so that a kept tile needs none of
// them: the sequence end, causal, the window, and mask_mod (fj_features.cuh's keeps).
// Rows past the sequence end do not count (their output is never stored).
#pragma once

#include "fj_common.cuh"
#include "fj_features.cuh"

namespace fj {
namespace block_mask {

// The index of work tile m of sequence b and query head h into params.block_counts
// (into block_tiles: times block_tiles_stride; see fj_params.h).
__device__ __forceinline__ long long work_index(const FjForwardParams &p, int b, int h,
                                                int m) {
  return (long long)b * p.block_batch_stride + (long long)h * p.block_head_stride + m;
}

// An entry of block_tiles: the key tile, and whether it is partly masked.
__device__ __forceinline__ int entry_tile(u32 entry) { return (int)(entry >> 1); }
__device__ __forceinline__ bool entry_partial(u32 entry) { return (entry & 1) != 0; }

constexpr int kThreads = 256;

// One CTA per (work tile blockIdx.x, head blockIdx.y, sequence blockIdx.z) of the mask
// (one head or one sequence where the mask is shared): scores every (row, key) pair of
// the key tiles the geometry leaves (causal, window), tile by tile, and writes the tiles
// some pair keeps, in ascending order, and their count.
template <typename F, int kBlockM, int kBlockN, bool kCausal>
__device__ __forceinline__ void build(const FjForwardParams &p, int *counts, int *tiles) {
  const int m = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const SeqExtent seq = seq_extent(p, b);
  const int q0 = m * kBlockM, diag = seq.seqlen_k - seq.seqlen_q;
  const long long w = work_index(p, b, h, m);
  // The key tiles the kernel's own walk would visit (fwd_wgmma's work_of, fwd_mma's run).
  int n_first = 0, n_end = 0;
  if (q0 < seq.seqlen_q) {
    const int last_row = imin(q0 + kBlockM, seq.seqlen_q) - 1;
    n_end = (seq.seqlen_k + kBlockN - 1) / kBlockN;
    if (kCausal) {
      const int last_key = last_row + diag;
      n_end = imin(n_end, last_key < 0 ? 0 : last_key / kBlockN + 1);
    }
    if (F::kWindow && n_end > 0)
      window_tiles<F, kBlockN>(q0, last_row, diag, n_first, n_end);
  }
  const ScoreHook<F> hook(p, b, h, seq);
  int count = 0;
  for (int n = n_first; n < n_end; ++n) {
    const int key0 = n * kBlockN;
    int kept = 0, dropped = 0;
    for (int e = threadIdx.x; e < kBlockM * kBlockN; e += kThreads) {
      const int i = q0 + e / kBlockN, j = key0 + e % kBlockN;
      if (i >= seq.seqlen_q)
        continue;
      const bool keep =
          j < seq.seqlen_k && (!kCausal || j <= i + diag) && hook.keeps(i, j);
      kept |= keep;
      dropped |= !keep;
    }
    const bool any_kept = __syncthreads_or(kept) != 0;
    const bool any_dropped = __syncthreads_or(dropped) != 0;
    if (any_kept) {
      if (threadIdx.x == 0)
        tiles[w * p.block_tiles_stride + count] = 2 * n + (any_dropped ? 1 : 0);
      ++count;
    }
  }
  if (threadIdx.x == 0)
    counts[w] = count;
}

}  // namespace block_mask
}  // namespace fj
