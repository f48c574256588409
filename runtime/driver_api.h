// The CUDA Driver API entry points, resolved from libcuda at run time. Internal to
// runtime/: other modules use runtime/driver.h.
#pragma once

#include "llvm/Support/Error.h"

#include <cuda.h>

#include <memory>
#include <string>

namespace flashjit::runtime::detail {

// The functions we use, by their cuda.h names. Passed through a macro, each name is
// expanded by cuda.h's own #defines to the versioned symbol that the header's
// prototype describes (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime ->
// cuEventElapsedTime_v2, ...), so the symbol we look up always matches its type.
#define FLASHJIT_DRIVER_FUNCTIONS(X)                                                      \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                   \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)           \
  X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)            \
  X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuCtxGetDevice)                                                  \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD32Async)                \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                            \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx)      \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)            \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)               \
  X(cuEventElapsedTime) X(cuTensorMapEncodeTiled)

#define FLASHJIT_STRINGIFY_EXPANDED(name) FLASHJIT_STRINGIFY(name)
#define FLASHJIT_STRINGIFY(name) #name

struct DriverApi {
  std::string path;
  // A member per function, named by the expanded symbol (api.cuMemAlloc_v2, which is
  // what `api.cuMemAlloc` reads as after cuda.h's macros). Null when the driver
  // lacks it; calls through FLASHJIT_CU report that.
#define FLASHJIT_DECLARE(fn) decltype(&::fn) fn = nullptr;
  FLASHJIT_DRIVER_FUNCTIONS(FLASHJIT_DECLARE)
#undef FLASHJIT_DECLARE
};

// Loads the driver from `path`, resolves its functions and calls cuInit. Failing to
// load it is ErrorCode::NoDevice with a message starting "no CUDA driver".
llvm::Expected<std::unique_ptr<DriverApi>> loadDriver(const std::string &path);

// The process-wide driver (libcuda.so.1), loaded once on first use (thread-safe); a
// failed load is remembered and reported again on each call.
llvm::Expected<const DriverApi &> driver();

// Success, or the error for `result` of `call`: NoDevice, OutOfMemory or Cuda, with
// the driver's name and description of the result.
llvm::Error cuError(const DriverApi &api, CUresult result, llvm::StringRef call);

// The error for a function that the loaded driver does not export.
llvm::Error missingFunction(const char *name);

// One checked call: FLASHJIT_CU(cuMemAlloc)(&ptr, bytes) loads the driver if needed
// and returns an llvm::Error naming cuMemAlloc when anything fails.
template <typename Fn> struct DriverCall {
  const char *name;
  Fn DriverApi::*member;

  template <typename... Args> llvm::Error operator()(Args... args) const {
    auto api = driver();
    if (!api)
      return api.takeError();
    Fn fn = (*api).*member;
    if (!fn)
      return missingFunction(name);
    return cuError(*api, fn(args...), name);
  }
};

#define FLASHJIT_CU(fn)                                                                   \
  ::flashjit::runtime::detail::DriverCall<decltype(&::fn)> {                              \
    #fn, &::flashjit::runtime::detail::DriverApi::fn                                      \
  }

} // namespace flashjit::runtime::detail
