#include "cache/cache.h"

#include "support/env.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <dlfcn.h>

namespace flashjit::cache {

std::string defaultUserCachePath() {
  if (std::optional<std::string> explicitPath = getEnv("FLASHJIT_CACHE"))
    return *explicitPath; // "" turns persistence off
  llvm::SmallString<256> path;
  // The XDG base-directory spec says to ignore relative values.
  std::optional<std::string> xdg = getEnv("XDG_CACHE_HOME");
  if (xdg && llvm::sys::path::is_absolute(*xdg)) {
    path = *xdg;
  } else {
    if (!llvm::sys::path::home_directory(path))
      return ""; // no home: nowhere to persist
    llvm::sys::path::append(path, ".cache");
  }
  llvm::sys::path::append(path, "flashjit", "cache.sqlite");
  return std::string(path);
}

namespace {

// The file this code was loaded from: libflashjit.so when it is in the shared library,
// else the executable (dladdr names a main program only by its argv[0], which may not be
// a path, so that case asks the system for the executable instead).
std::string thisBinary() {
  static const int anchor = 0;
  Dl_info info{};
  if (dladdr(&anchor, &info) && info.dli_fname && llvm::StringRef(info.dli_fname).contains('/')) {
    llvm::SmallString<256> real;
    if (!llvm::sys::fs::real_path(info.dli_fname, real))
      return std::string(real);
  }
  return llvm::sys::fs::getMainExecutable(nullptr, const_cast<int *>(&anchor));
}

} // namespace

std::vector<std::string> installedSystemCachePaths() {
  std::string binary = thisBinary();
  if (binary.empty())
    return {};
  // <prefix>/lib, <prefix>/bin, <build>/api: one level up; a multiarch libdir
  // (<prefix>/lib/x86_64-linux-gnu): two.
  std::vector<std::string> paths;
  llvm::SmallString<256> dir(llvm::sys::path::parent_path(binary));
  for (int up = 1; up <= 2 && !dir.empty(); ++up) {
    dir = llvm::sys::path::parent_path(dir);
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "share", "flashjit", "system.sqlite");
    paths.push_back(std::string(path));
  }
  return paths;
}

std::vector<std::string> defaultSystemCachePaths() {
  std::vector<std::string> paths;
  if (std::optional<std::string> explicitPaths = getEnv("FLASHJIT_SYSTEM_CACHE")) {
    llvm::SmallVector<llvm::StringRef, 4> parts;
    llvm::StringRef(*explicitPaths).split(parts, ':', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef part : parts)
      paths.push_back(part.str()); // a named file that is missing is warned about
    return paths;
  }
  for (const std::string &installed : installedSystemCachePaths())
    if (llvm::sys::fs::is_regular_file(installed)) {
      paths.push_back(installed);
      break;
    }
  return paths;
}

} // namespace flashjit::cache
