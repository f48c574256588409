// A winner measured elsewhere made usable without a GPU (tuner::importWinner, what
// `flashjit tune --compile-only --winners` does for the system cache): its tile is compiled
// here with this NVRTC, the measured row is kept; a row from another generator or
// protocol is stale and changes nothing; a bad row is a failure, not a crash.
#include "tuner/tuner.h"

#include "generator/templates.h"
#include "tuner/measure.h"
#include "tuner/variants.h"
#include "memory_cache.h"

#include <gtest/gtest.h>

using namespace flashjit;
using flashjit::testing::memoryCache;

namespace {

cache::TuningRow measuredWinner() {
  cache::TuningRow row;
  row.key.spec = "fwd_mma.bf16.d64.dv64.causal.sm80";
  row.key.bucket = "q1024.k1024.bh32";
  row.key.deviceKey = "NVIDIA_A100-SXM4-80GB.sm80.108sm";
  row.key.generatorFingerprint = generator::familyFingerprint(generator::Family::FwdMma);
  row.key.protocolVersion = tuner::kMeasurementProtocolVersion;
  row.config = "bm64.bn64.w4.s2";
  row.binaryKey = std::string(64, 'a'); // the measuring machine's binary
  row.medianUs = 123.5;
  row.tflops = 210.25;
  row.tunedAt = 1764000000;
  row.flashjitVersion = "0.2.0";
  row.candidatesJson = R"([{"config":"bm64.bn64.w4.s2","us":123.5}])";
  row.clocksJson = R"({"sm_mhz":1410})";
  return row;
}

} // namespace

TEST(ImportWinner, CompilesTheTileHereAndKeepsTheMeasurement) {
  auto cache = memoryCache();
  cache::TuningRow winner = measuredWinner();
  auto done = tuner::importWinner(*cache, winner);
  ASSERT_TRUE(bool(done)) << llvm::toString(done.takeError());
  EXPECT_EQ(done->status, tuner::WinnerImport::Imported) << done->why;
  EXPECT_TRUE(done->compiledNow);

  auto found = cache->findTuned(winner.key);
  ASSERT_TRUE(bool(found) && found->has_value());
  const cache::TuningRow &row = (*found)->tuning.row;
  EXPECT_EQ(row.config, winner.config);
  EXPECT_EQ(row.medianUs, winner.medianUs);
  EXPECT_EQ(row.tflops, winner.tflops);
  EXPECT_EQ(row.tunedAt, winner.tunedAt);
  EXPECT_EQ(row.flashjitVersion, winner.flashjitVersion);
  EXPECT_EQ(row.candidatesJson, winner.candidatesJson);
  EXPECT_EQ(row.clocksJson, winner.clocksJson);
  EXPECT_NE(row.binaryKey, winner.binaryKey) << "points at the binary compiled here";
  ASSERT_TRUE((*found)->binary.has_value()) << "and that binary is in the cache";
  EXPECT_EQ((*found)->binary->row.keyText, "fwd_mma.bf16.d64.dv64.causal.sm80/bm64.bn64.w4.s2");
  EXPECT_FALSE((*found)->binary->row.cubin.empty());

  auto again = tuner::importWinner(*cache, winner);
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(again->status, tuner::WinnerImport::Imported);
  EXPECT_FALSE(again->compiledNow) << "the binary is reused";
}

TEST(ImportWinner, AnotherGeneratorOrProtocolIsStaleAndWritesNothing) {
  auto cache = memoryCache();
  cache::TuningRow oldGenerator = measuredWinner();
  oldGenerator.key.generatorFingerprint = std::string(64, '0');
  // A row is keyed by its own family's templates: another family's fingerprint, or the
  // whole generator's, is not this row's.
  cache::TuningRow otherFamily = measuredWinner();
  otherFamily.key.generatorFingerprint = generator::familyFingerprint(generator::Family::DecMma);
  cache::TuningRow wholeGenerator = measuredWinner();
  wholeGenerator.key.generatorFingerprint = generator::generatorFingerprint();
  cache::TuningRow oldProtocol = measuredWinner();
  oldProtocol.key.protocolVersion = tuner::kMeasurementProtocolVersion - 1;
  for (const cache::TuningRow &row : {oldGenerator, otherFamily, wholeGenerator, oldProtocol}) {
    auto done = tuner::importWinner(*cache, row);
    ASSERT_TRUE(bool(done)) << llvm::toString(done.takeError());
    EXPECT_EQ(done->status, tuner::WinnerImport::Stale);
    EXPECT_NE(done->why.find("re-measure"), std::string::npos) << done->why;
    EXPECT_FALSE(done->compiledNow);
  }
  auto rows = cache->allTunings();
  ASSERT_TRUE(bool(rows));
  EXPECT_TRUE(rows->empty());
}

TEST(ImportWinner, BadRowsFailWithTheReason) {
  auto cache = memoryCache();
  cache::TuningRow badSpec = measuredWinner();
  badSpec.key.spec = "fwd_mma.bf16.d64.causal.sm80";
  cache::TuningRow badTile = measuredWinner();
  badTile.config = "bm64.bn64";
  cache::TuningRow tooBig = measuredWinner();
  tooBig.config = "bm256.bn256.w8.s4"; // no such tile fits sm_80's shared memory
  cache::TuningRow wrongTarget = measuredWinner();
  wrongTarget.key.spec = "fwd_wgmma.bf16.d64.dv64.causal.sm80";
  for (const auto &[row, expected] :
       {std::pair<cache::TuningRow, const char *>{badSpec, "bad kernel spec"},
        {badTile, "bad tuned config"},
        {tooBig, ""},
        {wrongTarget, "sm_90a"}}) {
    auto done = tuner::importWinner(*cache, row);
    ASSERT_TRUE(bool(done)) << llvm::toString(done.takeError());
    EXPECT_EQ(done->status, tuner::WinnerImport::Failed) << row.key.spec << " " << row.config;
    EXPECT_NE(done->why.find(expected), std::string::npos) << done->why;
  }
  auto rows = cache->allTunings();
  ASSERT_TRUE(bool(rows));
  EXPECT_TRUE(rows->empty());
}

TEST(KernelSpecParse, InverseOfKey) {
  for (const char *key : {"fwd_mma.bf16.d64.dv64.causal.sm80",
                          "fwd_wgmma.fp16.d256.dv256.nocausal.sm90a",
                          "bwd_mma.bf16.d128.dv128.causal.sm86"}) {
    auto spec = generator::KernelSpec::parse(key);
    ASSERT_TRUE(bool(spec)) << key << ": " << llvm::toString(spec.takeError());
    EXPECT_EQ(spec->key(), key);
  }
  for (const char *bad : {"", "fwd_mma.bf16.d64.dv64.causal", "fwd_mma.bf17.d64.dv64.causal.sm80",
                          "fwd_mma.bf16.d64.dv64.acausal.sm80", "fwd_mma.bf16.dx.dv64.causal.sm80",
                          "fwd_mma.bf16.d63.dv64.causal.sm80", "fwd_mma.bf16.d64.dv64.causal.sm",
                          "fwd_mma.bf16.d64.dv64.causal.sm12"}) {
    auto spec = generator::KernelSpec::parse(bad);
    EXPECT_FALSE(bool(spec)) << bad;
    if (!spec)
      llvm::consumeError(spec.takeError());
  }
}
