// The driver loader and what works without a GPU: this machine and CI have no
// libcuda.so.1, so the no-driver path is the one exercised here.
#include "runtime/driver.h"
#include "runtime/driver_api.h"
#include "support/error.h"

#include "llvm/Support/DynamicLibrary.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

namespace flashjit::runtime {
namespace {

// Whether libcuda.so.1 could be loaded, asked without keeping it loaded.
bool driverLibraryPresent() {
  void *handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle)
    dlclose(handle);
  return handle != nullptr;
}

void expectNoDriver(llvm::Error error, const char *what) {
  ErrorReport report = takeErrorReport(std::move(error));
  EXPECT_EQ(report.code, ErrorCode::NoDevice) << what << ": " << report.message;
  EXPECT_EQ(llvm::StringRef(report.message).substr(0, 14), "no CUDA driver")
      << what << ": " << report.message;
  EXPECT_NE(report.message.find("libcuda.so.1"), std::string::npos) << report.message;
}

TEST(DriverSymbols, CudaHeaderNamesExpandToVersionedSymbols) {
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuMemAlloc), "cuMemAlloc_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuMemFree), "cuMemFree_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuMemcpyHtoD), "cuMemcpyHtoD_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuMemcpyDtoH), "cuMemcpyDtoH_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuMemsetD8), "cuMemsetD8_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuDeviceTotalMem), "cuDeviceTotalMem_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuDevicePrimaryCtxRelease),
               "cuDevicePrimaryCtxRelease_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuStreamDestroy), "cuStreamDestroy_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuEventDestroy), "cuEventDestroy_v2");
  EXPECT_STREQ(FLASHJIT_STRINGIFY_EXPANDED(cuLaunchKernel), "cuLaunchKernel");
}

TEST(DriverLoader, MissingLibraryIsNoDevice) {
  auto api = detail::loadDriver("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(bool(api));
  expectNoDriver(api.takeError(), "loadDriver");
}

TEST(DriverLoader, LibraryWithoutTheDriverApiIsNoDevice) {
  auto api = detail::loadDriver("libm.so.6");
  ASSERT_FALSE(bool(api));
  ErrorReport report = takeErrorReport(api.takeError());
  EXPECT_EQ(report.code, ErrorCode::NoDevice);
  EXPECT_NE(report.message.find("lacks cuInit"), std::string::npos) << report.message;
}

TEST(DriverLoader, EveryGpuCallFailsWithoutADriver) {
  if (driverLibraryPresent())
    GTEST_SKIP() << "libcuda.so.1 is installed here";
  expectNoDriver(driverAvailable(), "driverAvailable");
  expectNoDriver(deviceCount().takeError(), "deviceCount");
  expectNoDriver(driverVersion().takeError(), "driverVersion");
  expectNoDriver(Device::open(0).takeError(), "Device::open");
  expectNoDriver(DeviceBuffer::allocate(1024).takeError(), "DeviceBuffer::allocate");
  expectNoDriver(Module::load("\x7f" "ELF").takeError(), "Module::load");
  expectNoDriver(EventTimer::create().takeError(), "EventTimer::create");
  expectNoDriver(createStream().takeError(), "createStream");
  expectNoDriver(checkContext(), "checkContext");
  // Asked twice, the remembered failure is reported again.
  expectNoDriver(driverAvailable(), "driverAvailable again");
}

TEST(DeviceBufferWithoutDevice, ZeroBytesIsInvalid) {
  auto buffer = DeviceBuffer::allocate(0);
  ASSERT_FALSE(bool(buffer));
  EXPECT_EQ(takeErrorReport(buffer.takeError()).code, ErrorCode::InvalidValue);
}

TEST(DeviceBufferWithoutDevice, EmptyBufferRejectsOutOfRangeCopies) {
  DeviceBuffer buffer;
  char byte = 0;
  EXPECT_EQ(takeErrorReport(buffer.upload(&byte, 1)).code, ErrorCode::InvalidValue);
  EXPECT_EQ(takeErrorReport(buffer.download(&byte, 1)).code, ErrorCode::InvalidValue);
}

DeviceProperties props(const char *name, int major, int minor, int sms) {
  DeviceProperties p;
  p.name = name;
  p.ccMajor = major;
  p.ccMinor = minor;
  p.smCount = sms;
  return p;
}

TEST(DeviceProperties, TargetIsArchSpecificOnHopperAndBlackwell) {
  EXPECT_EQ(props("NVIDIA H200", 9, 0, 132).target(), "sm_90a");
  EXPECT_EQ(props("NVIDIA B200", 10, 0, 148).target(), "sm_100a");
  EXPECT_EQ(props("NVIDIA A100-SXM4-80GB", 8, 0, 108).target(), "sm_80");
  EXPECT_EQ(props("NVIDIA RTX A6000", 8, 6, 84).target(), "sm_86");
  EXPECT_EQ(props("NVIDIA L4", 8, 9, 58).target(), "sm_89");
  EXPECT_EQ(props("NVIDIA RTX PRO 6000", 12, 0, 188).target(), "sm_120");
}

TEST(DeviceProperties, DeviceKeyNamesNameArchAndSmCount) {
  EXPECT_EQ(props("NVIDIA H200", 9, 0, 132).deviceKey(), "NVIDIA_H200.sm90.132sm");
  EXPECT_EQ(props("NVIDIA H100 80GB HBM3", 9, 0, 132).deviceKey(),
            "NVIDIA_H100_80GB_HBM3.sm90.132sm");
  EXPECT_EQ(props("NVIDIA L4", 8, 9, 58).deviceKey(), "NVIDIA_L4.sm89.58sm");
}

} // namespace
} // namespace flashjit::runtime
