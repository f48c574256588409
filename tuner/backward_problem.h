// An attention backward problem on the device: the forward's tensors (q, k, v, o, lse),
// the gradient of o, the gradients written, and the workspace, turned into the
// kernels' FjBackwardParams. Shared by the backward checker, its timing problem and
// the C API (which computes the workspace layout the same way).
#pragma once

#include "runtime/driver.h"
#include "templates/fj_bwd_params.h"
#include "tuner/forward_problem.h"

#include "llvm/Support/Error.h"

#include <cstddef>

namespace flashjit::tuner {

// Where the backward kernels' scratch lives in the caller's workspace (byte offsets,
// each 256-byte aligned): lse * log2(e) and D laid out like the lse ([batch, heads_q,
// seqlen_q], or [heads_q, total_q] with cu_seqlens), the main pass's tile counter
// (kBackwardCounterBytes), then, unless deterministic, the fp32 dQ accumulator:
// [rows][heads_q][head_dim] for bwd_mma, tiled over rows + 128 batch padded rows for
// bwd_wgmma (templates/bwd_mma.cuh, DqTiled). The counter directly precedes the
// accumulator, so that one memset zeroes both.
constexpr size_t kBackwardCounterBytes = 256;  // 256-byte aligned, as the rest
struct BackwardWorkspace {
  size_t lseLog2 = 0, dpsum = 0, tileCounter = 0, dqAccum = 0;
  bool hasDqAccum = false;
  size_t bytes = 0;  // in total, a multiple of 256
};

// `rows` is batch * seqlen_q, or total_q with cu_seqlens. Overflow is the caller's to
// rule out (the API bounds every size first).
BackwardWorkspace backwardWorkspace(int headsQ, long long rows, int batch, int headDim,
                                    int headDimV, bool deterministic);

// The floats of the fp32 dQ accumulator the kernels add to, which each call zeroes
// before its kernels (tuner/backward_kernel.cpp): rows times heads_q times `columns`
// (the head dim). `tiled`: DqTiled's layout (templates/bwd_mma.cuh), whose sequences
// start at b * roundup64(seqlen_q) without cu_seqlens and at (q0 + 128 b) rounded down to
// 128 with them, and take whole 64-row groups. Within the workspace's accumulator.
size_t dqAccumulatorFloats(const FjForwardParams &p, bool tiled, int columns);

// Points the workspace fields of `params` into `base` (laid out by `layout`).
void bindWorkspace(FjBackwardParams &params, const BackwardWorkspace &layout, void *base);

// Device buffers for one problem: the forward's tensors, dO, the gradients (16-bit, or
// fp32 in dq32/dk32/dv32 for the reference), the workspace and the cu_seqlens.
struct BackwardBuffers {
  ForwardBuffers fwd;  // q, k, v, o, lse (and o32 when asked), cu_seqlens
  runtime::DeviceBuffer dout, dq, dk, dv, dq32, dk32, dv32, workspace;
  BackwardWorkspace layout;
};

llvm::Expected<BackwardBuffers> allocateBackwardBuffers(const ForwardShape &shape,
                                                        bool withFp32Outputs,
                                                        bool deterministic);

// Kernel parameters for the shape over the buffers; `fp32Outputs` points dq/dk/dv at
// the fp32 buffers (the reference's). The layout of every tensor follows
// stridesFor(); dO is laid out like O and each gradient like its input.
FjBackwardParams makeBackwardParams(const ForwardShape &shape, const BackwardBuffers &buffers,
                                    bool fp32Outputs);

} // namespace flashjit::tuner
