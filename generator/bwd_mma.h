// Family bwd_mma on the host: the tile rules that mirror templates/bwd_mma.cuh
// (BwdMmaConfig) and the emitter. generator/spec.cpp and emit.cpp dispatch here.
#pragma once

#include "generator/emit.h"
#include "generator/spec.h"

#include "llvm/Support/Error.h"

namespace flashjit::generator {

// Whether the main kernel runs as two passes (dV, then dK and dQ) because dK and dV
// together would not fit in the registers (BwdMmaConfig::kSplitPasses).
bool bwdMmaSplitPasses(const KernelSpec &spec, const TileConfig &tile);

// Dynamic shared memory of the main kernel (BwdMmaConfig::kSmemBytes) and of the
// deterministic dq kernel (kDqSmemBytes).
int bwdMmaMainSharedBytes(const KernelSpec &spec, const TileConfig &tile);
int bwdMmaDqSharedBytes(const KernelSpec &spec, const TileConfig &tile);
// The larger of the two: what the tile needs of the target.
int bwdMmaSharedBytes(const KernelSpec &spec, const TileConfig &tile);

llvm::Error validateBwdMmaTile(const KernelSpec &spec, const TileConfig &tile);
TileConfig bwdMmaDefaultTile(const KernelSpec &spec);

// The kernels every backward module takes from bwd_mma (templates/bwd_mma.cuh): prep,
// convert and the deterministic dq kernel. Their entry points, for a module whose dq
// configuration is the typedef `dqConfig`, and their names and launch geometry, for the
// tile that configuration was made from (passes and keysPerCta are the family's own).
// `tiledDq`: convert reads, and the launch zeroes, the dQ accumulator in its tiled layout
// (bwd_wgmma's, fj::bwd_mma::DqTiled) rather than the row-major one, of `accumColumns`
// columns a head where that is more than the head dim (bwd_wgmma's padded head dims).
// With a mask_mod: the kernel that builds the block mask's step lists
// (bwd_mma::build_block_steps) at FjConfig's tiles (kBackwardBlockStepsEntry); "" without.
std::string bwdBlockStepsEntryPoint(const KernelSpec &spec);
std::string bwdMmaSharedEntryPoints(const KernelSpec &spec, llvm::StringRef dqConfig,
                                    bool tiledDq, int accumColumns = 0);
BackwardEntries bwdMmaSharedEntries(const KernelSpec &spec, const TileConfig &dqTile,
                                    bool tiledDq);
// Query rows per CTA of the prep kernel (templates/bwd_mma.cuh, prep_rows_per_cta).
int bwdPrepRowsPerCta(const KernelSpec &spec);

// The generated configuration block and entry points (`flashjit gen --config-only`).
std::string bwdMmaConfigBlock(const KernelSpec &spec, const TileConfig &tile);
// The module: templates inlined, then the configuration block. Expects a valid spec
// and tile.
llvm::Expected<EmittedKernel> emitBwdMma(const KernelSpec &spec, const TileConfig &tile);

} // namespace flashjit::generator
