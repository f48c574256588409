// Attention features (sliding window, soft-capping, ALiBi, the user's score_mod and
// mask_mod): the one hook every family's softmax step calls, so that a feature is
// written once and no mainloop is copied (DESIGN.md, "Adding an operation").
//
// A family's config carries a feature struct (NoFeatures for the plain kernel, else the
// generator's FjFeatures, see generator/emit.cpp) and asks its traits (FeatureTraits)
// at compile time. With NoFeatures every test below is a constant and the plain kernel
// compiles to the code it had before features existed.
//
// Per score s = q.k of query row i and key j (both counted within the sequence, with
// diag = seqlen_k - seqlen_q as for causal):
//   x = s * softmax_scale; softcap: x = cap * tanh(x / cap);
//   ALiBi: x -= slope[b, h] * |i + diag - j|; score_mod: x = score_mod(x, b, h, i, j);
// and the key is dropped outside the window i + diag - left .. i + diag + right or where
// mask_mod(b, h, i, j) is false. A family exponentiates 2^(value * scale - max) with
// scale = softmax_scale_log2(p): the hook hands back base-2 logits (scale 1) when it
// transforms, and a value in the raw score's units (scale softmax_scale * log2 e) when it
// only masks or adds ALiBi's bias alone (FeatureTraits::kScoreUnits).
#pragma once

#include "fj_common.cuh"

// NVRTC compiles without the math headers; user code may still write INFINITY (e.g. a
// score_mod that drops a key returns -INFINITY).
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

namespace fj {

// The plain kernel: no feature.
struct NoFeatures {
  static constexpr bool kWindow = false;
  static constexpr int kWindowLeft = -1, kWindowRight = -1;
  static constexpr float kSoftcap = 0.f;
  static constexpr bool kAlibi = false;
  static constexpr bool kScoreMod = false, kMaskMod = false;
  __device__ static float score_mod(float score, int, int, int, int, const FjModArgs &) {
    return score;
  }
  __device__ static bool mask_mod(int, int, int, int, const FjModArgs &) { return true; }
};

template <typename F> struct FeatureTraits {
  static constexpr bool kTransforms = F::kSoftcap > 0.f || F::kAlibi || F::kScoreMod;
  static constexpr bool kMasks = F::kWindow || F::kMaskMod;
  static constexpr bool kAny = kTransforms || kMasks;
  static constexpr bool kLeftBound = F::kWindow && F::kWindowLeft >= 0;
  static constexpr bool kRightBound = F::kWindow && F::kWindowRight >= 0;
  // A family transforms every score of a tile first, in a loop of its own, and the mask
  // (on few tiles) then overwrites what it drops. For ALiBi alone: a bound test beside
  // each score's few multiply-adds in one loop made ALiBi cost twice the instructions,
  // and spilled half the d = 128 tiles (docs/PERF.md f3). Not with soft-capping: its tanh
  // calls, one after another, left two-consumer tiles 3 to 8 % slower. Not for the
  // user's score_mod, never called for a key past the sequence end.
  static constexpr bool kTransformFirst = F::kAlibi && !(F::kSoftcap > 0.f) && !F::kScoreMod;
  // ALiBi alone hands back s - |distance| * slope / softmax_scale, in the raw score's
  // units: the family's exponent multiplies it by softmax_scale * log2 e as it does a
  // plain score, in the FFMA it issues anyway, so the bias costs a subtraction and one
  // FFMA a score instead of a subtraction, an FMUL and an FFMA (docs/PERF.md f13). The
  // API keeps softmax_scale >= 2^-60 with ALiBi, so slope / softmax_scale stays finite.
  static constexpr bool kScoreUnits = kTransformFirst;
  // Whether apply() hands back base-2 logits (exponent scale 1) rather than a value in
  // the raw score's units (scale softmax_scale * log2 e).
  static constexpr bool kLog2Logits = kTransforms && !kScoreUnits;
};

// tanh with one MUFU instruction (relative error 2^-10.99, far below the rounding of
// the 16-bit P it feeds): soft-capping costs one more special-function op per score,
// not the three of an exact tanh.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The key tiles [first, end) of kBlockN keys that rows row_lo .. row_hi may see by the
// window, clipped to [first, end) as given (the sequence and causal bounds).
template <typename F, int kBlockN>
__device__ __forceinline__ void window_tiles(int row_lo, int row_hi, int diag, int &first,
                                             int &end) {
  if (FeatureTraits<F>::kLeftBound) {
    const int lo = row_lo + diag - F::kWindowLeft;  // first key of the first row
    if (lo > 0)
      first = imax(first, lo / kBlockN);
  }
  if (FeatureTraits<F>::kRightBound) {
    const int hi = row_hi + diag + F::kWindowRight;  // last key of the last row
    end = imin(end, hi < 0 ? 0 : hi / kBlockN + 1);
  }
}

// One (batch, head) of one sequence: what the hook needs, set up once per work tile.
template <typename F> struct ScoreHook {
  typedef FeatureTraits<F> Traits;
  int b, h, diag;
  int seqlen_q;        // rows past it exist in a tile but not in the problem
  float scale;         // softmax_scale
  float alibi_slope;   // ALiBi: the head's slope (kScoreUnits: -slope / softmax_scale)
  const FjModArgs *args;

  __device__ __forceinline__ ScoreHook(const FjForwardParams &p, int b_, int h_,
                                       const SeqExtent &seq)
      : b(b_), h(h_), diag(seq.seqlen_k - seq.seqlen_q), seqlen_q(seq.seqlen_q),
        scale(p.softmax_scale), alibi_slope(0.f),
        args(&p.mod_args) {
    if constexpr (F::kAlibi) {
      alibi_slope = p.alibi_slopes[(long long)b * p.alibi_batch_stride + h];
      if constexpr (Traits::kScoreUnits)
        alibi_slope = -alibi_slope / p.softmax_scale;
    }
  }
  // The decode kernels' (dec_mma): query head h_ of a sequence whose rows are the last
  // seqlen_q_ of its seqlen_k_ keys; `slope` its ALiBi slope (0 without), `args_` what
  // the user's code reads (null without it).
  __device__ __forceinline__ ScoreHook(int b_, int h_, int seqlen_q_, int seqlen_k_,
                                       float softmax_scale, float slope,
                                       const FjModArgs *args_)
      : b(b_), h(h_), diag(seqlen_k_ - seqlen_q_), seqlen_q(seqlen_q_), scale(softmax_scale),
        alibi_slope(Traits::kScoreUnits ? -slope / softmax_scale : slope), args(args_) {}
  static constexpr float kLog2e = 1.4426950408889634f;

  // The factor 2^(value * factor - max) takes for what apply() returns.
  __device__ static __forceinline__ float softmax_scale_log2(const FjForwardParams &p) {
    return softmax_scale_log2(p.scale_log2);
  }
  __device__ static __forceinline__ float softmax_scale_log2(float scale_log2) {
    return Traits::kLog2Logits ? 1.f : scale_log2;
  }

  // Whether the features mask some score of key tile [key0, key0 + n) for the rows
  // row_lo .. row_hi (the family tests the sequence end and causal itself). With a
  // mask_mod, `partial` is the tile's class in the block mask (fj_block_mask.cuh), which
  // covers the window too; without a block mask every tile is partial.
  __device__ __forceinline__ bool tile_needs_mask(int key0, int n, int row_lo, int row_hi,
                                                  bool partial = true) const {
    if (F::kMaskMod)
      return partial;
    return tile_crosses_left(key0, row_hi) | tile_crosses_right(key0, n, row_lo);
  }
  // Whether the window's left bound drops a key of tile [key0, ...) for a row up to
  // row_hi, and its right bound one of [key0, key0 + n) for a row from row_lo on.
  __device__ __forceinline__ bool tile_crosses_left(int key0, int row_hi) const {
    return Traits::kLeftBound && key0 < row_hi + diag - F::kWindowLeft;
  }
  __device__ __forceinline__ bool tile_crosses_right(int key0, int n, int row_lo) const {
    return Traits::kRightBound && key0 + n - 1 > row_lo + diag + F::kWindowRight;
  }

  // Whether the features keep key j (< seqlen_k) for row i. The user's code is never
  // called for a row past the sequence end (it may index its own tensors by row).
  __device__ __forceinline__ bool keeps(int i, int j) const {
    bool keep = true;
    if (Traits::kLeftBound)
      keep &= j >= i + diag - F::kWindowLeft;
    if (Traits::kRightBound)
      keep &= j <= i + diag + F::kWindowRight;
    if (F::kMaskMod)
      keep &= i >= seqlen_q || F::mask_mod(b, h, i, j, *args);
    return keep;
  }

  // Score s = q.k of row i and key j = j_base + j_offset (< seqlen_k) -> what the family
  // exponentiates (see above). Families pass as j_offset the part of the key that is a
  // constant of the unrolled loop (its column within the thread's fragment), so that
  // ALiBi's distance costs one int->float conversion per row and j_base (hoisted out of
  // the tile's scores), then a float subtraction per score: the conversion shares the
  // MUFU pipe with the softmax's exp2, and per score it made ALiBi MUFU-bound (PERF f1).
  __device__ __forceinline__ float apply(float s, int i, int j_base, int j_offset) const {
    if constexpr (!Traits::kTransforms) {
      return s;
    } else {
      if constexpr (F::kSoftcap > 0.f && !F::kAlibi && !F::kScoreMod) {
        // The common case in three operations.
        return tanh_approx(s * (scale * (1.f / F::kSoftcap))) * (F::kSoftcap * kLog2e);
      } else if constexpr (Traits::kScoreUnits) {
        // ALiBi alone, in the raw score's units: one FFMA after the
        // distance (exact small integers: its subtraction rounds nothing below 2^24).
        const float d = (float)(i + diag - j_base) - (float)j_offset;
        return fmaf(fabsf(d), alibi_slope, s);
      } else {
        const int j = j_base + j_offset;
        float x = s * scale;
        if constexpr (F::kSoftcap > 0.f)
          x = F::kSoftcap * tanh_approx(x * (1.f / F::kSoftcap));
        if constexpr (F::kAlibi) {
          const float d = (float)(i + diag - j_base) - (float)j_offset;
          x -= alibi_slope * fabsf(d);
        }
        if constexpr (F::kScoreMod)
          x = i < seqlen_q ? F::score_mod(x, b, h, i, j, *args) : x;
        return x * kLog2e;
      }
    }
  }

  // ALiBi alone (kScoreUnits) over a key tile that lies on one side of row i's diagonal
  // (`before`: every key of the tile at or before it, else at or after it). There the
  // bias -slope |i + diag - j| is linear in the key, so apply() splits into a part of the
  // row, `shift`, which the family adds in its exponent once per row and tile, and a part
  // of the key's column, one FFMA a score (apply_linear): half of apply()'s two
  // instructions (docs/PERF.md f14). Both in the raw score's units:
  //   apply(s, i, j_base, j_offset) = apply_linear(s, m, j_offset) + shift.
  // A key of the tile past the row's diagonal gets the wrong side's bias: causal kernels
  // take `before` on every tile and mask those keys anyway.
  __device__ __forceinline__ void alibi_linear(int i, int j_base, bool before, float &m,
                                               float &shift) const {
    static_assert(Traits::kScoreUnits, "ALiBi alone");
    const float a = (float)(i + diag - j_base);  // distance to the key at j_offset 0
    // alibi_slope is -slope / softmax_scale; before: bias = alibi_slope * (a - j_offset),
    // after: alibi_slope * (j_offset - a).
    m = before ? -alibi_slope : alibi_slope;
    shift = before ? alibi_slope * a : -alibi_slope * a;
  }
  __device__ static __forceinline__ float apply_linear(float s, float m, int j_offset) {
    return fmaf((float)j_offset, m, s);
  }
};

}  // namespace fj
