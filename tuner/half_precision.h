// Host conversions between float and the 16-bit formats (round to nearest even).
#pragma once

#include <cstdint>

namespace flashjit::tuner {

uint16_t floatToBf16(float value);
float bf16ToFloat(uint16_t bits);
uint16_t floatToFp16(float value);
float fp16ToFloat(uint16_t bits);
// FP8 e4m3 (bias 7, no infinity, largest 448): round to nearest even, saturating.
uint8_t floatToE4m3(float value);
float e4m3ToFloat(uint8_t bits);

} // namespace flashjit::tuner
