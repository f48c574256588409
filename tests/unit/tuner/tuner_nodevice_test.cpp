// The Tuner with no device (no GPU here): cached mode explains its misses, rows
// published by a tune elsewhere are found under a device key, and the heuristic
// default a compile-only sweep prepared is used without compiling.
#include "tuner/tuner.h"

#include "generator/templates.h"
#include "support/error.h"
#include "subprocess.h"
#include "memory_cache.h"
#include "runtime/nvrtc.h"

#include "llvm/ADT/SmallString.h"
#include "tuner/variants.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace flashjit;
using flashjit::testing::memoryCache;
using generator::KernelSpec;
using tuner::Bucket;
using tuner::TuneMode;
using tuner::Tuner;
using tuner::TunerOptions;

namespace {

constexpr const char *kDevice = "NVIDIA_H100_80GB_HBM3.sm90.132sm";

KernelSpec spec() {
  KernelSpec s;
  s.dtype = generator::DType::FP16;
  s.headDim = s.headDimV = 64;
  s.causal = true;
  s.target = "sm_90a";
  return s;
}

TunerOptions cachedOptions() {
  TunerOptions o;
  o.mode = TuneMode::Cached;
  o.deviceKey = kDevice;
  return o;
}

// What a tune on the device would have published for one bucket.
void publishRow(cache::Cache &cache, Bucket bucket, const generator::TileConfig &tile,
                double us) {
  tuner::BuildOptions build;
  auto built = tuner::buildVariants(cache, spec(), {tile}, build);
  ASSERT_TRUE(bool(built)) << llvm::toString(built.takeError());
  ASSERT_TRUE(built->variants[0].usable());
  cache::TuningRow row;
  row.key.spec = spec().key();
  row.key.bucket = bucket.key();
  row.key.deviceKey = kDevice;
  row.key.generatorFingerprint = generator::familyFingerprint(spec().family);
  row.key.protocolVersion = tuner::kMeasurementProtocolVersion;
  row.config = tile.key();
  row.binaryKey = built->variants[0].key;
  row.medianUs = us;
  row.tflops = 123;
  row.candidatesJson = "{}";
  row.clocksJson = "{}";
  ASSERT_FALSE(bool(cache.publish(&*built->variants[0].binary, &row)));
}

TEST(TunerNoDevice, CachedModeMissIsNotFoundAndExplained) {
  auto cache = memoryCache();
  Tuner t(nullptr, *cache, cachedOptions());
  auto sel = t.select(spec(), {1024, 1024, 32});
  ASSERT_FALSE(bool(sel));
  ErrorReport report = takeErrorReport(sel.takeError());
  EXPECT_EQ(report.code, ErrorCode::NotFound);
  EXPECT_NE(report.message.find("no row for spec"), std::string::npos) << report.message;
  EXPECT_EQ(t.counters().compilations, 0);
}

TEST(TunerNoDevice, NeedsADeviceOrADeviceKey) {
  auto cache = memoryCache();
  Tuner t(nullptr, *cache, TunerOptions{});
  auto sel = t.select(spec(), {1024, 1024, 32});
  ASSERT_FALSE(bool(sel));
  EXPECT_EQ(takeErrorReport(sel.takeError()).code, ErrorCode::NoDevice);
  // With a key, a default-mode miss still cannot tune without a device.
  TunerOptions keyed;
  keyed.deviceKey = kDevice;
  Tuner k(nullptr, *cache, keyed);
  auto miss = k.select(spec(), {1024, 1024, 32});
  ASSERT_FALSE(bool(miss));
  EXPECT_EQ(takeErrorReport(miss.takeError()).code, ErrorCode::NoDevice);
}

TEST(TunerNoDevice, FindsTunedRowsAndDispatchesOverThem) {
  auto cache = memoryCache();
  publishRow(*cache, {1024, 1024, 32}, {64, 64, 4, 2}, 80);
  publishRow(*cache, {8192, 8192, 32}, {128, 64, 8, 2}, 2500);
  Tuner t(nullptr, *cache, cachedOptions());

  auto hit = t.select(spec(), {8192, 8192, 32});
  ASSERT_TRUE(bool(hit)) << llvm::toString(hit.takeError());
  EXPECT_EQ(hit->tile.key(), "bm128.bn64.w8.s2");
  EXPECT_EQ(hit->origin, tuner::Origin::UserCache);
  EXPECT_EQ(tuner::originName(hit->origin), "user cache");
  EXPECT_DOUBLE_EQ(hit->tunedUs, 2500);
  EXPECT_EQ(hit->kernel, nullptr) << "no device: nothing loaded";
  EXPECT_NE(hit->tuningKeyText.find("q8192.k8192.bh32"), std::string::npos);
  EXPECT_FALSE(hit->source.empty());

  auto all = t.loadTuned(spec());
  ASSERT_TRUE(bool(all)) << llvm::toString(all.takeError());
  ASSERT_EQ(all->size(), 2u);
  const tuner::Selection *near = Tuner::dispatch(*all, {2048, 2048, 32});
  ASSERT_NE(near, nullptr);
  EXPECT_EQ(near->bucket, (Bucket{1024, 1024, 32}));
  EXPECT_EQ(near->tile.key(), "bm64.bn64.w4.s2");
  EXPECT_EQ(t.counters().compilations, 0) << "cached mode compiles nothing";
  EXPECT_EQ(t.counters().tunes, 0);

  // Another spec has nothing.
  KernelSpec other = spec();
  other.causal = false;
  auto none = t.loadTuned(other);
  ASSERT_TRUE(bool(none));
  EXPECT_TRUE(none->empty());
}

TEST(TunerNoDevice, HeuristicDefaultFromACompileOnlyCache) {
  auto cache = memoryCache();
  Tuner t(nullptr, *cache, cachedOptions());
  auto missing = t.heuristicDefault(spec());
  ASSERT_FALSE(bool(missing));
  EXPECT_EQ(takeErrorReport(missing.takeError()).code, ErrorCode::NotFound);

  bool compiled = false;
  auto key = tuner::compileOnly(*cache, spec(), &compiled);
  ASSERT_TRUE(bool(key)) << llvm::toString(key.takeError());
  EXPECT_TRUE(compiled);
  auto again = tuner::compileOnly(*cache, spec(), &compiled);
  ASSERT_TRUE(bool(again));
  EXPECT_FALSE(compiled) << "the cached binary is reused";
  EXPECT_EQ(*again, *key);

  auto fallback = t.heuristicDefault(spec());
  ASSERT_TRUE(bool(fallback)) << llvm::toString(fallback.takeError());
  EXPECT_EQ(fallback->tile, generator::defaultTile(spec()));
  EXPECT_EQ(fallback->binaryKey, *key);
  EXPECT_EQ(fallback->origin, tuner::Origin::UserCache);
  EXPECT_NE(fallback->note.find("heuristic default"), std::string::npos) << fallback->note;
  EXPECT_EQ(t.counters().compilations, 0);
}

// Run only as the child of the test below: a deployment process without NVRTC.
TEST(TunerNoDevice, DISABLED_UsesRecordedBinaryWithoutNvrtc) {
  const char *path = std::getenv("FLASHJIT_TEST_TUNED_DB");
  ASSERT_NE(path, nullptr);
  auto version = runtime::nvrtcVersion();
  ASSERT_FALSE(bool(version)) << "this child was meant to run without NVRTC";
  llvm::consumeError(version.takeError());
  cache::CacheOptions options;
  options.userPath = path;
  auto cache = cache::Cache::open(options);
  ASSERT_TRUE(bool(cache)) << llvm::toString(cache.takeError());
  Tuner t(nullptr, **cache, cachedOptions());
  auto hit = t.select(spec(), {1024, 1024, 32});
  ASSERT_TRUE(bool(hit)) << llvm::toString(hit.takeError());
  EXPECT_EQ(hit->tile.key(), "bm64.bn64.w4.s2");
  EXPECT_NE(hit->note.find("recorded binary"), std::string::npos) << hit->note;
  // A bucket with no row is still a clean miss.
  auto miss = t.select(spec(), {4096, 4096, 32});
  ASSERT_FALSE(bool(miss));
  EXPECT_EQ(takeErrorReport(miss.takeError()).code, ErrorCode::NotFound);
}

TEST(TunerNoDevice, TunedRowsWorkInAProcessWithoutNvrtc) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("flashjit-nonvrtc-test", dir));
  std::string db = (dir + "/tuned.sqlite").str();
  {
    cache::CacheOptions options;
    options.userPath = db;
    auto cache = cache::Cache::open(options);
    ASSERT_TRUE(bool(cache));
    publishRow(**cache, {1024, 1024, 32}, {64, 64, 4, 2}, 80);
  }
  std::string error;
  int rc = flashjit::testing::runTestInChild(
      "TunerNoDevice.DISABLED_UsesRecordedBinaryWithoutNvrtc",
      {"FLASHJIT_TEST_TUNED_DB=" + db, "FLASHJIT_NVRTC_LIBRARY=/nonexistent/libnvrtc.so"},
      error);
  EXPECT_EQ(rc, 0) << error;
  llvm::sys::fs::remove_directories(dir);
}

TEST(TunerNoDevice, RejectsABadSpec) {
  auto cache = memoryCache();
  Tuner t(nullptr, *cache, cachedOptions());
  KernelSpec bad = spec();
  bad.headDim = 100;
  auto sel = t.select(bad, {1024, 1024, 32});
  ASSERT_FALSE(bool(sel));
  EXPECT_EQ(takeErrorReport(sel.takeError()).code, ErrorCode::NotSupported);
}

} // namespace
