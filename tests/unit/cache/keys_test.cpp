#include "tests/unit/cache/fixtures.h"
#include "tests/scoped_env.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;
using flashjit::testing::ScopedEnv;

TEST(CacheKeys, TextNamesEveryFieldAndHashIsItsSha256) {
  TuningKey key{"fwd_mma.bf16.d128.dv128.causal.sm90a", "q1024.k1024.bh64",
                "NVIDIA_H200.sm90.132sm", "abc123", 3};
  EXPECT_EQ(key.text(), "fwd_mma.bf16.d128.dv128.causal.sm90a|q1024.k1024.bh64|"
                        "NVIDIA_H200.sm90.132sm|gen=abc123|protocol=3");
  EXPECT_EQ(key.hash(), flashjit::sha256Hex(key.text()));
  TuningKey other = key;
  other.protocolVersion = 4;
  EXPECT_NE(other.hash(), key.hash());
}

TEST(CacheKeys, DefaultUserPathFollowsTheEnvironment) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv cache("FLASHJIT_CACHE", "/srv/kernels.sqlite");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(defaultUserCachePath(), "/srv/kernels.sqlite");
  }
  {
    ScopedEnv cache("FLASHJIT_CACHE", "");
    EXPECT_EQ(defaultUserCachePath(), ""); // persistence off
  }
  ScopedEnv cache("FLASHJIT_CACHE", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(defaultUserCachePath(), "/xdg/flashjit/cache.sqlite");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/ignored");
    EXPECT_EQ(defaultUserCachePath(), "/home/someone/.cache/flashjit/cache.sqlite");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(defaultUserCachePath(), "/home/someone/.cache/flashjit/cache.sqlite");
}
