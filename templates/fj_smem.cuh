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
};

// Copies a kRows x kCols tile from global memory (rows `row_stride` elements apart)
// into shared memory with cp.async; rows at or past `valid_rows` are zero-filled.
template <typename Tile, int kThreads>
__device__ __forceinline__ void load_tile_async(u32 smem_base, const u16 *gmem,
                                                long long row_stride, int valid_rows,
                                                int tid) {
  constexpr int kTotal = Tile::kRowCount * Tile::kChunks;
  constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
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

}  // namespace fj
