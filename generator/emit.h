// The generator: a spec and a tile -> one self-contained CUDA translation unit. The
// output is the embedded templates (inlined, so the source alone says exactly what
// runs and hashes into the binary key) plus a thin configuration block and an
// extern "C" entry point.
#pragma once

#include "generator/spec.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit::generator {

// How the host describes Q, K and V to the copy engine for a kernel that loads them
// with TMA (fwd_wgmma): one rank-4 tensor map each (column, row, head, batch), boxes of
// panel columns x rows, swizzled by the panel's row bytes (64 columns: 128 B, 32: 64 B).
struct TmaOperands {
  bool enabled = false;
  DType dtype = DType::BF16;
  int headDim = 0, headDimV = 0;
  int qRows = 0, kvRows = 0;    // box rows: block_m for Q, block_n for K and V
  int oRows = 0;                // box rows of O's map (one warpgroup's); 0: no O map
  int panelD = 0, panelDv = 0;  // box columns for Q/K and for V and O
  // FP8: V's map is over V^T (FjForwardParams::v_transposed: columns are keys, rows
  // head_dim_v), boxes of panelDv keys x vtRows rows; elements of 1 byte for Q, K, V^T.
  bool vTransposed = false;
  int vtRows = 0;
};

// A backward module's kernels (families bwd_*), launched in this order by the host:
// prep, the main passes, then convert (or dq in deterministic mode, instead of
// convert). Geometry the host needs to launch them.
struct BackwardEntries {
  bool enabled = false;
  std::string prep, convert, dq;    // entry names
  std::vector<std::string> passes;  // the main kernel: one entry, or dV then dK and dQ
  int keysPerCta = 0;               // main: grid.x = ceil(seqlen_k / keysPerCta)
  // tileWalk: the main pass walks the ceil(seqlen_k / keysPerCta) x heads_kv x batch
  // tiles itself on a persistent grid, min(tiles, SMs) CTAs in x (bwd_wgmma), CTA c
  // taking tile c first. claimsTiles: it claims the rest from FjBackwardParams::
  // tile_counter, which the host zeroes before each call; else CTA c takes c + gridDim.x,
  // c + 2 gridDim.x, ...
  bool tileWalk = false, claimsTiles = false;
  int dqRowsPerCta = 0;             // dq: grid.x = ceil(seqlen_q / dqRowsPerCta)
  int dqSharedBytes = 0;            // dq's dynamic shared memory
  int dqThreads = 0;                // dq's block size
  int auxThreads = 256;             // prep and convert (256 threads)
  int auxRowsPerCta = 8;            // convert: one warp per row (64-row groups when tiled)
  int prepRowsPerCta = 8;           // prep: 32 / (lanes a row takes) rows per warp
  // The fp32 dQ accumulator, which the launch zeroes: its row width, and whether it is
  // laid out by DqTiled (templates/bwd_mma.cuh) rather than row-major.
  int dqAccumColumns = 0;
  bool tiledDq = false;
  // When enabled, the main pass's parameters after FjBackwardParams: the tensor maps of
  // Q and dO (rank 4 as the forward's, boxes of panelD columns x qRows rows).
  TmaOperands tma;
  // A mask_mod's module whose main pass walks a block mask: the builder of its step lists
  // (bwd_mma::build_block_steps; grid (key blocks, heads_kv, batch) of
  // kBackwardBlockStepsThreads, parameters (FjBackwardParams, unsigned *steps, int *counts,
  // int *slots, unsigned *bits, int *used, int shared_heads)) and the main pass's query
  // rows per step. "" when none.
  std::string blockSteps;
  int queryRowsPerStep = 0;
  // Whether the main pass reads the keep bits of partly masked steps (bwd_wgmma): the
  // host then gives the lists bit slots (FjBackwardParams::block_step_bits).
  bool stepBits = false;
};

// The backward block-mask builder's entry name and block size (bwd_mma::kBuildThreads).
inline constexpr const char *kBackwardBlockStepsEntry = "flashjit_bwd_block_steps";
inline constexpr int kBackwardBlockStepsThreads = 256;

// A decode module's kernels (family dec_mma): the split kernel (entryName, grid
// (splits, row tiles, batch * heads_kv)), the combine of the splits (one warp per
// output row, combineRowsPerCta rows per CTA) and the KV append (grid (new rows, batch)).
struct DecodeEntries {
  bool enabled = false;
  std::string combine, append;
  int auxThreads = 128;
  int combineRowsPerCta = 4;
  int blockN = 0;     // keys per tile (the split sizes are counted in tiles)
  int headDimV = 0;   // of the partial outputs in the workspace
  // The window's left side (keys), -1 without one: a row tile reads the key tiles of its
  // rows' windows alone, which the splits then share.
  int windowLeft = -1;
  // The combine waits for the split kernel with griddepcontrol (targets sm_90 and
  // newer), so it may be launched as its programmatic dependent.
  bool dependentCombine = false;
};

// The block-mask builder's entry name (EmittedKernel::blockMaskEntry).
inline constexpr const char *kBlockMaskEntry = "flashjit_block_mask";
// Its block size (templates/fj_block_mask.cuh's kThreads).
inline constexpr int kBlockMaskThreads = 256;
// Beside it in fwd_wgmma's modules (not causal), the order of the persistent walk over a
// block mask's work tiles (EmittedKernel::blockOrderEntry, fj::block_mask::build_order;
// parameters FjForwardParams, int *order, int units, int grid, float min_gain; one CTA of
// kBlockOrderThreads), for grids up to kBlockOrderThreads CTAs.
inline constexpr const char *kBlockOrderEntry = "flashjit_block_order";
inline constexpr int kBlockOrderThreads = 256;
// FP8 modules' V transpose (EmittedKernel::fp8TransposeEntry): parameters FjForwardParams,
// grid (vt_keys / kFp8TransposeKeys, heads_kv, batch) of kFp8TransposeThreads threads
// (templates/fj_fp8.cuh).
inline constexpr const char *kFp8TransposeEntry = "flashjit_fp8_transpose_v";
inline constexpr int kFp8TransposeKeys = 64;
inline constexpr int kFp8TransposeThreads = 256;
// V^T's layout for one call (templates/fj_fp8.cuh): keys per row (FjForwardParams::
// vt_keys), batches of [heads_kv][head_dim_v] rows, and the transpose's grid width.
// Without cu_seqlens: one batch each, seqlen_k keys rounded up to the transpose's
// granule. With them (totalK > 0, the packed key rows): one batch holding every
// sequence, kept apart by kFp8VarlenGap columns each (fj_fp8.cuh's kVarlenGap), and a
// grid over the longest sequence (seqlenK) and the zeros after it.
inline constexpr int kFp8MaxBlockN = 256;
inline constexpr int kFp8VarlenGap = kFp8MaxBlockN + kFp8TransposeKeys;
struct Fp8TransposedLayout {
  int64_t keys, batches, gridX;
};
inline Fp8TransposedLayout fp8TransposedLayout(int64_t batch, int64_t seqlenK, int64_t totalK) {
  auto roundUp = [](int64_t n) {
    return (n + kFp8TransposeKeys - 1) / kFp8TransposeKeys * kFp8TransposeKeys;
  };
  if (totalK <= 0)
    return {roundUp(seqlenK), batch, roundUp(seqlenK) / kFp8TransposeKeys};
  return {roundUp(totalK) + kFp8VarlenGap * batch, 1,
          (roundUp(seqlenK) + kFp8MaxBlockN - kFp8TransposeKeys) / kFp8TransposeKeys};
}
// Its bytes: the workspace an FP8 forward needs (fj_forward_workspace_size).
inline int64_t fp8TransposedBytes(int64_t batch, int64_t headsKV, int64_t headDimV,
                                  int64_t seqlenK, int64_t totalK = 0) {
  const Fp8TransposedLayout layout = fp8TransposedLayout(batch, seqlenK, totalK);
  return layout.batches * headsKV * headDimV * layout.keys;
}

struct EmittedKernel {
  std::string source;
  std::string entryName;                 // the extern "C" kernel to look up
  std::vector<std::string> options;      // NVRTC options the source needs
  int threads = 0;                       // block size
  int sharedBytes = 0;                   // dynamic shared memory per block
  int blockM = 0;                        // query rows per block (grid.x = ceil(seqlen_q / blockM))
  int blockN = 0;                        // keys per tile (forward families)
  // Forward kernels with a mask_mod: the kernel that builds their block mask
  // (kBlockMaskEntry, grid (query blocks, heads, batch) of fj::block_mask::kThreads
  // threads; parameters FjForwardParams, int *counts, int *tiles, int *slots,
  // unsigned *bits, int *used); "" otherwise.
  std::string blockMaskEntry;
  // Beside it, the order of a persistent kernel's walk over the block mask
  // (kBlockOrderEntry); "" where the kernel walks its own way only.
  std::string blockOrderEntry;
  // FP8 forward kernels: the V transpose to launch before them (kFp8TransposeEntry).
  std::string fp8TransposeEntry;
  // Kernel parameters after FjForwardParams, if enabled: the maps of Q, K, V and O, and
  // an int, 1 when the kernel may store O through its map.
  TmaOperands tma;
  // One CTA per multiprocessor walking the work tiles (grid.x = min(tiles, SMs),
  // grid.y = grid.z = 1) instead of one CTA per (query block, head, batch).
  bool persistent = false;
  // Families of the backward operation: its kernels (entryName is the first pass).
  BackwardEntries backward;
  // The decode operation's other kernels.
  DecodeEntries decode;
};

// The kernel (module) of any family for a spec and tile. Errors: NotSupported for an
// impossible spec, InvalidValue for a tile that does not fit.
llvm::Expected<EmittedKernel> emitKernel(const KernelSpec &spec, const TileConfig &tile);
// The same, for the forward families only.
llvm::Expected<EmittedKernel> emitForward(const KernelSpec &spec, const TileConfig &tile);

// An emitted source as flashjit `version` wrote it with the same generator: the version
// is in its first line, a comment, and so in its binary key. Unchanged for "" or a source
// this build did not emit.
std::string sourceAsOfVersion(llvm::StringRef source, llvm::StringRef version);

// The naive reference for the dtype (head dims, causal and layout are run-time
// arguments). With emulateLowPrecision the output is in the dtype and the
// intermediates are rounded to it; otherwise the output is fp32.
// Entry point: (FjForwardParams, int head_dim, int head_dim_v, int causal);
// grid (seqlen_q, heads_q, batch), `threads` threads, no dynamic shared memory.
// With features, the reference applies them too (written out on its own, see
// templates/reference.cuh).
// FP8 (E4M3) inputs: outDtype is the output's type (emulated) and the reference
// dequantizes by FjForwardParams' descale factors.
llvm::Expected<EmittedKernel> emitReference(DType dtype, bool emulateLowPrecision,
                                            const std::string &target,
                                            const Features &features = {},
                                            DType outDtype = DType::BF16);

// The name NVRTC compiles generated sources under (runtime::CompileOptions' default):
// lines after the user's code are numbered in it again.
constexpr const char *kProgramName = "flashjit_kernel.cu";

// The FjFeatures struct a kernel with features is instantiated with: the features as
// constants and the user's score_mod / mask_mod, numbered from line 1 of files named
// "score_mod" and "mask_mod" so that NVRTC's errors point at the user's lines. Empty
// for no feature.
std::string featuresBlock(const Features &features);
// Replaces the line markers featuresBlock leaves after user code by #line directives
// naming `programName` and the line the source really is at.
std::string resumeLineNumbers(std::string source, llvm::StringRef programName);

// The naive backward reference: dQ, dK and dV by the textbook formulas, fp32 (or
// rounding like the dtype). Entry points, each (FjBackwardParams, int head_dim,
// int head_dim_v, int causal, float *lse_ref, float *dpsum_ref), `threads` threads:
//   flashjit_reference_bwd_rows: grid (seqlen_q, heads_q, batch); the reference's own
//     lse and D per query row (written to lse_ref and dpsum_ref, laid out like lse),
//     and dQ;
//   flashjit_reference_bwd_keys: grid (seqlen_k, heads_kv, batch), after the first;
//     dK and dV.
// With emulateLowPrecision the outputs are in the dtype, else fp32.
// Features (not a score_mod) are applied by reference_bwd.cuh's own formulas.
llvm::Expected<EmittedKernel> emitBackwardReference(DType dtype, bool emulateLowPrecision,
                                                    const std::string &target,
                                                    const Features &features = {});

// Just the generated configuration block and entry point (what `flashjit gen
// --config-only` prints), without the inlined templates.
llvm::Expected<std::string> emitConfigBlock(const KernelSpec &spec, const TileConfig &tile);

} // namespace flashjit::generator
