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

} // namespace flashjit::tuner
