// An attention forward problem on the device: sizes, layout, and the buffers that
// hold it, turned into the kernels' FjForwardParams. Shared by the correctness
// checker, the timing harness and the C API.
#pragma once

#include "generator/spec.h"
#include "runtime/driver.h"
#include "templates/fj_params.h"
#include "tuner/roofline.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace flashjit::tuner {

enum class Layout {
  BSHD,  // [batch, seq, heads, dim]: the FlashAttention layout
  BHSD,  // [batch, heads, seq, dim]: PyTorch's SDPA layout
};

struct ForwardShape {
  int batch = 1, headsQ = 1, headsKV = 1;
  int seqQ = 1, seqK = 1;              // maximum lengths when varlen
  int headDim = 128, headDimV = 128;
  Layout layout = Layout::BSHD;
  int rowPadding = 0;                  // extra elements per row (a multiple of 8)
  std::vector<int> seqlensQ, seqlensK; // non-empty: variable-length batch (packed rows)
  bool withLse = true;
  float softmaxScale = 0;              // 0: 1/sqrt(headDim)
  // Inputs of the spec's features (forShape sets them): per-(batch, head) ALiBi slopes
  // made up by allocateBuffers, and the user code's `args`.
  bool alibi = false;
  FjModArgs modArgs = {};
  // FP8 (e4m3) inputs: Q, K and V of one byte an element, made-up per-(batch, kv head)
  // dequantization factors, and the V^T workspace the kernels write (O stays 16-bit).
  bool fp8 = false;
  // Decode (dec_mma, tuner/decode_problem.h): seqQ query rows per sequence against a
  // KV cache of seqK tokens, or seqlensK[b] with seqlensQ empty; pageSize tokens per
  // page (0: a contiguous cache); decodeSplits the split count (0: the heuristic).
  int pageSize = 0;
  int decodeSplits = 0;

  bool varlen() const { return !seqlensQ.empty(); }
  long long totalQ() const;            // rows of Q/O (packed when varlen)
  long long totalK() const;
  float scale() const;
};

// `shape` with the inputs the spec's features need (ALiBi slopes, the user code's
// tuning args) and its dtype's (FP8's descale factors and V^T workspace; decode's buffers
// follow the spec's dtype instead and ignore that flag).
ForwardShape withFeatureInputs(const generator::KernelSpec &spec, ForwardShape shape);

// The roofline model's view of a problem (FLOPs, bytes) for a spec.
AttentionShape attentionShapeOf(const generator::KernelSpec &spec, const ForwardShape &shape);

// Element strides of one tensor.
struct Strides {
  long long batch = 0, row = 0, head = 0;
};

// Strides of a tensor with `heads` heads of `dim` elements over `seq` rows.
Strides stridesFor(const ForwardShape &shape, int heads, int dim, int seq);

// Number of elements a tensor's buffer spans.
long long tensorElements(const ForwardShape &shape, int heads, int dim, int seq, long long totalRows);

// Device buffers for one problem. Q/K/V/O are 16-bit; `o32` (optional) is an fp32
// output with O's strides, for the fp32 reference.
struct ForwardBuffers {
  runtime::DeviceBuffer q, k, v, o, o32, lse, cuSeqlensQ, cuSeqlensK, alibiSlopes;
  runtime::DeviceBuffer descales, vTransposed;  // FP8: q, k, v factors; V^T
};

llvm::Expected<ForwardBuffers> allocateBuffers(const ForwardShape &shape, bool withFp32Output);

// The made-up ALiBi slopes of a test or timing problem, [batch, headsQ]: ALiBi's geometric
// slopes 2^(-8 (h + 1) / H), scaled per sequence so that a wrong batch stride shows.
std::vector<float> testAlibiSlopes(int batch, int headsQ);

// Kernel parameters for the shape over the buffers; `out` selects O or the fp32 O.
FjForwardParams makeParams(const ForwardShape &shape, const ForwardBuffers &buffers,
                           bool fp32Output);

} // namespace flashjit::tuner
