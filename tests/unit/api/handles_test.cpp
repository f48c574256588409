// Handle lifecycle without a GPU: what fj_context_create checks before it needs a
// device, NULL and stale handles everywhere, a kernel released twice, a context
// destroyed with kernels outstanding. Contexts and kernels are built here from their
// parts (api/handles.h) so the real C entry points can be exercised with no device.
#include "api_fixtures.h"

#include "api/handles.h"
#include "api/live_handles.h"

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

using namespace flashjit;
using namespace flashjit::apitest;

namespace {

// A context with no device, registered as live: enough for the lifecycle paths.
fj_context_s *deviceFreeContext() {
  auto *context = new fj_context_s();
  api::LiveHandles::get().add(context);
  return context;
}

fj_kernel_s *kernelOf(fj_context_s *context) {
  auto *kernel = new fj_kernel_s();
  api::adoptKernel(*context, kernel);
  return kernel;
}

bool driverPresent() { return !llvm::errorToBool(runtime::driverAvailable()); }

TEST(ApiContext, CreateRejectsBadOptionsBeforeTouchingADevice) {
  fj_context context = reinterpret_cast<fj_context>(0x1);  // must be reset to NULL
  EXPECT_TRUE(failsWith(fj_context_create(nullptr, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_context_create: ", "context (the output pointer) is NULL"}));

  fj_context_options options;
  fj_context_options_init(&options);
  options.struct_size = 4;
  EXPECT_TRUE(failsWith(fj_context_create(&options, &context), FJ_ERROR_INVALID_VALUE,
                        {"options->struct_size is 4"}));
  EXPECT_EQ(context, nullptr);

  fj_context_options_init(&options);
  options.tune_mode = 9;
  EXPECT_TRUE(failsWith(fj_context_create(&options, &context), FJ_ERROR_INVALID_VALUE,
                        {"options->tune_mode is 9", "FJ_TUNE_CACHED"}));

  fj_context_options_init(&options);
  options.tuning_budget_seconds = -1;
  EXPECT_TRUE(failsWith(fj_context_create(&options, &context), FJ_ERROR_INVALID_VALUE,
                        {"options->tuning_budget_seconds is -1"}));

  fj_context_options_init(&options);
  options.num_shipped_cache_paths = 2;
  EXPECT_TRUE(failsWith(fj_context_create(&options, &context), FJ_ERROR_INVALID_VALUE,
                        {"options->shipped_cache_paths is NULL", "2"}));

  const char *paths[] = {"/tmp/a.sqlite", nullptr};
  options.shipped_cache_paths = paths;
  EXPECT_TRUE(failsWith(fj_context_create(&options, &context), FJ_ERROR_INVALID_VALUE,
                        {"options->shipped_cache_paths[1] is NULL"}));

  fj_context_options_init(&options);
  options.num_shipped_cache_paths = -1;
  EXPECT_TRUE(failsWith(fj_context_create(&options, &context), FJ_ERROR_INVALID_VALUE,
                        {"options->num_shipped_cache_paths is -1"}));

  fj_context_options_init(&options);
  options.device = -2;
  EXPECT_TRUE(failsWith(fj_context_create(&options, &context), FJ_ERROR_INVALID_VALUE,
                        {"options->device is -2"}));
  EXPECT_EQ(context, nullptr);
}

TEST(ApiContext, BadTuneModeInTheEnvironmentIsReported) {
  ::setenv("FLASHJIT_TUNE", "sometimes", 1);
  fj_context context = nullptr;
  fj_status status = fj_context_create(nullptr, &context);  // FJ_TUNE_AUTO reads it
  ::unsetenv("FLASHJIT_TUNE");
  EXPECT_TRUE(failsWith(status, FJ_ERROR_INVALID_VALUE, {"FLASHJIT_TUNE", "sometimes"}));
  EXPECT_EQ(context, nullptr);
}

TEST(ApiContext, NoDriverIsNoDevice) {
  if (driverPresent())
    GTEST_SKIP() << "a CUDA driver is present: the no-driver path cannot be seen here";
  fj_context context = nullptr;
  EXPECT_TRUE(failsWith(fj_context_create(nullptr, &context), FJ_ERROR_NO_DEVICE,
                        {"fj_context_create: ", "no CUDA driver"}));
  EXPECT_EQ(context, nullptr);
}

TEST(ApiContext, NullAndStaleContexts) {
  int notAHandle = 0;
  auto *bogus = reinterpret_cast<fj_context>(&notAHandle);
  fj_attention_desc desc = validDesc();
  fj_kernel kernel = reinterpret_cast<fj_kernel>(0x1);
  EXPECT_TRUE(failsWith(fj_kernel_get(nullptr, &desc, &kernel), FJ_ERROR_INVALID_VALUE,
                        {"fj_kernel_get: context is NULL"}));
  EXPECT_EQ(kernel, nullptr);
  EXPECT_TRUE(failsWith(fj_kernel_get(bogus, &desc, &kernel), FJ_ERROR_INVALID_VALUE,
                        {"is not a live context"}));
  EXPECT_TRUE(failsWith(fj_context_destroy(nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_context_destroy: context is NULL"}));
  EXPECT_TRUE(failsWith(fj_context_destroy(bogus), FJ_ERROR_INVALID_VALUE,
                        {"is not a live context"}));
  struct fj_context_info info;
  info.struct_size = sizeof(info);
  EXPECT_TRUE(failsWith(fj_context_info(nullptr, &info), FJ_ERROR_INVALID_VALUE,
                        {"context is NULL"}));
  EXPECT_TRUE(failsWith(fj_kernel_get(bogus, &desc, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"kernel (the output pointer) is NULL"}));
}

TEST(ApiContext, DestroyWithKernelsOutstandingIsRefusedThenWorks) {
  fj_context_s *context = deviceFreeContext();
  fj_kernel_s *a = kernelOf(context);
  fj_kernel_s *b = kernelOf(context);
  EXPECT_TRUE(failsWith(fj_context_destroy(context), FJ_ERROR_INVALID_VALUE,
                        {"context has 2 kernel(s) outstanding", "release them first"}));
  // Refused means intact: still live, still counting.
  EXPECT_TRUE(api::LiveHandles::get().contains(context));
  EXPECT_EQ(context->outstanding, 2);
  EXPECT_TRUE(succeeds(fj_kernel_release(a)));
  EXPECT_TRUE(failsWith(fj_context_destroy(context), FJ_ERROR_INVALID_VALUE,
                        {"context has 1 kernel(s) outstanding"}));
  EXPECT_TRUE(succeeds(fj_kernel_release(b)));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
  EXPECT_FALSE(api::LiveHandles::get().contains(context));
  // Destroyed twice: caught without touching the freed memory.
  EXPECT_TRUE(failsWith(fj_context_destroy(context), FJ_ERROR_INVALID_VALUE,
                        {"is not a live context"}));
}

TEST(ApiKernel, ReleasedTwiceIsCaught) {
  fj_context_s *context = deviceFreeContext();
  fj_kernel_s *kernel = kernelOf(context);
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));
  EXPECT_TRUE(failsWith(fj_kernel_release(kernel), FJ_ERROR_INVALID_VALUE,
                        {"fj_kernel_release: ", "is not a live kernel", "released twice"}));
  EXPECT_EQ(context->outstanding, 0) << "a double release must not be counted";
  EXPECT_TRUE(failsWith(fj_kernel_release(nullptr), FJ_ERROR_INVALID_VALUE,
                        {"kernel is NULL"}));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}

TEST(ApiKernel, StaleOrNullKernelIsNeverLaunched) {
  fj_attention_desc desc = validDesc();
  fj_forward_args args = validArgs(desc);
  EXPECT_TRUE(failsWith(fj_forward(nullptr, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: kernel is NULL"}));
  // A handle whose magic word says it was released (what fj_kernel_release leaves).
  fj_kernel_s dead;
  dead.magic = api::kDeadMagic;
  EXPECT_TRUE(failsWith(fj_forward(&dead, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"is not a live kernel"}));
  struct fj_kernel_info info;
  info.struct_size = sizeof(info);
  EXPECT_TRUE(failsWith(fj_kernel_info(&dead, &info), FJ_ERROR_INVALID_VALUE,
                        {"fj_kernel_info: ", "is not a live kernel"}));
  fj_variant_info variant;
  variant.struct_size = sizeof(variant);
  EXPECT_TRUE(failsWith(fj_kernel_variant_info(&dead, 0, &variant), FJ_ERROR_INVALID_VALUE,
                        {"is not a live kernel"}));
  const char *source = nullptr;
  EXPECT_TRUE(failsWith(fj_kernel_source(nullptr, 0, &source, nullptr),
                        FJ_ERROR_INVALID_VALUE, {"kernel is NULL"}));
}

TEST(ApiKernel, ForwardChecksArgumentsBeforeAnythingElse) {
  // A live-looking kernel with no variants and no context: argument errors must be
  // reported before dispatch or any device use, and a no-op must do nothing at all.
  fj_kernel_s kernel;
  fj_attention_desc desc = validDesc();
  auto checked = api::checkDesc(&desc);
  ASSERT_TRUE((bool)checked);
  kernel.desc = *checked;
  fj_forward_args args = validArgs(desc);
  args.q_seq_stride = 12;
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: args->q_seq_stride is 12"}));
  EXPECT_TRUE(failsWith(fj_forward(&kernel, nullptr, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"args is NULL"}));
  args = validArgs(desc);
  args.batch = 0;
  EXPECT_TRUE(succeeds(fj_forward(&kernel, &args, nullptr)));
  args.batch = 1;
  EXPECT_TRUE(failsWith(fj_forward(&kernel, &args, nullptr), FJ_ERROR_INTERNAL,
                        {"no variant to dispatch to"}));
}

TEST(ApiKernel, InfoRejectsBadOutputStructs) {
  fj_context_s *context = deviceFreeContext();
  fj_kernel_s *kernel = kernelOf(context);
  struct fj_kernel_info info;
  EXPECT_TRUE(failsWith(fj_kernel_info(kernel, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"info is NULL"}));
  fj_variant_info variant;
  variant.struct_size = sizeof(variant);
  EXPECT_TRUE(failsWith(fj_kernel_variant_info(kernel, 0, &variant), FJ_ERROR_INVALID_VALUE,
                        {"index is 0", "0 variant(s)"}));
  const char *source = nullptr;
  EXPECT_TRUE(failsWith(fj_kernel_source(kernel, -1, &source, nullptr),
                        FJ_ERROR_INVALID_VALUE, {"index is -1"}));
  (void)info;
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}

TEST(ApiKernel, ConcurrentReleaseReleasesOnce) {
  // Many threads racing to release the same handles: exactly one wins each.
  fj_context_s *context = deviceFreeContext();
  std::vector<fj_kernel_s *> kernels;
  for (int i = 0; i < 64; ++i)
    kernels.push_back(kernelOf(context));
  std::vector<int> wins(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (fj_kernel_s *kernel : kernels)
        if (fj_kernel_release(kernel) == FJ_SUCCESS)
          ++wins[t];
    });
  for (std::thread &thread : threads)
    thread.join();
  int total = 0;
  for (int w : wins)
    total += w;
  EXPECT_EQ(total, 64);
  EXPECT_EQ(context->outstanding, 0);
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}

} // namespace

namespace {
TEST(ApiKernel, GetOnAContextWithoutDeviceFailsCleanly) {
  // Only reachable through a broken context, but it must not crash either.
  fj_context_s *context = deviceFreeContext();
  fj_attention_desc desc = validDesc();
  fj_kernel kernel = nullptr;
  EXPECT_TRUE(failsWith(fj_kernel_get(context, &desc, &kernel), FJ_ERROR_INTERNAL,
                        {"has no device"}));
  EXPECT_EQ(kernel, nullptr);
  desc.head_dim = 100;  // the description is still checked first
  EXPECT_TRUE(failsWith(fj_kernel_get(context, &desc, &kernel), FJ_ERROR_NOT_SUPPORTED,
                        {"fj_kernel_get: desc->head_dim is 100"}));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}
} // namespace
