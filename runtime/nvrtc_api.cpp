#include "runtime/nvrtc_api.h"

#include "support/env.h"
#include "support/error.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <dlfcn.h>
#include <link.h>

namespace flashjit::runtime::detail {
namespace {

// The file of the library the dynamic loader has under `name`, when one is loaded.
std::optional<std::string> loadedFile(const std::string &name) {
  void *handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!handle)
    return std::nullopt;
  std::optional<std::string> file;
  link_map *map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
    file = map->l_name;
  dlclose(handle); // drops only the reference RTLD_NOLOAD took
  return file;
}

// Where a CUDA toolkit keeps its libraries, most specific first.
std::vector<std::string> toolkitLibraryDirs() {
  std::vector<std::string> roots;
  for (const char *variable : {"CUDA_HOME", "CUDA_PATH"})
    if (std::optional<std::string> root = getEnv(variable); root && !root->empty())
      roots.push_back(*root);
  roots.push_back("/usr/local/cuda");
  std::vector<std::string> dirs;
#if defined(__aarch64__)
  const char *targetDir = "targets/sbsa-linux/lib";
#else
  const char *targetDir = "targets/x86_64-linux/lib";
#endif
  for (const std::string &root : roots)
    for (const char *sub : {"lib64", targetDir}) {
      llvm::SmallString<256> dir(root);
      llvm::sys::path::append(dir, sub);
      dirs.push_back(std::string(dir));
    }
  return dirs;
}

// Every function of NVRTC from a loaded library, by name.
template <typename Lookup>
llvm::Expected<std::unique_ptr<NvrtcApi>> resolve(const std::string &path, Lookup lookup) {
  auto api = std::make_unique<NvrtcApi>();
  api->path = path;
#define FLASHJIT_RESOLVE(fn)                                                            \
  api->fn = reinterpret_cast<decltype(api->fn)>(lookup(#fn));                           \
  if (!api->fn)                                                                         \
    return makeError(ErrorCode::NotSupported, "'{0}' is not NVRTC: it lacks {1}", path, #fn);
  FLASHJIT_NVRTC_FUNCTIONS(FLASHJIT_RESOLVE)
#undef FLASHJIT_RESOLVE
  return api;
}

} // namespace

llvm::Expected<std::unique_ptr<NvrtcApi>> loadNvrtc(const std::string &path) {
  std::string why;
  auto library = llvm::sys::DynamicLibrary::getPermanentLibrary(path.c_str(), &why);
  if (!library.isValid())
    return makeError(ErrorCode::NotSupported, "cannot load NVRTC from '{0}': {1}", path, why);
  return resolve(path, [&](const char *name) { return library.getAddressOfSymbol(name); });
}

// sys::DynamicLibrary opens with RTLD_GLOBAL, which would offer this copy's functions to
// every library that binds a symbol later: the other copy's users could then compile
// in ours. RTLD_LOCAL keeps it flashjit's. A loaded NVRTC is never closed.
llvm::Expected<std::unique_ptr<NvrtcApi>> loadNvrtcCopy(const std::string &path) {
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return makeError(ErrorCode::NotSupported, "cannot load NVRTC from '{0}': {1}", path,
                     why ? why : "dlopen failed");
  }
  auto api = resolve(path, [&](const char *name) { return dlsym(handle, name); });
  if (!api)
    dlclose(handle);
  return api;
}

std::string defaultNvrtcPath() {
  std::optional<std::string> path = getEnv("FLASHJIT_NVRTC_LIBRARY");
  return path && !path->empty() ? *path : "libnvrtc.so.13";
}

std::optional<std::string> separateCopyOf(const std::string &name, std::string *inUseOut) {
  std::optional<std::string> inUse = loadedFile(name);
  if (inUseOut)
    *inUseOut = inUse.value_or("");
  if (!inUse)
    return std::nullopt;
  for (const std::string &dir : toolkitLibraryDirs()) {
    llvm::SmallString<256> candidate(dir);
    llvm::sys::path::append(candidate, name);
    bool same = true;
    if (llvm::sys::fs::exists(candidate) &&
        !llvm::sys::fs::equivalent(candidate, *inUse, same) && !same)
      return std::string(candidate);
  }
  return std::nullopt;
}

llvm::Expected<const NvrtcApi &> nvrtc() {
  // llvm::Error is move-only, so a failure is kept as text and rebuilt per call.
  struct Loaded {
    std::unique_ptr<NvrtcApi> api;
    std::string failure;
  };
  static const Loaded loaded = [] {
    Loaded result;
    std::string path = defaultNvrtcPath();
    bool named = path.find('/') != std::string::npos; // FLASHJIT_NVRTC_LIBRARY's file
    std::string inUse;
    std::optional<std::string> separate;
    if (named)
      inUse = loadedFile(path).value_or("");
    else
      separate = separateCopyOf(path, &inUse);
    std::string copyFailure;
    if (separate) {
      auto copy = loadNvrtcCopy(*separate);
      if (copy) {
        result.api = std::move(*copy);
        result.api->ownCopy = true;
        return result;
      }
      copyFailure = llvm::toString(copy.takeError());
    }
    auto api = loadNvrtc(path);
    if (!api) {
      result.failure = llvm::toString(api.takeError());
      return result;
    }
    result.api = std::move(*api);
    result.api->ownCopy = inUse.empty();
    if (result.api->ownCopy)
      return result;
    std::string &why = result.api->sharedBecause;
    why = llvm::formatv("another library loaded {0} first", inUse).str();
    if (!copyFailure.empty())
      why += ", and the other copy did not load: " + copyFailure;
    else if (!named)
      why += ", and no other copy was found under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda "
             "(FLASHJIT_NVRTC_LIBRARY can name one)";
    return result;
  }();
  if (!loaded.api)
    return makeError(ErrorCode::NotSupported, loaded.failure);
  return *loaded.api;
}

} // namespace flashjit::runtime::detail
