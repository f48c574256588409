// Attention features (issue 28) in the generator, without a GPU or NVRTC: the key
// suffix of each built-in feature and its round trip through KernelSpec::parse, keys
// naming user code (refused by parse, one per text), validateFeatures' rejections, and
// the emitted source (the FjFeatures block, user code numbered from line 1 of its own
// file and the generated source's numbering resumed after it).
#include "generator/emit.h"
#include "generator/spec.h"
#include "support/error.h"
#include "support/hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace flashjit;
using namespace flashjit::generator;

namespace {

ErrorReport errorOf(llvm::Error err) { return takeErrorReport(std::move(err)); }

Features window(int left, int right) {
  Features f;
  f.window = true;
  f.windowLeft = left;
  f.windowRight = right;
  return f;
}
Features softcap(float cap) {
  Features f;
  f.softcap = cap;
  return f;
}
Features alibi() {
  Features f;
  f.alibi = true;
  return f;
}

KernelSpec specWith(const Features &features, Family family = Family::FwdMma,
                    const char *target = "sm_80") {
  KernelSpec spec;
  spec.family = family;
  spec.dtype = DType::FP16;
  spec.headDim = spec.headDimV = 64;
  spec.causal = true;
  spec.target = target;
  spec.features = features;
  return spec;
}

const char *kRelativeBias = "return score + 0.01f * (float)(kv_idx - q_idx);\n";
const char *kPrefixLm = "return kv_idx <= q_idx || kv_idx < args.integer[0];\n";

} // namespace

TEST(FeatureKeys, SuffixOfEachBuiltInFeature) {
  EXPECT_EQ(Features{}.keySuffix(), "");
  EXPECT_EQ(window(1024, 0).keySuffix(), ".win1024_0");
  EXPECT_EQ(window(128, 128).keySuffix(), ".win128_128");
  EXPECT_EQ(window(-1, 256).keySuffix(), ".wininf_256");
  EXPECT_EQ(window(256, -1).keySuffix(), ".win256_inf");
  EXPECT_EQ(softcap(30).keySuffix(), ".cap30");
  EXPECT_EQ(softcap(2.5f).keySuffix(), ".cap2p5");  // '.' would split the key
  EXPECT_EQ(alibi().keySuffix(), ".alibi");
  Features all = window(1024, 0);
  all.softcap = 30;
  all.alibi = true;
  all.scoreMod = kRelativeBias;
  all.maskMod = kPrefixLm;
  EXPECT_EQ(all.keySuffix(), ".win1024_0.cap30.alibi.score-" + userCodeHash(kRelativeBias) +
                                 ".mask-" + userCodeHash(kPrefixLm));
}

TEST(FeatureKeys, PlainSpecKeepsItsPlainKey) {
  KernelSpec spec = specWith({});
  EXPECT_EQ(spec.key(), "fwd_mma.fp16.d64.dv64.causal.sm80");
  EXPECT_FALSE(spec.features.any());
  spec.features = window(1024, 0);
  EXPECT_EQ(spec.key(), "fwd_mma.fp16.d64.dv64.causal.sm80.win1024_0");
}

TEST(FeatureKeys, BuiltInFeaturesRoundTripThroughParse) {
  Features combined = window(-1, 64);
  combined.softcap = 50.25f;
  combined.alibi = true;
  const std::vector<Features> cases = {window(1024, 0), window(128, 128), window(0, 0),
                                       window(-1, 256), window(256, -1),  softcap(30),
                                       softcap(2.5f),   softcap(1e-3f),   alibi(),
                                       combined};
  struct FamilyTarget {
    Family family;
    const char *target;
  };
  for (FamilyTarget ft : {FamilyTarget{Family::FwdMma, "sm_80"},
                          FamilyTarget{Family::FwdMma, "sm_90a"},
                          FamilyTarget{Family::FwdWgmma, "sm_90a"}})
    for (bool causal : {false, true})
      for (const Features &f : cases) {
        KernelSpec spec = specWith(f, ft.family, ft.target);
        spec.causal = causal;
        spec.dtype = causal ? DType::BF16 : DType::FP16;
        spec.headDimV = 128;
        llvm::Expected<KernelSpec> parsed = KernelSpec::parse(spec.key());
        ASSERT_TRUE(bool(parsed)) << spec.key() << ": " << llvm::toString(parsed.takeError());
        EXPECT_EQ(parsed->key(), spec.key());
        EXPECT_EQ(parsed->family, spec.family);
        EXPECT_EQ(parsed->dtype, spec.dtype);
        EXPECT_EQ(parsed->headDim, spec.headDim);
        EXPECT_EQ(parsed->headDimV, spec.headDimV);
        EXPECT_EQ(parsed->causal, spec.causal);
        EXPECT_EQ(parsed->target, spec.target);
        EXPECT_TRUE(parsed->features == spec.features) << spec.key();
      }
}

TEST(FeatureKeys, ParseRefusesKeysNamingUserCode) {
  for (auto set : {+[](Features &f) { f.scoreMod = kRelativeBias; },
                   +[](Features &f) { f.maskMod = kPrefixLm; }}) {
    Features f = window(256, 0);
    set(f);
    KernelSpec spec = specWith(f);
    ErrorReport report = errorOf(KernelSpec::parse(spec.key()).takeError());
    EXPECT_EQ(report.code, ErrorCode::NotSupported) << spec.key();
    EXPECT_NE(report.message.find("user code"), std::string::npos) << report.message;
  }
}

TEST(FeatureKeys, ParseRefusesBadFeatureTokens) {
  for (const char *key :
       {"fwd_mma.bf16.d64.dv64.causal.sm80.win12", "fwd_mma.bf16.d64.dv64.causal.sm80.win-2_0",
        "fwd_mma.bf16.d64.dv64.causal.sm80.winx_0", "fwd_mma.bf16.d64.dv64.causal.sm80.capx",
        "fwd_mma.bf16.d64.dv64.causal.sm80.cap-1", "fwd_mma.bf16.d64.dv64.causal.sm80.cap",
        "fwd_mma.bf16.d64.dv64.causal.sm80.wininf_inf",
        "fwd_mma.bf16.d64.dv64.causal.sm80.alibi2", "fwd_mma.bf16.d64.dv64.causal.sm80."}) {
    llvm::Expected<KernelSpec> parsed = KernelSpec::parse(key);
    ASSERT_FALSE(bool(parsed)) << key;
    EXPECT_EQ(errorOf(parsed.takeError()).code, ErrorCode::InvalidValue) << key;
  }
  // The backward families take features (0.9); bwd_wgmma not soft-capping (validateSpec).
  llvm::Expected<KernelSpec> bwd = KernelSpec::parse("bwd_mma.bf16.d64.dv64.causal.sm80.alibi");
  ASSERT_TRUE(bool(bwd)) << llvm::toString(bwd.takeError());
  EXPECT_TRUE(bwd->features.alibi);
  llvm::Expected<KernelSpec> wgmma =
      KernelSpec::parse("bwd_wgmma.bf16.d64.dv64.causal.sm90a.alibi");
  ASSERT_TRUE(bool(wgmma)) << llvm::toString(wgmma.takeError());
  llvm::Expected<KernelSpec> capped =
      KernelSpec::parse("bwd_wgmma.bf16.d64.dv64.causal.sm90a.cap30");
  ASSERT_FALSE(bool(capped));
  EXPECT_EQ(errorOf(capped.takeError()).code, ErrorCode::NotSupported);
}

TEST(FeatureKeys, UserCodeIsNamedByTheHashOfItsText) {
  auto keyOf = [](const std::string &score, const std::string &mask) {
    Features f;
    f.scoreMod = score;
    f.maskMod = mask;
    return specWith(f).key();
  };
  const std::string a = kRelativeBias;
  const std::string changed = "return score + 0.02f * (float)(kv_idx - q_idx);\n";
  EXPECT_EQ(keyOf(a, ""), keyOf(std::string(a), ""));  // the same text: the same key
  EXPECT_NE(keyOf(a, ""), keyOf(changed, ""));
  // Every byte counts: a comment or whitespace is a different text.
  EXPECT_NE(keyOf(a, ""), keyOf(a + "// note\n", ""));
  EXPECT_NE(keyOf(a, ""), keyOf(" " + a, ""));
  // The same text as score_mod or as mask_mod: different keys.
  EXPECT_NE(keyOf(kPrefixLm, ""), keyOf("", kPrefixLm));
  EXPECT_EQ(keyOf("", kPrefixLm), keyOf("", kPrefixLm));
  // The token is the first 12 hex digits of the text's SHA-256.
  EXPECT_EQ(userCodeHash(a), sha256Hex(a).substr(0, 12));
  EXPECT_EQ(userCodeHash(a).size(), 12u);
  EXPECT_NE(keyOf(a, "").find(".score-" + userCodeHash(a)), std::string::npos);
}

TEST(FeatureValidation, AcceptsEveryWellFormedFeature) {
  Features combined = window(1024, 0);
  combined.softcap = 30;
  combined.alibi = true;
  combined.scoreMod = kRelativeBias;
  combined.maskMod = kPrefixLm;
  for (const Features &f : {window(0, 0), window(-1, 0), window(0, -1), window(1024, 0),
                            softcap(30), alibi(), combined}) {
    EXPECT_FALSE(bool(validateFeatures(specWith(f)))) << f.keySuffix();
    EXPECT_FALSE(bool(validateSpec(specWith(f, Family::FwdWgmma, "sm_90a")))) << f.keySuffix();
  }
}

TEST(FeatureValidation, RejectsAWindowUnboundedOnBothSides) {
  ErrorReport report = errorOf(validateFeatures(specWith(window(-1, -1))));
  EXPECT_EQ(report.code, ErrorCode::InvalidValue);
  EXPECT_NE(report.message.find("unbounded"), std::string::npos) << report.message;
  EXPECT_EQ(errorOf(validateSpec(specWith(window(-1, -1)))).code, ErrorCode::InvalidValue);
}

TEST(FeatureValidation, RejectsWindowSidesBelowMinusOne) {
  for (auto [left, right] : {std::pair{-2, 0}, std::pair{0, -2}, std::pair{-100, 5}}) {
    ErrorReport report = errorOf(validateFeatures(specWith(window(left, right))));
    EXPECT_EQ(report.code, ErrorCode::InvalidValue) << left << "," << right;
    EXPECT_NE(report.message.find(">= 0, or -1"), std::string::npos) << report.message;
  }
}

// A bad cap beside another feature.
TEST(FeatureValidation, RejectsANaNOrNegativeSoftcapBesideAnotherFeature) {
  for (float cap : {std::numeric_limits<float>::quiet_NaN(), -1.f, -30.f,
                    std::numeric_limits<float>::infinity()}) {
    Features f = alibi();
    f.softcap = cap;
    ErrorReport report = errorOf(validateFeatures(specWith(f)));
    EXPECT_EQ(report.code, ErrorCode::InvalidValue) << cap;
    EXPECT_NE(report.message.find("softcap"), std::string::npos) << report.message;
  }
}

// A bad cap alone: no other feature is on (any() is false), and it must still be
// refused, not taken for "no soft-capping" (spec.h: softcap finite and >= 0).
TEST(FeatureValidation, RejectsANaNOrNegativeSoftcapAlone) {
  for (float cap : {std::numeric_limits<float>::quiet_NaN(), -1.f,
                    std::numeric_limits<float>::infinity()}) {
    ErrorReport report = errorOf(validateFeatures(specWith(softcap(cap))));
    EXPECT_EQ(report.code, ErrorCode::InvalidValue) << cap;
    EXPECT_NE(report.message.find("softcap"), std::string::npos) << report.message;
  }
}

// The backward pass takes the features (0.9) but a score_mod (no derivative): bwd_mma all
// of them, bwd_wgmma all but soft-capping; dec_mma takes every feature.
TEST(FeatureValidation, BackwardFamiliesTakeWhatTheyCan) {
  Features withMask;
  withMask.maskMod = kPrefixLm;
  for (const Features &f : {window(256, 0), softcap(30), alibi(), withMask}) {
    for (Family family : {Family::BwdMma, Family::BwdWgmma}) {
      KernelSpec spec = specWith(f, family);
      spec.target = "sm_90a";
      if (family == Family::BwdWgmma && f.softcap > 0) {
        ErrorReport report = errorOf(validateFeatures(spec));
        EXPECT_EQ(report.code, ErrorCode::NotSupported);
        EXPECT_NE(report.message.find("bwd_wgmma does not take softcap"), std::string::npos)
            << report.message;
        continue;
      }
      EXPECT_FALSE(bool(validateFeatures(spec))) << spec.key();
      llvm::Expected<EmittedKernel> emitted = emitKernel(spec, defaultTile(spec));
      ASSERT_TRUE(bool(emitted)) << spec.key() << ": " << llvm::toString(emitted.takeError());
      EXPECT_NE(emitted->source.find("FjFeatures> FjConfig"), std::string::npos) << spec.key();
    }
    // Decode takes them all (the user's code since 0.14).
    EXPECT_FALSE(bool(validateFeatures(specWith(f, Family::DecMma)))) << f.keySuffix();
  }
  Features withScoreMod;
  withScoreMod.scoreMod = "return score;";
  for (Family family : {Family::BwdMma, Family::BwdWgmma}) {
    ErrorReport report = errorOf(validateFeatures(specWith(withScoreMod, family)));
    EXPECT_EQ(report.code, ErrorCode::NotSupported);
    EXPECT_NE(report.message.find("does not take a score_mod"), std::string::npos)
        << report.message;
  }
  EXPECT_FALSE(bool(validateFeatures(specWith(withScoreMod, Family::DecMma))));
  // No feature: the backward families are fine.
  EXPECT_FALSE(bool(validateFeatures(specWith({}, Family::BwdMma))));
}

TEST(FeatureValidation, RejectsOversizedOrNulUserCode) {
  Features big;
  big.scoreMod = "return score;\n" + std::string(kMaxUserCodeBytes, ' ');
  ErrorReport report = errorOf(validateFeatures(specWith(big)));
  EXPECT_EQ(report.code, ErrorCode::InvalidValue);
  EXPECT_NE(report.message.find("score_mod"), std::string::npos) << report.message;

  Features nul;
  nul.maskMod = std::string("return true;\n\0", 14);
  report = errorOf(validateFeatures(specWith(nul)));
  EXPECT_EQ(report.code, ErrorCode::InvalidValue);
  EXPECT_NE(report.message.find("mask_mod"), std::string::npos) << report.message;
}

TEST(FeatureSource, PlainKernelHasNoFeatureBlock) {
  KernelSpec spec = specWith({});
  llvm::Expected<EmittedKernel> kernel = emitKernel(spec, defaultTile(spec));
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  EXPECT_EQ(kernel->source.find("struct FjFeatures"), std::string::npos);
  EXPECT_EQ(kernel->source.find("#line 1 \"score_mod\""), std::string::npos);
  EXPECT_EQ(featuresBlock({}), "");
}

TEST(FeatureSource, BuiltInFeaturesAreConstants) {
  Features f = window(1024, 0);
  f.softcap = 30;
  f.alibi = true;
  for (Family family : {Family::FwdMma, Family::FwdWgmma}) {
    KernelSpec spec = specWith(f, family, "sm_90a");
    llvm::Expected<EmittedKernel> kernel = emitKernel(spec, defaultTile(spec));
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    const std::string &s = kernel->source;
    EXPECT_NE(s.find("struct FjFeatures"), std::string::npos);
    EXPECT_NE(s.find("kWindowLeft = 1024, kWindowRight = 0"), std::string::npos);
    EXPECT_NE(s.find("kSoftcap = 30.0f"), std::string::npos);
    EXPECT_NE(s.find("kAlibi = true"), std::string::npos);
    EXPECT_NE(s.find(", FjFeatures> FjConfig"), std::string::npos);
    EXPECT_EQ(s.find("FJ_RESUME_LINE"), std::string::npos);
  }
}

// The user's text follows `#line 1 "score_mod"` (its first line is line 1 of that
// file) and, after it, `#line N "flashjit_kernel.cu"` with N the line the source is
// really at: NVRTC's messages name the user's lines in the one and the source's in the
// other.
TEST(FeatureSource, UserCodeIsNumberedFromItsFirstLine) {
  Features f;
  f.scoreMod = "float bias = 0.01f * (float)(kv_idx - q_idx);\nreturn score + bias;";
  f.maskMod = kPrefixLm;
  for (Family family : {Family::FwdMma, Family::FwdWgmma}) {
    KernelSpec spec = specWith(f, family, "sm_90a");
    llvm::Expected<EmittedKernel> kernel = emitKernel(spec, defaultTile(spec));
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    const std::string &s = kernel->source;
    for (auto [file, body] : {std::pair<std::string, std::string>{"score_mod", f.scoreMod},
                              {"mask_mod", f.maskMod}}) {
      std::string directive = "#line 1 \"" + file + "\"\n";
      size_t at = s.find(directive);
      ASSERT_NE(at, std::string::npos) << file;
      EXPECT_EQ(s.compare(at + directive.size(), body.size(), body), 0) << file;
      // The directive after the body names the source's own line.
      size_t resume = s.find("#line ", at + directive.size());
      ASSERT_NE(resume, std::string::npos);
      std::string expected = "#line " +
                             std::to_string(2 + std::count(s.begin(), s.begin() + resume, '\n')) +
                             " \"" + kProgramName + "\"\n";
      EXPECT_EQ(s.compare(resume, expected.size(), expected), 0)
          << file << ": " << s.substr(resume, 40);
      // Nothing but the body (and the newline added after it) and the function's closing
      // brace between the two: a ';' missing on the last line is then reported in the
      // user's file.
      size_t bodyEnd = at + directive.size() + body.size();
      std::string between = s.substr(bodyEnd, resume - bodyEnd);
      EXPECT_TRUE(between == "}\n" || between == "\n}\n") << file << ": '" << between << "'";
    }
    EXPECT_EQ(s.find("FJ_RESUME_LINE"), std::string::npos);
  }
}

// A mask_mod's module holds its block-mask builder; fwd_wgmma's, when not causal, also
// the kernel that orders its persistent walk over the mask (causal kernels walk their
// blocks in pairs; fwd_mma is not persistent).
TEST(FeatureSource, BlockMaskModulesHoldTheirBuilderAndOrder) {
  Features f;
  f.maskMod = kPrefixLm;
  for (Family family : {Family::FwdMma, Family::FwdWgmma})
    for (bool causal : {false, true}) {
      KernelSpec spec = specWith(f, family, "sm_90a");
      spec.causal = causal;
      llvm::Expected<EmittedKernel> kernel = emitKernel(spec, defaultTile(spec));
      ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
      const bool ordered = family == Family::FwdWgmma && !causal;
      SCOPED_TRACE(spec.key());
      EXPECT_EQ(kernel->blockMaskEntry, kBlockMaskEntry);
      EXPECT_EQ(kernel->blockOrderEntry, ordered ? kBlockOrderEntry : "");
      EXPECT_NE(kernel->source.find(std::string(kBlockMaskEntry) + "("), std::string::npos);
      EXPECT_EQ(kernel->source.find(std::string(kBlockOrderEntry) + "(") != std::string::npos,
                ordered);
    }
  KernelSpec plain = specWith({}, Family::FwdWgmma, "sm_90a");
  plain.causal = false;
  llvm::Expected<EmittedKernel> kernel = emitKernel(plain, defaultTile(plain));
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  EXPECT_EQ(kernel->blockMaskEntry, "");
  EXPECT_EQ(kernel->blockOrderEntry, "");
}

TEST(FeatureSource, SourceFollowsTheUserCodeText) {
  auto sourceOf = [](const std::string &mask) {
    Features f;
    f.maskMod = mask;
    KernelSpec spec = specWith(f);
    llvm::Expected<EmittedKernel> kernel = emitKernel(spec, defaultTile(spec));
    EXPECT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    return kernel ? kernel->source : std::string();
  };
  const std::string a = kPrefixLm;
  EXPECT_EQ(sourceOf(a), sourceOf(std::string(kPrefixLm)));
  EXPECT_NE(sourceOf(a), sourceOf("return kv_idx <= q_idx || kv_idx < args.integer[1];\n"));
  EXPECT_NE(sourceOf(a), sourceOf(""));
}

TEST(FeatureSource, ConfigBlockAndReferenceCarryTheFeatures) {
  Features f = window(128, 128);
  f.scoreMod = kRelativeBias;
  KernelSpec spec = specWith(f);
  llvm::Expected<std::string> config = emitConfigBlock(spec, defaultTile(spec));
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  EXPECT_NE(config->find("struct FjFeatures"), std::string::npos);
  EXPECT_NE(config->find(kRelativeBias), std::string::npos);
  EXPECT_EQ(config->find("FJ_RESUME_LINE"), std::string::npos);

  llvm::Expected<EmittedKernel> reference = emitReference(DType::BF16, false, "sm_80", f);
  ASSERT_TRUE(bool(reference)) << llvm::toString(reference.takeError());
  EXPECT_NE(reference->source.find("struct FjFeatures"), std::string::npos);
  EXPECT_NE(reference->source.find("#line 1 \"score_mod\"\n" + std::string(kRelativeBias)),
            std::string::npos);
  EXPECT_NE(reference->source.find(", FjFeatures>(params"), std::string::npos);
  EXPECT_EQ(reference->source.find("FJ_RESUME_LINE"), std::string::npos);
  // The plain reference is unchanged by the features' existence.
  llvm::Expected<EmittedKernel> plain = emitReference(DType::BF16, false, "sm_80");
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_EQ(plain->source.find("struct FjFeatures"), std::string::npos);
  EXPECT_NE(plain->source, reference->source);
}

// fwd_wgmma adds ALiBi's key part on the tensor cores (FwdWgmmaConfig::kAlibiByMma) for
// ALiBi alone at head dims up to 64, where the bias panel fits beside the Q buffers: the
// source then holds the bf16 wrapper with a K-major B, and the shared memory the panel
// (32 bytes a key). Every other kernel's source has neither.
TEST(FeatureSource, AlibiBiasPanelOnlyWhereTheKernelTakesIt) {
  auto wgmma = [](int d, DType dtype, const Features &f) {
    KernelSpec spec = specWith(f, Family::FwdWgmma, "sm_90a");
    spec.dtype = dtype;
    spec.headDim = spec.headDimV = d;
    return spec;
  };
  for (DType dtype : {DType::FP16, DType::BF16}) {
    KernelSpec spec = wgmma(64, dtype, alibi());
    TileConfig tile = defaultTile(spec);
    EXPECT_EQ(wgmmaBiasPanelBytes(spec, tile), tile.blockN * 32) << spec.key();
    KernelSpec plain = wgmma(64, dtype, Features());
    EXPECT_EQ(sharedBytes(spec, tile), sharedBytes(plain, tile) + tile.blockN * 32)
        << spec.key();
    llvm::Expected<EmittedKernel> kernel = emitKernel(spec, tile);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    const std::string wrapper = "void wgmma_qk_bias(";
    const size_t at = kernel->source.find(wrapper);
    ASSERT_NE(at, std::string::npos) << spec.key();
    const std::string body = kernel->source.substr(at, kernel->source.find("}\n", at) - at);
    EXPECT_NE(body.find("k16.f32.bf16.bf16"), std::string::npos) << body;  // any dtype
    EXPECT_NE(body.find("1, 1, 0;"), std::string::npos) << body;          // B K-major
  }
  Features softcapAlibi = alibi();
  softcapAlibi.softcap = 30;
  Features maskAlibi = alibi();
  maskAlibi.maskMod = "return kv_idx <= q_idx;";
  for (const KernelSpec &spec :
       {wgmma(128, DType::BF16, alibi()), wgmma(64, DType::BF16, softcapAlibi),
        wgmma(64, DType::BF16, maskAlibi), wgmma(64, DType::BF16, Features()),
        specWith(alibi())}) {
    TileConfig tile = defaultTile(spec);
    EXPECT_EQ(wgmmaBiasPanelBytes(spec, tile), 0) << spec.key();
    llvm::Expected<EmittedKernel> kernel = emitKernel(spec, tile);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    EXPECT_EQ(kernel->source.find("void wgmma_qk_bias("), std::string::npos) << spec.key();
  }
}
