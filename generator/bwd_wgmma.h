// Family bwd_wgmma on the host: the tile rules that mirror templates/bwd_wgmma.cuh
// (BwdWgmmaConfig) and the emitter. generator/spec.cpp and emit.cpp dispatch here.
//
// A bwd_wgmma tile: block_m query rows per step (64 or 128), block_n keys per CTA on two
// consumer warpgroups and a serving one (warps = 12), 2 or 3 stages of Q and dO. Up to
// head dim 128 each consumer takes 64 keys (block_n 128); above it the consumers split
// the head dim of 64 keys (block_n 64, block_m 64, one or two stages).
#pragma once

#include "generator/emit.h"
#include "generator/spec.h"

#include <optional>
#include <string>

#include "llvm/Support/Error.h"

namespace flashjit::generator {

// Registers per thread after setmaxnreg (BwdWgmmaConfig): the two consumer warpgroups'
// and the serving warpgroup's; one CTA of 384 threads at 168 each at launch.
constexpr int kBwdWgmmaConsumerRegisters = 240;
constexpr int kBwdWgmmaServerRegisters = 24;

// Whether the family takes the spec's head dims (the target is validateSpec's): head_dim
// and head_dim_v each a multiple of 8 from 32 to 256. The kernel computes on whole
// 128-byte swizzle panels whose dK and dV accumulators fit two warpgroups' registers: 64,
// 128, or 256 split between them (bwdWgmmaPaddedHeadDim, which holds both head dims), the
// columns past each head dim zeros (TMA's and cp.async's fill) that no store writes back.
// Other head dims run bwd_mma.
bool bwdWgmmaSupportsHeadDims(const KernelSpec &spec);
// The head dim the kernel computes on: 64, 128 or 256, the least that holds the spec's
// head_dim and head_dim_v (BwdWgmmaConfig::kHeadDim; kValidDim and kValidDimV are the
// spec's).
int bwdWgmmaPaddedHeadDim(const KernelSpec &spec);
int bwdWgmmaPaddedHeadDim(int headDim);

// With a split head dim (padded 256), how many 64-column panels of dK, dV and dQ each
// consumer takes, consumer 1 the panels after consumer 0's (BwdWgmmaConfig::kSplit,
// split_panels): only the panels that hold the spec's columns, the busier consumer's
// count as low as they allow, each consumer at least one panel of each output; even
// halves of the 256 columns where a head dim fills one panel only.
struct BwdSplitPanels {
  int k[2], v[2], q[2];
  bool uniform() const { return k[0] == k[1] && v[0] == v[1] && q[0] == q[1]; }
};
BwdSplitPanels bwdWgmmaSplitPanels(const KernelSpec &spec);

// Why the family does not take the spec's attention features, or nothing when it does:
// soft-capping with ALiBi (soft-capping's derivative is recovered from P, which then
// holds the bias too); at head dim 64, where the space has one tile, soft-capping with
// causal or a window (it spills 4-20 bytes) and ALiBi with no mask at all (neither
// causal, a window nor a mask_mod; 24 bytes). bwd_mma runs those.
std::optional<std::string> bwdWgmmaFeatureRefusal(const KernelSpec &spec);

// Keys per CTA (tile.block_n) for the spec's head dim: 128, or 64 where the consumers
// split the head dim (BwdWgmmaConfig::kSplitHead).
int bwdWgmmaKeysPerCta(const KernelSpec &spec);
// The fewest stages of the Q and dO ring the template takes (BwdWgmmaConfig's
// static_assert): 1 where the consumers split the head dim, else 2; at most 3.
int bwdWgmmaMinStages(const KernelSpec &spec);
constexpr int kBwdWgmmaMaxStages = 3;

// Dynamic shared memory of the main kernel (BwdWgmmaConfig::kSmemBytes), and the larger
// of it and the deterministic dq kernel's (bwd_mma's, which the module reuses).
int bwdWgmmaMainSharedBytes(const KernelSpec &spec, const TileConfig &tile);
int bwdWgmmaSharedBytes(const KernelSpec &spec, const TileConfig &tile);

// Accumulator registers per thread at the main kernel's peak: dK and dV (64 keys x head
// dim over a warpgroup's 128 threads, each) and S^T and dP^T (64 keys x block_m); with a
// split head dim, the busier consumer's panels of dK, dV and dQ (bwdWgmmaSplitPanels). The
// tile rule adds an overhead to it; the tuner's model uses it as is.
int bwdWgmmaAccumulatorRegisters(const KernelSpec &spec, const TileConfig &tile);

llvm::Error validateBwdWgmmaTile(const KernelSpec &spec, const TileConfig &tile);
TileConfig bwdWgmmaDefaultTile(const KernelSpec &spec);

// The generated configuration block and entry points (`flashjit gen --config-only`).
std::string bwdWgmmaConfigBlock(const KernelSpec &spec, const TileConfig &tile);
// The module: templates inlined, the wgmma wrappers, then the configuration block.
// Expects a valid spec and tile.
llvm::Expected<EmittedKernel> emitBwdWgmma(const KernelSpec &spec, const TileConfig &tile);

} // namespace flashjit::generator
