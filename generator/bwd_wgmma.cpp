#include "generator/bwd_wgmma.h"

#include "generator/bwd_mma.h"
#include "generator/emit_common.h"
#include "generator/templates.h"
#include "generator/wgmma_wrappers.h"
#include "support/error.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace flashjit::generator {
namespace {

constexpr int kWarps = 12;  // two consumer warpgroups and one that loads and sends dQ
constexpr int kMaxRegisters = kBwdWgmmaConsumerRegisters;
constexpr int kMaxSharedBytes = 227 * 1024;
// Registers a thread needs beyond the estimate's arrays (addresses, loop state).
constexpr int kOverheadRegisters = 24;

// Above head dim 128 the consumers split the head dim (BwdWgmmaConfig::kSplitHead).
bool splitsHead(const KernelSpec &spec) { return bwdWgmmaPaddedHeadDim(spec) > 128; }

// The columns of the head dim one warpgroup's dQ product covers (BwdWgmmaConfig::kDqCols):
// the two warpgroups split the step's rows into 64-row slices, then the head dim. (With a
// split head dim the products' widths are bwdWgmmaSplitPanels'; this half of the panels
// only passes the tile rule's check.)
int dqColumns(const KernelSpec &spec, const TileConfig &tile) {
  const int rowSlices = tile.blockM / 64;
  return rowSlices > 0 && 2 % rowSlices == 0 ? bwdWgmmaPaddedHeadDim(spec) / (2 / rowSlices)
                                             : 0;
}

// The deterministic dq kernel is bwd_mma's (templates/bwd_mma.cuh, run_dq), on the tile
// bwd_mma would take for the spec: its 8 warps are the main kernel's 256 threads, which
// the host launches it with.
KernelSpec mmaSpec(const KernelSpec &spec) {
  KernelSpec mma = spec;
  mma.family = Family::BwdMma;
  return mma;
}
TileConfig dqTile(const KernelSpec &spec) { return bwdMmaDefaultTile(mmaSpec(spec)); }

// The main pass walks tiles on a persistent grid (BwdWgmmaConfig::kTileWalk), and with
// causal attention claims them from a counter (kClaimsTiles).
bool walksTiles(const KernelSpec &spec) {
  return !splitsHead(spec) && spec.features.maskMod.empty();
}
bool claimsTiles(const KernelSpec &spec) { return walksTiles(spec) && spec.causal; }

} // namespace

BwdSplitPanels bwdWgmmaSplitPanels(const KernelSpec &spec) {
  // Mirrors templates/bwd_wgmma.cuh's split_panels.
  const int pk = (spec.headDim + 63) / 64, pv = (spec.headDimV + 63) / 64;
  BwdSplitPanels best{{2, 2}, {2, 2}, {2, 2}};
  if (pk < 2 || pv < 2)
    return best;
  int bestCost = 1 << 20;
  for (int k = 1; k < pk; ++k)
    for (int v = 1; v < pv; ++v)
      for (int q = 1; q < pk; ++q) {
        const int n0 = k + v + q, n1 = 2 * pk + pv - n0;
        const int far = std::abs(2 * k - pk) + std::abs(2 * v - pv) + std::abs(2 * q - pk);
        const int cost = std::max(n0, n1) * 64 + far;
        if (cost < bestCost) {
          bestCost = cost;
          best = BwdSplitPanels{{k, pk - k}, {v, pv - v}, {q, pk - q}};
        }
      }
  return best;
}

int bwdWgmmaAccumulatorRegisters(const KernelSpec &spec, const TileConfig &tile) {
  if (splitsHead(spec)) {
    const BwdSplitPanels plan = bwdWgmmaSplitPanels(spec);
    // 64 columns of 64 rows over a warpgroup: 32 registers a thread.
    return 32 * std::max(plan.k[0] + plan.v[0] + plan.q[0], plan.k[1] + plan.v[1] + plan.q[1]);
  }
  // dK and dV of the spec's columns (consume_whole).
  return (spec.headDim + spec.headDimV) / 2 + tile.blockM;
}

bool bwdWgmmaSupportsHeadDims(const KernelSpec &spec) {
  auto takes = [](int d) { return d % 8 == 0 && d >= 32 && d <= 256; };
  return takes(spec.headDim) && takes(spec.headDimV);
}

int bwdWgmmaPaddedHeadDim(const KernelSpec &spec) {
  return bwdWgmmaPaddedHeadDim(std::max(spec.headDim, spec.headDimV));
}
int bwdWgmmaPaddedHeadDim(int headDim) { return headDim <= 64 ? 64 : headDim <= 128 ? 128 : 256; }

std::optional<std::string> bwdWgmmaFeatureRefusal(const KernelSpec &spec) {
  const Features &f = spec.features;
  if (f.softcap > 0 && f.alibi)
    return llvm::formatv("bwd_wgmma does not take softcap with alibi ({0}): it recovers "
                         "soft-capping's derivative from P, which holds ALiBi's bias too; "
                         "bwd_mma runs it",
                         f.keySuffix().substr(1))
        .str();
  if (f.softcap > 0 && bwdWgmmaPaddedHeadDim(spec) == 64 && (spec.causal || f.window))
    return std::string("bwd_wgmma does not take softcap with causal or a window at head dims "
                       "up to 64: its one tile spills; bwd_mma runs it");
  return std::nullopt;
}

int bwdWgmmaKeysPerCta(const KernelSpec &spec) { return splitsHead(spec) ? 64 : 128; }

int bwdWgmmaMinStages(const KernelSpec &spec) { return splitsHead(spec) ? 1 : 2; }

int bwdWgmmaMainSharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  // Mirrors BwdWgmmaConfig::kSmemBytes: K, V, the Q and dO rings, two dS^T buffers (and
  // two of P^T with a split head dim), lse and D per stage (block_m + 4 floats each), the
  // two consumers' fp32 dQ (64 rows x their columns; none with a split head dim, whose
  // consumers add dQ from registers), the mbarriers (the ring's full and empty, each
  // slice's written and read), each consumer's two dQ destination slots, and with
  // claimed tiles two tile slots with their full and empty barriers and the request.
  const int d = bwdWgmmaPaddedHeadDim(spec);
  const int dqSlice = splitsHead(spec) ? 0 : 64 * dqColumns(spec, tile) * 4;
  const int scoreBuffers = splitsHead(spec) ? 4 : 2;
  return 1024 + 2 * tile.blockN * d * 2 + 2 * tile.stages * tile.blockM * d * 2 +
         scoreBuffers * tile.blockN * tile.blockM * 2 + tile.stages * 2 * (tile.blockM + 4) * 4 +
         2 * dqSlice + (2 * tile.stages + 2 * 2) * 8 + 2 * 2 * 8 +
         (claimsTiles(spec) ? (2 * 3 + 1) * 8 : 0);
}

int bwdWgmmaSharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  return std::max(bwdWgmmaMainSharedBytes(spec, tile),
                  bwdMmaDqSharedBytes(mmaSpec(spec), dqTile(spec)));
}

llvm::Error validateBwdWgmmaTile(const KernelSpec &spec, const TileConfig &tile) {
  const int keys = bwdWgmmaKeysPerCta(spec);
  if (tile.warps != kWarps || tile.blockN != keys)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: bwd_wgmma at head dim {1} takes block_n = {2} keys on {3} "
                     "warps (two consumer warpgroups and one that loads and sends dQ)",
                     tile.key(), spec.headDim, keys, kWarps);
  if (splitsHead(spec) ? tile.blockM != 64 : tile.blockM != 64 && tile.blockM != 128)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: bwd_wgmma block_m (queries per step) must be {1} at head dim {2}",
                     tile.key(), splitsHead(spec) ? "64" : "64 or 128", spec.headDim);
  const int minStages = bwdWgmmaMinStages(spec);
  if (tile.stages < minStages || tile.stages > kBwdWgmmaMaxStages)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: bwd_wgmma takes {1} to {2} stages at head dim {3}", tile.key(),
                     minStages, kBwdWgmmaMaxStages, spec.headDim);
  const int cols = dqColumns(spec, tile);
  if (cols == 0 || cols % 64 != 0)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: {1}'s dQ product would split the head dim into slices of {2} "
                     "columns; it needs whole 64-column panels (block_m 128 at head dim 64)",
                     tile.key(), spec.key(), cols);
  const int regs = bwdWgmmaAccumulatorRegisters(spec, tile) + kOverheadRegisters;
  if (regs > kMaxRegisters)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: needs about {1} registers per thread for {2} (at most {3})",
                     tile.key(), regs, spec.key(), kMaxRegisters);
  const int shared = bwdWgmmaMainSharedBytes(spec, tile);
  if (shared > kMaxSharedBytes)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: needs {1} bytes of shared memory for {2} (at most {3})",
                     tile.key(), shared, spec.key(), kMaxSharedBytes);
  return llvm::Error::success();
}

TileConfig bwdWgmmaDefaultTile(const KernelSpec &spec) {
  // The one query step each head dim admits (dQ in whole panels, registers): 128 rows at
  // head dim 64, 64 at 128 and 256 (two stages: all its shared memory).
  if (splitsHead(spec))
    return TileConfig{64, bwdWgmmaKeysPerCta(spec), kWarps, 2};
  return bwdWgmmaPaddedHeadDim(spec) == 64 ? TileConfig{128, 128, kWarps, 2}
                                            : TileConfig{64, 128, kWarps, 2};
}

std::string bwdWgmmaConfigBlock(const KernelSpec &spec, const TileConfig &tile) {
  const TileConfig dq = dqTile(spec);
  // The deterministic dq kernel (bwd_mma's) recomputes P too: both configs take the
  // features. Head dims short of the panels (bwdWgmmaPaddedHeadDim) also give the main
  // kernel's config its valid columns, after the features: head_dim's, and head_dim_v's
  // where they differ.
  const int padded = bwdWgmmaPaddedHeadDim(spec);
  const std::string features = spec.features.any() ? ", FjFeatures" : "";
  std::string mainArgs = features;
  if (padded != spec.headDim || padded != spec.headDimV)
    mainArgs = llvm::formatv("{0}, {1}", features.empty() ? ", fj::NoFeatures" : features,
                             spec.headDim)
                   .str();
  if (spec.headDimV != spec.headDim)
    mainArgs += llvm::formatv(", {0}", spec.headDimV).str();
  std::string splitCheck;
  if (splitsHead(spec)) {
    const BwdSplitPanels plan = bwdWgmmaSplitPanels(spec);
    splitCheck =
        llvm::formatv("static_assert(FjConfig::kSplit.k[0] == {0} && FjConfig::kSplit.v[0] == {1} "
                      "&& FjConfig::kSplit.q[0] == {2} && FjConfig::kSplit.k[1] == {3} && "
                      "FjConfig::kSplit.v[1] == {4} && FjConfig::kSplit.q[1] == {5}, \"host and "
                      "device disagree on the consumers' panels\");\n",
                      plan.k[0], plan.v[0], plan.q[0], plan.k[1], plan.v[1], plan.q[1])
            .str();
  }
  return featuresBlock(spec.features) +
         llvm::formatv(
             "// ---- configuration: {0} / {1} ----\n"
             "typedef fj::BwdWgmmaConfig<{2}, {18}, {4}, {5}, {6}{16}> FjConfig;\n"
             "typedef fj::BwdMmaConfig<{2}, {3}, {20}, {7}, {8}, {9}, {10}, {6}{19}> FjDqConfig;\n"
             "static_assert(FjConfig::kSmemBytes == {11}, \"host and device disagree on shared "
             "memory\");\n"
             "static_assert(FjDqConfig::kDqSmemBytes == {12}, \"host and device disagree on the "
             "dq kernel's shared memory\");\n"
             "static_assert(FjConfig::kConsumerRegs == {14} && FjConfig::kServerRegs == {15}, "
             "\"host and device disagree on registers\");\n{21}\n"
             "{13}"
             "extern \"C\" __global__ void __launch_bounds__(FjConfig::kThreads, 1)\n"
             "flashjit_bwd_main(const FjBackwardParams params,\n"
             "                  const __grid_constant__ fj::TensorMap tm_q,\n"
             "                  const __grid_constant__ fj::TensorMap tm_dout) {{\n"
             "  extern __shared__ __align__(128) unsigned char fj_smem[];\n"
             "  fj::bwd_wgmma::run_main<FjConfig>(params, {{tm_q, tm_dout}, fj_smem);\n"
             "}\n{17}",
             spec.key(), tile.key(), elementTypeName(spec.dtype), spec.headDim, tile.blockM,
             tile.stages, spec.causal ? "true" : "false", dq.blockM, dq.blockN, dq.warps,
             dq.stages, bwdWgmmaMainSharedBytes(spec, tile),
             bwdMmaDqSharedBytes(mmaSpec(spec), dq),
             bwdMmaSharedEntryPoints(spec, "FjDqConfig", true, padded),
             kBwdWgmmaConsumerRegisters, kBwdWgmmaServerRegisters, mainArgs,
             bwdBlockStepsEntryPoint(spec), padded, features, spec.headDimV, splitCheck)
             .str();
}

llvm::Expected<EmittedKernel> emitBwdWgmma(const KernelSpec &spec, const TileConfig &tile) {
  llvm::ArrayRef<llvm::StringRef> files = familyTemplates(Family::BwdWgmma);
  auto common = inlineTemplates(files.drop_back());
  if (!common)
    return common.takeError();
  auto schedule = inlineTemplates(files.take_back());
  if (!schedule)
    return schedule.takeError();
  // The products' shapes: S^T and dP^T (64 keys x block_m, or half of it with a split
  // head dim), dK and dV (64 keys x the head dim with A from registers, or x half of it
  // with A = P^T, dS^T read K-major from shared memory), dQ (64 queries x a slice of the
  // head dim, dS^T and K read MN-major).
  // With a split head dim the consumers' products of dK, dV and dQ take each consumer's
  // panels (bwdWgmmaSplitPanels): one overload a width.
  const bool split = splitsHead(spec);
  const int padded = bwdWgmmaPaddedHeadDim(spec);
  std::string dkdv, dq;
  if (split) {
    const BwdSplitPanels plan = bwdWgmmaSplitPanels(spec);
    std::set<int> dkdvPanels = {plan.k[0], plan.k[1], plan.v[0], plan.v[1]};
    for (int panels : dkdvPanels)
      dkdv += emitWgmmaSmemSmem("wgmma_bwd_dkdv_ss", spec.dtype, 64 * panels, false, true);
    for (int panels : std::set<int>{plan.q[0], plan.q[1]})
      dq += emitWgmmaSmemSmem("wgmma_bwd_dq", spec.dtype, 64 * panels, true, true);
  } else {
    // dK and dV of the spec's columns only (consume_whole).
    for (int columns : std::set<int>{spec.headDim, spec.headDimV})
      dkdv += emitWgmmaRegSmem("wgmma_bwd_dkdv", spec.dtype, columns);
    dq = emitWgmmaSmemSmem("wgmma_bwd_dq", spec.dtype, dqColumns(spec, tile), true, true);
  }
  std::string wrappers =
      "// ---- generated: wgmma wrappers ----\nnamespace fj {\n" +
      emitWgmmaSmemSmem("wgmma_bwd_st", spec.dtype, split ? tile.blockM / 2 : tile.blockM, false,
                        false) +
      dkdv + dq + "}  // namespace fj\n";
  EmittedKernel kernel;
  kernel.source = generatedHeader(spec.key() + " / " + tile.key(),
                                  familyFingerprint(Family::BwdWgmma)) +
                  *common + wrappers +
                  *schedule + bwdWgmmaConfigBlock(spec, tile);
  // A mask_mod's errors point at the user's lines (emit.cpp's userFunction).
  kernel.source = resumeLineNumbers(std::move(kernel.source), kProgramName);
  BackwardEntries &e = kernel.backward;
  e = bwdMmaSharedEntries(mmaSpec(spec), dqTile(spec), /*tiledDq=*/true);
  e.dqAccumColumns = padded;  // the tiled accumulator's columns, as the main kernel's
  e.passes = {"flashjit_bwd_main"};
  e.keysPerCta = tile.blockN;
  // A walk over tiles, but not with a split head dim or a mask_mod's block mask
  // (BwdWgmmaConfig::kTileWalk), on a persistent grid. Causal tiles are unequal work: a
  // static walk over them gave CTAs up to 3x unequal work (0.64-0.84x; docs/PERF.md
  // bw10), so causal CTAs claim their tiles from a counter (kClaimsTiles).
  e.tileWalk = walksTiles(spec);
  e.claimsTiles = claimsTiles(spec);
  // Q and dO by TMA in boxes of 64 columns x block_m rows (128-byte swizzle); Q's map
  // ends at head_dim and dO's at head_dim_v, so panels past them read zeros.
  e.tma.enabled = true;
  e.tma.dtype = spec.dtype;
  e.tma.headDim = spec.headDim;
  e.tma.headDimV = spec.headDimV;
  e.tma.panelD = e.tma.panelDv = 64;
  e.tma.qRows = tile.blockM;
  if (!spec.features.maskMod.empty()) {
    e.blockSteps = kBackwardBlockStepsEntry;
    // Partly masked steps test keep bits (BwdWgmmaConfig::kStepBits), unless the
    // features also transform the scores.
    e.stepBits = !spec.features.transformsScores();
  }
  e.queryRowsPerStep = tile.blockM;
  kernel.entryName = e.passes.front();
  kernel.options = compileOptions();
  kernel.threads = tile.warps * 32;
  kernel.sharedBytes = bwdWgmmaMainSharedBytes(spec, tile);
  kernel.blockM = tile.blockM;
  return kernel;
}

} // namespace flashjit::generator
