#include "runtime/context.h"

#include "runtime/driver_api.h"
#include "support/error.h"

#include "llvm/Support/DynamicLibrary.h"

namespace flashjit::runtime {

llvm::Expected<CUcontext> currentContext() {
  auto api = detail::driver();
  if (!api)
    return api.takeError();
  // cuCtxGetCurrent is not among the driver functions driver_api.h resolves; take it
  // from the same (already loaded) library.
  using Fn = decltype(&::cuCtxGetCurrent);
  static const Fn getCurrent = [&]() -> Fn {
    auto library = llvm::sys::DynamicLibrary::getPermanentLibrary(api->path.c_str());
    return library.isValid() ? reinterpret_cast<Fn>(library.getAddressOfSymbol("cuCtxGetCurrent"))
                             : nullptr;
  }();
  if (!getCurrent)
    return detail::missingFunction("cuCtxGetCurrent");
  CUcontext context = nullptr;
  if (llvm::Error err = detail::cuError(*api, getCurrent(&context), "cuCtxGetCurrent"))
    return std::move(err);
  return context;
}

} // namespace flashjit::runtime
