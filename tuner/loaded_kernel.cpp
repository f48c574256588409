#include "tuner/loaded_kernel.h"

#include "support/error.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace flashjit::tuner {

llvm::Expected<runtime::CompiledBinary> compileEmitted(const generator::EmittedKernel &kernel,
                                                       const std::string &target) {
  runtime::CompileOptions options;
  options.target = target;
  options.options = kernel.options;
  auto binary = runtime::compile(kernel.source, options);
  if (!binary)
    return binary.takeError();
  // ptxas compiles these but the kernel would be slow or wrong in its resource plan:
  // wgmma serialized (a pipeline the schedule relies on is gone) or setmaxnreg ignored
  // (C7508/C7509: consumers would not get the registers the tile was sized for).
  for (llvm::StringRef sign : {"wgmma.mma_async instructions are serialized", "C7508", "C7509",
                               "C7510", "setmaxnreg ignored"})
    if (llvm::StringRef(binary->log).contains(sign))
      return makeError(ErrorCode::Compile, "rejected: ptxas says '{0}':\n{1}", sign,
                       binary->log);
  return binary;
}

const ForwardKernel *ForwardKernel::of(const LoadedKernel &kernel) {
  return kernel.operation() == generator::Operation::Forward
             ? static_cast<const ForwardKernel *>(&kernel)
             : nullptr;
}

llvm::Expected<std::unique_ptr<ForwardKernel>>
ForwardKernel::load(llvm::StringRef cubin, llvm::StringRef entryName, LaunchGeometry geometry) {
  auto module = runtime::Module::load(cubin);
  if (!module)
    return module.takeError();
  auto kernel = (*module)->kernel(entryName);
  if (!kernel)
    return kernel.takeError();
  if (geometry.sharedBytes > 48 * 1024)
    if (auto err = kernel->setMaxDynamicSharedMemory(geometry.sharedBytes))
      return std::move(err);
  auto result = std::unique_ptr<ForwardKernel>(new ForwardKernel());
  auto regs = kernel->attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
  if (!regs)
    return regs.takeError();
  result->registers_ = *regs;
  if (geometry.persistent) {
    auto sms = runtime::currentDeviceSmCount();
    if (!sms)
      return sms.takeError();
    result->smCount_ = *sms;
  }
  if (geometry.blockMask) {
    auto builder = (*module)->kernel(generator::kBlockMaskEntry);
    if (!builder)
      return builder.takeError();
    result->blockMaskKernel_ = *builder;
    if (geometry.blockOrder) {
      auto order = (*module)->kernel(generator::kBlockOrderEntry);
      if (!order)
        return order.takeError();
      result->blockOrderKernel_ = *order;
    }
  }
  if (geometry.tma.vTransposed) {
    auto transpose = (*module)->kernel(generator::kFp8TransposeEntry);
    if (!transpose)
      return transpose.takeError();
    result->transposeKernel_ = *transpose;
  }
  result->module_ = std::move(*module);
  result->kernel_ = *kernel;
  result->geometry_ = geometry;
  return std::move(result);
}

void BlockMaskShape::describe(FjForwardParams &params, uint64_t base) const {
  params.block_counts = reinterpret_cast<const int *>(base);
  params.block_tiles = reinterpret_cast<const int *>(base + tilesOffset());
  params.block_slots = reinterpret_cast<const int *>(base + slotsOffset());
  params.block_bits = reinterpret_cast<const unsigned *>(base + bitsOffset());
  params.block_head_stride = heads > 1 ? queryBlocks : 0;
  params.block_batch_stride = batches > 1 ? heads * queryBlocks : 0;
  params.block_tiles_stride = keyBlocks;
  params.block_bits_capacity = (int)std::min<int64_t>(bitCapacity, INT32_MAX);
  params.block_order = orderUnits > 0 ? reinterpret_cast<const int *>(base + orderOffset())
                                      : nullptr;
  params.block_order_grid = orderGrid;
}

llvm::Error readyBuilderBuffer(runtime::DeviceBuffer &buffer, int64_t bytes,
                               int64_t usedOffset, const char *what, CUstream stream) {
  if ((int64_t)buffer.size() < bytes)
    return makeError(ErrorCode::Internal, "{0} buffer of {1} bytes, {2} needed", what,
                     buffer.size(), bytes);
  return buffer.fillWordsAsync(0, (size_t)usedOffset, 1, stream);
}

BlockMaskShape ForwardKernel::blockMaskShape(const FjForwardParams &params, bool sharedBatch,
                                             bool sharedHeads) const {
  BlockMaskShape shape =
      BlockMaskShape::of(geometry_, sharedBatch ? 1 : params.batch,
                         sharedHeads ? 1 : params.heads_q, params.seqlen_q, params.seqlen_k);
  // The launch's grid (launch(): min(work tiles, multiprocessors)), if the order kernel
  // takes it; the kernel walks its own order otherwise. The order kernel walks the
  // rounds one after another, ~5 us each (H100: the build of 4096 tiles, 31 rounds, took
  // 0.15 ms more): past kMaxOrderedTiles (124 rounds) it would take over half a
  // millisecond, and so many rounds even out more by themselves.
  constexpr int64_t kMaxOrderedTiles = 1 << 14;
  const int64_t units = (int64_t)shape.queryBlocks * params.heads_q * params.batch;
  const int64_t grid = std::min<int64_t>(units, smCount_);
  if (geometry_.blockOrder && units > 0 && units <= kMaxOrderedTiles &&
      grid <= generator::kBlockOrderThreads) {
    shape.orderUnits = units;
    shape.orderGrid = (int)grid;
  }
  return shape;
}

llvm::Error ForwardKernel::buildBlockMask(FjForwardParams params, const BlockMaskShape &shape,
                                          runtime::DeviceBuffer &buffer, CUstream stream,
                                          float orderMinGain) const {
  if (!geometry_.blockMask)
    return makeError(ErrorCode::Internal, "this forward kernel has no block-mask builder");
  if (shape.workTiles() == 0)
    return llvm::Error::success();
  if (auto err =
          readyBuilderBuffer(buffer, shape.bytes(), shape.usedOffset(), "block mask", stream))
    return err;
  const uint64_t base = buffer.ptr();
  shape.describe(params, base);
  int *counts = reinterpret_cast<int *>(base);
  int *tiles = reinterpret_cast<int *>(base + shape.tilesOffset());
  int *slots = reinterpret_cast<int *>(base + shape.slotsOffset());
  unsigned *bits = reinterpret_cast<unsigned *>(base + shape.bitsOffset());
  int *used = reinterpret_cast<int *>(base + shape.usedOffset());
  void *args[] = {&params, &counts, &tiles, &slots, &bits, &used};
  if (auto err = blockMaskKernel_.launch((unsigned)shape.queryBlocks, (unsigned)shape.heads,
                                         (unsigned)shape.batches, generator::kBlockMaskThreads,
                                         0, stream, args))
    return err;
  if (shape.orderUnits == 0)
    return llvm::Error::success();
  int *order = reinterpret_cast<int *>(base + shape.orderOffset());
  int units = (int)shape.orderUnits, grid = shape.orderGrid;
  void *orderArgs[] = {&params, &order, &units, &grid, &orderMinGain};
  return blockOrderKernel_.launch(1, 1, 1, generator::kBlockOrderThreads, 0, stream,
                                  orderArgs);
}

namespace {
// Variable-length batches (cu_seqlens): one packed sequence to TMA, batch strides ignored.
bool variableLength(const FjForwardParams &params) {
  return params.cu_seqlens_q || params.cu_seqlens_k;
}
bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
// A stride (in elements of elementBytes) a tensor map takes: a multiple of 16 bytes, below
// 2^39 elements: 8 16-bit elements, 16 8-bit ones (FP8 inputs).
bool tmaStride(long long stride, int elementBytes = 2) {
  return stride % (16 / elementBytes) == 0 && stride >= 0 && stride < (1ll << 39);
}
// The row, head and batch strides of q, k and v that the tensor maps take (batch strides
// are not read for a variable-length batch).
std::array<long long, 9> qkvStrides(const FjForwardParams &params) {
  const TmaBatch b = tmaBatch(params);
  return {params.q_row_stride, params.q_head_stride, b.batchStride(params.q_batch_stride),
          params.k_row_stride, params.k_head_stride, b.batchStride(params.k_batch_stride),
          params.v_row_stride, params.v_head_stride, b.batchStride(params.v_batch_stride)};
}
} // namespace

const char *fp8ArgumentProblem(const FjForwardParams &params) {
  if (variableLength(params) && (params.total_q <= 0 || params.total_k <= 0))
    return "FP8 kernels take variable-length batches (cu_seqlens) only with total_q and "
           "total_k, the packed row counts";
  if (params.seqlen_k <= 0)
    return "FP8 kernels need at least one key";
  if (!aligned16(params.q) || !aligned16(params.k) || !aligned16(params.v))
    return "FP8 kernels need q, k and v aligned to 16 bytes";
  for (long long stride : qkvStrides(params))
    if (!tmaStride(stride, 1))
      return "FP8 kernels need q, k and v strides that are multiples of 16 elements (16 "
             "bytes) and below 2^39";
  if (!params.v_transposed || !aligned16(params.v_transposed))
    return "FP8 kernels need a workspace for V transposed, 16-byte aligned";
  return nullptr;
}

const char *tmaArgumentProblem(const FjForwardParams &params, long long *badStride) {
  const bool varlen = variableLength(params);
  // A tensor map describes the packed rows of a variable-length batch as one sequence,
  // so it needs their number to bound the loads.
  if (varlen && (params.total_q <= 0 || params.total_k <= 0))
    return "TMA kernels take variable-length batches (cu_seqlens) only with total_q and "
           "total_k, the packed row counts";
  if (params.seqlen_k <= 0)
    return "TMA kernels need at least one key (a tensor map cannot describe an empty K/V)";
  if (!aligned16(params.q) || !aligned16(params.k) || !aligned16(params.v))
    return "TMA kernels need q, k and v aligned to 16 bytes";
  for (long long stride : qkvStrides(params))
    if (!tmaStride(stride)) {
      if (badStride)
        *badStride = stride;
      return "TMA kernels need row, head and batch strides that are multiples of 8 elements "
             "(16 bytes) and below 2^39";
    }
  return nullptr;
}

bool outputByTma(const FjForwardParams &params) {
  // A variable-length batch's last tile of a sequence would write into the next one's
  // rows: a tensor map over the packed rows cannot stop at the sequence's end.
  // A zero stride (writes that overlap) only where its dimension has one index: the map
  // stands 16 bytes in for it.
  auto stride = [](long long s, long long extent) { return tmaStride(s) && (s > 0 || extent <= 1); };
  return !variableLength(params) && aligned16(params.o) &&
         stride(params.o_row_stride, params.seqlen_q) &&
         stride(params.o_head_stride, params.heads_q) &&
         stride(params.o_batch_stride, params.batch);
}

llvm::Error checkTmaArguments(const FjForwardParams &params) {
  long long stride = 0;
  const char *problem = tmaArgumentProblem(params, &stride);
  if (!problem)
    return llvm::Error::success();
  if (llvm::StringRef(problem).contains("strides"))
    return makeError(ErrorCode::NotSupported, "{0}; got {1}", problem, stride);
  return makeError(ErrorCode::NotSupported, "{0}", problem);
}

TmaBatch tmaBatch(const FjForwardParams &params) {
  const bool packed = variableLength(params);
  return {packed ? params.total_q : params.seqlen_q, packed ? params.total_k : params.seqlen_k,
          packed ? 1 : params.batch, packed};
}

llvm::Error encodeOperand(CUtensorMap &map, const generator::TmaOperands &tma, const void *base,
                          int columns, long long rows, int heads, int batch, long long rowStride,
                          long long headStride, long long batchStride, int boxColumns,
                          int boxRows, bool bytes8) {
  const uint64_t size = bytes8 ? 1 : 2;
  uint64_t dims[4] = {(uint64_t)columns, (uint64_t)rows, (uint64_t)heads, (uint64_t)batch};
  uint64_t strides[3] = {(uint64_t)rowStride * size, (uint64_t)headStride * size,
                         (uint64_t)batchStride * size};
  // TMA rejects zero strides (broadcast views); with one head or one batch any
  // multiple of 16 describes the same memory.
  for (uint64_t &stride : strides)
    if (stride == 0)
      stride = 16;
  unsigned box[4] = {(unsigned)boxColumns, (unsigned)boxRows, 1, 1};
  unsigned elementStrides[4] = {1, 1, 1, 1};
  auto dtype = bytes8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
               : tma.dtype == generator::DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  // Rows of 128 bytes take the 128-byte swizzle, rows of 64 the 64-byte one, rows of 32
  // (FP8 V^T panels) the 32-byte one.
  const uint64_t rowBytes = boxColumns * size;
  auto swizzle = rowBytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                 : rowBytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                  : CU_TENSOR_MAP_SWIZZLE_32B;
  return runtime::encodeTensorMapTiled(&map, dtype, 4, const_cast<void *>(base), dims, strides,
                                       box, elementStrides, swizzle);
}

namespace {

// The tensor maps of Q, K and (withV) V: maps[0..2], 16-bit or bytes8 (FP8, whose V^T
// the caller maps). A variable-length batch is one packed sequence of total_q (total_k)
// rows to TMA; the kernel offsets each sequence's rows by cu_seqlens.
llvm::Error encodeQKV(CUtensorMap (&maps)[4], const generator::TmaOperands &tma,
                      const FjForwardParams &params, bool bytes8, bool withV) {
  const TmaBatch b = tmaBatch(params);
  if (auto err = encodeOperand(maps[0], tma, params.q, tma.headDim, b.rowsQ, params.heads_q,
                               b.batches, params.q_row_stride, params.q_head_stride,
                               b.batchStride(params.q_batch_stride), tma.panelD, tma.qRows,
                               bytes8))
    return err;
  if (auto err = encodeOperand(maps[1], tma, params.k, tma.headDim, b.rowsK, params.heads_kv,
                               b.batches, params.k_row_stride, params.k_head_stride,
                               b.batchStride(params.k_batch_stride), tma.panelD, tma.kvRows,
                               bytes8))
    return err;
  if (!withV)
    return llvm::Error::success();
  return encodeOperand(maps[2], tma, params.v, tma.headDimV, b.rowsK, params.heads_kv,
                       b.batches, params.v_row_stride, params.v_head_stride,
                       b.batchStride(params.v_batch_stride), tma.panelDv, tma.kvRows, bytes8);
}
} // namespace

llvm::Error ForwardKernel::launch(const FjForwardParams &params, CUstream stream,
                                  void *tileCounter) const {
  unsigned blocks = (unsigned)((params.seqlen_q + geometry_.blockM - 1) / geometry_.blockM);
  if (blocks == 0 || params.batch == 0 || params.heads_q == 0)
    return llvm::Error::success();  // nothing to compute
  const generator::TmaOperands &tma = geometry_.tma;
  if (tma.vTransposed)
    return launchFp8(params, stream);
  if (tma.enabled) {
    if (auto err = checkTmaArguments(params))
      return err;
    alignas(64) CUtensorMap maps[4] = {};
    if (auto err = encodeQKV(maps, tma, params, /*bytes8=*/false, /*withV=*/true))
      return err;
    // O by TMA where the kernel can and its map describes O; else the kernel stores it.
    int oByTma = tma.oRows > 0 && outputByTma(params) ? 1 : 0;
    if (oByTma)
      if (auto err = encodeOperand(maps[3], tma, params.o, tma.headDimV, params.seqlen_q,
                                   params.heads_q, params.batch, params.o_row_stride,
                                   params.o_head_stride, params.o_batch_stride, tma.panelDv,
                                   tma.oRows))
        return err;
    int *counter = tileCounter && takesTileCounter(params) ? static_cast<int *>(tileCounter)
                                                            : nullptr;
    if (counter)
      if (auto err = runtime::fillWordsAsync((CUdeviceptr)counter, 0, 1, stream))
        return err;
    void *args[] = {const_cast<FjForwardParams *>(&params), &maps[0], &maps[1], &maps[2],
                    &maps[3], &oByTma, &counter};
    // TMA kernels walk their work tiles on a 1-D grid: persistent, or one CTA each.
    // (A persistent causal kernel takes tiles in pairs; CTAs left without one exit.)
    long long tiles = (long long)blocks * params.heads_q * params.batch;
    unsigned grid = (unsigned)(geometry_.persistent ? std::min<long long>(tiles, smCount_)
                                                    : tiles);
    return kernel_.launch(grid, 1, 1, (unsigned)geometry_.threads,
                          (unsigned)geometry_.sharedBytes, stream, args);
  }
  void *args[] = {const_cast<FjForwardParams *>(&params)};
  return kernel_.launch(blocks, (unsigned)params.heads_q, (unsigned)params.batch,
                        (unsigned)geometry_.threads, (unsigned)geometry_.sharedBytes, stream,
                        args);
}

llvm::Error ForwardKernel::launchFp8(FjForwardParams params, CUstream stream) const {
  if (const char *problem = fp8ArgumentProblem(params))
    return makeError(ErrorCode::NotSupported, "{0}", problem);
  const generator::TmaOperands &tma = geometry_.tma;
  // With cu_seqlens V^T holds every sequence in one batch (generator::fp8TransposedLayout).
  const generator::Fp8TransposedLayout vt = generator::fp8TransposedLayout(
      params.batch, params.seqlen_k, variableLength(params) ? params.total_k : 0);
  params.vt_keys = vt.keys;
  void *transposeArgs[] = {&params};
  if (auto err = transposeKernel_.launch((unsigned)vt.gridX, (unsigned)params.heads_kv,
                                         (unsigned)params.batch,
                                         generator::kFp8TransposeThreads, 0, stream,
                                         transposeArgs))
    return err;
  alignas(64) CUtensorMap maps[4] = {};
  if (auto err = encodeQKV(maps, tma, params, /*bytes8=*/true, /*withV=*/false))
    return err;
  // V^T: columns are keys, rows head_dim_v (zero-filled up to vtRows).
  const long long vtRow = params.vt_keys, vtHead = tma.headDimV * vtRow,
                  vtBatch = params.heads_kv * vtHead;
  if (auto err = encodeOperand(maps[2], tma, params.v_transposed, (int)params.vt_keys,
                               tma.headDimV, params.heads_kv, (int)vt.batches, vtRow, vtHead,
                               vtBatch, tma.panelDv, tma.vtRows, /*bytes8=*/true))
    return err;
  int oByTma = 0;
  int *noCounter = nullptr;
  void *args[] = {&params, &maps[0], &maps[1], &maps[2], &maps[3], &oByTma, &noCounter};
  const unsigned blocks = (unsigned)((params.seqlen_q + geometry_.blockM - 1) / geometry_.blockM);
  const long long tiles = (long long)blocks * params.heads_q * params.batch;
  return kernel_.launch((unsigned)std::min<long long>(tiles, smCount_), 1, 1,
                        (unsigned)geometry_.threads, (unsigned)geometry_.sharedBytes, stream,
                        args);
}

llvm::Expected<std::unique_ptr<ReferenceKernel>>
ReferenceKernel::build(generator::DType dtype, bool emulateLowPrecision,
                       const std::string &target, const generator::Features &features,
                       generator::DType outDtype) {
  auto emitted =
      generator::emitReference(dtype, emulateLowPrecision, target, features, outDtype);
  if (!emitted)
    return emitted.takeError();
  auto binary = compileEmitted(*emitted, target);
  if (!binary)
    return binary.takeError();
  auto module = runtime::Module::load(binary->cubin);
  if (!module)
    return module.takeError();
  auto kernel = (*module)->kernel(emitted->entryName);
  if (!kernel)
    return kernel.takeError();
  auto result = std::unique_ptr<ReferenceKernel>(new ReferenceKernel());
  result->module_ = std::move(*module);
  result->kernel_ = *kernel;
  result->threads_ = emitted->threads;
  return std::move(result);
}

llvm::Error ReferenceKernel::launch(const FjForwardParams &params, int headDim, int headDimV,
                                    bool causal, CUstream stream) const {
  if (params.seqlen_q == 0 || params.batch == 0 || params.heads_q == 0)
    return llvm::Error::success();
  int isCausal = causal ? 1 : 0;
  void *args[] = {const_cast<FjForwardParams *>(&params), &headDim, &headDimV, &isCausal};
  return kernel_.launch((unsigned)params.seqlen_q, (unsigned)params.heads_q,
                        (unsigned)params.batch, (unsigned)threads_, 0, stream, args);
}

} // namespace flashjit::tuner
