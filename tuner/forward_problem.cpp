#include "tuner/forward_problem.h"

#include "generator/emit.h"

#include <cmath>
#include <numeric>

namespace flashjit::tuner {

long long ForwardShape::totalQ() const {
  return varlen() ? std::accumulate(seqlensQ.begin(), seqlensQ.end(), 0LL)
                  : (long long)batch * seqQ;
}

long long ForwardShape::totalK() const {
  return varlen() ? std::accumulate(seqlensK.begin(), seqlensK.end(), 0LL)
                  : (long long)batch * seqK;
}

float ForwardShape::scale() const {
  return softmaxScale > 0 ? softmaxScale : 1.0f / std::sqrt((float)headDim);
}

ForwardShape withFeatureInputs(const generator::KernelSpec &spec, ForwardShape shape) {
  shape.alibi = spec.features.alibi;
  shape.fp8 = spec.dtype == generator::DType::E4M3;
  if (spec.features.hasTuningArgs)
    shape.modArgs = spec.features.tuningArgs;
  return shape;
}

AttentionShape attentionShapeOf(const generator::KernelSpec &spec, const ForwardShape &shape) {
  AttentionShape a;
  a.batch = shape.batch;
  a.headsQ = shape.headsQ;
  a.headsKV = shape.headsKV;
  a.seqQ = shape.seqQ;
  a.seqK = shape.seqK;
  a.headDim = spec.headDim;
  a.headDimV = spec.headDimV;
  a.causal = spec.causal;
  if (spec.features.window) {
    a.windowLeft = spec.features.windowLeft;
    a.windowRight = spec.features.windowRight;
  }
  a.elementBytes = generator::elementBytes(spec.dtype);  // of Q, K and V
  return a;
}

Strides stridesFor(const ForwardShape &shape, int heads, int dim, int seq) {
  Strides s;
  long long rowElems = (long long)dim + shape.rowPadding;
  if (shape.layout == Layout::BSHD || shape.varlen()) {
    s.head = rowElems;
    s.row = heads * rowElems;
    s.batch = (long long)seq * s.row;
  } else {
    s.row = rowElems;
    s.head = (long long)seq * rowElems;
    s.batch = heads * s.head;
  }
  return s;
}

long long tensorElements(const ForwardShape &shape, int heads, int dim, int seq,
                         long long totalRows) {
  long long rowElems = (long long)dim + shape.rowPadding;
  return totalRows * heads * rowElems;
}

std::vector<float> testAlibiSlopes(int batch, int headsQ) {
  std::vector<float> slopes((size_t)batch * headsQ);
  for (int bi = 0; bi < batch; ++bi)
    for (int h = 0; h < headsQ; ++h)
      slopes[(size_t)bi * headsQ + h] =
          std::exp2(-8.0f * (h + 1) / headsQ) * (1.0f + 0.25f * (bi % 4));
  return slopes;
}

llvm::Expected<ForwardBuffers> allocateBuffers(const ForwardShape &shape, bool withFp32Output) {
  ForwardBuffers b;
  auto alloc = [](runtime::DeviceBuffer &buffer, long long bytes) -> llvm::Error {
    auto allocated = runtime::DeviceBuffer::allocate(std::max<long long>(bytes, 16));
    if (!allocated)
      return allocated.takeError();
    buffer = std::move(*allocated);
    return llvm::Error::success();
  };
  long long tq = shape.totalQ(), tk = shape.totalK();
  const long long in = shape.fp8 ? 1 : 2;  // bytes of a Q, K or V element
  if (auto e = alloc(b.q, in * tensorElements(shape, shape.headsQ, shape.headDim, shape.seqQ, tq)))
    return std::move(e);
  if (auto e = alloc(b.k, in * tensorElements(shape, shape.headsKV, shape.headDim, shape.seqK, tk)))
    return std::move(e);
  if (auto e = alloc(b.v, in * tensorElements(shape, shape.headsKV, shape.headDimV, shape.seqK, tk)))
    return std::move(e);
  if (shape.fp8) {
    // Factors 0.5 .. 1.5 per (sequence, kv head), different for q, k and v, so that a
    // factor applied to the wrong tensor, head or sequence shows.
    const size_t n = (size_t)shape.batch * shape.headsKV;
    std::vector<float> factors(3 * n);
    for (size_t i = 0; i < factors.size(); ++i)
      factors[i] = 0.5f + (float)((i * 37 + 11) % 64) / 64.0f;
    if (auto e = alloc(b.descales, 4 * (long long)factors.size()))
      return std::move(e);
    if (auto e = b.descales.upload(factors.data(), 4 * factors.size()))
      return std::move(e);
    if (auto e = alloc(b.vTransposed, generator::fp8TransposedBytes(
                                          shape.batch, shape.headsKV, shape.headDimV, shape.seqK,
                                          shape.varlen() ? tk : 0)))
      return std::move(e);
  }
  long long oElems = tensorElements(shape, shape.headsQ, shape.headDimV, shape.seqQ, tq);
  if (auto e = alloc(b.o, 2 * oElems))
    return std::move(e);
  if (withFp32Output)
    if (auto e = alloc(b.o32, 4 * oElems))
      return std::move(e);
  if (shape.withLse)
    if (auto e = alloc(b.lse, 4 * (long long)shape.headsQ * tq))
      return std::move(e);
  if (shape.alibi) {
    const std::vector<float> slopes = testAlibiSlopes(shape.batch, shape.headsQ);
    if (auto e = alloc(b.alibiSlopes, 4 * (long long)slopes.size()))
      return std::move(e);
    if (auto e = b.alibiSlopes.upload(slopes.data(), 4 * slopes.size()))
      return std::move(e);
  }
  if (shape.varlen()) {
    for (auto [lens, buffer] : {std::pair{&shape.seqlensQ, &b.cuSeqlensQ},
                                std::pair{&shape.seqlensK, &b.cuSeqlensK}}) {
      std::vector<int> cu(lens->size() + 1, 0);
      std::partial_sum(lens->begin(), lens->end(), cu.begin() + 1);
      if (auto e = alloc(*buffer, 4 * (long long)cu.size()))
        return std::move(e);
      if (auto e = buffer->upload(cu.data(), 4 * cu.size()))
        return std::move(e);
    }
  }
  return std::move(b);
}

FjForwardParams makeParams(const ForwardShape &shape, const ForwardBuffers &buffers,
                           bool fp32Output) {
  FjForwardParams p{};
  p.q = reinterpret_cast<const void *>(buffers.q.ptr());
  p.k = reinterpret_cast<const void *>(buffers.k.ptr());
  p.v = reinterpret_cast<const void *>(buffers.v.ptr());
  p.o = reinterpret_cast<void *>(fp32Output ? buffers.o32.ptr() : buffers.o.ptr());
  p.lse = shape.withLse ? reinterpret_cast<float *>(buffers.lse.ptr()) : nullptr;
  if (shape.varlen()) {
    p.cu_seqlens_q = reinterpret_cast<const int *>(buffers.cuSeqlensQ.ptr());
    p.cu_seqlens_k = reinterpret_cast<const int *>(buffers.cuSeqlensK.ptr());
    p.total_q = shape.totalQ();
    p.total_k = shape.totalK();
  }
  Strides q = stridesFor(shape, shape.headsQ, shape.headDim, shape.seqQ);
  Strides k = stridesFor(shape, shape.headsKV, shape.headDim, shape.seqK);
  Strides v = stridesFor(shape, shape.headsKV, shape.headDimV, shape.seqK);
  Strides o = stridesFor(shape, shape.headsQ, shape.headDimV, shape.seqQ);
  p.q_batch_stride = q.batch, p.q_row_stride = q.row, p.q_head_stride = q.head;
  p.k_batch_stride = k.batch, p.k_row_stride = k.row, p.k_head_stride = k.head;
  p.v_batch_stride = v.batch, p.v_row_stride = v.row, p.v_head_stride = v.head;
  p.o_batch_stride = o.batch, p.o_row_stride = o.row, p.o_head_stride = o.head;
  // LSE: [batch, heads, seq_q], or [heads, total_q] for varlen.
  p.lse_head_stride = shape.varlen() ? shape.totalQ() : shape.seqQ;
  p.lse_batch_stride = (long long)shape.headsQ * shape.seqQ;
  p.batch = shape.batch;
  p.heads_q = shape.headsQ;
  p.heads_kv = shape.headsKV;
  p.seqlen_q = shape.seqQ;
  p.seqlen_k = shape.seqK;
  p.softmax_scale = shape.scale();
  p.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  if (shape.alibi) {
    p.alibi_slopes = reinterpret_cast<const float *>(buffers.alibiSlopes.ptr());
    p.alibi_batch_stride = shape.headsQ;
  }
  p.mod_args = shape.modArgs;
  if (shape.fp8) {
    const float *factors = reinterpret_cast<const float *>(buffers.descales.ptr());
    const long long n = (long long)shape.batch * shape.headsKV;
    p.q_descale = factors;
    p.k_descale = factors + n;
    p.v_descale = factors + 2 * n;
    p.descale_batch_stride = shape.headsKV;
    p.descale_head_stride = 1;
    p.v_transposed = reinterpret_cast<void *>(buffers.vTransposed.ptr());  // vt_keys: set by the launch
  }
  return p;
}

} // namespace flashjit::tuner
