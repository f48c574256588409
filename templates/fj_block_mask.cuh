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

enum : int { kThreads = 256 };  // (an enumerator: no warning where it goes unused)

// The keep bits of a partly masked tile: row r of the work tile (0 .. kBlockM - 1) is
// kWords 32-bit words, bit c of word c / 32 for the tile's key c.
template <int kBlockN> struct TileBits {
  static constexpr int kWords = (kBlockN + 31) / 32;
};

// One CTA per (work tile blockIdx.x, head blockIdx.y, sequence blockIdx.z) of the mask
// (one head or one sequence where the mask is shared): scores every (row, key) pair of
// the key tiles the geometry leaves (causal, window), tile by tile, a warp per 32 keys of
// a row (one ballot makes their word of bits), and writes the tiles some pair keeps, in
// ascending order, and their count. A partly masked tile also takes a slot of
// block_bits, counted by `used` (zeroed before the launch), while there are slots left.
template <typename F, int kBlockM, int kBlockN, bool kCausal>
__device__ __forceinline__ void build(const FjForwardParams &p, int *counts, int *tiles,
                                      int *slots, unsigned *bits, int *used) {
  typedef TileBits<kBlockN> Bits;
  constexpr int kWords = kBlockM * Bits::kWords;  // of the tile
  constexpr int kWarps = kThreads / 32;
  __shared__ unsigned tile_bits[kWords];
  __shared__ int slot_taken;
  const int m = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
    for (int rw = warp; rw < kWords; rw += kWarps) {
      const int r = rw / Bits::kWords, c = (rw % Bits::kWords) * 32 + lane;
      const int i = q0 + r, j = key0 + c;
      const bool exists = i < seq.seqlen_q && c < kBlockN;  // rows past the end: no vote
      const bool keep = exists && j < seq.seqlen_k && (!kCausal || j <= i + diag) &&
                        hook.keeps(i, j);
      const unsigned word = __ballot_sync(0xffffffffu, keep);
      if (lane == 0)
        tile_bits[rw] = word;
      kept |= keep;
      dropped |= exists && !keep;
    }
    const bool any_kept = __syncthreads_or(kept) != 0;
    const bool any_dropped = __syncthreads_or(dropped) != 0;
    if (any_kept) {
      int slot = -1;
      if (any_dropped) {
        if (threadIdx.x == 0)
          slot_taken = atomicAdd(used, 1);
        __syncthreads();
        slot = slot_taken < p.block_bits_capacity ? slot_taken : -1;
        if (slot >= 0)
          for (int e = threadIdx.x; e < kWords; e += kThreads)
            bits[(long long)slot * kWords + e] = tile_bits[e];
      }
      if (threadIdx.x == 0) {
        tiles[w * p.block_tiles_stride + count] = 2 * n + (any_dropped ? 1 : 0);
        slots[w * p.block_tiles_stride + count] = slot;
      }
      ++count;
    }
    __syncthreads();  // tile_bits and slot_taken are the next tile's
  }
  if (threadIdx.x == 0)
    counts[w] = count;
}

// A persistent kernel's order of the call's `units` work tiles (FjForwardParams::
// block_order) for a grid of `grid` CTAs, which take rounds of `grid` consecutive tiles,
// CTA c the c-th of each. Under a block mask the tiles' costs differ (their listed key
// tiles; a document's boundary blocks list two documents' tiles), and the kernel's own
// walk hands them out blind: at N 2k, d 64 its SMs idled a third of the time (docs/
// PERF.md f8). So each round goes out longest first to the least loaded CTAs (list
// scheduling, with each CTA's load counted over the rounds before), and a round still
// holds neighbouring tiles (the same heads, whose K and V stay in L2). But a shuffled
// round shares K and V less well than the walk's neighbours do: documents of N/4 at N 8k
// ran 7-14 % slower ordered, with a predicted imbalance of 1.11 (f8). So the order is
// kept only where it cuts the predicted time (the most loaded CTA's) by `min_gain` (the
// host's kBlockOrderMinGain); else order[0] = -1 tells the kernel to walk its own way.
// (Sorting each round and dealing it out in snake order balanced only rounds of
// symmetric costs: 2.2x slower at N 8k.) One CTA walks the rounds in turn. Causal
// kernels keep their own walk (pairs of blocks; TileWalk).
enum : int {
  kOrderThreads = 256,  // the largest grid ordered
  kTileOverhead = 1,    // a work tile's Q load and epilogue, in key tiles
};

template <int kBlockM>
__device__ __forceinline__ int order_cost(const FjForwardParams &p, int u, int m_blocks) {
  const int bh = u / m_blocks, b = bh / p.heads_q;
  return p.block_counts[work_index(p, b, bh - b * p.heads_q, u - bh * m_blocks)] +
         kTileOverhead;
}

template <int kBlockM>
__device__ __forceinline__ void build_order(const FjForwardParams &p, int *order, int units,
                                            int grid, float min_gain) {
  __shared__ int load[kOrderThreads], cost[kOrderThreads], by_rank[kOrderThreads];
  __shared__ int most_ordered, most_own;
  const int i = threadIdx.x, m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  load[i] = 0;
  if (i == 0)
    most_ordered = most_own = 0;
  for (int first = 0; first < units; first += grid) {
    const int n = imin(grid, units - first);
    if (i < n)
      cost[i] = order_cost<kBlockM>(p, first + i, m_blocks);
    __syncthreads();
    int load_rank = 0;
    if (i < n) {  // tile i's place by cost (heaviest first), CTA i's by load (least first)
      int cost_rank = 0;
      for (int j = 0; j < n; ++j) {
        cost_rank += cost[j] > cost[i] || (cost[j] == cost[i] && j < i);
        load_rank += load[j] < load[i] || (load[j] == load[i] && j < i);
      }
      by_rank[cost_rank] = i;
    }
    __syncthreads();
    if (i < n) {
      const int k = by_rank[load_rank];
      order[first + i] = first + k;
      load[i] += cost[k];
    }
    __syncthreads();  // cost and by_rank are the next round's
  }
  // The most loaded CTA ordered, and in the walk's own order (c, c + grid, ...).
  if (i < grid) {
    int own = 0;
    for (int u = i; u < units; u += grid)
      own += order_cost<kBlockM>(p, u, m_blocks);
    atomicMax(&most_own, own);
    atomicMax(&most_ordered, load[i]);
  }
  __syncthreads();
  if (i == 0 && (float)most_own < min_gain * (float)most_ordered)
    order[0] = -1;
}

// The keep bits of one row of a partly masked tile (slot `slot` of params.block_bits),
// shifted so that bit (nt % 4) * 8 + e of word nt / 4 is the key nt * 8 + shift + e: a
// thread whose keys start at 2 t within each group of 8 loads its rows with shift 2 t
// and tests its scores with constant shifts.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void load_row_bits(const FjForwardParams &p, int slot, int r,
                                              int shift,
                                              unsigned (&row)[TileBits<kBlockN>::kWords]) {
  constexpr int kWords = TileBits<kBlockN>::kWords;
  const unsigned *src =
      p.block_bits + ((long long)slot * kBlockM + r) * kWords;
#pragma unroll
  for (int k = 0; k < kWords; ++k)
    row[k] = __ldg(src + k) >> shift;
}
// Whether key nt * 8 + e (e < 2) of a row loaded by load_row_bits is kept.
template <int kBlockN>
__device__ __forceinline__ bool row_bit(const unsigned (&row)[TileBits<kBlockN>::kWords],
                                        int nt, int e) {
  return (row[nt / 4] >> ((nt % 4) * 8 + e)) & 1u;
}

}  // namespace block_mask
}  // namespace fj
