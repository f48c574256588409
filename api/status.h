// Turning the library's llvm::Error into what the C API promises: an fj_status and a
// per-thread message. Every entry point runs its body through guard(), so nothing
// throws, aborts or leaks an unchecked Error past the API.
#pragma once

#include "flashjit/flashjit.h"
#include "support/error.h"

#include "llvm/Support/Error.h"

#include <exception>
#include <new>

namespace flashjit::api {

// ErrorCode and fj_status are numbered alike; this is the one place that says so.
fj_status toStatus(ErrorCode code);

// The message fj_last_error_message() returns on this thread.
const char *lastErrorMessage();

// Records `error` (a failure) as this thread's last error, prefixed with the entry
// point's name, and returns its status.
fj_status recordFailure(const char *function, llvm::Error error) noexcept;

// Records a failure that must not allocate (out of memory): `message` is a literal.
fj_status recordStaticFailure(fj_status status, const char *message) noexcept;

// Runs `body` (returning llvm::Error) as the entry point `function`: success, or the
// failure recorded. Exceptions from the standard library become statuses too.
template <typename Body> fj_status guard(const char *function, Body &&body) noexcept {
  try {
    llvm::Error error = body();
    if (!error)
      return FJ_SUCCESS;
    return recordFailure(function, std::move(error));
  } catch (const std::bad_alloc &) {
    return recordStaticFailure(FJ_ERROR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception &e) {
    return recordFailure(function,
                         makeError(ErrorCode::Internal, "unexpected exception: {0}", e.what()));
  } catch (...) {
    return recordStaticFailure(FJ_ERROR_INTERNAL, "unexpected exception of unknown type");
  }
}

} // namespace flashjit::api
