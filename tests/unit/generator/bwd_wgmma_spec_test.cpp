// bwd_wgmma as a family of the generator (no GPU): its key and name round trip, the
// spec rules (sm_90a only; head_dim and head_dim_v multiples of 8 from 32 to 256 on the
// panels that hold both, bwd_mma for the rest;
// features refused as for bwd_mma), default tiles that fit, and the dispatch of
// validateTile, sharedBytes, emitKernel and emitConfigBlock to generator/bwd_wgmma.
#include "generator/bwd_mma.h"
#include "generator/bwd_wgmma.h"
#include "generator/emit.h"
#include "generator/spec.h"
#include "support/error.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

using namespace flashjit;
using namespace flashjit::generator;

namespace {

KernelSpec bwdWgmmaSpec(int d, int dv = 0, const char *target = "sm_90a") {
  KernelSpec spec;
  spec.family = Family::BwdWgmma;
  spec.dtype = DType::BF16;
  spec.headDim = d;
  spec.headDimV = dv ? dv : d;
  spec.target = target;
  return spec;
}

// Every spec the family takes: head dims 64, 128 and 256 x dtypes x causal.
std::vector<KernelSpec> everyBwdWgmmaSpec() {
  std::vector<KernelSpec> specs;
  for (DType dtype : {DType::BF16, DType::FP16})
    for (int d : {64, 128, 256})
      for (bool causal : {false, true}) {
        KernelSpec spec = bwdWgmmaSpec(d);
        spec.dtype = dtype;
        spec.causal = causal;
        specs.push_back(spec);
      }
  return specs;
}

ErrorReport errorOf(llvm::Error err) { return takeErrorReport(std::move(err)); }

} // namespace

TEST(BwdWgmmaSpec, KeyAndFamilyRoundTrip) {
  EXPECT_EQ(familyName(Family::BwdWgmma), "bwd_wgmma");
  EXPECT_EQ(operationOf(Family::BwdWgmma), Operation::Backward);
  auto family = parseFamily("bwd_wgmma");
  ASSERT_TRUE(bool(family)) << llvm::toString(family.takeError());
  EXPECT_EQ(*family, Family::BwdWgmma);
  for (const KernelSpec &spec : everyBwdWgmmaSpec()) {
    auto parsed = KernelSpec::parse(spec.key());
    ASSERT_TRUE(bool(parsed)) << spec.key() << ": " << llvm::toString(parsed.takeError());
    EXPECT_EQ(parsed->key(), spec.key());
    EXPECT_EQ(parsed->family, Family::BwdWgmma);
    EXPECT_EQ(parsed->dtype, spec.dtype);
    EXPECT_EQ(parsed->headDim, spec.headDim);
    EXPECT_EQ(parsed->causal, spec.causal);
  }
  KernelSpec causal = bwdWgmmaSpec(128);
  causal.causal = true;
  EXPECT_EQ(causal.key(), "bwd_wgmma.bf16.d128.dv128.causal.sm90a");
}

TEST(BwdWgmmaSpec, UnknownFamiliesListIt) {
  auto family = parseFamily("bwd_fast");
  ASSERT_FALSE(bool(family));
  EXPECT_NE(errorOf(family.takeError()).message.find("bwd_wgmma"), std::string::npos);
}

TEST(BwdWgmmaSpec, NeedsSm90a) {
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    ErrorReport report = errorOf(validateSpec(bwdWgmmaSpec(128, 0, target)));
    EXPECT_EQ(report.code, ErrorCode::NotSupported) << target;
    EXPECT_NE(report.message.find("sm_90a"), std::string::npos) << report.message;
    EXPECT_NE(report.message.find("'" + std::string(target) + "'"), std::string::npos)
        << report.message;
    EXPECT_NE(report.message.find("bwd_mma"), std::string::npos) << report.message;
  }
  // A key for a target it cannot run on does not parse back.
  auto parsed = KernelSpec::parse("bwd_wgmma.bf16.d128.dv128.causal.sm80");
  ASSERT_FALSE(bool(parsed));
  llvm::consumeError(parsed.takeError());
  EXPECT_FALSE(bool(validateSpec(bwdWgmmaSpec(64))));
  EXPECT_FALSE(bool(validateSpec(bwdWgmmaSpec(128))));
}

// Head dims from 32 run on the panels of 64, 128 or 256 that hold them.
TEST(BwdWgmmaSpec, HeadDimsRunOnPaddedPanels) {
  for (auto [d, padded] : {std::pair{32, 64}, std::pair{40, 64}, std::pair{64, 64},
                           std::pair{72, 128}, std::pair{96, 128}, std::pair{128, 128},
                           std::pair{144, 256}, std::pair{192, 256}, std::pair{256, 256}}) {
    KernelSpec spec = bwdWgmmaSpec(d);
    EXPECT_TRUE(bwdWgmmaSupportsHeadDims(spec)) << spec.key();
    EXPECT_FALSE(bool(validateSpec(spec))) << spec.key();
    EXPECT_EQ(bwdWgmmaPaddedHeadDim(spec), padded) << spec.key();
    auto parsed = KernelSpec::parse(spec.key());
    ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
    // The padded spec's default tile is the padded head dim's, and it passes the rules.
    KernelSpec same = bwdWgmmaSpec(padded);
    EXPECT_EQ(bwdWgmmaDefaultTile(spec).key(), bwdWgmmaDefaultTile(same).key()) << spec.key();
    EXPECT_FALSE(bool(validateBwdWgmmaTile(spec, bwdWgmmaDefaultTile(spec)))) << spec.key();
    EXPECT_EQ(bwdWgmmaMainSharedBytes(spec, bwdWgmmaDefaultTile(spec)),
              bwdWgmmaMainSharedBytes(same, bwdWgmmaDefaultTile(same)))
        << spec.key();
  }
}

// head_dim and head_dim_v apart run on the panels that hold the larger, each with its own
// valid columns.
TEST(BwdWgmmaSpec, HeadDimVDiffers) {
  for (auto [d, dv, padded] : {std::tuple{128, 64, 128}, std::tuple{64, 128, 128},
                               std::tuple{192, 128, 256}, std::tuple{40, 72, 128},
                               std::tuple{32, 64, 64}, std::tuple{256, 128, 256}}) {
    KernelSpec spec = bwdWgmmaSpec(d, dv);
    EXPECT_TRUE(bwdWgmmaSupportsHeadDims(spec)) << spec.key();
    EXPECT_FALSE(bool(validateSpec(spec))) << spec.key();
    EXPECT_EQ(bwdWgmmaPaddedHeadDim(spec), padded) << spec.key();
    KernelSpec same = bwdWgmmaSpec(padded);
    EXPECT_EQ(bwdWgmmaDefaultTile(spec).key(), bwdWgmmaDefaultTile(same).key()) << spec.key();
    EXPECT_FALSE(bool(validateBwdWgmmaTile(spec, bwdWgmmaDefaultTile(spec)))) << spec.key();
    auto kernel = emitKernel(spec, bwdWgmmaDefaultTile(spec));
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    EXPECT_EQ(kernel->backward.tma.headDim, d) << spec.key();
    EXPECT_EQ(kernel->backward.tma.headDimV, dv) << spec.key();
    EXPECT_EQ(kernel->backward.dqAccumColumns, padded) << spec.key();
    const std::string config = llvm::formatv("fj::NoFeatures, {0}, {1}> FjConfig", d, dv).str();
    EXPECT_NE(kernel->source.find(config), std::string::npos) << spec.key();
  }
}

// Above head dim 128 the consumers take the panels of dK, dV and dQ that hold the spec's
// columns, as evenly as whole panels allow (docs/PERF.md bw16); the generated source
// asserts that the template chose the same, and wraps one wgmma width per panel count.
TEST(BwdWgmmaSpec, SplitConsumersTakeOnlyTheCallersPanels) {
  struct Case {
    int d, dv, busier;  // the busier consumer's panels of dK + dV + dQ
    bool uniform;
  };
  for (Case c : {Case{256, 256, 6, true}, Case{224, 224, 6, true}, Case{192, 192, 5, false},
                 Case{160, 160, 5, false}, Case{192, 128, 4, false}, Case{256, 128, 5, true},
                 Case{128, 256, 4, true}}) {
    KernelSpec spec = bwdWgmmaSpec(c.d, c.dv);
    const BwdSplitPanels plan = bwdWgmmaSplitPanels(spec);
    const int pk = (c.d + 63) / 64, pv = (c.dv + 63) / 64;
    EXPECT_EQ(plan.k[0] + plan.k[1], pk) << spec.key();
    EXPECT_EQ(plan.v[0] + plan.v[1], pv) << spec.key();
    EXPECT_EQ(plan.q[0] + plan.q[1], pk) << spec.key();
    for (int i = 0; i < 2; ++i)
      EXPECT_TRUE(plan.k[i] >= 1 && plan.v[i] >= 1 && plan.q[i] >= 1) << spec.key();
    EXPECT_EQ(std::max(plan.k[0] + plan.v[0] + plan.q[0], plan.k[1] + plan.v[1] + plan.q[1]),
              c.busier)
        << spec.key();
    EXPECT_EQ(plan.uniform(), c.uniform) << spec.key();
    EXPECT_EQ(bwdWgmmaAccumulatorRegisters(spec, bwdWgmmaDefaultTile(spec)), 32 * c.busier);
    auto kernel = emitKernel(spec, bwdWgmmaDefaultTile(spec));
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    EXPECT_NE(kernel->source.find("disagree on the consumers' panels"), std::string::npos);
  }
  // 192 / 128: consumer 0 one panel of dK and dV and two of dQ, consumer 1 the rest, so
  // both products take 64- and 128-column widths.
  auto kernel = emitKernel(bwdWgmmaSpec(192, 128), bwdWgmmaDefaultTile(bwdWgmmaSpec(192, 128)));
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  for (const char *wrapper : {"m64n64k16.f32.bf16", "m64n128k16.f32.bf16"})
    EXPECT_NE(kernel->source.find(wrapper), std::string::npos) << wrapper;
  // A head dim of one panel: even halves of the 256 columns, as before.
  const BwdSplitPanels narrow = bwdWgmmaSplitPanels(bwdWgmmaSpec(192, 64));
  EXPECT_TRUE(narrow.uniform());
  EXPECT_EQ(narrow.k[0] + narrow.v[0] + narrow.q[0], 6);
}

TEST(BwdWgmmaSpec, OtherHeadDimsAreBwdMmas) {
  for (auto [d, dv] : {std::pair{8, 8}, std::pair{16, 16}, std::pair{24, 24},
                       std::pair{128, 24}, std::pair{16, 128}, std::pair{8, 64}}) {
    KernelSpec spec = bwdWgmmaSpec(d, dv);
    EXPECT_FALSE(bwdWgmmaSupportsHeadDims(spec)) << spec.key();
    ErrorReport report = errorOf(validateSpec(spec));
    EXPECT_EQ(report.code, ErrorCode::NotSupported) << spec.key();
    EXPECT_NE(report.message.find("a multiple of 8 from 32 to 256"), std::string::npos)
        << report.message;
    EXPECT_NE(report.message.find("bwd_mma runs the others"), std::string::npos)
        << report.message;
    spec.family = Family::BwdMma;
    EXPECT_FALSE(bool(validateSpec(spec))) << spec.key();
  }
  auto parsed = KernelSpec::parse("bwd_wgmma.bf16.d24.dv24.causal.sm90a");
  ASSERT_FALSE(bool(parsed));
  llvm::consumeError(parsed.takeError());
}

// The window, ALiBi and a mask_mod it takes (0.9), ALiBi with no mask at head dim 64 too
// (since its steps split masked and unmasked, docs/PERF.md f7); soft-capping with ALiBi,
// and at head dim 64 with causal or a window (its one tile spills), it leaves to bwd_mma.
TEST(BwdWgmmaSpec, TakesFeaturesButSoftcapWithAlibi) {
  KernelSpec spec = bwdWgmmaSpec(128);
  spec.features.alibi = true;
  EXPECT_FALSE(bool(validateSpec(spec)));
  EXPECT_FALSE(bwdWgmmaFeatureRefusal(spec).has_value());
  spec.features.softcap = 30;
  ErrorReport report = errorOf(validateSpec(spec));
  EXPECT_EQ(report.code, ErrorCode::NotSupported);
  EXPECT_NE(report.message.find("bwd_wgmma does not take softcap with alibi"),
            std::string::npos)
      << report.message;
  spec.features.alibi = false;  // soft-capping alone: its derivative comes back from P
  EXPECT_FALSE(bool(validateSpec(spec)));
  spec.causal = true;
  EXPECT_FALSE(bool(validateSpec(spec)));

  KernelSpec capped64 = bwdWgmmaSpec(64);
  capped64.features.softcap = 30;
  capped64.causal = false;
  EXPECT_FALSE(bool(validateSpec(capped64)));
  capped64.causal = true;  // its one tile spills
  report = errorOf(validateSpec(capped64));
  EXPECT_EQ(report.code, ErrorCode::NotSupported);
  EXPECT_NE(report.message.find("softcap with causal or a window at head dims up to 64"),
            std::string::npos)
      << report.message;

  KernelSpec d64 = bwdWgmmaSpec(64);
  d64.features.alibi = true;
  d64.causal = false;  // no mask at all
  EXPECT_FALSE(bool(validateSpec(d64)));
  EXPECT_FALSE(bwdWgmmaFeatureRefusal(d64).has_value());
  d64.causal = true;
  EXPECT_FALSE(bool(validateSpec(d64)));
  d64.causal = false;
  d64.features.window = true, d64.features.windowLeft = 256, d64.features.windowRight = -1;
  EXPECT_FALSE(bool(validateSpec(d64)));
}

TEST(BwdWgmmaSpec, DefaultTilesFitAndDispatch) {
  for (const KernelSpec &spec : everyBwdWgmmaSpec()) {
    TileConfig tile = defaultTile(spec);
    EXPECT_EQ(tile, bwdWgmmaDefaultTile(spec));
    EXPECT_EQ(tile.blockN, spec.headDim > 128 ? 64 : 128) << tile.key();
    EXPECT_EQ(tile.warps, 12) << tile.key();  // two consumer warpgroups and the server
    llvm::Error err = validateTile(spec, tile);
    EXPECT_FALSE(bool(err)) << spec.key() << " " << tile.key() << ": "
                            << llvm::toString(std::move(err));
    EXPECT_EQ(sharedBytes(spec, tile), bwdWgmmaSharedBytes(spec, tile));
  }
  // validateTile applies the family's rules: bwd_mma's tiles are not bwd_wgmma's.
  EXPECT_TRUE(bool(errorOf(validateTile(bwdWgmmaSpec(128), {32, 64, 4, 2})).code ==
                   ErrorCode::InvalidValue));
}

TEST(BwdWgmmaSpec, EmitsABackwardModule) {
  KernelSpec spec = bwdWgmmaSpec(128);
  TileConfig tile = defaultTile(spec);
  auto kernel = emitKernel(spec, tile);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  EXPECT_TRUE(kernel->backward.enabled);
  EXPECT_FALSE(kernel->backward.passes.empty());
  EXPECT_EQ(kernel->entryName, kernel->backward.passes.front());
  EXPECT_EQ(kernel->backward.keysPerCta, tile.blockN);
  EXPECT_EQ(kernel->threads, tile.warps * 32);
  // The deterministic dq kernel is bwd_mma's, launched with its own block and tile.
  const TileConfig dq = bwdMmaDefaultTile([&] {
    KernelSpec mma = spec;
    mma.family = Family::BwdMma;
    return mma;
  }());
  EXPECT_EQ(kernel->backward.dqThreads, dq.warps * 32);
  EXPECT_EQ(kernel->backward.dqRowsPerCta, dq.blockN);
  EXPECT_NE(kernel->source.find(spec.key()), std::string::npos);
  auto config = emitConfigBlock(spec, tile);
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  EXPECT_NE(config->find("BwdWgmmaConfig"), std::string::npos) << *config;
  // Neither emits for a spec the family cannot take.
  for (const KernelSpec &bad : {bwdWgmmaSpec(128, 0, "sm_80"), bwdWgmmaSpec(24)}) {
    auto refused = emitKernel(bad, tile);
    ASSERT_FALSE(bool(refused)) << bad.key();
    EXPECT_EQ(errorOf(refused.takeError()).code, ErrorCode::NotSupported);
    auto refusedConfig = emitConfigBlock(bad, tile);
    ASSERT_FALSE(bool(refusedConfig)) << bad.key();
    llvm::consumeError(refusedConfig.takeError());
  }
}

// Where the main pass walks the tiles on a persistent grid (tileWalk) and where it claims
// them from the workspace's counter (claimsTiles): not with a split head dim or a
// mask_mod's block mask (ptxas spilled), and claimed with causal masking, whose tiles are
// unequal work (docs/PERF.md bw10, bw11); bwd_mma keeps its grid of one CTA a key block.
TEST(BwdWgmmaSpec, MainPassWalksTilesWherePersistencePays) {
  struct Case {
    int d;
    bool causal, maskMod, walks, claims;
  };
  for (const Case &c : {Case{64, false, false, true, false}, Case{128, false, false, true, false},
                        Case{64, true, false, true, true}, Case{128, true, false, true, true},
                        Case{256, false, false, false, false}, Case{256, true, false, false, false},
                        Case{128, true, true, false, false}}) {
    KernelSpec spec = bwdWgmmaSpec(c.d);
    spec.causal = c.causal;
    if (c.maskMod)
      spec.features.maskMod = "return q_idx / 300 == kv_idx / 300;";
    auto kernel = emitKernel(spec, defaultTile(spec));
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    EXPECT_EQ(kernel->backward.tileWalk, c.walks) << spec.key();
    EXPECT_EQ(kernel->backward.claimsTiles, c.claims) << spec.key();
  }
  KernelSpec mma = bwdWgmmaSpec(128);
  mma.family = Family::BwdMma;
  auto mmaKernel = emitKernel(mma, defaultTile(mma));
  ASSERT_TRUE(bool(mmaKernel)) << llvm::toString(mmaKernel.takeError());
  EXPECT_FALSE(mmaKernel->backward.tileWalk);
  EXPECT_FALSE(mmaKernel->backward.claimsTiles);
}

// A mask_mod's module also builds the block mask's step lists at the main kernel's tiles
// (the API launches kBackwardBlockStepsEntry when a mask is created); other modules do not.
// bwd_wgmma's main kernel reads the keep bits of partly masked steps (stepBits: the host
// gives them slots) unless the features also transform scores; bwd_mma's never does.
TEST(BwdWgmmaSpec, MaskModModulesBuildBlockSteps) {
  KernelSpec spec = bwdWgmmaSpec(128);
  const TileConfig tile = defaultTile(spec);
  auto plain = emitKernel(spec, tile);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_EQ(plain->backward.blockSteps, "");
  EXPECT_EQ(plain->source.find(kBackwardBlockStepsEntry), std::string::npos);
  spec.features.maskMod = "return q_idx / 300 == kv_idx / 300;";
  auto masked = emitKernel(spec, tile);
  ASSERT_TRUE(bool(masked)) << llvm::toString(masked.takeError());
  EXPECT_EQ(masked->backward.blockSteps, kBackwardBlockStepsEntry);
  EXPECT_EQ(masked->backward.queryRowsPerStep, tile.blockM);
  EXPECT_EQ(masked->backward.keysPerCta, tile.blockN);
  EXPECT_TRUE(masked->backward.stepBits);
  EXPECT_FALSE(plain->backward.stepBits);
  EXPECT_NE(masked->source.find(std::string(kBackwardBlockStepsEntry) + "("), std::string::npos);
  KernelSpec alibi = spec;
  alibi.features.alibi = true;
  auto alibiMasked = emitKernel(alibi, defaultTile(alibi));
  ASSERT_TRUE(bool(alibiMasked)) << llvm::toString(alibiMasked.takeError());
  EXPECT_EQ(alibiMasked->backward.blockSteps, kBackwardBlockStepsEntry);
  EXPECT_FALSE(alibiMasked->backward.stepBits);
  // bwd_mma's modules too (its main kernel walks the same lists), at its own tiles.
  KernelSpec mma = spec;
  mma.family = Family::BwdMma;
  const TileConfig mmaTile = defaultTile(mma);
  auto mmaMasked = emitKernel(mma, mmaTile);
  ASSERT_TRUE(bool(mmaMasked)) << llvm::toString(mmaMasked.takeError());
  EXPECT_EQ(mmaMasked->backward.blockSteps, kBackwardBlockStepsEntry);
  EXPECT_EQ(mmaMasked->backward.queryRowsPerStep, mmaTile.blockM);
  EXPECT_EQ(mmaMasked->backward.keysPerCta, mmaTile.blockN);
  EXPECT_FALSE(mmaMasked->backward.stepBits);
}
