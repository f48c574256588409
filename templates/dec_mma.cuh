// Family dec_mma: split-KV decode over a contiguous or paged KV cache, sm_80 and newer.
//
// Decode is bandwidth-bound: a handful of query rows per sequence against a long cache,
// so the work is reading K and V once at the memory's speed. Three choices follow.
// (1) GQA packing: the query rows of all heads that share a KV head are the rows of one
// tile (packed row r is query i = r / group of head h_kv * group + r % group), so K and V
// are read once per KV head, not once per query head. (2) Split-KV: the key range of
// each (sequence, KV head, row tile) is cut into num_splits ranges run as separate CTAs,
// so a small batch still fills the GPU; each writes a normalized fp32 partial output
// and its lse, and dec_mma::run_combine merges them exactly. (3) Inside a CTA the warps
// split the keys of each tile (a row tile is only 16 to 64 rows), each keeping its own
// online softmax, merged through shared memory at the end.
// K and V pages are read in place with cp.async: each loaded row looks up its page in
// the block table, so any page size works and nothing is gathered first.
// An FP8 (e4m3) cache (kFp8Cache) is loaded as bytes and widened to the 16-bit type in
// registers (fj_fp8_cache.cuh): the bytes of a 16-byte chunk are 16 head dims, so a
// thread's ldmatrix fragment of K holds dims 4t .. 4t+3 of its key where the 16-bit
// layout has 2t, 2t+1, 2t+8, 2t+9. Q K^T sums over the dims in any order, so Q's
// fragments are loaded in K's order (load_q_fp8). For P V, V's transposed fragment holds
// dims 2g and 2g+1 of two keys; the even dims feed one n-tile of O and the odd ones the
// next, and the epilogue writes O's columns in that order (fp8_out_columns).
#pragma once

#include "fj_common.cuh"
#include "fj_decode_params.h"
#include "fj_features.cuh"
#include "fj_fp8_cache.cuh"
#include "fj_smem.cuh"

namespace fj {

template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_,
          int kWarps_, int kStages_, bool kCausal_, bool kFp8Cache_ = false,
          typename Features_ = NoFeatures>
struct DecMmaConfig {
  typedef Element_ Element;  // q, o and a 16-bit cache
  static constexpr bool kFp8Cache = kFp8Cache_;  // the cache holds e4m3 bytes
  // Attention features through the forward's hook (fj_features.cuh): the window (whose
  // key tiles alone are read), soft-capping, ALiBi (each packed row its head's slope) and
  // the user's score_mod and mask_mod, over either cache.
  typedef Features_ Features;
  typedef FeatureTraits<Features> FeatureInfo;
  // ALiBi walks a split's key tiles last to first: its bias rises towards the diagonal,
  // so first to last raised the rows' max on every tile and rescaled O each time (+15 %
  // instructions over an FP8 cache, docs/PERF.md d7); from the diagonal back, the first
  // tile holds the max. The forward families walk so already (fwd_wgmma's kAlibiFallsAway).
  static constexpr bool kWalkBack = Features::kAlibi;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockM = kBlockM_;  // packed query rows per CTA
  static constexpr int kBlockN = kBlockN_;  // keys per pipeline stage
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;
  static constexpr bool kCausal = kCausal_;
  static constexpr int kThreads = kWarps * 32;

  static constexpr int kRowGroups = kBlockM / 16;          // warps along the rows
  static constexpr int kKeySlices = kWarps / kRowGroups;   // warps along the keys
  static constexpr int kKeysPerWarp = kBlockN / kKeySlices;
  static constexpr int kNTiles = kKeysPerWarp / 8;
  static constexpr int kKSteps = kHeadDim / 16;
  static constexpr bool kKTail = kHeadDim % 16 != 0;
  static constexpr int kOTiles = kHeadDimV / 8;
  static constexpr bool kQInRegs = kHeadDim <= 128;

  static_assert(kBlockM % 16 == 0 && kBlockM <= 64, "block_m: 16, 32 or 64 packed rows");
  static_assert(kWarps % kRowGroups == 0, "warps: a multiple of block_m / 16");
  static_assert(kBlockN % kKeySlices == 0 && kKeysPerWarp % 16 == 0,
                "each warp takes a multiple of 16 keys of a tile");
  static_assert(kStages >= 2, "the K/V ring needs at least two stages");
  static_assert(!kFp8Cache || (kHeadDim % 16 == 0 && kHeadDimV % 16 == 0),
                "an FP8 cache needs head dims that are multiples of 16 (16-byte chunks)");

  // Cache elements per 16-bit unit of the shared-memory tiles (SmemTile counts 16-bit
  // elements): an FP8 row of d bytes is d / 2 units.
  static constexpr int kCachePerUnit = kFp8Cache ? 2 : 1;
  typedef SmemTile<kBlockM, kHeadDim> QTile;
  typedef SmemTile<kBlockN, kHeadDim / kCachePerUnit> KTile;
  typedef SmemTile<kBlockN, kHeadDimV / kCachePerUnit> VTile;
  static constexpr int kStageBytes = KTile::kBytes + VTile::kBytes;
  static constexpr int kPipeBytes = QTile::kBytes + kStages * kStageBytes;
  // The merge of the key slices reuses the pipeline's memory: each warp's O (16 rows,
  // fp32) and its rows' max and sum.
  static constexpr int kMergeBytes = kKeySlices > 1 ? kWarps * 16 * (kHeadDimV + 2) * 4 : 0;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
};

namespace dec_mma {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// How far (log2 units) a row's max may grow before O and the sum are rescaled: none,
// unlike fwd_mma: P <= 1 rounds as the peers' does (docs/PERF.md e1), and a decode step is
// bound by reading K and V, not by the rescale; the lse uses the
// same reference max.
constexpr float kRescaleSlack = 0.f;

// Where token j of sequence b lives: its page (the sequence itself when the cache is
// contiguous) and its row in the page.
struct CacheSlot {
  int page, row;
};
__device__ __forceinline__ CacheSlot cache_slot(const FjDecodeParams &p, const FastDiv &per_page,
                                                int b, int j) {
  if (!p.block_table)
    return {b, j};
  const int slot = per_page(j);
  return {p.block_table[(long long)b * p.table_stride + slot], j - slot * p.page_size};
}
__device__ __forceinline__ long long slot_offset(CacheSlot s, long long page_stride,
                                                 long long row_stride) {
  return (long long)s.page * page_stride + (long long)s.row * row_stride;
}

// Copies keys key0 .. key0 + kBlockN - 1 of K and V into a stage; rows at or past
// `valid` are zero-filled (and their pages never looked up). Each thread copies the
// same chunk of several rows, kRowStep apart. Row addresses are what the loop issues
// most (a decode CTA does little else), so they are found the cheap way where the cache
// allows:
// - the tile lies in one page (a contiguous cache, or pages a multiple of the tile): one
//   lookup per tile, then a 64-bit add per row (bm16.bn128.w8 issued ~630 instructions
//   a tile when every row was looked up on its own, against ~240 for the products and
//   the softmax; docs/PERF.md d2);
// - smaller pages: each row's page, all of a thread's lookups issued before its first
//   copy, so that their latencies overlap (rows past `valid` look up the tile's first
//   row, which exists, and copy nothing).
// C is the cache's element (u16, or u8 for FP8), whose 16-byte chunks hold kChunkElems.
template <typename Cfg, typename C>
__device__ __forceinline__ void load_kv_tile(u32 s_k, u32 s_v, const C *kc, const C *vc,
                                             const FjDecodeParams &p, const FastDiv &per_page,
                                             int b, int key0, int valid, int tid) {
  typedef typename Cfg::KTile KT;
  typedef typename Cfg::VTile VT;
  constexpr int kChunks = KT::kChunks > VT::kChunks ? KT::kChunks : VT::kChunks;
  constexpr int kChunkElems = 16 / (int)sizeof(C);
  // Chunk c of key row r of K and of V (where the head has that many chunks), the row
  // starting at element offsets k_row and v_row of kc and vc.
  auto copy = [&](int r, int c, long long k_row, long long v_row) {
    const bool ok = r < valid;
    if (c < KT::kChunks)
      cp_async_16(s_k + KT::offset(r, c), kc + (ok ? k_row + c * kChunkElems : 0), ok);
    if (c < VT::kChunks)
      cp_async_16(s_v + VT::offset(r, c), vc + (ok ? v_row + c * kChunkElems : 0), ok);
  };
  if constexpr (Cfg::kThreads % kChunks == 0) {
    constexpr int kRowStep = Cfg::kThreads / kChunks;
    constexpr int kIters = (Cfg::kBlockN + kRowStep - 1) / kRowStep;
    const int r0 = tid / kChunks, c = tid % kChunks;
    if (!p.block_table || p.page_size % Cfg::kBlockN == 0) {
      CacheSlot first = {b, key0};
      if (p.block_table) {
        const int slot = per_page(key0);
        first = {p.block_table[(long long)b * p.table_stride + slot], key0 - slot * p.page_size};
      }
      long long k_row = slot_offset(first, p.k_page_stride, p.k_row_stride) + r0 * p.k_row_stride;
      long long v_row = slot_offset(first, p.v_page_stride, p.v_row_stride) + r0 * p.v_row_stride;
      const long long k_step = kRowStep * p.k_row_stride, v_step = kRowStep * p.v_row_stride;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int r = r0 + it * kRowStep;
        if (Cfg::kBlockN % kRowStep != 0 && r >= Cfg::kBlockN)
          break;
        copy(r, c, k_row, v_row);
        k_row += k_step;
        v_row += v_step;
      }
    } else {
      int page[kIters];
      const int *table = p.block_table + (long long)b * p.table_stride;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int r = r0 + it * kRowStep;
        page[it] = table[per_page(key0 + (r < valid ? r : 0))];
      }
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int r = r0 + it * kRowStep;
        if (Cfg::kBlockN % kRowStep != 0 && r >= Cfg::kBlockN)
          break;
        const int j = key0 + r;
        const CacheSlot row = {page[it], j - per_page(j) * p.page_size};
        copy(r, c, slot_offset(row, p.k_page_stride, p.k_row_stride),
             slot_offset(row, p.v_page_stride, p.v_row_stride));
      }
    }
  } else {
    // Head dims whose chunk count does not divide the threads (40, 72, ...): every
    // (row, chunk) on its own.
    for (int i = tid; i < Cfg::kBlockN * kChunks; i += Cfg::kThreads) {
      const int r = i / kChunks;
      CacheSlot slot = {0, 0};
      if (r < valid)
        slot = cache_slot(p, per_page, b, key0 + r);
      copy(r, i % kChunks, slot_offset(slot, p.k_page_stride, p.k_row_stride),
           slot_offset(slot, p.v_page_stride, p.v_row_stride));
    }
  }
}

// The cache's element: 16-bit, or an FP8 cache's byte.
template <bool kFp8> struct CacheElement { typedef u16 type; };
template <> struct CacheElement<true> { typedef u8 type; };

// An FP8 cache's factors for (b, h_kv) (the params' fields exist only in its kernels).
struct CacheScales {
  float k, v;
};
__device__ __forceinline__ CacheScales cache_scales(const FjDecodeParams &p, int b, int h_kv) {
  CacheScales s = {1.f, 1.f};
#ifdef FJ_DECODE_FP8_CACHE
  const long long at = b * p.descale_batch_stride + h_kv * p.descale_head_stride;
  if (p.k_descale)
    s.k = p.k_descale[at];
  if (p.v_descale)
    s.v = p.v_descale[at];
#endif
  return s;
}

// FP8 cache: the row's columns of O that a thread holds, in the order the P V products
// leave them (see the top of the file): n-tiles 2c and 2c + 1 hold the even and odd
// columns of chunk c's 16, so the thread's four values of row half hf of chunk c are
// columns 16 c + 4 t .. 16 c + 4 t + 3, taken from acc[2c][2hf], acc[2c+1][2hf],
// acc[2c][2hf+1], acc[2c+1][2hf+1].
template <int OT>
__device__ __forceinline__ float4 fp8_out_columns(const float (&acc)[OT][4], int c, int hf,
                                                  float scale) {
  return make_float4(acc[2 * c][2 * hf] * scale, acc[2 * c + 1][2 * hf] * scale,
                     acc[2 * c][2 * hf + 1] * scale, acc[2 * c + 1][2 * hf + 1] * scale);
}

// Row (b, i, h) of o, and its lse slot.
__device__ __forceinline__ u16 *out_row(const FjDecodeParams &p, int b, int i, int h) {
  return (u16 *)p.o + (long long)b * p.o_batch_stride + (long long)i * p.o_row_stride +
         (long long)h * p.o_head_stride;
}
__device__ __forceinline__ float &lse_of(const FjDecodeParams &p, int b, int i, int h) {
  return p.lse[(long long)b * p.lse_batch_stride + (long long)h * p.lse_head_stride + i];
}

template <typename Cfg>
__device__ __forceinline__ void run(const FjDecodeParams &p, unsigned char *smem) {
  typedef typename Cfg::Element T;
  // P V's type: T, or for an FP8 cache on sm_89+ fp16 (V widened by the hardware).
  typedef typename fp8_cache::Select<Cfg::kFp8Cache, typename fp8_cache::PvType<T>::type,
                                     T>::type TP;
  constexpr int NT = Cfg::kNTiles, OT = Cfg::kOTiles;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row_group = warp % Cfg::kRowGroups, slice = warp / Cfg::kRowGroups;

  // The combine (launched as this kernel's programmatic dependent) waits for all of
  // this grid anyway; letting it launch now hides its launch behind this kernel.
  pdl_launch_dependents();
  const int split = blockIdx.x, m_tile = blockIdx.y;
  const int b = blockIdx.z / p.heads_kv, h_kv = blockIdx.z % p.heads_kv;
  const int group = p.heads_q / p.heads_kv;
  const int rows = p.seqlen_q * group;  // packed rows of this (sequence, KV head)
  const int r0 = m_tile * Cfg::kBlockM;
  const int seqlen_k = p.cache_seqlens ? p.cache_seqlens[b] : p.seqlen_k;
  const int diag = seqlen_k - p.seqlen_q;  // query i sees keys j <= i + diag (causal)

  // Keys any row of this tile sees, and this split's share of their tiles: with a window,
  // the tiles from the first row's left bound to the last row's right bound alone
  // (window_tiles; the host's SplitPolicy counts as many).
  typedef typename Cfg::Features F;
  int visible = seqlen_k;
  if (Cfg::kCausal) {
    const int last_query = imin(rows - 1, r0 + Cfg::kBlockM - 1) / group;
    visible = imax(0, imin(seqlen_k, last_query + diag + 1));
  }
  int n_first = 0, n_tiles = (visible + Cfg::kBlockN - 1) / Cfg::kBlockN;
  // The tile's first and last query (rows past the packed ones count as the last).
  const int first_query = imin(rows - 1, r0) / group;
  const int last_query = imin(rows - 1, r0 + Cfg::kBlockM - 1) / group;
  if constexpr (Cfg::FeatureInfo::kMasks)
    window_tiles<F, Cfg::kBlockN>(first_query, last_query, diag, n_first, n_tiles);
  const int n_begin = n_first + split * p.tiles_per_split;
  const int n_end = imin(n_tiles, n_begin + p.tiles_per_split);
  const bool partial = p.num_splits > 1;
  const long long partial_rows = (long long)p.batch * p.heads_q * p.seqlen_q;

  // The rows this thread writes (two per 16-row tile) and the last key each sees.
  int row_query[2], row_head[2], row_limit[2];
  bool row_valid[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = r0 + row_group * 16 + g + hf * 8;
    row_valid[hf] = r < rows;
    const int i = row_valid[hf] ? r / group : 0;
    row_query[hf] = i;
    row_head[hf] = h_kv * group + (row_valid[hf] ? r - i * group : 0);
    row_limit[hf] = Cfg::kCausal ? imin(seqlen_k - 1, i + diag) : seqlen_k - 1;
  }
  // The smallest limit of the tile's rows: tiles wholly below it need no mask.
  const int tile_limit = Cfg::kCausal ? imin(seqlen_k - 1, r0 / group + diag) : seqlen_k - 1;

  if (n_begin >= n_end) {
    // Nothing to read: an empty split leaves lse -inf (the combine skips it); a single
    // split writes the rows that see no key: o = 0, lse = -inf.
    if (slice != 0)
      return;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      if (!row_valid[hf])
        continue;
      const int i = row_query[hf], h = row_head[hf];
      if (partial) {
        if (t == 0)
          p.lse_partial[split * partial_rows + ((long long)b * p.heads_q + h) * p.seqlen_q + i] =
              neg_inf();
      } else {
        u16 *o = out_row(p, b, i, h);
#pragma unroll
        for (int ot = 0; ot < OT; ++ot)
          *(u32 *)(o + ot * 8 + 2 * t) = 0u;
        if (p.lse && t == 0)
          lse_of(p, b, i, h) = neg_inf();
      }
    }
    return;
  }

  const FastDiv per_page(p.block_table ? p.page_size : 1);
  const u32 s_q = smem_addr(smem);
  const u32 s_kv = s_q + Cfg::QTile::kBytes;
  typedef typename CacheElement<Cfg::kFp8Cache>::type C;
  const C *kc = (const C *)p.k + (long long)h_kv * p.k_head_stride;
  const C *vc = (const C *)p.v + (long long)h_kv * p.v_head_stride;

  // Q: the packed rows, each from its own (query, head).
  {
    typedef typename Cfg::QTile QT;
    constexpr int kTotal = Cfg::kBlockM * QT::kChunks;
    const u16 *q = (const u16 *)p.q + (long long)b * p.q_batch_stride;
#pragma unroll
    for (int it = 0; it < (kTotal + Cfg::kThreads - 1) / Cfg::kThreads; ++it) {
      const int idx = tid + it * Cfg::kThreads;
      if (kTotal % Cfg::kThreads != 0 && idx >= kTotal)
        break;
      const int r = idx / QT::kChunks, c = idx % QT::kChunks;
      const int pr = r0 + r;
      const bool ok = pr < rows;
      const u16 *src = q;
      if (ok) {
        const int i = pr / group;
        src += (long long)i * p.q_row_stride +
               (long long)(h_kv * group + pr - i * group) * p.q_head_stride + c * 8;
      }
      cp_async_16(s_q + QT::offset(r, c), src, ok);
    }
  }
  auto load_kv = [&](int n) {
    const u32 stage = s_kv + (n % Cfg::kStages) * Cfg::kStageBytes;
    const int key0 = n * Cfg::kBlockN;
    load_kv_tile<Cfg>(stage, stage + Cfg::KTile::kBytes, kc, vc, p, per_page, b, key0,
                      imin(Cfg::kBlockN, visible - key0), tid);
  };
  // The tile of step `step` (n_begin .. n_end - 1) of the walk (Cfg::kWalkBack).
  auto tile_at = [&](int step) { return Cfg::kWalkBack ? n_begin + n_end - 1 - step : step; };
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (n_begin + s < n_end)
      load_kv(tile_at(n_begin + s));
    cp_async_commit();
  }

  const int warp_row0 = row_group * 16;
  const int warp_key0 = slice * Cfg::kKeysPerWarp;
  const u32 q_lane = Cfg::QTile::offset(warp_row0 + (lane & 15), lane >> 4);
  const u32 k_lane =
      Cfg::KTile::offset(warp_key0 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const u32 v_lane =
      Cfg::VTile::offset(warp_key0 + (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
  // FP8 cache: Q's A fragment of k-step ks in K's order of dims. K's fragment of key g
  // holds dims 4t .. 4t+3 (of 16 ks +), widened as (4t, 4t+2) for k 2t, 2t+1 and
  // (4t+1, 4t+3) for k 2t+8, 2t+9; Q's rows g and g + 8 take the same dims there.
  auto load_q_fp8 = [&](int ks, u32(&a)[4]) {
    const u32 at = ((t & 1) << 3);
    const uint2 r0 =
        fp8_cache::ld_shared_8(s_q + Cfg::QTile::offset(warp_row0 + g, 2 * ks + (t >> 1)) + at);
    const uint2 r8 = fp8_cache::ld_shared_8(
        s_q + Cfg::QTile::offset(warp_row0 + g + 8, 2 * ks + (t >> 1)) + at);
    a[0] = __byte_perm(r0.x, r0.y, 0x5410);
    a[1] = __byte_perm(r8.x, r8.y, 0x5410);
    a[2] = __byte_perm(r0.x, r0.y, 0x7632);
    a[3] = __byte_perm(r8.x, r8.y, 0x7632);
  };
  u32 q_frag[Cfg::kQInRegs ? Cfg::kKSteps + 1 : 1][4];
  if (Cfg::kQInRegs) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < Cfg::kKSteps; ++ks)
      if constexpr (Cfg::kFp8Cache)
        load_q_fp8(ks, q_frag[Cfg::kQInRegs ? ks : 0]);
      else
        ldmatrix_x4(q_frag[Cfg::kQInRegs ? ks : 0], s_q + Cfg::QTile::step(q_lane, 0, ks * 2));
    if (Cfg::kKTail) {
      u32 tail[2];
      ldmatrix_x2(tail, s_q + Cfg::QTile::offset(warp_row0 + (lane & 15), Cfg::kKSteps * 2));
      q_frag[Cfg::kQInRegs ? Cfg::kKSteps : 0][0] = tail[0];
      q_frag[Cfg::kQInRegs ? Cfg::kKSteps : 0][1] = tail[1];
    }
  }

  float acc_o[OT][4];
#pragma unroll
  for (int ot = 0; ot < OT; ++ot)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc_o[ot][e] = 0.f;
  float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.f, 0.f};
  // An FP8 cache's K factor scales the scores with the softmax scale; V's scales O at the
  // end.
  CacheScales scales = {1.f, 1.f};
  if constexpr (Cfg::kFp8Cache)
    scales = cache_scales(p, b, h_kv);
  const float fp8_scale_log2 = p.scale_log2 * scales.k;
  // Read where it is used: a 16-bit cache's kernel keeps the code it had before FP8. With
  // soft-capping the hook hands back base-2 logits (ScoreHook::softmax_scale_log2).
  auto scale_log2 = [&] {
    return ScoreHook<F>::softmax_scale_log2(Cfg::kFp8Cache ? fp8_scale_log2 : p.scale_log2);
  };
  // The features' hooks, one per row a thread holds: the row's query index i is passed
  // per score (the window's bounds count from it), its head gives ALiBi's slope. An FP8
  // cache's K factor is part of the scale the hook takes a raw score by, so that what the
  // user's code, the cap and ALiBi see is the score of the dequantized key.
  const float softmax_scale =
      (Cfg::kFp8Cache ? fp8_scale_log2 : p.scale_log2) * (1.f / ScoreHook<F>::kLog2e);
  auto slope_of = [&](int hf) {
#ifdef FJ_DECODE_ALIBI
    return p.alibi_slopes[(long long)b * p.alibi_batch_stride + row_head[hf]];
#else
    return 0.f;
#endif
  };
#ifdef FJ_DECODE_MODS
  const FjModArgs *mod_args = &p.mod_args;
#else
  const FjModArgs *mod_args = nullptr;
#endif
  const ScoreHook<F> hook[2] = {
      ScoreHook<F>(b, row_head[0], p.seqlen_q, seqlen_k, softmax_scale, slope_of(0), mod_args),
      ScoreHook<F>(b, row_head[1], p.seqlen_q, seqlen_k, softmax_scale, slope_of(1), mod_args)};
  // An FP8 cache's K fragments: lane l gives row l of 32 keys (ldmatrix x4: 4 n-tiles of
  // one k-step), or row l % 16 of 16 (x2).
  const u32 k8_lane = Cfg::KTile::offset(warp_key0 + (Cfg::kFp8Cache ? lane : 0), 0);

  for (int step = n_begin; step < n_end; ++step) {
    const int n = tile_at(step);
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    if (step + Cfg::kStages - 1 < n_end)
      load_kv(tile_at(step + Cfg::kStages - 1));
    cp_async_commit();
    const u32 s_k = s_kv + (n % Cfg::kStages) * Cfg::kStageBytes;
    const u32 s_v = s_k + Cfg::KTile::kBytes;

    // S = Q K^T over this warp's keys of the tile.
    float acc_s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc_s[nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
      u32 a[4];
      if (Cfg::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          a[e] = q_frag[Cfg::kQInRegs ? ks : 0][e];
      } else if constexpr (Cfg::kFp8Cache) {
        load_q_fp8(ks, a);
      } else {
        ldmatrix_x4(a, s_q + Cfg::QTile::step(q_lane, 0, ks * 2));
      }
      if constexpr (Cfg::kFp8Cache) {
        // Each 32-bit fragment holds dims 4t .. 4t+3 of key g of its n-tile (16 ks +):
        // (4t, 4t+2) for the first register of B, (4t+1, 4t+3) for the second.
#pragma unroll
        for (int nq = 0; nq < NT / 4; ++nq) {
          u32 bk[4];
          ldmatrix_x4(bk, s_k + Cfg::KTile::step(k8_lane, nq * 32, ks));
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            u32 b0, b1;
            fp8_cache::widen<T>(bk[i], b0, b1);
            mma_16816<T>(acc_s[4 * nq + i], a, b0, b1);
          }
        }
        if (NT % 4) {
          u32 bk[2];
          ldmatrix_x2(bk, s_k + Cfg::KTile::step(k8_lane, (NT / 4) * 32, ks));
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            u32 b0, b1;
            fp8_cache::widen<T>(bk[i], b0, b1);
            mma_16816<T>(acc_s[NT - 2 + i], a, b0, b1);
          }
        }
        continue;
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        u32 bk[4];
        ldmatrix_x4(bk, s_k + Cfg::KTile::step(k_lane, np * 16, ks * 2));
        mma_16816<T>(acc_s[2 * np], a, bk[0], bk[1]);
        mma_16816<T>(acc_s[2 * np + 1], a, bk[2], bk[3]);
      }
    }
    if (Cfg::kKTail) {
      u32 a[2];
      if (Cfg::kQInRegs) {
        a[0] = q_frag[Cfg::kQInRegs ? Cfg::kKSteps : 0][0];
        a[1] = q_frag[Cfg::kQInRegs ? Cfg::kKSteps : 0][1];
      } else {
        ldmatrix_x2(a, s_q + Cfg::QTile::offset(warp_row0 + (lane & 15), Cfg::kKSteps * 2));
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        u32 bk[2];
        const int key = warp_key0 + np * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        ldmatrix_x2(bk, s_k + Cfg::KTile::offset(key, Cfg::kKSteps * 2));
        mma_1688<T>(acc_s[2 * np], a, bk[0]);
        mma_1688<T>(acc_s[2 * np + 1], a, bk[1]);
      }
    }

    // Soft-capping, ALiBi and score_mod, every score (the mask below overwrites what it
    // drops). The user's score_mod sees only keys its row may see (it may index its own
    // tensors by key): the mask below drops the others.
    const int key0 = n * Cfg::kBlockN + warp_key0;
    if constexpr (Cfg::FeatureInfo::kTransforms) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!F::kScoreMod || key0 + nt * 8 + 2 * t + (e & 1) <= row_limit[e >> 1])
            acc_s[nt][e] = hook[e >> 1].apply(acc_s[nt][e], row_query[e >> 1], key0 + 2 * t,
                                              nt * 8 + (e & 1));
    }
    // Mask keys past each row's last key (the cache's end, or the causal diagonal), and
    // those outside its window; only tiles that reach past the tile's smallest limit, or
    // across a window bound of one of its rows, pay for it.
    if (key0 + Cfg::kKeysPerWarp - 1 > tile_limit ||
        hook[0].tile_needs_mask(key0, Cfg::kKeysPerWarp, first_query, last_query)) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = key0 + nt * 8 + 2 * t + (e & 1);
          if (j > row_limit[e >> 1] || !hook[e >> 1].keeps(row_query[e >> 1], j))
            acc_s[nt][e] = neg_inf();
        }
    }

    // Online softmax in base 2, as fwd_mma.
    float correction[2];
    bool rescale = false;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = neg_inf();
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        mx = fmaxf(mx, fmaxf(acc_s[nt][2 * hf], acc_s[nt][2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      const float old_max = row_max[hf];
      const float block_max = mx * scale_log2();
      const bool moved = block_max > old_max + kRescaleSlack;
      const float new_max = moved ? block_max : old_max;
      rescale |= moved;
      const float base = new_max == neg_inf() ? 0.f : new_max;
      correction[hf] = moved ? fast_exp2(old_max - base) : 1.f;
      row_max[hf] = new_max;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
          const float pv = fast_exp2(acc_s[nt][e] * scale_log2() - base);
          acc_s[nt][e] = pv;
          sum += pv;
        }
      row_sum[hf] = row_sum[hf] * correction[hf] + sum;
    }
    if (__any_sync(0xffffffff, rescale)) {
#pragma unroll
      for (int ot = 0; ot < OT; ++ot)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc_o[ot][e] *= correction[e >> 1];
    }

    // O += P V over this warp's keys (an FP8 cache's in TP, fj_fp8_cache.cuh's PvType).
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      u32 a[4];
      a[0] = pack2<TP>(acc_s[2 * kk][0], acc_s[2 * kk][1]);
      a[1] = pack2<TP>(acc_s[2 * kk][2], acc_s[2 * kk][3]);
      a[2] = pack2<TP>(acc_s[2 * kk + 1][0], acc_s[2 * kk + 1][1]);
      a[3] = pack2<TP>(acc_s[2 * kk + 1][2], acc_s[2 * kk + 1][3]);
      if constexpr (Cfg::kFp8Cache) {
        // V's transposed fragments of chunk c (16 dims) for keys 2t, 2t+1 (bv[0]) and
        // 2t+8, 2t+9 (bv[1]) hold dims 2g and 2g+1 of each: bytes 0 and 2 the even dim
        // (n-tile 2c of O), bytes 1 and 3 the odd one (n-tile 2c + 1).
#pragma unroll
        for (int cp = 0; cp < OT / 4; ++cp) {
          u32 bv[4];
          ldmatrix_x4_trans(bv, s_v + Cfg::VTile::step(v_lane, kk * 16, cp * 2));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int c = 2 * cp + h;
            u32 lo_even, lo_odd, hi_even, hi_odd;
            fp8_cache::widen<TP>(bv[2 * h], lo_even, lo_odd);
            fp8_cache::widen<TP>(bv[2 * h + 1], hi_even, hi_odd);
            mma_16816<TP>(acc_o[2 * c], a, lo_even, hi_even);
            mma_16816<TP>(acc_o[2 * c + 1], a, lo_odd, hi_odd);
          }
        }
        if (OT % 4) {
          u32 bv[2];
          const int key = warp_key0 + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
          ldmatrix_x2_trans(bv, s_v + Cfg::VTile::offset(key, OT / 2 - 1));
          u32 lo_even, lo_odd, hi_even, hi_odd;
          fp8_cache::widen<TP>(bv[0], lo_even, lo_odd);
          fp8_cache::widen<TP>(bv[1], hi_even, hi_odd);
          mma_16816<TP>(acc_o[OT - 2], a, lo_even, hi_even);
          mma_16816<TP>(acc_o[OT - 1], a, lo_odd, hi_odd);
        }
        continue;
      }
#pragma unroll
      for (int op = 0; op < OT / 2; ++op) {
        u32 bv[4];
        ldmatrix_x4_trans(bv, s_v + Cfg::VTile::step(v_lane, kk * 16, op * 2));
        mma_16816<T>(acc_o[2 * op], a, bv[0], bv[1]);
        mma_16816<T>(acc_o[2 * op + 1], a, bv[2], bv[3]);
      }
      if (OT % 2) {
        u32 bv[2];
        const int key = warp_key0 + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        ldmatrix_x2_trans(bv, s_v + Cfg::VTile::offset(key, OT - 1));
        mma_16816<T>(acc_o[OT - 1], a, bv[0], bv[1]);
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    row_sum[hf] += __shfl_xor_sync(0xffffffff, row_sum[hf], 1);
    row_sum[hf] += __shfl_xor_sync(0xffffffff, row_sum[hf], 2);
  }

  // Merge the key slices: every warp leaves its O, max and sum in shared memory; the
  // first slice of each row group rescales them to the common max and adds them up.
  if (Cfg::kKeySlices > 1) {
    __syncthreads();  // every warp is done with the pipeline's memory
    float *merged = (float *)smem;                       // [warp][16][head_dim_v]
    float *stats = merged + Cfg::kWarps * 16 * Cfg::kHeadDimV;  // [warp][16][2]
    if (slice != 0) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = g + hf * 8;
        float *dst = merged + (warp * 16 + r) * Cfg::kHeadDimV;
#pragma unroll
        for (int ot = 0; ot < OT; ++ot)
          *(float2 *)(dst + ot * 8 + 2 * t) = make_float2(acc_o[ot][2 * hf], acc_o[ot][2 * hf + 1]);
        if (t == 0) {
          stats[(warp * 16 + r) * 2] = row_max[hf];
          stats[(warp * 16 + r) * 2 + 1] = row_sum[hf];
        }
      }
    }
    __syncthreads();
    if (slice != 0)
      return;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = g + hf * 8;
      float m = row_max[hf];
#pragma unroll
      for (int s = 1; s < Cfg::kKeySlices; ++s)
        m = fmaxf(m, stats[((s * Cfg::kRowGroups + row_group) * 16 + r) * 2]);
      const float base = m == neg_inf() ? 0.f : m;
      const float own = fast_exp2(row_max[hf] - base);
      float sum = row_sum[hf] * own;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot) {
        acc_o[ot][2 * hf] *= own;
        acc_o[ot][2 * hf + 1] *= own;
      }
#pragma unroll
      for (int s = 1; s < Cfg::kKeySlices; ++s) {
        const int w = s * Cfg::kRowGroups + row_group;
        const float f = fast_exp2(stats[(w * 16 + r) * 2] - base);
        sum += f * stats[(w * 16 + r) * 2 + 1];
        const float *src = merged + (w * 16 + r) * Cfg::kHeadDimV;
#pragma unroll
        for (int ot = 0; ot < OT; ++ot) {
          const float2 x = *(const float2 *)(src + ot * 8 + 2 * t);
          acc_o[ot][2 * hf] += f * x.x;
          acc_o[ot][2 * hf + 1] += f * x.y;
        }
      }
      row_max[hf] = m;
      row_sum[hf] = sum;
    }
  }

  // Epilogue: normalized O (16-bit, or fp32 partial) and the lse, row by row.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    if (!row_valid[hf])
      continue;
    const int i = row_query[hf], h = row_head[hf];
    const float sum = row_sum[hf];
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const float lse = sum > 0.f ? row_max[hf] * 0.69314718055994531f + __logf(sum) : neg_inf();
    if (partial) {
      const long long row = split * partial_rows + ((long long)b * p.heads_q + h) * p.seqlen_q + i;
      float *o = p.o_partial + row * Cfg::kHeadDimV;
      if constexpr (Cfg::kFp8Cache) {
#pragma unroll
        for (int c = 0; c < OT / 2; ++c)
          *(float4 *)(o + 16 * c + 4 * t) = fp8_out_columns(acc_o, c, hf, inv * scales.v);
      } else {
#pragma unroll
        for (int ot = 0; ot < OT; ++ot)
          *(float2 *)(o + ot * 8 + 2 * t) =
              make_float2(acc_o[ot][2 * hf] * inv, acc_o[ot][2 * hf + 1] * inv);
      }
      if (t == 0)
        p.lse_partial[row] = lse;
    } else {
      u16 *o = out_row(p, b, i, h);
      if constexpr (Cfg::kFp8Cache) {
#pragma unroll
        for (int c = 0; c < OT / 2; ++c) {
          const float4 x = fp8_out_columns(acc_o, c, hf, inv * scales.v);
          *(uint2 *)(o + 16 * c + 4 * t) = make_uint2(pack2<T>(x.x, x.y), pack2<T>(x.z, x.w));
        }
      } else {
#pragma unroll
        for (int ot = 0; ot < OT; ++ot)
          *(u32 *)(o + ot * 8 + 2 * t) =
              pack2<T>(acc_o[ot][2 * hf] * inv, acc_o[ot][2 * hf + 1] * inv);
      }
      if (p.lse && t == 0)
        lse_of(p, b, i, h) = lse;
    }
  }
}

// The combine: one warp per output row (b, h, i) merges the splits' partial outputs,
// weighted by exp(lse_s - lse), where lse is the log-sum-exp of theirs. A decode step
// waits on it, so it is built for latency, not bandwidth: each lane holds one split's
// weight, and the partial rows of up to kBatch splits are loaded before any is used (one
// memory round trip per kBatch splits, not one per split; 16 splits took 10 us when
// each load waited for the one before it, docs/PERF.md d2). Splits that saw no key (lse
// -inf, weight 0) are never read: their partial outputs were not written.
template <typename T, int kHeadDimV>
__device__ __forceinline__ void run_combine(const FjDecodeParams &p) {
  constexpr int kWarpsPerCta = 4;
  // The row in float4s (head_dim_v is a multiple of 8, so each row is 32-byte aligned),
  // lane l taking chunks l, l + 32, ...
  constexpr int kChunks = kHeadDimV / 4;
  constexpr int kPerLane = (kChunks + 31) / 32;
  constexpr int kBatch = kPerLane == 1 ? 8 : 4;  // splits in flight per lane
  const int lane = threadIdx.x & 31;
  const long long rows = (long long)p.batch * p.heads_q * p.seqlen_q;
  const long long row = (long long)blockIdx.x * kWarpsPerCta + (threadIdx.x >> 5);
  pdl_wait();  // the split kernel's partial outputs
  if (row >= rows)
    return;
  const int splits = p.num_splits;
  float m = neg_inf();
  for (int s = lane; s < splits; s += 32)
    m = fmaxf(m, p.lse_partial[s * rows + row]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
  float4 acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e)
    acc[e] = make_float4(0.f, 0.f, 0.f, 0.f);
  float total = 0.f;
  if (m != neg_inf()) {
    for (int s0 = 0; s0 < splits; s0 += 32) {
      // Lane j: the weight of split s0 + j (0 past the last split or for an empty one).
      float w = 0.f;
      if (s0 + lane < splits) {
        const float l = p.lse_partial[(s0 + lane) * rows + row];
        w = l == neg_inf() ? 0.f : __expf(l - m);
      }
      total += w;
      const int count = imin(32, splits - s0);
      for (int j0 = 0; j0 < count; j0 += kBatch) {
        float wj[kBatch];
        float4 x[kBatch][kPerLane];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          wj[j] = __shfl_sync(0xffffffff, w, (j0 + j) & 31);
          if (j0 + j >= count)
            wj[j] = 0.f;
          const float4 *src =
              (const float4 *)(p.o_partial + ((s0 + j0 + j) * rows + row) * kHeadDimV);
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) {
            const int c = lane + e * 32;
            x[j][e] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (wj[j] != 0.f && (kChunks % 32 == 0 || c < kChunks))
              x[j][e] = src[c];
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) {
            acc[e].x += wj[j] * x[j][e].x;
            acc[e].y += wj[j] * x[j][e].y;
            acc[e].z += wj[j] * x[j][e].z;
            acc[e].w += wj[j] * x[j][e].w;
          }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      total += __shfl_xor_sync(0xffffffff, total, off);
  }
  const int i = (int)(row % p.seqlen_q);
  const long long bh = row / p.seqlen_q;
  const int h = (int)(bh % p.heads_q), b = (int)(bh / p.heads_q);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  u16 *o = out_row(p, b, i, h);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int c = lane + e * 32;
    if (kChunks % 32 == 0 || c < kChunks) {
      uint2 packed;
      packed.x = pack2<T>(acc[e].x * inv, acc[e].y * inv);
      packed.y = pack2<T>(acc[e].z * inv, acc[e].w * inv);
      *(uint2 *)(o + 4 * c) = packed;
    }
  }
  if (p.lse && lane == 0)
    lse_of(p, b, i, h) = total > 0.f ? m + __logf(total) : neg_inf();
}

// The append: new K/V rows into their cache tokens (block (new row, sequence), one
// thread per 16-byte chunk of every KV head). New rows are T; an FP8 cache stores each
// value divided by its head's factor, as the nearest e4m3 (saturated), 16 a chunk.
template <typename T, int kHeadDim, int kHeadDimV, bool kFp8Cache = false>
__device__ __forceinline__ void run_append(const FjDecodeParams &p) {
  const int t_new = blockIdx.x, b = blockIdx.y;
  const int seqlen_k = p.cache_seqlens ? p.cache_seqlens[b] : p.seqlen_k;
  const int j = seqlen_k - p.new_len + t_new;
  if (j < 0)
    return;
  const FastDiv per_page(p.block_table ? p.page_size : 1);
  constexpr int kKChunks = kHeadDim / (kFp8Cache ? 16 : 8);
  constexpr int kVChunks = kHeadDimV / (kFp8Cache ? 16 : 8);
  const CacheSlot slot = cache_slot(p, per_page, b, j);
  const long long k_row = slot_offset(slot, p.k_page_stride, p.k_row_stride);
  const long long v_row = slot_offset(slot, p.v_page_stride, p.v_row_stride);
  for (int idx = threadIdx.x; idx < p.heads_kv * (kKChunks + kVChunks); idx += blockDim.x) {
    const int h = idx / (kKChunks + kVChunks), c = idx % (kKChunks + kVChunks);
    if constexpr (kFp8Cache) {
      const bool is_k = c < kKChunks;
      const int cc = is_k ? c : c - kKChunks;
      const u16 *src =
          is_k ? (const u16 *)p.k_new + (long long)b * p.k_new_batch_stride +
                     (long long)t_new * p.k_new_row_stride + (long long)h * p.k_new_head_stride
               : (const u16 *)p.v_new + (long long)b * p.v_new_batch_stride +
                     (long long)t_new * p.v_new_row_stride + (long long)h * p.v_new_head_stride;
      src += cc * 16;
      const CacheScales scales = cache_scales(p, b, h);
      const float factor = is_k ? scales.k : scales.v;
      u8 *dst = (u8 *)(is_k ? p.k : p.v) + (is_k ? k_row : v_row) +
                (long long)h * (is_k ? p.k_head_stride : p.v_head_stride) + cc * 16;
      const uint4 lo = *(const uint4 *)src, hi = *(const uint4 *)(src + 8);
      const u32 in[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      u32 out[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        u32 word = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const u32 pair = in[2 * w + e / 2];
          const float x = to_float<T>((u16)(e % 2 ? pair >> 16 : pair & 0xffffu));
          word |= fp8_cache::float_to_e4m3(__fdiv_rn(x, factor)) << (8 * e);
        }
        out[w] = word;
      }
      *(uint4 *)dst = make_uint4(out[0], out[1], out[2], out[3]);
    } else if (c < kKChunks) {
      const u16 *src = (const u16 *)p.k_new + (long long)b * p.k_new_batch_stride +
                       (long long)t_new * p.k_new_row_stride +
                       (long long)h * p.k_new_head_stride + c * 8;
      u16 *dst = (u16 *)p.k + k_row + (long long)h * p.k_head_stride + c * 8;
      *(uint4 *)dst = *(const uint4 *)src;
    } else {
      const int cv = c - kKChunks;
      const u16 *src = (const u16 *)p.v_new + (long long)b * p.v_new_batch_stride +
                       (long long)t_new * p.v_new_row_stride +
                       (long long)h * p.v_new_head_stride + cv * 8;
      u16 *dst = (u16 *)p.v + v_row + (long long)h * p.v_head_stride + cv * 8;
      *(uint4 *)dst = *(const uint4 *)src;
    }
  }
}

}  // namespace dec_mma
}  // namespace fj
