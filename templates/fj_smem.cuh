// Shared-memory tiles of 16-bit elements, addressed in 16-byte chunks (8 elements).
// Rows whose chunk count is a multiple of 8 use an XOR swizzle (chunk ^ row % 8); other
// widths (head dims 40, 72, 80, ...) pad each row to an odd number of chunks. Either
// way the 8 rows an ldmatrix phase reads, and the chunks a warp's cp.async writes,
// fall in 8 different bank groups: no bank conflicts, for any head dim.
#pragma once

#include "fj_common.cuh"

namespace fj {

template <int kRows, int kCols> struct SmemTile {
  static_assert(kCols % 8 == 0, "tile width must be a multiple of 8 elements");
  static constexpr int kRowCount = kRows;
  static constexpr int kChunks = kCols / 8;
  static constexpr bool kSwizzled = kChunks % 8 == 0;
  static constexpr int kRowChunks = kSwizzled ? kChunks : (kChunks | 1);
  static constexpr int kBytes = kRows * kRowChunks * 16;

  // Byte offset of chunk `c` of row `r`.
  static __device__ __forceinline__ u32 offset(int r, int c) {
    int phys = kSwizzled ? (c ^ (r & 7)) : c;
    return (u32)((r * kRowChunks + phys) * 16);
  }

  // offset(r + rows, c + chunks) from lane_off = offset(r, c), for rows a multiple of 8
  // and (chunks & 7) & c == 0: the swizzle only flips bits, so the step is one XOR and a
  // constant add (an ldmatrix immediate). A lane keeps one base offset per operand
  // instead of one register per chunk, which the compiler would hoist out of the K/V
  // loop and keep live.
  static __device__ __forceinline__ u32 step(u32 lane_off, int rows, int chunks) {
    const u32 row_bytes = (u32)(rows * kRowChunks * 16);
    if (kSwizzled)
      return (lane_off ^ (u32)((chunks & 7) * 16)) + (u32)((chunks & ~7) * 16) + row_bytes;
    return lane_off + (u32)(chunks * 16) + row_bytes;
  }
};

// Copies a kRows x kCols tile from global memory (rows `row_stride` elements apart)
// into shared memory with cp.async; rows at or past `valid_rows` are zero-filled.
template <typename Tile, int kThreads>
__device__ __forceinline__ void load_tile_async(u32 smem_base, const u16 *gmem,
                                                long long row_stride, int valid_rows,
                                                int tid) {
  constexpr int kTotal = Tile::kRowCount * Tile::kChunks;
  constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
  constexpr int kRowStep = kThreads / Tile::kChunks;  // rows one pass of the block covers
  if constexpr (kThreads % Tile::kChunks == 0 && (!Tile::kSwizzled || kRowStep % 8 == 0)) {
    // Every pass keeps each thread's column (and swizzle phase): one running global
    // pointer and constant shared-memory steps instead of a 64-bit address per pass,
    // which the compiler would otherwise keep live across the whole K/V loop.
    const int r0 = tid / Tile::kChunks, c = tid % Tile::kChunks;
    const u16 *src = gmem + r0 * row_stride + c * 8;
    const long long step = kRowStep * row_stride;
    const u32 dst = smem_base + Tile::offset(r0, c);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int r = r0 + it * kRowStep;
      if (Tile::kRowCount % kRowStep != 0 && r >= Tile::kRowCount)
        break;
      const bool valid = r < valid_rows;
      cp_async_16(dst + it * kRowStep * Tile::kRowChunks * 16, valid ? src : gmem, valid);
      src += step;
    }
  } else {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      int i = tid + it * kThreads;
      if (kTotal % kThreads != 0 && i >= kTotal)
        break;
      int r = i / Tile::kChunks, c = i % Tile::kChunks;
      bool valid = r < valid_rows;
      const u16 *src = valid ? gmem + r * row_stride + c * 8 : gmem;
      cp_async_16(smem_base + Tile::offset(r, c), src, valid);
    }
  }
}

}  // namespace fj
