// Elapsed wall time, for progress lines and reports.
#pragma once

#include <chrono>

namespace flashjit {

inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace flashjit
