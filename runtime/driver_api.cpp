#include "runtime/driver_api.h"

#include "support/error.h"

#include "llvm/Support/DynamicLibrary.h"

namespace flashjit::runtime::detail {

llvm::Expected<std::unique_ptr<DriverApi>> loadDriver(const std::string &path) {
  std::string why;
  auto library = llvm::sys::DynamicLibrary::getPermanentLibrary(path.c_str(), &why);
  if (!library.isValid())
    return makeError(ErrorCode::NoDevice, "no CUDA driver: cannot load {0}: {1}", path, why);
  auto api = std::make_unique<DriverApi>();
  api->path = path;
#define FLASHJIT_RESOLVE(fn)                                                              \
  api->fn = reinterpret_cast<decltype(api->fn)>(                                          \
      library.getAddressOfSymbol(FLASHJIT_STRINGIFY_EXPANDED(fn)));
  FLASHJIT_DRIVER_FUNCTIONS(FLASHJIT_RESOLVE)
#undef FLASHJIT_RESOLVE
  // Without these nothing works or can be explained; the rest are checked per call.
  if (!api->cuInit || !api->cuGetErrorName || !api->cuGetErrorString)
    return makeError(ErrorCode::NoDevice,
                     "no CUDA driver: {0} lacks cuInit/cuGetErrorName/cuGetErrorString", path);
  if (llvm::Error error = cuError(*api, api->cuInit(0), "cuInit"))
    return error;
  return api;
}

llvm::Expected<const DriverApi &> driver() {
  // llvm::Error is move-only, so a failure is kept as code + text and rebuilt per call.
  struct Loaded {
    std::unique_ptr<DriverApi> api;
    ErrorReport failure;
  };
  static const Loaded loaded = [] {
    Loaded result;
    auto api = loadDriver("libcuda.so.1");
    if (api)
      result.api = std::move(*api);
    else
      result.failure = takeErrorReport(api.takeError());
    return result;
  }();
  if (!loaded.api)
    return makeError(loaded.failure.code, loaded.failure.message);
  return *loaded.api;
}

llvm::Error cuError(const DriverApi &api, CUresult result, llvm::StringRef call) {
  if (result == CUDA_SUCCESS)
    return llvm::Error::success();
  const char *name = nullptr, *description = nullptr;
  api.cuGetErrorName(result, &name);
  api.cuGetErrorString(result, &description);
  ErrorCode code = result == CUDA_ERROR_OUT_OF_MEMORY ? ErrorCode::OutOfMemory
                   : result == CUDA_ERROR_NO_DEVICE   ? ErrorCode::NoDevice
                                                      : ErrorCode::Cuda;
  std::string what = name ? name : "CUresult " + std::to_string(result);
  return makeError(code, "{0} failed: {1} ({2})", call, what,
                   description ? description : "no description");
}

llvm::Error missingFunction(const char *name) {
  return makeError(ErrorCode::NotSupported, "the CUDA driver does not export {0}", name);
}

} // namespace flashjit::runtime::detail
