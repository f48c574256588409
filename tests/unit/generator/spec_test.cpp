#include "generator/emit.h"
#include "generator/spec.h"
#include "generator/templates.h"
#include "support/error.h"

#include <gtest/gtest.h>

#include <set>

using namespace flashjit;
using namespace flashjit::generator;

namespace {
ErrorReport errorOf(llvm::Error err) { return takeErrorReport(std::move(err)); }
} // namespace

TEST(Spec, KeysNameEveryField) {
  KernelSpec spec;
  spec.dtype = DType::BF16;
  spec.headDim = 128;
  spec.headDimV = 64;
  spec.causal = true;
  spec.target = "sm_90a";
  EXPECT_EQ(spec.key(), "fwd_mma.bf16.d128.dv64.causal.sm90a");
  spec.causal = false;
  spec.dtype = DType::FP16;
  spec.target = "sm_80";
  EXPECT_EQ(spec.key(), "fwd_mma.fp16.d128.dv64.nocausal.sm80");
}

TEST(Spec, TileKeyRoundTrips) {
  TileConfig tile{64, 32, 4, 3};
  EXPECT_EQ(tile.key(), "bm64.bn32.w4.s3");
  auto parsed = TileConfig::parse(tile.key());
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(*parsed, tile);
  auto bad = TileConfig::parse("bm64.bn32");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(errorOf(bad.takeError()).code, ErrorCode::InvalidValue);
}

TEST(Spec, ImpossibleHeadDimsAreRejectedClearly) {
  for (int d : {0, -8, 12, 264, 1000}) {
    KernelSpec spec;
    spec.headDim = d;
    ErrorReport report = errorOf(validateSpec(spec));
    EXPECT_EQ(report.code, ErrorCode::NotSupported) << d;
    EXPECT_NE(report.message.find("head_dim " + std::to_string(d)), std::string::npos)
        << report.message;
    EXPECT_NE(report.message.find("multiples of 8"), std::string::npos);
    auto emitted = emitForward(spec, TileConfig{});
    EXPECT_FALSE(bool(emitted));
    llvm::consumeError(emitted.takeError());
  }
  KernelSpec spec;
  spec.headDimV = 12;
  EXPECT_NE(errorOf(validateSpec(spec)).message.find("head_dim_v 12"), std::string::npos);
}

TEST(Spec, UnknownTargetsAreRejected) {
  KernelSpec spec;
  spec.target = "sm_70";
  EXPECT_EQ(errorOf(validateSpec(spec)).code, ErrorCode::NotSupported);
  spec.target = "gfx90a";
  EXPECT_EQ(errorOf(validateSpec(spec)).code, ErrorCode::InvalidValue);
}

TEST(Spec, TilesThatDoNotFitSharedMemoryAreRejected) {
  KernelSpec spec;
  spec.headDim = spec.headDimV = 256;
  spec.target = "sm_86";  // 99 KiB per block
  ErrorReport report = errorOf(validateTile(spec, TileConfig{128, 128, 8, 3}));
  EXPECT_EQ(report.code, ErrorCode::InvalidValue);
  EXPECT_NE(report.message.find("does not fit"), std::string::npos) << report.message;
  EXPECT_NE(report.message.find("sm_86"), std::string::npos);
  // Divisibility and thread limits.
  EXPECT_FALSE(errorOf(validateTile(spec, TileConfig{48, 32, 2, 2})).message.empty());
  EXPECT_FALSE(errorOf(validateTile(spec, TileConfig{64, 24, 4, 2})).message.empty());
  EXPECT_FALSE(errorOf(validateTile(spec, TileConfig{64, 32, 4, 1})).message.empty());
  EXPECT_FALSE(errorOf(validateTile(spec, TileConfig{2048, 16, 64, 2})).message.empty());
}

TEST(Spec, DefaultTilesFitEveryTarget) {
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90a"})
    for (int d = 8; d <= 256; d += 8) {
      KernelSpec spec;
      spec.headDim = spec.headDimV = d;
      spec.target = target;
      TileConfig tile = defaultTile(spec);
      llvm::Error err = validateTile(spec, tile);
      EXPECT_FALSE(bool(err)) << spec.key() << " " << tile.key() << ": "
                              << llvm::toString(std::move(err));
    }
}

TEST(SharedMemory, MatchesTheLayoutArithmetic) {
  KernelSpec spec;
  spec.headDim = spec.headDimV = 128;  // 16 chunks per row: swizzled, no padding
  EXPECT_EQ(sharedBytes(spec, TileConfig{128, 64, 8, 2}), 128 * 256 + 2 * (64 * 256 * 2));
  spec.headDim = spec.headDimV = 40;  // 5 chunks per row: odd, no padding needed
  EXPECT_EQ(sharedBytes(spec, TileConfig{64, 32, 4, 2}), 64 * 80 + 2 * (2 * 32 * 80));
  spec.headDim = spec.headDimV = 96;  // 12 chunks -> padded to 13
  EXPECT_EQ(sharedBytes(spec, TileConfig{64, 32, 4, 2}), 64 * 208 + 2 * (2 * 32 * 208));
}

TEST(SharedMemory, WgmmaDoublesQWhereItFits) {
  KernelSpec spec;
  spec.family = Family::FwdWgmma;
  spec.target = "sm_90a";
  spec.headDim = spec.headDimV = 128;
  // bm128 bn128 s2: 32 KiB of Q + a 128 KiB ring leaves room for a second Q buffer.
  // Each Q buffer has a 32-byte slot for the work tile it holds.
  EXPECT_EQ(sharedBytes(spec, TileConfig{128, 128, 12, 2}),
            1024 + 2 * 128 * 256 + 2 * (2 * 128 * 256) + (4 + 8) * 8 + 2 * 32);
  // bm128 bn176 s2: a 176 KiB ring; two Q buffers would pass 227 KiB, so one.
  EXPECT_EQ(sharedBytes(spec, TileConfig{128, 176, 12, 2}),
            1024 + 128 * 256 + 2 * (2 * 176 * 256) + (2 + 8) * 8 + 32);
  spec.headDim = spec.headDimV = 72;  // padded to 96
  EXPECT_EQ(sharedBytes(spec, TileConfig{64, 64, 8, 2}),
            1024 + 2 * 64 * 192 + 2 * (2 * 64 * 192) + (4 + 8) * 8 + 2 * 32);
}

// O goes out by TMA only where the kernel stages it in a Q buffer it owns alone (two Q
// buffers, V's head dim padded like Q's); the launch encodes O's map only for those.
TEST(Emit, WgmmaAsksForAnOutputMapOnlyWhereItStoresOByTma) {
  KernelSpec spec;
  spec.family = Family::FwdWgmma;
  spec.target = "sm_90a";
  spec.headDim = spec.headDimV = 128;
  auto twoQ = emitForward(spec, TileConfig{128, 128, 12, 2});
  ASSERT_TRUE(bool(twoQ)) << llvm::toString(twoQ.takeError());
  EXPECT_TRUE(wgmmaStoresOByTma(spec, TileConfig{128, 128, 12, 2}));
  EXPECT_EQ(twoQ->tma.oRows, 64);
  EXPECT_NE(twoQ->source.find("kStoreOByTma == true"), std::string::npos);

  auto oneQ = emitForward(spec, TileConfig{128, 176, 12, 2});
  ASSERT_TRUE(bool(oneQ)) << llvm::toString(oneQ.takeError());
  EXPECT_EQ(oneQ->tma.oRows, 0);
  EXPECT_NE(oneQ->source.find("kStoreOByTma == false"), std::string::npos);

  spec.headDimV = 64;  // O not staged: its rows differ from a Q buffer's
  EXPECT_FALSE(wgmmaStoresOByTma(spec, TileConfig{128, 128, 12, 2}));
  spec.family = Family::FwdMma;
  spec.headDimV = 128;
  EXPECT_FALSE(wgmmaStoresOByTma(spec, TileConfig{128, 128, 12, 2}));
}

TEST(Emit, SourceIsSelfContainedAndSpecialized) {
  KernelSpec spec;
  spec.headDim = 72;
  spec.headDimV = 72;
  spec.causal = true;
  auto kernel = emitForward(spec, TileConfig{64, 32, 4, 2});
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  EXPECT_EQ(kernel->entryName, "flashjit_fwd_mma");
  EXPECT_EQ(kernel->threads, 128);
  EXPECT_EQ(kernel->blockM, 64);
  EXPECT_NE(kernel->source.find("FwdMmaConfig<fj::bf16, 72, 72, 64, 32, 4, 2, true>"),
            std::string::npos);
  EXPECT_EQ(kernel->source.find("#include"), std::string::npos) << "templates are inlined";
  EXPECT_NE(kernel->source.find("struct FjForwardParams"), std::string::npos);
}

TEST(Emit, FingerprintIsStable) {
  EXPECT_EQ(generatorFingerprint().size(), 64u);
  EXPECT_EQ(generatorFingerprint(), generatorFingerprint());
  EXPECT_TRUE(templateText("fwd_mma.cuh").has_value());
  EXPECT_FALSE(templateText("nope.cuh").has_value());
}

// A tuning row is keyed by its family's fingerprint, so that fingerprint must cover every
// template the family's kernels embed (a change there re-keys the rows) and no other (a
// change elsewhere leaves the family's measured winners valid).
TEST(Emit, FamilyFingerprintCoversExactlyTheEmbeddedTemplates) {
  const char *specs[] = {"fwd_mma.bf16.d128.dv128.causal.sm80",
                         "fwd_wgmma.bf16.d128.dv128.causal.sm90a",
                         "fwd_wgmma.e4m3_obf16.d128.dv128.nocausal.sm90a",
                         "bwd_mma.fp16.d64.dv64.nocausal.sm80",
                         "bwd_wgmma.bf16.d256.dv256.causal.sm90a",
                         "dec_mma.bf16.d128.dv128.nocausal.sm90a"};
  std::set<std::string> fingerprints;
  for (const char *text : specs) {
    auto spec = KernelSpec::parse(text);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    auto kernel = emitKernel(*spec, defaultTile(*spec));
    ASSERT_TRUE(bool(kernel)) << text << ": " << llvm::toString(kernel.takeError());
    std::set<std::string> embedded;
    llvm::StringRef rest = kernel->source;
    const llvm::StringRef marker = "// ---- templates/";
    for (size_t at = rest.find(marker); at != llvm::StringRef::npos; at = rest.find(marker)) {
      rest = rest.drop_front(at + marker.size());
      embedded.insert(rest.take_until([](char c) { return c == ' '; }).str());
    }
    std::set<std::string> listed;
    for (llvm::StringRef file : familyTemplates(spec->family))
      listed.insert(file.str());
    EXPECT_EQ(embedded, listed) << text;
    const std::string &fingerprint = familyFingerprint(spec->family);
    EXPECT_EQ(fingerprint.size(), 64u);
    EXPECT_EQ(fingerprint, templatesFingerprint(familyTemplates(spec->family)));
    EXPECT_NE(kernel->source.find("(generator " + fingerprint.substr(0, 12) + ")"),
              std::string::npos)
        << "the source names its family's generator";
    fingerprints.insert(fingerprint);
  }
  EXPECT_EQ(fingerprints.size(), 5u) << "one per family, each its own";
  EXPECT_FALSE(fingerprints.count(generatorFingerprint()));
  // A file's text is part of the fingerprint, not only its name.
  EXPECT_NE(templatesFingerprint({"fwd_mma.cuh"}), templatesFingerprint({"nope.cuh"}));
  EXPECT_NE(templatesFingerprint({"fwd_mma.cuh"}), templatesFingerprint({"dec_mma.cuh"}));
}
