// What the checkers of every operation share: random inputs, downloads, 16-bit
// conversions, and reference kernels built once per device context.
#pragma once

#include "generator/spec.h"
#include "runtime/context.h"
#include "runtime/driver.h"
#include "tuner/forward_problem.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace flashjit::tuner {

// A 16-bit value of the dtype as a float, and back (round to nearest even).
float halfToFloat(generator::DType dtype, uint16_t bits);
uint16_t floatToHalf(generator::DType dtype, float value);

// Fills a buffer of 16-bit (or e4m3) values with normal(0, 1) samples of the dtype: real inputs,
// never zeros, drawn from `rng` (seeded by the caller, so a check is repeatable).
llvm::Error fillNormal(runtime::DeviceBuffer &buffer, generator::DType dtype,
                       std::mt19937_64 &rng);

// Element offsets of a [rows, heads, dim] tensor of the problem, in a stable order:
// every row of every sequence (the query rows, or with `keyRows` the key rows), every
// head, every column. Padding between rows is not part of it.
std::vector<long long> tensorIndices(const ForwardShape &shape, bool keyRows, int heads,
                                     int dim, long long batchStride, long long rowStride,
                                     long long headStride);

// The whole buffer, as values of T.
template <typename T>
llvm::Expected<std::vector<T>> downloadAll(const runtime::DeviceBuffer &buffer) {
  std::vector<T> host(buffer.size() / sizeof(T));
  if (llvm::Error err = buffer.download(host.data(), host.size() * sizeof(T)))
    return std::move(err);
  return std::move(host);
}

// A reference kernel built by `build()` once per `key` in each CUDA context that asks (a
// module loaded in one device's context cannot be launched in another's), and kept for
// the process's life. The map is never destroyed: its destructor ran at exit, after the
// context had gone, and unloading a module then crashed inside the driver (`flashjit
// bench` of e4m3 and bf16, H100); the driver frees the modules with their context.
template <typename Kernel, typename Build>
llvm::Expected<const Kernel *> referenceInContext(const std::string &key, Build build) {
  static std::mutex mutex;
  static auto &kernels = *new std::map<std::string, std::unique_ptr<Kernel>>;
  llvm::Expected<CUcontext> context = runtime::currentContext();
  if (!context)
    return context.takeError();
  std::lock_guard<std::mutex> lock(mutex);
  auto &slot = kernels[llvm::formatv("{0}.{1}", key, (const void *)*context).str()];
  if (!slot) {
    llvm::Expected<std::unique_ptr<Kernel>> built = build();
    if (!built)
      return built.takeError();
    slot = std::move(*built);
  }
  return slot.get();
}

} // namespace flashjit::tuner
