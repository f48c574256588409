// Tuner's private state, shared by tuner.cpp (lookups, loading, dispatch) and
// tune.cpp (the tune itself). Private to tuner/.
#pragma once

#include "tuner/checker.h"
#include "tuner/operation.h"
#include "tuner/tuner.h"
#include "tuner/variants.h"

#include <atomic>
#include <map>
#include <mutex>

namespace flashjit::tuner {

class Tuner::Impl {
public:
  Impl(runtime::Device *device, cache::Cache &cache, TunerOptions options);
  ~Impl();

  runtime::Device *device;
  cache::Cache &cache;
  TunerOptions options;

  // One tune at a time per tuner: timings on one device must not overlap, and a
  // (spec, bucket) asked for by several threads is tuned by the first, found in the
  // cache by the others.
  std::mutex tuneMutex;
  CUstream stream = nullptr;  // created on first tune, under tuneMutex
  // Correctness checkers per spec key (inputs and references made once), under tuneMutex.
  std::map<std::string, std::vector<std::unique_ptr<Checker>>> checkers;
  // Those of the last tune of a spec with tuning args (checkersFor).
  std::vector<std::unique_ptr<Checker>> tuningArgsCheckers;

  // Loaded winners by binary key, shared by every Selection that uses them.
  std::mutex kernelsMutex;
  std::map<std::string, std::shared_ptr<LoadedKernel>> kernels;

  std::atomic<int> compilations{0}, timings{0}, checks{0}, tunes{0};

  void log(llvm::StringRef message) const {
    if (options.log)
      options.log(message);
  }
  llvm::Expected<cache::TuningKey> tuningKey(const generator::KernelSpec &spec,
                                             const Bucket &bucket) const;
  llvm::Error checkSpec(const generator::KernelSpec &spec) const;

  // The variant's kernel, loaded once per binary key (null without a device); with
  // splits > 0, once per bucket too, launching its calls with the count tuned there.
  llvm::Expected<std::shared_ptr<LoadedKernel>> load(const generator::KernelSpec &spec,
                                                    const Variant &variant, int splits = 0,
                                                    const Bucket &bucket = {});
  // The Selection for a cached tuning row (its binary found or compiled for us).
  llvm::Expected<Selection> fromRow(const generator::KernelSpec &spec,
                                    const cache::Found<cache::TuningRow> &row);
  // Heuristic mode: the model's tile for the bucket, compiled, not timed.
  llvm::Expected<Selection> heuristic(const generator::KernelSpec &spec, const Bucket &bucket);
  // Default / exhaustive mode on a miss (tune.cpp). Caller holds tuneMutex.
  llvm::Expected<Selection> tune(const generator::KernelSpec &spec, const Bucket &bucket,
                                 bool exhaustive);

  llvm::Expected<CUstream> tuneStream();
  llvm::Expected<std::vector<Checker *>> checkersFor(const generator::KernelSpec &spec);
};

// The key `kernels` holds a loaded variant under: its binary key, and with a tuned split
// count that count and the bucket it was tuned for (its timing problem's CTAs scale it).
inline std::string loadedKey(const Variant &variant, int splits, const Bucket &bucket) {
  return splits > 0 ? variant.key + "+splits" + std::to_string(splits) + "@" + bucket.key()
                    : variant.key;
}

// A Selection for a built variant, without the kernel.
Selection selectionOf(const generator::KernelSpec &spec, const Bucket &bucket,
                      const Variant &variant, Origin origin);

} // namespace flashjit::tuner
