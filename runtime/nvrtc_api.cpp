#include "runtime/nvrtc_api.h"

#include "support/env.h"
#include "support/error.h"

#include "llvm/Support/DynamicLibrary.h"

namespace flashjit::runtime::detail {

llvm::Expected<std::unique_ptr<NvrtcApi>> loadNvrtc(const std::string &path) {
  std::string why;
  auto library = llvm::sys::DynamicLibrary::getPermanentLibrary(path.c_str(), &why);
  if (!library.isValid())
    return makeError(ErrorCode::NotSupported, "cannot load NVRTC from '{0}': {1}", path, why);
  auto api = std::make_unique<NvrtcApi>();
  api->path = path;
#define FLASHJIT_RESOLVE(fn)                                                            \
  api->fn = reinterpret_cast<decltype(api->fn)>(library.getAddressOfSymbol(#fn));       \
  if (!api->fn)                                                                         \
    return makeError(ErrorCode::NotSupported, "'{0}' is not NVRTC: it lacks {1}", path, #fn);
  FLASHJIT_NVRTC_FUNCTIONS(FLASHJIT_RESOLVE)
#undef FLASHJIT_RESOLVE
  return api;
}

std::string defaultNvrtcPath() {
  std::optional<std::string> path = getEnv("FLASHJIT_NVRTC_LIBRARY");
  return path && !path->empty() ? *path : "libnvrtc.so.13";
}

llvm::Expected<const NvrtcApi &> nvrtc() {
  // llvm::Error is move-only, so a failure is kept as text and rebuilt per call.
  struct Loaded {
    std::unique_ptr<NvrtcApi> api;
    std::string failure;
  };
  static const Loaded loaded = [] {
    Loaded result;
    auto api = loadNvrtc(defaultNvrtcPath());
    if (api)
      result.api = std::move(*api);
    else
      result.failure = llvm::toString(api.takeError());
    return result;
  }();
  if (!loaded.api)
    return makeError(ErrorCode::NotSupported, loaded.failure);
  return *loaded.api;
}

} // namespace flashjit::runtime::detail
