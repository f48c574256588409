// Reading the environment, in one place so the names are easy to find.
#pragma once

#include <optional>
#include <string>

namespace flashjit {

// The variable's value, or nothing when it is unset (an empty value is returned as "").
std::optional<std::string> getEnv(const char *name);

// The version of this build, e.g. "0.1.0".
const char *flashjitVersion();

} // namespace flashjit
