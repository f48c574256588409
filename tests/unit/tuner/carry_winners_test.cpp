// Winners across a generator change (tuner/carry_winners.h), with NVRTC and no GPU: a
// current row is stamped with the code it covers only when this build compiles the very
// binary measured; a row of another generator is carried when its code is unchanged and
// left out when it changed, has no stamp or was measured with another protocol.
#include "tuner/carry_winners.h"

#include "generator/templates.h"
#include "tuner/measure.h"

#include <gtest/gtest.h>

using namespace flashjit;

namespace {

// The winner, a tile it was screened against, and one the tuner pruned (never compiled:
// a tile that does not exist would fail if it were).
cache::TuningRow row(const std::string &screened = "bm128.bn64.w8.s2") {
  cache::TuningRow r;
  r.key.spec = "fwd_mma.bf16.d64.dv64.causal.sm80";
  r.key.bucket = "q1024.k1024.bh32";
  r.key.deviceKey = "NVIDIA_A100-SXM4-80GB.sm80.108sm";
  r.key.generatorFingerprint = generator::familyFingerprint(generator::Family::FwdMma);
  r.key.protocolVersion = tuner::measurementProtocol(
      *generator::KernelSpec::parse(r.key.spec));
  r.config = "bm64.bn64.w4.s2";
  r.medianUs = 100;
  r.tflops = 200;
  r.candidatesJson = R"({"candidates":[{"tile":"bm64.bn64.w4.s2","fate":"timed","winner":true},)"
                     R"({"tile":")" + screened + R"(","fate":"screened"},)"
                     R"({"tile":"bm999.bn8.w1.s9","fate":"pruned-fit"}]})";
  // What the measuring machine compiled: this build's binary of the winner.
  tuner::CodeStamper stamper;
  auto stamp = stamper.stamp(r);
  EXPECT_TRUE(bool(stamp) && stamp->error.empty());
  r.binaryKey = stamp ? stamp->winnerBinaryKey : "";
  return r;
}

std::vector<cache::TuningRow> carry(std::vector<cache::TuningRow> rows,
                                    tuner::CarryReport &report) {
  auto kept = tuner::carryWinners(std::move(rows), 0, report);
  EXPECT_TRUE(bool(kept)) << llvm::toString(kept.takeError());
  return kept ? std::move(*kept) : std::vector<cache::TuningRow>{};
}

const std::string kOldGenerator(64, '0');

} // namespace

TEST(CarryWinners, StampsACurrentRowThenCarriesItAcrossAGeneratorChange) {
  tuner::CarryReport stamping;
  std::vector<cache::TuningRow> stamped = carry({row()}, stamping);
  ASSERT_EQ(stamped.size(), 1u);
  EXPECT_EQ(stamping.stamped, 1);
  EXPECT_EQ(stamped[0].codeSha256.size(), 64u);
  EXPECT_TRUE(stamped[0].carriedFrom.empty());

  // The same row again: already stamped, kept as it is without compiling.
  tuner::CarryReport again;
  EXPECT_EQ(carry(stamped, again)[0].codeSha256, stamped[0].codeSha256);
  EXPECT_EQ(again.stamped, 0);

  // Measured with an older generator whose code for these tiles was the same.
  cache::TuningRow old = stamped[0];
  old.key.generatorFingerprint = kOldGenerator;
  tuner::CarryReport report;
  std::vector<cache::TuningRow> carried = carry({old}, report);
  ASSERT_EQ(carried.size(), 1u) << (report.notes.empty() ? "" : report.notes[0]);
  EXPECT_EQ(carried[0].key.generatorFingerprint,
            generator::familyFingerprint(generator::Family::FwdMma));
  EXPECT_EQ(carried[0].carriedFrom, kOldGenerator);
  EXPECT_EQ(carried[0].medianUs, old.medianUs) << "the measurement is kept";
  EXPECT_EQ(carried[0].binaryKey, old.binaryKey) << "and names the binary measured";
  EXPECT_EQ(report.carried["fwd_mma"], 1);
  EXPECT_TRUE(report.stale.empty());

  // Carried twice: it still names the generator it was measured with.
  carried[0].key.generatorFingerprint = std::string(64, '1');
  tuner::CarryReport twice;
  std::vector<cache::TuningRow> second = carry(carried, twice);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].carriedFrom, kOldGenerator);
}

TEST(CarryWinners, ChangedCodeNoStampOrAnotherProtocolIsLeftOut) {
  tuner::CarryReport stamping;
  cache::TuningRow stamped = carry({row()}, stamping).at(0);

  cache::TuningRow changed = stamped;
  changed.key.generatorFingerprint = kOldGenerator;
  changed.codeSha256 = std::string(64, 'f'); // what an older generator compiled
  cache::TuningRow unstamped = changed;
  unstamped.codeSha256.clear();
  cache::TuningRow protocol = stamped;
  protocol.key.protocolVersion += 1;

  tuner::CarryReport report;
  EXPECT_TRUE(carry({changed, unstamped, protocol}, report).empty());
  EXPECT_EQ(report.stale["fwd_mma"], 3);
  ASSERT_EQ(report.notes.size(), 3u);
  EXPECT_NE(report.notes[0].find("its code changed"), std::string::npos) << report.notes[0];
  EXPECT_NE(report.notes[1].find("without a code stamp"), std::string::npos) << report.notes[1];
  EXPECT_NE(report.notes[2].find("protocol"), std::string::npos) << report.notes[2];
}

TEST(CarryWinners, TheStampCoversTheScreenedTiles) {
  tuner::CodeStamper stamper;
  auto a = stamper.stamp(row());
  auto b = stamper.stamp(row("bm64.bn64.w4.s3"));
  ASSERT_TRUE(bool(a) && bool(b));
  EXPECT_NE(a->sha256, b->sha256) << "another screened tile, another stamp";
  EXPECT_EQ(a->winnerBinaryKey, b->winnerBinaryKey);
}

TEST(CarryWinners, ARowOfAnEarlierReleaseOfTheSameGeneratorIsStamped) {
  // flashjit's version is a comment in the source's first line: the binary key the
  // measuring build had differs, the code does not.
  cache::TuningRow r = row();
  r.flashjitVersion = "0.1.0";
  tuner::CodeStamper stamper;
  auto stamp = stamper.stamp(r);
  ASSERT_TRUE(bool(stamp) && stamp->error.empty());
  EXPECT_NE(stamp->winnerBinaryKey, r.binaryKey);
  r.binaryKey = stamp->winnerBinaryKey;
  tuner::CarryReport report;
  EXPECT_EQ(carry({r}, report).at(0).codeSha256, stamp->sha256);
  EXPECT_EQ(report.stamped, 1);
}

TEST(CarryWinners, NotStampedWhereThisBuildCompilesAnotherBinary) {
  cache::TuningRow elsewhere = row();
  elsewhere.binaryKey = std::string(64, 'a'); // another NVRTC's binary
  tuner::CarryReport report;
  std::vector<cache::TuningRow> kept = carry({elsewhere}, report);
  ASSERT_EQ(kept.size(), 1u) << "a current row is kept either way";
  EXPECT_TRUE(kept[0].codeSha256.empty());
  EXPECT_EQ(report.stamped, 0);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_NE(report.notes[0].find("not stamped"), std::string::npos) << report.notes[0];
}
