// Device primitives shared by the attention kernels: element types, conversions,
// cp.async, ldmatrix and mma.sync wrappers. Host-free so NVRTC compiles it with no
// headers at all (which also keeps compile time low).
#pragma once

#include "fj_params.h"

namespace fj {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
struct __align__(16) u32x4 {
  u32 x, y, z, w;
};

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// Element type tags. Values are stored as raw bit patterns of kBytes bytes.
struct f16 {
  static constexpr bool kIsBf16 = false;
  static constexpr int kBytes = 2;
};
struct bf16 {
  static constexpr bool kIsBf16 = true;
  static constexpr int kBytes = 2;
};
// FP8 e4m3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinity, largest
// finite 448): the inputs of the FP8 forward (fwd_wgmma on sm_90a), whose output is one
// of the 16-bit types.
struct e4m3 {
  static constexpr bool kIsBf16 = false;
  static constexpr int kBytes = 1;
};

// Division by a divisor fixed for a whole launch: one wide multiply and a shift, where a
// division by a run-time int is ~20 instructions in a long dependent chain. Exact for
// 0 <= n < 2^31 and 1 <= d < 2^31: with l = ceil(log2 d) and m = ceil(2^(31+l) / d),
// n (m d - 2^(31+l)) < 2^31 d <= 2^(31+l), so the rounding error stays below 1/d.
struct FastDiv {
  u32 mul, shift;
  __device__ explicit FastDiv(int d) {
    const u32 l = 32 - __clz((u32)d - 1u);  // ceil(log2 d); 0 for d = 1
    shift = 31 + l;
    mul = (u32)(((1ull << shift) + (u32)d - 1u) / (u32)d);  // < 2^32 since 2^l < 2d
  }
  __device__ int operator()(int n) const { return (int)(((u64)(u32)n * mul) >> shift); }
};

// a / b for 0 <= a < 2^20 and 0 < b < 2^30, where a division is too rare to earn a
// FastDiv but the ~20-instruction software sequence would crowd the producer's 24
// registers: a float estimate (off by at most one: its relative error is ~2^-22), fixed.
__device__ __forceinline__ int small_div(int a, int b) {
  int q = (int)((float)a * __frcp_rn((float)b));
  const int r = a - q * b;
  q += r < 0 ? -1 : (r >= b ? 1 : 0);
  return q;
}

// Two floats -> one register of two 16-bit values, `lo` at the lower address.
template <typename T> __device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if (T::kIsBf16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <typename T> __device__ __forceinline__ float to_float(u16 x) {
  float f;
  if (T::kIsBf16)
    f = __uint_as_float(((u32)x) << 16);
  else
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}

template <typename T> __device__ __forceinline__ u16 from_float(float f) {
  u16 r;
  if (T::kIsBf16)
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}

// Rounds a float to the element type and back (the reference emulates it).
template <typename T> __device__ __forceinline__ float round_to(float f) {
  return to_float<T>(from_float<T>(f));
}

// Four floats -> one register of four e4m3 values, `a` in the lowest byte. Rounds to
// nearest and saturates to +-448 (the softmax keeps P below that, see fwd_wgmma).
__device__ __forceinline__ u32 pack4_e4m3(float a, float b, float c, float d) {
  unsigned short lo, hi;
  // The first source goes to the upper byte of each pair.
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  return (u32)lo | ((u32)hi << 16);
}

// One e4m3 value as a float, decoded from its bits (no conversion instruction: the
// reference decodes what the kernels' tensor cores read, independently of them).
__device__ __forceinline__ float e4m3_to_float(u8 x) {
  const int e = (x >> 3) & 15, m = x & 7;
  float v;
  if (e == 15 && m == 7)
    v = __int_as_float(0x7fc00000);                        // NaN
  else if (e == 0)
    v = (float)m * 0.001953125f;                           // subnormal: m / 8 * 2^-6
  else
    v = __int_as_float(((e + 120) << 23) | (m << 20));     // (1 + m / 8) * 2^(e - 7)
  return (x & 0x80) ? -v : v;
}
// Rounds a float to e4m3 and back (saturating, as pack4_e4m3).
__device__ __forceinline__ float round_to_e4m3(float f) {
  return e4m3_to_float((u8)(pack4_e4m3(f, 0.f, 0.f, 0.f) & 0xff));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ u32 smem_addr(const void *p) {
  return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ u32 ld_shared_u32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_shared_v4(u32 addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
// A 16-byte global store. (A plain uint4 store came out of NVRTC as four 4-byte STG.)
__device__ __forceinline__ void st_global_v4(void *ptr, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"l"(ptr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// 16-byte asynchronous copy global -> shared; copies zeros when !valid (the source
// is then not read), which pads partial tiles.
__device__ __forceinline__ void cp_async_16(u32 dst, const void *src, bool valid) {
  int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Programmatic dependent launch (sm_90 and newer; no-ops before). A kernel launched with
// the programmatic-serialization attribute may start while the kernel before it in the
// stream still runs, once every CTA of that one has called pdl_launch_dependents (or
// exited); its pdl_wait then blocks until that kernel has finished and its writes are
// visible. What it saves is the second kernel's launch latency (~1 us, docs/PERF.md d2).
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ldmatrix: each lane gives the address of one 16-byte row of an 8x8 matrix.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// D = A(16x16, row) * B(16x8, col) + D, fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if (T::kIsBf16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A(16x8, row) * B(8x8, col) + D: the tail step of head dims that are an odd
// multiple of 8 (40, 72, ...), so those run exactly, with no padding.
template <typename T>
__device__ __forceinline__ void mma_1688(float (&d)[4], const u32 (&a)[2], u32 b0) {
  if (T::kIsBf16)
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0));
  else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0));
}

// Where sequence b of a (possibly variable-length) batch starts and how long it is.
struct SeqExtent {
  long long q_offset, k_offset;  // element offsets of row 0 of this sequence
  long long lse_offset;
  int seqlen_q, seqlen_k;

  // Tensor-map coordinates of sequence b's query row or key: with cu_seqlens the maps
  // hold the packed rows as one batch (batch 0) and the sequence starts at its packed
  // row (the host's side: tmaBatch() in runtime/loaded_kernel.h).
  __device__ __forceinline__ int tma_batch(int b) const { return q_offset < 0 ? b : 0; }
  __device__ __forceinline__ int tma_q_row(int row) const {
    return row + (q_offset < 0 ? 0 : (int)q_offset);
  }
  __device__ __forceinline__ int tma_k_row(int key) const {
    return key + (k_offset < 0 ? 0 : (int)k_offset);
  }
};

__device__ __forceinline__ SeqExtent seq_extent(const FjForwardParams &p, int b) {
  SeqExtent e;
  if (p.cu_seqlens_q) {
    int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    e.seqlen_q = p.cu_seqlens_q[b + 1] - q0;
    e.seqlen_k = p.cu_seqlens_k[b + 1] - k0;
    e.q_offset = (long long)q0;  // in rows; multiplied by the row strides below
    e.k_offset = (long long)k0;
    e.lse_offset = (long long)q0;
  } else {
    e.seqlen_q = p.seqlen_q;
    e.seqlen_k = p.seqlen_k;
    e.q_offset = -1;  // marks "use the batch strides"
    e.k_offset = -1;
    e.lse_offset = (long long)b * p.lse_batch_stride;
  }
  return e;
}

// Index of query row `row` of query head h in the lse-shaped arrays (lse, and the
// backward's D and lse * log2(e)).
__device__ __forceinline__ long long lse_index(const FjForwardParams &p, const SeqExtent &seq,
                                               int h, long long row) {
  return seq.lse_offset + (long long)h * p.lse_head_stride + row;
}

// Element offset of (batch b, row 0, head h) given a tensor's strides.
__device__ __forceinline__ long long tensor_base(long long seq_row0, int b, int h,
                                                 long long batch_stride,
                                                 long long row_stride,
                                                 long long head_stride) {
  long long base = seq_row0 >= 0 ? seq_row0 * row_stride : (long long)b * batch_stride;
  return base + (long long)h * head_stride;
}

}  // namespace fj
