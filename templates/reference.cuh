// The reference: the textbook formula, one CTA per (query row, head, batch), fp32
// arithmetic on upcast inputs. With kEmulateLowPrecision it rounds the scores, the
// probabilities and the output to the element type like a naive framework
// implementation in that dtype would; the gap between the two references sets the
// tolerance a flash kernel must meet (DESIGN.md, correctness bar). Head dims, causal
// and the layout are run-time values here: one compiled reference serves every test.
// Features (fj_features.cuh's struct) are applied by the formulas written out again here,
// not through the kernels' hook, so that the hook is checked against them: exact tanh,
// and with kEmulateLowPrecision each step rounded as a framework would.
#pragma once

#include "fj_common.cuh"
#include "fj_features.cuh"

namespace fj {
namespace reference {

constexpr int kThreads = 128;

__device__ __forceinline__ float block_reduce(float x, bool is_max, float *scratch) {
  for (int off = 16; off > 0; off >>= 1) {
    float y = __shfl_xor_sync(0xffffffff, x, off);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w)
    x = is_max ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

// `out` is float when !kEmulateLowPrecision, else the element type.
template <typename T, bool kEmulateLowPrecision, typename F = NoFeatures>
__device__ void run(const FjForwardParams &p, int head_dim, int head_dim_v, bool causal) {
  __shared__ float probs[kThreads];
  __shared__ float scratch[kThreads / 32];
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const SeqExtent seq = seq_extent(p, b);
  if (i >= seq.seqlen_q)
    return;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const u16 *q = (const u16 *)p.q +
                 tensor_base(seq.q_offset, b, h, p.q_batch_stride, p.q_row_stride,
                             p.q_head_stride) +
                 (long long)i * p.q_row_stride;
  const u16 *k = (const u16 *)p.k + tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride,
                                                p.k_row_stride, p.k_head_stride);
  const u16 *v = (const u16 *)p.v + tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride,
                                                p.v_row_stride, p.v_head_stride);
  const long long o_off = tensor_base(seq.q_offset, b, h, p.o_batch_stride,
                                      p.o_row_stride, p.o_head_stride) +
                          (long long)i * p.o_row_stride;
  // Keys this row sees (bottom-right aligned causal mask).
  int n_keys = seq.seqlen_k;
  if (causal)
    n_keys = imax(0, imin(n_keys, i + seq.seqlen_k - seq.seqlen_q + 1));

  const int diag = seq.seqlen_k - seq.seqlen_q;
  auto rounded = [](float x) { return kEmulateLowPrecision ? round_to<T>(x) : x; };
  auto score = [&](int j) {
    float s = 0.f;
    for (int d = 0; d < head_dim; ++d)
      s += to_float<T>(q[d]) * to_float<T>(k[(long long)j * p.k_row_stride + d]);
    float x = kEmulateLowPrecision ? round_to<T>(round_to<T>(s) * p.softmax_scale)
                                   : s * p.softmax_scale;
    if (F::kSoftcap > 0.f)
      x = rounded(F::kSoftcap * tanhf(x / F::kSoftcap));
    if (F::kAlibi) {
      const float slope = p.alibi_slopes[(long long)b * p.alibi_batch_stride + h];
      x = rounded(x - slope * fabsf((float)(i + diag - j)));
    }
    if (F::kScoreMod)
      x = rounded(F::score_mod(x, b, h, i, j, p.mod_args));
    bool keep = true;
    if (F::kWindow && F::kWindowLeft >= 0 && j < i + diag - F::kWindowLeft)
      keep = false;
    if (F::kWindow && F::kWindowRight >= 0 && j > i + diag + F::kWindowRight)
      keep = false;
    if (F::kMaskMod && !F::mask_mod(b, h, i, j, p.mod_args))
      keep = false;
    return keep ? x : __int_as_float(0xff800000);
  };

  float mx = __int_as_float(0xff800000);
  for (int j = tid; j < n_keys; j += kThreads)
    mx = fmaxf(mx, score(j));
  mx = block_reduce(mx, true, scratch);
  // Every key masked (by the features): the row sees none.
  if (mx == __int_as_float(0xff800000))
    n_keys = 0;
  float sum = 0.f;
  for (int j = tid; j < n_keys; j += kThreads)
    sum += expf(score(j) - mx);
  sum = block_reduce(sum, false, scratch);

  // Each thread owns output columns tid and tid + 128 (head_dim_v <= 256).
  float acc0 = 0.f, acc1 = 0.f;
  for (int j0 = 0; j0 < n_keys; j0 += kThreads) {
    const int j = j0 + tid;
    float pr = 0.f;
    if (j < n_keys) {
      pr = expf(score(j) - mx) / sum;
      if (kEmulateLowPrecision)
        pr = round_to<T>(pr);
    }
    __syncthreads();
    probs[tid] = pr;
    __syncthreads();
    const int n = imin(kThreads, n_keys - j0);
    for (int jj = 0; jj < n; ++jj) {
      const u16 *vrow = v + (long long)(j0 + jj) * p.v_row_stride;
      if (tid < head_dim_v)
        acc0 += probs[jj] * to_float<T>(vrow[tid]);
      if (tid + kThreads < head_dim_v)
        acc1 += probs[jj] * to_float<T>(vrow[tid + kThreads]);
    }
  }
  // A row that sees no key: output 0, log-sum-exp -inf.
  if (n_keys == 0) {
    acc0 = acc1 = 0.f;
  }
  for (int c = tid, r = 0; r < 2; c += kThreads, ++r) {
    if (c >= head_dim_v)
      break;
    float val = r == 0 ? acc0 : acc1;
    if (kEmulateLowPrecision)
      ((u16 *)p.o)[o_off + c] = from_float<T>(val);
    else
      ((float *)p.o)[o_off + c] = val;
  }
  if (p.lse && tid == 0)
    p.lse[seq.lse_offset + (long long)h * p.lse_head_stride + i] =
        n_keys == 0 ? __int_as_float(0xff800000) : mx + logf(sum);
}

}  // namespace reference
}  // namespace fj
