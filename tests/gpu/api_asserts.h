// Assertions for the C API's GPU tests: a call that must succeed (its status and the
// thread's message on failure), and an llvm::Expected unwrapped.
#pragma once

#include "flashjit/flashjit.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#define FJ_ASSERT_OK(call)                                                               \
  do {                                                                                   \
    fj_status status_ = (call);                                                          \
    ASSERT_EQ(status_, FJ_SUCCESS) << #call << ": " << fj_status_string(status_) << ": " \
                                   << fj_last_error_message();                           \
  } while (0)

#define FJ_EXPECT_OK(call)                                                               \
  do {                                                                                   \
    fj_status status_ = (call);                                                          \
    EXPECT_EQ(status_, FJ_SUCCESS) << #call << ": " << fj_status_string(status_) << ": " \
                                   << fj_last_error_message();                           \
  } while (0)

// Unwraps an llvm::Expected in a test, failing it with the error's message.
#define FJ_ASSERT_VALUE(var, expr)                                                       \
  auto var = (expr);                                                                     \
  ASSERT_TRUE((bool)var) << llvm::toString(var.takeError())
