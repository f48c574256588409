// What a generated kernel is specialized for (KernelSpec) and how it is tiled
// (TileConfig), with their readable key strings and validation.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace flashjit::generator {

enum class DType { FP16, BF16 };
// A kernel family is one schedule of one operation (DESIGN.md, "Adding an operation").
enum class Family { FwdMma, FwdWgmma, BwdMma };
enum class Operation { Forward, Backward };

llvm::StringRef dtypeName(DType dtype);        // "fp16", "bf16"
llvm::StringRef familyName(Family family);     // "fwd_mma", "fwd_wgmma", "bwd_mma"
llvm::StringRef operationName(Operation op);   // "forward", "backward"
Operation operationOf(Family family);
llvm::Expected<DType> parseDType(llvm::StringRef name);
llvm::Expected<Family> parseFamily(llvm::StringRef name);

// Everything a kernel is compiled for. Sizes, strides, GQA ratio, varlen and LSE
// are run-time parameters and not part of the spec.
struct KernelSpec {
  Family family = Family::FwdMma;
  DType dtype = DType::BF16;
  int headDim = 128;
  int headDimV = 128;
  bool causal = false;
  std::string target = "sm_90a";  // exact NVRTC target

  // "fwd_mma.bf16.d128.dv128.causal.sm90a" (".nocausal" when not causal).
  std::string key() const;
  // The inverse of key(), checked with validateSpec.
  static llvm::Expected<KernelSpec> parse(llvm::StringRef key);
};

struct TileConfig {
  int blockM = 128;
  int blockN = 64;
  int warps = 8;
  int stages = 2;

  std::string key() const;  // "bm128.bn64.w8.s2"
  static llvm::Expected<TileConfig> parse(llvm::StringRef key);
  bool operator==(const TileConfig &o) const {
    return blockM == o.blockM && blockN == o.blockN && warps == o.warps && stages == o.stages;
  }
};

// What the generator must know of a target to decide whether a tile fits.
struct TargetInfo {
  int smVersion = 0;                // 80, 86, 89, 90, ...
  bool archSpecific = false;        // the "a" targets (sm_90a)
  int maxSharedPerBlock = 0;        // opt-in limit, bytes
  int maxThreadsPerBlock = 1024;
};
llvm::Expected<TargetInfo> targetInfo(llvm::StringRef target);

// Checks the spec: head dims multiples of 8 in [8, 256], a supported target, and a
// target the family runs on (fwd_wgmma: sm_90a only; fwd_mma and bwd_mma: sm_80+).
llvm::Error validateSpec(const KernelSpec &spec);

// Dynamic shared memory a tile needs for a spec, in bytes (mirrors templates/).
int sharedBytes(const KernelSpec &spec, const TileConfig &tile);

// Whether a fwd_wgmma kernel may store O by TMA (mirrors FwdWgmmaConfig::kStoreOByTma:
// O staged in its tile's Q buffer, and two Q buffers). The launch encodes O's tensor map
// only for those.
bool wgmmaStoresOByTma(const KernelSpec &spec, const TileConfig &tile);

// Checks a tile against the spec and the target: divisibility, threads, shared memory
// (and for fwd_wgmma: block_m = 64 per consumer warpgroup, warps = 4 per warpgroup
// including the producer's, and an accumulator estimate within the register budget;
// for bwd_mma: 16 or 32 key rows per warp and its accumulator estimate).
// A backward tile's block_m is the query rows per step and block_n the keys per CTA.
llvm::Error validateTile(const KernelSpec &spec, const TileConfig &tile);

// The hand-picked tile used when nothing has been tuned (fits the target).
TileConfig defaultTile(const KernelSpec &spec);

} // namespace flashjit::generator
