// Every handle the API has given out and not yet taken back, process-wide. Release
// and destroy check membership before they touch a handle, so a handle freed before
// is reported rather than freed again (unless its memory has since gone to a new
// handle: then the check cannot tell them apart).
#pragma once

#include "llvm/ADT/DenseSet.h"

#include <mutex>

namespace flashjit::api {

class LiveHandles {
public:
  // The process's registry; never destroyed, so calls during exit stay safe.
  static LiveHandles &get();

  void add(const void *handle);
  // False when `handle` is not live (never given out, or taken back already).
  bool remove(const void *handle);
  bool contains(const void *handle) const;

private:
  mutable std::mutex mutex_;
  llvm::DenseSet<const void *> handles_;
};

} // namespace flashjit::api
