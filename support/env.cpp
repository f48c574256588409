#include "support/env.h"

#include <cstdlib>

namespace flashjit {

std::optional<std::string> getEnv(const char *name) {
  if (const char *value = std::getenv(name))
    return std::string(value);
  return std::nullopt;
}

const char *flashjitVersion() { return FLASHJIT_VERSION_STRING; }

} // namespace flashjit
