#include "generator/dec_mma.h"

#include "generator/emit.h"
#include "generator/emit_common.h"
#include "generator/templates.h"
#include "generator/smem_layout.h"
#include "support/error.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace flashjit::generator {
namespace {

// Registers a thread needs beyond what the estimate counts (addresses, loop state,
// fragments in flight), as for bwd_mma.
constexpr int kOverheadRegisters = 64;
constexpr int kMaxRegisters = 255;

int keySlices(const TileConfig &tile) { return tile.warps / (tile.blockM / 16); }

// Live registers per thread: O (head_dim_v / 2), S of the warp's keys, and Q's
// fragments when they stay in registers (head_dim <= 128).
int registerEstimate(const KernelSpec &spec, const TileConfig &tile) {
  int keysPerWarp = tile.blockN / keySlices(tile);
  int q = spec.headDim <= 128 ? (spec.headDim / 16 + 1) * 4 : 0;
  return spec.headDimV / 2 + keysPerWarp / 2 + q;
}

} // namespace

int decMmaSharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  // An FP8 cache's tiles hold bytes: a row of d values is d / 2 16-bit units
  // (DecMmaConfig::kCachePerUnit).
  const int perUnit = spec.dtype == DType::E4M3 ? 2 : 1;
  int pipe = smemTileBytes(tile.blockM, spec.headDim) +
             tile.stages * (smemTileBytes(tile.blockN, spec.headDim / perUnit) +
                            smemTileBytes(tile.blockN, spec.headDimV / perUnit));
  int merge = keySlices(tile) > 1 ? tile.warps * 16 * (spec.headDimV + 2) * 4 : 0;
  return std::max(pipe, merge);
}

llvm::Error validateDecMmaTile(const KernelSpec &spec, const TileConfig &tile) {
  if (tile.blockM != 16 && tile.blockM != 32 && tile.blockM != 64)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: dec_mma block_m (packed query rows) must be 16, 32 or 64",
                     tile.key());
  if (tile.warps != 1 && tile.warps != 2 && tile.warps != 4 && tile.warps != 8)
    return makeError(ErrorCode::InvalidValue, "tile {0}: dec_mma takes 1, 2, 4 or 8 warps",
                     tile.key());
  if (tile.warps % (tile.blockM / 16) != 0)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: dec_mma needs a warp per 16 rows (warps a multiple of "
                     "block_m / 16)",
                     tile.key());
  int slices = keySlices(tile);
  if (tile.blockN % slices != 0 || (tile.blockN / slices) % 16 != 0)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: each of the {1} warps along the keys must take a multiple "
                     "of 16 keys of block_n",
                     tile.key(), slices);
  if (tile.stages > 6)
    return makeError(ErrorCode::InvalidValue, "tile {0}: dec_mma takes 2 to 6 stages",
                     tile.key());
  int estimate = registerEstimate(spec, tile) + kOverheadRegisters;
  if (estimate > kMaxRegisters)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: needs about {1} registers per thread for {2} (at most {3})",
                     tile.key(), estimate, spec.key(), kMaxRegisters);
  return llvm::Error::success();
}

TileConfig decMmaDefaultTile(const KernelSpec &spec) {
  // One row tile of 16 (a decode step of up to 16 query heads per KV head), 4 warps over
  // 64 keys, 3 stages: two tiles of K and V in flight per CTA (64 KB at d = 128), which
  // with two CTAs per SM covers the memory's latency. Wider heads halve the keys.
  int dmax = std::max(spec.headDim, spec.headDimV);
  TileConfig tile = dmax <= 128 ? TileConfig{16, 64, 4, 3} : TileConfig{16, 32, 2, 3};
  while (true) {
    llvm::Error err = validateTile(spec, tile);
    if (!err)
      return tile;
    llvm::consumeError(std::move(err));
    if (tile.stages > 2)
      --tile.stages;
    else if (tile.blockN > 16 && keySlices(tile) == 1)
      tile.blockN /= 2;
    else if (tile.warps > 1)
      tile = {16, tile.blockN / 2, tile.warps / 2, 3};
    else
      return tile;  // nothing fits: validateTile's callers report it
  }
}

std::string decMmaConfigBlock(const KernelSpec &spec, const TileConfig &tile) {
  // The features follow the cache's type in the config.
  std::string tail = spec.dtype == DType::E4M3 ? ", true" : "";
  if (spec.features.any())
    tail = spec.dtype == DType::E4M3 ? ", true, FjFeatures" : ", false, FjFeatures";
  return featuresBlock(spec.features) + llvm::formatv(
             "// ---- configuration: {0} / {1} ----\n"
             "typedef fj::DecMmaConfig<{2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}{11}> FjConfig;\n"
             "static_assert(FjConfig::kSmemBytes == {10}, \"host and device disagree on "
             "shared memory\");\n\n"
             "extern \"C\" __global__ void __launch_bounds__(FjConfig::kThreads)\n"
             "flashjit_dec_split(const FjDecodeParams params) {{\n"
             "  extern __shared__ __align__(128) unsigned char fj_smem[];\n"
             "  fj::dec_mma::run<FjConfig>(params, fj_smem);\n"
             "}\n"
             "extern \"C\" __global__ void __launch_bounds__(128)\n"
             "flashjit_dec_combine(const FjDecodeParams params) {{\n"
             "  fj::dec_mma::run_combine<{2}, {4}>(params);\n"
             "}\n"
             "extern \"C\" __global__ void __launch_bounds__(128)\n"
             "flashjit_dec_append(const FjDecodeParams params) {{\n"
             "  fj::dec_mma::run_append<{2}, {3}, {4}{12}>(params);\n"
             "}\n",
             spec.key(), tile.key(), elementTypeName(spec.outputDtype()), spec.headDim,
             spec.headDimV, tile.blockM, tile.blockN, tile.warps, tile.stages,
             spec.causal ? "true" : "false", decMmaSharedBytes(spec, tile), tail,
             spec.dtype == DType::E4M3 ? ", true" : "")
      .str();
}

llvm::Expected<EmittedKernel> emitDecMma(const KernelSpec &spec, const TileConfig &tile) {
  auto body = inlineTemplates(familyTemplates(Family::DecMma));
  if (!body)
    return body.takeError();
  EmittedKernel kernel;
  // An FP8 cache's kernels see the params' descale fields, ALiBi's its slopes, the
  // user's code its args (fj_decode_params.h).
  const bool mods = !spec.features.scoreMod.empty() || !spec.features.maskMod.empty();
  kernel.source = generatedHeader(spec.key() + " / " + tile.key(),
                                  familyFingerprint(Family::DecMma)) +
                  (spec.dtype == DType::E4M3 ? "#define FJ_DECODE_FP8_CACHE 1\n" : "") +
                  (spec.features.alibi ? "#define FJ_DECODE_ALIBI 1\n" : "") +
                  (mods ? "#define FJ_DECODE_MODS 1\n" : "") + *body +
                  decMmaConfigBlock(spec, tile);
  kernel.source = resumeLineNumbers(std::move(kernel.source), kProgramName);
  kernel.entryName = "flashjit_dec_split";
  kernel.decode.enabled = true;
  kernel.decode.combine = "flashjit_dec_combine";
  kernel.decode.append = "flashjit_dec_append";
  kernel.decode.blockN = tile.blockN;
  // A window's left bound: a row tile reads the key tiles of the window alone
  // (tuner::SplitPolicy splits those).
  kernel.decode.windowLeft = spec.features.window ? spec.features.windowLeft : -1;
  kernel.decode.headDimV = spec.headDimV;
  auto target = targetInfo(spec.target);
  if (!target)
    return target.takeError();
  kernel.decode.dependentCombine = target->smVersion >= 90;  // fj_common.cuh's pdl_wait
  kernel.options = compileOptions();
  kernel.threads = tile.warps * 32;
  kernel.sharedBytes = decMmaSharedBytes(spec, tile);
  kernel.blockM = tile.blockM;
  return kernel;
}

} // namespace flashjit::generator
