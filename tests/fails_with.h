// failsWith: a C API call's status and the thread's error message, for the API tests
// (unit and GPU).
#pragma once

#include "flashjit/flashjit.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

// The call's status is `expected` and the thread's message contains every fragment.
inline ::testing::AssertionResult failsWith(fj_status status, fj_status expected,
                                            std::initializer_list<const char *> fragments) {
  std::string message = fj_last_error_message();
  if (status != expected)
    return ::testing::AssertionFailure()
           << "status " << fj_status_string(status) << ", expected "
           << fj_status_string(expected) << " (message: \"" << message << "\")";
  for (const char *fragment : fragments)
    if (message.find(fragment) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" does not mention \"" << fragment << "\"";
  return ::testing::AssertionSuccess();
}
