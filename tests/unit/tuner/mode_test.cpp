// Tune modes and $FLASHJIT_TUNE (no GPU).
#include "tuner/mode.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace flashjit::tuner;

namespace {

TEST(TuneMode, NamesRoundTrip) {
  for (TuneMode m : {TuneMode::Default, TuneMode::Cached, TuneMode::Heuristic,
                     TuneMode::Exhaustive}) {
    auto parsed = parseTuneMode(tuneModeName(m));
    ASSERT_TRUE(bool(parsed));
    EXPECT_EQ(*parsed, m);
  }
  auto upper = parseTuneMode("CACHED");
  ASSERT_TRUE(bool(upper));
  EXPECT_EQ(*upper, TuneMode::Cached);
  auto bad = parseTuneMode("fast");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("exhaustive"), std::string::npos);
}

TEST(TuneMode, EnvironmentOverridesTheFallback) {
  ::unsetenv("FLASHJIT_TUNE");
  auto unset = tuneModeFromEnv(TuneMode::Heuristic);
  ASSERT_TRUE(bool(unset));
  EXPECT_EQ(*unset, TuneMode::Heuristic);

  ::setenv("FLASHJIT_TUNE", "cached", 1);
  auto cached = tuneModeFromEnv(TuneMode::Default);
  ASSERT_TRUE(bool(cached));
  EXPECT_EQ(*cached, TuneMode::Cached);

  ::setenv("FLASHJIT_TUNE", "sometimes", 1);
  auto bad = tuneModeFromEnv(TuneMode::Default);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("FLASHJIT_TUNE"), std::string::npos);

  ::setenv("FLASHJIT_TUNE", "", 1);
  auto empty = tuneModeFromEnv(TuneMode::Exhaustive);
  ASSERT_TRUE(bool(empty));
  EXPECT_EQ(*empty, TuneMode::Exhaustive);
  ::unsetenv("FLASHJIT_TUNE");
}

} // namespace
