// Opening a cache in the cache unit tests: a cache that fails to open is a test failure
// (and a null pointer), never an exception or a crash.
#pragma once

#include "tests/unit/cache/fixtures.h"

#include <gtest/gtest.h>

#include <optional>

namespace flashjit::cache::testing {

// Warnings go to `warnings` when given, else nowhere (some tests ship user DBs in WAL
// mode on purpose, which warns).
inline std::unique_ptr<Cache> openCache(std::optional<std::string> user,
                                        std::vector<std::string> shipped = {},
                                        Warnings *warnings = nullptr,
                                        bool shippedImmutable = false,
                                        std::vector<std::string> system = {}) {
  CacheOptions options;
  options.userPath = std::move(user);
  options.shippedPaths = std::move(shipped);
  options.systemPaths = std::move(system); // never the environment's: tests are hermetic
  options.shippedImmutable = shippedImmutable;
  options.warn = warnings ? warnings->sink() : [](llvm::StringRef) {};
  llvm::Expected<std::unique_ptr<Cache>> cache = Cache::open(std::move(options));
  if (!cache) {
    ADD_FAILURE() << llvm::toString(cache.takeError());
    return nullptr;
  }
  return std::move(*cache);
}

// A publish that must succeed (a failure is the test's, with the cache's message).
inline void publishOrFail(Cache &cache, const BinaryRow *b, const TuningRow *t) {
  llvm::Error error = cache.publish(b, t);
  ASSERT_FALSE(error) << llvm::toString(std::move(error));
}

} // namespace flashjit::cache::testing
