// Shared by the GPU tests: one device for the whole test binary, and a macro that
// skips a test (with the driver's own explanation) when there is none.
//
//   TEST(MyGpuTest, Works) {
//     FLASHJIT_REQUIRE_GPU();
//     runtime::Device &device = *flashjit::testing::openTestDevice();
//     ...
//   }
#pragma once

#include "runtime/driver.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace flashjit::testing {

struct TestDevice {
  std::unique_ptr<runtime::Device> device; // null when there is none
  std::string whyNot;                      // then: the reason, for the skip message
};

// Opened on first use and shared by every test (opening retains the primary
// context, which is slow; the tests must not each pay for it).
inline const TestDevice &testDevice() {
  static const TestDevice shared = [] {
    TestDevice result;
    if (llvm::Error error = runtime::driverAvailable()) {
      result.whyNot = llvm::toString(std::move(error));
      return result;
    }
    auto count = runtime::deviceCount();
    if (!count || *count == 0) {
      result.whyNot = count ? "the CUDA driver reports no device"
                            : llvm::toString(count.takeError());
      return result;
    }
    auto device = runtime::Device::open(0);
    if (device)
      result.device = std::move(*device);
    else
      result.whyNot = "cannot open CUDA device 0: " + llvm::toString(device.takeError());
    return result;
  }();
  return shared;
}

// Device 0, opened once (null without one: use FLASHJIT_REQUIRE_GPU() first). Its
// context is made current on the calling thread.
inline const std::unique_ptr<runtime::Device> &openTestDevice() {
  const TestDevice &shared = testDevice();
  if (shared.device)
    llvm::consumeError(shared.device->makeCurrent());
  return shared.device;
}

} // namespace flashjit::testing

#define FLASHJIT_REQUIRE_GPU()                                                            \
  do {                                                                                    \
    if (!::flashjit::testing::openTestDevice())                                           \
      GTEST_SKIP() << "no GPU: " << ::flashjit::testing::testDevice().whyNot;             \
  } while (0)
