// Sets (or, with nullptr, unsets) an environment variable for one scope and restores
// what was there: for tests of code that reads FLASHJIT_* variables.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace flashjit::testing {

class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  const char *name_;
  std::optional<std::string> old_;
};

} // namespace flashjit::testing
