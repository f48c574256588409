// A cache with no user database (nothing on disk): what the tuner tests compile into
// and look up from, so that each test starts empty and leaves nothing behind.
#pragma once

#include "cache/cache.h"

#include <gtest/gtest.h>

#include <memory>

namespace flashjit::testing {

inline std::unique_ptr<cache::Cache> memoryCache() {
  cache::CacheOptions options;
  options.userPath = "";
  options.systemPaths = std::vector<std::string>{}; // hermetic: no installed system DB
  auto c = cache::Cache::open(options);
  EXPECT_TRUE(bool(c)) << llvm::toString(c.takeError());
  return std::move(*c);
}

} // namespace flashjit::testing
