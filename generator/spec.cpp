#include "generator/spec.h"

#include "generator/bwd_mma.h"
#include "generator/bwd_wgmma.h"
#include "generator/dec_mma.h"
#include "generator/smem_layout.h"
#include "support/error.h"
#include "support/hash.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace flashjit::generator {

llvm::StringRef dtypeName(DType dtype) {
  switch (dtype) {
  case DType::FP16: return "fp16";
  case DType::BF16: return "bf16";
  case DType::E4M3: return "e4m3";
  }
  return "unknown";
}

int elementBytes(DType dtype) { return dtype == DType::E4M3 ? 1 : 2; }

llvm::StringRef familyName(Family family) {
  switch (family) {
  case Family::FwdMma: return "fwd_mma";
  case Family::FwdWgmma: return "fwd_wgmma";
  case Family::BwdMma: return "bwd_mma";
  case Family::BwdWgmma: return "bwd_wgmma";
  case Family::DecMma: return "dec_mma";
  }
  return "unknown";
}

llvm::StringRef operationName(Operation op) {
  switch (op) {
  case Operation::Forward: return "forward";
  case Operation::Backward: return "backward";
  case Operation::Decode: return "decode";
  }
  return "unknown";
}

Operation operationOf(Family family) {
  switch (family) {
  case Family::BwdMma:
  case Family::BwdWgmma: return Operation::Backward;
  case Family::DecMma: return Operation::Decode;
  default: return Operation::Forward;
  }
}

llvm::Expected<DType> parseDType(llvm::StringRef name) {
  if (name.equals_insensitive("fp16") || name.equals_insensitive("f16") ||
      name.equals_insensitive("half"))
    return DType::FP16;
  if (name.equals_insensitive("bf16") || name.equals_insensitive("bfloat16"))
    return DType::BF16;
  if (name.equals_insensitive("e4m3") || name.equals_insensitive("fp8") ||
      name.equals_insensitive("float8_e4m3fn"))
    return DType::E4M3;
  return makeError(ErrorCode::InvalidValue,
                   "unknown dtype '{0}' (expected fp16, bf16 or e4m3)", name);
}

llvm::StringRef specKeyFamily(llvm::StringRef specKey) { return specKey.split('.').first; }

llvm::Expected<Family> parseFamily(llvm::StringRef name) {
  if (name == "fwd_mma")
    return Family::FwdMma;
  if (name == "fwd_wgmma")
    return Family::FwdWgmma;
  if (name == "bwd_mma")
    return Family::BwdMma;
  if (name == "bwd_wgmma")
    return Family::BwdWgmma;
  if (name == "dec_mma")
    return Family::DecMma;
  return makeError(ErrorCode::NotSupported,
                   "unknown kernel family '{0}' (available: fwd_mma, fwd_wgmma, bwd_mma, "
                   "bwd_wgmma, dec_mma)",
                   name);
}

std::string userCodeHash(llvm::StringRef text) { return sha256Hex(text).substr(0, 12); }

namespace {
// A float in a key: shortest round-trip text with '.' written 'p' (keys split on '.').
std::string keyFloat(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  std::string out = text;
  std::replace(out.begin(), out.end(), '.', 'p');
  return out;
}
std::string windowSide(int size) { return size < 0 ? "inf" : std::to_string(size); }
} // namespace

std::string Features::keySuffix() const {
  std::string out;
  if (window)
    out += ".win" + windowSide(windowLeft) + "_" + windowSide(windowRight);
  if (softcap > 0)
    out += ".cap" + keyFloat(softcap);
  if (alibi)
    out += ".alibi";
  if (!scoreMod.empty())
    out += ".score-" + userCodeHash(scoreMod);
  if (!maskMod.empty())
    out += ".mask-" + userCodeHash(maskMod);
  return out;
}

bool Features::readsTensors() const {
  auto mentions = [](const std::string &text) {
    return text.find("tensor") != std::string::npos;
  };
  return mentions(scoreMod) || mentions(maskMod);
}

bool Features::needsTuningArgs() const { return !hasTuningArgs && readsTensors(); }

std::string KernelSpec::key() const {
  std::string arch = target;
  llvm::erase_value(arch, '_');
  std::string types = dtypeName(dtype).str();
  if (dtype == DType::E4M3)
    types += "_o" + dtypeName(outDtype).str();
  return llvm::formatv("{0}.{1}.d{2}.dv{3}.{4}.{5}", familyName(family), types, headDim,
                       headDimV, causal ? "causal" : "nocausal", arch)
             .str() +
         features.keySuffix();
}

namespace {
// One feature token of a key (see Features::keySuffix) into `f`; false if it is none.
bool parseFeature(llvm::StringRef part, Features &f) {
  auto side = [](llvm::StringRef text, int &out) {
    if (text == "inf") {
      out = -1;
      return true;
    }
    return !text.getAsInteger(10, out) && out >= 0;
  };
  if (part.consume_front("win")) {
    auto [left, right] = part.split('_');
    f.window = true;
    return side(left, f.windowLeft) && side(right, f.windowRight);
  }
  if (part.consume_front("cap")) {
    std::string text = part.str();
    std::replace(text.begin(), text.end(), 'p', '.');
    char *end = nullptr;
    f.softcap = std::strtof(text.c_str(), &end);
    return !text.empty() && end == text.c_str() + text.size() && f.softcap > 0;
  }
  if (part == "alibi") {
    f.alibi = true;
    return true;
  }
  return false;
}
} // namespace

llvm::Expected<KernelSpec> KernelSpec::parse(llvm::StringRef key) {
  llvm::SmallVector<llvm::StringRef, 6> parts;
  key.split(parts, '.');
  auto bad = [&] {
    return makeError(ErrorCode::InvalidValue,
                     "bad kernel spec '{0}' (expected e.g. fwd_mma.bf16.d128.dv128.causal.sm90a)",
                     key);
  };
  if (parts.size() < 6)
    return bad();
  KernelSpec spec;
  for (llvm::StringRef part : llvm::ArrayRef<llvm::StringRef>(parts).drop_front(6)) {
    if (part.startswith("score-") || part.startswith("mask-"))
      return makeError(ErrorCode::NotSupported,
                       "kernel spec '{0}' names user code ({1}): its text is not in the key",
                       key, part);
    if (!parseFeature(part, spec.features))
      return bad();
  }
  llvm::Expected<Family> family = parseFamily(parts[0]);
  auto [inputs, output] = parts[1].split("_o");
  llvm::Expected<DType> dtype = parseDType(inputs);
  llvm::Expected<DType> outDtype = parseDType(output.empty() ? inputs : output);
  if (!family || !dtype || !outDtype || (*dtype == DType::E4M3) == output.empty() ||
      (*dtype == DType::E4M3 && *outDtype == DType::E4M3)) {
    llvm::consumeError(family.takeError());
    llvm::consumeError(dtype.takeError());
    llvm::consumeError(outDtype.takeError());
    return bad();
  }
  spec.family = *family;
  spec.dtype = *dtype;
  if (*dtype == DType::E4M3)
    spec.outDtype = *outDtype;
  llvm::StringRef d = parts[2], dv = parts[3], arch = parts[5];
  if (!d.consume_front("d") || d.getAsInteger(10, spec.headDim) || !dv.consume_front("dv") ||
      dv.getAsInteger(10, spec.headDimV) || !arch.consume_front("sm") || arch.empty())
    return bad();
  if (parts[4] != "causal" && parts[4] != "nocausal")
    return bad();
  spec.causal = parts[4] == "causal";
  spec.target = ("sm_" + arch).str();
  if (llvm::Error err = validateSpec(spec))
    return std::move(err);
  return spec;
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
                     "target '{0}' is not supported: flashjit's kernels need sm_80 or "
                     "newer (sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a, sm_100, sm_103, "
                     "sm_120, sm_121)",
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
  const bool hopper = info->smVersion == 90 && info->archSpecific;
  if (spec.family == Family::FwdWgmma && !hopper)
    return makeError(ErrorCode::NotSupported,
                     "fwd_wgmma needs target sm_90a (wgmma, TMA and setmaxnreg), not '{0}'; "
                     "use fwd_mma there",
                     spec.target);
  if (spec.dtype == DType::E4M3) {
    // fwd_wgmma: FP8 q, k and v. dec_mma: an FP8 KV cache, q and o of outDtype.
    if (spec.family != Family::FwdWgmma && spec.family != Family::DecMma)
      return makeError(ErrorCode::NotSupported,
                       "{0} does not take FP8 (e4m3) inputs: only the forward on sm_90a "
                       "(fwd_wgmma) and decode over an FP8 KV cache (dec_mma) do",
                       familyName(spec.family));
    if (spec.outDtype == DType::E4M3)
      return makeError(ErrorCode::NotSupported,
                       "an FP8 (e4m3) kernel writes O as bf16 or fp16, not e4m3");
    // One byte an element: a contiguous head of 8 elements would be an 8-byte stride,
    // and TMA's strides (fwd_wgmma) and cp.async's chunks (dec_mma) are 16 bytes.
    if (spec.headDim % 16 != 0 || spec.headDimV % 16 != 0)
      return makeError(ErrorCode::NotSupported,
                       "FP8 (e4m3) takes head dims that are multiples of 16 (rows of 16-byte "
                       "multiples); head_dim {0} / head_dim_v {1}",
                       spec.headDim, spec.headDimV);
    // dec_mma over an FP8 cache takes every feature (the hook's scale holds K's factor).
    if (spec.family == Family::FwdWgmma && spec.features.any())
      return makeError(ErrorCode::NotSupported,
                       "FP8 (e4m3) inputs of fwd_wgmma take no attention features yet ({0})",
                       spec.features.keySuffix().substr(1));
  }
  if (spec.family == Family::BwdWgmma) {
    if (!hopper)
      return makeError(ErrorCode::NotSupported,
                       "bwd_wgmma needs target sm_90a (wgmma), not '{0}'; "
                       "use bwd_mma there",
                       spec.target);
    if (!bwdWgmmaSupportsHeadDims(spec))
      return makeError(ErrorCode::NotSupported,
                       "bwd_wgmma does not take head_dim {0} / head_dim_v {1}: it takes "
                       "each a multiple of 8 from 32 to 256; bwd_mma runs the others",
                       spec.headDim, spec.headDimV);
  }
  return validateFeatures(spec);
}

llvm::Error validateFeatures(const KernelSpec &spec) {
  const Features &f = spec.features;
  // Before the early return: a NaN or negative cap turns no feature on.
  if (!std::isfinite(f.softcap) || f.softcap < 0)
    return makeError(ErrorCode::InvalidValue,
                     "softcap is {0}: must be finite and > 0 (0: no soft-capping)", f.softcap);
  if (!f.any())
    return llvm::Error::success();
  // The backward pass takes the features (a score_mod has no derivative to take):
  // bwd_mma all of them, bwd_wgmma all but soft-capping and one spilling case
  // (bwdWgmmaFeatureRefusal); decode all of them.
  const bool backward = operationOf(spec.family) == Operation::Backward;
  if (backward && !f.scoreMod.empty())
    return makeError(ErrorCode::NotSupported,
                     "the backward pass does not take a score_mod (flashjit cannot "
                     "differentiate the user's code); window, softcap, alibi and mask_mod "
                     "it takes");
  if (spec.family == Family::BwdWgmma)
    if (std::optional<std::string> why = bwdWgmmaFeatureRefusal(spec))
      return makeError(ErrorCode::NotSupported, "{0}", *why);
  if (!backward && operationOf(spec.family) != Operation::Forward &&
      operationOf(spec.family) != Operation::Decode)
    return makeError(ErrorCode::NotSupported,
                     "{0} does not support attention features yet ({1}): the forward and "
                     "backward families do",
                     familyName(spec.family), f.keySuffix().substr(1));
  if (f.window) {
    if (f.windowLeft < -1 || f.windowRight < -1)
      return makeError(ErrorCode::InvalidValue,
                       "window sizes are {0} (left) and {1} (right): each must be >= 0, or "
                       "-1 for unbounded",
                       f.windowLeft, f.windowRight);
    if (f.windowLeft < 0 && f.windowRight < 0)
      return makeError(ErrorCode::InvalidValue,
                       "a window with both sides unbounded (-1, -1) is no window: bound a "
                       "side or leave the window off");
  }
  for (auto [name, text] : {std::pair<const char *, const std::string &>{"score_mod", f.scoreMod},
                            {"mask_mod", f.maskMod}}) {
    if (text.size() > kMaxUserCodeBytes)
      return makeError(ErrorCode::InvalidValue, "{0} is {1} bytes: at most {2}", name,
                       text.size(), kMaxUserCodeBytes);
    if (text.find('\0') != std::string::npos)
      return makeError(ErrorCode::InvalidValue, "{0} contains a NUL character", name);
  }
  return llvm::Error::success();
}

int smemTileBytes(int rows, int cols) {
  int chunks = cols / 8;
  int rowChunks = chunks % 8 == 0 ? chunks : (chunks | 1);
  return rows * rowChunks * 16;
}

namespace {
int roundUp(int x, int m) { return (x + m - 1) / m * m; }

// fwd_wgmma (mirrors FwdWgmmaConfig::smem_bytes): head dims padded to 32, one or (where
// they fit) two Q buffers + a K/V ring, two mbarriers per Q buffer and four per stage, a
// work-tile slot (a TileId and its mbarrier) per Q buffer, 1024 bytes of alignment slack;
// with a mask_mod, a block-mask entry and bit slot (8 bytes) per stage, rounded up to 16;
// with ALiBi's bias on the tensor cores, its panel (32 bytes a key).
constexpr int kWgmmaTileSlotBytes = 32;
// FP8: head_dim padded to 64 and one byte an element.
int wgmmaBytes(const KernelSpec &spec, const TileConfig &tile, int qBuffers, int biasPanel) {
  const int bytes = elementBytes(spec.dtype);
  int d = roundUp(spec.headDim, bytes == 1 ? 64 : 32), dv = roundUp(spec.headDimV, 32);
  int stageSlots = spec.features.maskMod.empty() ? 0 : roundUp(8 * tile.stages, 16);
  return 1024 + qBuffers * tile.blockM * d * bytes + tile.stages * tile.blockN * (d + dv) * bytes +
         biasPanel + (2 * qBuffers + 4 * tile.stages) * 8 + qBuffers * kWgmmaTileSlotBytes +
         stageSlots;
}
constexpr int kWgmmaMaxSharedBytes = 227 * 1024;
bool wgmmaTwoQBuffers(const KernelSpec &spec, const TileConfig &tile) {
  return wgmmaBytes(spec, tile, 2, 0) <= kWgmmaMaxSharedBytes;
}
int wgmmaSharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  return wgmmaBytes(spec, tile, wgmmaTwoQBuffers(spec, tile) ? 2 : 1,
                    wgmmaBiasPanelBytes(spec, tile));
}

// Consumer registers per thread after setmaxnreg (mirrors FwdWgmmaConfig).
int wgmmaConsumerRegisters(int consumers) { return consumers == 3 ? 160 : 240; }

llvm::Error validateWgmmaTile(const KernelSpec &spec, const TileConfig &tile) {
  if (tile.blockM % 64 != 0 || tile.blockM < 64 || tile.blockM > 192)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: fwd_wgmma block_m must be 64, 128 or 192 (64 rows per "
                     "consumer warpgroup)",
                     tile.key());
  int consumers = tile.blockM / 64;
  if (tile.warps != 4 * (consumers + 1))
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: fwd_wgmma with block_m {1} needs {2} warps ({3} consumer "
                     "warpgroups and a producer)",
                     tile.key(), tile.blockM, 4 * (consumers + 1), consumers);
  if (tile.blockN % 16 != 0 || tile.blockN > 256)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: fwd_wgmma block_n must be a multiple of 16 up to 256",
                     tile.key());
  if (spec.dtype == DType::E4M3 && tile.blockN % 32 != 0)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: FP8 fwd_wgmma block_n must be a multiple of 32 (one wgmma of "
                     "P V takes 32 keys of transposed V)",
                     tile.key());
  // Live accumulators per consumer thread: S (block_n / 2) and O (head_dim_v / 2), plus
  // about 32 for addresses and softmax state. More would spill.
  int estimate = tile.blockN / 2 + roundUp(spec.headDimV, 32) / 2 + 32;
  int budget = wgmmaConsumerRegisters(consumers);
  if (estimate > budget)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: needs about {1} registers per consumer thread, {2} consumer "
                     "warpgroups get {3}",
                     tile.key(), estimate, consumers, budget);
  return llvm::Error::success();
}
} // namespace

int wgmmaBiasPanelBytes(const KernelSpec &spec, const TileConfig &tile) {
  const Features &f = spec.features;
  if (spec.family != Family::FwdWgmma || !f.alibi || f.softcap > 0 || !f.scoreMod.empty() ||
      !f.maskMod.empty() || spec.dtype == DType::E4M3 || spec.headDim > 64)
    return 0;
  const int panel = tile.blockN * 32;
  const int qBuffers = wgmmaTwoQBuffers(spec, tile) ? 2 : 1;
  return wgmmaBytes(spec, tile, qBuffers, panel) <= kWgmmaMaxSharedBytes ? panel : 0;
}

bool wgmmaStoresOByTma(const KernelSpec &spec, const TileConfig &tile) {
  return spec.family == Family::FwdWgmma && spec.dtype != DType::E4M3 &&
         roundUp(spec.headDim, 32) == roundUp(spec.headDimV, 32) && wgmmaTwoQBuffers(spec, tile);
}

int sharedBytes(const KernelSpec &spec, const TileConfig &tile) {
  if (spec.family == Family::FwdWgmma)
    return wgmmaSharedBytes(spec, tile);
  if (spec.family == Family::BwdMma)
    return bwdMmaSharedBytes(spec, tile);
  if (spec.family == Family::BwdWgmma)
    return bwdWgmmaSharedBytes(spec, tile);
  if (spec.family == Family::DecMma)
    return decMmaSharedBytes(spec, tile);
  int q = std::max(smemTileBytes(tile.blockM, spec.headDim),
                   smemTileBytes(tile.blockM, spec.headDimV));
  int stage = smemTileBytes(tile.blockN, spec.headDim) + smemTileBytes(tile.blockN, spec.headDimV);
  return q + tile.stages * stage;
}

llvm::Error validateTile(const KernelSpec &spec, const TileConfig &tile) {
  if (tile.warps <= 0 || tile.blockM <= 0 || tile.blockN <= 0)
    return makeError(ErrorCode::InvalidValue, "tile {0}: sizes must be positive", tile.key());
  if (spec.family == Family::FwdWgmma) {
    if (auto err = validateWgmmaTile(spec, tile))
      return err;
  } else if (spec.family == Family::BwdMma) {
    if (auto err = validateBwdMmaTile(spec, tile))
      return err;
  } else if (spec.family == Family::BwdWgmma) {
    if (auto err = validateBwdWgmmaTile(spec, tile))
      return err;
  } else if (spec.family == Family::DecMma) {
    if (auto err = validateDecMmaTile(spec, tile))
      return err;
  } else if (tile.blockM % (16 * tile.warps) != 0)
    return makeError(ErrorCode::InvalidValue,
                     "tile {0}: block_m must be a multiple of 16 x warps", tile.key());
  if (tile.blockN % 16 != 0)
    return makeError(ErrorCode::InvalidValue, "tile {0}: block_n must be a multiple of 16",
                     tile.key());
  // bwd_wgmma's validator bounds its own ring (one stage where it splits the head dim).
  if (spec.family != Family::BwdWgmma && (tile.stages < 2 || tile.stages > 8))
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
  if (spec.family == Family::BwdMma)
    return bwdMmaDefaultTile(spec);
  if (spec.family == Family::BwdWgmma)
    return bwdWgmmaDefaultTile(spec);
  if (spec.family == Family::DecMma)
    return decMmaDefaultTile(spec);
  if (spec.family == Family::FwdWgmma) {
    // FP8 (block_n a multiple of 32), measured picks (H200, docs/PERF.md p5): three
    // consumers at d <= 64, causal or not (their P takes half the registers, so 128 keys
    // overlap the softmax with P V; causal, +9 to +23 % from N 4k, -9 % at 1k and -3.5 %
    // at 2k against bm128.bn128); at d <= 128 three consumers over 96 keys without causal
    // (+6 to +11 % over bm128.bn128), bm128.bn128 with it; above, 96 keys. Each within
    // 3 % of the best of five tiles at N 1k-2k otherwise.
    // FP8 takes no features, so none of the 16-bit adjustments below apply.
    if (spec.dtype == DType::E4M3) {
      if (dmax <= 64)
        tile = {192, 128, 16, 2};
      else if (dmax <= 128)
        tile = spec.causal ? TileConfig{128, 128, 12, 2} : TileConfig{192, 96, 16, 2};
      else
        tile = {128, 96, 12, 2};
    } else {
      // FlashAttention-3's starting points, rounded to what this schedule allows, except
      // causal d <= 64: there three consumer warpgroups lost 12-30 % to two up to N = 2048
      // and gained 5 % at 8192 (H100, docs/PERF.md v5.4); the tuner picks 128 x 128 there.
      if (dmax <= 64)
        tile = spec.causal ? TileConfig{128, 128, 12, 2} : TileConfig{192, 128, 16, 2};
      else if (dmax <= 128)
        tile = {128, 128, 12, 2};
      else if (dmax <= 192)
        tile = {128, 96, 12, 2};
      else
        tile = {128, 80, 12, 2};
      // Features that compute with each score's indices (ALiBi, the user's score_mod)
      // need registers the 128-key tile has not got at d = 128: ptxas serialised its
      // wgmma (H100 run of FeaturesGrid, docs/PERF.md f1); 112 keys fit.
      if (dmax > 64 && dmax <= 128 && (spec.features.alibi || !spec.features.scoreMod.empty()))
        tile.blockN = 112;
      // A non-causal mask_mod at d <= 64: 96 keys. This tile is what runs when the mask
      // reads the caller's tensors (never tuned), and with a block mask most of its work
      // is short key walks of partly masked tiles. The 128-key tile spilled 304 bytes with
      // the document mask (its keep bits and tensor loads), so the untuned call compiled it
      // for nothing and fell back to bm128.bn128; bm192.bn96 fits and ran the document
      // mask 5-23 % faster at N 1k-8k, 8 % slower at 16k (H100, docs/PERF.md f10).
      if (dmax <= 64 && !spec.causal && !spec.features.maskMod.empty())
        tile.blockN = 96;
    }
    const int step = spec.dtype == DType::E4M3 ? 32 : 16;
    while (tile.blockN > step) {
      llvm::Error err = validateTile(spec, tile);
      if (!err)
        return tile;
      llvm::consumeError(std::move(err));
      tile.blockN -= step;
    }
    return tile;
  }
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
