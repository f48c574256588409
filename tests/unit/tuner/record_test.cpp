// What a tuning row records: the candidates JSON (every candidate's fate, the protocol)
// and the clocks JSON, with and without NVML (no GPU needed).
#include "tuner/tune_record.h"

#include "runtime/clocks.h"

#include "llvm/Support/JSON.h"

#include <gtest/gtest.h>

using namespace flashjit;

namespace {

TEST(TuneRecord, CandidatesJsonKeepsEveryFateAndTheProtocol) {
  tuner::TuneRecord r;
  r.spec = "fwd_mma.bf16.d128.dv128.causal.sm90a";
  r.protocol = tuner::kBlockMaskProtocolVersion;
  r.bucket = "q1024.k1024.bh32";
  r.mode = "default";
  r.timingShape.batch = 2;
  r.timingShape.headsQ = 16;
  r.winner = "bm128.bn64.w8.s2";
  r.ties = {"bm128.bn64.w8.s2"};
  tuner::CandidateRecord wrong;
  wrong.tile = {128, 64, 8, 2};
  wrong.fate = tuner::CandidateFate::Wrong;
  wrong.reason = "wrong output";
  wrong.checked = true;
  wrong.maxError = 1.5;
  wrong.registers = 214;
  tuner::CandidateRecord timed;
  timed.tile = {64, 64, 4, 2};
  timed.fate = tuner::CandidateFate::Timed;
  timed.screened = true;
  timed.screen.medianUs = 125.0;
  timed.screen.runs = 40;
  timed.screenReverseUs = 127.0;
  timed.timed = true;
  timed.measurement.medianUs = 123.4567;
  timed.measurement.runs = 50;
  timed.winner = true;
  tuner::CandidateRecord pruned;
  pruned.tile = {256, 128, 8, 3};
  pruned.fate = tuner::CandidateFate::PrunedFit;
  pruned.reason = "does not fit";
  tuner::CandidateRecord screened;
  screened.tile = {128, 32, 8, 2};
  screened.fate = tuner::CandidateFate::Screened;
  screened.screened = true;
  screened.screen.medianUs = 200.0;
  screened.screen.runs = 25;
  tuner::CandidateRecord split = screened;
  split.splits = 8;
  r.candidates = {wrong, timed, pruned, screened, split};

  auto parsed = llvm::json::parse(tuner::candidatesJson(r));
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  const llvm::json::Object *o = parsed->getAsObject();
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->getInteger("protocol").getValueOr(-1), r.protocol);
  EXPECT_EQ(o->getString("winner"), llvm::StringRef("bm128.bn64.w8.s2"));
  ASSERT_NE(o->getObject("measure"), nullptr);
  ASSERT_NE(o->getObject("screen"), nullptr);
  const llvm::json::Array *c = o->getArray("candidates");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->size(), 5u);
  EXPECT_EQ((*c)[0].getAsObject()->getString("fate"), llvm::StringRef("wrong"));
  EXPECT_EQ((*c)[0].getAsObject()->getNumber("max_error").getValueOr(-1), 1.5);
  EXPECT_EQ((*c)[1].getAsObject()->getString("fate"), llvm::StringRef("timed"));
  EXPECT_EQ((*c)[1].getAsObject()->getNumber("median_us").getValueOr(-1), 123.457);
  EXPECT_EQ((*c)[1].getAsObject()->getBoolean("winner").getValueOr(false), true);
  EXPECT_EQ((*c)[2].getAsObject()->getString("fate"), llvm::StringRef("pruned-fit"));
  EXPECT_EQ((*c)[2].getAsObject()->getString("reason"), llvm::StringRef("does not fit"));
  EXPECT_EQ((*c)[1].getAsObject()->getNumber("screen_median_us").getValueOr(-1), 126.0)
      << "the mean of the forward and reverse screening passes";
  const llvm::json::Array *passes = (*c)[1].getAsObject()->getArray("screen_pass_us");
  ASSERT_NE(passes, nullptr);
  EXPECT_EQ((*passes)[1].getAsNumber().getValueOr(-1), 127.0);
  const llvm::json::Object *s = (*c)[3].getAsObject();
  EXPECT_EQ(s->getString("fate"), llvm::StringRef("screened"));
  EXPECT_EQ(s->getNumber("screen_median_us").getValueOr(-1), 200.0);
  EXPECT_EQ(s->getInteger("screen_runs").getValueOr(-1), 25);
  EXPECT_FALSE(s->getNumber("median_us").hasValue()) << "screened only: no full timing";
  EXPECT_FALSE(s->getInteger("splits").hasValue()) << "the split heuristic's timing";
  EXPECT_EQ((*c)[4].getAsObject()->getInteger("splits").getValueOr(-1), 8);
  EXPECT_EQ((*c)[4].getAsObject()->getString("tile"), llvm::StringRef("bm128.bn32.w8.s2"));
}

TEST(TuneRecord, ClocksJsonWithAndWithoutNvml) {
  runtime::ClockReading missing;
  missing.reason = "NVML not found";
  auto none = llvm::json::parse(tuner::clocksJson(missing, missing, 1980000));
  ASSERT_TRUE(bool(none));
  EXPECT_EQ(none->getAsObject()->getString("source"), llvm::StringRef("unavailable"));
  EXPECT_EQ(none->getAsObject()->getString("reason"), llvm::StringRef("NVML not found"));
  EXPECT_EQ(none->getAsObject()->getInteger("driver_peak_sm_mhz").getValueOr(-1), 1980);

  runtime::ClockReading before, after;
  before.available = after.available = true;
  before.smMHz = 1755;
  after.smMHz = 1980;
  after.maxSmMHz = 1980;
  auto seen = llvm::json::parse(tuner::clocksJson(before, after, 1980000));
  ASSERT_TRUE(bool(seen));
  EXPECT_EQ(seen->getAsObject()->getString("source"), llvm::StringRef("nvml"));
  EXPECT_EQ(seen->getAsObject()->getInteger("sm_mhz_before").getValueOr(-1), 1755);
  EXPECT_EQ(seen->getAsObject()->getInteger("sm_mhz_after").getValueOr(-1), 1980);
}

TEST(Clocks, ReadingSaysWhyWhenUnavailable) {
  runtime::ClockReading r = runtime::readClocks(0);
  if (r.available) {
    EXPECT_GT(r.smMHz, 0u);
    EXPECT_FALSE(r.pciBusId.empty());
  } else {
    EXPECT_FALSE(r.reason.empty());
  }
  // A device that does not exist is never "available".
  runtime::ClockReading bogus = runtime::readClocks(1000);
  EXPECT_FALSE(bogus.available);
  EXPECT_FALSE(bogus.reason.empty());
}

} // namespace
