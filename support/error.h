// Error helpers shared by every module: a typed error code that the C API maps to
// fj_status, carried inside llvm::Error so callers keep LLVM's checked-error discipline.
#pragma once

#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"

#include <string>
#include <system_error>

namespace flashjit {

// What went wrong, in the categories a caller can act on. Mirrors fj_status.
enum class ErrorCode {
  InvalidValue = 1,  // a bad argument
  NotSupported,      // valid, but this build or device cannot serve it
  NoDevice,          // no CUDA driver or no device
  Compile,           // NVRTC rejected the source
  Cuda,              // a driver call failed
  Cache,             // the SQLite cache failed
  NotFound,          // a cached-mode miss
  OutOfMemory,
  Internal,
};

const std::error_category &flashjitCategory();

inline std::error_code makeErrorCode(ErrorCode code) {
  return {static_cast<int>(code), flashjitCategory()};
}

// llvm::Error with a category and a message.
inline llvm::Error makeError(ErrorCode code, const llvm::Twine &message) {
  return llvm::createStringError(makeErrorCode(code), message);
}

template <typename... Ts>
llvm::Error makeError(ErrorCode code, const char *fmt, Ts &&...values) {
  return llvm::createStringError(makeErrorCode(code),
                                 llvm::formatv(fmt, std::forward<Ts>(values)...).str());
}

// An error taken apart: its category (the first one of ours found, else Internal)
// and its message (all messages joined by "; ").
struct ErrorReport {
  ErrorCode code = ErrorCode::Internal;
  std::string message;
};
ErrorReport takeErrorReport(llvm::Error error);

} // namespace flashjit
