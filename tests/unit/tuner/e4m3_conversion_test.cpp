// FP8 e4m3 on the host (no GPU): e4m3ToFloat and floatToE4m3 over all 256 codes, known
// values, round to nearest even (checked against a brute-force nearest code at every
// midpoint and beside it), saturation to +-448, NaN; and randomE4m3's timing inputs.
#include "tuner/half_precision.h"
#include "tuner/measure.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

using namespace flashjit::tuner;

namespace {

bool isNanCode(int code) { return (code & 0x7F) == 0x7F; }

// e4m3 (bias 7, 3 mantissa bits, no infinity, 0x7F/0xFF NaN) decoded from its definition.
double decodeByDefinition(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  double magnitude = e == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, e - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

// The code nearest to x (saturating at +-448), ties to the even code (even mantissa), by
// trying every finite code of x's sign.
uint8_t nearestCode(double x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  double a = std::min(std::fabs(x), 448.0);
  int best = 0;
  double bestDistance = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7E; ++c) {
    double distance = std::fabs(decodeByDefinition(c) - a);
    if (distance < bestDistance || (distance == bestDistance && c % 2 == 0)) {
      best = c;
      bestDistance = distance;
    }
  }
  return (uint8_t)(sign | best);
}

} // namespace

TEST(E4m3, DecodesEveryCodeByTheDefinition) {
  for (int code = 0; code < 256; ++code) {
    float value = e4m3ToFloat((uint8_t)code);
    if (isNanCode(code)) {
      EXPECT_TRUE(std::isnan(value)) << std::hex << code;
      continue;
    }
    EXPECT_FALSE(std::isnan(value)) << std::hex << code;
    EXPECT_EQ((double)value, decodeByDefinition(code)) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(value), (code & 0x80) != 0) << "code 0x" << std::hex << code;
  }
}

TEST(E4m3, PositiveCodesIncreaseUpTo448) {
  for (int code = 1; code <= 0x7E; ++code) {
    EXPECT_LT(e4m3ToFloat((uint8_t)(code - 1)), e4m3ToFloat((uint8_t)code))
        << "code 0x" << std::hex << code;
    EXPECT_EQ(e4m3ToFloat((uint8_t)(code | 0x80)), -e4m3ToFloat((uint8_t)code));
  }
  EXPECT_EQ(e4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(e4m3ToFloat(0xFE), -448.0f);
}

TEST(E4m3, EveryFiniteCodeRoundTrips) {
  int checked = 0;
  for (int code = 0; code < 256; ++code) {
    if (isNanCode(code))
      continue;
    float value = e4m3ToFloat((uint8_t)code);
    EXPECT_EQ(floatToE4m3(value), code) << "code 0x" << std::hex << code << " = " << value;
    ++checked;
  }
  EXPECT_EQ(checked, 254);
}

TEST(E4m3, KnownValues) {
  struct Known {
    float value;
    uint8_t code;
  };
  for (Known k : {Known{0.0f, 0x00}, Known{1.0f, 0x38}, Known{-1.0f, 0xB8}, Known{2.0f, 0x40},
                  Known{-2.0f, 0xC0}, Known{0.5f, 0x30}, Known{1.125f, 0x39},
                  Known{1.75f, 0x3E}, Known{448.0f, 0x7E}, Known{-448.0f, 0xFE},
                  Known{256.0f, 0x78}, Known{0x1p-9f, 0x01}, Known{-0x1p-9f, 0x81},
                  Known{0x1p-6f, 0x08}, Known{7 * 0x1p-9f, 0x07}}) {
    EXPECT_EQ(floatToE4m3(k.value), k.code) << k.value;
    EXPECT_EQ(e4m3ToFloat(k.code), k.value) << "code 0x" << std::hex << (int)k.code;
  }
  EXPECT_EQ(floatToE4m3(-0.0f), 0x80);
  EXPECT_EQ(e4m3ToFloat(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3ToFloat(0x80)));
}

TEST(E4m3, RoundsToNearestEven) {
  // 1.0625 is halfway between 1.0 (0x38, even) and 1.125 (0x39): to 1.0.
  EXPECT_EQ(floatToE4m3(1.0625f), 0x38);
  // 1.1875 is halfway between 1.125 (0x39) and 1.25 (0x3A, even): to 1.25.
  EXPECT_EQ(floatToE4m3(1.1875f), 0x3A);
  EXPECT_EQ(floatToE4m3(-1.0625f), 0xB8);
  EXPECT_EQ(floatToE4m3(-1.1875f), 0xBA);
  // Off the midpoint by a little: to the nearer one.
  EXPECT_EQ(floatToE4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(floatToE4m3(std::nextafter(1.1875f, 0.0f)), 0x39);
  // Carrying into the next binade: 1.9375 (between 1.875 and 2.0) goes to 2.0.
  EXPECT_EQ(floatToE4m3(1.9375f), 0x40);
  // Subnormals: 2^-10 is halfway between 0 and 2^-9 (0x01): to 0; 3 x 2^-10 to 2^-8.
  EXPECT_EQ(floatToE4m3(0x1p-10f), 0x00);
  EXPECT_EQ(floatToE4m3(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(floatToE4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(floatToE4m3(1e-6f), 0x00);
  EXPECT_EQ(floatToE4m3(-1e-6f), 0x80);
  // Subnormal to normal: 15 x 2^-10 (between 7 x 2^-9 and 2^-6) goes to 2^-6 (0x08).
  EXPECT_EQ(floatToE4m3(15 * 0x1p-10f), 0x08);
  // The largest binade, 32 apart: 400 is halfway between 384 (0x7C, even) and 416 (0x7D).
  EXPECT_EQ(floatToE4m3(400.0f), 0x7C);
  EXPECT_EQ(floatToE4m3(432.0f), 0x7E) << "halfway 416..448: to 448 (even)";
}

// The conversion rounds in integers (the float formulation with libm calls was 5x
// slower); a sweep over the float bit patterns, every sign and binade, holds it to the
// brute-force nearest code. (All 2^32 were compared with that float formulation once:
// no difference.)
TEST(E4m3, MatchesTheNearestCodeOverASweepOfAllFloats) {
  int mismatches = 0, checked = 0;
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 65521) {  // a prime stride
    uint32_t u = (uint32_t)bits;
    float value;
    std::memcpy(&value, &u, 4);
    if (std::isnan(value))
      continue;
    ++checked;
    if (floatToE4m3(value) != nearestCode(value) && ++mismatches <= 5)
      ADD_FAILURE() << value << " (0x" << std::hex << u << "): 0x" << (int)floatToE4m3(value)
                    << " against 0x" << (int)nearestCode(value);
  }
  EXPECT_EQ(mismatches, 0) << "of " << checked;
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(floatToE4m3(-std::numeric_limits<float>::infinity()), 0xFE);
}

TEST(E4m3, MatchesTheNearestCodeAtEveryMidpoint) {
  // Every midpoint between neighbouring codes, the floats beside it, and each code
  // itself, for both signs; also midway to 0 and beyond 448.
  std::vector<float> probes;
  for (int code = 0; code < 0x7E; ++code) {
    float lo = e4m3ToFloat((uint8_t)code), hi = e4m3ToFloat((uint8_t)(code + 1));
    float mid = (lo + hi) / 2;  // exact in float
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f),
                    lo + (hi - lo) / 4, lo + 3 * (hi - lo) / 4})
      probes.push_back(v);
  }
  for (float v : {448.0f, 449.0f, 464.0f, 480.0f, 1000.0f, 1e30f})
    probes.push_back(v);
  int mismatches = 0;
  for (float probe : probes)
    for (float v : {probe, -probe}) {
      uint8_t want = nearestCode(v), got = floatToE4m3(v);
      if (got != want && ++mismatches <= 20)
        ADD_FAILURE() << v << " (" << std::hexfloat << v << std::defaultfloat << "): got 0x"
                      << std::hex << (int)got << ", nearest 0x" << (int)want;
    }
  EXPECT_EQ(mismatches, 0);
}

TEST(E4m3, Saturates) {
  EXPECT_EQ(floatToE4m3(1000.0f), 0x7E);
  EXPECT_EQ(floatToE4m3(-1e9f), 0xFE);
  EXPECT_EQ(floatToE4m3(448.5f), 0x7E);
  EXPECT_EQ(floatToE4m3(500.0f), 0x7E);
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(floatToE4m3(-std::numeric_limits<float>::infinity()), 0xFE);
}

TEST(E4m3, NanIsTheNanCode) {
  uint8_t code = floatToE4m3(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(code & 0x7F, 0x7F);
  EXPECT_EQ(code, 0x7F);
  EXPECT_TRUE(std::isnan(e4m3ToFloat(code)));
  EXPECT_TRUE(std::isnan(e4m3ToFloat(floatToE4m3(-std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0xFF)));
}

TEST(RandomE4m3, DeterministicPerSeed) {
  std::vector<uint8_t> a = randomE4m3(4096, 7), b = randomE4m3(4096, 7);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, randomE4m3(4096, 8));
  // A shorter run is a prefix of a longer one.
  std::vector<uint8_t> shortRun = randomE4m3(100, 7);
  EXPECT_TRUE(std::equal(shortRun.begin(), shortRun.end(), a.begin()));
  EXPECT_TRUE(randomE4m3(0, 7).empty());
}

TEST(RandomE4m3, ValuesWithinPlusMinusOneAndVaried) {
  for (uint64_t seed : {0ull, 1ull, 12345ull}) {
    std::vector<uint8_t> codes = randomE4m3(65536, seed);
    ASSERT_EQ(codes.size(), 65536u);
    std::set<uint8_t> distinct;
    int negative = 0, positive = 0;
    for (uint8_t code : codes) {
      float v = e4m3ToFloat(code);
      ASSERT_FALSE(std::isnan(v)) << "code 0x" << std::hex << (int)code;
      ASSERT_GE(v, -1.0f);
      ASSERT_LE(v, 1.0f);
      negative += v < 0;
      positive += v > 0;
      distinct.insert(code);
    }
    EXPECT_GT(distinct.size(), 50u) << "seed " << seed;
    // Uniform in [-1, 1): about half of each sign.
    EXPECT_GT(negative, 65536 * 4 / 10) << "seed " << seed;
    EXPECT_GT(positive, 65536 * 4 / 10) << "seed " << seed;
  }
}
