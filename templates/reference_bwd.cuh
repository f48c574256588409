// The backward reference: the textbook gradients, fp32 arithmetic on upcast inputs,
//   P = softmax(f(scale * Q K^T) [causal mask]), dV = P^T dO, dP = dO V^T,
//   D_i = sum_j P_ij dP_ij, dS = P * (dP - D) * f', dQ = scale * dS K, dK = scale * dS^T Q,
// where f is the features' transform and mask (soft-capping, ALiBi, a window, a
// mask_mod; the identity without features) and f' its derivative,
// with its own P (from its own log-sum-exp, not the forward's) and its own D (not
// rowsum(dO * O), which needs O). With kEmulateLowPrecision it rounds the scores, P,
// dP, dS and the outputs to the element type like a naive framework implementation in
// that dtype would; the gap between the two sets the tolerance (DESIGN.md). Head dims,
// causal and the layout are run-time values: one compiled reference serves every test.
#pragma once

#include "fj_bwd_params.h"
#include "reference.cuh"

namespace fj {
namespace reference {

// A scaled score x = q.k * scale of row i and key j after the features, by the forward
// reference's formulas (exact tanh; each step rounded when emulating), or -inf where a
// mask drops the key; `dlogit` gets the result's derivative by x (soft-capping's
// 1 - tanh^2 of x / cap, else 1), which the gradient of the scores takes as a factor.
template <typename T, bool kEmulateLowPrecision, typename F>
__device__ __forceinline__ float feature_score(float x, const FjForwardParams &p, int b, int h,
                                              int i, int j, int diag, float &dlogit) {
  auto rounded = [](float v) { return kEmulateLowPrecision ? round_to<T>(v) : v; };
  dlogit = 1.f;
  if (F::kSoftcap > 0.f) {
    const float th = tanhf(x / F::kSoftcap);
    dlogit = 1.f - th * th;
    x = rounded(F::kSoftcap * th);
  }
  if (F::kAlibi) {
    const float slope = p.alibi_slopes[(long long)b * p.alibi_batch_stride + h];
    x = rounded(x - slope * fabsf((float)(i + diag - j)));
  }
  bool keep = true;
  if (F::kWindow && F::kWindowLeft >= 0 && j < i + diag - F::kWindowLeft)
    keep = false;
  if (F::kWindow && F::kWindowRight >= 0 && j > i + diag + F::kWindowRight)
    keep = false;
  if (F::kMaskMod && !F::mask_mod(b, h, i, j, p.mod_args))
    keep = false;
  return keep ? x : __int_as_float(0xff800000);
}

template <typename T, bool kEmulateLowPrecision>
__device__ __forceinline__ float dot_rows(const u16 *a, const u16 *b, int n) {
  float s = 0.f;
  for (int c = 0; c < n; ++c)
    s += to_float<T>(a[c]) * to_float<T>(b[c]);
  return kEmulateLowPrecision ? round_to<T>(s) : s;
}

template <typename T, bool kEmulateLowPrecision>
__device__ __forceinline__ void store_out(void *base, long long off, float value) {
  if (kEmulateLowPrecision)
    ((u16 *)base)[off] = from_float<T>(value);
  else
    ((float *)base)[off] = value;
}

// Per query row: the reference's lse and D (to lse_ref and dpsum_ref, laid out like the
// forward's lse), and dQ. Grid (seqlen_q, heads_q, batch), kThreads threads.
template <typename T, bool kEmulateLowPrecision, typename F = NoFeatures>
__device__ void run_bwd_rows(const FjBackwardParams &P, int head_dim, int head_dim_v,
                             bool causal, float *lse_ref, float *dpsum_ref) {
  __shared__ float ds_tile[kThreads];
  __shared__ float scratch[kThreads / 32];
  const FjForwardParams &p = P.fwd;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const SeqExtent seq = seq_extent(p, b);
  if (i >= seq.seqlen_q)
    return;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const u16 *q = (const u16 *)p.q +
                 tensor_base(seq.q_offset, b, h, p.q_batch_stride, p.q_row_stride,
                             p.q_head_stride) +
                 (long long)i * p.q_row_stride;
  const u16 *dout = (const u16 *)P.dout +
                    tensor_base(seq.q_offset, b, h, P.dout_batch_stride, P.dout_row_stride,
                                P.dout_head_stride) +
                    (long long)i * P.dout_row_stride;
  const u16 *k = (const u16 *)p.k + tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride,
                                                p.k_row_stride, p.k_head_stride);
  const u16 *v = (const u16 *)p.v + tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride,
                                                p.v_row_stride, p.v_head_stride);
  int n_keys = seq.seqlen_k;
  if (causal)
    n_keys = imax(0, imin(n_keys, i + seq.seqlen_k - seq.seqlen_q + 1));

  const int diag = seq.seqlen_k - seq.seqlen_q;
  auto score_and_dlogit = [&](int j, float &dlogit) {
    float s = dot_rows<T, kEmulateLowPrecision>(q, k + (long long)j * p.k_row_stride, head_dim);
    s = kEmulateLowPrecision ? round_to<T>(s * p.softmax_scale) : s * p.softmax_scale;
    return feature_score<T, kEmulateLowPrecision, F>(s, p, b, h, i, j, diag, dlogit);
  };
  auto score = [&](int j) {
    float unused;
    return score_and_dlogit(j, unused);
  };
  auto dprob = [&](int j) {
    return dot_rows<T, kEmulateLowPrecision>(dout, v + (long long)j * p.v_row_stride,
                                             head_dim_v);
  };

  float mx = __int_as_float(0xff800000);
  for (int j = tid; j < n_keys; j += kThreads)
    mx = fmaxf(mx, score(j));
  mx = block_reduce(mx, true, scratch);
  float sum = 0.f;
  for (int j = tid; j < n_keys; j += kThreads)
    sum += expf(score(j) - mx);
  sum = block_reduce(sum, false, scratch);
  // A row whose every key is dropped has no probabilities (and lse -inf).
  auto prob_and_dlogit = [&](int j, float &dlogit) {
    const float x = score_and_dlogit(j, dlogit);
    float pr = x == __int_as_float(0xff800000) ? 0.f : expf(x - mx) / sum;
    return kEmulateLowPrecision ? round_to<T>(pr) : pr;
  };
  auto prob = [&](int j) {
    float unused;
    return prob_and_dlogit(j, unused);
  };
  float dsum = 0.f;
  for (int j = tid; j < n_keys; j += kThreads)
    dsum += prob(j) * dprob(j);
  dsum = block_reduce(dsum, false, scratch);

  // dQ: each thread owns columns tid and tid + kThreads (head_dim <= 256).
  float acc0 = 0.f, acc1 = 0.f;
  for (int j0 = 0; j0 < n_keys; j0 += kThreads) {
    const int j = j0 + tid;
    float ds = 0.f;
    if (j < n_keys) {
      float dlogit;
      const float pr = prob_and_dlogit(j, dlogit);
      ds = pr * (dprob(j) - dsum) * dlogit;
      if (kEmulateLowPrecision)
        ds = round_to<T>(ds);
    }
    __syncthreads();
    ds_tile[tid] = ds;
    __syncthreads();
    const int n = imin(kThreads, n_keys - j0);
    for (int jj = 0; jj < n; ++jj) {
      const u16 *krow = k + (long long)(j0 + jj) * p.k_row_stride;
      if (tid < head_dim)
        acc0 += ds_tile[jj] * to_float<T>(krow[tid]);
      if (tid + kThreads < head_dim)
        acc1 += ds_tile[jj] * to_float<T>(krow[tid + kThreads]);
    }
  }
  const long long dq_off = tensor_base(seq.q_offset, b, h, P.dq_batch_stride, P.dq_row_stride,
                                       P.dq_head_stride) +
                           (long long)i * P.dq_row_stride;
  for (int c = tid, r = 0; r < 2 && c < head_dim; c += kThreads, ++r)
    store_out<T, kEmulateLowPrecision>(P.dq, dq_off + c,
                                       (r == 0 ? acc0 : acc1) * p.softmax_scale);
  if (tid == 0) {
    const long long li = seq.lse_offset + (long long)h * p.lse_head_stride + i;
    const bool empty = n_keys == 0 || mx == __int_as_float(0xff800000);
    lse_ref[li] = empty ? __int_as_float(0xff800000) : mx + logf(sum);
    dpsum_ref[li] = empty ? 0.f : dsum;
  }
}

// Per key row: dK and dV summed over the query heads of its group. Grid (seqlen_k,
// heads_kv, batch), kThreads threads, after run_bwd_rows.
template <typename T, bool kEmulateLowPrecision, typename F = NoFeatures>
__device__ void run_bwd_keys(const FjBackwardParams &P, int head_dim, int head_dim_v,
                             bool causal, const float *lse_ref, const float *dpsum_ref) {
  __shared__ float p_tile[kThreads];
  __shared__ float ds_tile[kThreads];
  const FjForwardParams &p = P.fwd;
  const int j = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const SeqExtent seq = seq_extent(p, b);
  if (j >= seq.seqlen_k)
    return;
  const int group = p.heads_q / p.heads_kv;
  const int diag = seq.seqlen_k - seq.seqlen_q;
  const u16 *krow = (const u16 *)p.k +
                    tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride, p.k_row_stride,
                                p.k_head_stride) +
                    (long long)j * p.k_row_stride;
  const u16 *vrow = (const u16 *)p.v +
                    tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride, p.v_row_stride,
                                p.v_head_stride) +
                    (long long)j * p.v_row_stride;
  float dk0 = 0.f, dk1 = 0.f, dv0 = 0.f, dv1 = 0.f;
  for (int h = h_kv * group; h < (h_kv + 1) * group; ++h) {
    const u16 *q = (const u16 *)p.q + tensor_base(seq.q_offset, b, h, p.q_batch_stride,
                                                  p.q_row_stride, p.q_head_stride);
    const u16 *dout = (const u16 *)P.dout +
                      tensor_base(seq.q_offset, b, h, P.dout_batch_stride, P.dout_row_stride,
                                  P.dout_head_stride);
    const long long lse_base = seq.lse_offset + (long long)h * p.lse_head_stride;
    for (int i0 = 0; i0 < seq.seqlen_q; i0 += kThreads) {
      const int i = i0 + tid;
      float pr = 0.f, ds = 0.f;
      if (i < seq.seqlen_q && (!causal || j <= i + diag)) {
        float s = dot_rows<T, kEmulateLowPrecision>(q + (long long)i * p.q_row_stride, krow,
                                                    head_dim);
        s = kEmulateLowPrecision ? round_to<T>(s * p.softmax_scale) : s * p.softmax_scale;
        float dlogit;
        s = feature_score<T, kEmulateLowPrecision, F>(s, p, b, h, i, j, diag, dlogit);
        pr = s == __int_as_float(0xff800000) ? 0.f : expf(s - lse_ref[lse_base + i]);
        if (kEmulateLowPrecision)
          pr = round_to<T>(pr);
        const float dp = dot_rows<T, kEmulateLowPrecision>(
            dout + (long long)i * P.dout_row_stride, vrow, head_dim_v);
        ds = pr * (dp - dpsum_ref[lse_base + i]) * dlogit;
        if (kEmulateLowPrecision)
          ds = round_to<T>(ds);
      }
      __syncthreads();
      p_tile[tid] = pr;
      ds_tile[tid] = ds;
      __syncthreads();
      const int n = imin(kThreads, seq.seqlen_q - i0);
      for (int ii = 0; ii < n; ++ii) {
        const u16 *qrow = q + (long long)(i0 + ii) * p.q_row_stride;
        const u16 *drow = dout + (long long)(i0 + ii) * P.dout_row_stride;
        if (tid < head_dim)
          dk0 += ds_tile[ii] * to_float<T>(qrow[tid]);
        if (tid + kThreads < head_dim)
          dk1 += ds_tile[ii] * to_float<T>(qrow[tid + kThreads]);
        if (tid < head_dim_v)
          dv0 += p_tile[ii] * to_float<T>(drow[tid]);
        if (tid + kThreads < head_dim_v)
          dv1 += p_tile[ii] * to_float<T>(drow[tid + kThreads]);
      }
    }
  }
  const long long dk_off = tensor_base(seq.k_offset, b, h_kv, P.dk_batch_stride,
                                       P.dk_row_stride, P.dk_head_stride) +
                           (long long)j * P.dk_row_stride;
  const long long dv_off = tensor_base(seq.k_offset, b, h_kv, P.dv_batch_stride,
                                       P.dv_row_stride, P.dv_head_stride) +
                           (long long)j * P.dv_row_stride;
  for (int c = tid, r = 0; r < 2 && c < head_dim; c += kThreads, ++r)
    store_out<T, kEmulateLowPrecision>(P.dk, dk_off + c, (r == 0 ? dk0 : dk1) * p.softmax_scale);
  for (int c = tid, r = 0; r < 2 && c < head_dim_v; c += kThreads, ++r)
    store_out<T, kEmulateLowPrecision>(P.dv, dv_off + c, r == 0 ? dv0 : dv1);
}

}  // namespace reference
}  // namespace fj
