#include "generator/bwd_mma.h"

#include "generator/emit_common.h"
#include "generator/templates.h"
#include "generator/smem_layout.h"
#include "support/error.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <vector>

namespace flashjit::generator {
namespace {

// Registers a thread needs beyond the accumulators the estimate counts (addresses,
// fragments in flight, loop state): where the estimate starts to mean spills.
constexpr int kOverheadRegisters = 64;
constexpr int kMaxRegisters = 255;

int keyTilesPerWarp(const TileConfig &tile) { return tile.blockN / tile.warps / 16; }

// Accumulator registers per thread of the main kernel (its worst pass): dK and/or dV,
// plus P^T and dP^T of one step; and of the dq kernel: dQ, S and dP.
int mainAccumulators(const KernelSpec &spec, const TileConfig &tile) {
  int kt = keyTilesPerWarp(tile);
  int dkdv = bwdMmaSplitPasses(spec, tile) ? std::max(spec.headDim, spec.headDimV)
                                           : spec.headDim + spec.headDimV;
  return kt * dkdv / 2 + kt * tile.blockM;
}
int dqAccumulators(const KernelSpec &spec, const TileConfig &tile) {
  int kt = keyTilesPerWarp(tile);
  return kt * spec.headDim / 2 + kt * tile.blockM;
}

} // namespace

bool bwdMmaSplitPasses(const KernelSpec &spec, const TileConfig &tile) {
  return keyTilesPerWarp(tile) * (spec.headDim + spec.headDimV) / 2 > 128;
}

int bwdMmaMainSharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  int stage = smemTileBytes(tile.blockM, spec.headDim) +
              smemTileBytes(tile.blockM, spec.headDimV) + 2 * tile.blockM * 4;
  return smemTileBytes(tile.blockN, spec.headDim) + smemTileBytes(tile.blockN, spec.headDimV) +
         tile.stages * stage + smemTileBytes(tile.blockN, tile.blockM);
}

int bwdMmaDqSharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  int stage = smemTileBytes(tile.blockM, spec.headDim) + smemTileBytes(tile.blockM, spec.headDimV);
  return smemTileBytes(tile.blockN, spec.headDim) + smemTileBytes(tile.blockN, spec.headDimV) +
         tile.stages * stage;
}

int bwdMmaSharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  return std::max(bwdMmaMainSharedBytes(spec, tile), bwdMmaDqSharedBytes(spec, tile));
}

llvm::Error validateBwdMmaTile(const KernelSpec &spec, const TileConfig &tile) {
  if (tile.warps != 4 && tile.warps != 8)
    return makeError(ErrorCode::InvalidValue, "tile {0}: bwd_mma takes 4 or 8 warps",
                     tile.key());
  if (tile.blockN % tile.warps != 0 ||
      (tile.blockN / tile.warps != 16 && tile.blockN / tile.warps != 32))
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: bwd_mma block_n (keys per CTA) must be 16 or 32 key rows per "
                     "warp",
                     tile.key());
  if (tile.blockM != 16 && tile.blockM != 32 && tile.blockM != 64 && tile.blockM != 128)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: bwd_mma block_m (queries per step) must be 16, 32, 64 or 128",
                     tile.key());
  if (tile.stages > 3)
    return makeError(ErrorCode::InvalidValue, "tile {0}: bwd_mma takes 2 or 3 stages",
                     tile.key());
  int worst = std::max(mainAccumulators(spec, tile), dqAccumulators(spec, tile));
  if (worst + kOverheadRegisters > kMaxRegisters)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: needs about {1} registers per thread for {2} (at most {3})",
                     tile.key(), worst + kOverheadRegisters, spec.key(), kMaxRegisters);
  return llvm::Error::success();
}

TileConfig bwdMmaDefaultTile(const KernelSpec &spec) {
  int dmax = std::max(spec.headDim, spec.headDimV);
  // The largest query step that compiled without spills for sm_80 and sm_90a (nvcc and
  // NVRTC 13.0), over 8 warps of 16 key rows: 64 queries a step (d <= 64) or 32 (beyond;
  // past d = 128 in two passes, dV then dK and dQ). Where 128 keys of K and V do not fit
  // the target's shared memory (d > 128 on sm_80, 163 KB), 4 warps over 64 keys. Steps
  // halve until the tile fits. Measured on an H100 (docs/PERF.md, b2): at d = 256,
  // bm32.bn128.w8 runs 1.26x bm32.bn64.w4.
  std::vector<TileConfig> candidates;
  if (dmax <= 64)
    candidates = {{64, 128, 8, 2}};
  else if (dmax <= 128)
    candidates = {{32, 128, 8, 2}};
  else
    candidates = {{32, 128, 8, 2}, {32, 64, 4, 2}};
  for (size_t i = 0; i < candidates.size(); ++i) {
    TileConfig tile = candidates[i];
    while (true) {
      llvm::Error err = validateTile(spec, tile);
      if (!err)
        return tile;
      llvm::consumeError(std::move(err));
      if (tile.blockM == 16)
        break;
      tile.blockM /= 2;
    }
  }
  // Nothing fits (a target with little shared memory): the smallest step of the last
  // candidate, which validateSpec's callers report.
  TileConfig last = candidates.back();
  last.blockM = 16;
  return last;
}

// Mirrors bwd_mma::DqTiled::kConvertRows (the generated source asserts that they agree).
constexpr int kTiledDqConvertRows = 64;

int bwdPrepRowsPerCta(const KernelSpec &spec) {
  // Mirrors bwd_mma::prep_rows_per_cta: a row's 16-byte chunks of dO take the power of
  // two lanes that covers them, eight warps.
  int lanes = 1;
  while (lanes < spec.headDimV / 8 && lanes < 32)
    lanes *= 2;
  return 8 * (32 / lanes);
}

std::string bwdMmaSharedEntryPoints(const KernelSpec &spec, llvm::StringRef dqConfig,
                                    bool tiledDq, int accumColumns) {
  // The convert kernel's accumulator columns, where they are more than the head dim.
  const std::string padded =
      accumColumns > spec.headDim ? llvm::formatv(", {0}", accumColumns).str() : "";
  return llvm::formatv("static_assert(fj::bwd_mma::prep_rows_per_cta<{2}>() == {5}, \"host and "
                       "device disagree on the prep kernel's rows\");\n"
                       "static_assert(fj::bwd_mma::DqTiled::kConvertRows == {6}, \"host and "
                       "device disagree on the convert kernel's rows\");\n"
                       "extern \"C\" __global__ void __launch_bounds__(256)\n"
                       "flashjit_bwd_prep(const FjBackwardParams params) {{\n"
                       "  fj::bwd_mma::run_prep<{0}, {2}>(params);\n"
                       "}\n"
                       "extern \"C\" __global__ void __launch_bounds__(256)\n"
                       "flashjit_bwd_convert_dq(const FjBackwardParams params) {{\n"
                       "  fj::bwd_mma::run_convert<{0}, {1}, {4}{7}>(params);\n"
                       "}\n"
                       "extern \"C\" __global__ void __launch_bounds__({3}::kThreads, 1)\n"
                       "flashjit_bwd_dq(const FjBackwardParams params) {{\n"
                       "  extern __shared__ __align__(128) unsigned char fj_smem[];\n"
                       "  fj::bwd_mma::run_dq<{3}>(params, fj_smem);\n"
                       "}\n",
                       elementTypeName(spec.dtype), spec.headDim, spec.headDimV, dqConfig,
                       tiledDq ? "true" : "false", bwdPrepRowsPerCta(spec),
                       kTiledDqConvertRows, padded)
      .str();
}

BackwardEntries bwdMmaSharedEntries(const KernelSpec &spec, const TileConfig &dqTile,
                                    bool tiledDq) {
  BackwardEntries e;
  e.enabled = true;
  e.prep = "flashjit_bwd_prep";
  e.convert = "flashjit_bwd_convert_dq";
  e.dq = "flashjit_bwd_dq";
  e.dqRowsPerCta = dqTile.blockN;
  e.dqSharedBytes = bwdMmaDqSharedBytes(spec, dqTile);
  e.dqThreads = dqTile.warps * 32;
  e.dqAccumColumns = spec.headDim;
  e.tiledDq = tiledDq;
  // convert: one warp a row, or the tiled accumulator's 64-row groups.
  e.auxRowsPerCta = tiledDq ? kTiledDqConvertRows : 8;
  e.prepRowsPerCta = bwdPrepRowsPerCta(spec);
  return e;
}

// One block per multiprocessor is enough (the build runs once per mask): without the
// minimum, ptxas held the builder to 40 registers and it spilled, which the tuner
// rejects for the whole module.
std::string bwdBlockStepsEntryPoint(const KernelSpec &spec) {
  if (spec.features.maskMod.empty())
    return "";
  return llvm::formatv("\nextern \"C\" __global__ void __launch_bounds__({1}, 1)\n"
                       "{0}(const FjBackwardParams params, unsigned *steps, int *counts,\n"
                       "    int *slots, unsigned *bits, int *used, int shared_heads) {{\n"
                       "  static_assert(fj::bwd_mma::kBuildThreads == {1}, \"the builder's block\");\n"
                       "  fj::bwd_mma::build_block_steps<FjConfig>(params, steps, counts, slots,\n"
                       "                                           bits, used, shared_heads != 0);\n"
                       "}\n",
                       kBackwardBlockStepsEntry, kBackwardBlockStepsThreads)
      .str();
}

std::string bwdMmaConfigBlock(const KernelSpec &spec, const TileConfig &tile) {
  const bool split = bwdMmaSplitPasses(spec, tile);
  std::string out = featuresBlock(spec.features);
  out += llvm::formatv(
      "// ---- configuration: {0} / {1} ----\n"
      "typedef fj::BwdMmaConfig<{2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}{13}> FjConfig;\n"
      "static_assert(FjConfig::kSmemBytes == {10}, \"host and device disagree on shared "
      "memory\");\n"
      "static_assert(FjConfig::kDqSmemBytes == {11}, \"host and device disagree on the dq "
      "kernel's shared memory\");\n"
      "static_assert(FjConfig::kSplitPasses == {12}, \"host and device disagree on the "
      "passes\");\n\n",
      spec.key(), tile.key(), elementTypeName(spec.dtype), spec.headDim, spec.headDimV,
      tile.blockM, tile.blockN, tile.warps, tile.stages, spec.causal ? "true" : "false",
      bwdMmaMainSharedBytes(spec, tile), bwdMmaDqSharedBytes(spec, tile),
      split ? "true" : "false", spec.features.any() ? ", FjFeatures" : "");
  out += bwdMmaSharedEntryPoints(spec, "FjConfig", false);
  auto pass = [](llvm::StringRef name, int pass) {
    return llvm::formatv("extern \"C\" __global__ void __launch_bounds__(FjConfig::kThreads, 1)\n"
                         "{0}(const FjBackwardParams params) {{\n"
                         "  extern __shared__ __align__(128) unsigned char fj_smem[];\n"
                         "  fj::bwd_mma::run_main<FjConfig, {1}>(params, fj_smem);\n"
                         "}\n",
                         name, pass)
        .str();
  };
  if (split)
    out += pass("flashjit_bwd_main_dv", 1) + pass("flashjit_bwd_main_dk", 2);
  else
    out += pass("flashjit_bwd_main", 0);
  return out + bwdBlockStepsEntryPoint(spec);
}

llvm::Expected<EmittedKernel> emitBwdMma(const KernelSpec &spec, const TileConfig &tile) {
  auto body = inlineTemplates(familyTemplates(Family::BwdMma));
  if (!body)
    return body.takeError();
  EmittedKernel kernel;
  kernel.source = generatedHeader(spec.key() + " / " + tile.key(),
                                  familyFingerprint(Family::BwdMma)) +
                  *body + bwdMmaConfigBlock(spec, tile);
  // A mask_mod's errors point at the user's lines (emit.cpp's userFunction).
  kernel.source = resumeLineNumbers(std::move(kernel.source), kProgramName);
  BackwardEntries &e = kernel.backward;
  e = bwdMmaSharedEntries(spec, tile, /*tiledDq=*/false);
  if (bwdMmaSplitPasses(spec, tile))
    e.passes = {"flashjit_bwd_main_dv", "flashjit_bwd_main_dk"};
  else
    e.passes = {"flashjit_bwd_main"};
  e.keysPerCta = tile.blockN;
  if (!spec.features.maskMod.empty())
    e.blockSteps = kBackwardBlockStepsEntry;
  e.queryRowsPerStep = tile.blockM;
  kernel.entryName = e.passes.front();
  kernel.options = compileOptions();
  kernel.threads = tile.warps * 32;
  kernel.sharedBytes = bwdMmaMainSharedBytes(spec, tile);
  kernel.blockM = tile.blockM;
  return kernel;
}

} // namespace flashjit::generator
