// Candidates as binaries (no GPU; NVRTC compiles): keys, post-compile rejection,
// and the cache making a second build compile nothing.
#include "tuner/variants.h"

#include "memory_cache.h"
#include "runtime/nvrtc.h"

#include <gtest/gtest.h>

using namespace flashjit;
using flashjit::testing::memoryCache;
using generator::KernelSpec;
using generator::TileConfig;

namespace {

KernelSpec spec64() {
  KernelSpec s;
  s.dtype = generator::DType::BF16;
  s.headDim = s.headDimV = 64;
  s.target = "sm_80";
  return s;
}

TEST(BinaryKey, EveryFieldCounts) {
  std::string base = tuner::binaryKey("src", {"-a", "-b"}, "13.0", "sm_90a");
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base, tuner::binaryKey("src", {"-a", "-b"}, "13.0", "sm_90a"));
  EXPECT_NE(base, tuner::binaryKey("src2", {"-a", "-b"}, "13.0", "sm_90a"));
  EXPECT_NE(base, tuner::binaryKey("src", {"-a"}, "13.0", "sm_90a"));
  EXPECT_NE(base, tuner::binaryKey("src", {"-a -b"}, "13.0", "sm_90a"));
  EXPECT_NE(base, tuner::binaryKey("src", {"-a", "-b"}, "13.1", "sm_90a"));
  EXPECT_NE(base, tuner::binaryKey("src", {"-a", "-b"}, "13.0", "sm_90"));
  EXPECT_EQ(tuner::binaryKeyText(spec64(), {128, 64, 8, 2}),
            "fwd_mma.bf16.d64.dv64.nocausal.sm80/bm128.bn64.w8.s2");
}

TEST(CompileRejection, SpillsAndSerializedOrIgnoredInstructions) {
  EXPECT_EQ(tuner::compileRejection(0, ""), "");
  EXPECT_EQ(tuner::compileRejection(0, "ptxas info    : Used 214 registers, used 1 barriers\n"),
            "");
  EXPECT_NE(tuner::compileRejection(16, ""), "");
  EXPECT_NE(tuner::compileRejection(16, "").find("16 bytes"), std::string::npos);
  std::string spilled = tuner::compileRejection(
      28, "ptxas info    : Compiling entry function 'main' for 'sm_90a'\n"
          "ptxas         .     24 bytes stack frame, 16 bytes spill stores, 12 "
          "bytes spill loads\n");
  // With NVRTC shared with another library, the message goes on to say so.
  EXPECT_EQ(spilled.substr(0, spilled.find(';')),
            "spills 28 bytes of registers (main: 16 bytes stored, 12 loaded)");
  EXPECT_EQ(spilled.find("is shared") != std::string::npos,
            runtime::nvrtcSharedBecause().has_value())
      << spilled;
  std::string serialized = tuner::compileRejection(
      0, "ptxas info : Compiling entry function 'k'\n"
         "ptxas warning : Potential Performance Loss: wgmma.mma_async instructions are "
         "serialized due to the presence of Extern calls in the function 'k'.\n");
  EXPECT_NE(serialized.find("serialized"), std::string::npos) << serialized;
  EXPECT_NE(tuner::compileRejection(0, "ptxas warning : 'setmaxnreg' ignored; unable to "
                                       "determine register count at entry"),
            "");
  EXPECT_NE(tuner::compileRejection(0, "warning: instruction 'foo' ignored on this target"),
            "");
  // Other warnings are not about instructions.
  EXPECT_EQ(tuner::compileRejection(0, "kernel.cu(12): warning #177-D: variable \"x\" was "
                                       "declared but never referenced"),
            "");
}

TEST(BuildVariants, CompilesOnceThenComesFromTheCache) {
  auto cache = memoryCache();
  std::vector<TileConfig> tiles = {{64, 64, 4, 2}, {64, 64, 8, 2} /* does not emit */};
  tuner::BuildOptions options;
  auto first = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  ASSERT_EQ(first->variants.size(), 2u);
  EXPECT_EQ(first->compiled, 1);
  const tuner::Variant &good = first->variants[0];
  EXPECT_TRUE(good.usable()) << good.error << good.rejection;
  EXPECT_TRUE(good.compiledNow);
  EXPECT_GT(good.binary->registers, 0);
  EXPECT_EQ(good.binary->sharedBytes, good.emitted.sharedBytes);
  EXPECT_EQ(good.keyText, "fwd_mma.bf16.d64.dv64.nocausal.sm80/bm64.bn64.w4.s2");
  EXPECT_FALSE(first->variants[1].usable());
  EXPECT_FALSE(first->variants[1].error.empty());

  auto second = tuner::buildVariants(*cache, spec64(), {tiles[0]}, options);
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(second->compiled, 0);
  EXPECT_FALSE(second->variants[0].compiledNow);
  ASSERT_TRUE(second->variants[0].cachedIn.has_value());
  EXPECT_EQ(*second->variants[0].cachedIn, cache::Source::User);
  EXPECT_EQ(second->variants[0].key, good.key);
  EXPECT_EQ(second->variants[0].binary->cubin, good.binary->cubin);
}

// A row stored without ptxas's report (NVRTC 12.9+'s own cache served the compile
// before compile() turned it off) could hide spills: it is compiled again and replaced.
TEST(BuildVariants, ARowWithoutPtxasReportIsCompiledAgain) {
  auto cache = memoryCache();
  std::vector<TileConfig> tiles = {{64, 64, 4, 2}};
  tuner::BuildOptions options;
  auto first = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  cache::BinaryRow stale = *first->variants[0].binary;
  stale.registers = -1;
  stale.spillBytes = 0;
  ASSERT_FALSE(bool(cache->publish(&stale, nullptr)));

  auto second = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(second->compiled, 1);
  EXPECT_TRUE(second->variants[0].compiledNow);
  EXPECT_GT(second->variants[0].binary->registers, 0);
  auto third = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(third)) << llvm::toString(third.takeError());
  EXPECT_EQ(third->compiled, 0) << "the row was replaced";
}

// A cached spill is taken at its word unless the caller asks for a re-check, which
// compiles the tile again and replaces the row with what this NVRTC reports.
TEST(BuildVariants, ACachedSpillIsCompiledAgainOnlyWhenAsked) {
  auto cache = memoryCache();
  std::vector<TileConfig> tiles = {{64, 64, 4, 2}};
  tuner::BuildOptions options;
  auto first = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  ASSERT_EQ(first->variants[0].binary->spillBytes, 0);
  cache::BinaryRow spilled = *first->variants[0].binary;
  spilled.spillBytes = 440;
  ASSERT_FALSE(bool(cache->publish(&spilled, nullptr)));

  auto trusted = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(trusted)) << llvm::toString(trusted.takeError());
  EXPECT_EQ(trusted->compiled, 0);
  EXPECT_FALSE(trusted->variants[0].usable());
  EXPECT_NE(trusted->variants[0].rejection.find("spills 440 bytes"), std::string::npos)
      << trusted->variants[0].rejection;

  options.recheckSpills = true;
  auto rechecked = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(rechecked)) << llvm::toString(rechecked.takeError());
  EXPECT_EQ(rechecked->compiled, 1);
  EXPECT_TRUE(rechecked->variants[0].usable()) << rechecked->variants[0].rejection;
  options.recheckSpills = false;
  auto after = tuner::buildVariants(*cache, spec64(), tiles, options);
  ASSERT_TRUE(bool(after)) << llvm::toString(after.takeError());
  EXPECT_EQ(after->compiled, 0);
  EXPECT_TRUE(after->variants[0].usable()) << "the row was replaced";
}

TEST(BuildVariants, MutatedSourceGetsItsOwnKeyAndNoCompileWhenForbidden) {
  auto cache = memoryCache();
  tuner::BuildOptions options;
  options.allowCompile = false;
  TileConfig tile{64, 64, 4, 2};
  auto plain = tuner::buildVariants(*cache, spec64(), {tile}, options);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_EQ(plain->compiled, 0);
  EXPECT_FALSE(plain->variants[0].usable());
  EXPECT_NE(plain->variants[0].error.find("not in the cache"), std::string::npos);

  int calls = 0;
  options.mutateSource = [&](const TileConfig &t, std::string &source) {
    ++calls;
    EXPECT_EQ(t, tile);
    source += "\n// planted\n";
  };
  auto mutated = tuner::buildVariants(*cache, spec64(), {tile}, options);
  ASSERT_TRUE(bool(mutated));
  EXPECT_EQ(calls, 1);
  EXPECT_NE(mutated->variants[0].key, plain->variants[0].key);
  EXPECT_NE(mutated->variants[0].emitted.source.find("// planted"), std::string::npos);
}

} // namespace
