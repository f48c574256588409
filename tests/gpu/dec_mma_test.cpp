// dec_mma (split-KV decode over a paged KV cache) against the forward's fp32 reference
// on the GPU, with the forward's bar: random inputs, outputs poisoned, cache tokens past
// each sequence's length and pages nobody owns filled with NaN; pages shuffled, the last
// page of a sequence partly full; query rows 1, 2, 7, 16, 64 per sequence; MHA, GQA and
// MQA; one split, the heuristic's and an explicit count; contiguous caches; lengths up to
// 70,000; every tile of the tuner's space; the features and the user's code; and the KV
// append.
#include "decode_cases.h"
#include "kernel_pool.h"

#include "tuner/check_support.h"
#include "tuner/decode_kernel.h"
#include "tuner/decode_problem.h"
#include "tuner/space.h"

#include <memory>
#include <random>
#include <tuple>
#include <vector>

using namespace flashjit;
using namespace flashjit::testing;

namespace {

KernelSpec decSpec(int d, int dv, DType dtype, bool causal) {
  return specFor(d, dv, dtype, causal, generator::Family::DecMma);
}

const int kDecodeHeadDims[] = {64, 96, 128, 256};

class DecMmaGrid : public ::testing::TestWithParam<std::tuple<int, DType, bool>> {
protected:
  static void SetUpTestSuite() {
    prepareDecodeGrid(kDecodeHeadDims, [](int d, DType dtype, bool causal) {
      return decSpec(d, d, dtype, causal);
    });
  }
};

// The decode grid's 15 shapes (decode_cases.h).
TEST_P(DecMmaGrid, MatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  auto [d, dtype, causal] = GetParam();
  KernelSpec spec = decSpec(d, d, dtype, causal);
  EXPECT_EQ(checkDecodeGrid(spec, generator::defaultTile(spec)), 15);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, DecMmaGrid,
                         ::testing::Combine(::testing::ValuesIn(kDecodeHeadDims),
                                            ::testing::Values(DType::FP16, DType::BF16),
                                            ::testing::Bool()),
                         gridParamName);

// Long caches: 70,000 keys, the split heuristic (128 splits) against one split and 37
// (the combine's batches of 32 splits and of 8 not filled; the shorter sequence's last
// splits empty), decode and a 16-row speculative step.
TEST(DecMma, LongCaches) {
  FLASHJIT_REQUIRE_GPU();
  for (bool causal : {false, true})
    for (int sq : {1, 16}) {
      KernelSpec spec = decSpec(128, 128, DType::BF16, causal);
      for (int splits : {0, 1, 37}) {
        tuner::ForwardShape shape = decodeShape(16, 2, sq, {70000, 33333}, 256, splits);
        EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 7), "")
            << spec.key() << " " << describe(shape);
      }
    }
}

// Head dims that are odd multiples of 8 and head_dim_v != head_dim.
TEST(DecMma, OtherHeadDims) {
  FLASHJIT_REQUIRE_GPU();
  for (auto [d, dv] : {std::pair{40, 40}, std::pair{72, 72}, std::pair{192, 128},
                       std::pair{128, 64}})
    for (bool causal : {false, true}) {
      KernelSpec spec = decSpec(d, dv, DType::FP16, causal);
      tuner::ForwardShape shape = decodeShape(12, 4, 3, {1111, 29, 517}, 32, 0);
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 5), "")
          << spec.key() << " " << describe(shape);
    }
}

// The features the decode kernels take (the window, soft-capping, ALiBi), against the
// forward's reference with the same features: the decode grid's 15 shapes (one to 64
// query rows, MHA/GQA/MQA, pages, one to five splits) for windows narrower than the
// caches (so rows see key tiles from the middle of the cache on, and some splits none),
// a two-sided window, a cap well into tanh's bend, ALiBi (each packed row of a GQA tile
// its own head's slope, per sequence), and together; then long caches, where the splits
// share the window's tiles alone (tuner::SplitPolicy::keyTiles).
TEST(DecMma, Features) {
  FLASHJIT_REQUIRE_GPU();
  struct Case {
    const char *name;
    int left, right;
    float softcap;
    bool causal;
    bool alibi = false;
  };
  const Case cases[] = {{"window_left100_causal", 100, 0, 0.f, true},
                        {"window_left700", 700, -1, 0.f, false},
                        {"window_37_20", 37, 20, 0.f, false},
                        {"softcap2_causal", -1, -1, 2.f, true},
                        {"window_300_softcap30", 300, -1, 30.f, false},
                        {"alibi_causal", -1, -1, 0.f, true, true},
                        {"alibi", -1, -1, 0.f, false, true},
                        {"window_150_20_softcap20_alibi", 150, 20, 20.f, false, true}};
  for (const Case &c : cases)
    for (DType dtype : {DType::BF16, DType::FP16}) {
      KernelSpec spec = decSpec(128, 128, dtype, c.causal);
      spec.features.window = c.left >= 0 || c.right >= 0;
      spec.features.windowLeft = c.left;
      spec.features.windowRight = c.right;
      spec.features.softcap = c.softcap;
      spec.features.alibi = c.alibi;
      EXPECT_EQ(checkDecodeGrid(spec, generator::defaultTile(spec)), 15) << c.name;
      if (dtype == DType::FP16)
        continue;
      for (int splits : {0, 3})
        for (int sq : {1, 16}) {
          tuner::ForwardShape shape = decodeShape(16, 2, sq, {70000, 33333, 650}, 64, splits);
          EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 11), "")
              << c.name << " " << spec.key() << " " << describe(shape);
        }
    }
  // Another head dim and head_dim_v != head_dim.
  for (auto [d, dv] : {std::pair{64, 64}, std::pair{192, 128}}) {
    KernelSpec spec = decSpec(d, dv, DType::BF16, true);
    spec.features.window = true;
    spec.features.windowLeft = 255;
    spec.features.windowRight = 0;
    spec.features.softcap = 50.f;
    spec.features.alibi = d == 64;
    tuner::ForwardShape shape = decodeShape(12, 4, 3, {1111, 29, 517}, 32, 0);
    EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 5), "")
        << spec.key() << " " << describe(shape);
  }
}

// A device buffer of `values` for the whole test binary (a mod's tensor), or null.
template <typename T> const void *staticBuffer(std::vector<T> values) {
  static std::vector<std::unique_ptr<runtime::DeviceBuffer>> kept;
  auto allocated = runtime::DeviceBuffer::allocate(values.size() * sizeof(T));
  if (!allocated) {
    llvm::consumeError(allocated.takeError());
    return nullptr;
  }
  kept.push_back(std::make_unique<runtime::DeviceBuffer>(std::move(*allocated)));
  if (llvm::Error err = kept.back()->upload(values.data(), values.size() * sizeof(T))) {
    llvm::consumeError(std::move(err));
    return nullptr;
  }
  return reinterpret_cast<const void *>(kept.back()->ptr());
}

// The user's score_mod and mask_mod (0.14), against the forward's reference with the same
// code and args: functions of every index (b the sequence, h the query head of a packed
// GQA row, q_idx the step's row, kv_idx the key), code that reads tensors indexed by
// sequence and key (a per-key bias, a random key-drop mask over caches of 70,000 keys),
// and with the window, soft-capping and ALiBi; the decode grid's 15 shapes each, then
// long caches split several ways.
TEST(DecMma, UserMods) {
  FLASHJIT_REQUIRE_GPU();
  constexpr int kKeysPerSequence = 70000, kSequences = 3;
  std::mt19937 rng(5);
  std::vector<float> bias((size_t)kSequences * kKeysPerSequence);
  std::vector<unsigned char> keep(bias.size());
  for (size_t i = 0; i < bias.size(); ++i) {
    bias[i] = (float)(rng() % 2001) / 1000.f - 1.f;
    keep[i] = rng() % 4 != 0;  // a quarter of the keys dropped
  }
  const void *biasTensor = staticBuffer(bias), *keepTensor = staticBuffer(keep);
  ASSERT_TRUE(biasTensor && keepTensor);
  struct Case {
    const char *name;
    const char *scoreMod, *maskMod;
    bool causal;
    int windowLeft = -1;
    float softcap = 0.f;
    bool alibi = false;
  };
  const Case cases[] = {
      {"score_mod_indices",
       "return score + args.scalar[0] * (float)((kv_idx * 7 + q_idx * 3 + h * 5 + b) % 11) "
       "- args.scalar[1];",
       "", false},
      {"mask_mod_indices_causal", "", "return (kv_idx * 3 + q_idx + h + b) % 4 != 1;", true},
      {"tensors",
       "const float *bias = (const float *)args.tensor[0];\n"
       "return score + bias[b * args.integer[0] + kv_idx];",
       "const unsigned char *keep = (const unsigned char *)args.tensor[1];\n"
       "return keep[b * args.integer[0] + kv_idx] != 0;",
       true},
      {"tensors_window_softcap_alibi",
       "const float *bias = (const float *)args.tensor[0];\n"
       "return score + bias[b * args.integer[0] + kv_idx];",
       "const unsigned char *keep = (const unsigned char *)args.tensor[1];\n"
       "return keep[b * args.integer[0] + kv_idx] != 0;",
       false, 300, 30.f, true}};
  for (const Case &c : cases) {
    KernelSpec spec = decSpec(128, 128, DType::BF16, c.causal);
    generator::Features &f = spec.features;
    f.scoreMod = c.scoreMod;
    f.maskMod = c.maskMod;
    f.window = c.windowLeft >= 0;
    f.windowLeft = c.windowLeft;
    f.softcap = c.softcap;
    f.alibi = c.alibi;
    f.hasTuningArgs = true;
    f.tuningArgs.scalar[0] = 0.7f;
    f.tuningArgs.scalar[1] = 0.25f;
    f.tuningArgs.integer[0] = kKeysPerSequence;
    f.tuningArgs.tensor[0] = biasTensor;
    f.tuningArgs.tensor[1] = keepTensor;
    EXPECT_EQ(checkDecodeGrid(spec, generator::defaultTile(spec)), 15) << c.name;
    for (int splits : {0, 7}) {
      tuner::ForwardShape shape = decodeShape(16, 2, 4, {kKeysPerSequence, 33333, 650}, 64,
                                              splits);
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 13), "")
          << c.name << " " << spec.key() << " " << describe(shape);
    }
  }
}

// Every tile of the tuner's space that fits (what a tune may pick), on two shapes.
TEST(DecMma, EveryTileOfTheSpace) {
  FLASHJIT_REQUIRE_GPU();
  EXPECT_GT(checkEveryDecodeTile([](int d, bool causal) {
              return decSpec(d, d, DType::BF16, causal);
            }),
            100);
}

// The append kernel writes new rows where the block table says, bit for bit.
TEST(DecMma, AppendWritesTheNewRowsIntoTheirPages) {
  FLASHJIT_REQUIRE_GPU();
  for (int page : {16, 0})
    for (int newLen : {1, 5}) {
      KernelSpec spec = decSpec(128, 128, DType::BF16, false);
      std::string error;
      const auto *loaded =
          KernelPool::get().find(spec, generator::defaultTile(spec), error);
      ASSERT_NE(loaded, nullptr) << error;
      const auto *kernel = tuner::DecodeKernel::of(*loaded);
      ASSERT_NE(kernel, nullptr);
      tuner::ForwardShape shape = decodeShape(8, 4, 1, {300, 5, 77}, page, 0);
      shape.headDim = shape.headDimV = 128;
      const long long row = (long long)shape.headsKV * 128;
      const long long rows = 300 + 5 + 77;
      std::vector<uint16_t> k = tuner::randomHalves(rows * row, DType::BF16, 1);
      std::vector<uint16_t> v = tuner::randomHalves(rows * row, DType::BF16, 2);
      // The expected cache, and one whose last newLen tokens per sequence are NaN.
      auto want = tuner::allocateDecodeBuffers(DType::BF16, shape, k, v, 9);
      ASSERT_TRUE((bool)want) << llvm::toString(want.takeError());
      std::vector<uint16_t> kHole = k, vHole = v, kNew, vNew;
      long long packed = 0;
      for (int len : shape.seqlensK) {
        for (int t = 0; t < newLen; ++t) {
          long long r = packed + len - newLen + t;
          kNew.insert(kNew.end(), k.begin() + r * row, k.begin() + (r + 1) * row);
          vNew.insert(vNew.end(), v.begin() + r * row, v.begin() + (r + 1) * row);
          std::fill_n(kHole.begin() + r * row, row, 0xFFFF);
          std::fill_n(vHole.begin() + r * row, row, 0xFFFF);
        }
        packed += len;
      }
      auto got = tuner::allocateDecodeBuffers(DType::BF16, shape, kHole, vHole, 9);
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
      p.k_new_head_stride = p.v_new_head_stride = 128;
      p.k_new_row_stride = p.v_new_row_stride = row;
      p.k_new_batch_stride = p.v_new_batch_stride = row * newLen;
      ASSERT_FALSE((bool)kernel->append(p, nullptr));
      ASSERT_FALSE((bool)runtime::synchronizeStream(nullptr));
      for (auto [a, b] : {std::pair{&want->k, &got->k}, std::pair{&want->v, &got->v}}) {
        auto x = tuner::downloadAll<uint16_t>(*a);
        auto y = tuner::downloadAll<uint16_t>(*b);
        ASSERT_TRUE(x && y);
        EXPECT_TRUE(*x == *y) << "page " << page << " new rows " << newLen;
      }
    }
}

} // namespace
