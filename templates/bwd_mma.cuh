// Family bwd_mma: the FlashAttention-2 backward schedule for sm_80 and newer (mma.sync).
//
// The probabilities are recomputed from Q, K and the forward's log-sum-exp, never
// stored. Four kernels, launched in order by the host (after a memset that zeroes the
// fp32 dQ accumulator, unless deterministic):
//   prep     D = rowsum(dO * O) and lse * log2(e) per query row, into the workspace;
//   main     one CTA per block of kBlockN keys of one (batch, key/value head): it walks
//            the query blocks of every query head of its group (GQA: dK and dV summed
//            over the group in registers, in a fixed order), accumulating dK and dV; dQ
//            goes to the fp32 accumulator by atomics (unless deterministic);
//   convert  dQ = scale * accumulator, in the element type;
//   dq       (deterministic mode, instead of the atomics and convert) one CTA per block
//            of queries, walking the key blocks: dQ in registers, written once.
//
// The main kernel computes the transposed products (S^T = K Q^T, dP^T = V dO^T): its
// warps own key rows, so P^T and dS^T come out of the accumulators already in the
// A-operand layout of dV += P^T dO and dK += dS^T Q and never touch shared memory.
// Only dS^T goes through shared memory, for dQ = dS K. Where dK and dV together would
// not fit in the registers (head dims above 128), the main kernel runs as two passes
// over the same blocks: dV (S^T, dV), then dK and dQ (S^T, dP^T, dK, dQ).
//
// Causal attention is aligned bottom-right as in the forward: query i sees keys
// j <= i + seqlen_k - seqlen_q. A key block skips the query blocks that see none of it,
// and only blocks that cross the diagonal or a sequence end are masked.
//
// Attention features (fj_features.cuh) recompute P through the forward's hook: the
// window's bounds skip blocks as causal does, its edges and a mask_mod are masked per
// score, soft-capping and ALiBi transform the score, and soft-capping's derivative
// (1 - tanh^2) scales dS. A score_mod has no derivative and is refused by the host.
#pragma once

#include "fj_bwd_params.h"
#include "fj_common.cuh"
#include "fj_features.cuh"
#include "fj_smem.cuh"

namespace fj {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_,
          int kWarps_, int kStages_, bool kCausal_, typename Features_ = NoFeatures>
struct BwdMmaConfig {
  typedef Element_ Element;
  typedef Features_ Features;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockM = kBlockM_;  // query rows per step of the main kernel
  static constexpr int kBlockN = kBlockN_;  // key rows per CTA of the main kernel
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;  // Q/dO (main) and K/V (dq) ring depth
  static constexpr bool kCausal = kCausal_;
  static constexpr int kThreads = kWarps * 32;

  // Main kernel: each warp owns kRowsPerWarp key rows (kKT tiles of 16) and every query
  // column of a step (kQT tiles of 8).
  static constexpr int kRowsPerWarp = kBlockN / kWarps;
  static constexpr int kKT = kRowsPerWarp / 16;
  static constexpr int kQT = kBlockM / 8;
  static constexpr int kDT = kHeadDim / 8;
  static constexpr int kDvT = kHeadDimV / 8;

  // dK and dV accumulators per thread; above 128 registers they are split over two
  // passes (generator/bwd_mma.cpp mirrors this rule).
  static constexpr bool kSplitPasses = kKT * (kHeadDim + kHeadDimV) / 2 > 128;

  static_assert(kHeadDim % 8 == 0 && kHeadDim >= 8 && kHeadDim <= 256, "head_dim");
  static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 8 && kHeadDimV <= 256, "head_dim_v");
  static_assert(kBlockN % (16 * kWarps) == 0, "each warp owns a multiple of 16 key rows");
  static_assert(kBlockM % 16 == 0, "block_m must be a multiple of 16");
  static_assert(kStages >= 2, "the ring needs at least two stages");

  typedef SmemTile<kBlockN, kHeadDim> KTile;
  typedef SmemTile<kBlockN, kHeadDimV> VTile;
  typedef SmemTile<kBlockM, kHeadDim> QTile;
  typedef SmemTile<kBlockM, kHeadDimV> DoTile;
  typedef SmemTile<kBlockN, kBlockM> DsTile;  // dS^T: [key][query]
  // One ring stage of the main kernel: Q, dO, and kBlockM floats each of lse*log2(e)
  // and D.
  static constexpr int kStageBytes = QTile::kBytes + DoTile::kBytes + 2 * kBlockM * 4;
  static constexpr int kSmemBytes =
      KTile::kBytes + VTile::kBytes + kStages * kStageBytes + DsTile::kBytes;

  // dQ = dS K within the main kernel: warps split the query rows into 16-row tiles,
  // then the head dim.
  static constexpr int kDqWarpsM = kWarps < kBlockM / 16 ? kWarps : kBlockM / 16;
  static constexpr int kDqWarpsN = kWarps / kDqWarpsM;
  static constexpr int kDqRowTiles = kBlockM / 16 / kDqWarpsM;
  static constexpr int kDqColTiles = (kDT + kDqWarpsN - 1) / kDqWarpsN;
  static constexpr bool kDqColsEven = kDT % kDqWarpsN == 0;
  static_assert(kWarps % kDqWarpsM == 0 && (kBlockM / 16) % kDqWarpsM == 0, "dQ warp layout");

  // The deterministic dq kernel: the main kernel's geometry with the roles swapped
  // (kBlockN query rows per CTA, kRowsPerWarp per warp, kBlockM keys per step).
  typedef SmemTile<kBlockN, kHeadDim> DqQTile;
  typedef SmemTile<kBlockN, kHeadDimV> DqDoTile;
  typedef SmemTile<kBlockM, kHeadDim> DqKTile;
  typedef SmemTile<kBlockM, kHeadDimV> DqVTile;
  static constexpr int kDqStageBytes = DqKTile::kBytes + DqVTile::kBytes;
  static constexpr int kDqSmemBytes =
      DqQTile::kBytes + DqDoTile::kBytes + kStages * kDqStageBytes;
};

namespace bwd_mma {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// The query blocks [m_begin, m_end) (of kBlockM rows) that see some key of the block
// [n0, n0 + kBlockN): causal and a window's right bound skip those before, a window's
// left bound those after.
template <typename Cfg>
__device__ __forceinline__ void query_blocks(int n0, int diag, int m_blocks, int &m_begin,
                                             int &m_end) {
  typedef typename Cfg::Features F;
  constexpr int BM = Cfg::kBlockM;
  m_begin = 0;
  m_end = m_blocks;
  if (Cfg::kCausal && n0 - diag > 0)
    m_begin = (n0 - diag) / BM;
  if constexpr (FeatureTraits<F>::kRightBound) {
    const int lo = n0 - diag - F::kWindowRight;  // the first row that sees key n0
    if (lo > 0)
      m_begin = imax(m_begin, lo / BM);
  }
  if constexpr (FeatureTraits<F>::kLeftBound) {
    const int hi = n0 + Cfg::kBlockN - 1 - diag + F::kWindowLeft;  // the last row that sees one
    m_end = imin(m_end, hi < 0 ? 0 : hi / BM + 1);
  }
  m_begin = imin(m_begin, m_blocks);
  m_end = imax(m_end, m_begin);
}

// Block sparsity of a mask_mod for the backward's key-major walk (FjBackwardParams's
// block_steps, written through `steps` and `counts`; the strides and capacity are
// P's): one CTA of kBuildThreads per (key block blockIdx.x, kv head blockIdx.y,
// sequence blockIdx.z; one head or sequence where the mask is shared) scores every
// (query, key) pair of the query blocks query_blocks leaves, block by block, and lists
// the (query head, query block) steps some pair keeps, marking those where some pair is
// dropped. A pair is kept when it exists (both inside their sequences), causal keeps it
// and the hook keeps it (the window, mask_mod): so an unmarked step needs no mask at all,
// and an omitted one would contribute nothing to dK, dV or dQ. A marked step also takes
// a slot of keep bits (StepBits) through `used` (zeroed before the launch; it ends as the
// count of marked steps), while there are slots left, else -1. With shared_heads the mask
// is scored for head 0 and the list (with its slots) repeated for each query head of the
// group.
constexpr int kBuildThreads = 256;

// The keep bits of a partly masked step: key row r (0 .. kBlockN - 1) is kWords 32-bit
// words, bit q % 32 of word q / 32 for query q (0 .. kBlockM - 1) of the step.
template <int kBlockM, int kBlockN> struct StepBits {
  static constexpr int kWords = (kBlockM + 31) / 32;  // a key row's
  static constexpr int kSlotWords = kBlockN * kWords;
};

template <typename Cfg>
__device__ __forceinline__ void build_block_steps(const FjBackwardParams &P, unsigned *steps,
                                                  int *counts, int *slots, unsigned *bits,
                                                  int *used, bool shared_heads) {
  typedef typename Cfg::Features F;
  typedef StepBits<Cfg::kBlockM, Cfg::kBlockN> Bits;
  constexpr int BM = Cfg::kBlockM, BN = Cfg::kBlockN, kWarps = kBuildThreads / 32;
  __shared__ unsigned step_bits[Bits::kSlotWords];
  __shared__ int slot_taken;
  const FjForwardParams &p = P.fwd;
  const int n = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const SeqExtent seq = seq_extent(p, b);
  const long long w = (long long)b * P.block_steps_batch_stride +
                      (long long)h_kv * P.block_steps_head_stride + n;
  unsigned *list = steps + w * P.block_steps_capacity;
  int *list_slots = slots + w * P.block_steps_capacity;
  const int n0 = n * BN, group = p.heads_q / p.heads_kv;
  int count = 0;
  if (n0 < seq.seqlen_k) {
    const int diag = seq.seqlen_k - seq.seqlen_q;
    int m_begin, m_end;
    query_blocks<Cfg>(n0, diag, (seq.seqlen_q + BM - 1) / BM, m_begin, m_end);
    for (int hi = 0; hi < (shared_heads ? 1 : group); ++hi) {
      const ScoreHook<F> hook(p, b, shared_heads ? 0 : h_kv * group + hi, seq);
      for (int m = m_begin; m < m_end; ++m) {
        // A warp scores 32 queries of one key row: one ballot makes their word of bits.
        bool any = false, all = true;
        for (int rw = warp; rw < Bits::kSlotWords; rw += kWarps) {
          const int r = rw / Bits::kWords, q = (rw % Bits::kWords) * 32 + lane;
          const int i = m * BM + q, j = n0 + r;
          const bool keep = q < BM && i < seq.seqlen_q && j < seq.seqlen_k &&
                            (!Cfg::kCausal || j <= i + diag) && hook.keeps(i, j);
          const unsigned word = __ballot_sync(0xffffffffu, keep);
          if (lane == 0)
            step_bits[rw] = word;
          any |= keep;
          all &= keep || q >= BM;
        }
        any = __syncthreads_or(any) != 0;
        all = __syncthreads_and(all) != 0;
        if (any) {
          int slot = -1;
          if (!all) {
            if (threadIdx.x == 0)
              slot_taken = atomicAdd(used, 1);
            __syncthreads();
            slot = slot_taken < P.block_step_bits_capacity ? slot_taken : -1;
            if (slot >= 0) {
              unsigned *dst = bits + (long long)slot * Bits::kSlotWords;
#pragma unroll 1
              for (int e = threadIdx.x; e < Bits::kSlotWords; e += kBuildThreads)
                dst[e] = step_bits[e];
            }
          }
          if (threadIdx.x == 0) {
            list[count] = ((unsigned)hi << 24) | ((unsigned)m << 1) | (all ? 0u : 1u);
            list_slots[count] = slot;
          }
          ++count;
        }
        __syncthreads();  // step_bits and slot_taken are the next step's
      }
    }
    if (shared_heads && group > 1) {
      for (int e = threadIdx.x; e < (group - 1) * count; e += kBuildThreads) {
        list[count + e] = list[e % count] | ((unsigned)(1 + e / count) << 24);
        list_slots[count + e] = list_slots[e % count];
      }
      count *= group;
    }
  }
  if (threadIdx.x == 0)
    counts[w] = count;
}

// An entry of a block_steps list: the query head within the group, the query block and
// whether the step is partly masked.
__device__ __forceinline__ int step_head(unsigned entry) { return (int)(entry >> 24); }
__device__ __forceinline__ int step_block(unsigned entry) { return (int)((entry >> 1) & 0x7fffffu); }
__device__ __forceinline__ bool step_partial(unsigned entry) { return (entry & 1u) != 0; }

// The derivative of what ScoreHook::apply() returns (as a natural logit) by
// s * softmax_scale, which dS takes as a factor: soft-capping's 1 - tanh^2 of its
// argument; 1 for ALiBi (a bias) and for the masks. A score_mod has no derivative here
// (the host refuses it for the backward pass, generator/spec.cpp). Here rather than in
// the hook (fj_features.cuh): only the backward pass needs it, and the forward
// families' kernels (and their tuning keys) stay as they are.
template <typename F>
__device__ __forceinline__ float feature_dlogit(const ScoreHook<F> &hook, float s) {
  if constexpr (F::kSoftcap > 0.f) {
    const float t = tanh_approx(s * (hook.scale * (1.f / F::kSoftcap)));
    return 1.f - t * t;
  } else {
    return 1.f;
  }
}

// With features: P of score s (= q.k) of row `query` and key `key`, the row's lse * log2(e)
// given. `dropped`: the plain masks (sequence ends, causal) drop the score; where the tile
// needs it (`feature_mask`), the features' masks are tested too. `dl` gets what dS is
// scaled by (feature_dlogit). kMasked = false, for a step that drops no pair: no test.
//
// Callers compile their step's loop twice (not_masked), masked where the step crosses a
// sequence end, the diagonal or a feature's bound and unmasked elsewhere: with the tests
// predicated in every step, a sliding window's steps issued 1.6x the instructions of
// causal's (PERF f7).
template <bool kMasked, typename F>
__device__ __forceinline__ float feature_prob(const ScoreHook<F> &hook, float s,
                                              float scale_log2, int query, int key,
                                              bool dropped, bool feature_mask, float lse2,
                                              float &dl) {
  // apply() returns s itself without a transform.
  const float x = FeatureTraits<F>::kLog2Logits ? hook.apply(s, query, key, 0)
                                                : hook.apply(s, query, key, 0) * scale_log2;
  dl = feature_dlogit(hook, s);
  if constexpr (!kMasked) {
    return fast_exp2(x - lse2);
  } else {
    if (FeatureTraits<F>::kMasks && feature_mask && !dropped)
      dropped = !hook.keeps(query, key);
    if constexpr (FeatureTraits<F>::kTransforms)  // unmasked only without masks (not_masked)
      return fast_exp2((dropped ? neg_inf() : x) - lse2);
    // Selected after the exponential, so that a kept score's P is the same bits in a
    // masked step and an unmasked one (one FFMA either way): a block mask's
    // deterministic gradients equal those without it.
    const float pr = fast_exp2(x - lse2);
    return dropped ? 0.f : pr;
  }
}

// Whether a step may take feature_prob<false>: it crosses no sequence end, diagonal or
// feature bound. Features that transform scores (ALiBi, soft-capping) take it only
// without a mask (no causal, window or mask_mod): with one, the second loop made
// bwd_wgmma's d 64 causal ALiBi tile spill, and a block mask's deterministic gradients
// could differ in the last bit from those without it (the masked loop's select sits
// before the subtraction there, keeping that tile's registers). Without a mask, only
// the steps at a sequence end are masked, and the unmasked loop is what lets d 64 ALiBi
// fit (PERF f7).
template <typename F, bool kCausal>
__device__ __forceinline__ bool not_masked(bool crosses, bool feature_mask) {
  constexpr bool kSplit =
      !FeatureTraits<F>::kTransforms || (!kCausal && !FeatureTraits<F>::kMasks);
  return kSplit && !crosses && !feature_mask;
}

// feature_prob over an array of mma.sync accumulator fragments [kA][kB][4], in place:
// element e of fragment (a, b) is row r0 + 16 a + g + 8 (e >> 1), column c0 + 8 b + 2 t +
// (e & 1). kKeysInRows: rows are keys and columns queries (the main kernel's S^T; lse2
// indexed by b), else rows are queries (the dQ kernel's S; lse2 indexed by a). `crosses`:
// the step crosses a sequence end or the diagonal. dl: [kA or 1][kB or 1][4].
template <bool kMasked, bool kKeysInRows, bool kCausal, typename F, int kA, int kB, int kL,
          int kDA, int kDB>
__device__ __forceinline__ void fragment_probs(float (&s)[kA][kB][4], float (&dl)[kDA][kDB][4],
                                               const ScoreHook<F> &hook, float scale_log2,
                                               const float (&lse2)[kL][2], int r0, int c0,
                                               int g, int t, const SeqExtent &seq, int diag,
                                               bool crosses, bool feature_mask) {
#pragma unroll
  for (int a = 0; a < kA; ++a)
#pragma unroll
    for (int b = 0; b < kB; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + a * 16 + g + ((e >> 1) << 3), c = c0 + b * 8 + 2 * t + (e & 1);
        const int key = kKeysInRows ? r : c, query = kKeysInRows ? c : r;
        const bool dropped = crosses && (key >= seq.seqlen_k ||
                                         (kKeysInRows && query >= seq.seqlen_q) ||
                                         (kCausal && key > query + diag));
        s[a][b][e] = feature_prob<kMasked>(
            hook, s[a][b][e], scale_log2, query, key, dropped, feature_mask,
            kKeysInRows ? lse2[b][e & 1] : lse2[a][e >> 1],
            dl[kDA > 1 ? a : 0][kDB > 1 ? b : 0][e]);
      }
}

// ---- Warp-level products over shared-memory tiles (one warp, 16 * kRT rows) --------

// acc[kRT][kNT] += A B^T: A is `TA` rows a_row0.. (row-major [row][k]), B is `TB` rows
// 0 .. 8 * kNT ([n][k]); k runs over kK columns (a multiple of 8: the last 8 by the
// m16n8k8 step when kK is an odd multiple of 8).
template <typename T, typename TA, typename TB, int kRT, int kNT, int kK>
__device__ __forceinline__ void gemm_abt(float (&acc)[kRT][kNT][4], u32 s_a, int a_row0,
                                         u32 s_b, int lane) {
  constexpr int kSteps = kK / 16;
  const u32 a_lane = TA::offset(a_row0 + (lane & 15), lane >> 4);
  const u32 b_lane = TB::offset((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    u32 a[kRT][4];
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt)
      ldmatrix_x4(a[rt], s_a + TA::step(a_lane, rt * 16, ks * 2));
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      u32 b[4];
      ldmatrix_x4(b, s_b + TB::step(b_lane, np * 16, ks * 2));
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
        mma_16816<T>(acc[rt][2 * np], a[rt], b[0], b[1]);
        mma_16816<T>(acc[rt][2 * np + 1], a[rt], b[2], b[3]);
      }
    }
  }
  if (kK % 16 != 0) {
    u32 a[kRT][2];
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt)
      ldmatrix_x2(a[rt], s_a + TA::offset(a_row0 + rt * 16 + (lane & 15), kSteps * 2));
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      u32 b[2];
      ldmatrix_x2(b, s_b + TB::offset(np * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                      kSteps * 2));
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
        mma_1688<T>(acc[rt][2 * np], a[rt], b[0]);
        mma_1688<T>(acc[rt][2 * np + 1], a[rt], b[1]);
      }
    }
  }
}

// acc[kRT][kNT] += P B, with P (kRT x 16 rows by 8 * kPT columns) in the accumulator
// layout of a previous product (rounded to the element type here) and B the tile `TB`
// stored [k][n] (rows 0 .. 8 * kPT, columns 0 .. 8 * kNT), read transposed.
template <typename T, typename TB, int kRT, int kPT, int kNT>
__device__ __forceinline__ void gemm_pb(float (&acc)[kRT][kNT][4],
                                        const float (&pr)[kRT][kPT][4], u32 s_b, int lane) {
  const u32 b_lane = TB::offset((lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
#pragma unroll
  for (int kk = 0; kk < kPT / 2; ++kk) {
    u32 a[kRT][4];
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt) {
      a[rt][0] = pack2<T>(pr[rt][2 * kk][0], pr[rt][2 * kk][1]);
      a[rt][1] = pack2<T>(pr[rt][2 * kk][2], pr[rt][2 * kk][3]);
      a[rt][2] = pack2<T>(pr[rt][2 * kk + 1][0], pr[rt][2 * kk + 1][1]);
      a[rt][3] = pack2<T>(pr[rt][2 * kk + 1][2], pr[rt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      u32 b[4];
      ldmatrix_x4_trans(b, s_b + TB::step(b_lane, kk * 16, np * 2));
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
        mma_16816<T>(acc[rt][2 * np], a[rt], b[0], b[1]);
        mma_16816<T>(acc[rt][2 * np + 1], a[rt], b[2], b[3]);
      }
    }
    if (kNT % 2) {
      u32 b[2];
      const int key = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
      ldmatrix_x2_trans(b, s_b + TB::offset(key, kNT - 1));
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt)
        mma_16816<T>(acc[rt][kNT - 1], a[rt], b[0], b[1]);
    }
  }
}

template <int kRT, int kNT>
__device__ __forceinline__ void zero(float (&acc)[kRT][kNT][4]) {
#pragma unroll
  for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[rt][nt][e] = 0.f;
}

// 4-byte asynchronous copy of one float (zero when !valid).
__device__ __forceinline__ void cp_async_4(u32 dst, const void *src, bool valid) {
  int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(bytes));
}

// Writes a warp's accumulator fragments (16-row tiles from row0, 8-column tiles) to a
// shared tile in the element type, times `scale`.
template <typename T, typename Tile, int kRT, int kNT>
__device__ __forceinline__ void stage_fragments(u32 s_tile, const float (&acc)[kRT][kNT][4],
                                                int row0, float scale, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int rt = 0; rt < kRT; ++rt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = row0 + rt * 16 + g + hf * 8;
        st_shared_u32(s_tile + Tile::offset(r, nt) + t * 4,
                      pack2<T>(acc[rt][nt][2 * hf] * scale, acc[rt][nt][2 * hf + 1] * scale));
      }
}

// Copies the first `rows` rows of a staged tile to global memory, 16 bytes at a time.
template <typename Tile, int kThreads>
__device__ __forceinline__ void store_tile(u16 *gmem, long long row_stride, u32 s_tile,
                                           int rows, int tid) {
  constexpr int kChunks = Tile::kChunks;
  constexpr int kIters = (Tile::kRowCount * kChunks + kThreads - 1) / kThreads;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = tid + it * kThreads;
    const int r = i / kChunks, c = i % kChunks;
    if (r < rows && r < Tile::kRowCount)
      st_global_v4(gmem + (long long)r * row_stride + c * 8,
                   ld_shared_v4(s_tile + Tile::offset(r, c)));
  }
}

// The row of sequence b's first query in the packed row space the workspace is laid out
// over (batch * seqlen_q rows, or total_q with cu_seqlens).
__device__ __forceinline__ long long first_query_row(const FjForwardParams &p,
                                                     const SeqExtent &seq, int b) {
  return seq.q_offset >= 0 ? seq.q_offset : (long long)b * p.seqlen_q;
}

// ---- the fp32 dQ accumulator's tiled layout ----------------------------------------
// bwd_mma adds dQ row by row, so its accumulator is row-major ([row][head_q][head_dim],
// row = the packed query row). bwd_wgmma adds a consumer's whole 64 x 64 slice of a step
// with one bulk reduction, so its slices are contiguous: rows in a padded space where
// no two sequences share a 64-row group, grouped by 64; each (group, head) holds
// head_dim / 64 slices of 64 x 64 floats in the order of the wgmma accumulator (register
// quad j, thread of the warpgroup, four floats). Sequence b starts at
//   - b * seqlen_q rounded up to 64 without cu_seqlens: no padding when seqlen_q is a
//     multiple of 64, and the space ends at batch times that (the host zeroes exactly it);
//   - (q0 + 128 b) rounded down to a multiple of 128 with cu_seqlens, where only q0 is
//     known: the space ends before rows + 128 batch.
struct DqTiled {
  static constexpr int kPad = 128;
  static constexpr int kConvertRows = 64;  // query rows per CTA of the convert kernel
  __device__ static __forceinline__ long long padded_row0(const FjForwardParams &p, long long q0,
                                                          int b) {
    if (p.cu_seqlens_q == nullptr)
      return (long long)b * ((p.seqlen_q + 63) / 64 * 64);
    return (q0 + (long long)kPad * b) / kPad * kPad;
  }
  // Float offset of the slice holding columns cs * 64 .. cs * 64 + 63 of 64-row group G.
  __device__ static __forceinline__ long long slice(long long group, int h, int cs, int heads,
                                                    int head_dim) {
    return ((group * heads + h) * (head_dim / 64) + cs) * 4096;
  }
  // Within a slice, row r and column c (0 <= r, c < 64) are float
  //   ((c / 8) * 128 + (r / 16) * 32 + (r % 8) * 4 + (c % 8) / 2) * 4 + ((r % 16) / 8) * 2 + c % 2:
  // the accumulator register 4 j + 2 hf + e of thread 32 warp + 4 g + t holds row
  // 16 warp + g + 8 hf, column 8 j + 2 t + e.
};

// ---- prep: D and lse * log2(e) -----------------------------------------------------
// A query row's 16-byte chunks of O and dO are read by prep_lanes lanes (the power of
// two that covers them), so a warp takes 32 / prep_lanes rows: at head dim 128 two, at
// 64 four, not one with most lanes idle; the kernel is bound by the loads in flight
// (docs/PERF.md bw6).
template <int kHeadDimV> __host__ __device__ constexpr int prep_lanes() {
  int lanes = 1;
  while (lanes < kHeadDimV / 8 && lanes < 32)
    lanes *= 2;
  return lanes;
}
template <int kHeadDimV> __host__ __device__ constexpr int prep_rows_per_cta() {
  return 8 * (32 / prep_lanes<kHeadDimV>());
}

// Grid (ceil(seqlen_q / prep_rows_per_cta), heads_q, batch), 256 threads. The host
// zeroes the dQ accumulator before it (one memset, tuner/backward_kernel.cpp).
template <typename T, int kHeadDimV>
__device__ __forceinline__ void run_prep(const FjBackwardParams &P) {
  constexpr int kLanes = prep_lanes<kHeadDimV>();
  static_assert(kHeadDimV / 8 <= 32, "one 16-byte chunk per lane");
  const FjForwardParams &p = P.fwd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, chunk = lane % kLanes;
  const int i = (blockIdx.x * 8 + warp) * (32 / kLanes) + lane / kLanes, h = blockIdx.y,
            b = blockIdx.z;
  if (blockIdx.x == 0 && h == 0 && b == 0) {
    // The pad after the last row of every head (fj_bwd_params.h).
    const long long rows = p.cu_seqlens_q ? p.total_q : (long long)p.batch * p.seqlen_q;
    for (int r = threadIdx.x; r < FJ_BWD_STATS_PAD; r += blockDim.x) {
      P.lse_log2[p.heads_q * rows + r] = 0.f;
      P.dpsum[p.heads_q * rows + r] = 0.f;
    }
  }
  const SeqExtent seq = seq_extent(p, b);
  // The warp's rows end together or not: the shuffles below need every lane.
  if ((i - lane / kLanes) >= seq.seqlen_q)
    return;
  const bool row_valid = i < seq.seqlen_q;
  float d = 0.f;
  if (row_valid && chunk < kHeadDimV / 8) {
    const u16 *o = (const u16 *)p.o +
                   tensor_base(seq.q_offset, b, h, p.o_batch_stride, p.o_row_stride,
                               p.o_head_stride) +
                   (long long)i * p.o_row_stride + chunk * 8;
    const u16 *dout = (const u16 *)P.dout +
                      tensor_base(seq.q_offset, b, h, P.dout_batch_stride, P.dout_row_stride,
                                  P.dout_head_stride) +
                      (long long)i * P.dout_row_stride + chunk * 8;
    const uint4 ov = *(const uint4 *)o, dv = *(const uint4 *)dout;
    const u32 ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      d += to_float<T>((u16)(ow[e] & 0xffff)) * to_float<T>((u16)(dw[e] & 0xffff));
      d += to_float<T>((u16)(ow[e] >> 16)) * to_float<T>((u16)(dw[e] >> 16));
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1)
    d += __shfl_xor_sync(0xffffffff, d, off);
  const long long li = lse_index(p, seq, h, i);
  if (row_valid && chunk == 0) {
    P.dpsum[li] = d;
    const float lse = p.lse[li];
    // A row that saw no key has lse -inf: +inf makes every P of it exp2(-inf) = 0.
    P.lse_log2[li] = lse == neg_inf() ? pos_inf() : lse * 1.4426950408889634f;
  }
}

// ---- convert: dQ = scale * accumulator, in the element type ------------------------
// The tiled accumulator by whole 64-row groups, grid (ceil(seqlen_q / 64), heads_q,
// batch), 256 threads. A warp reads 512 contiguous bytes at a time, the 16-byte units
// of one 8-column chunk of 16 rows (lane 4 g + t: rows g and g + 8, columns 2 t and
// 2 t + 1). It takes two neighbouring chunks, and the four lanes of each g swap their
// halves so that each ends with eight columns of one row: the stores are whole 16-byte
// rows, 32 contiguous bytes per row and warp. Every load of a thread is issued before
// its first store. (docs/PERF.md bw7: 16-row blocks storing 4 bytes a lane ran at 61 %
// of the copy rate.) The accumulator has kAccumDim columns a head (bwd_wgmma's padded
// head dims: more than kHeadDim, the last ones unused, read but not stored where the
// head dim ends in half a pair); pairs that do not split evenly over the eight warps
// leave the last warps idle in the last round.
template <typename T, int kHeadDim, int kAccumDim = kHeadDim>
__device__ __forceinline__ void convert_tiled(const FjBackwardParams &P) {
  constexpr int kRows = DqTiled::kConvertRows, kQuarters = kRows / 16;
  constexpr int kChunks = kHeadDim / 8, kPairsPerQuarter = (kChunks + 1) / 2;
  constexpr int kPairs = kQuarters * kPairsPerQuarter;  // (quarter, two chunks) a warp load
  constexpr int kPerWarp = (kPairs + 7) / 8;
  static_assert(kRows == 64 && kHeadDim % 8 == 0 && kAccumDim % 64 == 0 &&
                    kHeadDim <= kAccumDim,
                "whole groups of 8-column chunks");
  const FjForwardParams &p = P.fwd;
  const int h = blockIdx.y, b = blockIdx.z, i0 = blockIdx.x * kRows;
  const SeqExtent seq = seq_extent(p, b);
  if (i0 >= seq.seqlen_q)
    return;
  // The block's first row in the padded space starts a 64-row group (DqTiled).
  const long long row0 = DqTiled::padded_row0(p, first_query_row(p, seq, b), b) + i0;
  const float *group = P.dq_accum + DqTiled::slice(row0 / 64, h, 0, p.heads_q, kAccumDim);
  u16 *dq = (u16 *)P.dq +
            tensor_base(seq.q_offset, b, h, P.dq_batch_stride, P.dq_row_stride,
                        P.dq_head_stride) +
            (long long)i0 * P.dq_row_stride;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // Unit of chunk k of quarter q: chunk k % 8 of slice k / 8 (DqTiled's layout).
  auto unit = [&](int q, int k) {
    return *(const float4 *)(group + (k / 8) * 4096 + ((k % 8) * 128 + q * 32 + lane) * 4);
  };
  // Whether the warp has a pair in round i (always, where the pairs split evenly).
  auto has_pair = [&](int i) { return kPairs % 8 == 0 || warp + 8 * i < kPairs; };
  float4 lo[kPerWarp], hi[kPerWarp];
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    const int pair = warp + 8 * i, q = pair / kPairsPerQuarter, k = 2 * (pair % kPairsPerQuarter);
    if (has_pair(i)) {
      lo[i] = unit(q, k);
      hi[i] = unit(q, k + 1);
    }
  }
  const float s = p.softmax_scale;
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    if (!has_pair(i))
      break;  // warp-uniform: the shuffles below see the whole warp
    const int pair = warp + 8 * i, q = pair / kPairsPerQuarter, k = 2 * (pair % kPairsPerQuarter);
    // Lane t holds piece t of four (row, chunk) pieces: (g, k), (g + 8, k), (g, k + 1),
    // (g + 8, k + 1); it ends with all four lanes' parts of its own piece t.
    const u32 piece[4] = {pack2<T>(lo[i].x * s, lo[i].y * s), pack2<T>(lo[i].z * s, lo[i].w * s),
                          pack2<T>(hi[i].x * s, hi[i].y * s), pack2<T>(hi[i].z * s, hi[i].w * s)};
    u32 part[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      // Round r: lane t sends piece t ^ r to lane t ^ r, which places it as part t.
      const int j = t ^ r;
      const u32 send = (j & 2) ? ((j & 1) ? piece[3] : piece[2]) : ((j & 1) ? piece[1] : piece[0]);
      const u32 got = r == 0 ? send : __shfl_xor_sync(0xffffffffu, send, r);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (e == j)
          part[e] = got;
    }
    const int row = 16 * q + g + 8 * (t & 1), col = 8 * (k + (t >> 1));
    if (i0 + row < seq.seqlen_q && (kChunks % 2 == 0 || col < kHeadDim))
      st_global_v4(dq + (long long)row * P.dq_row_stride + col,
                   make_uint4(part[0], part[1], part[2], part[3]));
  }
}

// The row-major accumulator: grid (ceil(seqlen_q / 8), heads_q, batch), one warp per
// query row; the tiled one goes to convert_tiled.
template <typename T, int kHeadDim, bool kTiledDq = false, int kAccumDim = kHeadDim>
__device__ __forceinline__ void run_convert(const FjBackwardParams &P) {
  if constexpr (kTiledDq) {
    convert_tiled<T, kHeadDim, kAccumDim>(P);
    return;
  }
  const FjForwardParams &p = P.fwd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int i = blockIdx.x * 8 + warp, h = blockIdx.y, b = blockIdx.z;
  const SeqExtent seq = seq_extent(p, b);
  if (i >= seq.seqlen_q)
    return;
  const long long q0 = first_query_row(p, seq, b);
  u16 *dq = (u16 *)P.dq +
            tensor_base(seq.q_offset, b, h, P.dq_batch_stride, P.dq_row_stride,
                        P.dq_head_stride) +
            (long long)i * P.dq_row_stride;
  const float *acc = P.dq_accum + ((q0 + i) * p.heads_q + h) * kHeadDim;
  for (int c = lane; c < kHeadDim / 8; c += 32) {
    const float4 lo = *(const float4 *)(acc + c * 8), hi = *(const float4 *)(acc + c * 8 + 4);
    const float s = p.softmax_scale;
    uint4 out;
    out.x = pack2<T>(lo.x * s, lo.y * s);
    out.y = pack2<T>(lo.z * s, lo.w * s);
    out.z = pack2<T>(hi.x * s, hi.y * s);
    out.w = pack2<T>(hi.z * s, hi.w * s);
    st_global_v4(dq + c * 8, out);
  }
}

// dQ(block) += dS K for one step of the main kernel, added to the fp32 accumulator:
// dS from its shared tile (stored transposed, read transposed), K from its tile. Warps
// split the query rows into 16-row tiles, then the head dim; each warp takes its
// columns kDqChunk 8-column tiles at a time, so only that many accumulators are live
// next to dK and dV.
template <typename Cfg>
__device__ __forceinline__ void dq_to_accumulator(const FjBackwardParams &P, u32 s_ds, u32 s_k,
                                                  int m0, int h, int b, const SeqExtent &seq,
                                                  int warp, int lane) {
  typedef typename Cfg::Element T;
  constexpr int RT = Cfg::kDqRowTiles;
  constexpr int kChunk = Cfg::kDqColTiles < 4 ? Cfg::kDqColTiles : 4;
  const FjForwardParams &p = P.fwd;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp % Cfg::kDqWarpsM, wn = warp / Cfg::kDqWarpsM;
  const int c_first = wn * Cfg::kDqColTiles;  // first 8-column tile of this warp
  const u32 a_lane = Cfg::DsTile::offset((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const int b_row = (lane & 7) + (((lane >> 3) & 1) << 3);
  const long long row_base =
      first_query_row(p, seq, b) + m0;
#pragma unroll 1
  for (int chunk = 0; chunk < Cfg::kDqColTiles; chunk += kChunk) {
    const int c0 = c_first + chunk;
    float acc[RT][kChunk][4];
    zero(acc);
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
      u32 a[RT][4];
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
        ldmatrix_x4_trans(a[rt], s_ds + Cfg::DsTile::step(a_lane, kk * 16,
                                                          (wm * RT + rt) * 2));
#pragma unroll
      for (int cp = 0; cp < (kChunk + 1) / 2; ++cp) {
        const int c = c0 + 2 * cp;
        const bool in_chunk2 = chunk + 2 * cp + 1 < Cfg::kDqColTiles;
        if (2 * cp + 1 < kChunk && in_chunk2 && (Cfg::kDqColsEven || c + 1 < Cfg::kDT)) {
          u32 bk[4];
          ldmatrix_x4_trans(bk, s_k + Cfg::KTile::offset(kk * 16 + b_row, c + (lane >> 4)));
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            mma_16816<T>(acc[rt][2 * cp], a[rt], bk[0], bk[1]);
            mma_16816<T>(acc[rt][2 * cp + 1], a[rt], bk[2], bk[3]);
          }
        } else if (chunk + 2 * cp < Cfg::kDqColTiles && (Cfg::kDqColsEven || c < Cfg::kDT)) {
          u32 bk[2];
          ldmatrix_x2_trans(bk, s_k + Cfg::KTile::offset(kk * 16 + b_row, c));
#pragma unroll
          for (int rt = 0; rt < RT; ++rt)
            mma_16816<T>(acc[rt][2 * cp], a[rt], bk[0], bk[1]);
        }
      }
    }
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = (wm * RT + rt) * 16 + g + hf * 8;
        if (m0 + r >= seq.seqlen_q)
          continue;
        float *dst = P.dq_accum + ((row_base + r) * p.heads_q + h) * Cfg::kHeadDim;
#pragma unroll
        for (int ct = 0; ct < kChunk; ++ct) {
          if (chunk + ct >= Cfg::kDqColTiles || (!Cfg::kDqColsEven && c0 + ct >= Cfg::kDT))
            continue;
          const int col = (c0 + ct) * 8 + 2 * t;
#if __CUDA_ARCH__ >= 900
          asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst + col),
                       "f"(acc[rt][ct][2 * hf]), "f"(acc[rt][ct][2 * hf + 1])
                       : "memory");
#else
          atomicAdd(dst + col, acc[rt][ct][2 * hf]);
          atomicAdd(dst + col + 1, acc[rt][ct][2 * hf + 1]);
#endif
        }
      }
  }
}

// The key block, key/value head and batch entry of a main kernel's CTA (grid
// (ceil(seqlen_k / kBlockN), heads_kv, batch)). Causal blocks differ in work (the first
// key blocks are seen by the most queries), and the hardware starts CTAs in the order of
// their linear index, x fastest, so in the grid's own order the last heads' heaviest
// blocks start last and run on alone. Causal kernels walk the grid in chunks of whole
// heads, about 128 blocks a chunk, key block by key block across the chunk's heads: the
// heaviest blocks start first, and the CTAs running at once still share the Q, dO and dQ
// of few heads in L2 (with the key block the slowest index over all heads, N <= 4k ran
// up to 35 % slower, docs/PERF.md bw4).
struct CtaTile {
  int key_block, h_kv, b;
};
// Tile `linear` of (blocks key blocks, heads_kv, batch) tiles in that order: the causal
// one (bwd_wgmma's persistent grid walks the same order, CTA c taking tiles c,
// c + gridDim.x, ...).
__device__ __forceinline__ CtaTile causal_tile(int linear, int blocks, int heads_kv, int batch) {
  const int heads = heads_kv * batch;
  const int chunk = imax(1, (128 + blocks - 1) / blocks);  // heads per chunk
  const int first = linear / (chunk * blocks) * chunk, within = linear % (chunk * blocks);
  const int chunk_heads = imin(chunk, heads - first);  // the last chunk may be short
  const int head = first + within % chunk_heads;
  return {within / chunk_heads, head % heads_kv, head / heads_kv};
}
template <bool kCausal> __device__ __forceinline__ CtaTile cta_tile() {
  if (!kCausal)
    return {(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
  return causal_tile(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), gridDim.x,
                     gridDim.y, gridDim.z);
}

// ---- main: dK and dV of one key block, dQ by atomics ---------------------------------
// kPass: 0 everything, 1 dV only, 2 dK and dQ only (the two passes of kSplitPasses).
// Grid (ceil(seqlen_k / kBlockN), heads_kv, batch).
template <typename Cfg, int kPass>
__device__ __forceinline__ void run_main(const FjBackwardParams &P, unsigned char *smem) {
  typedef typename Cfg::Element T;
  typedef typename Cfg::Features F;
  constexpr bool kDl = F::kSoftcap > 0.f;  // dS scaled per score
  constexpr bool kDoDv = kPass != 2, kDoDk = kPass != 1;
  constexpr int KT = Cfg::kKT, QT = Cfg::kQT;
  const FjForwardParams &p = P.fwd;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const CtaTile tile = cta_tile<Cfg::kCausal>();
  const int n_block = tile.key_block, h_kv = tile.h_kv, b = tile.b;
  const SeqExtent seq = seq_extent(p, b);
  const int n0 = n_block * Cfg::kBlockN;
  if (n0 >= seq.seqlen_k)
    return;  // varlen: this sequence has fewer keys than the longest
  const int keys_valid = imin(Cfg::kBlockN, seq.seqlen_k - n0);
  const int group = p.heads_q / p.heads_kv;
  const int diag = seq.seqlen_k - seq.seqlen_q;  // query i sees keys j <= i + diag

  // The query blocks that see this key block: causal ones start at the first block
  // whose last row reaches key n0.
  const int m_blocks = (seq.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  int m_begin, m_end;
  query_blocks<Cfg>(n0, diag, m_blocks, m_begin, m_end);
  const int steps_per_head = m_end - m_begin;
  int steps = steps_per_head * group;
  // A mask_mod's kernel walks the call's block mask when it has one: the listed steps.
  const unsigned *list = nullptr;
  if constexpr (F::kMaskMod) {
    if (P.block_steps) {
      const long long wi = (long long)b * P.block_steps_batch_stride +
                           (long long)h_kv * P.block_steps_head_stride + n_block;
      list = P.block_steps + wi * P.block_steps_capacity;
      steps = P.block_step_counts[wi];
    }
  }
  // Step s: query block m_begin + s % steps_per_head of query head h_kv * group +
  // s / steps_per_head, or the list's entry s; `partial`: the mask may apply (without a
  // list, the hook decides).
  auto step_at = [&](int s, int &h, int &m0, bool &partial) {
    if (F::kMaskMod && list) {
      const unsigned e = list[s];
      h = h_kv * group + step_head(e);
      m0 = step_block(e) * Cfg::kBlockM;
      partial = step_partial(e);
      return;
    }
    h = h_kv * group + s / steps_per_head;
    m0 = (m_begin + s % steps_per_head) * Cfg::kBlockM;
    partial = true;
  };

  const u32 s_k = smem_addr(smem);
  const u32 s_v = s_k + Cfg::KTile::kBytes;
  const u32 s_ring = s_v + Cfg::VTile::kBytes;
  const u32 s_ds = s_ring + Cfg::kStages * Cfg::kStageBytes;

  const u16 *k = (const u16 *)p.k +
                 tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride, p.k_row_stride,
                             p.k_head_stride) +
                 (long long)n0 * p.k_row_stride;
  const u16 *v = (const u16 *)p.v +
                 tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride, p.v_row_stride,
                             p.v_head_stride) +
                 (long long)n0 * p.v_row_stride;
  // A key block that no query sees (causal, or no queries at all) only writes zeros:
  // it reads nothing (with no queries, the API passes no q, o or lse, and may pass no k
  // or v).
  if (steps > 0) {
    load_tile_async<typename Cfg::KTile, Cfg::kThreads>(s_k, k, p.k_row_stride, keys_valid, tid);
    load_tile_async<typename Cfg::VTile, Cfg::kThreads>(s_v, v, p.v_row_stride, keys_valid, tid);
  }

  auto load_step = [&](int s) {
    int h, m0;
    bool partial;
    step_at(s, h, m0, partial);
    const int rows = imin(Cfg::kBlockM, seq.seqlen_q - m0);
    const u32 stage = s_ring + (s % Cfg::kStages) * Cfg::kStageBytes;
    const u16 *q = (const u16 *)p.q +
                   tensor_base(seq.q_offset, b, h, p.q_batch_stride, p.q_row_stride,
                               p.q_head_stride) +
                   (long long)m0 * p.q_row_stride;
    const u16 *dout = (const u16 *)P.dout +
                      tensor_base(seq.q_offset, b, h, P.dout_batch_stride, P.dout_row_stride,
                                  P.dout_head_stride) +
                      (long long)m0 * P.dout_row_stride;
    load_tile_async<typename Cfg::QTile, Cfg::kThreads>(stage, q, p.q_row_stride, rows, tid);
    load_tile_async<typename Cfg::DoTile, Cfg::kThreads>(stage + Cfg::QTile::kBytes, dout,
                                                         P.dout_row_stride, rows, tid);
    const long long li = lse_index(p, seq, h, m0);
    const u32 s_stats = stage + Cfg::QTile::kBytes + Cfg::DoTile::kBytes;
    for (int r = tid; r < 2 * Cfg::kBlockM; r += Cfg::kThreads) {
      const int row = r % Cfg::kBlockM;
      const float *src = (r < Cfg::kBlockM ? P.lse_log2 : P.dpsum) + li + row;
      cp_async_4(s_stats + r * 4, row < rows ? src : P.dpsum, row < rows);
    }
  };
  // Prologue: K and V with the first step, then the rest of the ring.
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < steps)
      load_step(s);
    cp_async_commit();
  }

  float acc_dk[kDoDk ? KT : 1][kDoDk ? Cfg::kDT : 1][4];
  float acc_dv[kDoDv ? KT : 1][kDoDv ? Cfg::kDvT : 1][4];
  zero(acc_dk);
  zero(acc_dv);

  const int row0 = warp * Cfg::kRowsPerWarp;  // this warp's first key row in the block
  const bool with_dq = kDoDk && P.dq_accum != nullptr;

  for (int s = 0; s < steps; ++s) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    if (s + Cfg::kStages - 1 < steps)
      load_step(s + Cfg::kStages - 1);
    cp_async_commit();

    int h, m0;
    bool partial;
    step_at(s, h, m0, partial);
    const u32 s_q = s_ring + (s % Cfg::kStages) * Cfg::kStageBytes;
    const u32 s_do = s_q + Cfg::QTile::kBytes;
    const u32 s_lse = s_do + Cfg::DoTile::kBytes;
    const u32 s_dpsum = s_lse + Cfg::kBlockM * 4;

    // S^T = K Q^T for this warp's key rows; then P^T.
    float pt[KT][QT][4];
    zero(pt);
    gemm_abt<T, typename Cfg::KTile, typename Cfg::QTile, KT, QT, Cfg::kHeadDim>(pt, s_k, row0,
                                                                                s_q, lane);
    const bool crosses_q_end = m0 + Cfg::kBlockM > seq.seqlen_q;
    const bool crosses_k_end = n0 + Cfg::kBlockN > seq.seqlen_k;
    const bool crosses_diag = Cfg::kCausal && n0 + Cfg::kBlockN - 1 > m0 + diag;
    const bool crosses = crosses_q_end || crosses_k_end || crosses_diag;
    float lse2[QT][2];
#pragma unroll
    for (int qt = 0; qt < QT; ++qt) {
      const u32 addr = s_lse + (qt * 8 + 2 * t) * 4;
      lse2[qt][0] = __uint_as_float(ld_shared_u32(addr));
      lse2[qt][1] = __uint_as_float(ld_shared_u32(addr + 4));
    }
    float dl[kDl ? KT : 1][kDl ? QT : 1][4];
    if constexpr (FeatureTraits<F>::kAny) {
      const ScoreHook<F> hook(p, b, h, seq);
      const bool feature_mask =
          hook.tile_needs_mask(n0, Cfg::kBlockN, m0, m0 + Cfg::kBlockM - 1, partial);
      if (not_masked<F, Cfg::kCausal>(crosses, feature_mask))
        fragment_probs<false, true, Cfg::kCausal>(pt, dl, hook, p.scale_log2, lse2, n0 + row0,
                                                  m0, g, t, seq, diag, crosses, feature_mask);
      else
        fragment_probs<true, true, Cfg::kCausal>(pt, dl, hook, p.scale_log2, lse2, n0 + row0,
                                                 m0, g, t, seq, diag, crosses, feature_mask);
    } else {
      if (crosses) {
#pragma unroll
        for (int kt = 0; kt < KT; ++kt)
#pragma unroll
          for (int qt = 0; qt < QT; ++qt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = n0 + row0 + kt * 16 + g + ((e >> 1) << 3);
              const int query = m0 + qt * 8 + 2 * t + (e & 1);
              if (key >= seq.seqlen_k || query >= seq.seqlen_q ||
                  (Cfg::kCausal && key > query + diag))
                pt[kt][qt][e] = neg_inf();
            }
      }
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int qt = 0; qt < QT; ++qt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            pt[kt][qt][e] = fast_exp2(pt[kt][qt][e] * p.scale_log2 - lse2[qt][e & 1]);
    }

    if constexpr (kDoDv) {
      // dV += P^T dO.
      gemm_pb<T, typename Cfg::DoTile, KT, QT, Cfg::kDvT>(acc_dv, pt, s_do, lane);
    }
    if constexpr (kDoDk) {
      // dP^T = V dO^T; dS^T = P^T (dP^T - D) in place.
      float ds[KT][QT][4];
      zero(ds);
      gemm_abt<T, typename Cfg::VTile, typename Cfg::DoTile, KT, QT, Cfg::kHeadDimV>(
          ds, s_v, row0, s_do, lane);
#pragma unroll
      for (int qt = 0; qt < QT; ++qt) {
        const u32 addr = s_dpsum + (qt * 8 + 2 * t) * 4;
        const float d0 = __uint_as_float(ld_shared_u32(addr));
        const float d1 = __uint_as_float(ld_shared_u32(addr + 4));
#pragma unroll
        for (int kt = 0; kt < KT; ++kt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            ds[kt][qt][e] = pt[kt][qt][e] * (ds[kt][qt][e] - ((e & 1) ? d1 : d0));
            if constexpr (kDl)
              ds[kt][qt][e] *= dl[kt][qt][e];
          }
      }
      if (with_dq)
        stage_fragments<T, typename Cfg::DsTile>(s_ds, ds, row0, 1.f, lane);
      // dK += dS^T Q.
      gemm_pb<T, typename Cfg::QTile, KT, QT, Cfg::kDT>(acc_dk, ds, s_q, lane);
    }
    if (with_dq) {
      // dQ(block) = dS K, added to the fp32 accumulator.
      __syncthreads();
      dq_to_accumulator<Cfg>(P, s_ds, s_k, m0, h, b, seq, warp, lane);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with K and V: their space stages dK and dV

  u16 *dk = (u16 *)P.dk +
            tensor_base(seq.k_offset, b, h_kv, P.dk_batch_stride, P.dk_row_stride,
                        P.dk_head_stride) +
            (long long)n0 * P.dk_row_stride;
  u16 *dv = (u16 *)P.dv +
            tensor_base(seq.k_offset, b, h_kv, P.dv_batch_stride, P.dv_row_stride,
                        P.dv_head_stride) +
            (long long)n0 * P.dv_row_stride;
  if constexpr (kDoDk)
    stage_fragments<T, typename Cfg::KTile>(s_k, acc_dk, row0, p.softmax_scale, lane);
  if constexpr (kDoDv)
    stage_fragments<T, typename Cfg::VTile>(s_v, acc_dv, row0, 1.f, lane);
  __syncthreads();
  if constexpr (kDoDk)
    store_tile<typename Cfg::KTile, Cfg::kThreads>(dk, P.dk_row_stride, s_k, keys_valid, tid);
  if constexpr (kDoDv)
    store_tile<typename Cfg::VTile, Cfg::kThreads>(dv, P.dv_row_stride, s_v, keys_valid, tid);
}

// ---- dq (deterministic mode): dQ of one query block, written once ---------------
// Grid (ceil(seqlen_q / kBlockN), heads_q, batch).
template <typename Cfg>
__device__ __forceinline__ void run_dq(const FjBackwardParams &P, unsigned char *smem) {
  typedef typename Cfg::Element T;
  typedef typename Cfg::Features F;
  constexpr bool kDl = F::kSoftcap > 0.f;  // dS scaled per score
  constexpr int RT = Cfg::kKT;            // 16-row query tiles per warp
  constexpr int KT = Cfg::kBlockM / 8;    // 8-key tiles per step
  constexpr int kRows = Cfg::kBlockN;     // query rows per CTA
  constexpr int kKeys = Cfg::kBlockM;     // keys per step
  const FjForwardParams &p = P.fwd;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const SeqExtent seq = seq_extent(p, b);
  const int q0 = blockIdx.x * kRows;
  if (q0 >= seq.seqlen_q)
    return;
  const int rows_valid = imin(kRows, seq.seqlen_q - q0);
  const int diag = seq.seqlen_k - seq.seqlen_q;
  // The key blocks [n_begin, n_end) the rows see: causal and a window's right bound end
  // them early, a window's left bound starts them late.
  int n_begin = 0, n_end = (seq.seqlen_k + kKeys - 1) / kKeys;
  if (Cfg::kCausal) {
    const int last_key = q0 + rows_valid - 1 + diag;
    n_end = imin(n_end, last_key < 0 ? 0 : last_key / kKeys + 1);
  }
  if constexpr (FeatureTraits<F>::kRightBound) {
    const int last_key = q0 + rows_valid - 1 + diag + F::kWindowRight;
    n_end = imin(n_end, last_key < 0 ? 0 : last_key / kKeys + 1);
  }
  if constexpr (FeatureTraits<F>::kLeftBound) {
    const int first_key = q0 + diag - F::kWindowLeft;
    if (first_key > 0)
      n_begin = imin(first_key / kKeys, n_end);
  }
  const int n_blocks = n_end - n_begin;  // steps

  const u32 s_q = smem_addr(smem);
  const u32 s_do = s_q + Cfg::DqQTile::kBytes;
  const u32 s_kv = s_do + Cfg::DqDoTile::kBytes;
  const u16 *q = (const u16 *)p.q +
                 tensor_base(seq.q_offset, b, h, p.q_batch_stride, p.q_row_stride,
                             p.q_head_stride) +
                 (long long)q0 * p.q_row_stride;
  const u16 *dout = (const u16 *)P.dout +
                    tensor_base(seq.q_offset, b, h, P.dout_batch_stride, P.dout_row_stride,
                                P.dout_head_stride) +
                    (long long)q0 * P.dout_row_stride;
  const u16 *k = (const u16 *)p.k + tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride,
                                                p.k_row_stride, p.k_head_stride);
  const u16 *v = (const u16 *)p.v + tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride,
                                                p.v_row_stride, p.v_head_stride);
  load_tile_async<typename Cfg::DqQTile, Cfg::kThreads>(s_q, q, p.q_row_stride, rows_valid,
                                                        tid);
  load_tile_async<typename Cfg::DqDoTile, Cfg::kThreads>(s_do, dout, P.dout_row_stride,
                                                         rows_valid, tid);
  auto load_kv = [&](int step) {
    const u32 stage = s_kv + (step % Cfg::kStages) * Cfg::kDqStageBytes;
    const int n = n_begin + step;
    const int keys = imin(kKeys, seq.seqlen_k - n * kKeys);
    load_tile_async<typename Cfg::DqKTile, Cfg::kThreads>(
        stage, k + (long long)n * kKeys * p.k_row_stride, p.k_row_stride, keys, tid);
    load_tile_async<typename Cfg::DqVTile, Cfg::kThreads>(
        stage + Cfg::DqKTile::kBytes, v + (long long)n * kKeys * p.v_row_stride,
        p.v_row_stride, keys, tid);
  };
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < n_blocks)
      load_kv(s);
    cp_async_commit();
  }

  // This thread's rows: lse * log2(e) and D, two rows per 16-row tile.
  const int row0 = warp * Cfg::kRowsPerWarp;
  float lse2[RT][2], dpsum[RT][2];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = row0 + rt * 16 + g + hf * 8;
      const long long li = lse_index(p, seq, h, q0 + r);
      lse2[rt][hf] = r < rows_valid ? P.lse_log2[li] : pos_inf();
      dpsum[rt][hf] = r < rows_valid ? P.dpsum[li] : 0.f;
    }

  float acc_dq[RT][Cfg::kDT][4];
  zero(acc_dq);
  for (int step = 0; step < n_blocks; ++step) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    if (step + Cfg::kStages - 1 < n_blocks)
      load_kv(step + Cfg::kStages - 1);
    cp_async_commit();
    const u32 s_k = s_kv + (step % Cfg::kStages) * Cfg::kDqStageBytes;
    const u32 s_v = s_k + Cfg::DqKTile::kBytes;

    float pr[RT][KT][4];
    zero(pr);
    gemm_abt<T, typename Cfg::DqQTile, typename Cfg::DqKTile, RT, KT, Cfg::kHeadDim>(
        pr, s_q, row0, s_k, lane);
    const int key0 = (n_begin + step) * kKeys;
    const bool crosses =
        key0 + kKeys > seq.seqlen_k || (Cfg::kCausal && key0 + kKeys - 1 > q0 + diag);
    float dl[kDl ? RT : 1][kDl ? KT : 1][4];
    if constexpr (FeatureTraits<F>::kAny) {
      const ScoreHook<F> hook(p, b, h, seq);
      const bool feature_mask = hook.tile_needs_mask(key0, kKeys, q0, q0 + kRows - 1);
      if (not_masked<F, Cfg::kCausal>(crosses, feature_mask))
        fragment_probs<false, false, Cfg::kCausal>(pr, dl, hook, p.scale_log2, lse2, q0 + row0,
                                                   key0, g, t, seq, diag, crosses, feature_mask);
      else
        fragment_probs<true, false, Cfg::kCausal>(pr, dl, hook, p.scale_log2, lse2, q0 + row0,
                                                  key0, g, t, seq, diag, crosses, feature_mask);
    } else {
      if (crosses) {
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
#pragma unroll
          for (int kt = 0; kt < KT; ++kt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int query = q0 + row0 + rt * 16 + g + ((e >> 1) << 3);
              const int key = key0 + kt * 8 + 2 * t + (e & 1);
              if (key >= seq.seqlen_k || (Cfg::kCausal && key > query + diag))
                pr[rt][kt][e] = neg_inf();
            }
      }
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int kt = 0; kt < KT; ++kt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            pr[rt][kt][e] = fast_exp2(pr[rt][kt][e] * p.scale_log2 - lse2[rt][e >> 1]);
    }
    float ds[RT][KT][4];
    zero(ds);
    gemm_abt<T, typename Cfg::DqDoTile, typename Cfg::DqVTile, RT, KT, Cfg::kHeadDimV>(
        ds, s_do, row0, s_v, lane);
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ds[rt][kt][e] = pr[rt][kt][e] * (ds[rt][kt][e] - dpsum[rt][e >> 1]);
          if constexpr (kDl)
            ds[rt][kt][e] *= dl[rt][kt][e];
        }
    // dQ += dS K.
    gemm_pb<T, typename Cfg::DqKTile, RT, KT, Cfg::kDT>(acc_dq, ds, s_k, lane);
  }
  cp_async_wait<0>();
  __syncthreads();  // Q's space stages dQ
  stage_fragments<T, typename Cfg::DqQTile>(s_q, acc_dq, row0, p.softmax_scale, lane);
  __syncthreads();
  u16 *dq = (u16 *)P.dq +
            tensor_base(seq.q_offset, b, h, P.dq_batch_stride, P.dq_row_stride,
                        P.dq_head_stride) +
            (long long)q0 * P.dq_row_stride;
  store_tile<typename Cfg::DqQTile, Cfg::kThreads>(dq, P.dq_row_stride, s_q, rows_valid, tid);
}

}  // namespace bwd_mma
}  // namespace fj
