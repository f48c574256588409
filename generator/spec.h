// What a generated kernel is specialized for (KernelSpec) and how it is tiled
// (TileConfig), with their readable key strings and validation.
#pragma once

#include "templates/fj_params.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace flashjit::generator {

// E4M3: FP8 inputs with a 16-bit output (KernelSpec::outDtype): Q, K and V for
// fwd_wgmma; the KV cache for dec_mma, whose Q is outDtype too.
enum class DType { FP16, BF16, E4M3 };
// A kernel family is one schedule of one operation (DESIGN.md, "Adding an operation").
enum class Family { FwdMma, FwdWgmma, BwdMma, BwdWgmma, DecMma };
inline constexpr Family kAllFamilies[] = {Family::FwdMma, Family::FwdWgmma, Family::BwdMma,
                                          Family::BwdWgmma, Family::DecMma};
enum class Operation { Forward, Backward, Decode };

llvm::StringRef dtypeName(DType dtype);        // "fp16", "bf16", "e4m3"
int elementBytes(DType dtype);                 // 2, 2, 1
llvm::StringRef familyName(Family family);     // "fwd_mma", "fwd_wgmma", "bwd_mma",
                                               // "bwd_wgmma", "dec_mma"
llvm::StringRef operationName(Operation op);   // "forward", "backward", "decode"
Operation operationOf(Family family);
llvm::Expected<DType> parseDType(llvm::StringRef name);
llvm::Expected<Family> parseFamily(llvm::StringRef name);
// The family part of a spec key (KernelSpec::key(): its text before the first '.'),
// whether or not the rest parses.
llvm::StringRef specKeyFamily(llvm::StringRef specKey);

// Attention features compiled into a forward kernel (issue 28): each changes the
// scores or the mask through the one hook of the softmax step (templates/fj_features.cuh),
// so every family honours them without a copy of its mainloop. Every field's default is
// "off"; a spec with all of them off is the plain kernel (and keeps its plain key).
// Order of application to a score s = q.k: s * softmax_scale, then softcap, then ALiBi,
// then the user's score_mod; then the masks (sequence end, causal, window, mask_mod).
struct Features {
  // Sliding window (bottom-right aligned, like causal): query i sees keys
  // i + diag - windowLeft .. i + diag + windowRight, diag = seqlen_k - seqlen_q.
  // -1 leaves that side unbounded; at least one side is bounded when window is set.
  bool window = false;
  int windowLeft = -1, windowRight = -1;
  float softcap = 0;     // > 0: scores become softcap * tanh(score / softcap)
  bool alibi = false;    // bias -slope[b, h] * |i + diag - j|, slopes given at run time
  // The user's CUDA code: the body of
  //   float score_mod(float score, int b, int h, int q_idx, int kv_idx, const FjModArgs &args)
  //   bool mask_mod(int b, int h, int q_idx, int kv_idx, const FjModArgs &args)
  // (true keeps the key). Indices count within the sequence; empty: none.
  std::string scoreMod, maskMod;
  // Not part of the kernel or its key: the `args` the tuner runs the user's code with
  // (device pointers valid while it tunes, tensors sized for the tuned shape). Without
  // them, user code that reads args.tensor is never run by the tuner: it gets the
  // default tile, compiled, unchecked (needsTuningArgs).
  bool hasTuningArgs = false;
  FjModArgs tuningArgs = {};
  // The problem tuningArgs' tensors are sized for (the C API sets the description's
  // hints): the tuner runs code that reads them on that problem and on checks clamped
  // into it, so that it never indexes past them (tuner::withinTuningShape). All zero:
  // not known, the tuner's own shapes.
  struct TuningShape {
    int batch = 0, headsQ = 0, headsKV = 0, seqQ = 0, seqK = 0;
    bool known() const { return batch > 0 && headsQ > 0 && headsKV > 0 && seqQ > 0 && seqK > 0; }
  };
  TuningShape tuningShape;

  bool transformsScores() const { return softcap > 0 || alibi || !scoreMod.empty(); }
  bool masks() const { return window || !maskMod.empty(); }
  bool any() const { return transformsScores() || masks(); }
  // User code that mentions args.tensor (the test is on the text: a comment counts).
  bool readsTensors() const;
  // User code that mentions args.tensor and no tuningArgs to run it with.
  bool needsTuningArgs() const;
  // "" for none, else ".win1024_0.cap30.alibi.score-<12 hex>.mask-<12 hex>" (the
  // present ones, in this order; "inf" for an unbounded window side).
  std::string keySuffix() const;
  bool operator==(const Features &o) const {
    return window == o.window && windowLeft == o.windowLeft && windowRight == o.windowRight &&
           softcap == o.softcap && alibi == o.alibi && scoreMod == o.scoreMod &&
           maskMod == o.maskMod;
  }
};

// The 12 hex digits that name a user code text in keys (sha256).
std::string userCodeHash(llvm::StringRef text);

// Everything a kernel is compiled for. Sizes, strides, GQA ratio, varlen and LSE
// are run-time parameters and not part of the spec.
struct KernelSpec {
  Family family = Family::FwdMma;
  DType dtype = DType::BF16;
  // O's type: dtype, except with E4M3 inputs, where it is BF16 or FP16 (and, for
  // dec_mma's FP8 cache, Q's type too).
  DType outDtype = DType::BF16;
  int headDim = 128;
  int headDimV = 128;
  bool causal = false;
  std::string target = "sm_90a";  // exact NVRTC target
  Features features;

  // "fwd_mma.bf16.d128.dv128.causal.sm90a" (".nocausal" when not causal), then
  // features.keySuffix(). FP8 names its output: "fwd_wgmma.e4m3_obf16.d128...".
  std::string key() const;
  // The inverse of key(), checked with validateSpec. A key that names user code
  // (score-/mask-) cannot be parsed back: the text is not in it (NotSupported).
  static llvm::Expected<KernelSpec> parse(llvm::StringRef key);
  // The type of O (outDtype for E4M3, else dtype).
  DType outputDtype() const { return dtype == DType::E4M3 ? outDtype : dtype; }
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

// Checks the spec: head dims multiples of 8 in [8, 256], a supported target, a
// target the family runs on (fwd_wgmma and bwd_wgmma: sm_90a only; fwd_mma and bwd_mma:
// sm_80+), head dims the family takes (bwd_wgmma: bwdWgmmaSupportsHeadDims), and its
// features (forward families only; window sides >= -1 with one bounded; softcap
// finite and >= 0; user code at most kMaxUserCodeBytes, no NUL).
constexpr size_t kMaxUserCodeBytes = 64 * 1024;
llvm::Error validateSpec(const KernelSpec &spec);
// Just the features part of validateSpec.
llvm::Error validateFeatures(const KernelSpec &spec);

// Dynamic shared memory a tile needs for a spec, in bytes (mirrors templates/).
int sharedBytes(const KernelSpec &spec, const TileConfig &tile);

// Whether a fwd_wgmma kernel may store O by TMA (mirrors FwdWgmmaConfig::kStoreOByTma:
// O staged in its tile's Q buffer, and two Q buffers). The launch encodes O's tensor map
// only for those.
bool wgmmaStoresOByTma(const KernelSpec &spec, const TileConfig &tile);
// The bytes of fwd_wgmma's bias panel: > 0 where the kernel adds ALiBi's bias on the
// tensor cores (mirrors FwdWgmmaConfig::kAlibiByMma: ALiBi alone, no mask_mod, 16-bit
// inputs, head_dim <= 64, and the panel fits beside the kernel's Q buffers).
int wgmmaBiasPanelBytes(const KernelSpec &spec, const TileConfig &tile);

// Checks a tile against the spec and the target: divisibility, threads, shared memory
// (and for fwd_wgmma: block_m = 64 per consumer warpgroup, warps = 4 per warpgroup
// including the producer's, and an accumulator estimate within the register budget;
// for bwd_mma: 16 or 32 key rows per warp and its accumulator estimate; for bwd_wgmma:
// validateBwdWgmmaTile).
// A backward tile's block_m is the query rows per step and block_n the keys per CTA.
llvm::Error validateTile(const KernelSpec &spec, const TileConfig &tile);

// The hand-picked tile used when nothing has been tuned (fits the target).
TileConfig defaultTile(const KernelSpec &spec);

} // namespace flashjit::generator
