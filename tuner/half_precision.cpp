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
  if (std::isnan(value))
    return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  float a = std::fabs(value);
  if (a >= 448.0f)
    return sign | 0x7E;  // saturates to 448
  // Subnormals are multiples of 2^-9; normals (from 2^-6) have 3 mantissa bits: both are
  // multiples of the value's spacing, rounded to nearest even by the FPU.
  int exponent = a < 0.015625f ? -6 : std::ilogb(a);
  float spacing = std::ldexp(1.0f, exponent - 3);
  float rounded = std::nearbyint(a / spacing) * spacing;  // may carry to the next binade
  if (rounded >= 448.0f)
    return sign | 0x7E;
  if (rounded < 0.015625f)
    return sign | (uint8_t)std::nearbyint(rounded * 512.0f);
  int e = std::ilogb(rounded);
  int m = (int)std::nearbyint((rounded / std::ldexp(1.0f, e) - 1.0f) * 8.0f);
  return sign | (uint8_t)(((e + 7) << 3) | m);
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
