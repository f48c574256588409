// Which CUDA context is current on the calling thread: what code that caches loaded
// modules process-wide must key them by, since a module loaded in one device's
// context cannot be launched in another's (CUDA_ERROR_INVALID_HANDLE).
#pragma once

#include "llvm/Support/Error.h"

#include <cuda.h>

namespace flashjit::runtime {

// The calling thread's current context (null when none is current).
llvm::Expected<CUcontext> currentContext();

} // namespace flashjit::runtime
