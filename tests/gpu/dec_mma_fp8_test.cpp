// dec_mma over an FP8 (e4m3) KV cache against the forward's fp32 reference, to the
// 16-bit kernels' bar: the reference runs on the 16-bit values the cache dequantizes to
// (tuner::DecodeChecker), so every difference is the kernel's. Factors per (sequence, KV
// head), different for K and V; cache tokens past each sequence and unowned pages hold
// NaN bytes; pages shuffled; query rows 1 to 64; MHA, GQA, MQA; split counts; fp16 and
// bf16 queries; head dims whose V chunks are odd (80) and Q outside registers (256);
// every tile of the tuner's space; and the append, which quantizes new rows.
#include "decode_cases.h"
#include "kernel_pool.h"

#include "tuner/check_support.h"
#include "tuner/decode_kernel.h"
#include "tuner/decode_problem.h"
#include "tuner/half_precision.h"
#include "tuner/space.h"

#include <random>
#include <tuple>

using namespace flashjit;
using namespace flashjit::testing;

namespace {

// An FP8 cache's decode kernel: the cache e4m3, q and o of `qDtype`.
KernelSpec fp8Spec(int d, int dv, DType qDtype, bool causal) {
  KernelSpec spec = specFor(d, dv, DType::E4M3, causal, generator::Family::DecMma);
  spec.outDtype = qDtype;
  return spec;
}

const int kFp8HeadDims[] = {64, 80, 128, 256};

class DecMmaFp8Grid : public ::testing::TestWithParam<std::tuple<int, DType, bool>> {
protected:
  static void SetUpTestSuite() {
    prepareDecodeGrid(kFp8HeadDims, [](int d, DType dtype, bool causal) {
      return fp8Spec(d, d, dtype, causal);
    });
  }
};

// The decode grid's 15 shapes (decode_cases.h), as DecMmaGrid.
TEST_P(DecMmaFp8Grid, MatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  auto [d, dtype, causal] = GetParam();
  KernelSpec spec = fp8Spec(d, d, dtype, causal);
  EXPECT_EQ(checkDecodeGrid(spec, generator::defaultTile(spec)), 15);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, DecMmaFp8Grid,
                         ::testing::Combine(::testing::ValuesIn(kFp8HeadDims),
                                            ::testing::Values(DType::FP16, DType::BF16),
                                            ::testing::Bool()),
                         gridParamName);

// head_dim_v != head_dim, a long cache over many splits.
TEST(DecMmaFp8, OtherHeadDimsAndLongCaches) {
  FLASHJIT_REQUIRE_GPU();
  for (auto [d, dv] : {std::pair{192, 128}, std::pair{128, 64}, std::pair{48, 112}})
    for (bool causal : {false, true}) {
      KernelSpec spec = fp8Spec(d, dv, DType::BF16, causal);
      tuner::ForwardShape shape = decodeShape(12, 4, 3, {1111, 29, 517}, 32, 0);
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 5), "")
          << spec.key() << " " << describe(shape);
    }
  for (int splits : {0, 37}) {
    KernelSpec spec = fp8Spec(128, 128, DType::BF16, true);
    tuner::ForwardShape shape = decodeShape(16, 2, 1, {70000, 33333}, 256, splits);
    EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 7), "")
        << spec.key() << " " << describe(shape);
  }
}

// The features over an FP8 cache (0.14), against the forward's reference with the same
// features over the dequantized cache (K's factor is in the hook's scale, so the cap,
// ALiBi and the user's code see the dequantized key's score): the decode grid's 15 shapes,
// then a long cache split several ways.
TEST(DecMmaFp8, Features) {
  FLASHJIT_REQUIRE_GPU();
  struct Case {
    const char *name;
    bool causal;
    int left, right;
    float softcap;
    bool alibi;
    const char *scoreMod, *maskMod;
  };
  const Case cases[] = {
      {"window_left100_causal", true, 100, 0, 0.f, false, "", ""},
      {"window_300_softcap30", false, 300, -1, 30.f, false, "", ""},
      {"alibi_causal", true, -1, -1, 0.f, true, "", ""},
      {"mods_window_37_20_alibi", false, 37, 20, 0.f, true,
       "return score + args.scalar[0] * (float)((kv_idx * 7 + q_idx * 3 + h * 5 + b) % 11);",
       "return (kv_idx * 3 + q_idx + h) % 4 != 1;"}};
  for (const Case &c : cases)
    for (DType dtype : {DType::BF16, DType::FP16}) {
      KernelSpec spec = fp8Spec(128, 128, dtype, c.causal);
      generator::Features &f = spec.features;
      f.window = c.left >= 0 || c.right >= 0;
      f.windowLeft = c.left;
      f.windowRight = c.right;
      f.softcap = c.softcap;
      f.alibi = c.alibi;
      f.scoreMod = c.scoreMod;
      f.maskMod = c.maskMod;
      f.hasTuningArgs = true;
      f.tuningArgs.scalar[0] = 0.7f;
      EXPECT_EQ(checkDecodeGrid(spec, generator::defaultTile(spec)), 15) << c.name;
      if (dtype == DType::FP16)
        continue;
      for (int splits : {0, 7}) {
        tuner::ForwardShape shape = decodeShape(16, 2, 4, {70000, 33333, 650}, 64, splits);
        EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 9), "")
            << c.name << " " << spec.key() << " " << describe(shape);
      }
    }
}

// Every tile of the tuner's space that fits, on two shapes.
TEST(DecMmaFp8, EveryTileOfTheSpace) {
  FLASHJIT_REQUIRE_GPU();
  EXPECT_GT(checkEveryDecodeTile([](int d, bool causal) {
              return fp8Spec(d, d, DType::BF16, causal);
            }),
            100);
}

// The append quantizes new rows into their pages: each value divided by its head's
// factor, the nearest e4m3 (ties to even), saturated at 448, bit for bit the host's.
TEST(DecMmaFp8, AppendQuantizesTheNewRowsIntoTheirPages) {
  FLASHJIT_REQUIRE_GPU();
  for (DType dtype : {DType::BF16, DType::FP16})
    for (int page : {16, 0})
      for (int newLen : {1, 5}) {
        KernelSpec spec = fp8Spec(128, 64, dtype, false);
        std::string error;
        const auto *loaded = KernelPool::get().find(spec, generator::defaultTile(spec), error);
        ASSERT_NE(loaded, nullptr) << error;
        const auto *kernel = tuner::DecodeKernel::of(*loaded);
        ASSERT_NE(kernel, nullptr);
        tuner::ForwardShape shape = decodeShape(8, 4, 1, {300, 5, 77}, page, 0);
        shape.headDim = 128, shape.headDimV = 64;
        const long long kRow = (long long)shape.headsKV * 128, vRow = (long long)shape.headsKV * 64;
        const long long rows = 300 + 5 + 77;
        // Values from tiny (e4m3 subnormals) to past the largest (saturated), of both signs.
        std::mt19937 rng(page + newLen);
        std::normal_distribution<float> normal(0.f, 1.f);
        auto values = [&](long long n) {
          std::vector<uint16_t> out(n);
          for (auto &x : out)
            x = tuner::floatToHalf(dtype, normal(rng) * std::exp2(normal(rng) * 5.f));
          return out;
        };
        std::vector<uint16_t> k = values(rows * kRow), v = values(rows * vRow);
        auto want = tuner::allocateDecodeBuffers(DType::E4M3, shape, k, v, 9, dtype);
        ASSERT_TRUE((bool)want) << llvm::toString(want.takeError());
        // A cache whose last newLen tokens per sequence are NaN, and the new rows.
        std::vector<uint16_t> kHole = k, vHole = v, kNew, vNew;
        long long packed = 0;
        for (int len : shape.seqlensK) {
          for (int t = 0; t < newLen; ++t) {
            long long r = packed + len - newLen + t;
            kNew.insert(kNew.end(), k.begin() + r * kRow, k.begin() + (r + 1) * kRow);
            vNew.insert(vNew.end(), v.begin() + r * vRow, v.begin() + (r + 1) * vRow);
            std::fill_n(kHole.begin() + r * kRow, kRow, tuner::floatToHalf(dtype, NAN));
            std::fill_n(vHole.begin() + r * vRow, vRow, tuner::floatToHalf(dtype, NAN));
          }
          packed += len;
        }
        auto got = tuner::allocateDecodeBuffers(DType::E4M3, shape, kHole, vHole, 9, dtype);
        ASSERT_TRUE((bool)got) << llvm::toString(got.takeError());
        auto kNewBuf = runtime::DeviceBuffer::allocate(kNew.size() * 2);
        auto vNewBuf = runtime::DeviceBuffer::allocate(vNew.size() * 2);
        ASSERT_TRUE(kNewBuf && vNewBuf);
        ASSERT_FALSE((bool)kNewBuf->upload(kNew.data(), kNew.size() * 2));
        ASSERT_FALSE((bool)vNewBuf->upload(vNew.data(), vNew.size() * 2));
        FjDecodeParams p = tuner::makeDecodeParams(shape, *got);
        p.k_new = (const void *)kNewBuf->ptr();
        p.v_new = (const void *)vNewBuf->ptr();
        p.new_len = newLen;
        p.k_new_head_stride = 128, p.v_new_head_stride = 64;
        p.k_new_row_stride = kRow, p.v_new_row_stride = vRow;
        p.k_new_batch_stride = kRow * newLen, p.v_new_batch_stride = vRow * newLen;
        ASSERT_FALSE((bool)kernel->append(p, nullptr));
        ASSERT_FALSE((bool)runtime::synchronizeStream(nullptr));
        for (auto [a, b] : {std::pair{&want->k, &got->k}, std::pair{&want->v, &got->v}}) {
          auto x = tuner::downloadAll<uint8_t>(*a);
          auto y = tuner::downloadAll<uint8_t>(*b);
          ASSERT_TRUE(x && y);
          long long differ = 0;
          for (size_t i = 0; i < x->size(); ++i)
            differ += (*x)[i] != (*y)[i];
          EXPECT_EQ(differ, 0) << generator::dtypeName(dtype).str() << " page " << page
                               << " new rows " << newLen;
        }
      }
}

} // namespace
