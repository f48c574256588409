// The NVRTC entry points, resolved from a shared library at run time. Internal to
// runtime/: other modules use runtime/nvrtc.h.
#pragma once

#include "llvm/Support/Error.h"

#include <nvrtc.h>

#include <memory>
#include <optional>
#include <string>

namespace flashjit::runtime::detail {

#define FLASHJIT_NVRTC_FUNCTIONS(X)                                                     \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)   \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)                \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

struct NvrtcApi {
  std::string path; // the library the functions came from
  // Whether no other library in the process was using this copy of NVRTC when flashjit
  // loaded it (nvrtc()), and when it was, why flashjit could not have one of its own.
  // (A library that loads libnvrtc.so.13 after flashjit did gets flashjit's copy.)
  bool ownCopy = false;
  std::string sharedBecause;
#define FLASHJIT_DECLARE(fn) decltype(&::fn) fn = nullptr;
  FLASHJIT_NVRTC_FUNCTIONS(FLASHJIT_DECLARE)
#undef FLASHJIT_DECLARE
};

// Loads NVRTC from `path` (a file name or a path for dlopen) and resolves every
// function; the error names the library and what was missing. Loading the same
// library twice is cheap (the dynamic loader keeps one copy), so tests may call it.
llvm::Expected<std::unique_ptr<NvrtcApi>> loadNvrtc(const std::string &path);

// The same for a separate copy (separateCopyOf), opened RTLD_LOCAL so that no other
// library's symbol lookups find it.
llvm::Expected<std::unique_ptr<NvrtcApi>> loadNvrtcCopy(const std::string &path);

// The library this process uses: $FLASHJIT_NVRTC_LIBRARY, else libnvrtc.so.13.
std::string defaultNvrtcPath();

// Why flashjit wants a copy of NVRTC that no other library uses: NVRTC keeps compiler
// settings in process-wide state that outlives a compile. In a PyTorch process, once
// cuDNN's attention had compiled with the shared libnvrtc, the same bwd_wgmma source
// compiled by that copy gave other PTX (kernel parameters read another way) and spilled
// 116-440 bytes, while another copy of the same version, loaded beside it, gave the
// clean PTX and no spill (H200, docs/PERF.md "bw12"); no NVRTC option undid it. A
// binary's cache key is its source, options and NVRTC version, and the cache is shared
// by every process on the machine, so what a compile gives must not depend on what
// another library did before.
//
// When the library that `name` (a file name, not a path) resolves to is already loaded
// by someone else, another file of the same library: name under $CUDA_HOME,
// $CUDA_PATH or /usr/local/cuda (lib64/, targets/<arch>-linux/lib/) that is not the
// loaded file. The dynamic loader keeps one copy per file, so a second file is a
// second copy, with state of its own. Nothing when `name` is not loaded yet (flashjit
// will be the first user) or no other file exists; `inUse` gets the loaded one ("" if
// none).
std::optional<std::string> separateCopyOf(const std::string &name, std::string *inUse);

// The process-wide NVRTC, loaded on first use (thread-safe): $FLASHJIT_NVRTC_LIBRARY
// as given, else libnvrtc.so.13, or separateCopyOf() it when another library loaded
// that first. A failed load is remembered and reported again on each call.
llvm::Expected<const NvrtcApi &> nvrtc();

} // namespace flashjit::runtime::detail
