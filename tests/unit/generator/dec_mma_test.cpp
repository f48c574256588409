// dec_mma's host rules (generator/dec_mma.*): keys, tile validation with the reason for
// each rejection, default tiles that fit every target, features refused, and the
// emitted module's entry points and shared memory agreeing with the template's.
#include "generator/dec_mma.h"
#include "generator/emit.h"
#include "generator/spec.h"
#include "support/error.h"

#include <gtest/gtest.h>

using namespace flashjit;
using namespace flashjit::generator;

namespace {

KernelSpec decodeSpec(int d, const char *target = "sm_90a") {
  KernelSpec spec;
  spec.family = Family::DecMma;
  spec.dtype = DType::BF16;
  spec.headDim = spec.headDimV = d;
  spec.target = target;
  return spec;
}

std::string rejection(const KernelSpec &spec, TileConfig tile) {
  llvm::Error err = validateTile(spec, tile);
  return err ? takeErrorReport(std::move(err)).message : "";
}

} // namespace

TEST(DecMmaSpec, KeyAndFamilyRoundTrip) {
  KernelSpec spec = decodeSpec(128);
  spec.causal = true;
  EXPECT_EQ(spec.key(), "dec_mma.bf16.d128.dv128.causal.sm90a");
  auto parsed = KernelSpec::parse(spec.key());
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(parsed->family, Family::DecMma);
  EXPECT_EQ(operationOf(Family::DecMma), Operation::Decode);
  EXPECT_EQ(operationName(Operation::Decode), "decode");
  auto family = parseFamily("dec_mma");
  ASSERT_TRUE(bool(family));
  EXPECT_EQ(*family, Family::DecMma);
}

TEST(DecMmaSpec, TilesAreCheckedWithTheirReason) {
  KernelSpec spec = decodeSpec(128);
  EXPECT_EQ(rejection(spec, {16, 64, 4, 3}), "");
  EXPECT_EQ(rejection(spec, {64, 64, 4, 3}), "");  // 4 row groups, one key slice
  EXPECT_NE(rejection(spec, {48, 64, 4, 3}).find("16, 32 or 64"), std::string::npos);
  EXPECT_NE(rejection(spec, {16, 64, 3, 3}).find("1, 2, 4 or 8 warps"), std::string::npos);
  EXPECT_NE(rejection(spec, {64, 64, 2, 3}).find("a warp per 16 rows"), std::string::npos);
  // 8 warps over 64 keys: 8 keys each, less than an MMA's 16.
  EXPECT_NE(rejection(spec, {16, 64, 8, 3}).find("multiple of 16 keys"), std::string::npos);
  EXPECT_NE(rejection(spec, {16, 64, 4, 7}).find("2 to 6 stages"), std::string::npos);
  // 128 keys of K and V at d = 256, 4 stages: more shared memory than an H100 has.
  EXPECT_NE(rejection(decodeSpec(256), {16, 128, 4, 4}).find("shared memory"),
            std::string::npos);
}

TEST(DecMmaSpec, DefaultTilesFitEveryTarget) {
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90a"})
    for (int d = 8; d <= 256; d += 8) {
      KernelSpec spec = decodeSpec(d, target);
      TileConfig tile = defaultTile(spec);
      EXPECT_EQ(rejection(spec, tile), "") << spec.key() << " " << tile.key();
    }
}

// The window, soft-capping and ALiBi compile in (the hook's features struct in the
// config; ALiBi's kernels see the params' slopes), and the user's mods (0.14: their
// kernels see the params' args, and so every field before them), over either cache.
TEST(DecMmaSpec, TakesTheFeatures) {
  KernelSpec spec = decodeSpec(128);
  spec.features.window = true;
  spec.features.windowLeft = 4096;
  spec.features.softcap = 30;
  EXPECT_FALSE(bool(validateSpec(spec))) << spec.key();
  auto kernel = emitKernel(spec, defaultTile(spec));
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  EXPECT_NE(kernel->source.find("false, FjFeatures> FjConfig"), std::string::npos);
  EXPECT_EQ(kernel->decode.windowLeft, 4096);
  EXPECT_EQ(kernel->source.find("#define FJ_DECODE_ALIBI"), std::string::npos);
  EXPECT_EQ(kernel->source.find("#define FJ_DECODE_MODS"), std::string::npos);
  spec.features.alibi = true;
  EXPECT_FALSE(bool(validateSpec(spec))) << spec.key();
  kernel = emitKernel(spec, defaultTile(spec));
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  EXPECT_NE(kernel->source.find("#define FJ_DECODE_ALIBI 1"), std::string::npos);
  for (auto set : {+[](KernelSpec &s) { s.features.maskMod = "return true;"; },
                   +[](KernelSpec &s) { s.features.scoreMod = "return score;"; }}) {
    KernelSpec other = decodeSpec(128);
    set(other);
    EXPECT_FALSE(bool(validateSpec(other))) << other.key();
    auto modKernel = emitKernel(other, defaultTile(other));
    ASSERT_TRUE(bool(modKernel)) << llvm::toString(modKernel.takeError());
    EXPECT_NE(modKernel->source.find("#define FJ_DECODE_MODS 1"), std::string::npos);
    // After the user's code the lines are the generated source's again.
    EXPECT_EQ(modKernel->source.find("FJ_RESUME_LINE"), std::string::npos);
    EXPECT_EQ(modKernel->source.find("#define FJ_DECODE_ALIBI"), std::string::npos);
  }
  // Over an FP8 cache too (0.14): the config says both.
  KernelSpec fp8 = decodeSpec(128);
  fp8.outDtype = fp8.dtype;
  fp8.dtype = DType::E4M3;
  fp8.features.softcap = 30;
  fp8.features.maskMod = "return true;";
  EXPECT_FALSE(bool(validateSpec(fp8))) << fp8.key();
  auto fp8Kernel = emitKernel(fp8, defaultTile(fp8));
  ASSERT_TRUE(bool(fp8Kernel)) << llvm::toString(fp8Kernel.takeError());
  EXPECT_NE(fp8Kernel->source.find("true, FjFeatures> FjConfig"), std::string::npos);
  EXPECT_NE(fp8Kernel->source.find("#define FJ_DECODE_FP8_CACHE 1"), std::string::npos);
}

TEST(DecMmaSpec, EmittedModuleNamesItsKernels) {
  KernelSpec spec = decodeSpec(128);
  TileConfig tile = defaultTile(spec);
  auto kernel = emitKernel(spec, tile);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  EXPECT_EQ(kernel->entryName, "flashjit_dec_split");
  EXPECT_TRUE(kernel->decode.enabled);
  EXPECT_EQ(kernel->decode.combine, "flashjit_dec_combine");
  EXPECT_EQ(kernel->decode.append, "flashjit_dec_append");
  EXPECT_EQ(kernel->decode.blockN, tile.blockN);
  EXPECT_EQ(kernel->sharedBytes, decMmaSharedBytes(spec, tile));
  EXPECT_EQ(kernel->threads, tile.warps * 32);
  // The template checks the host's shared-memory figure at compile time.
  EXPECT_NE(kernel->source.find("static_assert(FjConfig::kSmemBytes =="), std::string::npos);
}

// The combine is launched as the split kernel's programmatic dependent only where its
// griddepcontrol.wait exists (sm_90 and newer); elsewhere a plain launch orders them.
TEST(DecMmaSpec, CombineIsADependentLaunchFromSm90) {
  for (auto [target, dependent] : {std::pair{"sm_80", false}, std::pair{"sm_89", false},
                                   std::pair{"sm_90a", true}}) {
    KernelSpec spec = decodeSpec(128);
    spec.target = target;
    auto kernel = emitKernel(spec, defaultTile(spec));
    ASSERT_TRUE(bool(kernel)) << target << ": " << llvm::toString(kernel.takeError());
    EXPECT_EQ(kernel->decode.dependentCombine, dependent) << target;
    EXPECT_NE(kernel->source.find("griddepcontrol.wait"), std::string::npos) << target;
  }
}
