// For the C API's GPU tests: a context that compiles the heuristic tile without tuning
// and keeps no cache on disk, created and destroyed with the test (failures reported).
#pragma once

#include "flashjit/flashjit.h"

#include <gtest/gtest.h>

namespace flashjit::apitest {

struct HeuristicContext {
  fj_context handle = nullptr;
  HeuristicContext() {
    fj_context_options options;
    fj_context_options_init(&options);
    options.tune_mode = FJ_TUNE_HEURISTIC;
    options.user_cache_path = "";
    EXPECT_EQ(fj_context_create(&options, &handle), FJ_SUCCESS) << fj_last_error_message();
  }
  ~HeuristicContext() {
    if (handle) {
      EXPECT_EQ(fj_context_destroy(handle), FJ_SUCCESS) << fj_last_error_message();
    }
  }
};

} // namespace flashjit::apitest
