// Family bwd_wgmma: the backward pass on Hopper (sm_90a), its five products on wgmma.
//
// The same four kernels and workspace as bwd_mma (prep, main, convert, and the
// deterministic dq kernel, which are bwd_mma's own); only the main kernel is new. A
// persistent grid of one CTA an SM, each walking blocks of 128 keys of one (batch,
// key/value head) in turn (for_each_block): two consumer warpgroups of 64 keys each,
// walking the query blocks (and the query heads of a GQA group) that see the block,
// kBlockM query rows per step:
//   S^T  = K Q^T      and  dP^T = V dO^T   (shared x shared, K-major: M = keys)
//   P^T  = exp2(S^T scale log2e - lse),  dS^T = P^T (dP^T - D)     (registers)
//   dV  += P^T dO     and  dK  += dS^T Q   (A from registers: the accumulator layout of
//                                           S^T is wgmma's A-fragment layout; B = dO, Q
//                                           read MN-major)
//   dQ   = dS K       (A = dS^T, stored to shared memory once, read MN-major)
// dK and dV stay in registers across the walk. The consumers copy a block's K and V with
// cp.async, issued as the last block's products end (rows past the block's keys
// zero-filled: no tensor map is needed for K and V, whose packed row count the caller
// need not give). A third warpgroup serves them, so that neither the steps' loads nor
// dQ's trip to global memory sit on their path:
//   - lane 0 of its warp 0 loads each step's Q and dO by TMA (the 128-byte-swizzled
//     panels wgmma reads) and lse and D by bulk copies into a ring of kStages stages,
//     one transaction barrier a stage. One thread issuing a handful of copies leaves the
//     serving warpgroup 24 registers, so the consumers get 240 (docs/PERF.md bw5);
//   - one thread per consumer (lane 0 of warps 2 and 3) adds the consumer's 64 x 64 dQ
//     slice, which the consumer leaves in shared memory in fp32 (and publishes after its
//     next step's first products) with where it goes, to the global accumulator with
//     one 16 KB bulk reduction (cp.reduce.async.bulk), the accumulator tiled to match
//     (bwd_mma::DqTiled). The consumer goes on to its next step.
//     docs/PERF.md bw1 measured a quarter of the time in the atomics when the consumers
//     added dQ themselves; bw2 measured bulk reductions of one row each, and atomics
//     from the serving warps, both slower; bw3 took the sends off the loading warps.
// Q and dO come through tensor maps (tuner/backward_kernel.cpp; rank 4: column, row,
// head, batch; rows past the sequence read as zeros, or with cu_seqlens as the next
// sequence's rows, which the mask drops). lse and D come as bulk copies of block_m + 4
// floats from the 16-byte boundary at or before the block's first row: a block's rows
// past its head's end read the next head's finite values, or the zeroed pad after the
// array (FJ_BWD_STATS_PAD), and are masked: P = 0 there, so dS = 0. (Tensor maps of
// fp32 rows, rank 1 or 2, stopped the kernel with an illegal instruction on an H100.)
//
// Causal attention is aligned bottom-right as in the forward; a key block skips the
// query blocks that see none of it, and only blocks that cross the diagonal or a
// sequence end are masked. A sliding window skips query blocks the same way
// (bwd_mma::query_blocks); the window's edges, a mask_mod, soft-capping and ALiBi's bias
// go through the forward's hook as bwd_mma's do (bwd_mma::feature_prob), soft-capping's
// derivative recovered from P (probs_to_dscores). With a block mask a key block walks
// only the steps its list names (Block::step).
#pragma once

#include "bwd_mma.cuh"
#include "fj_bwd_params.h"
#include "fj_common.cuh"
#include "fj_hopper.cuh"

namespace fj {

// With a split head dim: the 64-column panels of dK, dV and dQ each consumer takes
// (consumer 1 the panels after consumer 0's), chosen so that both do as few panels of
// products a step as the caller's columns allow. Panels past the caller's columns are
// zeros, so the plan covers only the panels that hold them (pk of dK and dQ, pv of dV),
// at least one of each output a consumer; even halves of the 256 columns where that
// cannot be (pk or pv 1), and where halves are already the least (equal head dims of
// 4 panels). generator::bwdWgmmaSplitPanels mirrors it (docs/PERF.md bw16).
struct SplitPanels {
  int k[2], v[2], q[2];
  __host__ __device__ constexpr bool uniform() const {
    return k[0] == k[1] && v[0] == v[1] && q[0] == q[1];
  }
};
__host__ __device__ constexpr SplitPanels split_panels(int pk, int pv) {
  SplitPanels best{{2, 2}, {2, 2}, {2, 2}};
  if (pk < 2 || pv < 2)
    return best;
  int best_cost = 1 << 20;
  for (int k = 1; k < pk; ++k)
    for (int v = 1; v < pv; ++v)
      for (int q = 1; q < pk; ++q) {
        const int n0 = k + v + q, n1 = 2 * pk + pv - n0;
        // The busier consumer sets the step's pace; among equals, the split nearest to
        // halves of each output.
        const int far = (2 * k > pk ? 2 * k - pk : pk - 2 * k) +
                        (2 * v > pv ? 2 * v - pv : pv - 2 * v) +
                        (2 * q > pk ? 2 * q - pk : pk - 2 * q);
        const int cost = (n0 > n1 ? n0 : n1) * 64 + far;
        if (cost < best_cost) {
          best_cost = cost;
          best = SplitPanels{{k, pk - k}, {v, pv - v}, {q, pk - q}};
        }
      }
  return best;
}

template <typename Element_, int kHeadDim_, int kBlockM_, int kStages_, bool kCausal_,
          typename Features_ = NoFeatures, int kValidDim_ = kHeadDim_,
          int kValidDimV_ = kValidDim_>
struct BwdWgmmaConfig {
  typedef Element_ Element;
  // Attention features: the window, ALiBi, soft-capping and a mask_mod, through the
  // forward's hook in scores_to_probs. Soft-capping's derivative scales dS; it is
  // recomputed from P where dS is made (probs_to_dscores), as the consumers have no
  // registers to keep it, and so not with ALiBi (whose bias P also holds). Never a
  // score_mod (no derivative).
  typedef Features_ Features;
  static_assert(!Features::kScoreMod && !(Features::kSoftcap > 0.f && Features::kAlibi),
                "bwd_wgmma takes the window, ALiBi, soft-capping without ALiBi and mask_mod");
  static constexpr bool kSoftcap = Features::kSoftcap > 0.f;
  // The head dim the products run on, whole 64-column panels that hold both of the
  // caller's: head_dim (kValidDim: Q, K, dQ, dK) and head_dim_v (kValidDimV: V, dO, dV).
  // The columns past them load as zeros (TMA's fill of Q and dO past their maps' columns,
  // load_panels_async's of K and V), so S^T and dP^T are exact and dK, dV and dQ get zero
  // columns there, which no store writes back (store_rows; the convert kernel's
  // kHeadDim). generator::bwdWgmmaPaddedHeadDim.
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kValidDim = kValidDim_;
  static constexpr int kValidDimV = kValidDimV_;
  static_assert(kValidDim % 8 == 0 && kValidDim <= kHeadDim, "the caller's columns");
  static_assert(kValidDimV % 8 == 0 && kValidDimV <= kHeadDim, "the caller's columns of V");
  static constexpr int kBlockM = kBlockM_;    // query rows per step
  static constexpr int kStages = kStages_;    // Q / dO / lse / D ring depth
  static constexpr bool kCausal = kCausal_;
  // A mask_mod's kernel walks the steps of the call's block mask when it has one
  // (FjBackwardParams::block_steps), else every step as other kernels do.
  static constexpr bool kBlockSteps = Features::kMaskMod;
  // Its partly masked steps test the block mask's keep bits where it has them, unless
  // the features also transform the scores: a third score loop beside those made d 128
  // causal ALiBi spill (their partly masked steps call mask_mod). generator::
  // BackwardEntries::stepBits says the same to the host.
  static constexpr bool kStepBits = kBlockSteps && !FeatureTraits<Features>::kTransforms;
  static constexpr int kConsumers = 2;        // warpgroups
  // dS^T goes to shared memory by stmatrix, four 8 x 8 tiles an instruction, where it
  // compiles without spills: not beside ALiBi or a mask_mod (ALiBi d 64 spilled 300 B,
  // d 128 40 B, a d 128 mask_mod 16 B), which keep 4-byte stores (docs/PERF.md bw18).
  static constexpr bool kDsByStmatrix = !Features::kAlibi && !Features::kMaskMod;
  // Above head dim 128, dK and dV of 64 keys x the head dim would take 256 registers a
  // thread: the block is then 64 keys, and the two consumers split the head dim for dK,
  // dV and dQ and the step's queries for S^T and dP^T, whose P^T and dS^T they exchange
  // through shared memory (docs/PERF.md bw8). Otherwise each takes 64 keys whole.
  static constexpr bool kSplitHead = kHeadDim > 128;
  static constexpr int kBlockN = kSplitHead ? 64 : 64 * kConsumers;
  static constexpr int kScoreCols = kSplitHead ? kBlockM / kConsumers : kBlockM;  // S^T's N
  // With a split head dim, the consumers' panels of dK, dV and dQ (split_panels), and the
  // panels of Q and dO a step loads: only those the products read.
  static constexpr SplitPanels kSplit =
      split_panels((kValidDim + 63) / 64, (kValidDimV + 63) / 64);
  static constexpr int kQPanels = kSplitHead ? kSplit.k[0] + kSplit.k[1] : kHeadDim / 64;
  static constexpr int kDoPanels = kSplitHead ? kSplit.v[0] + kSplit.v[1] : kHeadDim / 64;
  // A walk over tiles on a persistent grid (bwd_wgmma::for_each_block; the host's
  // BackwardEntries::tileWalk), but not with a split head dim, nor with a block mask's
  // step lists: either made ptxas spill across the walk.
  static constexpr bool kTileWalk = !kSplitHead && !kBlockSteps;
  // Causal tiles are unequal work, so a CTA takes its first tile by its index and claims
  // the rest from a counter in the workspace (FjBackwardParams::tile_counter) as it goes,
  // heaviest first: a static walk gave CTAs up to 3x unequal work (docs/PERF.md bw10).
  // A thread of the serving warpgroup claims each as late as the block before allows, and
  // passes it to the loading thread and the consumers through a slot in shared memory
  // (claim_tiles, NextTile).
  static constexpr bool kClaimsTiles = kTileWalk && kCausal;
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = kConsumerThreads + 128;  // and the serving warpgroup

  // Registers after setmaxnreg: 168 each at launch (384 threads, one CTA per SM); the
  // serving warpgroup gives back all but 24, as its loads are TMA boxes from one thread
  // (bw2-bw4's 64 cp.async threads needed 56).
  static constexpr int kServerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kServerRegs * 128 + kConsumerRegs * kConsumerThreads <= 168 * kThreads,
                "the register file of one CTA");

  static_assert(kHeadDim % 64 == 0, "head dims of whole 128-byte panels");
  static_assert(kBlockM % 64 == 0, "query steps of whole 64-row panels");
  // The split head dim may take one stage (docs/PERF.md bw8).
  static_assert(kStages >= (kSplitHead ? 1 : 2), "the ring's stages");
  static_assert(!kSplitHead || kBlockM == 64, "a split head dim: 64-query steps");

  // dQ = dS K: the warpgroups split the step's query rows into 64-row slices, then the
  // head dim; each takes one slice of whole panels.
  static constexpr int kDqRowSlices = kBlockM / 64;
  static constexpr int kDqColSlices = kConsumers / kDqRowSlices;
  static constexpr int kDqCols = kHeadDim / kDqColSlices;
  static_assert(kDqRowSlices * kDqColSlices == kConsumers && kDqCols % 64 == 0,
                "dQ slices of whole panels");
  // A consumer's dQ in shared memory: 64 rows x kDqCols floats as kDqCols / 64
  // consecutive 64 x 64 slices of the tiled accumulator (bwd_mma::DqTiled), each in the
  // accumulator's register order, so that one bulk reduction adds them all; each
  // thread's quads of registers land in different banks. With a split head dim the
  // consumers add dQ from registers instead (vector reductions): its 64 KB of staging
  // are the second stage of the ring (docs/PERF.md bw8).
  static constexpr bool kDqFromRegisters = kSplitHead;
  static constexpr int kDqStageBytes = kDqFromRegisters ? 0 : 64 * kDqCols * 4;

  // Shared memory, each operand a whole number of 1024-byte swizzle atoms from a
  // 1024-byte aligned base: K, V, the Q and dO rings, dS^T (two buffers: a consumer may
  // write the next step's while the other still reads this one's) and with a split head
  // dim P^T likewise, lse and D per stage, the consumers' dQ slices, then the mbarriers:
  // the ring's (full, empty) and each dQ slice's (written, read); then where each
  // consumer's last two dQ slices go.
  static constexpr int kKBytes = kBlockN * kHeadDim * 2;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kPsBytes = kSplitHead ? 2 * kDsBytes : 0;
  // lse and D of a stage: block_m + 4 floats each (the copy starts up to 3 rows early).
  static constexpr int kStatsFloats = kBlockM + 4;
  static constexpr int kStatsBytes = 2 * kStatsFloats * 4;
  static constexpr int kSmemBytes = 1024 + 2 * kKBytes + 2 * kStages * kQBytes +
                                    2 * kDsBytes + kPsBytes + kStages * kStatsBytes +
                                    kConsumers * kDqStageBytes +
                                    (2 * kStages + 2 * kConsumers) * 8 + kConsumers * 2 * 8 +
                                    (kClaimsTiles ? (2 * 3 + 1) * 8 : 0);
  // A block's end stages dK in the dS^T buffers and dV in the dQ slices, which K and V
  // do not use, so that the next block's K and V load meanwhile (bwd_wgmma::
  // finish_block). With a split head dim they are staged in K's and V's own space, and
  // the next load waits for them.
  static_assert(kSplitHead || (kKBytes <= 2 * kDsBytes && kKBytes <= kConsumers * kDqStageBytes),
                "dK fits the dS^T buffers and dV the dQ slices");
};

namespace bwd_wgmma {

// Byte offset of 16-byte chunk c (8 elements) of row r in a tile of kRows rows stored as
// panels of 64 columns: 128-byte rows, chunks swizzled with the row's position in its
// 1024-byte atom, as TMA writes and wgmma's 128-byte swizzle mode reads them.
template <int kRows> __device__ __forceinline__ u32 panel_offset(int r, int c) {
  return (u32)((c >> 3) * kRows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Copies a kRows x kCols tile (rows `row_stride` elements apart) into panels with
// cp.async; rows at or past `valid_rows`, and columns at or past kValidCols, are
// zero-filled. Each thread keeps one chunk column and steps down the rows (K and V, once
// a block).
template <int kRows, int kCols, int kThreads, int kValidCols = kCols>
__device__ __forceinline__ void load_panels_async(u32 dst, const u16 *src, long long row_stride,
                                                  int valid_rows, int tid) {
  constexpr int kChunks = kCols / 8;
  constexpr int kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRows % kRowStep == 0, "whole passes");
  const int r0 = tid / kChunks, c = tid % kChunks;
  if constexpr (kValidCols < kCols)
    if (c >= kValidCols / 8)
      valid_rows = 0;  // this thread's chunk column is past the caller's columns
  const u16 *from = src + r0 * row_stride + c * 8;
#pragma unroll 1  // few registers: the consumers issue it beside dK and dV
  for (int it = 0; it < kRows / kRowStep; ++it) {
    const int r = r0 + it * kRowStep;
    cp_async_16(dst + panel_offset<kRows>(r, c), r < valid_rows ? from : src, r < valid_rows);
    from += kRowStep * row_stride;
  }
}

// acc = A B^T over the head dim, both operands K-major panels: A is 64 rows of a tile of
// kRowsA rows (from a_rows), B kN rows (wgmma's N) of a tile of kRowsB rows (from b_rows).
// Only the k-steps that hold the operands' kValidCols columns: past them both sides are
// zeros (S^T over head_dim, dP^T over head_dim_v on padded panels; docs/PERF.md bw16).
template <typename Cfg, int kRowsA, int kRowsB, int kN, int kValidCols>
__device__ __forceinline__ void product_over_d(float (&acc)[kN / 2], u32 a_rows, u32 b_rows) {
  static_assert(kValidCols <= Cfg::kHeadDim, "columns of the panels");
  const u64 a0 = wgmma_desc(a_rows, 16, 1024, 128);
  const u64 b0 = wgmma_desc(b_rows, 16, 1024, 128);
#pragma unroll
  for (int ks = 0; ks < (kValidCols + 15) / 16; ++ks) {
    const int panel = ks / 4, within = ks % 4;
    wgmma_bwd_st(acc, wgmma_desc_add(a0, panel * kRowsA * 128 + within * 32),
        wgmma_desc_add(b0, panel * kRowsB * 128 + within * 32), ks > 0 ? 1 : 0);
  }
}

// acc += X^T B for X^T in registers (frag: 16 query columns per k-step) and B = Q or dO
// read MN-major (kBlockM rows of the head dim, panels kBlockM * 128 bytes apart), its
// first 2 kRegs columns.
template <typename Cfg, int kRegs>
__device__ __forceinline__ void product_over_queries(float (&acc)[kRegs],
                                                     const u32 (&frag)[Cfg::kBlockM / 16][4],
                                                     u32 b_tile) {
  const u64 b0 = wgmma_desc(b_tile, Cfg::kBlockM * 128, 1024, 128);
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockM / 16; ++kk)
    wgmma_bwd_dkdv(acc, frag[kk], wgmma_desc_add(b0, kk * 16 * 128));
}

// The A-fragment layout of a score accumulator (16 query columns per k-step), rounded.
template <typename Cfg>
__device__ __forceinline__ void pack_fragments(u32 (&frag)[Cfg::kBlockM / 16][4],
                                               const float (&acc)[Cfg::kBlockM / 2]) {
  typedef typename Cfg::Element T;
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockM / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      frag[kk][r] = pack2<T>(acc[8 * kk + 2 * r], acc[8 * kk + 2 * r + 1]);
}

// Writes this warpgroup's accumulator rows (64 key rows from `row0` of the tile, its
// 2 kRegs columns of the head dim from chunk `chunk0`) to a panel tile of kRows rows,
// times `scale`.
template <typename Cfg, int kRows, int kRegs>
__device__ __forceinline__ void stage_rows(u32 tile, const float (&acc)[kRegs], int row0,
                                           int chunk0, float scale, int g, int t) {
  typedef typename Cfg::Element T;
#pragma unroll
  for (int j = 0; j < kRegs / 4; ++j)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = row0 + g + 8 * hf;
      st_shared_u32(tile + panel_offset<kRows>(r, chunk0 + j) + t * 4,
                    pack2<T>(acc[4 * j + 2 * hf] * scale, acc[4 * j + 2 * hf + 1] * scale));
    }
}

// Copies the first `rows` rows of a staged panel tile of kRows rows and kPanelCols
// columns to global memory, their first kCols columns, kThreads threads (tid among
// them). The loop walks the whole panel width, whatever kCols: with dV's 64 columns of a
// 128-column panel beside dK's 128, a loop of its own made ptxas spill (24 bytes, d 128
// / dv 64).
template <int kRows, int kThreads, int kCols, int kPanelCols>
__device__ __forceinline__ void store_rows(u16 *gmem, long long row_stride, u32 tile, int rows,
                                           int tid) {
  constexpr int kChunks = kPanelCols / 8;
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < rows && (kCols == kPanelCols || c < kCols / 8))
      st_global_v4(gmem + (long long)r * row_stride + c * 8,
                   ld_shared_v4(tile + panel_offset<kRows>(r, c)));
  }
}

// ---- main: dK and dV of one key block, dQ by bulk reductions ------------------------

// The consumers' named barrier (0 is __syncthreads), for their dS^T exchange. The
// hand-overs between consumers and serving warps are mbarriers, every thread arriving
// for its own accesses (an mbarrier arrival releases only the arriving thread's).
constexpr int kBarDs = 1;

// The shared-memory carve-up, from the 1024-byte aligned base.
template <typename Cfg> struct Carve {
  u32 base;
  __device__ explicit Carve(unsigned char *smem) : base((smem_addr(smem) + 1023) & ~1023u) {}
  // In the order BwdWgmmaConfig::kSmemBytes counts it; one base register, the rest
  // constants.
  static constexpr u32 kV = Cfg::kKBytes, kQ = kV + Cfg::kKBytes;
  static constexpr u32 kDo = kQ + Cfg::kStages * Cfg::kQBytes;
  static constexpr u32 kDs = kDo + Cfg::kStages * Cfg::kQBytes;
  static constexpr u32 kPs = kDs + 2 * Cfg::kDsBytes;  // P^T's buffers (split head dim)
  static constexpr u32 kStats = kPs + Cfg::kPsBytes;
  static constexpr u32 kDq = kStats + Cfg::kStages * Cfg::kStatsBytes;
  static constexpr u32 kFull = kDq + Cfg::kConsumers * Cfg::kDqStageBytes;
  static constexpr u32 kEmpty = kFull + Cfg::kStages * 8;
  static constexpr u32 kDqWritten = kEmpty + Cfg::kStages * 8;
  static constexpr u32 kDqRead = kDqWritten + Cfg::kConsumers * 8;
  static constexpr u32 kDqDst = kDqRead + Cfg::kConsumers * 8;  // two slots a consumer
  // Two tile slots (with kClaimsTiles), each a tile index and its full and empty
  // barriers, then the loading thread's request for the next tile.
  static constexpr u32 kTileSlots = kDqDst + Cfg::kConsumers * 2 * 8;
  static constexpr u32 kEnd = kTileSlots + (Cfg::kClaimsTiles ? (2 * 3 + 1) * 8 : 0);
  __device__ __forceinline__ u32 s_k() const { return base; }
  __device__ __forceinline__ u32 s_v() const { return base + kV; }
  __device__ __forceinline__ u32 s_q(int stage) const { return base + kQ + stage * Cfg::kQBytes; }
  __device__ __forceinline__ u32 s_do(int stage) const {
    return base + kDo + stage * Cfg::kQBytes;
  }
  __device__ __forceinline__ u32 s_ds(int buffer) const {
    return base + kDs + buffer * Cfg::kDsBytes;
  }
  __device__ __forceinline__ u32 s_ps(int buffer) const {
    return base + kPs + buffer * Cfg::kDsBytes;
  }
  __device__ __forceinline__ u32 s_stats(int stage) const {
    return base + kStats + stage * Cfg::kStatsBytes;
  }
  __device__ __forceinline__ u32 s_dq(int c) const { return base + kDq + c * Cfg::kDqStageBytes; }
  __device__ __forceinline__ u32 full(int stage) const { return base + kFull + stage * 8; }
  __device__ __forceinline__ u32 empty(int stage) const { return base + kEmpty + stage * 8; }
  __device__ __forceinline__ u32 dq_written(int c) const { return base + kDqWritten + c * 8; }
  __device__ __forceinline__ u32 dq_read(int c) const { return base + kDqRead + c * 8; }
  // Where consumer c's dQ slice of step s goes: its float offset in the accumulator
  // (bwd_mma::DqTiled), or -1 once the consumer has no more steps (send_dq).
  __device__ __forceinline__ u32 dq_dst(int c, int s) const {
    return base + kDqDst + (c * 2 + (s & 1)) * 8;
  }
  // The tile of the CTA's u-th block, posted by the claiming thread (tile_full: its one
  // arrival) and taken by the loading thread and every consumer thread (tile_empty).
  __device__ __forceinline__ u32 tile_slot(int u) const { return base + kTileSlots + (u & 1) * 8; }
  __device__ __forceinline__ u32 tile_full(int u) const {
    return base + kTileSlots + 16 + (u & 1) * 8;
  }
  __device__ __forceinline__ u32 tile_empty(int u) const {
    return base + kTileSlots + 32 + (u & 1) * 8;
  }
  __device__ __forceinline__ u32 tile_wanted() const { return base + kTileSlots + 48; }
};

// What the roles share: the key block, its walk over (query head, query block) steps
// and the shared-memory carve-up.
template <typename Cfg> struct Block : Carve<Cfg> {
  SeqExtent seq;
  int n0, keys_valid, group, diag, m_begin, m_end, steps_per_head, steps, h_kv, b;
  const unsigned *list;  // the block mask's steps of this block (Cfg::kBlockSteps), or null
  const int *slots;      // their keep-bit slots (with list)
  __device__ explicit Block(unsigned char *smem) : Carve<Cfg>(smem) {}

  // Step s: query block m_begin + s % steps_per_head (< m_end) of query head
  // h_kv * group + s / steps_per_head, or with a block mask its list's entry s. step()
  // gives its first row, query head and whether it may be partly masked, bit_slot its
  // keep-bit slot (-1: none); first_step / next_step walk the same order by counters (h
  // within the group, query block mb), without divisions (the loading thread).
  __device__ __forceinline__ void step(int s, int &m0, int &q_head, bool &partial) const {
    if (Cfg::kBlockSteps && list) {
      const unsigned e = list[s];
      m0 = bwd_mma::step_block(e) * Cfg::kBlockM;
      q_head = h_kv * group + bwd_mma::step_head(e);
      partial = bwd_mma::step_partial(e);
      return;
    }
    m0 = (m_begin + s % steps_per_head) * Cfg::kBlockM;
    q_head = h_kv * group + s / steps_per_head;
    partial = true;  // the hook decides
  }
  // Read where it is used rather than kept from step(), so that it holds no register
  // across the step's products.
  __device__ __forceinline__ int bit_slot(int s, bool partial) const {
    return Cfg::kStepBits && list && partial ? slots[s] : -1;
  }
  __device__ __forceinline__ void first_step(int &h, int &mb) const {
    h = 0;
    mb = m_begin;
    if (Cfg::kBlockSteps && list && steps > 0) {
      h = bwd_mma::step_head(list[0]);
      mb = bwd_mma::step_block(list[0]);
    }
  }
  // From step s to step s + 1.
  __device__ __forceinline__ void next_step(int s, int &h, int &mb) const {
    if (Cfg::kBlockSteps && list) {
      if (s + 1 < steps) {
        h = bwd_mma::step_head(list[s + 1]);
        mb = bwd_mma::step_block(list[s + 1]);
      }
      return;
    }
    if (++mb >= m_end) {
      mb = m_begin;
      ++h;
    }
  }
};

// The main kernel's tensor maps (kernel parameters, encoded per call by the host).
struct Maps {
  const TensorMap &q, &dout;
};

// `bytes` (a multiple of 16) from global `src` (16-byte aligned) into shared memory,
// completion counted in bytes on `bar`.
__device__ __forceinline__ void bulk_load(u32 dst, const void *src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// The (ceil(seqlen_k / kBlockN), heads_kv, batch) tiles of the main pass, tile i of them
// (causal ones in bwd_mma::causal_tile's order), and whether a tile has keys (with
// cu_seqlens a sequence may have fewer than the longest).
template <typename Cfg> __device__ __forceinline__ int tile_count(const FjForwardParams &p) {
  return (p.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN * p.heads_kv * p.batch;
}
template <typename Cfg>
__device__ __forceinline__ bool has_keys(const FjForwardParams &p, const bwd_mma::CtaTile &tile) {
  return tile.key_block * Cfg::kBlockN < seq_extent(p, tile.b).seqlen_k;
}
template <typename Cfg>
__device__ __forceinline__ bwd_mma::CtaTile tile_at(const FjForwardParams &p, int i) {
  const int blocks = (p.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  if (Cfg::kCausal)
    return bwd_mma::causal_tile(i, blocks, p.heads_kv, p.batch);
  return {i % blocks, (i / blocks) % p.heads_kv, i / (blocks * p.heads_kv)};
}
// This CTA's first tile from i on (i, i + gridDim.x, ...) that has keys, or -1.
template <typename Cfg> __device__ __forceinline__ int next_tile(const FjForwardParams &p, int i) {
  const int tiles = tile_count<Cfg>(p);
  for (; i < tiles; i += gridDim.x)
    if (has_keys<Cfg>(p, tile_at<Cfg>(p, i)))
      return i;
  return -1;
}

// With kClaimsTiles: the next tile with keys after the CTA's first (gridDim.x of them,
// one a CTA by its index), claimed from the workspace's counter, which the host zeroes
// before each call; -1 once none is left.
template <typename Cfg>
__device__ __forceinline__ int claim_tile(const FjBackwardParams &P) {
  const FjForwardParams &p = P.fwd;
  const int tiles = tile_count<Cfg>(p);
#pragma unroll 1
  for (;;) {
    const int i = (int)gridDim.x + atomicAdd(P.tile_counter, 1);
    if (i >= tiles)
      return -1;
    if (has_keys<Cfg>(p, tile_at<Cfg>(p, i)))
      return i;
  }
}
// Tile i (-1: the walk's end) of the CTA's u-th block into its slot, once the loading
// thread and every consumer thread have taken the one posted two blocks before.
template <typename Cfg> __device__ __forceinline__ void post_tile(const Carve<Cfg> &w, int u, int i) {
  mbar_wait(w.tile_empty(u), ((u >> 1) & 1) ^ 1);
  st_shared_u32(w.tile_slot(u), (u32)i);
  mbar_arrive(w.tile_full(u));
}
template <typename Cfg> __device__ __forceinline__ int take_tile(const Carve<Cfg> &w, int u) {
  mbar_wait(w.tile_full(u), (u >> 1) & 1);
  const int i = (int)ld_shared_u32(w.tile_slot(u));
  mbar_arrive(w.tile_empty(u));
  return i;
}
// The claiming thread (lane 0 of the serving warpgroup's warp 1): the CTA's first tile,
// then each next one once the loading thread has loaded a block's steps (tile_wanted),
// as late as that thread can wait for it (NextTile). A thread of its own: the loading
// thread's 24 registers spilled with the claim.
template <typename Cfg>
__device__ __forceinline__ void claim_tiles(const FjBackwardParams &P, const Carve<Cfg> &w) {
  int i = blockIdx.x;  // < the tiles: the host launches at most one CTA a tile
  if (!has_keys<Cfg>(P.fwd, tile_at<Cfg>(P.fwd, i)))
    i = claim_tile<Cfg>(P);
  post_tile<Cfg>(w, 0, i);
#pragma unroll 1
  for (int u = 1; i >= 0; ++u) {
    mbar_wait(w.tile_wanted(), (u - 1) & 1);
    i = claim_tile<Cfg>(P);
    post_tile<Cfg>(w, u, i);
  }
}

// The CTA's first tile, or -1: by its index (next_tile) or, with kClaimsTiles, as the
// claiming thread posted it.
template <typename Cfg>
__device__ __forceinline__ int first_tile(const FjBackwardParams &P, const Carve<Cfg> &w) {
  if constexpr (Cfg::kClaimsTiles)
    return take_tile<Cfg>(w, 0);
  return next_tile<Cfg>(P.fwd, blockIdx.x);
}
// The tile after the CTA's u-th block, or -1, asked for where it is needed: known as the
// block begins (next_tile), or with kClaimsTiles claimed as late as the block allows,
// so that a CTA does not hold a heavy tile while it walks another (docs/PERF.md bw11):
// the loading thread asks for it once it has loaded the block's steps, and the
// consumers take it at the block's end (finish_block), as they load its K and V.
template <typename Cfg> struct NextTile {
  int known, u;
  __device__ __forceinline__ int take(const Carve<Cfg> &w) const {
    if constexpr (Cfg::kClaimsTiles)
      return take_tile<Cfg>(w, u + 1);
    return known;
  }
};

// K and V of `tile` into shared memory, by the consumers' cp.async (ct: the thread among
// them), rows past the block's keys zero-filled: issued for the next block as soon as
// the last one's products are done with them, so that they load under its end
// (finish_block); kv_ready waits for them. (A warp of the serving warpgroup copying them
// across the blocks needed more than its 24 registers.)
template <typename Cfg>
__device__ __forceinline__ void issue_kv(const FjForwardParams &p, const Carve<Cfg> &smem,
                                         const bwd_mma::CtaTile &tile, int ct) {
  constexpr int D = Cfg::kHeadDim, BN = Cfg::kBlockN;
  const SeqExtent seq = seq_extent(p, tile.b);
  const int n0 = tile.key_block * BN, keys_valid = imin(BN, seq.seqlen_k - n0);
  const u16 *k = (const u16 *)p.k +
                 tensor_base(seq.k_offset, tile.b, tile.h_kv, p.k_batch_stride, p.k_row_stride,
                             p.k_head_stride) +
                 (long long)n0 * p.k_row_stride;
  const u16 *v = (const u16 *)p.v +
                 tensor_base(seq.k_offset, tile.b, tile.h_kv, p.v_batch_stride, p.v_row_stride,
                             p.v_head_stride) +
                 (long long)n0 * p.v_row_stride;
  load_panels_async<BN, D, Cfg::kConsumerThreads, Cfg::kValidDim>(smem.s_k(), k, p.k_row_stride,
                                                                  keys_valid, ct);
  load_panels_async<BN, D, Cfg::kConsumerThreads, Cfg::kValidDimV>(smem.s_v(), v, p.v_row_stride,
                                                                   keys_valid, ct);
  cp_async_commit();
}
// Before a block's first products: this thread's copies done, made visible to wgmma,
// then every consumer thread's.
template <typename Cfg> __device__ __forceinline__ void kv_ready() {
  cp_async_wait<0>();
  fence_proxy_async_smem();  // cp.async wrote the operands wgmma reads
  named_sync(kBarDs, Cfg::kConsumerThreads);
}

// The loading thread (lane 0 of the serving warpgroup's warp 0): each step's Q and dO
// (by TMA) and lse and D (bulk copies) into the ring, a stage's transaction barrier
// counting their bytes. A thread of its own, so that the first steps' loads overlap K's
// and V's, and a block's first steps load under the last block's last ones.
// The ring runs on over the CTA's blocks: s0 is the CTA's steps before this block's.
// The loads of step s wait for the consumers to free a stage, which they do as they
// finish step s - kStages. The walk goes by counters rather than divisions: this
// warpgroup has 24 registers.
template <typename Cfg>
__device__ __forceinline__ void load_steps(const FjBackwardParams &P, const Maps &maps,
                                           const Block<Cfg> &w, int s0) {
  constexpr int D = Cfg::kHeadDim, BM = Cfg::kBlockM;
  const FjForwardParams &p = P.fwd;
  const int batch = w.seq.tma_batch(w.b);
  int h, mb;  // the query head within the group and the query block
  w.first_step(h, mb);
  for (int s = s0; s < s0 + w.steps; ++s) {
    const int stage = s % Cfg::kStages;
    mbar_wait(w.empty(stage), ((s / Cfg::kStages) & 1) ^ 1);
    const int head = w.h_kv * w.group + h, m0 = mb * BM, row = w.seq.tma_q_row(m0);
    const u32 full = w.full(stage);
    if constexpr (Cfg::kQPanels == D / 64 && Cfg::kDoPanels == D / 64) {
      mbar_arrive_expect_tx(full, 2 * Cfg::kQBytes + Cfg::kStatsBytes);
#pragma unroll
      for (int pn = 0; pn < D / 64; ++pn) {
        tma_load_4d(w.s_q(stage) + pn * BM * 128, maps.q, full, pn * 64, row, head, batch);
        tma_load_4d(w.s_do(stage) + pn * BM * 128, maps.dout, full, pn * 64, row, head, batch);
      }
    } else {  // only the panels the products read (BwdWgmmaConfig::kQPanels)
      mbar_arrive_expect_tx(full, (Cfg::kQPanels + Cfg::kDoPanels) * BM * 128 + Cfg::kStatsBytes);
#pragma unroll
      for (int pn = 0; pn < Cfg::kQPanels; ++pn)
        tma_load_4d(w.s_q(stage) + pn * BM * 128, maps.q, full, pn * 64, row, head, batch);
#pragma unroll
      for (int pn = 0; pn < Cfg::kDoPanels; ++pn)
        tma_load_4d(w.s_do(stage) + pn * BM * 128, maps.dout, full, pn * 64, row, head, batch);
    }
    const long long aligned = lse_index(p, w.seq, head, m0) & ~3ll;  // 16 bytes
    bulk_load(w.s_stats(stage), P.lse_log2 + aligned, Cfg::kStatsFloats * 4, full);
    bulk_load(w.s_stats(stage) + Cfg::kStatsFloats * 4, P.dpsum + aligned,
              Cfg::kStatsFloats * 4, full);
    w.next_step(s - s0, h, mb);
  }
}

// The sending thread of consumer c (lane 0 of serving warp 2 + c): each step's dQ slice,
// which the consumer leaves in shared memory in fp32, added to the global accumulator
// with one bulk reduction (16 KB a 64-column slice) into the tiled accumulator (rows past
// the sequence's end add zeros to its padding), the slice handed back once read. A thread
// of its own, so that no load waits for a reduction to be read (docs/PERF.md bw3: with
// one thread doing both, the consumers waited for their slice buffer for 15 % of their
// time). The consumer also writes where each slice goes (dq_dst): a walk over the
// blocks does not fit this warpgroup's 24 registers. It ends at the consumer's -1.
template <typename Cfg>
__device__ __forceinline__ void send_dq(const FjBackwardParams &P, const Carve<Cfg> &smem,
                                        int c) {
#pragma unroll 1
  for (int s = 0;; ++s) {
    mbar_wait(smem.dq_written(c), s & 1);
    long long offset;
    asm volatile("ld.shared.s64 %0, [%1];\n" : "=l"(offset) : "r"(smem.dq_dst(c, s)) : "memory");
    if (offset < 0)
      break;
    asm volatile(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
            P.dq_accum + offset),
        "r"(smem.s_dq(c)), "n"(Cfg::kDqStageBytes)
        : "memory");
    bulk_commit();
    bulk_wait_read();  // the slice has been read: the consumer may write the next
    mbar_arrive(smem.dq_read(c));
  }
  bulk_wait();  // the last reductions, before the CTA's shared memory goes
}

// ---- a consumer's step, in pieces that both step orders use ----

// scores_to_probs with features, masked or not (bwd_mma::feature_prob): this thread's
// scores of keys w.n0 + key_row (+ 8) and the warpgroup's queries from q0.
template <typename Cfg, bool kMasked>
__device__ __forceinline__ void feature_probs(float (&acc_s)[Cfg::kScoreCols / 2],
                                              const FjForwardParams &p, const Block<Cfg> &w,
                                              const ScoreHook<typename Cfg::Features> &hook,
                                              int q0, int key_row, u32 s_lse, int t,
                                              bool crosses, bool feature_mask) {
#pragma unroll
  for (int j = 0; j < Cfg::kScoreCols / 8; ++j) {
    const u32 addr = s_lse + (j * 8 + 2 * t) * 4;
    const float l0 = __uint_as_float(ld_shared_u32(addr));
    const float l1 = __uint_as_float(ld_shared_u32(addr + 4));
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * j + e;
      const int key = w.n0 + key_row + 8 * ((i >> 1) & 1);
      const int query = q0 + (i >> 2) * 8 + 2 * t + (i & 1);
      const bool dropped = crosses && (key >= w.seq.seqlen_k || query >= w.seq.seqlen_q ||
                                       (Cfg::kCausal && key > query + w.diag));
      float unused_dl;  // soft-capping's: probs_to_dscores recovers it from P
      acc_s[i] = bwd_mma::feature_prob<kMasked>(hook, acc_s[i], p.scale_log2, query, key,
                                                dropped, feature_mask, (e & 1) ? l1 : l0,
                                                unused_dl);
    }
  }
}

// The keep bits of a partly masked step with a slot (bwd_mma::StepBits, written by the
// block mask's builder), for this thread's key rows key_row and key_row + 8 and its
// warpgroup's kScoreCols queries from `query0` (within the step), each word shifted right
// by 2 t: bit 8 (j % 4) + (e & 1) of word j / 4 of row (e >> 1) & 1 is then the pair of
// acc_s[4 j + e]. They hold every mask (sequence ends, causal, the window, mask_mod), so
// such a step calls no mask_mod. Asked into L1 as the step begins (prefetch), under its
// first products, and loaded after them, so that they hold no registers across them.
template <typename Cfg> struct KeepBits {
  typedef bwd_mma::StepBits<Cfg::kBlockM, Cfg::kBlockN> Bits;
  static constexpr int kWords = Cfg::kScoreCols / 32;
  static_assert(Cfg::kScoreCols % 32 == 0, "whole words of queries a warpgroup");
  unsigned row[2][kWords];
  __device__ static __forceinline__ const unsigned *at(const FjBackwardParams &P, int slot,
                                                        int key_row, int query0) {
    return P.block_step_bits + (long long)slot * Bits::kSlotWords + key_row * Bits::kWords +
           query0 / 32;
  }
  __device__ static __forceinline__ void prefetch(const FjBackwardParams &P, int slot,
                                                  int key_row, int query0) {
    if (slot < 0)
      return;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      asm volatile("prefetch.global.L1 [%0];" ::"l"(at(P, slot, key_row + 8 * hf, query0)));
  }
  __device__ __forceinline__ void load(const FjBackwardParams &P, int slot, int key_row,
                                       int query0, int t) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int k = 0; k < kWords; ++k)
        row[hf][k] = __ldg(at(P, slot, key_row + 8 * hf, query0) + k) >> (2 * t);
  }
  __device__ __forceinline__ bool keeps(int j, int e) const {
    return (row[(e >> 1) & 1][j / 4] >> (8 * (j % 4) + (e & 1))) & 1u;
  }
};

// feature_probs for a step with keep bits: the bits say which pairs are dropped. (One
// function for both, the test passed in as a lambda, made bwd_wgmma's d 64 kernels with
// a window and ALiBi spill 136-224 bytes.)
template <typename Cfg>
__device__ __forceinline__ void keep_bit_probs(float (&acc_s)[Cfg::kScoreCols / 2],
                                               const FjForwardParams &p, const Block<Cfg> &w,
                                               const ScoreHook<typename Cfg::Features> &hook,
                                               int q0, int key_row, u32 s_lse, int t,
                                               const KeepBits<Cfg> &bits) {
#pragma unroll
  for (int j = 0; j < Cfg::kScoreCols / 8; ++j) {
    const u32 addr = s_lse + (j * 8 + 2 * t) * 4;
    const float l0 = __uint_as_float(ld_shared_u32(addr));
    const float l1 = __uint_as_float(ld_shared_u32(addr + 4));
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = w.n0 + key_row + 8 * ((e >> 1) & 1);
      const int query = q0 + j * 8 + 2 * t + (e & 1);
      float unused_dl;
      acc_s[4 * j + e] = bwd_mma::feature_prob<true>(
          hook, acc_s[4 * j + e], p.scale_log2, query, key, !bits.keeps(j, e), false,
          (e & 1) ? l1 : l0, unused_dl);
    }
  }
}

// P^T = exp2(S^T scale log2e - lse) in place, masked where the block crosses a sequence
// end or the diagonal. This warpgroup's kScoreCols queries of the step begin at q0 (its
// lse at s_lse); key_row: this thread's first key row within the block. With features,
// the scores of query head q_head go through the forward's hook (bwd_mma::feature_prob);
// a block mask's partly masked step s with keep bits (Block::bit_slot) is masked by them.
template <typename Cfg>
__device__ __forceinline__ void scores_to_probs(float (&acc_s)[Cfg::kScoreCols / 2],
                                                const FjBackwardParams &P, const Block<Cfg> &w,
                                                int m0, int q0, int key_row, u32 s_lse, int t,
                                                int q_head, bool partial, int s) {
  typedef typename Cfg::Features F;
  const FjForwardParams &p = P.fwd;
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, NC = Cfg::kScoreCols;
  const bool crosses = m0 + BM > w.seq.seqlen_q || w.n0 + BN > w.seq.seqlen_k ||
                       (Cfg::kCausal && w.n0 + BN - 1 > m0 + w.diag);
  if constexpr (FeatureTraits<F>::kAny) {
    const ScoreHook<F> hook(p, w.b, q_head, w.seq);
    if constexpr (Cfg::kStepBits) {
      const int slot = w.bit_slot(s, partial);
      if (slot >= 0) {
        KeepBits<Cfg> bits;
        bits.load(P, slot, key_row, q0 - m0, t);
        keep_bit_probs<Cfg>(acc_s, p, w, hook, q0, key_row, s_lse, t, bits);
        return;
      }
    }
    const bool feature_mask = hook.tile_needs_mask(w.n0, BN, m0, m0 + BM - 1, partial);
    if (bwd_mma::not_masked<F, Cfg::kCausal>(crosses, feature_mask))  // tests where needed
      feature_probs<Cfg, false>(acc_s, p, w, hook, q0, key_row, s_lse, t, crosses, false);
    else
      feature_probs<Cfg, true>(acc_s, p, w, hook, q0, key_row, s_lse, t, crosses, feature_mask);
    return;
  }
  if (crosses) {
#pragma unroll
    for (int i = 0; i < NC / 2; ++i) {
      const int key = w.n0 + key_row + 8 * ((i >> 1) & 1);
      const int query = q0 + (i >> 2) * 8 + 2 * t + (i & 1);
      if (key >= w.seq.seqlen_k || query >= w.seq.seqlen_q ||
          (Cfg::kCausal && key > query + w.diag))
        acc_s[i] = bwd_mma::neg_inf();
    }
  }
#pragma unroll
  for (int j = 0; j < NC / 8; ++j) {
    const u32 addr = s_lse + (j * 8 + 2 * t) * 4;
    const float l0 = __uint_as_float(ld_shared_u32(addr));
    const float l1 = __uint_as_float(ld_shared_u32(addr + 4));
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc_s[4 * j + e] = fast_exp2(acc_s[4 * j + e] * p.scale_log2 - ((e & 1) ? l1 : l0));
  }
}

__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// dS^T = P^T (dP^T - D), in place of dP^T. With soft-capping, times its derivative
// 1 - t^2, t = tanh(s scale / cap): P = exp2(t cap log2e - lse log2e), so t comes back
// from P and the row's lse (stored kStatsFloats floats before D) with one lg2 a score,
// where keeping it from scores_to_probs would take a register a score. P = 0 (dropped,
// or underflowed) gives dS = 0, as it must.
template <typename Cfg>
__device__ __forceinline__ void probs_to_dscores(float (&acc_dp)[Cfg::kScoreCols / 2],
                                                 const float (&acc_s)[Cfg::kScoreCols / 2],
                                                 u32 s_dpsum, int t) {
  typedef typename Cfg::Features F;
#pragma unroll
  for (int j = 0; j < Cfg::kScoreCols / 8; ++j) {
    const u32 addr = s_dpsum + (j * 8 + 2 * t) * 4;
    const float d0 = __uint_as_float(ld_shared_u32(addr));
    const float d1 = __uint_as_float(ld_shared_u32(addr + 4));
    if constexpr (Cfg::kSoftcap) {
      constexpr float kToT = 1.f / (F::kSoftcap * 1.4426950408889634f);  // log2(e)
      const u32 lse_addr = addr - Cfg::kStatsFloats * 4;
      const float l0 = __uint_as_float(ld_shared_u32(lse_addr));
      const float l1 = __uint_as_float(ld_shared_u32(lse_addr + 4));
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pr = acc_s[4 * j + e];
        const float tc = (fast_log2(pr) + ((e & 1) ? l1 : l0)) * kToT;
        // 1 - t^2 >= 0; where P = 0, lg2 gives -inf and the clamp 0 (dS = 0 * finite).
        acc_dp[4 * j + e] = pr * (acc_dp[4 * j + e] - ((e & 1) ? d1 : d0)) *
                            fmaxf(fmaf(-tc, tc, 1.f), 0.f);
      }
      continue;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc_dp[4 * j + e] = acc_s[4 * j + e] * (acc_dp[4 * j + e] - ((e & 1) ? d1 : d0));
  }
}

// dS^T to shared memory, [key][query] in panels of 64 queries: the A operand of dQ.
// ds_frag[jj] holds four 8 x 8 tiles in the accumulator's layout: queries 16 jj .. + 7
// (keys key_row - lane / 4 .. + 7, then the 8 after), then queries 16 jj + 8 .. + 15;
// one stmatrix stores the four, each lane giving one tile row's address.
template <typename Cfg>
__device__ __forceinline__ void store_dscores(u32 s_ds, const u32 (&ds_frag)[Cfg::kBlockM / 16][4],
                                              int key_row, int lane) {
  if constexpr (Cfg::kDsByStmatrix) {
    const int row = key_row - (lane >> 2) + 8 * ((lane >> 3) & 1) + (lane & 7);
#pragma unroll
    for (int jj = 0; jj < Cfg::kBlockM / 16; ++jj)
      stmatrix_x4(s_ds + panel_offset<Cfg::kBlockN>(row, 2 * jj + (lane >> 4)), ds_frag[jj][0],
                  ds_frag[jj][1], ds_frag[jj][2], ds_frag[jj][3]);
  } else {
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < Cfg::kBlockM / 8; ++j)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        st_shared_u32(s_ds + panel_offset<Cfg::kBlockN>(key_row + 8 * hf, j) + t * 4,
                      ds_frag[j / 2][(j & 1) * 2 + hf]);
  }
}

// With a split head dim: this warpgroup's P^T or dS^T columns (its kScoreCols queries,
// 16-byte chunks from chunk0), rounded, to the step's [key][query] panel, where both
// consumers' dK and dV products read them.
template <typename Cfg>
__device__ __forceinline__ void store_scores(u32 tile, const float (&acc)[Cfg::kScoreCols / 2],
                                             int key_row, int chunk0, int t) {
  typedef typename Cfg::Element T;
#pragma unroll
  for (int j = 0; j < Cfg::kScoreCols / 8; ++j)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      st_shared_u32(tile + panel_offset<Cfg::kBlockN>(key_row + 8 * hf, chunk0 + j) + t * 4,
                    pack2<T>(acc[4 * j + 2 * hf], acc[4 * j + 2 * hf + 1]));
}

// With a split head dim: acc += X^T B, X^T (64 keys x the step's queries) read K-major
// from its panel and B = Q or dO read MN-major from b_cols (this warpgroup's first panel
// of the head dim in the stage), 2 kRegs columns.
template <typename Cfg, int kRegs>
__device__ __forceinline__ void product_smem_over_queries(float (&acc)[kRegs], u32 x_tile,
                                                          u32 b_cols) {
  const u64 a0 = wgmma_desc(x_tile, 16, 1024, 128);
  const u64 b0 = wgmma_desc(b_cols, Cfg::kBlockM * 128, 1024, 128);
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockM / 16; ++kk)
    wgmma_bwd_dkdv_ss(acc, wgmma_desc_add(a0, kk * 32), wgmma_desc_add(b0, kk * 16 * 128), 1);
}

// Issues dQ(slice) = dS K over the block's keys (one commit group): A = dS^T read
// MN-major (64 queries of a panel), B = K read MN-major (this slice's panels of the head
// dim).
template <typename Cfg, int kRegs>
__device__ __forceinline__ void product_dq(float (&acc_dq)[kRegs], u32 s_ds, u32 s_k, int dq_rows0,
                                           int dq_col0) {
  constexpr int BN = Cfg::kBlockN;
  const u64 a0 = wgmma_desc(s_ds + (dq_rows0 / 64) * BN * 128, BN * 128, 1024, 128);
  const u64 b0 = wgmma_desc(s_k + (dq_col0 / 64) * BN * 128, BN * 128, 1024, 128);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
    wgmma_bwd_dq(acc_dq, wgmma_desc_add(a0, kk * 16 * 128), wgmma_desc_add(b0, kk * 16 * 128),
                 kk > 0 ? 1 : 0);
  wgmma_commit();
}

// Step s's dQ slice to shared memory, once the last one has been read: register quad j
// of each thread, 16 bytes, threads side by side. publish_dq hands it to the sending
// thread one step later, after the next step's S^T and dP^T are issued: the proxy fence
// waits for the stores to complete, and there it waits under the products, not before
// them (docs/PERF.md bw6).
template <typename Cfg>
__device__ __forceinline__ void write_dq(const Block<Cfg> &w, int c, int s, int ct,
                                         const float (&acc_dq)[Cfg::kDqCols / 2]) {
  mbar_wait(w.dq_read(c), (s & 1) ^ 1);  // a fresh barrier passes parity 1
  const u32 row = w.s_dq(c) + (ct % 128) * 16;
#pragma unroll
  for (int j = 0; j < Cfg::kDqCols / 8; ++j)
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(row + j * 128 * 16),
                 "f"(acc_dq[4 * j]), "f"(acc_dq[4 * j + 1]), "f"(acc_dq[4 * j + 2]),
                 "f"(acc_dq[4 * j + 3])
                 : "memory");
}
template <typename Cfg> __device__ __forceinline__ void publish_dq(const Carve<Cfg> &w, int c) {
  fence_proxy_async_smem();  // the bulk reduction reads the slice through the async proxy
  mbar_arrive(w.dq_written(c));
}
// Where consumer c's slice of step s (the CTA's; row m0 of query head q_head of the
// block) goes, for its sending thread: written by the consumer's first thread once the
// step's first products are issued, read once the slice is published (a step later).
// The slot was last read for step s - 2, before the reduction that write_dq waited for
// in step s - 1.
template <typename Cfg>
__device__ __forceinline__ void tell_dq_dst(const FjBackwardParams &P, const Block<Cfg> &w, int c,
                                            int s, int m0, int q_head) {
  const FjForwardParams &p = P.fwd;
  const long long rows0 =
      bwd_mma::DqTiled::padded_row0(p, bwd_mma::first_query_row(p, w.seq, w.b), w.b);
  const long long offset = bwd_mma::DqTiled::slice(
      (rows0 + m0) / 64 + c / Cfg::kDqColSlices, q_head,
      (c % Cfg::kDqColSlices) * Cfg::kDqCols / 64, p.heads_q, Cfg::kHeadDim);
  asm volatile("st.shared.s64 [%0], %1;\n" ::"r"(w.dq_dst(c, s)), "l"(offset) : "memory");
}
// After consumer c's last step (s: the CTA's steps): -1 ends its sending thread's walk.
template <typename Cfg>
__device__ __forceinline__ void end_dq(const Carve<Cfg> &w, int c, int s, int ct) {
  if (ct % 128 == 0)
    asm volatile("st.shared.s64 [%0], %1;\n" ::"r"(w.dq_dst(c, s)), "l"(-1ll) : "memory");
  publish_dq<Cfg>(w, c);
}

// With a split head dim: quads kFirst .. kFirst + kCount - 1 of this consumer's dQ of
// the step (v[0] holding quad kV0) added to the tiled accumulator from registers,
// `slices` its first 64 x 64 slice (the rest follow it). Quad j of thread ct lands at
// quad (j % 8) * 128 + ct of slice j / 8, so a warp's vector reduction covers 512
// contiguous bytes.
template <int kFirst, int kCount, int kV0, int N>
__device__ __forceinline__ void reduce_dq(float *slices, const float (&v)[N], int ct) {
  static_assert(kFirst >= kV0 && 4 * (kFirst - kV0 + kCount) <= N, "quads held in v");
#pragma unroll
  for (int j = kFirst; j < kFirst + kCount; ++j)
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(
                     slices + (j / 8) * 4096 + ((j % 8) * 128 + ct % 128) * 4),
                 "f"(v[4 * (j - kV0)]), "f"(v[4 * (j - kV0) + 1]), "f"(v[4 * (j - kV0) + 2]),
                 "f"(v[4 * (j - kV0) + 3])
                 : "memory");
}

// The block's first row of dK or dV (`grad`, with its strides) in global memory.
template <typename Cfg>
__device__ __forceinline__ u16 *block_rows(void *grad, long long batch_stride,
                                           long long row_stride, long long head_stride,
                                           const Block<Cfg> &w) {
  return (u16 *)grad +
         tensor_base(w.seq.k_offset, w.b, w.h_kv, batch_stride, row_stride, head_stride) +
         (long long)w.n0 * row_stride;
}
template <typename Cfg>
__device__ __forceinline__ u16 *dk_rows(const FjBackwardParams &P, const Block<Cfg> &w) {
  return block_rows(P.dk, P.dk_batch_stride, P.dk_row_stride, P.dk_head_stride, w);
}
template <typename Cfg>
__device__ __forceinline__ u16 *dv_rows(const FjBackwardParams &P, const Block<Cfg> &w) {
  return block_rows(P.dv, P.dv_batch_stride, P.dv_row_stride, P.dv_head_stride, w);
}

// The end of a consumer's walk with a split head dim: dK (times the softmax scale) and
// dV of its columns (from dk_col0 and dv_col0) of the block's 64 rows to global memory,
// staged through K's and V's space once both consumers are done with them (dQ reads
// all of K); then the next block's K and V (its tile, returned; -1: none) load there.
template <typename Cfg, int kDkRegs, int kDvRegs>
__device__ __forceinline__ int finish_block_in_kv(const FjBackwardParams &P, const Block<Cfg> &w,
                                                  const float (&acc_dk)[kDkRegs],
                                                  const float (&acc_dv)[kDvRegs], int wg_row0,
                                                  int dk_col0, int dv_col0, NextTile<Cfg> after,
                                                  int ct) {
  const int lane = ct & 31, g = lane >> 2, t = lane & 3;
  named_sync(kBarDs, Cfg::kConsumerThreads);
  stage_rows<Cfg, Cfg::kBlockN>(w.s_k(), acc_dk, wg_row0, dk_col0 / 8, P.fwd.softmax_scale, g,
                                t);
  stage_rows<Cfg, Cfg::kBlockN>(w.s_v(), acc_dv, wg_row0, dv_col0 / 8, 1.f, g, t);
  named_sync(kBarDs, Cfg::kConsumerThreads);
  store_rows<Cfg::kBlockN, Cfg::kConsumerThreads, Cfg::kValidDim, Cfg::kHeadDim>(
      dk_rows(P, w), P.dk_row_stride, w.s_k(), w.keys_valid, ct);
  store_rows<Cfg::kBlockN, Cfg::kConsumerThreads, Cfg::kValidDimV, Cfg::kHeadDim>(
      dv_rows(P, w), P.dv_row_stride, w.s_v(), w.keys_valid, ct);
  named_sync(kBarDs, Cfg::kConsumerThreads);  // every thread has read its staged rows
  const int next = after.take(w);
  if (next >= 0)
    issue_kv<Cfg>(P.fwd, w, tile_at<Cfg>(P.fwd, next), ct);
  return next;
}

// The end of a consumer's walk with the head dim whole: once both consumers' last
// products are done with K, V and dS^T, the next block's K and V (its tile, returned;
// -1: none) begin to load, and dK (times the softmax scale) and dV of the consumer's 64 key
// rows go to global memory meanwhile, staged where K and V are not: dK in dS^T's two
// buffers, dV in the two consumers' dQ slices once their last reductions have read them
// (step `last`, counted over the CTA's blocks), each a panel tile of the block's rows
// as K's and V's. Both consumers then meet again, before either writes the next
// block's dS^T or dQ. (A consumer staging its rows alone, with a barrier of its own,
// made ptxas spill.)
template <typename Cfg, int kDkRegs, int kDvRegs>
__device__ __forceinline__ int finish_block(const FjBackwardParams &P, const Block<Cfg> &w,
                                            const float (&acc_dk)[kDkRegs],
                                            const float (&acc_dv)[kDvRegs], int wg_row0,
                                            int last, NextTile<Cfg> after, int ct) {
  const int lane = ct & 31, g = lane >> 2, t = lane & 3;
  named_sync(kBarDs, Cfg::kConsumerThreads);
  const int next = after.take(w);
  if (next >= 0)
    issue_kv<Cfg>(P.fwd, w, tile_at<Cfg>(P.fwd, next), ct);
  stage_rows<Cfg, Cfg::kBlockN>(w.s_ds(0), acc_dk, wg_row0, 0, P.fwd.softmax_scale, g, t);
  if (P.dq_accum != nullptr && w.steps > 0)
#pragma unroll
    for (int c = 0; c < Cfg::kConsumers; ++c)
      mbar_wait(w.dq_read(c), last & 1);
  stage_rows<Cfg, Cfg::kBlockN>(w.s_dq(0), acc_dv, wg_row0, 0, 1.f, g, t);
  named_sync(kBarDs, Cfg::kConsumerThreads);
  store_rows<Cfg::kBlockN, Cfg::kConsumerThreads, Cfg::kValidDim, Cfg::kHeadDim>(
      dk_rows(P, w), P.dk_row_stride, w.s_ds(0), w.keys_valid, ct);
  store_rows<Cfg::kBlockN, Cfg::kConsumerThreads, Cfg::kValidDimV, Cfg::kHeadDim>(
      dv_rows(P, w), P.dv_row_stride, w.s_dq(0), w.keys_valid, ct);
  named_sync(kBarDs, Cfg::kConsumerThreads);
  return next;
}

// A consumer warpgroup (c = 0, 1): keys c * 64 .. c * 64 + 63 of the block.
//
// Two step orders. At head dim 128 (block_m 64), FlashAttention-3's: dV's product is
// issued as soon as P^T is, and runs under dS^T's arithmetic, its store and the
// consumers' barrier; dK's (A = dS^T from registers) runs under dQ's store; the tensor
// pipe drains once a step. Its live set at dQ's issue (dK, dV, dQ, P^T and dS^T
// fragments: 192 registers) needs the 240-register consumers. At head dim 64 (block_m
// 128, 32 registers more of P^T and dS^T) ptxas serialises that order's wgmmas, so it
// keeps bw1's: dV and dK issued together after dS^T, drained before dQ (docs/PERF.md
// bw4, bw5).
//
// s0: the CTA's steps before this block's (the ring, the dS^T buffers and the dQ
// slices run on over its blocks); after: the CTA's next tile, whose K and V the block's
// end loads, and which it returns (-1: none).
template <typename Cfg>
__device__ __forceinline__ int consume_whole(const FjBackwardParams &P, const Block<Cfg> &w,
                                             int c, int ct, int s0, NextTile<Cfg> after) {
  constexpr int D = Cfg::kHeadDim, BM = Cfg::kBlockM, BN = Cfg::kBlockN;
  constexpr bool kOverlapped = D == 128 && BM == 64;
  const FjForwardParams &p = P.fwd;
  const int lane = ct & 31, g = lane >> 2, t = lane & 3, warp_in_wg = (ct % 128) / 32;

  // dK and dV of the caller's columns only (wgmma's N in steps of 8): the panels'
  // columns past them are zeros of Q and dO (docs/PERF.md bw16).
  constexpr int kDkCols = Cfg::kValidDim, kDvCols = Cfg::kValidDimV;
  float acc_dk[kDkCols / 2], acc_dv[kDvCols / 2];
#pragma unroll
  for (int i = 0; i < kDkCols / 2; ++i)
    acc_dk[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kDvCols / 2; ++i)
    acc_dv[i] = 0.f;

  // This thread's key rows within the block: key_row and key_row + 8.
  const int wg_row0 = c * 64 + warp_in_wg * 16;
  const int key_row = wg_row0 + g;
  const bool with_dq = P.dq_accum != nullptr;
  // dQ: this warpgroup's 64 query rows of the step and its columns of the head dim.
  const int dq_rows0 = (c / Cfg::kDqColSlices) * 64;
  const int dq_col0 = (c % Cfg::kDqColSlices) * Cfg::kDqCols;

  kv_ready<Cfg>();
  for (int s = 0; s < w.steps; ++s) {
    const int gs = s0 + s, stage = gs % Cfg::kStages;
    mbar_wait(w.full(stage), (gs / Cfg::kStages) & 1);
    int m0, q_head;
    bool partial;
    w.step(s, m0, q_head, partial);
    if constexpr (Cfg::kStepBits)
      KeepBits<Cfg>::prefetch(P, w.bit_slot(s, partial), key_row, 0);
    const u32 s_q = w.s_q(stage);
    const u32 s_do = w.s_do(stage);
    // lse and D of row m0: the copies began at the 16-byte boundary before it.
    const u32 s_lse = w.s_stats(stage) + (u32)(lse_index(p, w.seq, q_head, m0) & 3) * 4;
    const u32 s_dpsum = s_lse + Cfg::kStatsFloats * 4;
    const u32 s_ds = w.s_ds(gs & 1);

    // S^T and dP^T for this warpgroup's 64 keys, one commit group each.
    float acc_s[BM / 2], acc_dp[BM / 2];
    wgmma_fence();
    product_over_d<Cfg, BN, BM, BM, Cfg::kValidDim>(acc_s, w.s_k() + c * 64 * 128, s_q);
    wgmma_commit();
    product_over_d<Cfg, BN, BM, BM, Cfg::kValidDimV>(acc_dp, w.s_v() + c * 64 * 128, s_do);
    wgmma_commit();
    if (with_dq && ct % 128 == 0)  // under the products, not before their issue
      tell_dq_dst<Cfg>(P, w, c, gs, m0, q_head);
    if (with_dq && s > 0)
      publish_dq<Cfg>(w, c);  // the last step's slice
    wgmma_wait<1>();
    pin_registers(acc_s);
    scores_to_probs<Cfg>(acc_s, P, w, m0, m0, key_row, s_lse, t, q_head, partial, s);
    u32 p_frag[BM / 16][4], ds_frag[BM / 16][4];
    pack_fragments<Cfg>(p_frag, acc_s);

    if constexpr (kOverlapped) {
      // dV += P^T dO, under dS^T's arithmetic.
      wgmma_fence();
      product_over_queries<Cfg>(acc_dv, p_frag, s_do);
      wgmma_commit();
      wgmma_wait<1>();  // dP^T (dV's product may still run)
      pin_registers(acc_dp);
      probs_to_dscores<Cfg>(acc_dp, acc_s, s_dpsum, t);
      pack_fragments<Cfg>(ds_frag, acc_dp);
      // dQ in deterministic mode too (then not sent): as a second path through the
      // step, ptxas spilled or serialised (bw4).
      store_dscores<Cfg>(s_ds, ds_frag, key_row, lane);
      fence_proxy_async_smem();  // the dS^T stores, before wgmma reads them
      named_sync(kBarDs, Cfg::kConsumerThreads);
      float acc_dq[Cfg::kDqCols / 2];
      wgmma_fence();
      product_dq<Cfg>(acc_dq, s_ds, w.s_k(), dq_rows0, dq_col0);
      // dK += dS^T Q, under dQ's store.
      product_over_queries<Cfg>(acc_dk, ds_frag, s_q);
      wgmma_commit();
      wgmma_wait<1>();  // dV and dQ
      pin_registers(acc_dv);
      pin_registers(acc_dq);
      if (with_dq)
        write_dq<Cfg>(w, c, gs, ct, acc_dq);
      wgmma_wait<0>();
      mbar_arrive(w.empty(stage));  // this thread is done with Q, dO, lse and D
    } else {
      // dS^T; dV's product waits for it, to be issued with dK's: issued under dP^T's,
      // its P^T fragments would be live next to S^T and dP^T (ptxas spilled at head dim
      // 64, block_m 128; at 128 it was no faster, docs/PERF.md bw1).
      wgmma_wait<0>();
      pin_registers(acc_dp);
      probs_to_dscores<Cfg>(acc_dp, acc_s, s_dpsum, t);
      pack_fragments<Cfg>(ds_frag, acc_dp);
      if (with_dq)
        store_dscores<Cfg>(s_ds, ds_frag, key_row, lane);
      // dV += P^T dO and dK += dS^T Q.
      wgmma_fence();
      product_over_queries<Cfg>(acc_dv, p_frag, s_do);
      product_over_queries<Cfg>(acc_dk, ds_frag, s_q);
      wgmma_commit();
      if (with_dq) {
        // dK's and dV's products finish first: their A fragments (P^T, dS^T) then die
        // before dQ's accumulator is live, which keeps the consumers within budget.
        wgmma_wait<0>();
        pin_registers(acc_dk);
        pin_registers(acc_dv);
        fence_proxy_async_smem();  // the dS^T stores, before wgmma reads them
        named_sync(kBarDs, Cfg::kConsumerThreads);
        float acc_dq[Cfg::kDqCols / 2];
        wgmma_fence();
        product_dq<Cfg>(acc_dq, s_ds, w.s_k(), dq_rows0, dq_col0);
        wgmma_wait<0>();
        pin_registers(acc_dq);
        mbar_arrive(w.empty(stage));  // this thread is done with Q, dO, lse and D
        write_dq<Cfg>(w, c, gs, ct, acc_dq);
      } else {
        wgmma_wait<0>();
        mbar_arrive(w.empty(stage));
      }
    }
    pin_registers(acc_dk);
    pin_registers(acc_dv);
  }
  if (with_dq && w.steps > 0)
    publish_dq<Cfg>(w, c);
  return finish_block<Cfg>(P, w, acc_dk, acc_dv, wg_row0, s0 + w.steps - 1, after, ct);
}

// A consumer warpgroup (c = 0, 1) with a split head dim: all 64 keys of the block, the
// step's queries c * 32 .. c * 32 + 31 for S^T and dP^T, and its panels of dK, dV and dQ
// (BwdWgmmaConfig::kSplit; kC: the consumer whose numbers of panels these are, 0 where
// both take as many). P^T and dS^T go to shared memory, where after the consumers'
// barrier both read the whole step's: dV += P^T dO and dK += dS^T Q with both operands
// from shared memory, then dQ = dS K, added to the accumulator from registers. The stage
// is handed back as soon as dV's and dK's products are done: with one stage in the
// ring, the next step's Q and dO then load under dQ's product and its reductions.
// s0 and after as for consume_whole.
template <typename Cfg, int kC>
__device__ __forceinline__ int consume_split(const FjBackwardParams &P, const Block<Cfg> &w,
                                             int c, int ct, int s0, NextTile<Cfg> after) {
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, NC = Cfg::kScoreCols;
  constexpr int kDkCols = 64 * Cfg::kSplit.k[kC], kDvCols = 64 * Cfg::kSplit.v[kC];
  constexpr int kDqCols = 64 * Cfg::kSplit.q[kC];
  const FjForwardParams &p = P.fwd;
  const int lane = ct & 31, g = lane >> 2, t = lane & 3, warp_in_wg = (ct % 128) / 32;

  float acc_dk[kDkCols / 2], acc_dv[kDvCols / 2];
#pragma unroll
  for (int i = 0; i < kDkCols / 2; ++i)
    acc_dk[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kDvCols / 2; ++i)
    acc_dv[i] = 0.f;

  const int wg_row0 = warp_in_wg * 16;  // this thread's key rows: key_row and key_row + 8
  const int key_row = wg_row0 + g;
  // Its first columns of dK, dV and dQ: consumer 1's follow consumer 0's.
  const int dk_col0 = c * 64 * Cfg::kSplit.k[0], dv_col0 = c * 64 * Cfg::kSplit.v[0];
  const int dq_col0 = c * 64 * Cfg::kSplit.q[0];
  const bool with_dq = P.dq_accum != nullptr;
  const long long dq_rows0 =
      bwd_mma::DqTiled::padded_row0(p, bwd_mma::first_query_row(p, w.seq, w.b), w.b);
  // The last kLate quads of a step's dQ are reduced under the next step's S^T and dP^T,
  // so that a consumer's reductions do not all queue at one point: 4 of 16 measured
  // 1.025-1.05x; 8 were slower, and spilled when causal (docs/PERF.md bw8).
  constexpr int kQuads = kDqCols / 8, kLate = 4, kEarly = kQuads - kLate;
  float dq_late[4 * kLate + 1];
  float *late_slices = nullptr;

  kv_ready<Cfg>();
  for (int s = 0; s < w.steps; ++s) {
    const int gs = s0 + s, stage = gs % Cfg::kStages;
    mbar_wait(w.full(stage), (gs / Cfg::kStages) & 1);
    int m0, q_head;
    bool partial;
    w.step(s, m0, q_head, partial);
    if constexpr (Cfg::kStepBits)
      KeepBits<Cfg>::prefetch(P, w.bit_slot(s, partial), key_row, c * NC);
    const u32 s_q = w.s_q(stage);
    const u32 s_do = w.s_do(stage);
    // lse and D of this warpgroup's first query (the copies began at the 16-byte
    // boundary at or before row m0).
    const u32 s_lse =
        w.s_stats(stage) + (u32)((lse_index(p, w.seq, q_head, m0) & 3) + c * NC) * 4;
    const u32 s_dpsum = s_lse + Cfg::kStatsFloats * 4;
    const u32 s_ds = w.s_ds(gs & 1), s_ps = w.s_ps(gs & 1);

    // S^T and dP^T: all keys x this warpgroup's queries (B rows c * NC of Q and dO).
    float acc_s[NC / 2], acc_dp[NC / 2];
    wgmma_fence();
    product_over_d<Cfg, BN, BM, NC, Cfg::kValidDim>(acc_s, w.s_k(), s_q + c * NC * 128);
    wgmma_commit();
    product_over_d<Cfg, BN, BM, NC, Cfg::kValidDimV>(acc_dp, w.s_v(), s_do + c * NC * 128);
    wgmma_commit();
    if (kLate > 0 && late_slices != nullptr)
      reduce_dq<kEarly, kLate, kEarly>(late_slices, dq_late, ct);
    wgmma_wait<1>();
    pin_registers(acc_s);
    scores_to_probs<Cfg>(acc_s, P, w, m0, m0 + c * NC, key_row, s_lse, t, q_head, partial,
                         s);
    store_scores<Cfg>(s_ps, acc_s, key_row, c * NC / 8, t);
    wgmma_wait<0>();
    pin_registers(acc_dp);
    probs_to_dscores<Cfg>(acc_dp, acc_s, s_dpsum, t);
    store_scores<Cfg>(s_ds, acc_dp, key_row, c * NC / 8, t);
    fence_proxy_async_smem();  // the P^T and dS^T stores, before wgmma reads them
    named_sync(kBarDs, Cfg::kConsumerThreads);

    wgmma_fence();
    product_smem_over_queries<Cfg>(acc_dk, s_ds, s_q + (dk_col0 / 64) * BM * 128);
    product_smem_over_queries<Cfg>(acc_dv, s_ps, s_do + (dv_col0 / 64) * BM * 128);
    wgmma_commit();
    // dQ in deterministic mode too (then not sent): a branch here has ptxas fence the
    // products apart.
    float acc_dq[kDqCols / 2];
    product_dq<Cfg>(acc_dq, s_ds, w.s_k(), 0, dq_col0);
    wgmma_wait<1>();  // dK and dV
    pin_registers(acc_dk);
    pin_registers(acc_dv);
    mbar_arrive(w.empty(stage));  // this thread is done with Q, dO, lse and D
    wgmma_wait<0>();
    pin_registers(acc_dq);
    if (with_dq) {
      float *slices = P.dq_accum + bwd_mma::DqTiled::slice((dq_rows0 + m0) / 64, q_head,
                                                           dq_col0 / 64, p.heads_q, Cfg::kHeadDim);
      reduce_dq<0, kEarly, 0>(slices, acc_dq, ct);
#pragma unroll
      for (int i = 0; i < 4 * kLate; ++i)
        dq_late[i] = acc_dq[4 * kEarly + i];
      late_slices = slices;
    }
  }
  if (kLate > 0 && late_slices != nullptr)
    reduce_dq<kEarly, kLate, kEarly>(late_slices, dq_late, ct);
  return finish_block_in_kv<Cfg>(P, w, acc_dk, acc_dv, wg_row0, dk_col0, dv_col0, after, ct);
}

template <typename Cfg>
__device__ __forceinline__ int consume(const FjBackwardParams &P, const Block<Cfg> &w, int c,
                                      int ct, int s0, NextTile<Cfg> after) {
  if constexpr (Cfg::kSplitHead) {
    // One instance where both consumers take as many panels of each (their columns by c).
    if constexpr (Cfg::kSplit.uniform())
      return consume_split<Cfg, 0>(P, w, c, ct, s0, after);
    else
      return c == 0 ? consume_split<Cfg, 0>(P, w, c, ct, s0, after)
                    : consume_split<Cfg, 1>(P, w, c, ct, s0, after);
  } else
    return consume_whole<Cfg>(P, w, c, ct, s0, after);
}

// A key block of this CTA and its walk; each role builds its own after the register
// split, so that none of it is live across setmaxnreg.
template <typename Cfg>
__device__ __forceinline__ Block<Cfg> make_block(const FjBackwardParams &P, unsigned char *smem,
                                                 const bwd_mma::CtaTile &tile) {
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN;
  const FjForwardParams &p = P.fwd;
  Block<Cfg> w(smem);
  w.b = tile.b;
  w.h_kv = tile.h_kv;
  w.seq = seq_extent(p, w.b);
  w.n0 = tile.key_block * BN;
  w.keys_valid = imin(BN, w.seq.seqlen_k - w.n0);
  w.group = p.heads_q / p.heads_kv;
  w.diag = w.seq.seqlen_k - w.seq.seqlen_q;  // query i sees keys j <= i + diag
  const int m_blocks = (w.seq.seqlen_q + BM - 1) / BM;
  bwd_mma::query_blocks<Cfg>(w.n0, w.diag, m_blocks, w.m_begin, w.m_end);
  w.steps_per_head = w.m_end - w.m_begin;
  w.steps = w.steps_per_head * w.group;  // 0: the block only writes zero dK and dV
  w.list = nullptr;
  w.slots = nullptr;
  if constexpr (Cfg::kBlockSteps) {
    if (P.block_steps) {
      const long long wi = (long long)w.b * P.block_steps_batch_stride +
                           (long long)w.h_kv * P.block_steps_head_stride + tile.key_block;
      w.list = P.block_steps + wi * P.block_steps_capacity;
      w.slots = P.block_step_slots + wi * P.block_steps_capacity;
      w.steps = P.block_step_counts[wi];
    }
  }

  static_assert(Carve<Cfg>::kEnd + 1024 == Cfg::kSmemBytes,
                "the carve-up is the size BwdWgmmaConfig counts");
  return w;
}

// Calls fn(block, NextTile) for each key block of this CTA, from tile `first`
// (first_tile); fn returns the next tile it took (NextTile::take), -1 at the walk's
// end. The walk runs on a grid of one CTA an SM (BwdWgmmaConfig::kTileWalk, the host's
// BackwardEntries::tileWalk), so that a block's K and V load, and its first steps' Q
// and dO, under the last block's end, and no CTA pays a launch, its barriers' set-up and
// an exposed epilogue per block (docs/PERF.md bw10). Non-causal CTAs take tiles c,
// c + gridDim.x, ... (next_tile); causal ones claim theirs after the first, heaviest
// first (kClaimsTiles: claim_tiles). The loading thread and the consumers walk the same
// blocks.
//
// Without kTileWalk (a split head dim, a block mask's lists) the grid is
// (ceil(seqlen_k / kBlockN), heads_kv, batch), a block a CTA (bwd_mma::cta_tile): in a
// walk over blocks, ptxas spilled the split consumers' finish_block_in_kv and the
// loading thread's list walk.
template <typename Cfg, typename Fn>
__device__ __forceinline__ void for_each_block(const FjBackwardParams &P, unsigned char *smem,
                                               int first, Fn &&fn) {
  if constexpr (!Cfg::kTileWalk) {
    // has_keys written out: through the helper, ptxas scheduled the mask_mod kernels
    // differently (other machine code than the GPU-tested one).
    const bwd_mma::CtaTile tile = bwd_mma::cta_tile<Cfg::kCausal>();
    if (tile.key_block * Cfg::kBlockN < seq_extent(P.fwd, tile.b).seqlen_k)
      fn(make_block<Cfg>(P, smem, tile), NextTile<Cfg>{-1, 0});
    return;
  }
#pragma unroll 1
  for (int i = first, u = 0; i >= 0; ++u) {
    const NextTile<Cfg> after{Cfg::kClaimsTiles ? -1 : next_tile<Cfg>(P.fwd, i + gridDim.x), u};
    i = fn(make_block<Cfg>(P, smem, tile_at<Cfg>(P.fwd, i)), after);
  }
}

// The blocks of for_each_block, kThreads threads: warpgroup 0 serves (lane 0 of
// warp 0 loads the steps, lane 0 of warps 2-3 sends dQ), warpgroups 1 and 2 compute
// (and copy K and V).
template <typename Cfg>
__device__ __forceinline__ void run_main(const FjBackwardParams &P, const Maps &maps,
                                         unsigned char *smem) {
  const FjForwardParams &p = P.fwd;
  const int tid = threadIdx.x;
  if (tid == 0) {
    const Carve<Cfg> w(smem);
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(w.full(s), 1);  // the loading thread's arrival, then the TMA bytes
      mbar_init(w.empty(s), Cfg::kConsumerThreads);  // every consumer thread arrives
    }
    for (int c = 0; c < Cfg::kConsumers; ++c) {
      mbar_init(w.dq_written(c), 128);  // the consumer's threads
      mbar_init(w.dq_read(c), 1);       // its sending thread, once the slice is read
    }
    if constexpr (Cfg::kClaimsTiles) {
      for (int u = 0; u < 2; ++u) {
        mbar_init(w.tile_full(u), 1);  // the claiming thread
        mbar_init(w.tile_empty(u), 1 + Cfg::kConsumerThreads);  // the loading thread, consumers
      }
      mbar_init(w.tile_wanted(), 1);  // the loading thread, a block's steps loaded
    }
    mbar_fence_init();
  }
  __syncthreads();

  // One branch per role: setmaxnreg needs each warpgroup's role to be one side of a
  // single if/else. The loader and the consumers count the steps they have walked (s0),
  // which give the barriers' stages and parities.
  int s0 = 0;
  if (tid < 128) {
    regs_lower<Cfg::kServerRegs>();
    if (tid == 0) {
      if (p.seqlen_q > 0) {  // else the host encoded no maps
        tma_prefetch_map(maps.q);
        tma_prefetch_map(maps.dout);
      }
      const int first = Cfg::kTileWalk ? first_tile<Cfg>(P, Carve<Cfg>(smem)) : -1;
      for_each_block<Cfg>(P, smem, first, [&](const Block<Cfg> &w, NextTile<Cfg> after) {
        load_steps<Cfg>(P, maps, w, s0);
        s0 += w.steps;
        if constexpr (Cfg::kClaimsTiles)
          mbar_arrive(w.tile_wanted());  // now the claiming thread claims the next
        return after.take(w);
      });
    } else if (Cfg::kClaimsTiles && tid == 32) {
      claim_tiles<Cfg>(P, Carve<Cfg>(smem));
    } else if (!Cfg::kDqFromRegisters && P.dq_accum != nullptr && tid % 32 == 0 &&
               tid >= 64 && tid / 32 - 2 < Cfg::kConsumers) {
      send_dq<Cfg>(P, Carve<Cfg>(smem), tid / 32 - 2);
    }
  } else {
    regs_raise<Cfg::kConsumerRegs>();
    const int c = (tid - 128) / 128;
    // The first block's K and V (the next ones load under each block's end).
    int first = -1;
    if constexpr (Cfg::kTileWalk) {
      first = first_tile<Cfg>(P, Carve<Cfg>(smem));
      if (first >= 0)
        issue_kv<Cfg>(p, Carve<Cfg>(smem), tile_at<Cfg>(p, first), tid - 128);
    } else {
      const bwd_mma::CtaTile tile = bwd_mma::cta_tile<Cfg::kCausal>();
      if (has_keys<Cfg>(p, tile))
        issue_kv<Cfg>(p, Carve<Cfg>(smem), tile, tid - 128);
    }
    for_each_block<Cfg>(P, smem, first, [&](const Block<Cfg> &w, NextTile<Cfg> after) {
      const int next = consume<Cfg>(P, w, c, tid - 128, s0, after);
      s0 += w.steps;
      return next;
    });
    if (!Cfg::kDqFromRegisters && P.dq_accum != nullptr)
      end_dq<Cfg>(Carve<Cfg>(smem), c, s0, tid - 128);
  }
}

}  // namespace bwd_wgmma
}  // namespace fj
