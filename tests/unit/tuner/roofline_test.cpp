// The roofline model against numbers computed by hand: the worked examples of
// shared/ROOFLINE.md (score buffers, tiles), the FLOP counts of the peers' shapes in
// shared/GPU.md, byte counts of small cases, the bound switching at the ridge, and
// the GPU presets and name lookup.
#include "tuner/gpu_specs.h"
#include "tuner/roofline.h"

#include "runtime/driver.h"
#include "support/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace flashjit::tuner {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

AttentionShape mha(int batch, int heads, int seq, int d, bool causal = false) {
  AttentionShape s;
  s.batch = batch;
  s.headsQ = s.headsKV = heads;
  s.seqQ = s.seqK = seq;
  s.headDim = s.headDimV = d;
  s.causal = causal;
  s.elementBytes = 2;
  return s;
}

// Whether the shape passes validation (the error, if any, is consumed).
bool isValid(const AttentionShape &s) {
  llvm::Error err = validateShape(s);
  bool ok = !err;
  llvm::consumeError(std::move(err));
  return ok;
}

// A GPU with round numbers: ridge at 100 FLOP/B.
GpuSpec roundGpu() {
  GpuSpec g;
  g.name = "round";
  g.peakFlops = 100e12;
  g.hbmBytesPerSec = 1e12;
  return g;
}

// ---- the seeds' worked numbers ----------------------------------------------------

TEST(RooflineWorked, ScoreBuffer4096IsSixtyFourMiBInFp32) {
  EXPECT_EQ(scoreBufferBytes(4096, 1), 16777216u); // N^2 scores
  EXPECT_EQ(scoreBufferBytes(4096, 4), 64 * MiB);
}

TEST(RooflineWorked, ScoreBuffer8192IsTwoHundredFiftySixMiBAndSPlusPFiveTwelve) {
  EXPECT_EQ(scoreBufferBytes(8192, 4), 256 * MiB);
  EXPECT_EQ(2 * scoreBufferBytes(8192, 4), 512 * MiB);
}

TEST(RooflineWorked, TileSizes) {
  EXPECT_EQ(tileBytes(64, 128, 2), 16 * KiB);
  EXPECT_EQ(3 * tileBytes(64, 128, 2), 48 * KiB); // Q + K + V tiles
  EXPECT_EQ(tileBytes(32, 128, 2), 8 * KiB);
}

TEST(RooflineWorked, StandardBytesCountFourScoreBufferPassesPerHead) {
  // One head, N = 4096: S written and read, P written and read = 4 x 64 MiB, plus
  // Q, K, V, O of 4096 x 128 fp16 = 1 MiB each.
  AttentionShape s = mha(1, 1, 4096, 128);
  EXPECT_EQ(standardAttentionBytes(s, 4), 4 * 64 * MiB + 4 * MiB);
  EXPECT_EQ(standardAttentionBytes(s, 2), 4 * 32 * MiB + 4 * MiB);
}

// ---- FLOPs ------------------------------------------------------------------------

// shared/GPU.md's peers: B*N = 16384 tokens, H*d = 2048, FLOPs = 4*B*H*N^2*d (halved
// when causal). That is 4 * 16384 * 2048 * N = 2^27 * N for every head dim.
TEST(RooflineFlops, PeerShapesNonCausal) {
  // d = 128, N = 8192: B = 2, H = 16 -> 4*2*16*8192^2*128 = 2^40.
  EXPECT_EQ(attentionFlops(mha(2, 16, 8192, 128)), 1099511627776u);
  EXPECT_EQ(attentionFlops(mha(2, 16, 8192, 128)), uint64_t(1) << 40);
  // d = 64 (H = 32) and d = 256 (H = 8) at N = 8192: the same count.
  EXPECT_EQ(attentionFlops(mha(2, 32, 8192, 64)), uint64_t(1) << 40);
  EXPECT_EQ(attentionFlops(mha(2, 8, 8192, 256)), uint64_t(1) << 40);
  // d = 128, N = 2048: B = 8, H = 16 -> 2^38.
  EXPECT_EQ(attentionFlops(mha(8, 16, 2048, 128)), 274877906944u);
}

TEST(RooflineFlops, CausalWithEqualLengthsIsExactlyHalf) {
  EXPECT_EQ(attentionFlops(mha(2, 16, 8192, 128, true)), 549755813888u);
  // Odd N: (d + dv) * N^2, not rounded.
  AttentionShape odd = mha(1, 1, 3, 8, true);
  EXPECT_EQ(attentionFlops(odd), 16u * 9u);
  odd.causal = false;
  EXPECT_EQ(attentionFlops(odd), 2u * 16u * 9u);
}

TEST(RooflineFlops, DifferentValueHeadDim) {
  // 2*Nq*Nk*(d + dv): N = 1024, d = 192, dv = 128, one head.
  AttentionShape s = mha(1, 1, 1024, 192);
  s.headDimV = 128;
  EXPECT_EQ(attentionFlops(s), 2u * 1024u * 1024u * 320u);
  // dv = d reduces to the 4*N^2*d form.
  s.headDimV = 192;
  EXPECT_EQ(attentionFlops(s), 4u * 1024u * 1024u * 192u);
}

TEST(RooflineFlops, GroupedQueryHeadsCountEveryQueryHead) {
  AttentionShape s = mha(3, 8, 512, 64);
  uint64_t mhaFlops = attentionFlops(s);
  s.headsKV = 2;
  EXPECT_EQ(attentionFlops(s), mhaFlops);
  EXPECT_EQ(mhaFlops, 4u * 3u * 8u * 512u * 512u * 64u);
}

uint64_t bruteForceVisiblePairs(int64_t nq, int64_t nk) {
  uint64_t pairs = 0;
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j)
      pairs += j <= i + nk - nq;
  return pairs;
}

TEST(RooflineFlops, CausalVisiblePairsMatchBottomRightMask) {
  EXPECT_EQ(causalVisiblePairs(1, 10), 10u);   // decode: the one query sees all keys
  EXPECT_EQ(causalVisiblePairs(4, 4), 10u);    // n(n+1)/2
  EXPECT_EQ(causalVisiblePairs(2, 5), 4u + 5u);
  EXPECT_EQ(causalVisiblePairs(6, 3), 1u + 2u + 3u); // top 3 rows see nothing
  for (int nq : {1, 2, 7, 113, 128})
    for (int nk : {1, 3, 64, 147, 203})
      EXPECT_EQ(causalVisiblePairs(nq, nk), bruteForceVisiblePairs(nq, nk))
          << nq << " x " << nk;
}

TEST(RooflineFlops, CausalWithUnequalLengthsCountsVisiblePairs) {
  AttentionShape s = mha(2, 4, 0, 64, true);
  s.seqQ = 113;
  s.seqK = 203;
  EXPECT_EQ(attentionFlops(s),
            2u * 4u * 2u * bruteForceVisiblePairs(113, 203) * (64u + 64u));
}

// ---- bytes ------------------------------------------------------------------------

TEST(RooflineBytes, FlashSmallCaseByHand) {
  // B = 1, H = 1, N = 256, d = 64, fp16, block-m 128: Q 32 KiB, O 32 KiB, and two
  // query tiles each reading K and V (256 x 64 x 2 B = 32 KiB each) = 128 KiB.
  AttentionShape s = mha(1, 1, 256, 64);
  EXPECT_EQ(flashAttentionBytes(s, 128), 196608u);
  EXPECT_EQ(flashAttentionBytes(s, 128, /*writeLse=*/true), 196608u + 256u * 4u);
  // One tile of 256: K and V read once, which is also the lower bound.
  EXPECT_EQ(flashAttentionBytes(s, 256), 131072u);
  EXPECT_EQ(compulsoryAttentionBytes(s), 131072u);
  // Block-m 64: four tiles.
  EXPECT_EQ(flashAttentionBytes(s, 64), 65536u + 4u * 65536u);
}

TEST(RooflineBytes, FlashPartialLastTileStillReadsKV) {
  // N = 300 with block-m 128: ceil(300/128) = 3 tiles.
  AttentionShape s = mha(1, 1, 300, 64);
  uint64_t qo = 2u * 300u * 64u * 2u;
  uint64_t kvOnce = 300u * 128u * 2u;
  EXPECT_EQ(flashAttentionBytes(s, 128), qo + 3u * kvOnce);
}

TEST(RooflineBytes, FlashMatchesTheTheoremFormWhenTilesDivide) {
  // ROOFLINE.md: (N d + (N / B_m) 2 N d + N d) x element size, per head.
  for (int n : {1024, 4096, 16384}) {
    AttentionShape s = mha(2, 3, n, 128);
    uint64_t N = uint64_t(n), d = 128;
    uint64_t perHead = (N * d + (N / 128) * 2 * N * d + N * d) * 2;
    EXPECT_EQ(flashAttentionBytes(s, 128), 6u * perHead) << n;
  }
}

TEST(RooflineBytes, FlashCausalReadsOnlyVisibleKeys) {
  // N = 256, block-m 128, causal: the first tile's last row (127) sees 128 keys, the
  // second all 256: K/V bytes = (128 + 256) keys x (64 + 64) x 2 B.
  AttentionShape s = mha(1, 1, 256, 64, true);
  EXPECT_EQ(flashAttentionBytes(s, 128), 65536u + (128u + 256u) * 256u);
}

uint64_t bruteForceCausalKeys(int nq, int nk, int blockM) {
  uint64_t keys = 0;
  for (int start = 0; start < nq; start += blockM) {
    int last = std::min(start + blockM, nq) - 1;
    keys += uint64_t(std::clamp(last + 1 + nk - nq, 0, nk));
  }
  return keys;
}

TEST(RooflineBytes, FlashCausalClosedFormMatchesTileByTileCount) {
  for (int nq : {1, 5, 64, 113, 128, 300, 1023})
    for (int nk : {1, 64, 147, 203, 1024})
      for (int bm : {1, 16, 64, 128}) {
        AttentionShape s = mha(1, 1, 0, 8, true);
        s.seqQ = nq;
        s.seqK = nk;
        uint64_t qo = 2u * uint64_t(nq) * 8u * 2u;
        EXPECT_EQ(flashAttentionBytes(s, bm), qo + bruteForceCausalKeys(nq, nk, bm) * 32u)
            << nq << " x " << nk << " block-m " << bm;
      }
}

TEST(RooflineBytes, GroupedQueryHeads) {
  // 4 query heads sharing 2 KV heads: flash re-reads K/V per query head (no reuse
  // assumed), the lower bound reads each KV head once.
  AttentionShape s = mha(1, 4, 256, 64);
  s.headsKV = 2;
  EXPECT_EQ(flashAttentionBytes(s, 128), 4u * 196608u);
  EXPECT_EQ(compulsoryAttentionBytes(s), 4u * 65536u + 2u * 65536u);
  EXPECT_EQ(standardAttentionBytes(s, 4), 4u * (4u * 32768u + 4u * 256u * 256u * 4u));
}

TEST(RooflineBytes, DifferentValueHeadDim) {
  // d = 192, dv = 128, N = 256, block-m 128, one head, fp16.
  AttentionShape s = mha(1, 1, 256, 192);
  s.headDimV = 128;
  uint64_t q = 256u * 192u * 2u, o = 256u * 128u * 2u, kv = 256u * (192u + 128u) * 2u;
  EXPECT_EQ(flashAttentionBytes(s, 128), q + o + 2u * kv);
  EXPECT_EQ(standardAttentionBytes(s, 4), q + kv + o + 4u * 256u * 256u * 4u);
  EXPECT_EQ(compulsoryAttentionBytes(s), q + kv + o);
}

// ---- the roofline -----------------------------------------------------------------

TEST(RooflineEstimateTest, BoundSwitchesAtTheRidge) {
  // Flash intensity is about block-m for d = dv and 2-byte elements (4 N^2 d FLOPs
  // over 4 N^2 d / block-m bytes of K/V re-reads). On a GPU with ridge 100 FLOP/B,
  // block-m 64 is memory-bound and block-m 256 compute-bound.
  GpuSpec gpu = roundGpu();
  AttentionShape s = mha(1, 16, 16384, 128);
  llvm::Expected<RooflineEstimate> small = estimate(s, gpu, 64);
  ASSERT_TRUE(bool(small)) << llvm::toString(small.takeError());
  EXPECT_EQ(small->flash.bound, Bound::Memory);
  EXPECT_LT(small->flash.intensity, 100.0);
  EXPECT_EQ(small->flash.predictedSeconds, small->flash.memorySeconds);
  llvm::Expected<RooflineEstimate> big = estimate(s, gpu, 256);
  ASSERT_TRUE(bool(big)) << llvm::toString(big.takeError());
  EXPECT_EQ(big->flash.bound, Bound::Compute);
  EXPECT_GT(big->flash.intensity, 100.0);
  EXPECT_EQ(big->flash.predictedSeconds, big->flash.computeSeconds);
  // Standard attention: 4 N^2 d FLOPs over 4 N^2 x score bytes of S/P traffic, an
  // intensity just under d / 4 = 32 in fp32: memory-bound.
  EXPECT_EQ(big->standard.bound, Bound::Memory);
  EXPECT_NEAR(big->standard.intensity, 32.0, 0.2);
  EXPECT_LT(big->standard.intensity, 32.0);
  // The same shape on a GPU with a ridge below 32 FLOP/B makes it compute-bound.
  gpu.hbmBytesPerSec = 20e12; // ridge 5
  llvm::Expected<RooflineEstimate> fast = estimate(s, gpu, 64);
  ASSERT_TRUE(bool(fast)) << llvm::toString(fast.takeError());
  EXPECT_EQ(fast->standard.bound, Bound::Compute);
  EXPECT_EQ(boundName(Bound::Compute), "compute");
  EXPECT_EQ(boundName(Bound::Memory), "memory");
}

TEST(RooflineEstimateTest, TimesFollowFromCounts) {
  GpuSpec gpu = roundGpu();
  AttentionShape s = mha(1, 1, 256, 64);
  llvm::Expected<RooflineEstimate> e = estimate(s, gpu, 128);
  ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
  // 4 x 256^2 x 64 = 16,777,216 FLOPs; flash 196,608 bytes.
  EXPECT_EQ(e->flash.flops, 16777216u);
  EXPECT_EQ(e->flash.bytes, 196608u);
  EXPECT_DOUBLE_EQ(e->flash.computeSeconds, 16777216.0 / 100e12);
  EXPECT_DOUBLE_EQ(e->flash.memorySeconds, 196608.0 / 1e12);
  EXPECT_DOUBLE_EQ(e->flash.intensity, 16777216.0 / 196608.0);
  EXPECT_DOUBLE_EQ(e->ridgeIntensity, 100.0);
  EXPECT_DOUBLE_EQ(e->predictedSpeedup,
                   e->standard.predictedSeconds / e->flash.predictedSeconds);
  EXPECT_EQ(e->standard.flops, e->flash.flops);
  EXPECT_EQ(e->compulsory.bytes, 131072u);
}

TEST(RooflineEstimateTest, SpeedupGrowsWithSequenceLength) {
  // Standard's N^2 score traffic against flash's N^2 d / block-m: the predicted win
  // grows with N and stays above 1 on the H100 preset.
  std::optional<GpuSpec> h100 = findGpuPreset("H100");
  ASSERT_TRUE(h100.has_value());
  double previous = 0;
  for (int n : {512, 2048, 8192, 16384}) {
    llvm::Expected<RooflineEstimate> e = estimate(mha(1, 16, n, 128), *h100, 128);
    ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
    EXPECT_GT(e->predictedSpeedup, 1.0) << n;
    EXPECT_GE(e->predictedSpeedup, previous) << n;
    previous = e->predictedSpeedup;
  }
}

TEST(RooflineEstimateTest, RejectsBadInput) {
  GpuSpec gpu = roundGpu();
  AttentionShape s = mha(1, 4, 128, 64);
  s.headsKV = 3; // does not divide 4
  EXPECT_FALSE(isValid(s));
  llvm::Expected<RooflineEstimate> e = estimate(s, gpu, 128);
  ASSERT_FALSE(bool(e));
  EXPECT_EQ(takeErrorReport(e.takeError()).code, ErrorCode::InvalidValue);

  s = mha(1, 4, 0, 64);
  llvm::Expected<RooflineEstimate> zero = estimate(s, gpu, 128);
  ASSERT_FALSE(bool(zero));
  llvm::consumeError(zero.takeError());

  s = mha(1, 4, 128, 64);
  llvm::Expected<RooflineEstimate> noBlock = estimate(s, gpu, 0);
  ASSERT_FALSE(bool(noBlock));
  llvm::consumeError(noBlock.takeError());
  llvm::Expected<RooflineEstimate> badScore = estimate(s, gpu, 128, 3);
  ASSERT_FALSE(bool(badScore));
  llvm::consumeError(badScore.takeError());

  GpuSpec noPeak = gpu;
  noPeak.peakFlops = 0;
  llvm::Expected<RooflineEstimate> noGpu = estimate(s, noPeak, 128);
  ASSERT_FALSE(bool(noGpu));
  llvm::consumeError(noGpu.takeError());

  // Counts that would not fit in 64 bits are refused, not wrapped.
  AttentionShape huge = mha(1 << 20, 1 << 10, 1 << 30, 256);
  EXPECT_FALSE(isValid(huge));
  EXPECT_TRUE(isValid(mha(2, 16, 8192, 128)));
}

TEST(RooflineEstimateTest, FractionOfRoofline) {
  llvm::Expected<double> half = fractionOfRoofline(1e-3, 2e-3);
  ASSERT_TRUE(bool(half));
  EXPECT_DOUBLE_EQ(*half, 0.5);
  llvm::Expected<double> zero = fractionOfRoofline(1e-3, 0);
  ASSERT_FALSE(bool(zero));
  llvm::consumeError(zero.takeError());
  llvm::Expected<double> negative = fractionOfRoofline(-1, 1e-3);
  ASSERT_FALSE(bool(negative));
  llvm::consumeError(negative.takeError());
}

TEST(RooflineEstimateTest, CompareMeasuredOnThePeersH200Run) {
  // shared/GPU.md: cuDNN reached 675 TFLOP/s at d = 128, N = 8192 (B = 2, H = 16) on
  // the H200. At 989 TFLOP/s datasheet peak the shape is compute-bound at its lower
  // bound, so the fraction of the roofline is 675 / 989.
  std::optional<GpuSpec> h200 = findGpuPreset("NVIDIA H200");
  ASSERT_TRUE(h200.has_value());
  llvm::Expected<RooflineEstimate> e = estimate(mha(2, 16, 8192, 128), *h200, 128);
  ASSERT_TRUE(bool(e)) << llvm::toString(e.takeError());
  EXPECT_EQ(e->compulsory.bound, Bound::Compute);
  double measured = double(uint64_t(1) << 40) / 675e12;
  llvm::Expected<MeasuredReport> m = compareMeasured(*e, measured);
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_NEAR(m->achievedFlopsPerSec, 675e12, 1e6);
  EXPECT_NEAR(m->fractionOfRoofline, 675.0 / 989.0, 1e-12);
  // The tile model (K/V re-read per 128-row tile from HBM) is memory-bound here and
  // slower than what cuDNN measured: L2 absorbs re-reads the model counts.
  EXPECT_EQ(e->flash.bound, Bound::Memory);
  EXPECT_GT(m->fractionOfTileModel, 1.0);
}

// ---- GPU presets ------------------------------------------------------------------

TEST(GpuSpecs, PresetFiguresFromTheBrief) {
  std::optional<GpuSpec> h100 = findGpuPreset("H100-SXM");
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->peakFlops, 989e12);
  EXPECT_EQ(h100->hbmBytesPerSec, 3.35e12);
  EXPECT_EQ(h100->sharedPerSM, 228 * 1024);
  EXPECT_EQ(h100->sharedPerBlock, 227 * 1024);
  EXPECT_EQ(h100->smCount, 132);
  std::optional<GpuSpec> measured = findGpuPreset("H200-measured");
  ASSERT_TRUE(measured.has_value());
  EXPECT_EQ(measured->peakFlops, 784e12);
  EXPECT_EQ(measured->hbmBytesPerSec, 4.3e12);
  std::optional<GpuSpec> a100 = findGpuPreset("A100");
  ASSERT_TRUE(a100.has_value());
  EXPECT_EQ(a100->peakFlops, 312e12);
  EXPECT_EQ(a100->sharedPerBlock, 163 * 1024);
  EXPECT_EQ(a100->smCount, 108);
  for (const GpuSpec &g : gpuPresets()) {
    llvm::Error err = validateGpuSpec(g);
    EXPECT_FALSE(bool(err)) << g.name;
    llvm::consumeError(std::move(err));
    EXPECT_FALSE(g.source.empty()) << g.name;
  }
  EXPECT_EQ(defaultGpuPreset().name, "H100-SXM");
}

TEST(GpuSpecs, LookupByDeviceNameAndAlias) {
  auto nameOf = [](llvm::StringRef query) {
    std::optional<GpuSpec> g = findGpuPreset(query);
    return g ? g->name : std::string("<none>");
  };
  EXPECT_EQ(nameOf("NVIDIA H200"), "H200");
  EXPECT_EQ(nameOf("NVIDIA H100 80GB HBM3"), "H100-SXM");
  EXPECT_EQ(nameOf("NVIDIA H100 PCIe"), "H100-PCIe");
  EXPECT_EQ(nameOf("NVIDIA A100-SXM4-80GB"), "A100-SXM");
  EXPECT_EQ(nameOf("NVIDIA A100-SXM4-40GB"), "A100-SXM-40GB");
  EXPECT_EQ(nameOf("NVIDIA GeForce RTX 4090"), "RTX-4090");
  EXPECT_EQ(nameOf("NVIDIA L40S"), "L40S");
  EXPECT_EQ(nameOf("NVIDIA A10"), "A10");
  EXPECT_EQ(nameOf("h100"), "H100-SXM");
  EXPECT_EQ(nameOf("h200 measured"), "H200-measured");
  EXPECT_EQ(nameOf("4090"), "RTX-4090");
  // Parts whose figures differ from every preset are not matched.
  EXPECT_EQ(nameOf("NVIDIA H100 NVL"), "<none>");
  EXPECT_EQ(nameOf("NVIDIA A100 80GB PCIe"), "<none>");
  EXPECT_EQ(nameOf("NVIDIA L40"), "<none>");
  EXPECT_EQ(nameOf("NVIDIA A10G"), "<none>");
  EXPECT_EQ(nameOf("NVIDIA GeForce RTX 4090 Laptop GPU"), "<none>");
  EXPECT_EQ(nameOf(""), "<none>");

  llvm::Expected<GpuSpec> unknown = lookupGpu("Voodoo3");
  ASSERT_FALSE(bool(unknown));
  ErrorReport report = takeErrorReport(unknown.takeError());
  EXPECT_EQ(report.code, ErrorCode::InvalidValue);
  EXPECT_NE(report.message.find("H100-SXM"), std::string::npos) << report.message;
}

TEST(GpuSpecs, GenericEstimateFromProperties) {
  // H100 SXM from its properties: 4096 FLOP/clock/SM x 132 SMs x 1830 MHz = 989 TF;
  // HBM3 2619 MHz x 2 x 5120 bits / 8 = 3.35 TB/s.
  GpuSpec g = estimateGpuSpec("some sm_90", 9, 0, 132, 1830000, 2619000, 5120, 233472,
                              232448);
  EXPECT_NEAR(g.peakFlops, 989.4e12, 0.1e12);
  EXPECT_NEAR(g.hbmBytesPerSec, 3.352e12, 0.001e12);
  EXPECT_EQ(g.smCount, 132);
  EXPECT_EQ(g.sharedPerBlock, 232448);
  EXPECT_EQ(tensorFlopsPerClockPerSM(8, 0), 2048);
  EXPECT_EQ(tensorFlopsPerClockPerSM(8, 9), 1024);
  EXPECT_EQ(tensorFlopsPerClockPerSM(10, 0), 8192);
}

TEST(GpuSpecs, FromDeviceUsesThePresetAndScalesMigSlices) {
  runtime::DeviceProperties props;
  props.name = "NVIDIA H200";
  props.ccMajor = 9;
  props.smCount = 132;
  props.maxSharedPerSM = 233472;
  props.maxSharedPerBlockOptin = 232448;
  GpuSpec full = gpuSpecFromDevice(props);
  EXPECT_EQ(full.peakFlops, 989e12);
  EXPECT_EQ(full.hbmBytesPerSec, 4.8e12);
  EXPECT_NE(full.name.find("H200"), std::string::npos);

  props.name = "NVIDIA H100 80GB HBM3 MIG 3g.40gb";
  props.smCount = 66;
  GpuSpec slice = gpuSpecFromDevice(props);
  EXPECT_DOUBLE_EQ(slice.peakFlops, 989e12 / 2);
  EXPECT_DOUBLE_EQ(slice.hbmBytesPerSec, 3.35e12 / 2);
  EXPECT_EQ(slice.smCount, 66);

  props.name = "NVIDIA Hypothetical X1";
  props.ccMajor = 8;
  props.ccMinor = 6;
  props.smCount = 10;
  props.clockKHz = 1000000;
  props.memoryClockKHz = 1000000;
  props.memoryBusWidthBits = 256;
  GpuSpec generic = gpuSpecFromDevice(props);
  EXPECT_DOUBLE_EQ(generic.peakFlops, 1024.0 * 10 * 1e9);
  EXPECT_DOUBLE_EQ(generic.hbmBytesPerSec, 2.0 * 1e9 * 256 / 8);
  EXPECT_EQ(generic.name, "NVIDIA Hypothetical X1");
}

} // namespace
} // namespace flashjit::tuner
