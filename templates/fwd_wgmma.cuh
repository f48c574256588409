// Family fwd_wgmma: the FlashAttention-3 forward schedule for Hopper (sm_90a).
//
// A persistent grid (one CTA per SM) walks work tiles of kBlockM = 64 * kConsumers query
// rows of one (batch, head), with 128 * (kConsumers + 1) threads in warpgroups:
// - warpgroup 0 is the producer: one thread walks the work tiles, hands each to the
//   consumers through shared memory, and issues TMA loads of Q and of the K and V
//   tiles into a kStages-deep ring, each completing on an mbarrier. It runs ahead into
//   the next work tile while the consumers finish the current one (into a second Q
//   buffer where shared memory has room). It gives most of its registers to the
//   consumers (setmaxnreg).
// - each consumer warpgroup owns 64 query rows. S = Q K^T is a chain of
//   wgmma.mma_async with both operands in shared memory; P is converted in registers
//   (the S accumulator layout is the A-fragment layout) and O += P V is a second chain
//   with A from registers and V read N-major. A K or V slot is released as soon as its
//   product completes. Two consumers take turns issuing (ping-pong), and within one,
//   the softmax of key tile i overlaps the tensor cores' P(i-1) V(i-1). O goes out
//   through shared memory, by a TMA store where the output allows one. Without a mask
//   and with three consumers, a consumer whose rows all lie past the sequence end only
//   frees the tile's stages (pass_over_tile), and the walk spreads such lighter blocks
//   over the CTAs. With a sliding window, each of three consumers computes only the key
//   tiles its own rows see and passes over the rest of the walk (narrow_walk).
// A variable-length batch (cu_seqlens) is one packed sequence to the tensor maps: a work
// tile offsets its loads by its sequence's first row, masks keys past its own end (rows
// of the next sequence, loaded but unused) and stores only its own rows.
// Head dims are padded up to the swizzle panel (32 or 64 elements) by TMA's zero fill,
// so any multiple of 8 is exact. The softmax is online, in base 2, with the scale folded
// into one FMA, and after a row's first key tile it skips the tile's own max where
// registers allow (softmax_tile). Causal is aligned bottom-right and iterates the key
// tiles from the last to the first, so only the first few tiles a row meets need masks;
// the first, which holds the diagonal, gets a masked softmax specialised per warp
// (softmax_first). Features (window, softcap, ALiBi, user code) enter through
// fj_features.cuh's hook where the scores are masked (mask_tile, rescore_tile) and, for
// those that change scores, on every tile before its softmax; a window also narrows the
// key tiles of a work tile (work_of), and its left edge is masked under the previous
// P V (mask_left_edge); a mask_mod's block mask lists the key tiles (produce).
#pragma once

#include "fj_block_mask.cuh"
#include "fj_common.cuh"
#include "fj_features.cuh"
#include "fj_fp8.cuh"
#include "fj_hopper.cuh"

namespace fj {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockN_, int kConsumers_,
          int kStages_, bool kCausal_, typename Features_ = NoFeatures,
          typename OutElement_ = Element_>
struct FwdWgmmaConfig {
  typedef Element_ Element;        // of Q, K and V
  typedef OutElement_ OutElement;  // of O: Element, or a 16-bit type for FP8 inputs
  typedef Features_ Features;
  typedef FeatureTraits<Features_> FeatureInfo;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kStages = kStages_;
  static constexpr bool kCausal = kCausal_;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);

  // FP8 (e4m3) inputs: one wgmma takes 32 of K instead of 16, and V comes transposed
  // (fj_fp8.cuh), loaded like K: rows of head_dim_v, keys contiguous, in panels of kPanelN
  // keys (block_n is then a multiple of 32). O is written from registers (no kStageO: its
  // 16-bit rows would not fit the 8-bit Q buffer).
  static constexpr int kElementBytes = Element::kBytes;
  static constexpr bool kFp8 = kElementBytes == 1;
  static constexpr int kKStep = 32 / kElementBytes;  // K of one wgmma: 32 bytes
  // Head dims padded to whole swizzle panels: rows of 128 bytes when that divides,
  // else 64 bytes.
  static constexpr int kDPad = kFp8 ? (kHeadDim + 63) / 64 * 64 : (kHeadDim + 31) / 32 * 32;
  static constexpr int kDvPad = (kHeadDimV + 31) / 32 * 32;
  static constexpr int kPanelD =                               // elements per panel row
      kFp8 ? (kDPad % 128 == 0 ? 128 : 64) : (kDPad % 64 == 0 ? 64 : 32);
  static constexpr int kPanelDv = kDvPad % 64 == 0 ? 64 : 32;  // 16-bit V and O
  static constexpr int kSwizzleD = kPanelD * kElementBytes;   // bytes per panel row
  static constexpr int kSwizzleDv = kPanelDv * 2;
  // FP8 V^T: keys per panel, the widest swizzle that divides block_n (32-byte panels give
  // FlashAttention-3's 160- and 224-key tiles).
  static constexpr int kPanelN = kBlockN % 128 == 0 ? 128 : kBlockN % 64 == 0 ? 64 : 32;
  // P's A fragments: one per wgmma of P V (16 keys, or 32 with FP8).
  static constexpr int kPFrags = kBlockN / kKStep;

  static constexpr int kQBytes = kBlockM * kDPad * kElementBytes;
  static constexpr int kKBytes = kBlockN * kDPad * kElementBytes;
  static constexpr int kVBytes = kBlockN * kDvPad * kElementBytes;
  // Each Q buffer comes with the work tile it holds: a TileId written by the producer, and
  // an mbarrier on which every consumer thread arrives once it has read it (and, with a
  // block mask, the tile's count of key tiles at byte 24).
  static constexpr int kTileSlotBytes = 32;
  // A mask_mod's kernel takes a block mask when the call gives one (fj_block_mask.cuh):
  // the producer walks the listed key tiles and hands each tile's entry and bit slot to
  // the consumers in 8 bytes per ring stage, written before the stage's K load is
  // announced.
  static constexpr bool kBlockMask = Features_::kMaskMod;
  static constexpr int kStageSlotBytes = kBlockMask ? (8 * kStages + 15) / 16 * 16 : 0;
  // ALiBi alone on 16-bit inputs: the key's part of the bias comes from the tensor cores
  // (alibi_product): S = Q K^T takes one more wgmma of K = 16, whose A holds the head's
  // slope and whose B, the bias panel (32 bytes a key, written once per CTA), each key's
  // column in the tile. It trades an FFMA a score (alibi_linear_tile) for a longer S:
  // d = 64 tiles gained up to 12 %, the best tile of each shape 0 to 4 %; at d = 128 the
  // best tiles moved -1.4 to +1.3 % (H200, docs/PERF.md f18), so head dims up to 64 only.
  // Not with a block mask: its key tiles are known only from the ring. Only where the
  // panel costs no Q buffer and fits (d 128 bm128.bn128 with three stages had 4 KB too
  // few).
  static constexpr int kMaxSmemBytes = 227 * 1024;
  // Shared memory with q Q buffers and `bias` bytes of bias panel: 1024 bytes of slack to
  // align the operands to the 128-byte swizzle's period, the buffers, the K/V ring, the
  // panel, two mbarriers per Q buffer and four per stage, the tile slots and the stage
  // slots (generator/spec.cpp's wgmmaBytes mirrors it).
  __host__ __device__ static constexpr int smem_bytes(int q, int bias) {
    return 1024 + q * kQBytes + kStages * (kKBytes + kVBytes) + bias +
           (2 * q + 4 * kStages) * 8 + q * kTileSlotBytes + kStageSlotBytes;
  }
  // Two Q buffers where they fit, so the producer loads the next work tile's Q while the
  // consumers still read this one's (the consumers' step from one tile to the next then
  // never waits for Q).
  static constexpr int kQBuffers = smem_bytes(2, 0) <= kMaxSmemBytes ? 2 : 1;
  static constexpr bool kAlibiByMma = FeatureInfo::kScoreUnits && !kBlockMask && !kFp8 &&
                                      kHeadDim <= 64 &&
                                      smem_bytes(kQBuffers, kBlockN * 32) <= kMaxSmemBytes;
  static constexpr int kBiasBytes = kAlibiByMma ? kBlockN * 32 : 0;
  static constexpr int kBarriers = 2 * kQBuffers + 4 * kStages;  // Q full/empty, K, V
  static constexpr int kSmemBytes = smem_bytes(kQBuffers, kBiasBytes);

  // Registers per thread after setmaxnreg: the producer keeps the minimum.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  // Overlapping a tile's softmax with the previous tile's P V keeps S, P and O live
  // at once; only when they fit the consumers' registers: S and P count their size, O a
  // quarter more, plus 16, fitted to ptxas over the tile space so that no tile it admits
  // spills or has its wgmma serialised. Three consumers (160 registers each) below
  // head_dim_v 128 keep an older, wider margin: at d = 64 overlapping moved their tiles
  // by -4.5 to +4.9 % (softmax-bound, docs/PERF.md v5.1 and v5.7), while at d = 128 it
  // gained 3 to 14 % (v5.7, once the tile walk had left the consumers).
  // (P takes block_n / 4 registers, or block_n / 8 with FP8: four keys a register.)
  // FP8's margins (kThreeConsumerMargin 40; kFastSoftmaxMargin 8, or 24 as for 16 bits
  // where three consumers hold head_dim_v above 128) were fitted to ptxas over FP8's space
  // (d 64 to 256): no tile they admit spills or serialises its wgmma but d 192's
  // bm64.bn160, which the tuner rejects; the tiles they newly admitted ran 3 to 18 %
  // faster (d 64 bm192.bn128, d 128 bm192.bn96, d 256 bm128.bn96; H200, docs/PERF.md p5).
  static constexpr int kPRegs = kBlockN / (kFp8 ? 8 : 4);
  static constexpr int kThreeConsumerMargin = kFp8 ? 40 : 56;
  static constexpr int kFastSoftmaxMargin = kFp8 && (kConsumers < 3 || kDvPad <= 128) ? 8 : 24;
  static constexpr bool kOverlap =
      kConsumers == 3 && kDvPad < 128
          ? kBlockN / 2 + kPRegs + kDvPad / 2 + kThreeConsumerMargin <= kConsumerRegs
          : kBlockN / 2 + kPRegs + kDvPad / 2 + kDvPad / 8 + 16 <= kConsumerRegs;
  // The softmax without the tile max (softmax_tile) where the loop overlaps and its rare
  // second pass fits too: 8 registers more than the overlap's rule, fitted to ptxas over
  // the tile space (of the tiles it admits, d128 causal bm128.bn176 and d256 bm128.bn64
  // still spill 40 and 16 B; the tuner rejects them). Without the overlap (three
  // consumers at d = 64) it gained -3 to +4 % as an upper bound (docs/PERF.md, v5.8/v5.9).
  // Not where features let a row's scores rise from tile to tile: ALiBi's do by up to
  // slope * N towards the diagonal (the tiles come last to first), past what rebasing P
  // recovers, so every tile took rescore_tile's slow path (0.15x the plain kernel, H100,
  // docs/PERF.md f1); the user's score_mod may do the same.
  // So ALiBi without causal or a mask walks its key tiles from the one that holds the
  // work tile's first diagonal outwards (kDiagonalFirst: down to the first tile, then
  // up), and takes the exact softmax only where a warp's scores can rise: on the way up,
  // over the tiles up to its rows' diagonals (work_tile, rises_towards_diagonal).
  // Causal ALiBi needs no new order: last to first starts at the diagonal, and the bias
  // only falls from there (with ALiBi's scores transformed in a loop of their own, its
  // tiles fit the fast softmax, docs/PERF.md f3).
  static constexpr bool kDiagonalFirst =
      !kCausal && Features_::kAlibi && !Features_::kMaskMod;
  static constexpr bool kAlibiFallsAway = kCausal && Features_::kAlibi && !Features_::kMaskMod;
  static constexpr bool kFastSoftmax =
      kOverlap &&
      kBlockN / 2 + kPRegs + kDvPad / 2 + kDvPad / 8 + kFastSoftmaxMargin <= kConsumerRegs &&
      !Features_::kScoreMod && (!Features_::kAlibi || kDiagonalFirst || kAlibiFallsAway);
  // ALiBi alone: the scores of a tile on one side of a warp's diagonals leave their
  // rows' part of the bias out of acc_s (RowState::shift), one FFMA a score less
  // (ScoreHook::alibi_linear, docs/PERF.md f14).
  static constexpr bool kScoreShift = FeatureInfo::kScoreUnits;
  // Two consumer warpgroups take turns issuing their products.
  static constexpr bool kPingPong = kConsumers == 2;
  // A causal work tile's first key tile, which holds the diagonal, gets a masked softmax
  // of its own before the loop (softmax_first): +2 to +9 % at d = 64 (docs/PERF.md
  // v5.13). Not for 16-bit inputs from d = 128: at d = 128 (bm128.bn128, H100, 3 rounds)
  // they ran 1.7-2.8 % faster without it from N = 4096 (0.2-1.6 % slower at 1024) and
  // compile 15 % faster (docs/PERF.md s60); head dims between 64 and 128, not measured,
  // keep it. FP8 keeps it at every head dim (d = 128: +2.6 % at N 4096, +5.5 % at
  // 1024). Only where the fast softmax fits, and not with one consumer warpgroup: with
  // the added code, d256 bm128.bn80 (which the overlap admits, the fast softmax not) and
  // three one-consumer tiles (bm64 with bn 224 at d = 64, bn 176 at d = 128, bn 64 at
  // d = 256) spilled, and no other tile of the space started to.
  // Not with features that transform scores or a mask_mod: their hook would have to run
  // before it, on a tile it may hand back to the loop. A sliding window whose left side
  // reaches at least a key tile back from each row's diagonal never cuts that tile (its
  // rows' left bounds lie before the tile's first key): there only the causal mask
  // applies, and the window takes it too. Measured (docs/PERF.md f13) at d = 64 with
  // block_n >= 128 only: +2 to +8 % there, while 64-key tiles lost 3 to 9 % and d = 128's
  // bm128.bn128.s2, the best window tile, spilled 40 bytes with it.
  static constexpr bool kWindowMissesFirstTile =
      FeatureInfo::kLeftBound && !FeatureInfo::kTransforms && !Features_::kMaskMod &&
      Features_::kWindowLeft >= kBlockN && kHeadDim <= 64 && kBlockN >= 128;
  // Causal ALiBi alone: its bias is linear over the whole tile, one FFMA a score
  // (kScoreShift), which softmax_first applies to the groups the warp sees (+6 % at
  // d = 64 N = 1024, docs/PERF.md f15). Not beside a window or a mask_mod: softmax_first
  // masks only the causal bound (a window narrower than the tile cut it).
  static constexpr bool kAlibiFirstTile = kCausal && kScoreShift && !FeatureInfo::kMasks;
  static constexpr bool kFirstTileSoftmax = kCausal && kFastSoftmax && kConsumers > 1 &&
                                            (kHeadDim < 128 || kFp8) &&
                                            (!FeatureInfo::kAny || kWindowMissesFirstTile ||
                                             kAlibiFirstTile);
  // Without a mask, with three consumer warpgroups: a warpgroup whose rows all lie past
  // the sequence end passes over the tile (pass_over_tile), and the walk spreads the
  // heads' last blocks, made lighter so, over the CTAs (TileWalk::next): +5 % at d = 64
  // N = 512 and 1024 (docs/PERF.md v5.14). Causal kernels lost 3 % with the first part,
  // and two-consumer tiles (which have a row-less warpgroup only when N % 128 is 1..64)
  // lost up to 3.6 % at lengths where it never runs: the code alone cost them that.
  static constexpr bool kPassEmptyWarpgroups = !kCausal && kConsumers == 3;
  // A sliding window's left edge: a tile that crosses its rows' left bounds and no other
  // bound is masked in the loop, while the previous P V runs, and keeps the fast softmax
  // (dropping scores cannot raise a row). Through the exact path it waited for that
  // P V, then took the tile max: the last tile of every walk, one in ~9 at 1024 keys.
  // Two consumers only: their turns made that wait the other warpgroup's too (bm128.bn128
  // window 1024: +5 % at d = 64, +1-2 % at d = 128); with three, which take no turns,
  // the code in the loop cost more than it saved (bm192.bn64 -2.5 %), and so it did on
  // tiles narrower than 128 keys (bn96 -1.5 % at d = 64, -6 % at d = 128 non-causal;
  // docs/PERF.md f17).
  static constexpr bool kLeftEdgeInLoop = kFastSoftmax && kConsumers == 2 && kBlockN >= 128 &&
                                          FeatureInfo::kLeftBound &&
                                          !FeatureInfo::kTransforms && !Features_::kMaskMod;
  // A sliding window with three consumers: each warpgroup computes only the key tiles its
  // own 64 rows see, and passes over the others of the work tile's walk (those past its
  // rows' last diagonal at the walk's start, those before its rows' window at its end):
  // at bm192 the work tile's walk spans its 192 rows' windows, each warpgroup's 64 rows
  // need 128 keys fewer. Not with ping-pong turns (pass_over_tile takes none), a block
  // mask's listed walk or the diagonal-first order.
  static constexpr bool kNarrowWalks = kConsumers == 3 && !kFp8 && !kBlockMask &&
                                       !kDiagonalFirst &&
                                       (FeatureInfo::kLeftBound || FeatureInfo::kRightBound);
  // O leaves through shared memory: each warpgroup writes its normalised rows into its
  // own rows of the tile's Q buffer (free once the last S = Q K^T is done). With two Q
  // buffers one thread then stores them by TMA, so the consumers start the next tile at
  // once (kStoreOByTma); otherwise, and where TMA cannot store O (a variable-length
  // batch, whose tile may end inside the next sequence's rows, or an O whose address or
  // strides a tensor map cannot describe), the warpgroup copies them out in 16-byte
  // pieces. Holding the Q buffer until then delays the load of the next Q (one Q buffer)
  // or of the Q two tiles ahead (two); measured a gain either way (docs/PERF.md, v5 and
  // v5.2). With one Q buffer (d > 128) the TMA path would not fit beside the copy in the
  // consumers' registers (d = 256 causal 128 x 80 spilled) and gained least there.
  static constexpr bool kStageO = !kFp8 && kDvPad == kDPad;
  static constexpr bool kStoreOByTma = kStageO && kQBuffers == 2;

  static_assert(kHeadDim % 8 == 0 && kHeadDim >= 8 && kHeadDim <= 256, "head_dim");
  static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 8 && kHeadDimV <= 256, "head_dim_v");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256, "block_n");
  static_assert(!kFp8 || (kBlockN % 32 == 0 && !FeatureInfo::kAny && OutElement::kBytes == 2),
                "FP8: block_n a multiple of 32, no features, a 16-bit output");
  static_assert(kConsumers >= 1 && kConsumers <= 3, "1 to 3 consumer warpgroups");
  static_assert(kStages >= 2, "the K/V ring needs at least two stages");
  // What the launch holds: __launch_bounds__(kThreads, 1) gives each thread the file's
  // share rounded down to 8. setmaxnreg.inc waits for registers to be free, so asking for
  // more than that hangs the kernel.
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <=
                    kThreads * (65536 / kThreads / 8 * 8),
                "register file");
};

namespace fwd_wgmma {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// How far (in log2 units) a row's max may grow before O and the sum are rescaled. P up
// to 2^8 costs some precision (the output up to ~1 ulp off where cuDNN's is 0.5, within
// DESIGN.md's bar; docs/PERF.md e1), and the fast softmax (softmax_tile) goes further,
// P up to kFastSumBound; dec_mma uses no slack.
constexpr float kRescaleSlack = 8.f;
constexpr float kRescaleSlackFactor = (float)(1 << (int)kRescaleSlack);

// Where the operands live in shared memory (all offsets 1024-byte aligned).
// Work tile number r (counted per CTA) uses Q buffer r % kQBuffers.
template <typename Cfg> struct SmemLayout {
  static constexpr int kQB = Cfg::kQBuffers;
  u32 q0, k, v, bias, bar;
  __device__ explicit SmemLayout(u32 base) {
    q0 = base;
    k = q0 + kQB * Cfg::kQBytes;
    v = k + Cfg::kStages * Cfg::kKBytes;
    bias = v + Cfg::kStages * Cfg::kVBytes;  // 1024-aligned: V's stages are
    bar = bias + Cfg::kBiasBytes;
  }
  // The work tile of Q buffer round % kQB (see produce), after the barriers, and the
  // barrier that says every consumer thread has read it.
  __device__ u32 tile(int round) const {
    return bar + Cfg::kBarriers * 8 + (round % kQB) * Cfg::kTileSlotBytes;
  }
  __device__ u32 tile_read(int round) const { return tile(round) + 16; }
  __device__ u32 tile_blocks(int round) const { return tile(round) + 24; }
  // The block-mask entry of the key tile in ring stage s, and its bit slot, 4 bytes on
  // (Cfg::kBlockMask).
  __device__ u32 stage_entry(int s) const {
    return bar + Cfg::kBarriers * 8 + kQB * Cfg::kTileSlotBytes + 8 * s;
  }
  __device__ u32 q(int round) const { return q0 + (round % kQB) * Cfg::kQBytes; }
  __device__ u32 q_full(int round) const { return bar + 8 * (round % kQB); }
  __device__ u32 q_empty(int round) const { return bar + 8 * (kQB + round % kQB); }
  __device__ static u32 q_parity(int round) { return (round / kQB) & 1; }
  __device__ u32 full_k(int s) const { return bar + 8 * (2 * kQB + s); }
  __device__ u32 full_v(int s) const { return bar + 8 * (2 * kQB + Cfg::kStages + s); }
  __device__ u32 empty_k(int s) const { return bar + 8 * (2 * kQB + 2 * Cfg::kStages + s); }
  __device__ u32 empty_v(int s) const { return bar + 8 * (2 * kQB + 3 * Cfg::kStages + s); }
};

// One work tile: a block of kBlockM query rows of one (batch, head), and the key tiles
// its rows see.
struct Work {
  int h, h_kv, b;
  SeqExtent seq;  // this sequence's lengths and, with cu_seqlens, its packed rows
  int q0;         // first query row, within the sequence
  int n_first;    // key tiles n_first .. n_first + n_blocks - 1 (0 but with a window)
  int n_diag;     // kDiagonalFirst: the tile of the first row's diagonal, walked first
  int n_blocks;   // how many (causal stops at the diagonal)
  int diag;       // query i sees keys j <= i + diag
  // Tensor-map coordinates (SeqExtent's, with cu_seqlens one packed batch).
  __device__ int tma_batch() const { return seq.tma_batch(b); }
  // FP8's V^T column of a key (fj_fp8.cuh: with cu_seqlens, sequences kept apart by zeros).
  __device__ int tma_vt_key(int key) const { return key + (int)fp8::vt_offset(seq.k_offset, b); }
};

// What the producer hands the consumers of a work tile (see produce); they derive the
// rest (work_of) without a division. q0 < 0 marks the end.
struct TileId {
  int b, h, h_kv, q0;
  // Scalar stores and loads: a vector one wants four aligned consecutive registers, dear
  // in the producer's 24 and the consumers' full files.
  __device__ void publish(u32 slot) const {
    st_shared_u32(slot, (u32)b);
    st_shared_u32(slot + 4, (u32)h);
    st_shared_u32(slot + 8, (u32)h_kv);
    st_shared_u32(slot + 12, (u32)q0);
  }
  __device__ static TileId read(u32 slot) {
    return TileId{(int)ld_shared_u32(slot), (int)ld_shared_u32(slot + 4),
                  (int)ld_shared_u32(slot + 8), (int)ld_shared_u32(slot + 12)};
  }
};
// Narrows the key tiles [first, end) to those that rows row_lo .. row_hi may see: up to
// the last row's diagonal when causal, and within the window.
template <typename Cfg>
__device__ __forceinline__ void clip_key_tiles(int row_lo, int row_hi, int diag, int &first,
                                               int &end) {
  if (Cfg::kCausal) {
    const int last_key = row_hi + diag;
    end = imin(end, last_key < 0 ? 0 : last_key / Cfg::kBlockN + 1);
  }
  if (Cfg::Features::kWindow && end > 0)
    window_tiles<typename Cfg::Features, Cfg::kBlockN>(row_lo, row_hi, diag, first, end);
}

// The work tile of a TileId. With cu_seqlens the grid covers the longest sequence; a
// block past a shorter one's end has no rows (and no key tiles).
template <typename Cfg>
__device__ __forceinline__ Work work_of(const FjForwardParams &p, const TileId &id) {
  Work w;
  w.b = id.b;
  w.h = id.h;
  w.h_kv = id.h_kv;
  w.seq = seq_extent(p, w.b);
  w.q0 = id.q0;
  w.diag = w.seq.seqlen_k - w.seq.seqlen_q;
  int first = 0,
      end = w.q0 < w.seq.seqlen_q ? (w.seq.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN : 0;
  clip_key_tiles<Cfg>(w.q0, imin(w.q0 + Cfg::kBlockM, w.seq.seqlen_q) - 1, w.diag, first, end);
  w.n_first = first;
  w.n_blocks = Cfg::Features::kWindow ? imax(end - first, 0) : end;  // a window may empty it
  w.n_diag = w.n_first;
  if (Cfg::kDiagonalFirst && w.n_blocks > 0) {
    const int key = w.q0 + w.diag;  // the first row's diagonal
    w.n_diag = imin(imax(key < 0 ? 0 : key / Cfg::kBlockN, w.n_first),
                    w.n_first + w.n_blocks - 1);
  }
  return w;
}

// The key tile of a work tile's iteration i: last to first, or with kDiagonalFirst from
// n_diag down to n_first, then up from n_diag + 1.
template <typename Cfg> __device__ __forceinline__ int work_tile(const Work &w, int i) {
  if (Cfg::kDiagonalFirst) {
    const int down = w.n_diag - w.n_first + 1;
    return i < down ? w.n_diag - i : w.n_diag + 1 + (i - down);
  }
  return w.n_first + w.n_blocks - 1 - i;
}

// kDiagonalFirst: whether the ALiBi bias of some row of the warp whose rows start at
// warp_row rises in the tile at key0 over every tile before it, so that the fast softmax
// (which keeps the row's max from earlier tiles) must not take it: on the way up, a tile
// not past the warp's last diagonal.
template <typename Cfg>
__device__ __forceinline__ bool rises_towards_diagonal(const Work &w, int key0, int warp_row) {
  return Cfg::kDiagonalFirst && key0 > w.n_diag * Cfg::kBlockN &&
         key0 <= warp_row + 15 + w.diag;
}
// The work tile of query block m_block of (batch, head) bh; by_heads and by_group divide
// by heads_q and heads_q / heads_kv.
template <typename Cfg>
__device__ __forceinline__ Work work_at(const FjForwardParams &p, const FastDiv &by_heads,
                                        const FastDiv &by_group, int bh, int m_block) {
  TileId id;
  id.b = by_heads(bh);
  id.h = bh - id.b * p.heads_q;
  id.h_kv = by_group(id.h);
  id.q0 = m_block * Cfg::kBlockM;
  return work_of<Cfg>(p, id);
}

// The work tiles of this CTA, in order. The grid is persistent (one CTA per SM): CTA c
// takes units c, c + gridDim.x, ..., so its producer loads the next tile while the
// consumers finish the last. Units of one (batch, head) are neighbours, so CTAs running
// together share K and V in L2. Without a mask a unit is one query block (rotated within
// its head where the head's last block is light, see next). Causal query
// blocks differ in work (block m sees ~m + 1 key tiles), so a causal unit is the pair of
// blocks M-1-i and i of one head (heaviest first): every pair costs the same, and a
// static assignment of pairs is as balanced as the non-causal one.
// Except in the last round: when the pairs do not fill it (units % gridDim.x of them
// are left), its pairs are split into single blocks, taken largest first: CTA c takes
// the c-th largest, then the (2 gridDim.x - 1 - c)-th, so the CTAs with the largest
// blocks get none or the smallest second (docs/PERF.md, v5.6).
// Only the producer walks (see produce). Its divisions by run-time sizes are FastDivs,
// set up once; the last round's few are small_divs.
// Under a block mask (not causal) the costs of work tiles differ by the mask, and a call
// may give a zeroed tile counter: then each CTA takes its first unit as above and every
// later one from the counter, as it frees up (the units still run in the walk's order, so
// CTAs running together still share K and V; the hardware scheduler's way, kept
// persistent). Without one the walk is static (docs/PERF.md f10).
template <typename Cfg> struct TileWalk {
  // Only what changes or is dear to recompute is kept: the producer runs this walk in
  // 24 registers. Sizes come from the launch parameters (constant memory) each time.
  int unit;          // this CTA's next pair; in the tail, paired + its next item
  bool second_half;  // pairs: the light half is next; tail: the second item is next
  bool use_order;    // ordered(p), and the order kept (build_order's order[0] >= 0)
  int *counter;      // the call's tile counter (block masks, not causal), or null
  FastDiv by_per_head, by_heads, by_group;
  static constexpr int kDone = 0x7fffffff;
  // Block-mask walks without causal: ordered by cost, and handed out by a counter.
  static constexpr bool kByCost = Cfg::kBlockMask && !Cfg::kCausal;
  __device__ static int m_blocks(const FjForwardParams &p) {
    return (p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  }
  __device__ static int per_head(const FjForwardParams &p) {
    return Cfg::kCausal ? (m_blocks(p) + 1) / 2 : m_blocks(p);
  }
  // A block mask's order of the work tiles (FjForwardParams::block_order), built for
  // this grid: one block per unit, in that order. Causal kernels keep their pairs.
  __device__ static bool ordered(const FjForwardParams &p) {
    return kByCost && p.block_order != nullptr &&
           p.block_order_grid == (int)gridDim.x;
  }
  __device__ TileWalk(const FjForwardParams &p, int *tile_counter)
      : unit(blockIdx.x), second_half(false),
        use_order(ordered(p) && __ldg(p.block_order) >= 0),
        counter(kByCost ? tile_counter : nullptr),
        by_per_head(per_head(p)), by_heads(p.heads_q), by_group(p.heads_q / p.heads_kv) {}
  // The unit this CTA takes after the current one (one block per unit): the grid's
  // stride on, or, with a counter, kClaim: the next one no CTA has taken, claimed only
  // when the producer asks for it (next()), once it has issued the current unit's loads.
  // Claimed a unit ahead, a busy CTA held its next unit while others went idle: 1-7 %
  // slower (docs/PERF.md f12).
  static constexpr int kClaim = -1;
  __device__ __forceinline__ int next_unit(int g) const {
    if constexpr (kByCost)
      if (counter)
        return kClaim;
    return unit + g;
  }
  // Item k of the last round (see above): (batch * head, query block) of the k-th block
  // in order of decreasing size; false past the last. The round holds the pairs
  // paired .. units - 1: the end of head h0 (from pair i0 on) and `whole` whole heads
  // after it. Heavy halves come first, by i upwards (size M - i), then light halves by i
  // downwards (size i + 1; an odd M's middle block has none). At most twice per CTA.
  __device__ __forceinline__ bool tail_item(const FjForwardParams &p, int k, int paired,
                                            int units, int &bh, int &m_block) {
    const int per = per_head(p), m = m_blocks(p), tail = units - paired;
    const int h0 = by_per_head(paired), i0 = paired - h0 * per;
    const int whole = by_per_head(units) - 1 - h0;
    const int lights = m / 2;                              // pairs with a light half
    const int first = (whole + 1) * imax(lights - i0, 0);  // light halves with i >= i0
    if (tail <= 0 || k >= tail + first + whole * imin(i0, lights))
      return false;
    if (k < tail) {  // heavy: whole * i0 of them with i < i0, from whole heads only
      int i;
      if (k < whole * i0) {
        i = small_div(k, whole);
        bh = h0 + 1 + (k - i * whole);
      } else {
        const int r = small_div(k - whole * i0, whole + 1);
        i = i0 + r;
        bh = h0 + (k - whole * i0 - r * (whole + 1));
      }
      m_block = m - 1 - i;
    } else {
      k -= tail;
      if (k < first) {
        const int r = small_div(k, whole + 1);
        m_block = lights - 1 - r;
        bh = h0 + (k - r * (whole + 1));
      } else {
        const int r = small_div(k - first, whole);
        m_block = imin(i0, lights) - 1 - r;
        bh = h0 + 1 + (k - first - r * whole);
      }
    }
    return true;
  }
  // The next work tile into w; false when this CTA is done.
  __device__ __forceinline__ bool next(const FjForwardParams &p, Work &w) {
    const int units = per_head(p) * p.heads_q * p.batch, g = gridDim.x, c = blockIdx.x;
    if (unit == kDone)
      return false;
    if constexpr (kByCost)
      if (unit == kClaim)
        unit = g + atomicAdd(counter, 1);
    if (use_order) {
      if (unit >= units)
        return false;
      const int u = __ldg(p.block_order + unit), bh = by_per_head(u);
      unit = next_unit(g);
      w = work_at<Cfg>(p, by_heads, by_group, bh, u - bh * per_head(p));
      return true;
    }
    if (!Cfg::kCausal) {  // one block per unit, every round
      if (unit >= units)
        return false;
      const int per = per_head(p), bh = by_per_head(unit);
      int i = unit - bh * per;
      // A head's last block, when it leaves a consumer warpgroup without rows, costs
      // less (pass_over_tile). When gridDim.x is a multiple of the blocks per head, each
      // CTA would take the same block of some head every round, and the light ones would
      // all go to a few CTAs while the rest set the time. So each head's blocks are
      // rotated by the round its first block falls in: a CTA's block then moves on by
      // one each round. (small_div is exact below 2^20 units; any rotation within a head
      // keeps the walk a permutation, so beyond that only the spread suffers.)
      const int rows = p.seqlen_q - (per - 1) * Cfg::kBlockM;
      if (Cfg::kPassEmptyWarpgroups && per > 1 && rows <= Cfg::kBlockM - 64) {
        const int r = small_div(bh * per, g);
        i += r - by_per_head(r) * per;
        i -= i >= per ? per : 0;
      }
      unit = next_unit(g);
      w = work_at<Cfg>(p, by_heads, by_group, bh, i);
      return true;
    }
    int bh, m_block;
    // unit = c + k g is below paired = floor(units / g) g exactly when (k + 1) g <= units.
    if (unit - c + g <= units) {
      bh = by_per_head(unit);
      const int i = unit - bh * per_head(p);
      m_block = second_half ? i : m_blocks(p) - 1 - i;
      // The light half follows; the middle block of an odd count has no partner.
      second_half = !second_half && m_block != i;
      if (!second_half)
        unit += g;
    } else {
      // The last round, block by block: this CTA takes items c, then 2 g - 1 - c (there
      // are fewer than 2 g). unit holds paired + the item.
      const int k = second_half ? 2 * g - 1 - c : c, paired = unit - k;
      if (!tail_item(p, k, paired, units, bh, m_block)) {
        unit = kDone;
        return false;
      }
      unit = second_half ? kDone : paired + 2 * g - 1 - c;
      second_half = true;
    }
    w = work_at<Cfg>(p, by_heads, by_group, bh, m_block);
    return true;
  }
};

// Warpgroup 0, one thread: walks the work tiles and, for each, once the consumers are
// done with the Q buffer it takes: publishes the tile in the buffer's slot (so the
// consumers, whose registers are the tight ones, never run the walk), loads Q, then K and
// V of every key tile, last tile first, into the ring. A tile with no key tile gets no
// loads (its Q-full barrier completes on the arrival alone); after the last tile a slot
// with q0 = -1 tells the consumers to stop.
template <typename Cfg>
__device__ __forceinline__ void produce(const FjForwardParams &p, const SmemLayout<Cfg> &sm,
                                        const TensorMap &tm_q, const TensorMap &tm_k,
                                        const TensorMap &tm_v, int *tile_counter) {
  constexpr int kPanelsD = Cfg::kDPad / Cfg::kPanelD;
  constexpr int kPanelsDv = Cfg::kDvPad / Cfg::kPanelDv;
  tma_prefetch_map(tm_q);
  tma_prefetch_map(tm_k);
  tma_prefetch_map(tm_v);
  int q_round = 0, kv_iter = 0;
  TileWalk<Cfg> walk(p, tile_counter);
  Work w;
  // The slot's own barrier orders the consumers' reads before the next write. (The Q
  // buffer's empty barrier completes later still, but one thread arrives on it for a
  // whole warpgroup, and compute-sanitizer's racecheck does not follow that chain.)
  auto claim_slot = [&]() {
    mbar_wait(sm.q_empty(q_round), sm.q_parity(q_round) ^ 1);
    mbar_wait(sm.tile_read(q_round), sm.q_parity(q_round) ^ 1);
  };
  while (walk.next(p, w)) {
    // With a block mask the work tile's key tiles are the listed ones (read before the
    // wait for the slot, which hides the load).
    long long block_list = -1;  // the work tile's first entry
    if constexpr (Cfg::kBlockMask) {
      if (p.block_counts && w.n_blocks > 0) {
        const long long wi = block_mask::work_index(p, w.b, w.h, w.q0 / Cfg::kBlockM);
        w.n_blocks = p.block_counts[wi];
        block_list = wi * p.block_tiles_stride;
      }
    }
    claim_slot();
    TileId{w.b, w.h, w.h_kv, w.q0}.publish(sm.tile(q_round));  // seen after the arrival
    if constexpr (Cfg::kBlockMask)
      st_shared_u32(sm.tile_blocks(q_round), (u32)w.n_blocks);
    if (w.n_blocks == 0) {
      mbar_arrive(sm.q_full(q_round));
      ++q_round;
      continue;
    }
    mbar_arrive_expect_tx(sm.q_full(q_round), Cfg::kQBytes);
#pragma unroll
    for (int pn = 0; pn < kPanelsD; ++pn)
      tma_load_4d(sm.q(q_round) + pn * Cfg::kBlockM * Cfg::kSwizzleD, tm_q,
                  sm.q_full(q_round), pn * Cfg::kPanelD, w.seq.tma_q_row(w.q0), w.h, w.tma_batch());
    ++q_round;
    for (int i = 0; i < w.n_blocks; ++i, ++kv_iter) {
      const int s = kv_iter % Cfg::kStages;
      const u32 free_parity = ((kv_iter / Cfg::kStages) & 1) ^ 1;
      int tile = work_tile<Cfg>(w, i);
      if constexpr (Cfg::kBlockMask) {
        if (block_list >= 0) {  // the entry goes to the stage's slot once it is free
          const long long at = block_list + w.n_blocks - 1 - i;
          const u32 entry = (u32)p.block_tiles[at];
          const u32 bit_slot = (u32)p.block_slots[at];
          tile = block_mask::entry_tile(entry);
          mbar_wait(sm.empty_k(s), free_parity);
          st_shared_u32(sm.stage_entry(s), entry);
          st_shared_u32(sm.stage_entry(s) + 4, bit_slot);
        }
      }
      const int key0 = w.seq.tma_k_row(tile * Cfg::kBlockN);
      const int vt_key0 = Cfg::kFp8 ? w.tma_vt_key(tile * Cfg::kBlockN) : 0;
      // One key tile of K or V into ring slot s, once the consumers have freed it.
      auto load_kv = [&](const TensorMap &map, u32 dst, u32 full, u32 empty, u32 bytes,
                         int panels, int panel_cols, int swizzle_bytes) {
        mbar_wait(empty, free_parity);
        mbar_arrive_expect_tx(full, bytes);
#pragma unroll
        for (int pn = 0; pn < panels; ++pn)
          tma_load_4d(dst + pn * Cfg::kBlockN * swizzle_bytes, map, full, pn * panel_cols,
                      key0, w.h_kv, w.tma_batch());
      };
      load_kv(tm_k, sm.k + s * Cfg::kKBytes, sm.full_k(s), sm.empty_k(s), Cfg::kKBytes,
              kPanelsD, Cfg::kPanelD, Cfg::kSwizzleD);
      if constexpr (Cfg::kFp8) {
        // V^T (fj_fp8.cuh): all head_dim_v rows, kPanelN keys a box.
        mbar_wait(sm.empty_v(s), free_parity);
        mbar_arrive_expect_tx(sm.full_v(s), Cfg::kVBytes);
#pragma unroll
        for (int pn = 0; pn < Cfg::kBlockN / Cfg::kPanelN; ++pn)
          tma_load_4d(sm.v + s * Cfg::kVBytes + pn * Cfg::kDvPad * Cfg::kPanelN, tm_v,
                      sm.full_v(s), vt_key0 + pn * Cfg::kPanelN, 0, w.h_kv, w.tma_batch());
      } else {
        load_kv(tm_v, sm.v + s * Cfg::kVBytes, sm.full_v(s), sm.empty_v(s), Cfg::kVBytes,
                kPanelsDv, Cfg::kPanelDv, Cfg::kSwizzleDv);
      }
    }
  }
  claim_slot();
  TileId{0, 0, 0, -1}.publish(sm.tile(q_round));
  mbar_arrive(sm.q_full(q_round));
}

// S = Q K^T for this warpgroup's 64 rows: K-major operands, one wgmma per 32 bytes of d
// (16 elements, or 32 with FP8).
template <typename Cfg>
__device__ __forceinline__ void qk_product(float (&acc_s)[Cfg::kBlockN / 2], u32 q_rows,
                                           u32 k_tile) {
  constexpr int kStepsPerPanel = Cfg::kPanelD / Cfg::kKStep;
  constexpr u32 kSbo = 8 * Cfg::kSwizzleD;  // 8 rows of one panel
  const u64 a0 = wgmma_desc(q_rows, 16, kSbo, Cfg::kSwizzleD);
  const u64 b0 = wgmma_desc(k_tile, 16, kSbo, Cfg::kSwizzleD);
#pragma unroll
  for (int ks = 0; ks < Cfg::kDPad / Cfg::kKStep; ++ks) {
    const int panel = ks / kStepsPerPanel, within = ks % kStepsPerPanel;
    const u64 a = wgmma_desc_add(a0, panel * Cfg::kBlockM * Cfg::kSwizzleD + within * 32);
    const u64 b = wgmma_desc_add(b0, panel * Cfg::kBlockN * Cfg::kSwizzleD + within * 32);
    wgmma_qk(acc_s, a, b, ks > 0 ? 1 : 0);
  }
}

// kAlibiByMma: ALiBi's bias on a key tile that lies on one side of a warp's diagonals is
// a part of the row (RowState::shift) plus m j, j the key's column in the tile and m the
// head's slope over softmax_scale, + before the diagonals and - after (ScoreHook::
// alibi_linear). The tensor cores add m j to S in one more wgmma of K = 16: B is the bias
// panel, each key's j (exact in bf16: j < 256) at columns 0, 1, 8 and 9; A holds m in
// three bf16 parts that sum to it within 2^-24 of m (lane t == 0 of each row: columns 0,
// 1 and 8), so that the scores arrive as alibi_linear_tile's FFMA would leave them (one
// instruction a score, docs/PERF.md f14). bf16 at any input type: its range holds any
// slope over a softmax_scale the API admits (>= 2^-60).
struct AlibiBias {
  u32 hi_mid = 0, lo = 0;  // A's words for m: columns (0, 1) and (8, 9) of rows g, g + 8
  __device__ AlibiBias(float m, int t) {
    if (t == 0) {
      const u32 hi = pack2<bf16>(m, 0.f) & 0xffffu;
      const float r = m - __uint_as_float(hi << 16);
      const u32 mid = pack2<bf16>(r, 0.f) & 0xffffu;
      const u32 lo_part = pack2<bf16>(r - __uint_as_float(mid << 16), 0.f) & 0xffffu;
      hi_mid = hi | mid << 16;
      lo = lo_part;
    }
  }
  // A for a tile on side `side` of the warp's diagonals: 1 before them (+m), -1 after
  // (-m), 0 across them (nothing: such a tile takes its bias score by score).
  __device__ __forceinline__ void fragment(int side, u32 (&a)[4]) const {
    const u32 sign = side < 0 ? 0x80008000u : 0u, keep = side != 0 ? ~0u : 0u;
    a[0] = a[1] = (hi_mid ^ sign) & keep;
    a[2] = a[3] = (lo ^ sign) & keep;
  }
};
// The side of the warp whose rows start at warp_row0 on which the key tile at key0 lies
// (AlibiBias::fragment). Causal tiles count as before: keys past a diagonal are masked.
template <typename Cfg>
__device__ __forceinline__ int alibi_side(const Work &w, int key0, int warp_row0) {
  if (Cfg::kCausal || key0 + Cfg::kBlockN - 1 <= warp_row0 + w.diag)
    return 1;
  return key0 >= warp_row0 + 15 + w.diag ? -1 : 0;
}
// The bias panel: row j (32 bytes) holds bf16 j at columns 0, 1, 8 and 9. Both 16-byte
// halves of a row are equal, so the 32-byte swizzle, which swaps them, leaves it as is.
template <typename Cfg> __device__ __forceinline__ void write_bias_panel(u32 panel) {
  for (int j = threadIdx.x; j < Cfg::kBlockN; j += Cfg::kThreads) {
    const u32 jj = pack2<bf16>((float)j, (float)j);
    for (int half = 0; half < 2; ++half) {
      st_shared_u32(panel + j * 32 + half * 16, jj);
      for (int word = 1; word < 4; ++word)
        st_shared_u32(panel + j * 32 + half * 16 + word * 4, 0u);
    }
  }
  fence_proxy_async_smem();  // the writes, before wgmma reads them
}
// S += A (AlibiBias::fragment) x (the bias panel)^T: one wgmma of K = 16, B
// K-major in rows of 32 bytes (8-row groups 256 bytes apart).
template <typename Cfg>
__device__ __forceinline__ void alibi_product(float (&acc_s)[Cfg::kBlockN / 2],
                                              const u32 (&a)[4], u32 panel) {
  wgmma_qk_bias(acc_s, a, wgmma_desc(panel, 16, 256, 32));
}

// O += P V: P from registers, V N-major (rows of keys, head_dim_v contiguous). A step
// covers 16 keys = two 8-row groups (sbo); panels of head_dim_v are lbo apart.
// FP8: V^T, K-major as K is in S = Q K^T: a step covers 32 keys (32 bytes of a panel
// row), 8-row groups of head_dim_v are sbo apart, panels of keys kDvPad rows.
template <typename Cfg>
__device__ __forceinline__ void pv_product(float (&acc_o)[Cfg::kDvPad / 2],
                                           const u32 (&p_frag)[Cfg::kPFrags][4],
                                           u32 v_tile) {
  if constexpr (Cfg::kFp8) {
    constexpr int kStepsPerPanel = Cfg::kPanelN / 32;
    const u64 b0 = wgmma_desc(v_tile, 16, 8 * Cfg::kPanelN, Cfg::kPanelN);
#pragma unroll
    for (int kk = 0; kk < Cfg::kPFrags; ++kk) {
      const int panel = kk / kStepsPerPanel, within = kk % kStepsPerPanel;
      wgmma_pv(acc_o, p_frag[kk],
               wgmma_desc_add(b0, panel * Cfg::kDvPad * Cfg::kPanelN + within * 32));
    }
    return;
  }
  constexpr u32 kLbo = Cfg::kBlockN * Cfg::kSwizzleDv;
  constexpr u32 kSbo = 8 * Cfg::kSwizzleDv;
  const u64 b0 = wgmma_desc(v_tile, kLbo, kSbo, Cfg::kSwizzleDv);
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk)
    wgmma_pv(acc_o, p_frag[kk], wgmma_desc_add(b0, kk * 16 * Cfg::kSwizzleDv));
}

// A consumer warpgroup's state for one work tile: the two rows each thread holds
// (accumulator rows g and g + 8 of its warp) and their online-softmax statistics.
template <typename Cfg> struct RowState {
  float acc_o[Cfg::kDvPad / 2];
  float row_max[2], row_sum[2];
  float correction[2];
  bool rescale;
  // kScoreShift: what mask_tile left out of this lane's scores of the tile in acc_s, per
  // row, in the raw score's units: the exponent takes (acc_s + shift) * scale, and the
  // row's max adds it before the quad's lanes compare (their shifts differ). 0 on tiles
  // that leave nothing out.
  float shift[2];
};

// The mask of this thread's `row` in a tile whose first key is key0: its element (nt, e)
// (e in 2 hf, 2 hf + 1 for the row's half hf) is masked, for a key past the sequence end
// or, when causal, past the row's diagonal, exactly when nt * 8 + (e & 1) > mask_limit. One
// compare with a constant per score (testing the key against both bounds took 2.5
// instructions per score, docs/PERF.md v5.11).
template <typename Cfg>
__device__ __forceinline__ int mask_limit(const Work &w, int key0, int row, int t) {
  int last_key = w.seq.seqlen_k - 1;
  if (Cfg::kCausal)
    last_key = imin(last_key, row + w.diag);
  return last_key - key0 - 2 * t;
}
__device__ __forceinline__ void mask_score(float &v, int nt, int e, int limit) {
  if (nt * 8 + (e & 1) > limit)
    v = neg_inf();
}

// Whether the tile at key0 crosses the sequence end or, when causal, the diagonal of one
// of this warpgroup's rows (the family's own bounds).
template <typename Cfg>
__device__ __forceinline__ bool tile_crosses_bounds(const Work &w, int key0, int wg_row0) {
  const bool crosses_end = key0 + Cfg::kBlockN > w.seq.seqlen_k;
  const bool crosses_diag =
      Cfg::kCausal && key0 + Cfg::kBlockN - 1 > w.q0 + wg_row0 + w.diag;
  return crosses_end || crosses_diag;
}
// Whether a tile crosses the family's own bounds or holds a score the features mask: only
// those tiles are masked. `partial`: the tile's class in the block mask (true without
// one). Both tests are evaluated, as before only_left_edge shared them (the same PTX for
// every kernel without kLeftEdgeInLoop).
template <typename Cfg>
__device__ __forceinline__ bool tile_needs_mask(const Work &w,
                                                const ScoreHook<typename Cfg::Features> &hook,
                                                int key0, int wg_row0, bool partial) {
  const bool own = tile_crosses_bounds<Cfg>(w, key0, wg_row0);
  const bool features = Cfg::FeatureInfo::kMasks &&
                        hook.tile_needs_mask(key0, Cfg::kBlockN, w.q0 + wg_row0,
                                             w.q0 + wg_row0 + 63, partial);
  return own | features;
}
// kLeftEdgeInLoop: whether a tile that needs a mask crosses no bound of this warpgroup's
// rows but the window's left one.
template <typename Cfg>
__device__ __forceinline__ bool only_left_edge(const Work &w,
                                               const ScoreHook<typename Cfg::Features> &hook,
                                               int key0, int wg_row0) {
  return !tile_crosses_bounds<Cfg>(w, key0, wg_row0) &&
         !hook.tile_crosses_right(key0, Cfg::kBlockN, w.q0 + wg_row0);
}

// f(hf, nt, e) for each of this thread's scores in the 8-key groups kFrom .. kTo - 1:
// acc_s[nt * 4 + e], of row half hf (e = 2 hf, 2 hf + 1), unrolled.
template <typename Cfg, int kFrom = 0, int kTo = Cfg::kBlockN / 8, typename F>
__device__ __forceinline__ void for_each_score(F &&f) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int nt = kFrom; nt < kTo; ++nt)
#pragma unroll
      for (int e = 2 * hf; e < 2 * hf + 2; ++e)
        f(hf, nt, e);
}
// The mask of the 8-key groups kFrom .. kTo - 1, for this thread's two rows' limits.
template <typename Cfg, int kFrom, int kTo>
__device__ __forceinline__ void mask_groups(float (&acc_s)[Cfg::kBlockN / 2],
                                            const int (&limit)[2]) {
  for_each_score<Cfg, kFrom, kTo>(
      [&](int hf, int nt, int e) { mask_score(acc_s[nt * 4 + e], nt, e, limit[hf]); });
}
// The window's left bound alone (kLeftEdgeInLoop): a score is dropped for a key before
// its row's first, nt * 8 + (e & 1) < lower; one compare with a constant per score.
template <typename Cfg>
__device__ __forceinline__ void mask_left_edge(float (&acc_s)[Cfg::kBlockN / 2], const Work &w,
                                               int key0, const int (&row)[2], int t) {
  const int lower[2] = {row[0] + w.diag - Cfg::Features::kWindowLeft - key0 - 2 * t,
                        row[1] + w.diag - Cfg::Features::kWindowLeft - key0 - 2 * t};
  for_each_score<Cfg>([&](int hf, int nt, int e) {
    if (nt * 8 + (e & 1) < lower[hf])
      acc_s[nt * 4 + e] = neg_inf();
  });
}
// One score of this thread's row half hf, (nt, e) of the tile at key0, through the
// features' hook: masked (-inf) when `mask` and the score lies past a bound, else
// transformed (features that change scores).
template <typename Cfg>
__device__ __forceinline__ void hook_score(float &v, const ScoreHook<typename Cfg::Features> &hook,
                                           int key0, int row, int t, int nt, int e,
                                           int limit, bool mask) {
  const int col = key0 + nt * 8 + 2 * t + (e & 1);
  if (mask && (nt * 8 + (e & 1) > limit || !hook.keeps(row, col)))
    v = neg_inf();
  else
    v = hook.apply(v, row, key0 + 2 * t, nt * 8 + (e & 1));
}
// ALiBi alone on a tile that lies on one side of the warp's diagonals (`before` them,
// or after): the scores of the 8-key groups kFrom .. kTo - 1 take the key's part of the
// bias, one FFMA each, and the rows' part goes to st.shift (ScoreHook::alibi_linear,
// docs/PERF.md f14).
template <typename Cfg, int kFrom = 0, int kTo = Cfg::kBlockN / 8>
__device__ __forceinline__ void alibi_linear_tile(float (&acc_s)[Cfg::kBlockN / 2],
                                                  RowState<Cfg> &st,
                                                  const ScoreHook<typename Cfg::Features> &hook,
                                                  int key0, const int (&row)[2], int t,
                                                  bool before) {
  float m[2];
  // kAlibiByMma: the keys' part is in acc_s already, counted from the tile's first key.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
    hook.alibi_linear(row[hf], Cfg::kAlibiByMma ? key0 : key0 + 2 * t, before, m[hf],
                      st.shift[hf]);
  if constexpr (Cfg::kAlibiByMma)
    return;
  for_each_score<Cfg, kFrom, kTo>([&](int hf, int nt, int e) {
    acc_s[nt * 4 + e] = hook.apply_linear(acc_s[nt * 4 + e], m[hf], nt * 8 + (e & 1));
  });
}

// Masks keys past the sequence end and, when causal, past the diagonal (-inf scores).
// With features: also what they mask, and (all of the tile when `mask` is false) their
// transform of the scores. A partly masked tile of a block mask with a bit slot takes
// its keep bits (which hold every mask) instead of calling mask_mod.
// kScoreShift: acc_s may leave part of the scores out, in st.shift (RowState).
template <typename Cfg>
__device__ __forceinline__ void mask_tile(float (&acc_s)[Cfg::kBlockN / 2], RowState<Cfg> &st,
                                          const Work &w,
                                          const ScoreHook<typename Cfg::Features> &hook,
                                          int key0, const int (&row)[2], int t,
                                          bool mask = true, const FjForwardParams *p = nullptr,
                                          int bit_slot = -1) {
  const int limit[2] = {mask_limit<Cfg>(w, key0, row[0], t),
                        mask_limit<Cfg>(w, key0, row[1], t)};
  if constexpr (Cfg::kScoreShift)
    st.shift[0] = st.shift[1] = 0.f;
  if constexpr (Cfg::kBlockMask) {
    if (mask && bit_slot >= 0) {
      typedef block_mask::TileBits<Cfg::kBlockN> Bits;
      unsigned bits[2][Bits::kWords];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        block_mask::load_row_bits<Cfg::kBlockM, Cfg::kBlockN>(*p, bit_slot, row[hf] - w.q0,
                                                             2 * t, bits[hf]);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        // Rows past the sequence end have no bits: masked as without the features.
        const bool past_end = row[hf] >= w.seq.seqlen_q;
#pragma unroll
        for (int nt = 0; nt < Cfg::kBlockN / 8; ++nt)
#pragma unroll
          for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
            float &v = acc_s[nt * 4 + e];
            if (past_end ? nt * 8 + (e & 1) > limit[hf]
                         : !block_mask::row_bit<Cfg::kBlockN>(bits[hf], nt, e & 1))
              v = neg_inf();
            else if (Cfg::FeatureInfo::kTransforms)
              v = hook.apply(v, row[hf], key0 + 2 * t, nt * 8 + (e & 1));
          }
      }
      return;
    }
  }
  if constexpr (!Cfg::FeatureInfo::kAny) {
    mask_groups<Cfg, 0, Cfg::kBlockN / 8>(acc_s, limit);
  } else {
    if constexpr (Cfg::FeatureInfo::kTransformFirst) {  // every score, then the mask
      // ALiBi alone on a tile on one side of the warp's 16 diagonals: one FFMA a score
      // and the rows' shift (alibi_linear). Causal: every key past a diagonal is masked
      // below, so every tile counts as before them. The votes keep the branch the warp's.
      // (alibi_side makes the same choice for kAlibiByMma's product.)
      bool linear = false, before = true;
      if constexpr (Cfg::kScoreShift) {
        if constexpr (Cfg::kCausal) {
          linear = true;
        } else {
          const int warp_row0 = row[0] - ((threadIdx.x & 31) >> 2);
          before = __all_sync(0xffffffff, key0 + Cfg::kBlockN - 1 <= warp_row0 + w.diag);
          linear = before || __all_sync(0xffffffff, key0 >= warp_row0 + 15 + w.diag);
        }
      }
      if (linear) {
        alibi_linear_tile<Cfg>(acc_s, st, hook, key0, row, t, before);
      } else {
        for_each_score<Cfg>([&](int hf, int nt, int e) {
          acc_s[nt * 4 + e] =
              hook.apply(acc_s[nt * 4 + e], row[hf], key0 + 2 * t, nt * 8 + (e & 1));
        });
      }
      if (!mask)
        return;
      for_each_score<Cfg>([&](int hf, int nt, int e) {
        if (nt * 8 + (e & 1) > limit[hf] ||
            !hook.keeps(row[hf], key0 + nt * 8 + 2 * t + (e & 1)))
          acc_s[nt * 4 + e] = neg_inf();
      });
      return;
    }
    for_each_score<Cfg>([&](int hf, int nt, int e) {
      hook_score<Cfg>(acc_s[nt * 4 + e], hook, key0, row[hf], t, nt, e, limit[hf], mask);
    });
  }
}

// The base exp_row_half takes for row half hf against the row's max `base`: with
// kScoreShift, less the part of the scores acc_s left out (RowState::shift).
template <typename Cfg>
__device__ __forceinline__ float exp_base(const RowState<Cfg> &st, int hf, float base,
                                          float scale_log2) {
  return Cfg::kScoreShift ? base - st.shift[hf] * scale_log2 : base;
}

// P = 2^(S * scale - base) in place for row half hf of this thread, and its sum.
// Groups from kLive on are masked for every row: their P is 0, without an exponential.
// With FP8 the sum runs in four independent chains, not one 4-cycle add after another
// (ncu: a third of the FP8 kernel's stalls waited on a fixed latency; +5 % at d = 128
// causal, docs/PERF.md p1; the 16-bit kernels moved within noise and keep one chain).
template <typename Cfg, int kLive = Cfg::kBlockN / 8>
__device__ __forceinline__ float exp_row_half(float (&acc_s)[Cfg::kBlockN / 2], int hf,
                                              float scale_log2, float base) {
  constexpr int kChains = Cfg::kFp8 ? 4 : 1;
  float sum[kChains] = {};
#pragma unroll
  for (int nt = kLive; nt < Cfg::kBlockN / 8; ++nt)
#pragma unroll
    for (int e = 2 * hf; e < 2 * hf + 2; ++e)
      acc_s[nt * 4 + e] = 0.f;
#pragma unroll
  for (int nt = 0; nt < kLive; ++nt)
#pragma unroll
    for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
      const float pv = fast_exp2(acc_s[nt * 4 + e] * scale_log2 - base);
      acc_s[nt * 4 + e] = pv;
      sum[(2 * nt + (e & 1)) % kChains] += pv;
    }
  if constexpr (kChains == 1)
    return sum[0];
  else
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// The largest of `init` and row half hf's values in acc_s, over the row's quad of lanes
// (all four agree), over the groups below kLive. `lane_shift` is added to this lane's
// values first: a lane's scores may leave out a shift of their own (RowState::shift,
// which differs between the quad's lanes by the distance of their columns).
template <typename Cfg, int kLive = Cfg::kBlockN / 8>
__device__ __forceinline__ float quad_row_max(const float (&acc_s)[Cfg::kBlockN / 2], int hf,
                                              float init, float lane_shift = 0.f) {
  float m = init;
#pragma unroll
  for (int nt = 0; nt < kLive; ++nt)
    m = fmaxf(m, fmaxf(acc_s[nt * 4 + 2 * hf], acc_s[nt * 4 + 2 * hf + 1]));
  if constexpr (Cfg::kScoreShift)
    m += lane_shift;
  m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 1));
  return fmaxf(m, __shfl_xor_sync(0xffffffff, m, 2));
}

// The exact online softmax of one tile: S -> P (in place, fp32), the rows' new max and
// sum, and the factor O must be scaled by before this tile's P V is added. A row's max
// moves only when the tile's exceeds it by kRescaleSlack. Each row lives in one quad of
// lanes. Groups from kLive on are masked for every row of the warp (softmax_first).
template <typename Cfg, int kLive = Cfg::kBlockN / 8>
__device__ __forceinline__ void softmax_exact(float (&acc_s)[Cfg::kBlockN / 2],
                                              RowState<Cfg> &st, float scale_log2) {
  st.rescale = false;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float mx =
        quad_row_max<Cfg, kLive>(acc_s, hf, neg_inf(), Cfg::kScoreShift ? st.shift[hf] : 0.f);
    const float old_max = st.row_max[hf];
    const float tile_max = mx * scale_log2;
    const bool moved = tile_max > old_max + kRescaleSlack;
    const float new_max = moved ? tile_max : old_max;
    st.rescale |= moved;
    // A row that has seen no key yet keeps max -inf; subtract 0 so exp2 gives 0.
    const float base = new_max == neg_inf() ? 0.f : new_max;
    st.correction[hf] = moved ? fast_exp2(old_max - base) : 1.f;
    st.row_max[hf] = new_max;
    const float sum =
        exp_row_half<Cfg, kLive>(acc_s, hf, scale_log2, exp_base(st, hf, base, scale_log2));
    st.row_sum[hf] = st.row_sum[hf] * st.correction[hf] + sum;
  }
}

// The softmax of a causal work tile's first key tile, the one that holds the diagonal.
// A warp's 16 rows meet their bounds (diagonal, sequence end) within 16 keys, so most
// warps find them all in one half of the tile: in the first half, the second half is seen
// by none of the warp's rows and takes no exponential (its P is 0); in the second half,
// the first is seen by all of them. Either way only one half's scores are compared.
// The half is chosen once per warp, into code specialised for it (branches per 8-key
// group inside one body cost more through ptxas's schedule than they saved,
// docs/PERF.md v5.11); a warp whose bounds straddle the halves returns false and takes
// the loop's exact path, which masks the whole tile.
// Causal ALiBi (kScoreShift) takes its bias here too, on the groups the warp sees: the
// tile lies before every diagonal that counts (mask_tile).
template <typename Cfg>
__device__ __forceinline__ bool softmax_first(float (&acc_s)[Cfg::kBlockN / 2],
                                              RowState<Cfg> &st, float scale_log2,
                                              const Work &w,
                                              const ScoreHook<typename Cfg::Features> &hook,
                                              int key0, const int (&row)[2], int t,
                                              int warp_row0) {
  constexpr int NT = Cfg::kBlockN / 8, kHalf = NT / 2;
  // The last key the warp's first and last rows see, counted from key0.
  const int lo = mask_limit<Cfg>(w, key0, warp_row0, 0);
  const int hi = mask_limit<Cfg>(w, key0, warp_row0 + 15, 0);
  const int limit[2] = {mask_limit<Cfg>(w, key0, row[0], t),
                        mask_limit<Cfg>(w, key0, row[1], t)};
  // Each test is the same for the whole warp; the votes tell ptxas so, so that the
  // shuffles below need no path for a diverged warp and the loop's stage and
  // descriptor arithmetic stays on the uniform datapath (without them the issue of
  // S and P V took twice the instructions and long lengths lost 2 to 4 %).
  if (__all_sync(0xffffffff, hi < 8 * kHalf)) {
    if constexpr (Cfg::kScoreShift)
      alibi_linear_tile<Cfg, 0, kHalf>(acc_s, st, hook, key0, row, t, true);
    mask_groups<Cfg, 0, kHalf>(acc_s, limit);
    softmax_exact<Cfg, kHalf>(acc_s, st, scale_log2);
    return true;
  }
  if (__all_sync(0xffffffff, lo >= 8 * kHalf - 1)) {
    if constexpr (Cfg::kScoreShift)
      alibi_linear_tile<Cfg>(acc_s, st, hook, key0, row, t, true);
    mask_groups<Cfg, kHalf, NT>(acc_s, limit);
    softmax_exact<Cfg>(acc_s, st, scale_log2);
    return true;
  }
  return false;
}

// A thread's share of a row may sum to this much against the row's running max before
// the row is rebased (softmax_tile): every P then stays below 2^15, inside fp16's range.
// FP8: below 2^8, inside e4m3's (448), as the exact path's slack keeps it.
constexpr float kFastSumBound = 32768.f;
constexpr float kFastSumBoundFp8 = 256.f;
// A row's largest P beyond this (or infinite) means its scores rose by 64 or more
// (log2): too far to rebase P, which may have overflowed. The warp then computes its
// S again (rescore_tile) and takes the exact path.
constexpr float kRebaseBound = 18446744073709551616.f;  // 2^64

// Rows whose largest P mp passed 2^kRescaleSlack take a new max, a power of two above
// the old (the exponent of mp), so that rescaling P, the sum and O is exact.
template <typename Cfg>
__device__ __forceinline__ void rebase_rows(float (&acc_s)[Cfg::kBlockN / 2],
                                            RowState<Cfg> &st, const float (&sum)[2],
                                            const float (&mp)[2]) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    // 2^shift <= mp < 2^(shift + 1)
    const int shift =
        mp[hf] > kRescaleSlackFactor ? (int)(__float_as_uint(mp[hf]) >> 23) - 127 : 0;
    const float factor = __uint_as_float((u32)(127 - shift) << 23);  // 2^-shift
#pragma unroll
    for (int nt = 0; nt < Cfg::kBlockN / 8; ++nt)
#pragma unroll
      for (int e = 2 * hf; e < 2 * hf + 2; ++e)
        acc_s[nt * 4 + e] *= factor;
    st.rescale |= shift > 0;
    st.correction[hf] = factor;
    st.row_max[hf] += (float)shift;
    st.row_sum[hf] = (st.row_sum[hf] + sum[hf]) * factor;
  }
}

// What softmax_tile leaves to do once the previous P V is out of the registers.
enum class SoftmaxLeft { kNothing, kExact, kRescoreAndExact };

// Online softmax of one tile: S -> P (in place, fp32), the rows' max and sum, and the
// factor O must be scaled by (see softmax_exact).
// Once every row of a warp has a max, P is taken against it as it stands, without the
// tile's own max. That max cost one FMNMX per score and the shuffles and bookkeeping of
// every row, and after a row's first tile it rarely moves (docs/PERF.md, v5.8: the
// consumers' instruction count sets the pace). A score that rose shows in the row sums
// instead (a thread's share above kFastSumBound, or not finite), and only then does the
// warp look at its rows' largest P: rows that rose are rebased by a power of two
// (rebase_rows), unless some P went past kRebaseBound, which P cannot recover from.
// The exact path (a warp's first tile, and a tile that needs the mask, which the caller
// masks there: the mask's code then sits off the hot path, +1 to 2 % at short causal
// lengths, docs/PERF.md v5.11) and that rare case are left to the caller, to do after
// the wait on the previous P V, where registers are free: one copy of each in the code.
// Nothing is changed then. Tiles without kFastSoftmax take the exact path here (masked
// before).
template <typename Cfg>
__device__ __forceinline__ SoftmaxLeft softmax_tile(float (&acc_s)[Cfg::kBlockN / 2],
                                                    RowState<Cfg> &st, float scale_log2,
                                                    bool needs_mask) {
  if (!Cfg::kFastSoftmax) {  // as before: the exact softmax, overlapping the P V in flight
    softmax_exact<Cfg>(acc_s, st, scale_log2);
    return SoftmaxLeft::kNothing;
  }
  if (needs_mask ||
      !__all_sync(0xffffffff, st.row_max[0] != neg_inf() && st.row_max[1] != neg_inf()))
    return SoftmaxLeft::kExact;
  st.rescale = false;
  float sum[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
    sum[hf] = exp_row_half<Cfg>(acc_s, hf, scale_log2,
                                exp_base(st, hf, st.row_max[hf], scale_log2));
  // NaN fails the test too (scores from NaN inputs) and is rebased, staying NaN.
  constexpr float kBound = Cfg::kFp8 ? kFastSumBoundFp8 : kFastSumBound;
  if (__builtin_expect(__any_sync(0xffffffff, !(sum[0] <= kBound) || !(sum[1] <= kBound)),
                       0)) {
    // The largest P of each row (P >= 0).
    const float mp[2] = {quad_row_max<Cfg>(acc_s, 0, 0.f), quad_row_max<Cfg>(acc_s, 1, 0.f)};
    if (__any_sync(0xffffffff, !(mp[0] <= kRebaseBound) || !(mp[1] <= kRebaseBound)))
      return SoftmaxLeft::kRescoreAndExact;
    rebase_rows<Cfg>(acc_s, st, sum, mp);
    return SoftmaxLeft::kNothing;
  }
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    st.correction[hf] = 1.f;
    st.row_sum[hf] += sum[hf];
  }
  return SoftmaxLeft::kNothing;
}

// rescore_tile for FP8 inputs: one score at a time, in plain loops (no features).
template <typename Cfg>
__device__ __forceinline__ void rescore_tile_fp8(float (&acc_s)[Cfg::kBlockN / 2],
                                                 const FjForwardParams &p, const Work &w,
                                                 int key0, const int (&row)[2], int t) {
  const u8 *q = (const u8 *)p.q + tensor_base(w.seq.q_offset, w.b, w.h, p.q_batch_stride,
                                               p.q_row_stride, p.q_head_stride);
  const u8 *k = (const u8 *)p.k + tensor_base(w.seq.k_offset, w.b, w.h_kv, p.k_batch_stride,
                                               p.k_row_stride, p.k_head_stride);
  const int limit[2] = {mask_limit<Cfg>(w, key0, row[0], t),
                        mask_limit<Cfg>(w, key0, row[1], t)};
  float scores[Cfg::kBlockN / 2];
#pragma unroll 1
  for (int i = 0; i < Cfg::kBlockN / 2; ++i) {
    const int nt = i / 4, e = i % 4, r = row[e >> 1];
    const int key = key0 + nt * 8 + 2 * t + (e & 1);
    float sc = 0.f;
    if (r < w.seq.seqlen_q && key < w.seq.seqlen_k) {
      const u8 *qr = q + (long long)r * p.q_row_stride, *kr = k + (long long)key * p.k_row_stride;
#pragma unroll 1
      for (int d = 0; d < Cfg::kHeadDim; ++d)
        sc += e4m3_to_float(qr[d]) * e4m3_to_float(kr[d]);
    }
    mask_score(sc, nt, e, limit[e >> 1]);
    scores[i] = sc;
  }
#pragma unroll
  for (int i = 0; i < Cfg::kBlockN / 2; ++i)
    acc_s[i] = scores[i];
}

// S of a tile again, masked as mask_tile masks it, for the warp's 16 rows, from Q and K
// in global memory (softmax_tile's rare case: scores that rose beyond what rebasing P can
// recover). With mma.sync, whose m16n8 accumulator is laid out as a warp's share of the
// wgmma one, in loops that are not unrolled: small code, off the hot path (unrolled, it
// cost 0.2 to 0.6 s of NVRTC time per kernel, docs/PERF.md v5.10). Rows past the
// sequence end score 0, as the zero-filled rows of Q do in S = Q K^T. Strides are
// multiples of 8 elements (the tensor maps need them), so pairs load as one 32-bit word.
template <typename Cfg>
__device__ __forceinline__ void rescore_tile_16(float (&acc_s)[Cfg::kBlockN / 2],
                                                const FjForwardParams &p, const Work &w,
                                                const ScoreHook<typename Cfg::Features> &hook,
                                                int key0, const int (&row)[2], int t) {
  typedef typename Cfg::Element T;
  const int g = (threadIdx.x & 31) >> 2;
  const u16 *q = (const u16 *)p.q + tensor_base(w.seq.q_offset, w.b, w.h, p.q_batch_stride,
                                                 p.q_row_stride, p.q_head_stride) + 2 * t;
  const u16 *k = (const u16 *)p.k + tensor_base(w.seq.k_offset, w.b, w.h_kv,
                                                 p.k_batch_stride, p.k_row_stride,
                                                 p.k_head_stride) + 2 * t;
  const u32 *q_lo = (const u32 *)(q + (long long)row[0] * p.q_row_stride);
  const u32 *q_hi = (const u32 *)(q + (long long)row[1] * p.q_row_stride);
  const bool has_lo = row[0] < w.seq.seqlen_q, has_hi = row[1] < w.seq.seqlen_q;
  // One 8-key column group at a time, each a short loop over head_dim. The groups' loop
  // is not unrolled either: its scores go through local memory (a register array needs
  // constant indices), so the code holds one copy of it instead of one per group.
  float scores[Cfg::kBlockN / 2];
  const int limit[2] = {mask_limit<Cfg>(w, key0, row[0], t),
                        mask_limit<Cfg>(w, key0, row[1], t)};
#pragma unroll 1
  for (int nt = 0; nt < Cfg::kBlockN / 8; ++nt) {
    const int key = key0 + nt * 8 + g;
    const u32 *k_row = (const u32 *)(k + (long long)key * p.k_row_stride);
    const bool has_key = key < w.seq.seqlen_k;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
    for (int d0 = 0; d0 < Cfg::kHeadDim; d0 += 16) {
      const bool upper = d0 + 8 < Cfg::kHeadDim;  // the step's dims 8..15 exist
      const int wd = d0 / 2;                      // in 32-bit words
      u32 a[4];
      a[0] = has_lo ? q_lo[wd] : 0u;
      a[1] = has_hi ? q_hi[wd] : 0u;
      a[2] = has_lo && upper ? q_lo[wd + 4] : 0u;
      a[3] = has_hi && upper ? q_hi[wd + 4] : 0u;
      const u32 b0 = has_key ? k_row[wd] : 0u, b1 = has_key && upper ? k_row[wd + 4] : 0u;
      mma_16816<T>(d, a, b0, b1);
    }
    // mask_tile's mask (and the features' transform).
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      scores[nt * 4 + e] = d[e];
      if constexpr (Cfg::FeatureInfo::kAny)
        hook_score<Cfg>(scores[nt * 4 + e], hook, key0, row[e >> 1], t, nt, e,
                        limit[e >> 1], true);
      else
        mask_score(scores[nt * 4 + e], nt, e, limit[e >> 1]);
    }
  }
#pragma unroll
  for (int i = 0; i < Cfg::kBlockN / 2; ++i)
    acc_s[i] = scores[i];
}
// S whole (hook.apply): nothing is left out of it (RowState::shift).
template <typename Cfg>
__device__ __forceinline__ void rescore_tile(float (&acc_s)[Cfg::kBlockN / 2],
                                             RowState<Cfg> &st, const FjForwardParams &p,
                                             const Work &w,
                                             const ScoreHook<typename Cfg::Features> &hook,
                                             int key0, const int (&row)[2], int t) {
  if constexpr (Cfg::kScoreShift)
    st.shift[0] = st.shift[1] = 0.f;
  if constexpr (Cfg::kFp8)
    rescore_tile_fp8<Cfg>(acc_s, p, w, key0, row, t);
  else
    rescore_tile_16<Cfg>(acc_s, p, w, hook, key0, row, t);
}
template <typename Cfg> __device__ __forceinline__ void rescale_o(RowState<Cfg> &st) {
  if (__any_sync(0xffffffff, st.rescale)) {
#pragma unroll
    for (int i = 0; i < Cfg::kDvPad / 2; ++i)
      st.acc_o[i] *= st.correction[(i >> 1) & 1];
  }
}

// P in the A-fragment layout: 16 keys = two 8-key column groups of S. FP8: 32 keys =
// four groups, each register four keys of one row in the order V^T holds them
// (fj_fp8.cuh's permuted_key): register r holds groups 2 (r / 2) and 2 (r / 2) + 1 of
// row g (r even) or g + 8 (r odd).
template <typename Cfg>
__device__ __forceinline__ void pack_p(u32 (&p_frag)[Cfg::kPFrags][4],
                                       const float (&acc_s)[Cfg::kBlockN / 2]) {
  typedef typename Cfg::Element T;
  if constexpr (Cfg::kFp8) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kPFrags; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float *s = &acc_s[16 * kk + 8 * (r >> 1) + 2 * (r & 1)];
        p_frag[kk][r] = pack4_e4m3(s[0], s[1], s[4], s[5]);
      }
    return;
  }
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      p_frag[kk][r] = pack2<T>(acc_s[8 * kk + 2 * r], acc_s[8 * kk + 2 * r + 1]);
}

// Ping-pong between two consumer warpgroups: each issues its products only in its
// turn, so one warpgroup's GEMMs run while the other does its softmax.
template <typename Cfg> __device__ __forceinline__ void wait_turn(int consumer) {
  if (Cfg::kPingPong)
    named_sync(1 + consumer, 256);
}
template <typename Cfg> __device__ __forceinline__ void pass_turn(int consumer) {
  if (Cfg::kPingPong)
    named_arrive(1 + (consumer ^ 1), 256);
}

// The whole sum of row half hf (a row lives in one quad of lanes) and, by lane t == 0
// of rows that exist, its log-sum-exp.
template <typename Cfg>
__device__ __forceinline__ float finish_row(const FjForwardParams &p, const Work &w,
                                            const RowState<Cfg> &st, int hf, int row, int t) {
  float sum = st.row_sum[hf];
  sum += __shfl_xor_sync(0xffffffff, sum, 1);
  sum += __shfl_xor_sync(0xffffffff, sum, 2);
  if (p.lse && t == 0 && row < w.seq.seqlen_q) {
    // max is in base 2 of the scaled scores: ln-sum-exp = max * ln 2 + ln(sum).
    const float lse =
        sum > 0.f ? st.row_max[hf] * 0.69314718055994531f + __logf(sum) : neg_inf();
    p.lse[lse_index(p, w.seq, w.h, row)] = lse;
  }
  return sum;
}

// Normalises and stores this thread's rows (4-byte stores: a quad writes 16 contiguous
// bytes per 8-column group), and the log-sum-exp.
template <typename Cfg>
__device__ __forceinline__ void store_rows(const FjForwardParams &p, const Work &w,
                                           RowState<Cfg> &st, const int (&row)[2], int t) {
  typedef typename Cfg::OutElement T;
  const float out_scale = Cfg::kFp8 ? fp8::descale(p.v_descale, p, w.b, w.h_kv) : 1.f;
  u16 *o = (u16 *)p.o + tensor_base(w.seq.q_offset, w.b, w.h, p.o_batch_stride,
                                     p.o_row_stride, p.o_head_stride);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float sum = finish_row<Cfg>(p, w, st, hf, row[hf], t);
    const float inv = sum > 0.f ? out_scale / sum : 0.f;
    if (row[hf] >= w.seq.seqlen_q)
      continue;
    u16 *o_row = o + (long long)row[hf] * p.o_row_stride;
#pragma unroll
    for (int ot = 0; ot < Cfg::kDvPad / 8; ++ot) {
      if (ot * 8 < Cfg::kHeadDimV) {
        const u32 packed =
            pack2<T>(st.acc_o[ot * 4 + 2 * hf] * inv, st.acc_o[ot * 4 + 2 * hf + 1] * inv);
        *(u32 *)(o_row + ot * 8 + 2 * t) = packed;
      }
    }
  }
}

// O staged in shared memory (kStageO): row r of a warpgroup's 64 starts at `stage` + r
// rows of the tile's Q buffer, laid out as Q is (panels of kSwizzleD-byte rows), with the
// 16-byte chunks of a row XOR-permuted the way TMA's 64- and 128-byte swizzles permute
// them. So both the 4-byte writes (8 rows, one chunk each) and the 16-byte reads (one
// row, 8 chunks) are free of bank conflicts, and a TMA store reads the rows as they are.
template <typename Cfg>
__device__ __forceinline__ u32 staged_chunk(u32 stage, int r, int chunk) {
  constexpr int kChunksPerPanel = Cfg::kSwizzleD / 16;
  constexpr int kRowsPerLine = 128 / Cfg::kSwizzleD;  // 128-byte bank lines
  const int swizzled = (chunk % kChunksPerPanel) ^ ((r / kRowsPerLine) % kChunksPerPanel);
  return stage + (chunk / kChunksPerPanel) * (Cfg::kBlockM * Cfg::kSwizzleD) +
         r * Cfg::kSwizzleD + swizzled * 16;
}
// The first half of store_rows through shared memory: this thread's normalised rows into
// the stage, and the log-sum-exp.
template <typename Cfg>
__device__ __forceinline__ void stage_rows(const FjForwardParams &p, const Work &w,
                                           RowState<Cfg> &st, int wg_row0, u32 stage) {
  typedef typename Cfg::OutElement T;
  const int tid = threadIdx.x & 127, lane = tid & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = (tid >> 5) * 16 + g + 8 * hf;  // row within the warpgroup's 64
    const float sum = finish_row<Cfg>(p, w, st, hf, w.q0 + wg_row0 + r, t);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int ot = 0; ot < Cfg::kDvPad / 8; ++ot)
      st_shared_u32(staged_chunk<Cfg>(stage, r, ot) + 4 * t,
                    pack2<T>(st.acc_o[ot * 4 + 2 * hf] * inv,
                             st.acc_o[ot * 4 + 2 * hf + 1] * inv));
  }
}

// The second half by TMA: one thread stores the warpgroup's 64 rows, one box per panel
// (rows past the sequence end fall outside the tensor map and are not written). The
// consumers go on at once; the Q buffer is released once the store has read it
// (settle_o_store).
template <typename Cfg>
__device__ __forceinline__ void tma_store_staged(const Work &w, const TensorMap &tm_o,
                                                 int wg_row0, u32 stage) {
  if ((threadIdx.x & 127) == 0) {
#pragma unroll
    for (int pn = 0; pn < Cfg::kDvPad / Cfg::kPanelDv; ++pn)
      tma_store_4d(tm_o, stage + pn * Cfg::kBlockM * Cfg::kSwizzleD, pn * Cfg::kPanelDv,
                   w.q0 + wg_row0, w.h, w.b);
    bulk_commit();
  }
}

// The second half without TMA (see kStoreOByTma): the warpgroup's threads copy its
// staged rows out in 16-byte pieces, whole 128-byte lines per 8 threads, then each warp
// releases the Q buffer.
template <typename Cfg>
__device__ __forceinline__ void copy_out_staged(const FjForwardParams &p, const Work &w,
                                                int wg_row0, u32 stage, u32 q_empty) {
  constexpr int kChunksPerRow = Cfg::kDvPad / 8;
  const int tid = threadIdx.x & 127;
  u16 *o = (u16 *)p.o + tensor_base(w.seq.q_offset, w.b, w.h, p.o_batch_stride,
                                     p.o_row_stride, p.o_head_stride);
#pragma unroll 4
  for (int k = 0; k < 64 * kChunksPerRow / 128; ++k) {
    const int idx = k * 128 + tid, r = idx / kChunksPerRow, chunk = idx % kChunksPerRow;
    const uint4 v = ld_shared_v4(staged_chunk<Cfg>(stage, r, chunk));
    const int row = w.q0 + wg_row0 + r;
    if (row < w.seq.seqlen_q && chunk * 8 < Cfg::kHeadDimV)
      st_global_v4(o + (long long)row * p.o_row_stride + chunk * 8, v);
  }
  // The producer may load the next Q here once every consumer warp has read its part.
  fence_proxy_async_smem();
  __syncwarp();
  if ((tid & 31) == 0)
    mbar_arrive(q_empty);
}

// A warpgroup whose 64 rows all lie past the sequence end (in the last query tile of a
// length that is not a multiple of kBlockM) has nothing to compute or store. It keeps
// the pipeline's count all the same: it frees each K and V stage once it is loaded (an
// arrival before the load could count towards the stage's previous round). Only three-
// consumer kernels do this (kPassEmptyWarpgroups), which take no ping-pong turns.
template <typename Cfg>
__device__ __forceinline__ void pass_over_tile(const SmemLayout<Cfg> &sm, int kv_iter,
                                               int n_blocks) {
  static_assert(!Cfg::kPingPong, "with ping-pong it would have to take the loop's turns");
  const bool leader = (threadIdx.x & 31) == 0;  // one arrival per warp, as release's
  for (int i = 0; i < n_blocks; ++i) {
    const int it = kv_iter + i, s = it % Cfg::kStages;
    const u32 parity = (it / Cfg::kStages) & 1;
    mbar_wait(sm.full_k(s), parity);
    mbar_wait(sm.full_v(s), parity);
    if (leader) {
      mbar_arrive(sm.empty_k(s));
      mbar_arrive(sm.empty_v(s));
    }
  }
}

// A count of 0..15 that is the same in every thread of the warp, rebuilt from votes:
// ptxas cannot tell that a value derived from the warpgroup's index is uniform, and keeps
// it and all that follows from it (the loop's stages, barriers, descriptors) off the
// uniform datapath; from votes it can (with the values as computed, or passed through
// __reduce_max_sync, bm192 tiles spilled 20 to 500 bytes).
__device__ __forceinline__ int warp_uniform_count(int v) {
  return (__all_sync(0xffffffff, v & 1) ? 1 : 0) | (__all_sync(0xffffffff, v & 2) ? 2 : 0) |
         (__all_sync(0xffffffff, v & 4) ? 4 : 0) | (__all_sync(0xffffffff, v & 8) ? 8 : 0);
}

// kNarrowWalks: narrows the work tile's walk w to the key tiles that this warpgroup's rows
// (wg_row0 .. wg_row0 + 63 of the tile) see by the causal bound and the window, and
// returns how many tiles of the walk come before them (the walk runs last to first), to
// pass over; w.n_first grows by those after them. A warpgroup without rows, or whose
// rows see none of the walk's tiles, keeps the whole walk and masks it, as without
// kNarrowWalks (a walk never narrows to nothing: an empty walk means that no Q was
// loaded). Each count is at most (kBlockM - 64) / kBlockN + 1 <= 9 tiles.
template <typename Cfg> __device__ __forceinline__ int narrow_walk(Work &w, int wg_row0) {
  static_assert((Cfg::kBlockM - 64) / Cfg::kBlockN + 1 <= 15, "warp_uniform_count");
  const int row_lo = w.q0 + wg_row0, row_hi = imin(row_lo + 63, w.seq.seqlen_q - 1);
  int first = w.n_first, end = w.n_first + w.n_blocks;
  clip_key_tiles<Cfg>(row_lo, row_hi, w.diag, first, end);
  const bool keep = w.n_blocks == 0 || row_lo > row_hi || end <= first;
  const int head = warp_uniform_count(keep ? 0 : w.n_first + w.n_blocks - end);
  const int tail = warp_uniform_count(keep ? 0 : first - w.n_first);
  w.n_first += tail;
  w.n_blocks -= head + tail;
  return head;
}

// Consumer warpgroup `consumer` (0-based): rows q0 + 64 * consumer .. + 63 of each work
// tile. With kOverlap, the softmax of key tile i runs while the tensor cores add
// P(i-1) V(i-1): S(i) and P(i-1)V(i) are issued together and only S(i) is awaited.
template <typename Cfg>
__device__ __forceinline__ void consume(const FjForwardParams &p, const SmemLayout<Cfg> &sm,
                                        const TensorMap &tm_o, bool o_by_tma, int consumer) {
  constexpr int NT = Cfg::kBlockN / 8;
  const int lane = threadIdx.x & 31, warp_in_wg = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int wg_row0 = consumer * 64;
  auto release = [&](u32 bar) {
    if (lane == 0)
      mbar_arrive(bar);
  };
  // The Q buffer the last tile's TMA store of O still reads. The overlapped loop releases
  // it once the next tile's first S = Q K^T is issued (its latency hides the wait; +1 %
  // over releasing at once, docs/PERF.md v5.2); the loop without overlap at once (there
  // the test would sit in every iteration: -2 % at d = 64).
  bool o_store_pending = false;
  u32 o_store_q_empty = 0;
  auto settle_o_store = [&]() {
    if (o_store_pending && (threadIdx.x & 127) == 0) {
      bulk_wait_read();
      mbar_arrive_count(o_store_q_empty, 4);  // for the warpgroup's four warps
    }
    o_store_pending = false;
  };

  // The first consumer takes the first turn.
  if (Cfg::kPingPong && consumer == 1)
    named_arrive(1, 256);

  int q_round = 0, kv_iter = 0;
  for (;;) {
    // The producer's next work tile (see produce).
    mbar_wait(sm.q_full(q_round), sm.q_parity(q_round));
    const TileId id = TileId::read(sm.tile(q_round));
    int listed_blocks = 0;
    if constexpr (Cfg::kBlockMask)
      listed_blocks = (int)ld_shared_u32(sm.tile_blocks(q_round));
    mbar_arrive(sm.tile_read(q_round));
    if (id.q0 < 0)
      break;
    Work w = work_of<Cfg>(p, id);
    const bool block_masked = Cfg::kBlockMask && p.block_counts != nullptr;
    if (block_masked)
      w.n_blocks = listed_blocks;
    // kNarrowWalks: the tiles at the walk's start and end this warpgroup passes over
    // (narrow_walk); w keeps its own.
    int skip_head = 0, skip_tail = 0;
    if constexpr (Cfg::kNarrowWalks) {
      const int n_first = w.n_first;
      skip_head = narrow_walk<Cfg>(w, wg_row0);
      skip_tail = w.n_first - n_first;
    }
    const int row[2] = {w.q0 + wg_row0 + warp_in_wg * 16 + g,
                        w.q0 + wg_row0 + warp_in_wg * 16 + g + 8};
    RowState<Cfg> st;
#pragma unroll
    for (int i = 0; i < Cfg::kDvPad / 2; ++i)
      st.acc_o[i] = 0.f;
    st.row_max[0] = st.row_max[1] = neg_inf();
    st.row_sum[0] = st.row_sum[1] = 0.f;
    if (w.n_blocks == 0) {  // rows that see no key: O = 0, LSE = -inf
      // No Q was loaded; the slot is read. The last tile's O store is settled first: its
      // buffer is the one the tile after this one takes.
      settle_o_store();
      __syncwarp();
      release(sm.q_empty(q_round++));
      store_rows<Cfg>(p, w, st, row, t);
      continue;
    }
    // Rows that do not exist (the vote tells ptxas the branch is the warp's, see
    // softmax_first): Q is not read, O and the log-sum-exp not written.
    if constexpr (Cfg::kPassEmptyWarpgroups) {
      if (__all_sync(0xffffffff, w.q0 + wg_row0 >= w.seq.seqlen_q)) {
        settle_o_store();
        __syncwarp();
        release(sm.q_empty(q_round++));
        pass_over_tile<Cfg>(sm, kv_iter, w.n_blocks);
        kv_iter += w.n_blocks;
        continue;
      }
    }
    if constexpr (Cfg::kNarrowWalks) {
      pass_over_tile<Cfg>(sm, kv_iter, skip_head);
      kv_iter += skip_head;
    }
    const u32 q_rows = sm.q(q_round) + wg_row0 * Cfg::kSwizzleD;
    const int q_this = q_round++;
    const ScoreHook<typename Cfg::Features> hook(p, w.b, w.h, w.seq);
    // kAlibiByMma: m = slope / softmax_scale (hook.alibi_slope is its negative).
    const AlibiBias alibi(Cfg::kAlibiByMma ? -hook.alibi_slope : 0.f, Cfg::kAlibiByMma ? t : 1);
    const int warp_row0 = w.q0 + wg_row0 + warp_in_wg * 16;
    float score_scale = ScoreHook<typename Cfg::Features>::softmax_scale_log2(p);
    if constexpr (Cfg::kFp8)
      score_scale *= fp8::descale(p.q_descale, p, w.b, w.h_kv) *
                     fp8::descale(p.k_descale, p, w.b, w.h_kv);
    // The first key of iteration i's tile (in ring stage s), and whether it needs the
    // features' mask: from the stage's block-mask entry, read before the stage is
    // released, else from the tile walk (last tile first).
    auto key_tile = [&](int i, int s, bool &partial, int &bit_slot) {
      partial = true;
      bit_slot = -1;
      if constexpr (Cfg::kBlockMask) {
        if (block_masked) {
          const u32 entry = ld_shared_u32(sm.stage_entry(s));
          partial = block_mask::entry_partial(entry);
          bit_slot = (int)ld_shared_u32(sm.stage_entry(s) + 4);
          return block_mask::entry_tile(entry) * Cfg::kBlockN;
        }
      }
      return work_tile<Cfg>(w, i) * Cfg::kBlockN;
    };

    float acc_s[NT * 4];
    u32 p_frag[Cfg::kPFrags][4];
    // S = Q K^T of the key tile in ring stage s, issued; with kAlibiByMma, then the bias
    // product, whose A (bias_a) prepare_s sets for iteration i's tile before the fence
    // (written after it, ptxas fences each wgmma again, C7519).
    u32 bias_a[4];
    auto prepare_s = [&](int i) {
      if constexpr (Cfg::kAlibiByMma)
        alibi.fragment(alibi_side<Cfg>(w, work_tile<Cfg>(w, i) * Cfg::kBlockN, warp_row0),
                       bias_a);
    };
    auto issue_s = [&](int s) {
      qk_product<Cfg>(acc_s, q_rows, sm.k + s * Cfg::kKBytes);
      if constexpr (Cfg::kAlibiByMma)
        alibi_product<Cfg>(acc_s, bias_a, sm.bias);
    };
    // S = Q K^T of key tile i on its own, then its mask and softmax (P left in acc_s).
    auto score_alone = [&](int i) {
      const int it = kv_iter + i, s = it % Cfg::kStages;
      prepare_s(i);
      mbar_wait(sm.full_k(s), (it / Cfg::kStages) & 1);
      wait_turn<Cfg>(consumer);
      wgmma_fence();
      issue_s(s);
      wgmma_commit();
      pass_turn<Cfg>(consumer);
      wgmma_wait<0>();
      pin_registers(acc_s);
      bool partial;
      int bit_slot;
      const int key0 = key_tile(i, s, partial, bit_slot);
      release(sm.empty_k(s));
      if (!Cfg::kStageO && i == w.n_blocks - 1)
        release(sm.q_empty(q_this));
      const bool needs_mask = tile_needs_mask<Cfg>(w, hook, key0, wg_row0, partial);
      if (Cfg::FeatureInfo::kTransforms || needs_mask)
        mask_tile<Cfg>(acc_s, st, w, hook, key0, row, t, needs_mask, &p, bit_slot);
      softmax_exact<Cfg>(acc_s, st, score_scale);  // no overlap: never kFastSoftmax
    };
    // O += P V of key tile i on its own, P packed from acc_s.
    auto pv_alone = [&](int i) {
      const int it = kv_iter + i, s = it % Cfg::kStages;
      pack_p<Cfg>(p_frag, acc_s);
      mbar_wait(sm.full_v(s), (it / Cfg::kStages) & 1);
      wait_turn<Cfg>(consumer);
      wgmma_fence();
      pv_product<Cfg>(st.acc_o, p_frag, sm.v + s * Cfg::kVBytes);
      wgmma_commit();
      pass_turn<Cfg>(consumer);
      wgmma_wait<0>();
      pin_registers(st.acc_o);
      release(sm.empty_v(s));
    };
    if constexpr (Cfg::kOverlap) {
      {  // S(0) on its own
        const int s = kv_iter % Cfg::kStages;
        prepare_s(0);
        mbar_wait(sm.full_k(s), (kv_iter / Cfg::kStages) & 1);
        wait_turn<Cfg>(consumer);
        wgmma_fence();
        issue_s(s);
        wgmma_commit();
        pass_turn<Cfg>(consumer);
        settle_o_store();
        wgmma_wait<0>();
      }
      // Causal: the first tile holds the diagonal. A warp whose bounds lie in one half
      // of it takes its softmax here (softmax_first), and the loop's first iteration
      // only issues S(1) and P(0) V(0). No P V is in flight yet and O is still 0:
      // nothing to rescale.
      int first = 0;
      if constexpr (Cfg::kFirstTileSoftmax) {
        const int key0 = (w.n_first + w.n_blocks - 1) * Cfg::kBlockN;
        pin_registers(acc_s);  // S(0), after the wait
        if (softmax_first<Cfg>(acc_s, st, score_scale, w, hook, key0, row, t,
                               w.q0 + wg_row0 + warp_in_wg * 16)) {
          release(sm.empty_k(kv_iter % Cfg::kStages));
          if (!Cfg::kStageO && w.n_blocks == 1)
            release(sm.q_empty(q_this));
          first = 1;
        }
      }
      // Iteration i: the softmax of key tile i (while P(i-1) V(i-1) runs), then S(i+1)
      // and P(i) V(i) issued together. Rotated so that the mask and softmax appear once
      // in the code (a peeled first tile doubled them, and the compile time with them).
      for (int i = 0;; ++i) {
        const int it = kv_iter + i;
        const int s = it % Cfg::kStages, sp = (it + Cfg::kStages - 1) % Cfg::kStages;
        if (!Cfg::kFirstTileSoftmax || i >= first) {
          pin_registers(acc_s);
          bool partial;
          int bit_slot;
          const int key0 = key_tile(i, s, partial, bit_slot);
          release(sm.empty_k(s));
          if (!Cfg::kStageO && i == w.n_blocks - 1)
            release(sm.q_empty(q_this));
          // With the fast softmax a tile that needs the mask takes the exact path and is
          // masked there (see softmax_tile), unless features transform the scores: every
          // tile then goes through the hook here, masked or not.
          const bool needs_mask = tile_needs_mask<Cfg>(w, hook, key0, wg_row0, partial);
          if (Cfg::FeatureInfo::kTransforms || (!Cfg::kFastSoftmax && needs_mask))
            mask_tile<Cfg>(acc_s, st, w, hook, key0, row, t, needs_mask, &p, bit_slot);
          // Two kinds of masked tile are masked here, while the previous P V runs, and
          // keep the fast softmax: a window's left edge, and a partly masked tile with keep
          // bits (with a block mask at short lengths nearly every tile is partial, and the
          // exact path would serialise each after its P V).
          bool masked_now = false;
          if constexpr (Cfg::kLeftEdgeInLoop) {
            if (needs_mask && only_left_edge<Cfg>(w, hook, key0, wg_row0)) {
              mask_left_edge<Cfg>(acc_s, w, key0, row, t);
              masked_now = true;
            }
          }
          if constexpr (Cfg::kBlockMask && Cfg::kFastSoftmax &&
                        !Cfg::FeatureInfo::kTransforms) {
            if (needs_mask && bit_slot >= 0) {
              mask_tile<Cfg>(acc_s, st, w, hook, key0, row, t, true, &p, bit_slot);
              masked_now = true;
            }
          }
          const bool exact =
              (needs_mask && !masked_now) ||
              rises_towards_diagonal<Cfg>(w, key0, w.q0 + wg_row0 + warp_in_wg * 16);
          const SoftmaxLeft left = softmax_tile<Cfg>(acc_s, st, score_scale, exact);
          wgmma_wait<0>();
          pin_registers(st.acc_o);
          if (i > 0)
            release(sm.empty_v(sp));
          if (left != SoftmaxLeft::kNothing) {
            if (__builtin_expect(left == SoftmaxLeft::kRescoreAndExact, 0))
              rescore_tile<Cfg>(acc_s, st, p, w, hook, key0, row, t);  // masks as it scores
            else if (needs_mask && !Cfg::FeatureInfo::kTransforms && !masked_now)
              mask_tile<Cfg>(acc_s, st, w, hook, key0, row, t, true, &p, bit_slot);
            softmax_exact<Cfg>(acc_s, st, score_scale);
          }
          rescale_o<Cfg>(st);
        }
        if (i == w.n_blocks - 1)
          break;
        const int in = it + 1, sn = in % Cfg::kStages;
        pack_p<Cfg>(p_frag, acc_s);
        prepare_s(i + 1);
        mbar_wait(sm.full_k(sn), (in / Cfg::kStages) & 1);
        mbar_wait(sm.full_v(s), (it / Cfg::kStages) & 1);
        wait_turn<Cfg>(consumer);
        wgmma_fence();
        issue_s(sn);
        wgmma_commit();
        pv_product<Cfg>(st.acc_o, p_frag, sm.v + s * Cfg::kVBytes);
        wgmma_commit();
        pass_turn<Cfg>(consumer);
        wgmma_wait<1>();  // S(i + 1) is complete; P(i) V(i) may still run
      }
      pv_alone(w.n_blocks - 1);
    } else {
      // Registers too tight to hold S and P at once: one key tile at a time.
      for (int i = 0; i < w.n_blocks; ++i) {
        score_alone(i);
        rescale_o<Cfg>(st);
        pv_alone(i);
      }
    }
    kv_iter += w.n_blocks;
    if constexpr (Cfg::kStageO) {
      stage_rows<Cfg>(p, w, st, wg_row0, q_rows);
      if (o_by_tma)
        fence_proxy_async_smem();     // the rows, before the TMA store reads them
      named_sync(3 + consumer, 128);  // the warpgroup's rows are all in shared memory
      if (o_by_tma) {
        tma_store_staged<Cfg>(w, tm_o, wg_row0, q_rows);
        o_store_pending = true;
        o_store_q_empty = sm.q_empty(q_this);
        if (!Cfg::kOverlap)
          settle_o_store();
      } else {
        copy_out_staged<Cfg>(p, w, wg_row0, q_rows, sm.q_empty(q_this));
      }
    } else {
      store_rows<Cfg>(p, w, st, row, t);
    }
    if constexpr (Cfg::kNarrowWalks) {  // after O is out: the other warpgroups still work
      pass_over_tile<Cfg>(sm, kv_iter, skip_tail);
      kv_iter += skip_tail;
    }
  }
  settle_o_store();
  if (o_by_tma && (threadIdx.x & 127) == 0)
    bulk_wait();  // shared memory must outlive the stores that read it
}

template <typename Cfg>
__device__ __forceinline__ void run(const FjForwardParams &p, const TensorMap &tm_q,
                                    const TensorMap &tm_k, const TensorMap &tm_v,
                                    const TensorMap &tm_o, bool o_by_tma, int *tile_counter,
                                    unsigned char *smem) {
  const SmemLayout<Cfg> sm((smem_addr(smem) + 1023) & ~1023u);
  static_assert(sizeof(TileId) <= 16, "a work tile fits its slot");
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int b = 0; b < Cfg::kQBuffers; ++b) {
      mbar_init(sm.q_full(b), 1);
      mbar_init(sm.q_empty(b), 4 * Cfg::kConsumers);  // one arrival per consumer warp
      mbar_init(sm.tile_read(b), 128 * Cfg::kConsumers);
    }
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(sm.full_k(s), 1);
      mbar_init(sm.full_v(s), 1);
      mbar_init(sm.empty_k(s), 4 * Cfg::kConsumers);
      mbar_init(sm.empty_v(s), 4 * Cfg::kConsumers);
    }
    mbar_fence_init();
  }
  if constexpr (Cfg::kAlibiByMma)
    write_bias_panel<Cfg>(sm.bias);
  __syncthreads();

  // One branch per role: setmaxnreg needs each warpgroup's role to be one side of a
  // single if/else.
  if (wg == 0) {
    regs_lower<Cfg::kProducerRegs>();
    if (threadIdx.x == 0)
      produce<Cfg>(p, sm, tm_q, tm_k, tm_v, tile_counter);
  } else {
    regs_raise<Cfg::kConsumerRegs>();
    consume<Cfg>(p, sm, tm_o, o_by_tma && Cfg::kStoreOByTma, wg - 1);
  }
}

}  // namespace fwd_wgmma
}  // namespace fj
