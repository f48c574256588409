#include "tuner/backward_problem.h"

#include "generator/bwd_wgmma.h"

#include <algorithm>

namespace flashjit::tuner {
namespace {

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

llvm::Error allocate(runtime::DeviceBuffer &buffer, long long bytes) {
  auto allocated = runtime::DeviceBuffer::allocate(std::max<long long>(bytes, 16));
  if (!allocated)
    return allocated.takeError();
  buffer = std::move(*allocated);
  return llvm::Error::success();
}

} // namespace

BackwardWorkspace backwardWorkspace(int headsQ, long long rows, int batch, int headDim,
                                    int headDimV, bool deterministic) {
  BackwardWorkspace w;
  // Each lse-shaped array and the zeroed floats after it (FJ_BWD_STATS_PAD).
  const size_t stats =
      align256(((size_t)headsQ * (size_t)rows + FJ_BWD_STATS_PAD) * sizeof(float));
  w.lseLog2 = 0;
  w.dpsum = stats;
  w.tileCounter = 2 * stats;
  w.bytes = w.tileCounter + kBackwardCounterBytes;
  w.hasDqAccum = !deterministic;
  if (w.hasDqAccum) {
    w.dqAccum = w.bytes;
    // Room for bwd_wgmma's tiled layout, whose sequences start on multiples of 128 rows
    // (templates/bwd_mma.cuh, DqTiled) and whose rows are its padded head dim wide;
    // bwd_mma's row-major one uses the first `rows` x headDim. One size for both, as a
    // handle's buckets may run either. The padded head dim holds both head dims.
    const size_t paddedRows = (size_t)rows + (size_t)batch * 128;
    const size_t columns =
        (size_t)generator::bwdWgmmaPaddedHeadDim(std::max(headDim, headDimV));
    w.bytes += align256(paddedRows * (size_t)headsQ * columns * sizeof(float));
  }
  return w;
}

size_t dqAccumulatorFloats(const FjForwardParams &p, bool tiled, int columns) {
  const long long rows = p.cu_seqlens_q ? p.total_q : (long long)p.batch * p.seqlen_q;
  long long used = rows;
  if (tiled)
    used = p.cu_seqlens_q ? (rows + 128ll * p.batch) / 128 * 128
                          : (long long)p.batch * ((p.seqlen_q + 63) / 64 * 64);
  return (size_t)used * (size_t)p.heads_q * (size_t)columns;
}

void bindWorkspace(FjBackwardParams &params, const BackwardWorkspace &layout, void *base) {
  char *bytes = static_cast<char *>(base);
  params.lse_log2 = reinterpret_cast<float *>(bytes + layout.lseLog2);
  params.dpsum = reinterpret_cast<float *>(bytes + layout.dpsum);
  params.dq_accum = layout.hasDqAccum ? reinterpret_cast<float *>(bytes + layout.dqAccum) : nullptr;
  params.tile_counter = reinterpret_cast<int *>(bytes + layout.tileCounter);
}

llvm::Expected<BackwardBuffers> allocateBackwardBuffers(const ForwardShape &shape,
                                                        bool withFp32Outputs,
                                                        bool deterministic) {
  BackwardBuffers b;
  ForwardShape withLse = shape;
  withLse.withLse = true;  // the backward pass needs the forward's log-sum-exp
  auto fwd = allocateBuffers(withLse, withFp32Outputs);
  if (!fwd)
    return fwd.takeError();
  b.fwd = std::move(*fwd);
  const long long tq = shape.totalQ(), tk = shape.totalK();
  const long long q = tensorElements(shape, shape.headsQ, shape.headDim, shape.seqQ, tq);
  const long long o = tensorElements(shape, shape.headsQ, shape.headDimV, shape.seqQ, tq);
  const long long k = tensorElements(shape, shape.headsKV, shape.headDim, shape.seqK, tk);
  const long long v = tensorElements(shape, shape.headsKV, shape.headDimV, shape.seqK, tk);
  for (auto [buffer, elements] : {std::pair{&b.dout, o}, std::pair{&b.dq, q},
                                  std::pair{&b.dk, k}, std::pair{&b.dv, v}})
    if (llvm::Error err = allocate(*buffer, 2 * elements))
      return std::move(err);
  if (withFp32Outputs)
    for (auto [buffer, elements] :
         {std::pair{&b.dq32, q}, std::pair{&b.dk32, k}, std::pair{&b.dv32, v}})
      if (llvm::Error err = allocate(*buffer, 4 * elements))
        return std::move(err);
  b.layout = backwardWorkspace(shape.headsQ, tq, shape.batch, shape.headDim, shape.headDimV,
                               deterministic);
  if (llvm::Error err = allocate(b.workspace, (long long)b.layout.bytes))
    return std::move(err);
  return std::move(b);
}

FjBackwardParams makeBackwardParams(const ForwardShape &shape, const BackwardBuffers &buffers,
                                    bool fp32Outputs) {
  FjBackwardParams p{};
  ForwardShape withLse = shape;
  withLse.withLse = true;
  p.fwd = makeParams(withLse, buffers.fwd, /*fp32Output=*/false);
  p.dout = reinterpret_cast<const void *>(buffers.dout.ptr());
  p.dq = reinterpret_cast<void *>(fp32Outputs ? buffers.dq32.ptr() : buffers.dq.ptr());
  p.dk = reinterpret_cast<void *>(fp32Outputs ? buffers.dk32.ptr() : buffers.dk.ptr());
  p.dv = reinterpret_cast<void *>(fp32Outputs ? buffers.dv32.ptr() : buffers.dv.ptr());
  // dO is laid out like O, each gradient like its input.
  p.dout_batch_stride = p.fwd.o_batch_stride, p.dout_row_stride = p.fwd.o_row_stride;
  p.dout_head_stride = p.fwd.o_head_stride;
  p.dq_batch_stride = p.fwd.q_batch_stride, p.dq_row_stride = p.fwd.q_row_stride;
  p.dq_head_stride = p.fwd.q_head_stride;
  p.dk_batch_stride = p.fwd.k_batch_stride, p.dk_row_stride = p.fwd.k_row_stride;
  p.dk_head_stride = p.fwd.k_head_stride;
  p.dv_batch_stride = p.fwd.v_batch_stride, p.dv_row_stride = p.fwd.v_row_stride;
  p.dv_head_stride = p.fwd.v_head_stride;
  bindWorkspace(p, buffers.layout, reinterpret_cast<void *>(buffers.workspace.ptr()));
  return p;
}

} // namespace flashjit::tuner
