// The runtime module on a real GPU: NVRTC for the device's own target, load, launch
// with more than 48 KB of dynamic shared memory, time it, read properties.
#include "tests/gpu/gpu_skip.h"

#include "runtime/driver.h"
#include "runtime/nvrtc.h"
#include "support/error.h"

#include <gtest/gtest.h>

#include <vector>

namespace flashjit::runtime {
namespace {

#define ASSERT_OK(expr)                                                                   \
  do {                                                                                    \
    if (llvm::Error error_ = (expr))                                                      \
      FAIL() << #expr << ": " << llvm::toString(std::move(error_));                       \
  } while (0)

// Stages the whole input in dynamic shared memory, then writes it reversed and scaled:
// the result is only right if every element really went through the 64 KB buffer.
constexpr const char *kReverseKernel = R"(
extern "C" __global__ void reverse_scale(const float *in, float *out, float factor, int n) {
  extern __shared__ float staged[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) staged[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = staged[n - 1 - i] * factor;
})";

constexpr int kElements = 16384; // 64 KB of floats: above the 48 KB default limit
constexpr unsigned kSharedBytes = kElements * sizeof(float);

TEST(RuntimeGpu, Properties) {
  FLASHJIT_REQUIRE_GPU();
  const DeviceProperties &props = ::flashjit::testing::openTestDevice()->properties();
  EXPECT_FALSE(props.name.empty());
  EXPECT_GT(props.smCount, 0);
  EXPECT_GE(props.ccMajor, 5);
  EXPECT_GT(props.totalMemoryBytes, 0u);
  EXPECT_GT(props.maxSharedPerBlockOptin, 48 * 1024);
  EXPECT_GT(props.maxThreadsPerBlock, 0);
  EXPECT_TRUE(isValidTarget(props.target())) << props.target();
  EXPECT_NE(props.deviceKey().find(".sm"), std::string::npos) << props.deviceKey();
  auto version = driverVersion();
  ASSERT_TRUE(bool(version)) << llvm::toString(version.takeError());
  EXPECT_NE(version->find('.'), std::string::npos);
}

TEST(RuntimeGpu, CompileLoadLaunchWithLargeDynamicSharedMemory) {
  FLASHJIT_REQUIRE_GPU();
  const DeviceProperties &props = ::flashjit::testing::openTestDevice()->properties();
  if (props.maxSharedPerBlockOptin < int(kSharedBytes))
    GTEST_SKIP() << "device allows only " << props.maxSharedPerBlockOptin << " bytes";

  CompileOptions options;
  options.target = props.target();
  auto binary = compile(kReverseKernel, options);
  ASSERT_TRUE(bool(binary)) << llvm::toString(binary.takeError());
  auto module = Module::load(binary->cubin);
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  auto kernel = (*module)->kernel("reverse_scale");
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());

  std::vector<float> input(kElements);
  for (int i = 0; i < kElements; ++i)
    input[i] = float(i % 1000) - 500.0f;
  auto in = DeviceBuffer::allocate(kSharedBytes);
  auto out = DeviceBuffer::allocate(kSharedBytes);
  ASSERT_TRUE(in && out) << "allocation failed";
  ASSERT_OK(in->upload(input.data(), kSharedBytes));
  ASSERT_OK(out->fill(0xFF)); // NaN until the kernel writes

  CUdeviceptr inPtr = in->ptr(), outPtr = out->ptr();
  float factor = 2.0f;
  int n = kElements;
  void *params[] = {&inPtr, &outPtr, &factor, &n};

  // Above 48 KB the launch must fail until the limit is raised.
  llvm::Error refused = kernel->launch(1, 1, 1, 256, kSharedBytes, nullptr, params);
  EXPECT_TRUE(bool(refused)) << "a 64 KB launch worked without raising the limit";
  llvm::consumeError(std::move(refused));

  ASSERT_OK(kernel->setMaxDynamicSharedMemory(kSharedBytes));
  auto limit = kernel->attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  ASSERT_TRUE(bool(limit)) << llvm::toString(limit.takeError());
  EXPECT_EQ(*limit, int(kSharedBytes));

  auto timer = EventTimer::create();
  ASSERT_TRUE(bool(timer)) << llvm::toString(timer.takeError());
  ASSERT_OK(timer->start(nullptr));
  ASSERT_OK(kernel->launch(1, 1, 1, 256, kSharedBytes, nullptr, params));
  ASSERT_OK(timer->stop(nullptr));
  auto ms = timer->elapsedMs();
  ASSERT_TRUE(bool(ms)) << llvm::toString(ms.takeError());
  EXPECT_GT(*ms, 0.0f);
  EXPECT_LT(*ms, 1000.0f);
  ASSERT_OK(checkContext());

  std::vector<float> result(kElements);
  ASSERT_OK(out->download(result.data(), kSharedBytes));
  int wrong = 0;
  for (int i = 0; i < kElements; ++i)
    wrong += result[i] != input[kElements - 1 - i] * factor;
  EXPECT_EQ(wrong, 0) << "first: " << result[0] << " expected " << input.back() * factor;
}

TEST(RuntimeGpu, StreamsAndMemoryHelpers) {
  FLASHJIT_REQUIRE_GPU();
  auto stream = createStream();
  ASSERT_TRUE(bool(stream)) << llvm::toString(stream.takeError());
  ASSERT_OK(synchronizeStream(*stream));
  destroyStream(*stream);

  auto buffer = DeviceBuffer::allocate(256);
  ASSERT_TRUE(bool(buffer)) << llvm::toString(buffer.takeError());
  ASSERT_OK(buffer->fill(0xAB));
  unsigned char bytes[64] = {};
  ASSERT_OK(buffer->download(bytes, sizeof(bytes), 128));
  for (unsigned char byte : bytes)
    ASSERT_EQ(byte, 0xAB);
  EXPECT_EQ(takeErrorReport(buffer->download(bytes, sizeof(bytes), 250)).code,
            ErrorCode::InvalidValue);
  DeviceBuffer moved = std::move(*buffer);
  EXPECT_EQ(buffer->ptr(), 0u);
  EXPECT_EQ(moved.size(), 256u);
}

TEST(RuntimeGpu, DriverErrorsAreMapped) {
  FLASHJIT_REQUIRE_GPU();
  auto huge = DeviceBuffer::allocate(size_t(1) << 50); // 1 PiB
  ASSERT_FALSE(bool(huge));
  ErrorReport oom = takeErrorReport(huge.takeError());
  EXPECT_EQ(oom.code, ErrorCode::OutOfMemory) << oom.message;
  EXPECT_NE(oom.message.find("cuMemAlloc"), std::string::npos) << oom.message;

  auto garbage = Module::load("this is not a cubin");
  ASSERT_FALSE(bool(garbage));
  ErrorReport bad = takeErrorReport(garbage.takeError());
  EXPECT_EQ(bad.code, ErrorCode::Cuda) << bad.message;
  EXPECT_NE(bad.message.find("cuModuleLoadData failed: CUDA_ERROR_"), std::string::npos)
      << bad.message;

  CompileOptions options;
  options.target = ::flashjit::testing::openTestDevice()->properties().target();
  auto binary = compile(kReverseKernel, options);
  ASSERT_TRUE(bool(binary)) << llvm::toString(binary.takeError());
  auto module = Module::load(binary->cubin);
  ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
  auto missing = (*module)->kernel("no_such_kernel");
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError()).find("no_such_kernel"), std::string::npos);
}

} // namespace
} // namespace flashjit::runtime
