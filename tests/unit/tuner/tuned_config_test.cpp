// The tuning row's config: a tile, and for decode the split count tuned with it
// (tuner/tuned_config.h). Rows of every other family, and decode rows that keep the
// heuristic, are a tile key alone, as before protocol 3 (no GPU).
#include "tuner/decode_kernel.h"
#include "tuner/tuned_config.h"

#include <gtest/gtest.h>

using namespace flashjit;
using tuner::TunedConfig;

TEST(TunedConfig, ATileAloneKeepsItsKey) {
  auto config = TunedConfig::parse("bm128.bn64.w8.s2");
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->tile, (generator::TileConfig{128, 64, 8, 2}));
  EXPECT_EQ(config->splits, 0);
  EXPECT_EQ(config->key(), "bm128.bn64.w8.s2");
}

TEST(TunedConfig, SplitCountRoundTrips) {
  for (int splits : {1, 8, 37, tuner::kMaxDecodeSplits}) {
    TunedConfig config{{16, 64, 4, 2}, splits};
    auto parsed = TunedConfig::parse(config.key());
    ASSERT_TRUE(bool(parsed)) << config.key() << ": " << llvm::toString(parsed.takeError());
    EXPECT_EQ(*parsed, config);
  }
  EXPECT_EQ((TunedConfig{{16, 64, 4, 2}, 8}).key(), "bm16.bn64.w4.s2+splits8");
}

TEST(TunedConfig, BadSuffixesAreClearErrors) {
  for (const char *bad : {"bm16.bn64.w4.s2+", "bm16.bn64.w4.s2+splits", "bm16.bn64.w4.s2+splits0",
                          "bm16.bn64.w4.s2+splits129", "bm16.bn64.w4.s2+splits-1",
                          "bm16.bn64.w4.s2+stages8", "bm16.bn64.w4.s2+splits8+splits8",
                          "bm16.bn64.w4+splits8", "+splits8"}) {
    auto parsed = TunedConfig::parse(bad);
    ASSERT_FALSE(bool(parsed)) << bad;
    std::string message = llvm::toString(parsed.takeError());
    EXPECT_NE(message.find("expected"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("bm16.bn64.w4.s2"), std::string::npos)
        << bad << ": the message shows a well-formed config: " << message;
  }
}
