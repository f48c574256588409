// How templates/fj_smem.cuh lays out a shared-memory tile, for the host's mirrors of
// the kernels' shared-memory sizes.
#pragma once

namespace flashjit::generator {

// Bytes of a rows x cols tile of 16-bit elements (SmemTile<rows, cols>::kBytes): rows of
// 16-byte chunks, padded to an odd chunk count unless it is a multiple of 8 (swizzled).
int smemTileBytes(int rows, int cols);

} // namespace flashjit::generator
