// Family dec_mma on the host: the tile rules that mirror templates/dec_mma.cuh
// (DecMmaConfig) and the emitter. generator/spec.cpp and emit.cpp dispatch here.
// A decode tile's block_m is the packed query rows (query positions x the query heads
// of one KV head) per CTA, block_n the keys per pipeline stage, split over the warps
// that a row tile leaves (warps / (block_m / 16)).
#pragma once

#include "generator/emit.h"
#include "generator/spec.h"

#include "llvm/Support/Error.h"

namespace flashjit::generator {

int decMmaSharedBytes(const KernelSpec &spec, const TileConfig &tile);
llvm::Error validateDecMmaTile(const KernelSpec &spec, const TileConfig &tile);
TileConfig decMmaDefaultTile(const KernelSpec &spec);

std::string decMmaConfigBlock(const KernelSpec &spec, const TileConfig &tile);
// The module (split kernel, combine, append). Expects a valid spec and tile.
llvm::Expected<EmittedKernel> emitDecMma(const KernelSpec &spec, const TileConfig &tile);

} // namespace flashjit::generator
