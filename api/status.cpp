#include "api/status.h"

#include <string>

namespace flashjit::api {
namespace {

// Per thread: the last failure's text, or a literal when building the text failed.
struct LastError {
  std::string text;
  const char *literal = nullptr;
};

LastError &lastError() {
  thread_local LastError error;
  return error;
}

} // namespace

fj_status toStatus(ErrorCode code) {
  switch (code) {
  case ErrorCode::InvalidValue: return FJ_ERROR_INVALID_VALUE;
  case ErrorCode::NotSupported: return FJ_ERROR_NOT_SUPPORTED;
  case ErrorCode::NoDevice: return FJ_ERROR_NO_DEVICE;
  case ErrorCode::Compile: return FJ_ERROR_COMPILE;
  case ErrorCode::Cuda: return FJ_ERROR_CUDA;
  case ErrorCode::Cache: return FJ_ERROR_CACHE;
  case ErrorCode::NotFound: return FJ_ERROR_NOT_FOUND;
  case ErrorCode::OutOfMemory: return FJ_ERROR_OUT_OF_MEMORY;
  case ErrorCode::Internal: return FJ_ERROR_INTERNAL;
  }
  return FJ_ERROR_INTERNAL;
}

const char *lastErrorMessage() {
  const LastError &error = lastError();
  return error.literal ? error.literal : error.text.c_str();
}

fj_status recordFailure(const char *function, llvm::Error error) noexcept {
  LastError &last = lastError();
  try {
    ErrorReport report = takeErrorReport(std::move(error));
    last.text = std::string(function) + ": " + report.message;
    last.literal = nullptr;
    return toStatus(report.code);
  } catch (...) {
    last.literal = "out of host memory while reporting an error";
    return FJ_ERROR_OUT_OF_MEMORY;
  }
}

fj_status recordStaticFailure(fj_status status, const char *message) noexcept {
  lastError().literal = message;
  return status;
}

} // namespace flashjit::api
