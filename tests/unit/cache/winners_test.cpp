// Winners files (cache/winners.h): rows out of a cache as JSON and back, every measured
// field intact; malformed files are errors that name the winner and the field.
#include "cache/winners.h"

#include "tests/unit/cache/open_cache.h"

#include <gtest/gtest.h>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;

namespace {

std::vector<TuningRow> sampleRows() {
  std::vector<TuningRow> rows;
  for (int i = 0; i < 3; ++i) {
    TuningRow t = makeTuning(makeKey(i), makeBinary(i), 12.25 + i, i);
    t.tunedAt = 1764000000 + i;
    t.flashjitVersion = "0.2.0";
    rows.push_back(t);
  }
  rows[2].candidatesJson = "not json, kept as text";
  rows[1].clocksJson = "";
  rows[0].codeSha256 = std::string(64, 'c');
  rows[0].carriedFrom = std::string(64, '0');
  rows[1].codeSha256 = std::string(64, 'd');
  return rows;
}

} // namespace

TEST(CacheWinners, JsonRoundTripKeepsEveryField) {
  std::vector<TuningRow> rows = sampleRows();
  std::string text = winnersToJson(rows);
  auto back = winnersFromJson(text, "w.json");
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  ASSERT_EQ(back->size(), rows.size());
  for (const TuningRow &original : rows) {
    auto match = llvm::find_if(*back, [&](const TuningRow &r) {
      return r.key.text() == original.key.text();
    });
    ASSERT_NE(match, back->end()) << original.key.text();
    EXPECT_TRUE(sameTuning(*match, original)) << original.key.text();
    EXPECT_EQ(match->tunedAt, original.tunedAt);
    EXPECT_EQ(match->flashjitVersion, original.flashjitVersion);
    EXPECT_EQ(match->codeSha256, original.codeSha256);
    EXPECT_EQ(match->carriedFrom, original.carriedFrom);
  }
  // A row without a code stamp writes neither field (files written before them stay
  // byte for byte the same through a merge).
  EXPECT_EQ(winnersToJson({rows[2]}).find("code_sha256"), std::string::npos);
  EXPECT_EQ(winnersToJson({rows[2]}).find("carried_from"), std::string::npos);
  // Sorted by key text, so the same rows give the same file.
  std::reverse(rows.begin(), rows.end());
  EXPECT_EQ(winnersToJson(rows), text);
  EXPECT_NE(text.find("\"us\":12.5"), std::string::npos) << "JSON columns stay JSON, on one line";
  EXPECT_NE(text.find(R"("clocks": "{\"sm_mhz\":1980)"), std::string::npos)
      << "text that would not come back the same stays a string";
}

TEST(CacheWinners, MalformedFilesAreClearErrors) {
  auto says = [](llvm::StringRef text, llvm::StringRef expected) {
    auto rows = winnersFromJson(text, "w.json");
    if (rows) {
      ADD_FAILURE() << "accepted: " << text.str();
      return;
    }
    std::string message = llvm::toString(rows.takeError());
    EXPECT_NE(message.find(expected.str()), std::string::npos) << message;
  };
  says("{", "w.json: not JSON");
  says("[]", "not a flashjit winners file");
  says(R"({"format":"flashjit-winners","version":9,"winners":[]})", "version 9");
  says(R"({"format":"flashjit-winners","version":1})", "no \"winners\" array");
  std::string good = winnersToJson({sampleRows()[0]});
  std::string noConfig = good;
  noConfig.replace(noConfig.find("\"config\": \"bm128"), 8, "\"konfig\"");
  says(noConfig, "winner 0: \"config\" is missing");
  std::string badMedian = good;
  size_t at = badMedian.find("\"median_us\": ");
  badMedian.replace(at, 13, "\"median_us\": \"fast\", \"x\": ");
  says(badMedian, "\"median_us\"");
  std::string badStamp = winnersToJson({sampleRows()[2]}); // a row without a stamp
  at = badStamp.find("\"median_us\": ");
  badStamp.replace(at, 13, "\"code_sha256\": 7, \"median_us\": ");
  says(badStamp, "winner 0: \"code_sha256\"");
}

TEST(CacheWinners, WinnersForDeviceKeysFirstRowPerKey) {
  std::unique_ptr<Cache> cache = openCache("");
  ASSERT_TRUE(cache);
  BinaryRow b = makeBinary(1);
  TuningRow h200 = makeTuning(makeKey(1, {}, "NVIDIA_H200.sm90.132sm"), b);
  TuningRow h100 = makeTuning(makeKey(1, {}, "NVIDIA_H100.sm90.132sm"), b);
  ASSERT_FALSE(cache->publish(&b, &h200));
  ASSERT_FALSE(cache->publish(nullptr, &h100));
  auto only = winnersFor(*cache, {"NVIDIA_H100.sm90.132sm"});
  ASSERT_TRUE(bool(only));
  ASSERT_EQ(only->size(), 1u);
  EXPECT_EQ((*only)[0].key.deviceKey, "NVIDIA_H100.sm90.132sm");
  auto all = winnersFor(*cache, {});
  ASSERT_TRUE(bool(all));
  EXPECT_EQ(all->size(), 2u);
}

TEST(CacheWinners, MergeKeepsTheFasterRowPerKeyAndNamesConflicts) {
  std::vector<TuningRow> a = sampleRows(), b = sampleRows();
  b[0].medianUs = a[0].medianUs - 1; // faster, same winner
  b[1].config = "bm64.bn64.w4.s2";   // another winner, slower
  b[1].medianUs = a[1].medianUs + 5;
  TuningRow onlyInB = makeTuning(makeKey(7), makeBinary(7), 3.5, 7);
  b.push_back(onlyInB);
  WinnersMerge merged = mergeWinners({a, b});
  ASSERT_EQ(merged.rows.size(), 4u);
  auto row = [&](const TuningRow &like) {
    return *llvm::find_if(merged.rows,
                          [&](const TuningRow &r) { return r.key.text() == like.key.text(); });
  };
  EXPECT_EQ(row(a[0]).medianUs, b[0].medianUs) << "the faster measurement";
  EXPECT_EQ(row(a[1]).config, a[1].config) << "the faster winner";
  EXPECT_EQ(row(a[2]).medianUs, a[2].medianUs) << "a tie keeps the earlier input";
  EXPECT_TRUE(sameTuning(row(onlyInB), onlyInB));
  ASSERT_EQ(merged.conflicts.size(), 1u) << "only a different winner is a conflict";
  EXPECT_NE(merged.conflicts[0].find(a[1].key.text()), std::string::npos) << merged.conflicts[0];
  EXPECT_NE(merged.conflicts[0].find("bm64.bn64.w4.s2"), std::string::npos);
  EXPECT_TRUE(mergeWinners({}).rows.empty());
}
