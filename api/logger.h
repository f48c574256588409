// Where the library's messages go: the context's log callback, else warnings and
// errors to stderr (progress is dropped so that a quiet service stays quiet).
#pragma once

#include "flashjit/flashjit.h"

#include "llvm/ADT/StringRef.h"

namespace flashjit::api {

struct Logger {
  fj_log_callback callback = nullptr;
  void *userData = nullptr;

  void operator()(fj_log_level level, llvm::StringRef message) const;
};

} // namespace flashjit::api
