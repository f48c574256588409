// Family fwd_mma: the FlashAttention-2 forward schedule for sm_80 .. sm_90.
//
// One CTA computes one block of kBlockM query rows of one (batch, head). Its warps
// split those rows, 16 * kMTiles rows each, so a warp owns whole rows and the softmax
// needs no shared memory. K and V tiles of kBlockN keys stream through a kStages-deep
// cp.async ring. S = Q K^T and O += P V use mma.sync.m16n8k16 with fp32 accumulators;
// P never leaves registers (the S accumulator layout is the A-operand layout of the
// second product). The softmax is online and in base 2 with the scale folded into
// one FMA. Causal attention is aligned bottom-right (query i sees keys
// j <= i + seqlen_k - seqlen_q): blocks past the diagonal are never loaded, and only
// blocks crossing the diagonal or the end of the sequence are masked. Features (window,
// softcap, ALiBi, user code) enter through fj_features.cuh's hook where the scores are
// masked; a window also narrows the key blocks a query block loads, and a mask_mod's
// block mask (fj_block_mask.cuh) lists them.
#pragma once

#include "fj_block_mask.cuh"
#include "fj_common.cuh"
#include "fj_features.cuh"
#include "fj_smem.cuh"

namespace fj {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_,
          int kWarps_, int kStages_, bool kCausal_, typename Features_ = NoFeatures>
struct FwdMmaConfig {
  typedef Element_ Element;
  typedef Features_ Features;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;
  static constexpr bool kCausal = kCausal_;
  static constexpr int kThreads = kWarps * 32;

  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row MMA tiles per warp
  static constexpr int kNTiles = kBlockN / 8;         // 8-key MMA tiles of S
  static constexpr int kKSteps = kHeadDim / 16;       // full k=16 steps of Q K^T
  static constexpr bool kKTail = kHeadDim % 16 != 0;  // one k=8 step more
  static constexpr int kOTiles = kHeadDimV / 8;       // 8-column MMA tiles of O
  // Keeping Q's fragments in registers saves shared-memory traffic when they fit.
  static constexpr bool kQInRegs = kMTiles * kHeadDim <= 128;

  static_assert(kHeadDim % 8 == 0 && kHeadDim >= 8 && kHeadDim <= 256, "head_dim");
  static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 8 && kHeadDimV <= 256, "head_dim_v");
  static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns a multiple of 16 rows");
  static_assert(kBlockN % 16 == 0, "block_n must be a multiple of 16");
  static_assert(kStages >= 2, "the K/V ring needs at least two stages");

  typedef SmemTile<kBlockM, kHeadDim> QTile;
  typedef SmemTile<kBlockM, kHeadDimV> OTile;  // aliases the Q tile at the end
  typedef SmemTile<kBlockN, kHeadDim> KTile;
  typedef SmemTile<kBlockN, kHeadDimV> VTile;
  static constexpr int kQBytes = QTile::kBytes > OTile::kBytes ? QTile::kBytes : OTile::kBytes;
  static constexpr int kStageBytes = KTile::kBytes + VTile::kBytes;
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes;
};

namespace fwd_mma {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// How far (in log2 units) a row's max may grow before O and the sum are rescaled. The
// slack saves O's rescale (0 cost 3 % on an H100) but lets P exceed 1, which rounds a
// little worse than against the true max: the output up to ~1 ulp off where cuDNN's is
// 0.5, within DESIGN.md's bar (docs/PERF.md e1; dec_mma, bandwidth-bound, uses none).
constexpr float kRescaleSlack = 8.f;

// Row state of the online softmax: running max (base-2, scaled) and partial sum. Each
// thread holds two rows per 16-row tile (lane/4 and lane/4 + 8).
template <int kMTiles> struct SoftmaxState {
  float row_max[kMTiles][2];
  float row_sum[kMTiles][2];  // this thread's partial sum; the quad is summed at the end
};

template <typename Cfg>
__device__ __forceinline__ void run(const FjForwardParams &p, unsigned char *smem) {
  typedef typename Cfg::Element T;
  constexpr int MT = Cfg::kMTiles, NT = Cfg::kNTiles, OT = Cfg::kOTiles;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // mma fragment coordinates
  // Causal: the last query blocks see the most keys; launch them first so the short
  // ones fill the tail of the grid instead of the long ones.
  const int m_block = Cfg::kCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_kv);

  const SeqExtent seq = seq_extent(p, b);
  const int q0 = m_block * Cfg::kBlockM;
  if (q0 >= seq.seqlen_q)
    return;  // varlen: this sequence is shorter than the longest one
  const int rows_valid = imin(Cfg::kBlockM, seq.seqlen_q - q0);

  const u16 *q = (const u16 *)p.q +
                 tensor_base(seq.q_offset, b, h, p.q_batch_stride, p.q_row_stride,
                             p.q_head_stride) +
                 (long long)q0 * p.q_row_stride;
  const u16 *k = (const u16 *)p.k + tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride,
                                                p.k_row_stride, p.k_head_stride);
  const u16 *v = (const u16 *)p.v + tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride,
                                                p.v_row_stride, p.v_head_stride);
  u16 *o = (u16 *)p.o +
           tensor_base(seq.q_offset, b, h, p.o_batch_stride, p.o_row_stride,
                       p.o_head_stride) +
           (long long)q0 * p.o_row_stride;

  // Keys this block can see: causal stops at the diagonal of its last row, a window
  // at its edges (blocks n_first .. n_blocks - 1).
  const int diag = seq.seqlen_k - seq.seqlen_q;  // query i sees keys j <= i + diag
  int n_blocks = (seq.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN;
  if (Cfg::kCausal) {
    int last_key = q0 + rows_valid - 1 + diag;  // last key the last row sees
    n_blocks = imin(n_blocks, last_key < 0 ? 0 : last_key / Cfg::kBlockN + 1);
  }
  typedef typename Cfg::Features F;
  int n_first = 0;
  if (F::kWindow)
    window_tiles<F, Cfg::kBlockN>(q0, q0 + rows_valid - 1, diag, n_first, n_blocks);
  const ScoreHook<F> hook(p, b, h, seq);
  const float score_scale = ScoreHook<F>::softmax_scale_log2(p);
  // The key blocks, i = 0 .. count - 1 in this order: n_first + i, or a block mask's list.
  // An entry is 2 * block + 1 when the features' mask may apply (fj_block_mask.cuh).
  int count = imax(n_blocks - n_first, 0);
  const int *block_list = nullptr, *slot_list = nullptr;
  if constexpr (F::kMaskMod) {
    if (p.block_counts) {
      const long long wi = block_mask::work_index(p, b, h, m_block);
      count = p.block_counts[wi];
      block_list = p.block_tiles + wi * p.block_tiles_stride;
      slot_list = p.block_slots + wi * p.block_tiles_stride;
    }
  }
  auto entry_at = [&](int i) -> u32 {
    if constexpr (F::kMaskMod) {
      if (block_list)
        return (u32)__ldg(block_list + i);
    }
    return 2u * (u32)(n_first + i) + 1u;
  };

  const u32 s_q = smem_addr(smem);
  const u32 s_kv = s_q + Cfg::kQBytes;

  float acc_o[MT][OT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int ot = 0; ot < OT; ++ot)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc_o[mt][ot][e] = 0.f;
  SoftmaxState<MT> sm;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      sm.row_max[mt][hf] = neg_inf();
      sm.row_sum[mt][hf] = 0.f;
    }

  // Prologue: Q, then the first kStages - 1 K/V blocks, one commit group per block.
  load_tile_async<typename Cfg::QTile, Cfg::kThreads>(s_q, q, p.q_row_stride, rows_valid,
                                                       tid);
  auto load_kv = [&](int i) {  // the i-th key block, into stage i % kStages
    const int n = block_mask::entry_tile(entry_at(i));
    const u32 stage = s_kv + (i % Cfg::kStages) * Cfg::kStageBytes;
    const int keys_valid = imin(Cfg::kBlockN, seq.seqlen_k - n * Cfg::kBlockN);
    load_tile_async<typename Cfg::KTile, Cfg::kThreads>(
        stage, k + (long long)n * Cfg::kBlockN * p.k_row_stride, p.k_row_stride,
        keys_valid, tid);
    load_tile_async<typename Cfg::VTile, Cfg::kThreads>(
        stage + Cfg::KTile::kBytes, v + (long long)n * Cfg::kBlockN * p.v_row_stride,
        p.v_row_stride, keys_valid, tid);
  };
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < count)
      load_kv(s);
    cp_async_commit();
  }

  const int warp_row0 = warp * Cfg::kRowsPerWarp;  // first row of this warp in the block

  // Q fragments (A operand), kept in registers when they fit.
  u32 q_frag[Cfg::kQInRegs ? MT : 1][Cfg::kQInRegs ? Cfg::kKSteps + 1 : 1][4];
  // Each lane's ldmatrix offsets for (rows 0, chunk 0) of Q, K and V; the others are
  // one SmemTile::step away.
  const u32 q_lane = Cfg::QTile::offset(warp_row0 + (lane & 15), lane >> 4);
  const u32 k_lane = Cfg::KTile::offset((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const u32 v_lane = Cfg::VTile::offset((lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
  auto load_q_frag = [&](u32 (&a)[4], int mt, int ks) {
    ldmatrix_x4(a, s_q + Cfg::QTile::step(q_lane, mt * 16, ks * 2));
  };
  auto load_q_tail = [&](u32 (&a)[2], int mt) {
    int r = warp_row0 + mt * 16 + (lane & 15);
    ldmatrix_x2(a, s_q + Cfg::QTile::offset(r, Cfg::kKSteps * 2));
  };
  if (Cfg::kQInRegs) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int ks = 0; ks < Cfg::kKSteps; ++ks)
        load_q_frag(q_frag[mt][ks], mt, ks);
      if (Cfg::kKTail) {
        u32 tail[2];
        load_q_tail(tail, mt);
        q_frag[mt][Cfg::kKSteps][0] = tail[0];
        q_frag[mt][Cfg::kKSteps][1] = tail[1];
      }
    }
  }

  for (int i = 0; i < count; ++i) {
    // Block i has landed once at most kStages - 2 younger groups are pending; the
    // barrier also tells every warp that block i - 1's stage is free to refill.
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    if (i + Cfg::kStages - 1 < count)
      load_kv(i + Cfg::kStages - 1);
    cp_async_commit();

    const u32 s_k = s_kv + (i % Cfg::kStages) * Cfg::kStageBytes;
    const u32 s_v = s_k + Cfg::KTile::kBytes;

    // S = Q K^T for this warp's rows.
    float acc_s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc_s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
      u32 a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (Cfg::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            a[mt][e] = q_frag[Cfg::kQInRegs ? mt : 0][Cfg::kQInRegs ? ks : 0][e];
        } else {
          load_q_frag(a[mt], mt, ks);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        // Keys np*16 .. +15, dims ks*16 .. +15: b0/b1 of two 8-key tiles.
        u32 bk[4];
        ldmatrix_x4(bk, s_k + Cfg::KTile::step(k_lane, np * 16, ks * 2));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc_s[mt][2 * np], a[mt], bk[0], bk[1]);
          mma_16816<T>(acc_s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
        }
      }
    }
    if (Cfg::kKTail) {
      u32 a[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (Cfg::kQInRegs) {
          a[mt][0] = q_frag[Cfg::kQInRegs ? mt : 0][Cfg::kQInRegs ? Cfg::kKSteps : 0][0];
          a[mt][1] = q_frag[Cfg::kQInRegs ? mt : 0][Cfg::kQInRegs ? Cfg::kKSteps : 0][1];
        } else {
          load_q_tail(a[mt], mt);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        u32 bk[2];
        int key = np * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        ldmatrix_x2(bk, s_k + Cfg::KTile::offset(key, Cfg::kKSteps * 2));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_1688<T>(acc_s[mt][2 * np], a[mt], bk[0]);
          mma_1688<T>(acc_s[mt][2 * np + 1], a[mt], bk[1]);
        }
      }
    }

    // Mask keys past the sequence end, when causal past the diagonal, and what the
    // features mask. Only the blocks that cross a boundary pay for it. The features'
    // score transform (the hook) applies to every block.
    const u32 entry = entry_at(i);
    const int key0 = block_mask::entry_tile(entry) * Cfg::kBlockN;
    const bool crosses_end = key0 + Cfg::kBlockN > seq.seqlen_k;
    const bool crosses_diag = Cfg::kCausal && key0 + Cfg::kBlockN - 1 > q0 + diag;
    const bool needs_mask =
        crosses_end || crosses_diag ||
        (FeatureTraits<F>::kMasks &&
         hook.tile_needs_mask(key0, Cfg::kBlockN, q0 + warp_row0,
                              q0 + warp_row0 + Cfg::kRowsPerWarp - 1,
                              block_mask::entry_partial(entry)));
    // A block mask's partly masked tile with a bit slot: its keep bits (which hold every
    // mask) instead of mask_mod's calls.
    typedef block_mask::TileBits<Cfg::kBlockN> Bits;
    unsigned bits[MT][2][Bits::kWords];  // (unused and gone without a mask_mod)
    bool use_bits = false;
    if constexpr (F::kMaskMod) {
      if (needs_mask && slot_list && block_mask::entry_partial(entry)) {
        const int slot = __ldg(slot_list + i);
        use_bits = slot >= 0;
        if (use_bits)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
              block_mask::load_row_bits<Cfg::kBlockM, Cfg::kBlockN>(
                  p, slot, warp_row0 + mt * 16 + g + 8 * hf, 2 * t, bits[mt][hf]);
      }
    }
    // ALiBi: every score transformed, then the mask (FeatureTraits::kTransformFirst).
    constexpr bool kTransformFirst = FeatureTraits<F>::kTransformFirst;
    if constexpr (kTransformFirst) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc_s[mt][nt][e] =
                hook.apply(acc_s[mt][nt][e], q0 + warp_row0 + mt * 16 + g + ((e >> 1) << 3),
                           key0 + 2 * t, nt * 8 + (e & 1));
    }
    if ((FeatureTraits<F>::kTransforms && !kTransformFirst) || needs_mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int row = q0 + warp_row0 + mt * 16 + g + ((e >> 1) << 3);
            int col = key0 + nt * 8 + 2 * t + (e & 1);
            const bool geometry = col >= seq.seqlen_k || (Cfg::kCausal && col > row + diag);
            bool masked;
            if (F::kMaskMod && use_bits)  // rows past the end have no bits
              masked = row >= seq.seqlen_q
                           ? geometry
                           : !block_mask::row_bit<Cfg::kBlockN>(bits[mt][e >> 1], nt, e & 1);
            else
              masked = needs_mask && (geometry || !hook.keeps(row, col));
            if (masked)
              acc_s[mt][nt][e] = neg_inf();
            else if (FeatureTraits<F>::kTransforms && !kTransformFirst)
              acc_s[mt][nt][e] =
                  hook.apply(acc_s[mt][nt][e], row, key0 + 2 * t, nt * 8 + (e & 1));
          }
    }

    // Online softmax: new row max, rescale what was accumulated, P = exp2(S*c - max).
    float correction[MT][2];
    bool rescale[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx = neg_inf();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          mx = fmaxf(mx, fmaxf(acc_s[mt][nt][2 * hf], acc_s[mt][nt][2 * hf + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        // The reference max moves only when the row max grows by more than
        // kRescaleSlack (log2 units): P then stays below 2^kRescaleSlack, exact in fp32
        // and in the 16-bit P, and most blocks skip rescaling O altogether. The LSE
        // uses the same reference, so the result is the same function.
        const float old_max = sm.row_max[mt][hf];
        const float block_max = mx * score_scale;
        const bool moved = block_max > old_max + kRescaleSlack;
        const float new_max = moved ? block_max : old_max;
        rescale[mt][hf] = moved;
        // A row that has seen no key yet keeps max -inf; subtract 0 instead so that
        // exp2 gives 0 (never inf - inf = NaN).
        const float base = new_max == neg_inf() ? 0.f : new_max;
        correction[mt][hf] = moved ? fast_exp2(old_max - base) : 1.f;
        sm.row_max[mt][hf] = new_max;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
            float pv = fast_exp2(acc_s[mt][nt][e] * score_scale - base);
            acc_s[mt][nt][e] = pv;
            sum += pv;
          }
        sm.row_sum[mt][hf] = sm.row_sum[mt][hf] * correction[mt][hf] + sum;
      }
    bool any_rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      any_rescale |= rescale[mt][0] | rescale[mt][1];
    if (__any_sync(0xffffffff, any_rescale)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ot = 0; ot < OT; ++ot)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc_o[mt][ot][e] *= correction[mt][e >> 1];
    }

    // O += P V. P's fragments come straight from the S accumulators.
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      u32 a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = pack2<T>(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
        a[mt][1] = pack2<T>(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
        a[mt][2] = pack2<T>(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<T>(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
      }
      const int key = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int op = 0; op < OT / 2; ++op) {
        u32 bv[4];
        ldmatrix_x4_trans(bv, s_v + Cfg::VTile::step(v_lane, kk * 16, op * 2));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc_o[mt][2 * op], a[mt], bv[0], bv[1]);
          mma_16816<T>(acc_o[mt][2 * op + 1], a[mt], bv[2], bv[3]);
        }
      }
      if (OT % 2) {
        u32 bv[2];
        ldmatrix_x2_trans(bv, s_v + Cfg::VTile::offset(key, OT - 1));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          mma_16816<T>(acc_o[mt][OT - 1], a[mt], bv[0], bv[1]);
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: normalise, write the log-sum-exp, stage O through shared memory (the Q
  // tile's space) so global stores are 16 bytes wide and coalesced.
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float sum = sm.row_sum[mt][hf];
      sum += __shfl_xor_sync(0xffffffff, sum, 1);
      sum += __shfl_xor_sync(0xffffffff, sum, 2);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int r = warp_row0 + mt * 16 + g + hf * 8;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot) {
        u32 packed = pack2<T>(acc_o[mt][ot][2 * hf] * inv, acc_o[mt][ot][2 * hf + 1] * inv);
        u32 addr = s_q + Cfg::OTile::offset(r, ot) + t * 4;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(packed));
      }
      if (p.lse && t == 0 && r < rows_valid) {
        // max is in base 2 of the scaled scores: ln-sum-exp = max * ln 2 + ln(sum).
        float lse = sum > 0.f ? sm.row_max[mt][hf] * 0.69314718055994531f + __logf(sum)
                              : neg_inf();
        p.lse[lse_index(p, seq, h, q0 + r)] = lse;
      }
    }
  __syncthreads();
  constexpr int kOChunks = Cfg::OTile::kChunks;
  constexpr int kOIters = (Cfg::kBlockM * kOChunks + Cfg::kThreads - 1) / Cfg::kThreads;
#pragma unroll
  for (int it = 0; it < kOIters; ++it) {
    int i = tid + it * Cfg::kThreads;
    int r = i / kOChunks, c = i % kOChunks;
    if (r < rows_valid) {
      u32 addr = s_q + Cfg::OTile::offset(r, c);
      u32x4 val;
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                   : "r"(addr));
      *(u32x4 *)(o + (long long)r * p.o_row_stride + c * 8) = val;
    }
  }
}

}  // namespace fwd_mma
}  // namespace fj
