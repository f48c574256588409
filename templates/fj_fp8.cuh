// FP8 (e4m3) support of fwd_wgmma: V transposed for the P V product.
//
// wgmma reads 8-bit operands from shared memory K-major only, and in O += P V the K
// dimension is the keys, which V holds one row each. So before the forward, this kernel
// writes V^T ([batch][heads_kv][head_dim_v][vt_keys], keys contiguous) and the forward
// loads its tiles by TMA as it loads K.
//
// A variable-length batch (cu_seqlens) has one V^T of [heads_kv][head_dim_v][vt_keys]
// holding every sequence's keys, sequence b from column vt_offset(b) on, followed by zeros
// up to the end of the forward's last key tile (a tile of up to kMaxBlockN keys that
// starts before the sequence's end), so that no tile reads another sequence's bytes
// (P is 0 there, but 0 * NaN would not be).
//
// The keys of each aligned group of 32 are stored permuted, so that P needs no shuffle
// between lanes: in the S accumulator a thread holds keys 2t, 2t+1, 8+2t, 9+2t, 16+2t, ...
// of its rows (t = lane % 4), while the A fragment of an m64k32 8-bit wgmma wants keys
// 4t .. 4t+3 and 16+4t .. 16+4t+3 of them. Column c of the group in V^T holds the key
// the thread's own scores put there (permuted_key), and pack_p packs them in order.
#pragma once

#include "fj_common.cuh"

namespace fj {
namespace fp8 {

constexpr int kTransposeKeys = 64;  // keys per CTA (and vt_keys' granule)
constexpr int kTransposeThreads = 256;
constexpr int kMaxBlockN = 256;  // the forward's largest key tile
// Columns between variable-length sequences: sequence b starts at its first packed key
// row rounded up to 64, plus kVarlenGap * b, which leaves at least
// round_up(seqlen_k, 64) + kMaxBlockN - 64 columns to the next one
// (generator::fp8TransposedKeysVarlen mirrors it).
constexpr int kVarlenGap = kMaxBlockN + kTransposeKeys;

// The V^T column of sequence b's key 0 (k_offset: SeqExtent's, -1 without cu_seqlens).
__device__ __forceinline__ long long vt_offset(long long k_offset, int b) {
  return k_offset < 0 ? 0
                      : (k_offset + kTransposeKeys - 1) / kTransposeKeys * kTransposeKeys +
                            (long long)kVarlenGap * b;
}

// A dequantization factor of (b, h_kv) (FjForwardParams' descale fields); NULL: 1.
__device__ __forceinline__ float descale(const float *factors, const FjForwardParams &p,
                                         int b, int h_kv) {
  return factors ? factors[b * p.descale_batch_stride + h_kv * p.descale_head_stride] : 1.f;
}

// The key in column c (0..31) of a 32-key group of V^T: c = 16 h + 4 t + i holds the
// i-th of the four keys lane t packs in register 2 h (row g) of its A fragment.
__device__ __forceinline__ int permuted_key(int c) {
  const int h = c >> 4, t = (c >> 2) & 3, i = c & 3;
  return 16 * h + 2 * t + (i & 1) + 8 * (i >> 1);
}

// One CTA: kTransposeKeys keys of one (batch, kv head). The keys come in through shared
// memory in rows of 4-byte words (coalesced reads of V's rows), and leave as 4-key
// words of V^T's rows (coalesced writes). Keys past seqlen_k are written as 0, so that a
// permuted group that crosses the end holds no stale bytes (P is 0 there, but 0 * NaN
// would not be). With cu_seqlens the grid covers the longest sequence and the zeros after
// it (see kVarlenGap); CTAs past a shorter sequence's zeros return.
template <int kHeadDimV>
__device__ __forceinline__ void transpose_v(const FjForwardParams &p) {
  constexpr int kPitch = kHeadDimV + 4;  // bytes per staged key row (word-aligned, skewed)
  __shared__ __align__(16) u8 rows[kTransposeKeys * kPitch];
  const int key0 = blockIdx.x * kTransposeKeys, h = blockIdx.y, b = blockIdx.z;
  const SeqExtent seq = seq_extent(p, b);
  const bool varlen = seq.k_offset >= 0;
  if (varlen && key0 >= (seq.seqlen_k + kTransposeKeys - 1) / kTransposeKeys * kTransposeKeys +
                            kMaxBlockN - kTransposeKeys)
    return;
  const u8 *v = (const u8 *)p.v + tensor_base(seq.k_offset, b, h, p.v_batch_stride,
                                               p.v_row_stride, p.v_head_stride);
  constexpr int kWordsPerRow = kHeadDimV / 4;
  for (int i = threadIdx.x; i < kTransposeKeys * kWordsPerRow; i += kTransposeThreads) {
    const int r = i / kWordsPerRow, w = i % kWordsPerRow, key = key0 + r;
    const u32 word =
        key < seq.seqlen_k ? *(const u32 *)(v + (long long)key * p.v_row_stride + 4 * w) : 0u;
    *(u32 *)(rows + r * kPitch + 4 * w) = word;
  }
  __syncthreads();
  u8 *vt = (u8 *)p.v_transposed +
           ((long long)(varlen ? 0 : b) * p.heads_kv + h) * kHeadDimV * p.vt_keys +
           vt_offset(seq.k_offset, b);
  constexpr int kWordsPerKeyRow = kTransposeKeys / 4;  // 4-key words of one V^T row
  for (int i = threadIdx.x; i < kHeadDimV * kWordsPerKeyRow; i += kTransposeThreads) {
    const int d = i / kWordsPerKeyRow, c0 = 4 * (i % kWordsPerKeyRow);
    const int group = c0 & ~31;
    u32 word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      word |= (u32)rows[(group + permuted_key((c0 + j) & 31)) * kPitch + d] << (8 * j);
    *(u32 *)(vt + (long long)d * p.vt_keys + key0 + c0) = word;
  }
}

}  // namespace fp8
}  // namespace fj
