#include "cache/cache.h"

#include "support/env.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

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

} // namespace flashjit::cache
