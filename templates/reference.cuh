// The reference: the textbook formula, one CTA per (query row, head, batch), fp32
// arithmetic on upcast inputs. With kEmulateLowPrecision it rounds the scores, the
// probabilities and the output to the element type like a naive framework
// implementation in that dtype would; the gap between the two references sets the
// tolerance a flash kernel must meet (DESIGN.md, correctness bar). Head dims, causal
// and the layout are run-time values here: one compiled reference serves every test.
// Features (fj_features.cuh's struct) are applied by the formulas written out again here,
// not through the kernels' hook, so that the hook is checked against them: exact tanh,
// and with kEmulateLowPrecision each step rounded as a framework would.
// FP8 (e4m3) inputs: dequantized (x * descale) and computed in fp32; emulated, as
// FlashAttention-3's test suite computes the naive FP8 attention it measures its kernel
// against: in the output's 16-bit type, with the probabilities cast to e4m3 before P V.
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

// The 16-bit type a naive computation on T works in: T, or for FP8 inputs the output's.
template <typename T, typename TOut> struct FloatingType {
  typedef T type;
};
template <typename TOut> struct FloatingType<e4m3, TOut> {
  typedef TOut type;
};

// Element idx of a tensor of T as a float.
template <typename T> __device__ __forceinline__ float load_element(const void *base, long long idx) {
  if constexpr (T::kBytes == 1)
    return e4m3_to_float(((const u8 *)base)[idx]);
  else
    return to_float<T>(((const u16 *)base)[idx]);
}
__device__ __forceinline__ float descale_of(const float *factors, const FjForwardParams &p,
                                            int b, int h_kv) {
  return factors ? factors[b * p.descale_batch_stride + h_kv * p.descale_head_stride] : 1.f;
}

// `out` is float when !kEmulateLowPrecision, else TOut (the element type, or the 16-bit
// output type of FP8 inputs).
template <typename T, bool kEmulateLowPrecision, typename F = NoFeatures, typename TOut = T>
__device__ void run(const FjForwardParams &p, int head_dim, int head_dim_v, bool causal) {
  constexpr bool kFp8 = T::kBytes == 1;
  __shared__ float probs[kThreads];
  __shared__ float scratch[kThreads / 32];
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const SeqExtent seq = seq_extent(p, b);
  if (i >= seq.seqlen_q)
    return;
  const int h_kv = h / (p.heads_q / p.heads_kv);
  const long long q_off = tensor_base(seq.q_offset, b, h, p.q_batch_stride, p.q_row_stride,
                                      p.q_head_stride) +
                          (long long)i * p.q_row_stride;
  const long long k_off = tensor_base(seq.k_offset, b, h_kv, p.k_batch_stride,
                                      p.k_row_stride, p.k_head_stride);
  const long long v_off = tensor_base(seq.k_offset, b, h_kv, p.v_batch_stride,
                                      p.v_row_stride, p.v_head_stride);
  const float qk_descale = kFp8 ? descale_of(p.q_descale, p, b, h_kv) *
                                      descale_of(p.k_descale, p, b, h_kv)
                                : 1.f;
  const float v_descale = kFp8 ? descale_of(p.v_descale, p, b, h_kv) : 1.f;
  const long long o_off = tensor_base(seq.q_offset, b, h, p.o_batch_stride,
                                      p.o_row_stride, p.o_head_stride) +
                          (long long)i * p.o_row_stride;
  // Keys this row sees (bottom-right aligned causal mask).
  int n_keys = seq.seqlen_k;
  if (causal)
    n_keys = imax(0, imin(n_keys, i + seq.seqlen_k - seq.seqlen_q + 1));

  const int diag = seq.seqlen_k - seq.seqlen_q;
  auto rounded = [](float x) {
    if constexpr (kEmulateLowPrecision)
      return round_to<typename FloatingType<T, TOut>::type>(x);
    return x;
  };
  auto score = [&](int j) {
    float s = 0.f;
    for (int d = 0; d < head_dim; ++d)
      s += load_element<T>(p.q, q_off + d) *
           load_element<T>(p.k, k_off + (long long)j * p.k_row_stride + d);
    float x = rounded(rounded(s * qk_descale) * p.softmax_scale);
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
      if constexpr (kEmulateLowPrecision && kFp8)
        pr = round_to_e4m3(pr);
      else if constexpr (kEmulateLowPrecision)
        pr = round_to<T>(pr);
    }
    __syncthreads();
    probs[tid] = pr;
    __syncthreads();
    const int n = imin(kThreads, n_keys - j0);
    for (int jj = 0; jj < n; ++jj) {
      const long long vrow = v_off + (long long)(j0 + jj) * p.v_row_stride;
      if (tid < head_dim_v)
        acc0 += probs[jj] * load_element<T>(p.v, vrow + tid);
      if (tid + kThreads < head_dim_v)
        acc1 += probs[jj] * load_element<T>(p.v, vrow + tid + kThreads);
    }
  }
  // A row that sees no key: output 0, log-sum-exp -inf.
  if (n_keys == 0) {
    acc0 = acc1 = 0.f;
  }
  for (int c = tid, r = 0; r < 2; c += kThreads, ++r) {
    if (c >= head_dim_v)
      break;
    float val = (r == 0 ? acc0 : acc1) * v_descale;
    if (kEmulateLowPrecision)
      ((u16 *)p.o)[o_off + c] = from_float<TOut>(val);
    else
      ((float *)p.o)[o_off + c] = val;
  }
  if (p.lse && tid == 0)
    p.lse[seq.lse_offset + (long long)h * p.lse_head_stride + i] =
        n_keys == 0 ? __int_as_float(0xff800000) : mx + logf(sum);
}

}  // namespace reference
}  // namespace fj
