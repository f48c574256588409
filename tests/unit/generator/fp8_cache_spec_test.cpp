// dec_mma over an FP8 (e4m3) KV cache in the generator, without a GPU or NVRTC: its key
// (the cache e4m3, q and o named as the output) and round trip, every target from sm_80,
// head dims multiples of 16 only, shared memory of byte tiles, and the source: the
// params' FP8 fields and the config's flag only in the FP8 kernels (a 16-bit cache's
// source defines neither, so its code stays what was measured).
#include "generator/dec_mma.h"
#include "generator/emit.h"
#include "generator/spec.h"
#include "support/error.h"

#include <gtest/gtest.h>

using namespace flashjit;
using namespace flashjit::generator;

namespace {

KernelSpec cacheSpec(int d, DType q = DType::BF16, const char *target = "sm_90a", int dv = 0) {
  KernelSpec spec;
  spec.family = Family::DecMma;
  spec.dtype = DType::E4M3;
  spec.outDtype = q;
  spec.headDim = d;
  spec.headDimV = dv ? dv : d;
  spec.target = target;
  return spec;
}

} // namespace

TEST(Fp8CacheSpec, KeyRoundTripsOnEveryTarget) {
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90a"})
    for (DType q : {DType::BF16, DType::FP16}) {
      KernelSpec spec = cacheSpec(128, q, target);
      EXPECT_FALSE(bool(validateSpec(spec))) << spec.key();
      auto parsed = KernelSpec::parse(spec.key());
      ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
      EXPECT_EQ(parsed->key(), spec.key());
      EXPECT_EQ(parsed->dtype, DType::E4M3);
      EXPECT_EQ(parsed->outDtype, q);
    }
  EXPECT_EQ(cacheSpec(64, DType::FP16, "sm_80").key(), "dec_mma.e4m3_ofp16.d64.dv64.nocausal.sm80");
}

TEST(Fp8CacheSpec, RefusesHeadDimsThatAreNotMultiplesOf16) {
  for (int d : {40, 72, 136})
    for (bool onV : {false, true}) {
      KernelSpec spec = onV ? cacheSpec(128, DType::BF16, "sm_80", d) : cacheSpec(d);
      ErrorReport report = takeErrorReport(validateSpec(spec));
      EXPECT_EQ(report.code, ErrorCode::NotSupported) << spec.key();
      EXPECT_NE(report.message.find("multiples of 16"), std::string::npos) << report.message;
    }
}

TEST(Fp8CacheSpec, TilesHoldBytes) {
  KernelSpec fp8 = cacheSpec(128);
  KernelSpec bf16 = fp8;
  bf16.dtype = DType::BF16;
  TileConfig tile{16, 64, 4, 3};
  // Q (16 rows x 256 B) stays 16-bit; each stage's K and V tiles halve.
  const int q = 16 * 256;
  EXPECT_EQ(decMmaSharedBytes(bf16, tile), q + 3 * 2 * 64 * 256);
  EXPECT_EQ(decMmaSharedBytes(fp8, tile), q + 3 * 2 * 64 * 128);
}

TEST(Fp8CacheSpec, OnlyTheFp8SourceSeesItsFields) {
  KernelSpec fp8 = cacheSpec(128, DType::FP16, "sm_80");
  KernelSpec fp16 = fp8;
  fp16.dtype = DType::FP16;
  auto a = emitKernel(fp8, defaultTile(fp8));
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  auto b = emitKernel(fp16, defaultTile(fp16));
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_NE(a->source.find("#define FJ_DECODE_FP8_CACHE 1"), std::string::npos);
  EXPECT_NE(a->source.find("fj::DecMmaConfig<fj::f16, 128, 128, 16, 64, 4, 3, false, true>"),
            std::string::npos);
  EXPECT_EQ(b->source.find("#define FJ_DECODE_FP8_CACHE"), std::string::npos);
  EXPECT_NE(b->source.find("fj::DecMmaConfig<fj::f16, 128, 128, 16, 64, 4, 3, false>"),
            std::string::npos);
  EXPECT_TRUE(a->decode.enabled);
}
