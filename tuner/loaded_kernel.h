// Generated kernels compiled and loaded on the device, with the launch geometry
// their generator chose.
#pragma once

#include "generator/emit.h"
#include "runtime/driver.h"
#include "runtime/nvrtc.h"
#include "templates/fj_params.h"

#include "llvm/Support/Error.h"

#include <memory>

namespace flashjit::tuner {

// Compiles an emitted kernel for `target` with NVRTC.
llvm::Expected<runtime::CompiledBinary> compileEmitted(const generator::EmittedKernel &kernel,
                                                       const std::string &target);

// A persistent walk's order over a block mask (BlockMaskShape::orderUnits) is kept where
// fj_block_mask.cuh's build_order predicts its most loaded CTA this much lighter than in
// the kernel's own walk. Measured with documents of N/4 (docs/PERF.md f9, H100): the
// order kept at N 1k-2k made the forward 16-28 % faster; at N 8k-16k, where the model
// promises less, it would have made it 7-46 % slower (K and V shared less in L2), and
// the gate drops it there (and at N 4k, where it would have gained 0-7 %).
inline constexpr float kBlockOrderMinGain = 1.12f;

// The device memory launch() takes as a persistent walk's tile counter (one int, which
// the launch zeroes); the C API's workspace for it is as large (api::kTileCounterBytes).
inline constexpr size_t kTileCounterBytes = 4;

struct LaunchGeometry {
  int threads = 0, sharedBytes = 0, blockM = 0;
  generator::TmaOperands tma;  // tensor maps to encode per launch, when enabled
  bool persistent = false;     // grid of min(work tiles, multiprocessors) CTAs
  int blockN = 0;              // keys per tile
  bool blockMask = false;      // the module builds block masks (a mask_mod's kernels)
  bool blockOrder = false;     // and orders its persistent walk over them
  static LaunchGeometry of(const generator::EmittedKernel &kernel) {
    return {kernel.threads,  kernel.sharedBytes, kernel.blockM,
            kernel.tma,      kernel.persistent,  kernel.blockN,
            !kernel.blockMaskEntry.empty(), !kernel.blockOrderEntry.empty()};
  }
};

// The shape of a block mask for a forward kernel of these tiles (templates/
// fj_block_mask.cuh): `batches` x `heads` x queryBlocks work tiles (a shared dimension
// counts 1), each with a list of up to keyBlocks entries and their bit slots, and
// bitCapacity slots of keep bits for partly masked tiles; for a persistent kernel, the
// order of its walk over the call's orderUnits work tiles on a grid of orderGrid CTAs
// (FjForwardParams::block_order; 0: none). In one device buffer: counts, entries, slots,
// the builder's slot counter, the order, the bits, each 16-byte aligned.
struct BlockMaskShape {
  int batches = 0, heads = 0, queryBlocks = 0, keyBlocks = 0;
  int blockM = 0, blockN = 0;
  int64_t bitCapacity = 0;
  int64_t orderUnits = 0;
  int orderGrid = 0;
  static BlockMaskShape of(const LaunchGeometry &geometry, int batches, int heads,
                           int seqlenQ, int seqlenK) {
    return {batches, heads, (seqlenQ + geometry.blockM - 1) / geometry.blockM,
            (seqlenK + geometry.blockN - 1) / geometry.blockN, geometry.blockM,
            geometry.blockN, 0};
  }
  static int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }
  int64_t workTiles() const { return (int64_t)batches * heads * queryBlocks; }
  int64_t entries() const { return workTiles() * keyBlocks; }
  int64_t tilesOffset() const { return align16(workTiles() * 4); }
  int64_t slotsOffset() const { return tilesOffset() + align16(entries() * 4); }
  int64_t usedOffset() const { return slotsOffset() + align16(entries() * 4); }
  int64_t orderOffset() const { return usedOffset() + 16; }
  int64_t bitsOffset() const { return orderOffset() + align16(orderUnits * 4); }
  int64_t bytesPerSlot() const { return (int64_t)blockM * ((blockN + 31) / 32) * 4; }
  int64_t bytes() const { return bitsOffset() + bitCapacity * bytesPerSlot(); }
  // Points `params` at a mask of this shape at device address `base`.
  void describe(FjForwardParams &params, uint64_t base) const;
};

// Readies a block-mask builder's `buffer` (the forward's tiles or the backward's steps)
// for a build: it must hold `bytes` (else an internal error naming `what`), and the
// builder's count of partly masked tiles or steps, the int at `usedOffset`, is zeroed on
// `stream`.
llvm::Error readyBuilderBuffer(runtime::DeviceBuffer &buffer, int64_t bytes,
                               int64_t usedOffset, const char *what, CUstream stream);

// Whether a kernel that loads through TMA can take these arguments: no cu_seqlens,
// at least one key (a tensor map cannot describe an empty K/V), 16-byte aligned q/k/v,
// and row, head and batch strides in multiples of 16 bytes. When not, the message says
// why (the caller then uses a kernel without TMA).
llvm::Error checkTmaArguments(const FjForwardParams &params);
// The same test without building an error: null when a TMA kernel can take `params`,
// else a constant description of the first problem (`badStride`, when given, receives
// the offending stride). Allocates nothing, for fj_forward's hot path.
const char *tmaArgumentProblem(const FjForwardParams &params, long long *badStride = nullptr);
// Why an FP8 forward (fwd_wgmma with e4m3 inputs) cannot take these arguments, or null:
// cu_seqlens, no key, misaligned tensors, strides not multiples of 16 bytes, no V^T
// workspace.
const char *fp8ArgumentProblem(const FjForwardParams &params);

// How a tensor map lays out a batch's sequences: a variable-length batch (cu_seqlens) is
// one packed sequence of total_q (total_k) rows, batch stride 0, and the kernel offsets
// each sequence's rows; otherwise `batches` sequences of seqlen_q (seqlen_k) rows.
struct TmaBatch {
  long long rowsQ, rowsK;
  int batches;
  bool packed;
  long long batchStride(long long stride) const { return packed ? 0 : stride; }
};
TmaBatch tmaBatch(const FjForwardParams &params);

// Rank-4 tensor map over (column, row, head, batch) of one operand, boxes of boxColumns x
// boxRows, swizzled as wgmma reads them. Strides in elements, of 2 bytes or (`bytes8`:
// FP8 inputs and V^T) 1; a zero stride (a broadcast view) is encoded as 16 bytes.
llvm::Error encodeOperand(CUtensorMap &map, const generator::TmaOperands &tma, const void *base,
                          int columns, long long rows, int heads, int batch, long long rowStride,
                          long long headStride, long long batchStride, int boxColumns,
                          int boxRows, bool bytes8 = false);

// Whether a TMA kernel stores O through a tensor map (else with its own stores): not for
// variable-length batches, and only where O's address and strides are what TMA takes.
bool outputByTma(const FjForwardParams &params);

// A variant loaded on the device, of any operation: its module and the kernels the
// operation launches (tuner/operation.h).
class LoadedKernel {
public:
  virtual ~LoadedKernel() = default;
  virtual generator::Operation operation() const = 0;
  // Registers per thread of its main kernel, as the driver reports them.
  virtual int registers() const = 0;
};

// A loaded forward kernel (any family): one CTA per (query block, head, batch), or a
// persistent grid of one CTA per multiprocessor.
class ForwardKernel : public LoadedKernel {
public:
  // The forward kernel a LoadedKernel is, or null when it is another operation's.
  static const ForwardKernel *of(const LoadedKernel &kernel);
  static llvm::Expected<std::unique_ptr<ForwardKernel>>
  load(llvm::StringRef cubin, llvm::StringRef entryName, LaunchGeometry geometry);
  // Asynchronous; checks nothing but the launch itself (the caller validated params),
  // and for TMA kernels checkTmaArguments. FP8 kernels first write V^T into
  // params.v_transposed (generator::fp8TransposedBytes long; params.vt_keys is set here).
  // `tileCounter`: kTileCounterBytes of device memory no other launch uses meanwhile, or null.
  // Where the call has a block mask and the kernel orders its walk over one
  // (geometry().blockOrder), it is zeroed on `stream` and the persistent walk hands its
  // work tiles out from it as CTAs free up; elsewhere it is not touched.
  llvm::Error launch(const FjForwardParams &params, CUstream stream,
                     void *tileCounter = nullptr) const;
  // Whether launch() would use a tile counter for `params`.
  bool takesTileCounter(const FjForwardParams &params) const {
    return geometry_.blockOrder && params.block_counts != nullptr;
  }
  // The shape of this kernel's block mask for a call with `params`, shared by the
  // sequences and heads or not; with the order of the walk of a persistent kernel whose
  // grid the order kernel takes (no bit slots yet: bitCapacity 0).
  BlockMaskShape blockMaskShape(const FjForwardParams &params, bool sharedBatch,
                                bool sharedHeads) const;
  // Builds the block mask of `shape` for `params` into `buffer` (BlockMaskShape::bytes
  // long), asynchronously, and the order of the walk when the shape has one, kept where
  // it promises `orderMinGain` (kBlockOrderMinGain; 0: always). Only for kernels whose
  // geometry has blockMask. The partly masked tiles wanted (kept or not) are counted at
  // shape.usedOffset() (readBlockMaskUsed).
  llvm::Error buildBlockMask(FjForwardParams params, const BlockMaskShape &shape,
                             runtime::DeviceBuffer &buffer, CUstream stream,
                             float orderMinGain = kBlockOrderMinGain) const;
  const LaunchGeometry &geometry() const { return geometry_; }
  generator::Operation operation() const override { return generator::Operation::Forward; }
  int registers() const override { return registers_; }

private:
  std::unique_ptr<runtime::Module> module_;
  runtime::Kernel kernel_;
  // The FP8 launch: V^T first, then the forward over it.
  llvm::Error launchFp8(FjForwardParams params, CUstream stream) const;
  runtime::Kernel blockMaskKernel_;  // when geometry_.blockMask
  runtime::Kernel blockOrderKernel_;  // when geometry_.blockOrder
  runtime::Kernel transposeKernel_;  // FP8 (geometry_.tma.vTransposed): V -> V^T
  LaunchGeometry geometry_;
  int registers_ = 0;
  int smCount_ = 0;  // of the device it was loaded on, for persistent grids
};

// The naive reference (fp32, or emulating the dtype's rounding).
class ReferenceKernel {
public:
  static llvm::Expected<std::unique_ptr<ReferenceKernel>>
  build(generator::DType dtype, bool emulateLowPrecision, const std::string &target,
        const generator::Features &features = {},
        generator::DType outDtype = generator::DType::BF16);
  llvm::Error launch(const FjForwardParams &params, int headDim, int headDimV, bool causal,
                     CUstream stream) const;

private:
  std::unique_ptr<runtime::Module> module_;
  runtime::Kernel kernel_;
  int threads_ = 0;
};

} // namespace flashjit::tuner
