#include "api/live_handles.h"

namespace flashjit::api {

LiveHandles &LiveHandles::get() {
  static LiveHandles *registry = new LiveHandles();
  return *registry;
}

void LiveHandles::add(const void *handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  handles_.insert(handle);
}

bool LiveHandles::remove(const void *handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  return handles_.erase(handle);
}

bool LiveHandles::contains(const void *handle) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return handles_.count(handle) != 0;
}

} // namespace flashjit::api
