// The NVRTC entry points, resolved from a shared library at run time. Internal to
// runtime/: other modules use runtime/nvrtc.h.
#pragma once

#include "llvm/Support/Error.h"

#include <nvrtc.h>

#include <memory>
#include <string>

namespace flashjit::runtime::detail {

#define FLASHJIT_NVRTC_FUNCTIONS(X)                                                     \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)   \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)                \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

struct NvrtcApi {
  std::string path; // the library the functions came from
#define FLASHJIT_DECLARE(fn) decltype(&::fn) fn = nullptr;
  FLASHJIT_NVRTC_FUNCTIONS(FLASHJIT_DECLARE)
#undef FLASHJIT_DECLARE
};

// Loads NVRTC from `path` (a file name or a path for dlopen) and resolves every
// function; the error names the library and what was missing. Loading the same
// library twice is cheap (the dynamic loader keeps one copy), so tests may call it.
llvm::Expected<std::unique_ptr<NvrtcApi>> loadNvrtc(const std::string &path);

// The library this process uses: $FLASHJIT_NVRTC_LIBRARY, else libnvrtc.so.13.
std::string defaultNvrtcPath();

// The process-wide NVRTC, loaded on first use (thread-safe); a failed load is
// remembered and reported again on each call.
llvm::Expected<const NvrtcApi &> nvrtc();

} // namespace flashjit::runtime::detail
