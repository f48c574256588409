#include "tuner/backward_kernel.h"

#include "support/error.h"
#include "tuner/backward_problem.h"

#include <algorithm>

namespace flashjit::tuner {
namespace {

unsigned ceilDiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

// The main pass's tensor maps (generator::BackwardEntries::tma): Q and dO as the
// forward maps its operands (tmaBatch; with cu_seqlens the backward's caller always
// gives total_q).
llvm::Error encodeBackwardMaps(CUtensorMap (&maps)[2], const generator::TmaOperands &tma,
                               const FjBackwardParams &params) {
  const FjForwardParams &p = params.fwd;
  const TmaBatch b = tmaBatch(p);
  if (auto err = encodeOperand(maps[0], tma, p.q, tma.headDim, b.rowsQ, p.heads_q, b.batches,
                               p.q_row_stride, p.q_head_stride, b.batchStride(p.q_batch_stride),
                               tma.panelD, tma.qRows))
    return err;
  return encodeOperand(maps[1], tma, params.dout, tma.headDimV, b.rowsQ, p.heads_q, b.batches,
                       params.dout_row_stride, params.dout_head_stride,
                       b.batchStride(params.dout_batch_stride), tma.panelDv, tma.qRows);
}

llvm::Expected<runtime::Kernel> entry(const runtime::Module &module, llvm::StringRef name,
                                      int sharedBytes) {
  auto kernel = module.kernel(name);
  if (!kernel)
    return kernel.takeError();
  if (sharedBytes > 48 * 1024)
    if (llvm::Error err = kernel->setMaxDynamicSharedMemory(sharedBytes))
      return std::move(err);
  return *kernel;
}

} // namespace

const BackwardKernel *BackwardKernel::of(const LoadedKernel &kernel) {
  return kernel.operation() == generator::Operation::Backward
             ? static_cast<const BackwardKernel *>(&kernel)
             : nullptr;
}

llvm::Expected<std::unique_ptr<BackwardKernel>>
BackwardKernel::load(llvm::StringRef cubin, const generator::EmittedKernel &emitted) {
  const generator::BackwardEntries &e = emitted.backward;
  if (!e.enabled || e.passes.empty())
    return makeError(ErrorCode::Internal, "{0} is not a backward kernel", emitted.entryName);
  auto module = runtime::Module::load(cubin);
  if (!module)
    return module.takeError();
  auto result = std::unique_ptr<BackwardKernel>(new BackwardKernel());
  for (auto [slot, name, shared] :
       {std::tuple{&result->prep_, &e.prep, 0}, std::tuple{&result->convert_, &e.convert, 0},
        std::tuple{&result->dq_, &e.dq, e.dqSharedBytes}}) {
    auto kernel = entry(**module, *name, shared);
    if (!kernel)
      return kernel.takeError();
    *slot = *kernel;
  }
  for (const std::string &name : e.passes) {
    auto kernel = entry(**module, name, emitted.sharedBytes);
    if (!kernel)
      return kernel.takeError();
    auto regs = kernel->attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
    if (!regs)
      return regs.takeError();
    result->registers_ = std::max(result->registers_, *regs);
    result->passes_.push_back(*kernel);
  }
  if (!e.blockSteps.empty()) {
    auto kernel = entry(**module, e.blockSteps, 0);
    if (!kernel)
      return kernel.takeError();
    result->blockSteps_ = *kernel;
  }
  if (e.tileWalk) {
    auto sms = runtime::currentDeviceSmCount();
    if (!sms)
      return sms.takeError();
    result->smCount_ = std::max(1, *sms);
  }
  result->module_ = std::move(*module);
  result->entries_ = e;
  result->threads_ = emitted.threads;
  result->sharedBytes_ = emitted.sharedBytes;
  return std::move(result);
}

llvm::Error BackwardKernel::zeroScratch(const FjBackwardParams &params, CUstream stream) const {
  const FjForwardParams &p = params.fwd;
  // The dQ accumulator starts at zero: one contiguous memset runs at the write
  // bandwidth, where the prep kernel's per-row stores ran at half of it (docs/PERF.md
  // bw6).
  CUdeviceptr start = 0;
  size_t words = 0;
  if (params.dq_accum && p.seqlen_q > 0) {
    start = reinterpret_cast<CUdeviceptr>(params.dq_accum);
    words = dqAccumulatorFloats(p, entries_.tiledDq, entries_.dqAccumColumns);
  }
  // So does the counter a main pass claims its tiles from. The workspace puts it just
  // before the accumulator (bindWorkspace), and the same memset takes it.
  if (entries_.claimsTiles && p.seqlen_k > 0) {
    if (!params.tile_counter)
      return makeError(ErrorCode::Internal, "{0} needs the workspace's tile counter",
                       entries_.passes.front());
    const auto counter = reinterpret_cast<CUdeviceptr>(params.tile_counter);
    if (words > 0 && start == counter + kBackwardCounterBytes) {
      start = counter;
      words += kBackwardCounterBytes / 4;
    } else if (llvm::Error err = runtime::fillWordsAsync(counter, 0, 1, stream)) {
      return err;
    }
  }
  if (words == 0)
    return llvm::Error::success();
  return runtime::fillWordsAsync(start, 0, words, stream);
}

llvm::Error BackwardKernel::launch(const FjBackwardParams &params, CUstream stream) const {
  const FjForwardParams &p = params.fwd;
  if (p.batch == 0 || p.heads_q == 0)
    return llvm::Error::success();
  void *args[] = {const_cast<FjBackwardParams *>(&params)};
  const unsigned convertBlocks = ceilDiv(p.seqlen_q, entries_.auxRowsPerCta);
  if (llvm::Error err = zeroScratch(params, stream))
    return err;
  if (p.seqlen_q > 0)
    if (llvm::Error err = prep_.launch(ceilDiv(p.seqlen_q, entries_.prepRowsPerCta),
                                       (unsigned)p.heads_q, (unsigned)p.batch,
                                       (unsigned)entries_.auxThreads, 0, stream, args))
      return err;
  // The main pass takes the tensor maps of Q and dO after the parameters when its
  // family loads by TMA (with no query row it loads nothing, and they stay zero).
  alignas(64) CUtensorMap maps[2] = {};
  void *withMaps[] = {args[0], &maps[0], &maps[1]};
  void **mainArgs = entries_.tma.enabled ? withMaps : args;
  if (entries_.tma.enabled && p.seqlen_k > 0 && p.seqlen_q > 0)
    if (llvm::Error err = encodeBackwardMaps(maps, entries_.tma, params))
      return err;
  // Key blocks no query sees (or all of them, with no queries) still write their
  // zero dK and dV. A main pass that walks the tiles itself takes them on a grid in x,
  // one CTA an SM (at most one a tile: a CTA's first tile is its index).
  if (p.seqlen_k > 0) {
    const unsigned blocks = ceilDiv(p.seqlen_k, entries_.keysPerCta);
    unsigned grid[3] = {blocks, (unsigned)p.heads_kv, (unsigned)p.batch};
    if (entries_.tileWalk) {
      const long long tiles = (long long)blocks * p.heads_kv * p.batch;
      grid[0] = (unsigned)std::min<long long>(tiles, smCount_);
      grid[1] = grid[2] = 1;
    }
    for (const runtime::Kernel &pass : passes_)
      if (llvm::Error err = pass.launch(grid[0], grid[1], grid[2], (unsigned)threads_,
                                        (unsigned)sharedBytes_, stream, mainArgs))
        return err;
  }
  if (p.seqlen_q == 0)
    return llvm::Error::success();
  if (params.dq_accum)
    return convert_.launch(convertBlocks, (unsigned)p.heads_q, (unsigned)p.batch,
                           (unsigned)entries_.auxThreads, 0, stream, args);
  return dq_.launch(ceilDiv(p.seqlen_q, entries_.dqRowsPerCta), (unsigned)p.heads_q,
                    (unsigned)p.batch, (unsigned)entries_.dqThreads,
                    (unsigned)entries_.dqSharedBytes,
                    stream, args);
}

llvm::Error BackwardKernel::buildBlockSteps(FjBackwardParams params,
                                            const BlockStepsShape &shape,
                                            runtime::DeviceBuffer &buffer,
                                            CUstream stream) const {
  if (!blockSteps_)
    return makeError(ErrorCode::Internal, "{0} builds no block mask", entries_.passes.front());
  if (shape.lists() == 0)
    return llvm::Error::success();
  if (auto err =
          readyBuilderBuffer(buffer, shape.bytes(), shape.usedOffset(), "block steps", stream))
    return err;
  const uint64_t base = buffer.ptr();
  shape.describe(params, base);
  unsigned *steps = reinterpret_cast<unsigned *>(base);
  int *counts = reinterpret_cast<int *>(base + shape.countsOffset());
  int *slots = reinterpret_cast<int *>(base + shape.slotsOffset());
  unsigned *bits = reinterpret_cast<unsigned *>(base + shape.bitsOffset());
  int *used = reinterpret_cast<int *>(base + shape.usedOffset());
  int shared = shape.sharedHeads ? 1 : 0;
  void *args[] = {&params, &steps, &counts, &slots, &bits, &used, &shared};
  return blockSteps_->launch((unsigned)shape.keyBlocks, (unsigned)shape.heads,
                             (unsigned)shape.batches,
                             (unsigned)generator::kBackwardBlockStepsThreads, 0, stream, args);
}

llvm::Expected<std::unique_ptr<BackwardReferenceKernel>>
BackwardReferenceKernel::build(generator::DType dtype, bool emulateLowPrecision,
                               const std::string &target, const generator::Features &features) {
  auto emitted = generator::emitBackwardReference(dtype, emulateLowPrecision, target, features);
  if (!emitted)
    return emitted.takeError();
  auto binary = compileEmitted(*emitted, target);
  if (!binary)
    return binary.takeError();
  auto module = runtime::Module::load(binary->cubin);
  if (!module)
    return module.takeError();
  auto result = std::unique_ptr<BackwardReferenceKernel>(new BackwardReferenceKernel());
  auto rows = (*module)->kernel("flashjit_reference_bwd_rows");
  if (!rows)
    return rows.takeError();
  auto keys = (*module)->kernel("flashjit_reference_bwd_keys");
  if (!keys)
    return keys.takeError();
  result->rows_ = *rows;
  result->keys_ = *keys;
  result->module_ = std::move(*module);
  result->threads_ = emitted->threads;
  return std::move(result);
}

llvm::Error BackwardReferenceKernel::launch(const FjBackwardParams &params, int headDim,
                                            int headDimV, bool causal, float *lseRef,
                                            float *dpsumRef, CUstream stream) const {
  const FjForwardParams &p = params.fwd;
  if (p.batch == 0 || p.heads_q == 0)
    return llvm::Error::success();
  int isCausal = causal ? 1 : 0;
  void *args[] = {const_cast<FjBackwardParams *>(&params), &headDim, &headDimV, &isCausal,
                  &lseRef, &dpsumRef};
  if (p.seqlen_q > 0)
    if (llvm::Error err = rows_.launch((unsigned)p.seqlen_q, (unsigned)p.heads_q,
                                       (unsigned)p.batch, (unsigned)threads_, 0, stream, args))
      return err;
  if (p.seqlen_k > 0)
    return keys_.launch((unsigned)p.seqlen_k, (unsigned)p.heads_kv, (unsigned)p.batch,
                        (unsigned)threads_, 0, stream, args);
  return llvm::Error::success();
}

} // namespace flashjit::tuner
