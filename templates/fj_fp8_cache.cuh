// An FP8 (e4m3) KV cache for the decode kernels: its bytes read as the 16-bit type of
// the queries, and new 16-bit rows quantized into it.
//
// Reading. The decode kernels multiply in 16 bits (mma.sync, sm_80 and newer), so each
// cache value is widened in registers after ldmatrix, from shared memory that holds the
// bytes as loaded (half the shared memory and half the copies of a 16-bit cache). Every
// e4m3 value is exact in fp16 and bf16: the widening moves the sign, exponent and
// mantissa bits into place and multiplies once by the power of two between the two
// exponent biases (2^8 for fp16, 2^120 for bf16), which is exact too, subnormals
// included. (The e4m3 NaN bytes 0x7f / 0xff come out as -+480; nothing flashjit writes
// is one; sm_89's conversion below keeps them NaN.)
#pragma once

#include "fj_common.cuh"

namespace fj {
namespace fp8_cache {

template <bool kFirst, typename A, typename B> struct Select { typedef A type; };
template <typename A, typename B> struct Select<false, A, B> { typedef B type; };

// The e4m3 values in bytes 1 and 3 of w (bytes 0 and 2 are ignored) as two T values,
// byte 1's in the low half.
template <typename T> __device__ __forceinline__ u32 widen_odd_bytes(u32 w) {
  u32 r;
  if (T::kIsBf16) {
    // bf16 has the fp32 exponent: sign to bit 15, exponent and mantissa to bits 10..4.
    const u32 bits = (w & 0x80008000u) | ((w >> 4) & 0x07f007f0u);
    // * 2^120 (0x7b80) + -0: fma is the sm_80 bf16x2 multiply.
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(bits), "r"(0x7b807b80u), "r"(0x80008000u));
  } else {
    // fp16: exponent and mantissa to bits 13..7.
    const u32 bits = (w & 0x80008000u) | ((w >> 1) & 0x3f803f80u);
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(bits), "r"(0x5c005c00u));  // * 2^8
  }
  return r;
}
// Bytes 0 and 2 of w as two T values, byte 0's in the low half.
template <typename T> __device__ __forceinline__ u32 widen_even_bytes(u32 w) {
  return widen_odd_bytes<T>(w << 8);
}

// sm_89 and newer widen an e4m3 pair to fp16 in one instruction (cvt.rn.f16x2.e4m3x2), a
// third of the bit operations above. There P V runs in fp16 whatever the queries' type
// (P is in [0, 1], where fp16 is the finer of the two), and so do the products with K
// for fp16 queries.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
constexpr bool kHardwareWiden = true;
#else
constexpr bool kHardwareWiden = false;
#endif
// The type V is widened to, and P packed as, for queries of type T.
template <typename T> struct PvType {
  typedef typename Select<kHardwareWiden, f16, T>::type type;
};

// Bytes 0 and 2 of w (`even`) and bytes 1 and 3 (`odd`) as fp16 pairs, low byte first.
__device__ __forceinline__ void widen_f16(u32 w, u32 &even, u32 &odd) {
  if constexpr (kHardwareWiden) {
    const u32 pairs = __byte_perm(w, 0, 0x3120);  // bytes 0, 2, 1, 3
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\n"
        "cvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}"
        : "=r"(even), "=r"(odd)
        : "r"(pairs));
  } else {
    even = widen_even_bytes<f16>(w);
    odd = widen_odd_bytes<f16>(w);
  }
}
// The same for queries of type T: the bit operations for bf16.
template <typename T> __device__ __forceinline__ void widen(u32 w, u32 &even, u32 &odd) {
  if constexpr (!T::kIsBf16) {
    widen_f16(w, even, odd);
  } else {
    even = widen_even_bytes<T>(w);
    odd = widen_odd_bytes<T>(w);
  }
}

// 8 bytes of shared memory (Q's fragments in K's order of dims).
__device__ __forceinline__ uint2 ld_shared_8(u32 addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}

// x as the nearest e4m3 value (ties to even), saturated to +-448; NaN stays NaN (0x7f).
// What tuner::floatToE4m3 computes on the host. Only the append runs it, on new rows.
__device__ __forceinline__ u32 float_to_e4m3(float x) {
  const u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
  const float a = fabsf(x);
  if (!(a < 448.f))
    return a != a ? 0x7fu : sign | 0x7eu;
  if (a < 0.015625f)  // below 2^-6: the subnormals, steps of 2^-9 (8 is 2^-6's code)
    return sign | (u32)__float2int_rn(a * 512.f);
  u32 bits = __float_as_uint(a);
  bits += 0x7ffffu + ((bits >> 20) & 1u);  // round to 3 mantissa bits, ties to even
  return sign | (((bits >> 23) - 120u) << 3) | ((bits >> 20) & 7u);
}

}  // namespace fp8_cache
}  // namespace fj
