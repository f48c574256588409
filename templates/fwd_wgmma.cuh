// Family fwd_wgmma: the FlashAttention-3 forward schedule for Hopper (sm_90a).
//
// One CTA computes kBlockM = 64 * kConsumers query rows of one (batch, head) with
// 128 * (kConsumers + 1) threads in warpgroups of 4 warps:
// - warpgroup 0 is the producer: one thread issues TMA loads of the Q block and of the
//   K and V tiles into a kStages-deep ring, each completing on an mbarrier; it gives
//   most of its registers to the consumers (setmaxnreg).
// - each consumer warpgroup owns 64 query rows. S = Q K^T is one chain of
//   wgmma.mma_async with both operands in shared memory; P is converted in registers
//   (the S accumulator layout is the A-fragment layout) and O += P V is a second chain
//   with A from registers and V read N-major. Each consumer releases a K or V slot as
//   soon as its product is complete.
// Head dims are padded up to the swizzle panel (32 or 64 elements) by TMA's zero fill,
// so any multiple of 8 is exact. The softmax is online, in base 2, with the scale folded
// into one FMA; causal is aligned bottom-right and iterates the key tiles from the last
// to the first, so only the first few tiles a row meets need masks.
#pragma once

#include "fj_common.cuh"
#include "fj_hopper.cuh"

namespace fj {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockN_, int kConsumers_,
          int kStages_, bool kCausal_>
struct FwdWgmmaConfig {
  typedef Element_ Element;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kStages = kStages_;
  static constexpr bool kCausal = kCausal_;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);

  // Head dims padded to whole swizzle panels: rows of 128 bytes when that divides,
  // else 64 bytes.
  static constexpr int kDPad = (kHeadDim + 31) / 32 * 32;
  static constexpr int kDvPad = (kHeadDimV + 31) / 32 * 32;
  static constexpr int kPanelD = kDPad % 64 == 0 ? 64 : 32;    // elements per panel row
  static constexpr int kPanelDv = kDvPad % 64 == 0 ? 64 : 32;
  static constexpr int kSwizzleD = kPanelD * 2;                // bytes per panel row
  static constexpr int kSwizzleDv = kPanelDv * 2;

  static constexpr int kQBytes = kBlockM * kDPad * 2;
  static constexpr int kKBytes = kBlockN * kDPad * 2;
  static constexpr int kVBytes = kBlockN * kDvPad * 2;
  static constexpr int kBarriers = 1 + 4 * kStages;  // Q, then full/empty for K and V
  // 1024 bytes of slack to align the operands to the 128-byte swizzle's period.
  static constexpr int kSmemBytes =
      1024 + kQBytes + kStages * (kKBytes + kVBytes) + kBarriers * 8;

  // Registers per thread after setmaxnreg: the producer keeps the minimum.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;

  static_assert(kHeadDim % 8 == 0 && kHeadDim >= 8 && kHeadDim <= 256, "head_dim");
  static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 8 && kHeadDimV <= 256, "head_dim_v");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256, "block_n");
  static_assert(kConsumers >= 1 && kConsumers <= 3, "1 to 3 consumer warpgroups");
  static_assert(kStages >= 2, "the K/V ring needs at least two stages");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536,
                "register file");
};

namespace fwd_wgmma {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// How far (in log2 units) a row's max may grow before O and the sum are rescaled (as in
// fwd_mma: P stays below 2^8, exact in fp32 and in the 16-bit P).
constexpr float kRescaleSlack = 8.f;

// Where the operands live in shared memory (all offsets 1024-byte aligned).
template <typename Cfg> struct SmemLayout {
  u32 q, k, v, bar;
  __device__ explicit SmemLayout(u32 base) {
    q = base;
    k = q + Cfg::kQBytes;
    v = k + Cfg::kStages * Cfg::kKBytes;
    bar = v + Cfg::kStages * Cfg::kVBytes;
  }
  __device__ u32 bar_q() const { return bar; }
  __device__ u32 full_k(int s) const { return bar + 8 * (1 + s); }
  __device__ u32 full_v(int s) const { return bar + 8 * (1 + Cfg::kStages + s); }
  __device__ u32 empty_k(int s) const { return bar + 8 * (1 + 2 * Cfg::kStages + s); }
  __device__ u32 empty_v(int s) const { return bar + 8 * (1 + 3 * Cfg::kStages + s); }
};

// What one CTA computes: its rows and the key tiles they see.
struct Work {
  int m_block, h, h_kv, b;
  int q0;        // first query row
  int n_blocks;  // key tiles 0 .. n_blocks - 1 (causal stops at the diagonal)
  int diag;      // query i sees keys j <= i + diag
};

template <typename Cfg> __device__ __forceinline__ Work cta_work(const FjForwardParams &p) {
  Work w;
  // Causal: the last query blocks see the most keys; launch them first.
  w.m_block = Cfg::kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  w.h = blockIdx.y;
  w.b = blockIdx.z;
  w.h_kv = w.h / (p.heads_q / p.heads_kv);
  w.q0 = w.m_block * Cfg::kBlockM;
  w.diag = p.seqlen_k - p.seqlen_q;
  w.n_blocks = (p.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  if (Cfg::kCausal) {
    const int last_row = imin(w.q0 + Cfg::kBlockM, p.seqlen_q) - 1;
    const int last_key = last_row + w.diag;
    w.n_blocks = imin(w.n_blocks, last_key < 0 ? 0 : last_key / Cfg::kBlockN + 1);
  }
  return w;
}

// Warpgroup 0, one thread: Q once, then K and V of every tile (last tile first).
template <typename Cfg>
__device__ __forceinline__ void produce(const SmemLayout<Cfg> &sm, const Work &w,
                                        const TensorMap &tm_q, const TensorMap &tm_k,
                                        const TensorMap &tm_v) {
  constexpr int kPanelsD = Cfg::kDPad / Cfg::kPanelD;
  constexpr int kPanelsDv = Cfg::kDvPad / Cfg::kPanelDv;
  if (w.n_blocks == 0)
    return;
  tma_prefetch_map(tm_q);
  tma_prefetch_map(tm_k);
  tma_prefetch_map(tm_v);
  mbar_arrive_expect_tx(sm.bar_q(), Cfg::kQBytes);
#pragma unroll
  for (int p = 0; p < kPanelsD; ++p)
    tma_load_4d(sm.q + p * Cfg::kBlockM * Cfg::kSwizzleD, tm_q, sm.bar_q(), p * Cfg::kPanelD,
                w.q0, w.h, w.b);
  for (int it = 0; it < w.n_blocks; ++it) {
    const int n = w.n_blocks - 1 - it, s = it % Cfg::kStages;
    const u32 free_parity = ((it / Cfg::kStages) & 1) ^ 1;
    const int key0 = n * Cfg::kBlockN;
    mbar_wait(sm.empty_k(s), free_parity);
    mbar_arrive_expect_tx(sm.full_k(s), Cfg::kKBytes);
    const u32 k_dst = sm.k + s * Cfg::kKBytes;
#pragma unroll
    for (int p = 0; p < kPanelsD; ++p)
      tma_load_4d(k_dst + p * Cfg::kBlockN * Cfg::kSwizzleD, tm_k, sm.full_k(s),
                  p * Cfg::kPanelD, key0, w.h_kv, w.b);
    mbar_wait(sm.empty_v(s), free_parity);
    mbar_arrive_expect_tx(sm.full_v(s), Cfg::kVBytes);
    const u32 v_dst = sm.v + s * Cfg::kVBytes;
#pragma unroll
    for (int p = 0; p < kPanelsDv; ++p)
      tma_load_4d(v_dst + p * Cfg::kBlockN * Cfg::kSwizzleDv, tm_v, sm.full_v(s),
                  p * Cfg::kPanelDv, key0, w.h_kv, w.b);
  }
}

// S = Q K^T for this warpgroup's 64 rows: K-major operands, one wgmma per 16 of d.
template <typename Cfg>
__device__ __forceinline__ void qk_product(float (&acc_s)[Cfg::kBlockN / 2], u32 q_rows,
                                           u32 k_tile) {
  constexpr int kStepsPerPanel = Cfg::kPanelD / 16;
  constexpr u32 kSbo = 8 * Cfg::kSwizzleD;  // 8 rows of one panel
#pragma unroll
  for (int ks = 0; ks < Cfg::kDPad / 16; ++ks) {
    const int panel = ks / kStepsPerPanel, within = ks % kStepsPerPanel;
    const u64 a = wgmma_desc(q_rows + panel * Cfg::kBlockM * Cfg::kSwizzleD + within * 32, 16,
                             kSbo, Cfg::kSwizzleD);
    const u64 b = wgmma_desc(k_tile + panel * Cfg::kBlockN * Cfg::kSwizzleD + within * 32, 16,
                             kSbo, Cfg::kSwizzleD);
    wgmma_qk(acc_s, a, b, ks > 0 ? 1 : 0);
  }
}

// O += P V: P from registers, V N-major (rows of keys, head_dim_v contiguous). A step
// covers 16 keys = two 8-row groups (sbo); panels of head_dim_v are lbo apart.
template <typename Cfg>
__device__ __forceinline__ void pv_product(float (&acc_o)[Cfg::kDvPad / 2],
                                           const u32 (&p_frag)[Cfg::kBlockN / 16][4],
                                           u32 v_tile) {
  constexpr u32 kLbo = Cfg::kBlockN * Cfg::kSwizzleDv;
  constexpr u32 kSbo = 8 * Cfg::kSwizzleDv;
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
    const u64 b = wgmma_desc(v_tile + kk * 16 * Cfg::kSwizzleDv, kLbo, kSbo, Cfg::kSwizzleDv);
    wgmma_pv(acc_o, p_frag[kk], b);
  }
}

// Consumer warpgroup `wg` (1-based in the CTA): rows q0 + 64 * (wg - 1) .. + 63.
template <typename Cfg>
__device__ __forceinline__ void consume(const FjForwardParams &p, const SmemLayout<Cfg> &sm,
                                        const Work &w, int wg) {
  typedef typename Cfg::Element T;
  constexpr int NT = Cfg::kBlockN / 8;  // 8-key column groups of S
  constexpr int OT = Cfg::kDvPad / 8;   // 8-column groups of O
  const int lane = threadIdx.x & 31, warp_in_wg = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int wg_row0 = (wg - 1) * 64;
  // The two rows this thread holds (accumulator rows g and g + 8 of its warp).
  const int row[2] = {w.q0 + wg_row0 + warp_in_wg * 16 + g,
                      w.q0 + wg_row0 + warp_in_wg * 16 + g + 8};

  float acc_o[OT * 4];
#pragma unroll
  for (int i = 0; i < OT * 4; ++i)
    acc_o[i] = 0.f;
  float row_max[2] = {neg_inf(), neg_inf()};
  float row_sum[2] = {0.f, 0.f};

  const u32 q_rows = sm.q + wg_row0 * Cfg::kSwizzleD;
  if (w.n_blocks > 0)
    mbar_wait(sm.bar_q(), 0);

  for (int it = 0; it < w.n_blocks; ++it) {
    const int n = w.n_blocks - 1 - it, s = it % Cfg::kStages;
    const u32 full_parity = (it / Cfg::kStages) & 1;
    const int key0 = n * Cfg::kBlockN;

    float acc_s[NT * 4];
    mbar_wait(sm.full_k(s), full_parity);
    wgmma_fence();
    qk_product<Cfg>(acc_s, q_rows, sm.k + s * Cfg::kKBytes);
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(acc_s);
    if (lane == 0)
      mbar_arrive(sm.empty_k(s));

    // Mask keys past the sequence end and, when causal, past the diagonal; only tiles
    // that cross either boundary pay for it.
    const bool crosses_end = key0 + Cfg::kBlockN > p.seqlen_k;
    const bool crosses_diag = Cfg::kCausal && key0 + Cfg::kBlockN - 1 > w.q0 + wg_row0 + w.diag;
    if (crosses_end || crosses_diag) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = key0 + nt * 8 + 2 * t + (e & 1);
          if (col >= p.seqlen_k || (Cfg::kCausal && col > row[e >> 1] + w.diag))
            acc_s[nt * 4 + e] = neg_inf();
        }
    }

    // Online softmax: each row lives in one quad of lanes.
    float correction[2];
    bool rescale = false;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = neg_inf();
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        mx = fmaxf(mx, fmaxf(acc_s[nt * 4 + 2 * hf], acc_s[nt * 4 + 2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      const float old_max = row_max[hf];
      const float tile_max = mx * p.scale_log2;
      const bool moved = tile_max > old_max + kRescaleSlack;
      const float new_max = moved ? tile_max : old_max;
      rescale |= moved;
      // A row that has seen no key yet keeps max -inf; subtract 0 so exp2 gives 0.
      const float base = new_max == neg_inf() ? 0.f : new_max;
      correction[hf] = moved ? fast_exp2(old_max - base) : 1.f;
      row_max[hf] = new_max;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
          const float pv = fast_exp2(acc_s[nt * 4 + e] * p.scale_log2 - base);
          acc_s[nt * 4 + e] = pv;
          sum += pv;
        }
      row_sum[hf] = row_sum[hf] * correction[hf] + sum;
    }
    if (__any_sync(0xffffffff, rescale)) {
#pragma unroll
      for (int i = 0; i < OT * 4; ++i)
        acc_o[i] *= correction[(i >> 1) & 1];
    }

    // P in the A-fragment layout: 16 keys = two 8-key column groups of S.
    u32 p_frag[NT / 2][4];
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      p_frag[kk][0] = pack2<T>(acc_s[8 * kk + 0], acc_s[8 * kk + 1]);
      p_frag[kk][1] = pack2<T>(acc_s[8 * kk + 2], acc_s[8 * kk + 3]);
      p_frag[kk][2] = pack2<T>(acc_s[8 * kk + 4], acc_s[8 * kk + 5]);
      p_frag[kk][3] = pack2<T>(acc_s[8 * kk + 6], acc_s[8 * kk + 7]);
    }

    mbar_wait(sm.full_v(s), full_parity);
    wgmma_fence();
    pv_product<Cfg>(acc_o, p_frag, sm.v + s * Cfg::kVBytes);
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(acc_o);
    if (lane == 0)
      mbar_arrive(sm.empty_v(s));
  }

  // Epilogue: normalise and store this thread's rows (4-byte stores: a quad writes 16
  // contiguous bytes per 8-column group), and the log-sum-exp.
  u16 *o = (u16 *)p.o + (long long)w.b * p.o_batch_stride + (long long)w.h * p.o_head_stride;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float sum = row_sum[hf];
    sum += __shfl_xor_sync(0xffffffff, sum, 1);
    sum += __shfl_xor_sync(0xffffffff, sum, 2);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    if (row[hf] >= p.seqlen_q)
      continue;
    u16 *o_row = o + (long long)row[hf] * p.o_row_stride;
#pragma unroll
    for (int ot = 0; ot < OT; ++ot) {
      if (ot * 8 < Cfg::kHeadDimV) {
        const u32 packed =
            pack2<T>(acc_o[ot * 4 + 2 * hf] * inv, acc_o[ot * 4 + 2 * hf + 1] * inv);
        *(u32 *)(o_row + ot * 8 + 2 * t) = packed;
      }
    }
    if (p.lse && t == 0) {
      // max is in base 2 of the scaled scores: ln-sum-exp = max * ln 2 + ln(sum).
      const float lse =
          sum > 0.f ? row_max[hf] * 0.69314718055994531f + __logf(sum) : neg_inf();
      p.lse[(long long)w.b * p.lse_batch_stride + (long long)w.h * p.lse_head_stride +
            row[hf]] = lse;
    }
  }
}

template <typename Cfg>
__device__ __forceinline__ void run(const FjForwardParams &p, const TensorMap &tm_q,
                                    const TensorMap &tm_k, const TensorMap &tm_v,
                                    unsigned char *smem) {
  const SmemLayout<Cfg> sm((smem_addr(smem) + 1023) & ~1023u);
  const Work w = cta_work<Cfg>(p);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(sm.bar_q(), 1);
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(sm.full_k(s), 1);
      mbar_init(sm.full_v(s), 1);
      mbar_init(sm.empty_k(s), 4 * Cfg::kConsumers);  // one arrival per consumer warp
      mbar_init(sm.empty_v(s), 4 * Cfg::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();

  // One branch per role: setmaxnreg needs each warpgroup's role to be one side of a
  // single if/else.
  if (wg == 0) {
    regs_lower<Cfg::kProducerRegs>();
    if (threadIdx.x == 0)
      produce<Cfg>(sm, w, tm_q, tm_k, tm_v);
  } else {
    regs_raise<Cfg::kConsumerRegs>();
    consume<Cfg>(p, sm, w, wg);
  }
}

}  // namespace fwd_wgmma
}  // namespace fj
