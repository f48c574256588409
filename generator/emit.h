// The generator: a spec and a tile -> one self-contained CUDA translation unit. The
// output is the embedded templates (inlined, so the source alone says exactly what
// runs and hashes into the binary key) plus a thin configuration block and an
// extern "C" entry point.
#pragma once

#include "generator/spec.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace flashjit::generator {

// How the host describes Q, K and V to the copy engine for a kernel that loads them
// with TMA (fwd_wgmma): one rank-4 tensor map each (column, row, head, batch), boxes of
// panel columns x rows, swizzled by the panel's row bytes (64 columns: 128 B, 32: 64 B).
struct TmaOperands {
  bool enabled = false;
  DType dtype = DType::BF16;
  int headDim = 0, headDimV = 0;
  int qRows = 0, kvRows = 0;    // box rows: block_m for Q, block_n for K and V
  int oRows = 0;                // box rows of O's map (one warpgroup's); 0: no O map
  int panelD = 0, panelDv = 0;  // box columns for Q/K and for V and O
};

struct EmittedKernel {
  std::string source;
  std::string entryName;                 // the extern "C" kernel to look up
  std::vector<std::string> options;      // NVRTC options the source needs
  int threads = 0;                       // block size
  int sharedBytes = 0;                   // dynamic shared memory per block
  int blockM = 0;                        // query rows per block (grid.x = ceil(seqlen_q / blockM))
  // Kernel parameters after FjForwardParams, if enabled: the maps of Q, K, V and O, and
  // an int, 1 when the kernel may store O through its map.
  TmaOperands tma;
  // One CTA per multiprocessor walking the work tiles (grid.x = min(tiles, SMs),
  // grid.y = grid.z = 1) instead of one CTA per (query block, head, batch).
  bool persistent = false;
};

// The tuned forward kernel. Errors: NotSupported for an impossible spec,
// InvalidValue for a tile that does not fit.
llvm::Expected<EmittedKernel> emitForward(const KernelSpec &spec, const TileConfig &tile);

// The naive reference for the dtype (head dims, causal and layout are run-time
// arguments). With emulateLowPrecision the output is in the dtype and the
// intermediates are rounded to it; otherwise the output is fp32.
// Entry point: (FjForwardParams, int head_dim, int head_dim_v, int causal);
// grid (seqlen_q, heads_q, batch), `threads` threads, no dynamic shared memory.
llvm::Expected<EmittedKernel> emitReference(DType dtype, bool emulateLowPrecision,
                                            const std::string &target);

// Just the generated configuration block and entry point (what `flashjit gen
// --config-only` prints), without the inlined templates.
llvm::Expected<std::string> emitConfigBlock(const KernelSpec &spec, const TileConfig &tile);

} // namespace flashjit::generator
