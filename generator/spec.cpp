#include "generator/spec.h"

#include "support/error.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

namespace flashjit::generator {

llvm::StringRef dtypeName(DType dtype) { return dtype == DType::FP16 ? "fp16" : "bf16"; }

llvm::StringRef familyName(Family family) {
  switch (family) {
  case Family::FwdMma: return "fwd_mma";
  }
  return "unknown";
}

llvm::Expected<DType> parseDType(llvm::StringRef name) {
  if (name.equals_insensitive("fp16") || name.equals_insensitive("f16") ||
      name.equals_insensitive("half"))
    return DType::FP16;
  if (name.equals_insensitive("bf16") || name.equals_insensitive("bfloat16"))
    return DType::BF16;
  return makeError(ErrorCode::InvalidValue, "unknown dtype '{0}' (expected fp16 or bf16)",
                   name);
}

llvm::Expected<Family> parseFamily(llvm::StringRef name) {
  if (name == "fwd_mma")
    return Family::FwdMma;
  return makeError(ErrorCode::NotSupported, "unknown kernel family '{0}' (available: fwd_mma)",
                   name);
}

std::string KernelSpec::key() const {
  std::string arch = target;
  llvm::erase_value(arch, '_');
  return llvm::formatv("{0}.{1}.d{2}.dv{3}.{4}.{5}", familyName(family), dtypeName(dtype),
                       headDim, headDimV, causal ? "causal" : "nocausal", arch)
      .str();
}

std::string TileConfig::key() const {
  return llvm::formatv("bm{0}.bn{1}.w{2}.s{3}", blockM, blockN, warps, stages).str();
}

llvm::Expected<TileConfig> TileConfig::parse(llvm::StringRef key) {
  llvm::SmallVector<llvm::StringRef, 4> parts;
  key.split(parts, '.');
  TileConfig tile;
  auto field = [&](llvm::StringRef part, llvm::StringRef prefix, int &out) {
    return part.consume_front(prefix) && !part.getAsInteger(10, out);
  };
  if (parts.size() != 4 || !field(parts[0], "bm", tile.blockM) ||
      !field(parts[1], "bn", tile.blockN) || !field(parts[2], "w", tile.warps) ||
      !field(parts[3], "s", tile.stages))
    return makeError(ErrorCode::InvalidValue,
                     "bad tile config '{0}' (expected e.g. bm128.bn64.w8.s2)", key);
  return tile;
}

llvm::Expected<TargetInfo> targetInfo(llvm::StringRef target) {
  llvm::StringRef rest = target;
  TargetInfo info;
  if (!rest.consume_front("sm_"))
    return makeError(ErrorCode::InvalidValue, "bad target '{0}' (expected e.g. sm_80, sm_90a)",
                     target);
  info.archSpecific = rest.consume_back("a");
  if (rest.getAsInteger(10, info.smVersion))
    return makeError(ErrorCode::InvalidValue, "bad target '{0}' (expected e.g. sm_80, sm_90a)",
                     target);
  // Opt-in shared memory per block, from the CUDA programming guide's tables.
  switch (info.smVersion) {
  case 80: case 87: info.maxSharedPerBlock = 163 * 1024; break;
  case 86: case 89: case 120: case 121: info.maxSharedPerBlock = 99 * 1024; break;
  case 90: case 100: case 103: info.maxSharedPerBlock = 227 * 1024; break;
  default:
    return makeError(ErrorCode::NotSupported,
                     "target '{0}' is not supported (fwd_mma needs sm_80 or newer: "
                     "sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a)",
                     target);
  }
  return info;
}

llvm::Error validateSpec(const KernelSpec &spec) {
  auto checkDim = [](llvm::StringRef name, int dim) -> llvm::Error {
    if (dim <= 0 || dim % 8 != 0 || dim > 256)
      return makeError(ErrorCode::NotSupported,
                       "{0} {1} is not supported: head dims must be multiples of 8 from 8 "
                       "to 256 (8, 16, 24, ..., 256)",
                       name, dim);
    return llvm::Error::success();
  };
  if (auto err = checkDim("head_dim", spec.headDim))
    return err;
  if (auto err = checkDim("head_dim_v", spec.headDimV))
    return err;
  auto info = targetInfo(spec.target);
  if (!info)
    return info.takeError();
  return llvm::Error::success();
}

namespace {
// Bytes of a rows x cols tile of 16-bit elements as templates/fj_smem.cuh lays it out.
int tileBytes(int rows, int cols) {
  int chunks = cols / 8;
  int rowChunks = chunks % 8 == 0 ? chunks : (chunks | 1);
  return rows * rowChunks * 16;
}
} // namespace

int sharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  int q = std::max(tileBytes(tile.blockM, spec.headDim), tileBytes(tile.blockM, spec.headDimV));
  int stage = tileBytes(tile.blockN, spec.headDim) + tileBytes(tile.blockN, spec.headDimV);
  return q + tile.stages * stage;
}

llvm::Error validateTile(const KernelSpec &spec, const TileConfig &tile) {
  if (tile.warps <= 0 || tile.blockM <= 0 || tile.blockN <= 0)
    return makeError(ErrorCode::InvalidValue, "tile {0}: sizes must be positive", tile.key());
  if (tile.blockM % (16 * tile.warps) != 0)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: block_m must be a multiple of 16 x warps", tile.key());
  if (tile.blockN % 16 != 0)
    return makeError(ErrorCode::InvalidValue, "tile {0}: block_n must be a multiple of 16",
                     tile.key());
  if (tile.stages < 2 || tile.stages > 8)
    return makeError(ErrorCode::InvalidValue, "tile {0}: stages must be 2 to 8", tile.key());
  auto info = targetInfo(spec.target);
  if (!info)
    return info.takeError();
  if (tile.warps * 32 > info->maxThreadsPerBlock)
    return makeError(ErrorCode::InvalidValue, "tile {0}: {1} threads exceed the limit {2}",
                     tile.key(), tile.warps * 32, info->maxThreadsPerBlock);
  int bytes = sharedBytes(spec, tile);
  if (bytes > info->maxSharedPerBlock)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0} does not fit: it needs {1} bytes of shared memory, {2} allows "
                     "{3}",
                     tile.key(), bytes, spec.target, info->maxSharedPerBlock);
  return llvm::Error::success();
}

TileConfig defaultTile(const KernelSpec &spec) {
  int dmax = std::max(spec.headDim, spec.headDimV);
  TileConfig tile;
  if (dmax <= 128) {
    tile = {128, 64, 8, 2};
  } else {
    tile = {64, 64, 4, 2};
  }
  // Shrink block_n (then stages) until the tile fits the target's shared memory.
  while (tile.blockN > 16) {
    llvm::Error err = validateTile(spec, tile);
    if (!err)
      return tile;
    llvm::consumeError(std::move(err));
    tile.blockN /= 2;
  }
  return tile;
}

} // namespace flashjit::generator
