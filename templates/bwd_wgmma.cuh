// Family bwd_wgmma: the backward pass on Hopper (sm_90a), its five products on wgmma.
//
// The same four kernels and workspace as bwd_mma (prep, main, convert, and the
// deterministic dq kernel, which are bwd_mma's own); only the main kernel is new. One
// CTA per block of 128 keys of one (batch, key/value head), two warpgroups of 64 keys
// each, walking the query blocks (and the query heads of a GQA group) that see the
// block, kBlockM query rows per step:
//   S^T  = K Q^T      and  dP^T = V dO^T   (shared x shared, K-major: M = keys)
//   P^T  = exp2(S^T scale log2e - lse),  dS^T = P^T (dP^T - D)     (registers)
//   dV  += P^T dO     and  dK  += dS^T Q   (A from registers: the accumulator layout of
//                                           S^T is wgmma's A-fragment layout; B = dO, Q
//                                           read MN-major)
//   dQ   = dS K, added to the fp32 accumulator by vector atomics; dS^T goes through
//          shared memory once (stored [key][query], read as an MN-major A operand).
// dK and dV stay in registers across the walk. Q, dO, lse and D come through a ring of
// kStages stages loaded with cp.async into the 128-byte-swizzled panels wgmma reads
// (panels of 64 columns of 128-byte rows), so every argument bwd_mma takes (varlen,
// strides that are multiples of 8 elements) works here without tensor maps.
//
// Causal attention is aligned bottom-right as in the forward; a key block skips the
// query blocks that see none of it, and only blocks that cross the diagonal or a
// sequence end are masked.
#pragma once

#include "bwd_mma.cuh"
#include "fj_bwd_params.h"
#include "fj_common.cuh"
#include "fj_hopper.cuh"

namespace fj {

template <typename Element_, int kHeadDim_, int kBlockM_, int kStages_, bool kCausal_>
struct BwdWgmmaConfig {
  typedef Element_ Element;
  static constexpr int kHeadDim = kHeadDim_;  // = head_dim_v
  static constexpr int kBlockM = kBlockM_;    // query rows per step
  static constexpr int kStages = kStages_;    // Q / dO / lse / D ring depth
  static constexpr bool kCausal = kCausal_;
  static constexpr int kConsumers = 2;        // warpgroups, 64 keys each
  static constexpr int kBlockN = 64 * kConsumers;
  static constexpr int kThreads = 128 * kConsumers;

  static_assert(kHeadDim % 64 == 0, "head dims of whole 128-byte panels");
  static_assert(kBlockM % 64 == 0, "query steps of whole 64-row panels");
  static_assert(kStages >= 2, "the ring needs two stages");

  // dQ = dS K: the warpgroups split the step's query rows into 64-row slices, then the
  // head dim; each takes one slice of whole panels.
  static constexpr int kDqRowSlices = kBlockM / 64;
  static constexpr int kDqColSlices = kConsumers / kDqRowSlices;
  static constexpr int kDqCols = kHeadDim / kDqColSlices;
  static_assert(kDqRowSlices * kDqColSlices == kConsumers && kDqCols % 64 == 0,
                "dQ slices of whole panels");

  // Shared memory, each operand a whole number of 1024-byte swizzle atoms from a
  // 1024-byte aligned base: K, V, the Q and dO rings, dS^T, then lse and D per stage.
  static constexpr int kKBytes = kBlockN * kHeadDim * 2;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kStatsBytes = 2 * kBlockM * 4;
  static constexpr int kSmemBytes =
      1024 + 2 * kKBytes + 2 * kStages * kQBytes + kDsBytes + kStages * kStatsBytes;
};

namespace bwd_wgmma {

// Byte offset of 16-byte chunk c (8 elements) of row r in a tile of kRows rows stored as
// panels of 64 columns: 128-byte rows, chunks swizzled with the row's position in its
// 1024-byte atom, as TMA writes and wgmma's 128-byte swizzle mode reads them.
template <int kRows> __device__ __forceinline__ u32 panel_offset(int r, int c) {
  return (u32)((c >> 3) * kRows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Copies a kRows x kCols tile (rows `row_stride` elements apart) into panels with
// cp.async; rows at or past `valid_rows` are zero-filled. Each thread keeps one chunk
// column, so its shared-memory address steps by a constant.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_panels_async(u32 dst, const u16 *src, long long row_stride,
                                                  int valid_rows, int tid) {
  constexpr int kChunks = kCols / 8;
  constexpr int kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "whole passes of whole atoms");
  const int r0 = tid / kChunks, c = tid % kChunks;
  const u16 *from = src + r0 * row_stride + c * 8;
  const u32 to = dst + panel_offset<kRows>(r0, c);
#pragma unroll
  for (int it = 0; it < kRows / kRowStep; ++it) {
    const bool valid = r0 + it * kRowStep < valid_rows;
    cp_async_16(to + it * kRowStep * 128, valid ? from : src, valid);
    from += kRowStep * row_stride;
  }
}

// acc = A B^T over the head dim, both operands K-major panels: A is 64 rows of a tile of
// kRowsA rows (from a_rows), B all kRowsB rows of its tile (wgmma's N).
template <typename Cfg, int kRowsA, int kRowsB>
__device__ __forceinline__ void product_over_d(float (&acc)[kRowsB / 2], u32 a_rows,
                                               u32 b_tile) {
  const u64 a0 = wgmma_desc(a_rows, 16, 1024, 128);
  const u64 b0 = wgmma_desc(b_tile, 16, 1024, 128);
#pragma unroll
  for (int ks = 0; ks < Cfg::kHeadDim / 16; ++ks) {
    const int panel = ks / 4, within = ks % 4;
    wgmma_bwd_st(acc, wgmma_desc_add(a0, panel * kRowsA * 128 + within * 32),
        wgmma_desc_add(b0, panel * kRowsB * 128 + within * 32), ks > 0 ? 1 : 0);
  }
}

// acc += X^T B for X^T in registers (frag: 16 query columns per k-step) and B = Q or dO
// read MN-major (kBlockM rows of the head dim, panels kBlockM * 128 bytes apart).
template <typename Cfg>
__device__ __forceinline__ void product_over_queries(float (&acc)[Cfg::kHeadDim / 2],
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

// Writes this warpgroup's accumulator rows (64 key rows from `row0` of the block, the
// head dim as columns) to a panel tile of kBlockN rows, times `scale`.
template <typename Cfg>
__device__ __forceinline__ void stage_rows(u32 tile, const float (&acc)[Cfg::kHeadDim / 2],
                                           int row0, float scale, int g, int t) {
  typedef typename Cfg::Element T;
#pragma unroll
  for (int j = 0; j < Cfg::kHeadDim / 8; ++j)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = row0 + g + 8 * hf;
      st_shared_u32(tile + panel_offset<Cfg::kBlockN>(r, j) + t * 4,
                    pack2<T>(acc[4 * j + 2 * hf] * scale, acc[4 * j + 2 * hf + 1] * scale));
    }
}

// Copies the first `rows` rows of a staged panel tile to global memory.
template <typename Cfg>
__device__ __forceinline__ void store_rows(u16 *gmem, long long row_stride, u32 tile, int rows,
                                           int tid) {
  constexpr int kChunks = Cfg::kHeadDim / 8;
  for (int i = tid; i < Cfg::kBlockN * kChunks; i += Cfg::kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < rows)
      st_global_v4(gmem + (long long)r * row_stride + c * 8,
                   ld_shared_v4(tile + panel_offset<Cfg::kBlockN>(r, c)));
  }
}

// ---- main: dK and dV of one key block, dQ by atomics ---------------------------------
// Grid (ceil(seqlen_k / kBlockN), heads_kv, batch), kThreads threads.
template <typename Cfg>
__device__ __forceinline__ void run_main(const FjBackwardParams &P, unsigned char *smem) {
  typedef typename Cfg::Element T;
  constexpr int D = Cfg::kHeadDim, BM = Cfg::kBlockM, BN = Cfg::kBlockN;
  const FjForwardParams &p = P.fwd;

  const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = tid / 128, warp_in_wg = (tid % 128) / 32;
  const int n_block = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z;
  const SeqExtent seq = seq_extent(p, b);
  const int n0 = n_block * BN;
  if (n0 >= seq.seqlen_k)
    return;  // varlen: this sequence has fewer keys than the longest
  const int keys_valid = imin(BN, seq.seqlen_k - n0);
  const int group = p.heads_q / p.heads_kv;
  const int diag = seq.seqlen_k - seq.seqlen_q;  // query i sees keys j <= i + diag

  const int m_blocks = (seq.seqlen_q + BM - 1) / BM;
  int m_begin = 0;
  if (Cfg::kCausal && n0 - diag > 0)
    m_begin = imin(m_blocks, (n0 - diag) / BM);
  const int steps_per_head = m_blocks - m_begin;
  const int steps = steps_per_head * group;

  const u32 s_k = (smem_addr(smem) + 1023) & ~1023u;
  const u32 s_v = s_k + Cfg::kKBytes;
  const u32 s_q_ring = s_v + Cfg::kKBytes;
  const u32 s_do_ring = s_q_ring + Cfg::kStages * Cfg::kQBytes;
  const u32 s_ds = s_do_ring + Cfg::kStages * Cfg::kQBytes;
  const u32 s_stats_ring = s_ds + Cfg::kDsBytes;

  const u16 *k = (const u16 *)p.k +
                 tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride, p.k_row_stride,
                             p.k_head_stride) +
                 (long long)n0 * p.k_row_stride;
  const u16 *v = (const u16 *)p.v +
                 tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride, p.v_row_stride,
                             p.v_head_stride) +
                 (long long)n0 * p.v_row_stride;
  // A key block that no query sees only writes zeros and reads nothing.
  if (steps > 0) {
    load_panels_async<BN, D, Cfg::kThreads>(s_k, k, p.k_row_stride, keys_valid, tid);
    load_panels_async<BN, D, Cfg::kThreads>(s_v, v, p.v_row_stride, keys_valid, tid);
  }

  // Step s is query block m_begin + s % steps_per_head of query head
  // h_kv * group + s / steps_per_head.
  auto load_step = [&](int s) {
    const int h = h_kv * group + s / steps_per_head;
    const int m0 = (m_begin + s % steps_per_head) * BM;
    const int rows = imin(BM, seq.seqlen_q - m0);
    const int stage = s % Cfg::kStages;
    const u16 *q = (const u16 *)p.q +
                   tensor_base(seq.q_offset, b, h, p.q_batch_stride, p.q_row_stride,
                               p.q_head_stride) +
                   (long long)m0 * p.q_row_stride;
    const u16 *dout = (const u16 *)P.dout +
                      tensor_base(seq.q_offset, b, h, P.dout_batch_stride, P.dout_row_stride,
                                  P.dout_head_stride) +
                      (long long)m0 * P.dout_row_stride;
    load_panels_async<BM, D, Cfg::kThreads>(s_q_ring + stage * Cfg::kQBytes, q,
                                            p.q_row_stride, rows, tid);
    load_panels_async<BM, D, Cfg::kThreads>(s_do_ring + stage * Cfg::kQBytes, dout,
                                            P.dout_row_stride, rows, tid);
    const long long li = seq.lse_offset + (long long)h * p.lse_head_stride + m0;
    const u32 s_stats = s_stats_ring + stage * Cfg::kStatsBytes;
    for (int r = tid; r < 2 * BM; r += Cfg::kThreads) {
      const int row = r % BM;
      const float *src = (r < BM ? P.lse_log2 : P.dpsum) + li + row;
      bwd_mma::cp_async_4(s_stats + r * 4, row < rows ? src : P.dpsum, row < rows);
    }
  };
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < steps)
      load_step(s);
    cp_async_commit();
  }

  float acc_dk[D / 2], acc_dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i)
    acc_dk[i] = acc_dv[i] = 0.f;

  // This thread's key rows within the block: key_row and key_row + 8.
  const int wg_row0 = wg * 64 + warp_in_wg * 16;
  const int key_row = wg_row0 + g;
  const bool with_dq = P.dq_accum != nullptr;
  // dQ: this warpgroup's 64 query rows of the step and its columns of the head dim.
  const int dq_rows0 = (wg / Cfg::kDqColSlices) * 64;
  const int dq_col0 = (wg % Cfg::kDqColSlices) * Cfg::kDqCols;

  for (int s = 0; s < steps; ++s) {
    cp_async_wait<Cfg::kStages - 2>();
    fence_proxy_async_smem();  // cp.async wrote the operands wgmma reads
    __syncthreads();
    if (s + Cfg::kStages - 1 < steps)
      load_step(s + Cfg::kStages - 1);
    cp_async_commit();

    const int h = h_kv * group + s / steps_per_head;
    const int m0 = (m_begin + s % steps_per_head) * BM;
    const int stage = s % Cfg::kStages;
    const u32 s_q = s_q_ring + stage * Cfg::kQBytes;
    const u32 s_do = s_do_ring + stage * Cfg::kQBytes;
    const u32 s_lse = s_stats_ring + stage * Cfg::kStatsBytes;
    const u32 s_dpsum = s_lse + BM * 4;

    // S^T and dP^T for this warpgroup's 64 keys, one commit group each.
    float acc_s[BM / 2], acc_dp[BM / 2];
    wgmma_fence();
    product_over_d<Cfg, BN, BM>(acc_s, s_k + wg * 64 * 128, s_q);
    wgmma_commit();
    product_over_d<Cfg, BN, BM>(acc_dp, s_v + wg * 64 * 128, s_do);
    wgmma_commit();
    wgmma_wait<1>();
    pin_registers(acc_s);

    // P^T: masked where the block crosses a sequence end or the diagonal.
    const bool crosses = m0 + BM > seq.seqlen_q || n0 + BN > seq.seqlen_k ||
                         (Cfg::kCausal && n0 + BN - 1 > m0 + diag);
    if (crosses) {
#pragma unroll
      for (int i = 0; i < BM / 2; ++i) {
        const int key = n0 + key_row + 8 * ((i >> 1) & 1);
        const int query = m0 + (i >> 2) * 8 + 2 * t + (i & 1);
        if (key >= seq.seqlen_k || query >= seq.seqlen_q ||
            (Cfg::kCausal && key > query + diag))
          acc_s[i] = bwd_mma::neg_inf();
      }
    }
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      const u32 addr = s_lse + (j * 8 + 2 * t) * 4;
      const float l0 = __uint_as_float(ld_shared_u32(addr));
      const float l1 = __uint_as_float(ld_shared_u32(addr + 4));
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc_s[4 * j + e] = fast_exp2(acc_s[4 * j + e] * p.scale_log2 - ((e & 1) ? l1 : l0));
    }

    // dS^T = P^T (dP^T - D). dV's product waits for it, to be issued with dK's: issued
    // under dP^T's, its P^T fragments would be live next to S^T and dP^T (ptxas spilled
    // at head dim 64, block_m 128; at 128 it was no faster, docs/PERF.md bw1).
    wgmma_wait<0>();
    pin_registers(acc_dp);
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
      const u32 addr = s_dpsum + (j * 8 + 2 * t) * 4;
      const float d0 = __uint_as_float(ld_shared_u32(addr));
      const float d1 = __uint_as_float(ld_shared_u32(addr + 4));
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc_dp[4 * j + e] = acc_s[4 * j + e] * (acc_dp[4 * j + e] - ((e & 1) ? d1 : d0));
    }
    u32 p_frag[BM / 16][4], ds_frag[BM / 16][4];
    pack_fragments<Cfg>(p_frag, acc_s);
    pack_fragments<Cfg>(ds_frag, acc_dp);
    if (with_dq) {
      // dS^T to shared memory, [key][query] in panels of 64 queries: the A operand of dQ.
#pragma unroll
      for (int j = 0; j < BM / 8; ++j)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = key_row + 8 * hf;
          st_shared_u32(s_ds + panel_offset<BN>(r, j) + t * 4, ds_frag[j / 2][(j & 1) * 2 + hf]);
        }
    }
    // dV += P^T dO and dK += dS^T Q.
    wgmma_fence();
    product_over_queries<Cfg>(acc_dv, p_frag, s_do);
    product_over_queries<Cfg>(acc_dk, ds_frag, s_q);
    wgmma_commit();

    if (with_dq) {
      fence_proxy_async_smem();  // the dS^T stores, before wgmma reads them
      named_sync(1, Cfg::kThreads);
      // dQ(slice) = dS K over the block's keys: A = dS^T read MN-major (64 queries of a
      // panel), B = K read MN-major (this slice's panels of the head dim).
      constexpr int kDqRegs = Cfg::kDqCols / 2;
      float acc_dq[kDqRegs];
      const u64 a0 = wgmma_desc(s_ds + (dq_rows0 / 64) * BN * 128, BN * 128, 1024, 128);
      const u64 b0 = wgmma_desc(s_k + (dq_col0 / 64) * BN * 128, BN * 128, 1024, 128);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
        wgmma_bwd_dq(acc_dq, wgmma_desc_add(a0, kk * 16 * 128), wgmma_desc_add(b0, kk * 16 * 128),
                     kk > 0 ? 1 : 0);
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(acc_dq);
      const long long row_base =
          (seq.q_offset >= 0 ? seq.q_offset : (long long)b * p.seqlen_q) + m0 + dq_rows0;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = warp_in_wg * 16 + g + 8 * hf;
        if (m0 + dq_rows0 + r >= seq.seqlen_q)
          continue;
        float *dst = P.dq_accum + ((row_base + r) * p.heads_q + h) * D + dq_col0 + 2 * t;
#pragma unroll
        for (int j = 0; j < Cfg::kDqCols / 8; ++j)
          asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst + j * 8),
                       "f"(acc_dq[4 * j + 2 * hf]), "f"(acc_dq[4 * j + 2 * hf + 1])
                       : "memory");
      }
    } else {
      wgmma_wait<0>();
    }
    pin_registers(acc_dk);
    pin_registers(acc_dv);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with K and V: their space stages dK and dV

  u16 *dk = (u16 *)P.dk +
            tensor_base(seq.k_offset, b, h_kv, P.dk_batch_stride, P.dk_row_stride,
                        P.dk_head_stride) +
            (long long)n0 * P.dk_row_stride;
  u16 *dv = (u16 *)P.dv +
            tensor_base(seq.k_offset, b, h_kv, P.dv_batch_stride, P.dv_row_stride,
                        P.dv_head_stride) +
            (long long)n0 * P.dv_row_stride;
  stage_rows<Cfg>(s_k, acc_dk, wg_row0, p.softmax_scale, g, t);
  stage_rows<Cfg>(s_v, acc_dv, wg_row0, 1.f, g, t);
  __syncthreads();
  store_rows<Cfg>(dk, P.dk_row_stride, s_k, keys_valid, tid);
  store_rows<Cfg>(dv, P.dv_row_stride, s_v, keys_valid, tid);
}

}  // namespace bwd_wgmma
}  // namespace fj
