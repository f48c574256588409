// FP8 (e4m3) inputs in the generator, without a GPU or NVRTC: the dtype's names and
// size, the key of an FP8 spec (which names O's type) and its round trip through
// KernelSpec::parse, the keys parse refuses, validateSpec's refusals (other families, an
// e4m3 output, head dims not multiples of 16, features), validateTile's block_n rule, default tiles that validate,
// shared memory counted in 1-byte elements with head_dim padded to 64, no TMA store of O,
// and what emitKernel gives an FP8 spec (the k32 e4m3 wgmma, the V transpose entry and
// the tensor-map geometry of V^T).
#include "generator/emit.h"
#include "generator/spec.h"
#include "support/error.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace flashjit;
using namespace flashjit::generator;

namespace {

ErrorReport errorOf(llvm::Error err) { return takeErrorReport(std::move(err)); }

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

KernelSpec fp8Spec(int d, bool causal = false, DType out = DType::BF16, int dv = 0) {
  KernelSpec spec;
  spec.family = Family::FwdWgmma;
  spec.dtype = DType::E4M3;
  spec.outDtype = out;
  spec.headDim = d;
  spec.headDimV = dv ? dv : d;
  spec.causal = causal;
  spec.target = "sm_90a";
  return spec;
}

// The same spec with 16-bit inputs.
KernelSpec sixteenBit(KernelSpec spec, DType dtype = DType::BF16) {
  spec.dtype = dtype;
  spec.outDtype = DType::BF16;
  return spec;
}

// Head dims FP8 takes (multiples of 16) and a few it refuses (multiples of 8 only).
const std::vector<int> kHeadDims = {48, 64, 80, 96, 128, 192, 256};
const std::vector<int> kHeadDimsNotMultiplesOf16 = {8, 24, 40, 72, 136, 248};

} // namespace

TEST(Fp8DType, NamesAndSize) {
  EXPECT_EQ(dtypeName(DType::E4M3), "e4m3");
  EXPECT_EQ(elementBytes(DType::E4M3), 1);
  EXPECT_EQ(elementBytes(DType::BF16), 2);
  EXPECT_EQ(elementBytes(DType::FP16), 2);
  for (const char *name : {"e4m3", "E4M3", "fp8", "FP8", "float8_e4m3fn"}) {
    auto dtype = parseDType(name);
    ASSERT_TRUE(bool(dtype)) << name << ": " << llvm::toString(dtype.takeError());
    EXPECT_EQ(*dtype, DType::E4M3) << name;
  }
  auto bad = parseDType("e5m2");
  ASSERT_FALSE(bool(bad));
  ErrorReport report = errorOf(bad.takeError());
  EXPECT_EQ(report.code, ErrorCode::InvalidValue);
  EXPECT_TRUE(contains(report.message, "e4m3")) << report.message;
}

TEST(Fp8DType, OutputDtypeIsOutDtypeOnlyForFp8Inputs) {
  KernelSpec spec = fp8Spec(128, false, DType::FP16);
  EXPECT_EQ(spec.outputDtype(), DType::FP16);
  spec.outDtype = DType::BF16;
  EXPECT_EQ(spec.outputDtype(), DType::BF16);
  // 16-bit inputs write O in their own type, whatever outDtype says.
  KernelSpec half = sixteenBit(spec, DType::FP16);
  half.outDtype = DType::BF16;
  EXPECT_EQ(half.outputDtype(), DType::FP16);
  KernelSpec defaults;
  EXPECT_EQ(defaults.outDtype, DType::BF16);
  EXPECT_EQ(defaults.outputDtype(), defaults.dtype);
}

TEST(Fp8Keys, KeyNamesTheOutputType) {
  EXPECT_EQ(fp8Spec(128).key(), "fwd_wgmma.e4m3_obf16.d128.dv128.nocausal.sm90a");
  EXPECT_EQ(fp8Spec(64, true, DType::FP16).key(), "fwd_wgmma.e4m3_ofp16.d64.dv64.causal.sm90a");
  EXPECT_EQ(fp8Spec(192, false, DType::BF16, 128).key(),
            "fwd_wgmma.e4m3_obf16.d192.dv128.nocausal.sm90a");
  // 16-bit keys are what they were (no output part).
  EXPECT_EQ(sixteenBit(fp8Spec(128)).key(), "fwd_wgmma.bf16.d128.dv128.nocausal.sm90a");
}

TEST(Fp8Keys, RoundTripThroughParse) {
  for (DType out : {DType::BF16, DType::FP16})
    for (int d : kHeadDims)
      for (bool causal : {false, true}) {
        KernelSpec spec = fp8Spec(d, causal, out);
        auto parsed = KernelSpec::parse(spec.key());
        ASSERT_TRUE(bool(parsed)) << spec.key() << ": " << llvm::toString(parsed.takeError());
        EXPECT_EQ(parsed->family, Family::FwdWgmma);
        EXPECT_EQ(parsed->dtype, DType::E4M3) << spec.key();
        EXPECT_EQ(parsed->outDtype, out) << spec.key();
        EXPECT_EQ(parsed->outputDtype(), out) << spec.key();
        EXPECT_EQ(parsed->headDim, d);
        EXPECT_EQ(parsed->headDimV, d);
        EXPECT_EQ(parsed->causal, causal);
        EXPECT_EQ(parsed->target, "sm_90a");
        EXPECT_FALSE(parsed->features.any());
        EXPECT_EQ(parsed->key(), spec.key());
      }
  // Different head dims for V.
  KernelSpec spec = fp8Spec(192, true, DType::FP16, 128);
  auto parsed = KernelSpec::parse(spec.key());
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(parsed->headDim, 192);
  EXPECT_EQ(parsed->headDimV, 128);
  EXPECT_EQ(parsed->key(), spec.key());
}

TEST(Fp8Keys, SixteenBitKeysStillRoundTrip) {
  for (const char *key : {"fwd_wgmma.bf16.d128.dv128.nocausal.sm90a",
                          "fwd_wgmma.fp16.d64.dv64.causal.sm90a",
                          "fwd_mma.fp16.d96.dv96.causal.sm80"}) {
    auto parsed = KernelSpec::parse(key);
    ASSERT_TRUE(bool(parsed)) << key << ": " << llvm::toString(parsed.takeError());
    EXPECT_NE(parsed->dtype, DType::E4M3);
    EXPECT_EQ(parsed->key(), key);
  }
}

TEST(Fp8Keys, ParseRejectsBadTypeParts) {
  for (const char *key : {
           "fwd_wgmma.e4m3.d128.dv128.nocausal.sm90a",        // FP8 without its output
           "fwd_wgmma.e4m3_o.d128.dv128.nocausal.sm90a",      // an empty output
           "fwd_wgmma.bf16_obf16.d128.dv128.nocausal.sm90a",  // output named for 16-bit
           "fwd_wgmma.fp16_obf16.d128.dv128.nocausal.sm90a",
           "fwd_wgmma.e4m3_oe4m3.d128.dv128.nocausal.sm90a",  // FP8 output
           "fwd_wgmma.e4m3_ofp8.d128.dv128.nocausal.sm90a",
           "fwd_wgmma.e4m3_of32.d128.dv128.nocausal.sm90a",   // unknown output
           "fwd_wgmma.e5m2_obf16.d128.dv128.nocausal.sm90a",  // unknown input
       }) {
    auto parsed = KernelSpec::parse(key);
    ASSERT_FALSE(bool(parsed)) << key << " parsed as " << parsed->key();
    ErrorReport report = errorOf(parsed.takeError());
    EXPECT_EQ(report.code, ErrorCode::InvalidValue) << key << ": " << report.message;
    EXPECT_TRUE(contains(report.message, key)) << report.message;
  }
}

TEST(Fp8Keys, ParseRejectsFp8KeysValidateSpecRefuses) {
  // Well-formed keys of specs validateSpec refuses: FP8 on other families, with features.
  for (const char *key : {"fwd_mma.e4m3_obf16.d128.dv128.nocausal.sm90a",
                          "fwd_mma.e4m3_obf16.d128.dv128.nocausal.sm80",
                          "bwd_wgmma.e4m3_obf16.d128.dv128.nocausal.sm90a",
                          "fwd_wgmma.e4m3_obf16.d128.dv128.causal.sm90a.alibi",
                          "fwd_wgmma.e4m3_ofp16.d128.dv128.nocausal.sm90a.cap30",
                          "fwd_wgmma.e4m3_obf16.d128.dv128.causal.sm90a.win256_0"}) {
    auto parsed = KernelSpec::parse(key);
    ASSERT_FALSE(bool(parsed)) << key;
    EXPECT_EQ(errorOf(parsed.takeError()).code, ErrorCode::NotSupported) << key;
  }
}

TEST(Fp8Validation, AcceptsFwdWgmmaOnSm90aWithEitherOutput) {
  for (DType out : {DType::BF16, DType::FP16})
    for (int d : kHeadDims)
      for (bool causal : {false, true}) {
        KernelSpec spec = fp8Spec(d, causal, out);
        EXPECT_FALSE(bool(validateSpec(spec))) << spec.key();
      }
  EXPECT_FALSE(bool(validateSpec(fp8Spec(192, false, DType::BF16, 128))));
}

TEST(Fp8Validation, RefusesHeadDimsThatAreNotMultiplesOf16) {
  // One byte an element: TMA needs rows (and head strides) of 16-byte multiples.
  for (int d : kHeadDimsNotMultiplesOf16)
    for (bool onV : {false, true}) {
      KernelSpec spec = onV ? fp8Spec(128, false, DType::BF16, d) : fp8Spec(d, false);
      ErrorReport report = errorOf(validateSpec(spec));
      EXPECT_EQ(report.code, ErrorCode::NotSupported) << spec.key() << ": " << report.message;
      EXPECT_TRUE(contains(report.message, "e4m3")) << report.message;
      EXPECT_TRUE(contains(report.message, "multiples of 16")) << report.message;
      EXPECT_TRUE(contains(report.message, std::to_string(d))) << report.message;
      // The 16-bit spec takes it.
      EXPECT_FALSE(bool(validateSpec(sixteenBit(spec)))) << spec.key();
      auto parsed = KernelSpec::parse(spec.key());
      ASSERT_FALSE(bool(parsed)) << spec.key();
      EXPECT_EQ(errorOf(parsed.takeError()).code, ErrorCode::NotSupported) << spec.key();
    }
}

TEST(Fp8Validation, RefusesOtherFamiliesNamingThem) {
  struct Case {
    Family family;
    const char *target;
  };
  for (Case c : {Case{Family::FwdMma, "sm_90a"}, Case{Family::FwdMma, "sm_80"},
                 Case{Family::BwdMma, "sm_90a"}, Case{Family::BwdMma, "sm_80"},
                 Case{Family::BwdWgmma, "sm_90a"}}) {
    KernelSpec spec = fp8Spec(128);
    spec.family = c.family;
    spec.target = c.target;
    ErrorReport report = errorOf(validateSpec(spec));
    EXPECT_EQ(report.code, ErrorCode::NotSupported) << spec.key() << ": " << report.message;
    EXPECT_TRUE(contains(report.message, "e4m3")) << report.message;
    EXPECT_TRUE(contains(report.message, "fwd_wgmma")) << report.message;
    EXPECT_TRUE(contains(report.message, familyName(c.family).str())) << report.message;
  }
}

TEST(Fp8Validation, FwdWgmmaStillNeedsSm90a) {
  for (const char *target : {"sm_90", "sm_80"}) {
    KernelSpec spec = fp8Spec(128);
    spec.target = target;
    ErrorReport report = errorOf(validateSpec(spec));
    EXPECT_EQ(report.code, ErrorCode::NotSupported) << target;
    EXPECT_TRUE(contains(report.message, "sm_90a")) << report.message;
  }
}

TEST(Fp8Validation, RefusesAnE4m3Output) {
  KernelSpec spec = fp8Spec(128, false, DType::E4M3);
  ErrorReport report = errorOf(validateSpec(spec));
  EXPECT_EQ(report.code, ErrorCode::NotSupported) << report.message;
  EXPECT_TRUE(contains(report.message, "e4m3")) << report.message;
  EXPECT_TRUE(contains(report.message, "bf16")) << report.message;
  EXPECT_TRUE(contains(report.message, "fp16")) << report.message;
}

TEST(Fp8Validation, RefusesEveryFeatureNamingIt) {
  struct Case {
    const char *name;  // what the message names
    Features features;
  };
  std::vector<Case> cases;
  Features f;
  f.window = true;
  f.windowLeft = 256;
  f.windowRight = 0;
  cases.push_back({"win256_0", f});
  f = {};
  f.softcap = 30;
  cases.push_back({"cap30", f});
  f = {};
  f.alibi = true;
  cases.push_back({"alibi", f});
  f = {};
  f.scoreMod = "return score * 2.0f;\n";
  cases.push_back({"score-", f});
  f = {};
  f.maskMod = "return kv_idx <= q_idx;\n";
  cases.push_back({"mask-", f});
  for (const Case &c : cases)
    for (DType out : {DType::BF16, DType::FP16}) {
      KernelSpec spec = fp8Spec(128, true, out);
      spec.features = c.features;
      ErrorReport report = errorOf(validateSpec(spec));
      EXPECT_EQ(report.code, ErrorCode::NotSupported) << c.name << ": " << report.message;
      EXPECT_TRUE(contains(report.message, "features")) << report.message;
      EXPECT_TRUE(contains(report.message, "e4m3")) << report.message;
      EXPECT_TRUE(contains(report.message, c.name)) << report.message;
      // The 16-bit spec takes the same features.
      EXPECT_FALSE(bool(validateSpec(sixteenBit(spec)))) << c.name;
    }
}

TEST(Fp8Tiles, BlockNMustBeAMultipleOf32) {
  KernelSpec spec = fp8Spec(128);
  for (int blockN : {16, 48, 80, 112, 144, 176, 208, 240}) {
    TileConfig tile{128, blockN, 12, 2};
    ErrorReport report = errorOf(validateTile(spec, tile));
    EXPECT_EQ(report.code, ErrorCode::InvalidValue) << tile.key();
    EXPECT_TRUE(contains(report.message, "multiple of 32")) << report.message;
    EXPECT_TRUE(contains(report.message, tile.key())) << report.message;
    // The same tile with 16-bit inputs may be refused, but not for this rule.
    llvm::Error err = validateTile(sixteenBit(spec), tile);
    if (err) {
      EXPECT_FALSE(contains(errorOf(std::move(err)).message, "multiple of 32")) << tile.key();
    }
  }
  // FlashAttention-3's FP8 tiles (160 and 224 keys) take 32-key panels of V^T.
  for (int blockN : {64, 96, 128, 160, 192, 224}) {
    TileConfig tile{128, blockN, 12, 2};
    llvm::Error err = validateTile(spec, tile);
    EXPECT_FALSE(bool(err)) << tile.key() << ": " << errorOf(std::move(err)).message;
  }
}

TEST(Fp8Tiles, OtherWgmmaRulesStillApply) {
  KernelSpec spec = fp8Spec(128);
  // block_m, warps, block_n beyond 256, the register estimate.
  EXPECT_TRUE(bool(validateTile(spec, TileConfig{96, 64, 12, 2})));
  EXPECT_TRUE(bool(validateTile(spec, TileConfig{128, 64, 8, 2})));
  EXPECT_TRUE(bool(validateTile(spec, TileConfig{128, 320, 12, 2})));
  EXPECT_TRUE(bool(validateTile(spec, TileConfig{192, 256, 16, 2})));
  EXPECT_TRUE(bool(validateTile(spec, TileConfig{128, 64, 12, 1})));
}

TEST(Fp8Tiles, DefaultTilesValidate) {
  for (DType out : {DType::BF16, DType::FP16})
    for (int d : kHeadDims)
      for (bool causal : {false, true}) {
        KernelSpec spec = fp8Spec(d, causal, out);
        TileConfig tile = defaultTile(spec);
        EXPECT_EQ(tile.blockN % 32, 0) << spec.key() << " " << tile.key();
        EXPECT_GE(tile.blockN, 64) << spec.key() << " " << tile.key();
        llvm::Error err = validateTile(spec, tile);
        EXPECT_FALSE(bool(err)) << spec.key() << " " << tile.key() << ": "
                                << errorOf(std::move(err)).message;
        EXPECT_LE(sharedBytes(spec, tile), 227 * 1024) << spec.key() << " " << tile.key();
      }
}

TEST(Fp8Tiles, DefaultTilesAreTheMeasuredPicks) {
  // docs/PERF.md p5: three consumers at d <= 64; at d <= 128 three over 96 keys without
  // causal, bm128.bn128 with it; 96 keys above.
  EXPECT_EQ(defaultTile(fp8Spec(64, false)).key(), "bm192.bn128.w16.s2");
  EXPECT_EQ(defaultTile(fp8Spec(64, true)).key(), "bm192.bn128.w16.s2");
  EXPECT_EQ(defaultTile(fp8Spec(128, false)).key(), "bm192.bn96.w16.s2");
  EXPECT_EQ(defaultTile(fp8Spec(128, true)).key(), "bm128.bn128.w12.s2");
  EXPECT_EQ(defaultTile(fp8Spec(256, false)).key(), "bm128.bn96.w12.s2");
  EXPECT_EQ(defaultTile(fp8Spec(192, true)).key(), "bm128.bn96.w12.s2");
  // The 16-bit defaults are not FP8's.
  EXPECT_EQ(defaultTile(sixteenBit(fp8Spec(128, false))).key(), "bm128.bn128.w12.s2");
}

TEST(Fp8SharedMemory, SmallerThanTheSixteenBitSpecsForTheSameTile) {
  for (int d : kHeadDims)
    for (bool causal : {false, true}) {
      KernelSpec spec = fp8Spec(d, causal);
      TileConfig tile = defaultTile(spec);
      for (DType dtype : {DType::BF16, DType::FP16}) {
        KernelSpec half = sixteenBit(spec, dtype);
        EXPECT_LT(sharedBytes(spec, tile), sharedBytes(half, tile))
            << spec.key() << " " << tile.key();
      }
      // The output type does not change the layout.
      KernelSpec fp16Out = fp8Spec(d, causal, DType::FP16);
      EXPECT_EQ(sharedBytes(spec, tile), sharedBytes(fp16Out, tile)) << spec.key();
    }
}

TEST(Fp8SharedMemory, KeysCountOneByteAnElement) {
  // 64 more keys a stage cost stages x 64 x (d + dv) bytes: one byte an element for FP8,
  // two for 16-bit inputs (the same number of Q buffers either way at d = 128).
  KernelSpec spec = fp8Spec(128);
  TileConfig narrow{128, 64, 12, 2}, wide{128, 128, 12, 2};
  EXPECT_EQ(sharedBytes(spec, wide) - sharedBytes(spec, narrow), 2 * 64 * (128 + 128));
  KernelSpec half = sixteenBit(spec);
  EXPECT_EQ(sharedBytes(half, wide) - sharedBytes(half, narrow), 2 * 64 * (128 + 128) * 2);
  // Another stage: block_n x (d + dv) bytes.
  TileConfig threeStages{128, 64, 12, 3};
  int stage = sharedBytes(spec, threeStages) - sharedBytes(spec, narrow);
  EXPECT_GE(stage, 64 * (128 + 128));
  EXPECT_LT(stage, 64 * (128 + 128) + 64) << "beyond the stage's barriers";
}

TEST(Fp8SharedMemory, HeadDimIsPaddedTo64) {
  // head_dim 96 takes as much as 128 (Q and K rows of 128 bytes); head_dim_v is padded
  // to 32 only (V^T has head_dim_v rows).
  TileConfig tile{128, 64, 12, 2};
  EXPECT_EQ(sharedBytes(fp8Spec(96, false, DType::BF16, 128), tile),
            sharedBytes(fp8Spec(128, false, DType::BF16, 128), tile));
  EXPECT_EQ(sharedBytes(fp8Spec(48, false, DType::BF16, 64), tile),
            sharedBytes(fp8Spec(64, false, DType::BF16, 64), tile));
  EXPECT_EQ(sharedBytes(fp8Spec(80, false, DType::BF16, 64), tile),
            sharedBytes(fp8Spec(128, false, DType::BF16, 64), tile));
  EXPECT_EQ(sharedBytes(fp8Spec(144, false, DType::BF16, 128), tile),
            sharedBytes(fp8Spec(192, false, DType::BF16, 128), tile));
  EXPECT_LT(sharedBytes(fp8Spec(128, false, DType::BF16, 96), tile),
            sharedBytes(fp8Spec(128, false, DType::BF16, 128), tile));
  // 16-bit inputs pad head_dim to 32 only.
  EXPECT_LT(sharedBytes(sixteenBit(fp8Spec(96)), tile),
            sharedBytes(sixteenBit(fp8Spec(128)), tile));
}

TEST(Fp8SharedMemory, ONeverStoredByTma) {
  for (int d : kHeadDims)
    for (bool causal : {false, true}) {
      KernelSpec spec = fp8Spec(d, causal);
      TileConfig tile = defaultTile(spec);
      EXPECT_FALSE(wgmmaStoresOByTma(spec, tile)) << spec.key() << " " << tile.key();
      EXPECT_FALSE(wgmmaStoresOByTma(fp8Spec(d, causal, DType::FP16), tile));
    }
  // Where the 16-bit spec would store O by TMA.
  KernelSpec spec = fp8Spec(128);
  TileConfig tile{128, 128, 12, 2};
  EXPECT_TRUE(wgmmaStoresOByTma(sixteenBit(spec), tile));
  EXPECT_FALSE(wgmmaStoresOByTma(spec, tile));
}

TEST(Fp8Emit, SourceHasTheE4m3WgmmaAndTheTransposeEntry) {
  for (DType out : {DType::BF16, DType::FP16})
    for (int d : {64, 128, 256}) {
      KernelSpec spec = fp8Spec(d, false, out);
      TileConfig tile = defaultTile(spec);
      auto kernel = emitKernel(spec, tile);
      ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
      EXPECT_EQ(kernel->entryName, "flashjit_fwd_wgmma");
      EXPECT_TRUE(contains(kernel->source, "wgmma.mma_async.sync.aligned.m64n"));
      EXPECT_TRUE(contains(kernel->source, "k32.f32.e4m3.e4m3")) << spec.key();
      EXPECT_FALSE(contains(kernel->source, "k16.f32.")) << spec.key();
      EXPECT_EQ(kernel->fp8TransposeEntry, kFp8TransposeEntry);
      EXPECT_EQ(std::string(kFp8TransposeEntry), "flashjit_fp8_transpose_v");
      EXPECT_TRUE(contains(kernel->source, "extern \"C\""));
      EXPECT_TRUE(contains(kernel->source, std::string(kFp8TransposeEntry) + "("))
          << spec.key();
      // The config: e4m3 inputs, no features, O of the output type.
      EXPECT_TRUE(contains(kernel->source, "fj::FwdWgmmaConfig<fj::e4m3, " + std::to_string(d)))
          << spec.key();
      EXPECT_TRUE(contains(kernel->source,
                           std::string(", fj::NoFeatures, ") +
                               (out == DType::BF16 ? "fj::bf16" : "fj::f16") + "> FjConfig"))
          << spec.key();
      EXPECT_EQ(kernel->sharedBytes, sharedBytes(spec, tile)) << spec.key();
    }
}

TEST(Fp8Emit, EachWgmmaShapeIsK32) {
  // Every wgmma of the source takes 32 of K (m64nNk32) and e4m3 operands.
  KernelSpec spec = fp8Spec(128, true);
  auto kernel = emitKernel(spec, defaultTile(spec));
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  const std::string &s = kernel->source;
  const std::string head = "wgmma.mma_async.sync.aligned.m64n";
  int count = 0;
  for (size_t at = s.find(head); at != std::string::npos; at = s.find(head, at + 1)) {
    size_t end = s.find_first_of(" \"", at);
    std::string shape = s.substr(at, end - at);
    EXPECT_TRUE(contains(shape, "k32.f32.e4m3.e4m3")) << shape;
    ++count;
  }
  EXPECT_GE(count, 2) << "S = Q K^T and O += P V";
}

TEST(Fp8Emit, TmaGeometryOfTransposedV) {
  struct Case {
    int d, dv, blockN;
    int panelD, panelDv, vtRows;
  };
  for (Case c : {Case{64, 64, 64, 64, 64, 64}, Case{64, 64, 128, 64, 128, 64},
                 Case{128, 128, 128, 128, 128, 128}, Case{128, 128, 64, 128, 64, 128},
                 Case{96, 96, 64, 128, 64, 96}, Case{48, 48, 128, 64, 128, 64},
                 Case{192, 192, 64, 64, 64, 192}, Case{256, 256, 64, 128, 64, 256},
                 Case{192, 128, 128, 64, 128, 128}, Case{128, 80, 64, 128, 64, 96},
                 Case{80, 80, 128, 128, 128, 96}, Case{144, 144, 64, 64, 64, 160},
                 Case{128, 128, 224, 128, 32, 128}, Case{64, 64, 160, 64, 32, 64},
                 Case{128, 128, 96, 128, 32, 128}, Case{128, 128, 192, 128, 64, 128}}) {
    KernelSpec spec = fp8Spec(c.d, false, DType::BF16, c.dv);
    TileConfig tile{128, c.blockN, 12, 2};
    llvm::Error err = validateTile(spec, tile);
    ASSERT_FALSE(bool(err)) << spec.key() << " " << tile.key() << ": "
                            << errorOf(std::move(err)).message;
    auto kernel = emitKernel(spec, tile);
    ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
    const TmaOperands &tma = kernel->tma;
    EXPECT_TRUE(tma.vTransposed) << spec.key();
    EXPECT_EQ(tma.vtRows, c.vtRows) << spec.key();
    EXPECT_EQ(tma.panelD, c.panelD) << spec.key();
    EXPECT_EQ(tma.panelDv, c.panelDv) << spec.key() << " " << tile.key();
    EXPECT_EQ(tma.oRows, 0) << "FP8 never stores O by TMA";
    EXPECT_EQ(kernel->fp8TransposeEntry, kFp8TransposeEntry);
  }
}

TEST(Fp8Emit, SixteenBitKernelsHaveNoTranspose) {
  for (DType dtype : {DType::BF16, DType::FP16}) {
    KernelSpec spec = sixteenBit(fp8Spec(128), dtype);
    auto kernel = emitKernel(spec, defaultTile(spec));
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    EXPECT_TRUE(kernel->fp8TransposeEntry.empty());
    EXPECT_FALSE(kernel->tma.vTransposed);
    EXPECT_EQ(kernel->tma.vtRows, 0);
    EXPECT_FALSE(contains(kernel->source, kFp8TransposeEntry));
    EXPECT_FALSE(contains(kernel->source, "f32.e4m3.e4m3"));
    EXPECT_TRUE(contains(kernel->source, "k16.f32."));
  }
}

TEST(Fp8Emit, RefusedSpecsAndTilesAreNotEmitted) {
  KernelSpec spec = fp8Spec(128);
  auto badTile = emitKernel(spec, TileConfig{128, 80, 12, 2});
  ASSERT_FALSE(bool(badTile));
  EXPECT_EQ(errorOf(badTile.takeError()).code, ErrorCode::InvalidValue);
  spec.family = Family::FwdMma;
  auto badFamily = emitKernel(spec, TileConfig{128, 64, 8, 2});
  ASSERT_FALSE(bool(badFamily));
  EXPECT_EQ(errorOf(badFamily.takeError()).code, ErrorCode::NotSupported);
}

TEST(Fp8Emit, ReferenceNamesItsOutputType) {
  for (DType out : {DType::BF16, DType::FP16}) {
    auto kernel = emitReference(DType::E4M3, true, "sm_90a", {}, out);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    EXPECT_EQ(kernel->entryName, "flashjit_reference");
    EXPECT_TRUE(contains(kernel->source, "fj::e4m3"));
    EXPECT_TRUE(contains(kernel->source, out == DType::BF16 ? "_obf16" : "_ofp16"));
    EXPECT_TRUE(contains(kernel->source, out == DType::BF16 ? "fj::bf16" : "fj::f16"));
  }
}
