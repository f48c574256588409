#include "tuner/half_precision.h"

#include <cmath>
#include <cstring>

namespace flashjit::tuner {
namespace {
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
} // namespace

uint16_t floatToBf16(float value) {
  uint32_t u = bitsOf(value);
  if (std::isnan(value))
    return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

float bf16ToFloat(uint16_t bits) { return floatOf((uint32_t)bits << 16); }

uint16_t floatToFp16(float value) {
  uint32_t u = bitsOf(value);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  if (std::isnan(value))
    return 0x7E00;
  float a = std::fabs(value);
  if (a >= 65520.0f)
    return sign | 0x7C00;  // rounds to infinity
  if (a < 6.103515625e-05f) {
    // Subnormal: multiples of 2^-24, rounded to nearest even by the FPU.
    float scaled = std::nearbyint(a * 16777216.0f);
    return sign | (uint16_t)scaled;
  }
  uint32_t au = bitsOf(a);
  uint32_t exponent = (au >> 23) - 127 + 15;
  uint32_t mantissa = au & 0x7FFFFF;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half;  // may carry into the exponent, which is the right result
  return sign | (uint16_t)half;
}

float fp16ToFloat(uint16_t bits) {
  uint32_t sign = (uint32_t)(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0)
    return (bits & 0x8000 ? -1.0f : 1.0f) * (float)mantissa * 5.9604644775390625e-08f;
  if (exponent == 31)
    return floatOf(sign | 0x7F800000 | (mantissa << 13));
  return floatOf(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint8_t floatToE4m3(float value) {
  // Integer rounding as in floatToFp16: the libm calls of a float formulation made this
  // 10x slower than floatToBf16, and FP8 timing inputs are ~60 M values a tune.
  if (std::isnan(value))
    return 0x7F;
  const uint32_t u = bitsOf(value);
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80);
  const float a = std::fabs(value);
  if (a < 0.015625f)  // subnormal: multiples of 2^-9 (8 of them is the smallest normal)
    return sign | (uint8_t)std::nearbyint(a * 512.0f);
  const uint32_t au = u & 0x7FFFFFFF;
  const uint32_t exponent = (au >> 23) - 127 + 7;  // from 1 (2^-6); infinity is large
  const uint32_t mantissa = au & 0x7FFFFF;
  uint32_t code = (exponent << 3) | (mantissa >> 20);
  const uint32_t rest = mantissa & 0xFFFFF;
  // Round to nearest even without a branch (random inputs would mispredict half of
  // them); a carry into the exponent is the right result.
  code += (uint32_t)(rest > 0x80000) | ((uint32_t)(rest == 0x80000) & code & 1);
  return sign | (uint8_t)(code > 0x7E ? 0x7E : code);  // past 448 saturates
}

float e4m3ToFloat(uint8_t bits) {
  const int e = (bits >> 3) & 15, m = bits & 7;
  float v;
  if (e == 15 && m == 7)
    v = std::nanf("");
  else if (e == 0)
    v = m / 512.0f;
  else
    v = std::ldexp(1.0f + m / 8.0f, e - 7);
  return (bits & 0x80) ? -v : v;
}

} // namespace flashjit::tuner
