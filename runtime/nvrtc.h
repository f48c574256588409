// Run-time compilation of CUDA C++ with NVRTC. libnvrtc is loaded on first use, a copy
// that no other library in the process uses where one can be had (runtime/nvrtc_api.h
// says why; $FLASHJIT_NVRTC_LIBRARY overrides the path, default libnvrtc.so.13), so
// nothing here links against the toolkit and compilation works on machines with no GPU
// and no driver.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace flashjit::runtime {

struct CompileOptions {
  // Exact target: "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", ... The cubin is
  // valid for that target only.
  std::string target = "sm_90a";
  // Extra NVRTC options (e.g. "-std=c++17", "-DFOO=1"); the target and the options
  // that make ptxas report resource usage are added by compile().
  std::vector<std::string> options;
  bool keepPtx = false;
  // Stop at PTX (for the target's virtual architecture, compute_90a for sm_90a): no
  // ptxas, no cubin, no resource report; CompiledBinary::ptx holds the result.
  bool ptxOnly = false;
  // The source uses no texture or surface functions, no device-side runtime (cudaMalloc,
  // kernel launches) and no CUDA runtime types (cudaError_t): NVRTC 12.4 and newer then
  // leave their declarations out (`--minimal`), which takes 5-7 ms off the front end of
  // each compile and gives the same cubin (docs/PERF.md, "JIT compile time"). flashjit's
  // generated kernels use none of them; set it false for a source that does.
  bool minimal = true;
  // Ask NVRTC for its per-phase times (`--time`): CompiledBinary::phases. It costs a
  // temporary file per compile and does not change the cubin.
  bool timePhases = false;
  std::string programName = "flashjit_kernel.cu";
};

// What NVRTC produced, with the resource usage ptxas reported for the kernel(s).
struct CompiledBinary {
  std::string target;
  std::string cubin;
  std::string ptx;  // empty unless CompileOptions::keepPtx
  std::string log;  // the full NVRTC/ptxas log (warnings included)
  int registers = -1;        // per thread, of the largest kernel in the program
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  int stackFrameBytes = 0;
  int staticSharedBytes = 0;
  double compileMs = 0;
  // CPU time of the compiling thread over the same span. NVRTC compiles on the calling
  // thread, so on an idle machine this is compileMs; on a busy one (a 2-core machine
  // that runs tests beside a benchmark) it leaves out the time spent waiting for a core.
  double compileCpuMs = 0;
  // With CompileOptions::timePhases: where NVRTC's time went, in milliseconds
  // (0 when NVRTC did not report the phase).
  struct Phases {
    double frontEndMs = 0; // "CUDA C++ Frontend": parsing, template instantiation
    double nvvmMs = 0;     // "NVVM Optimizer": LLVM optimization and PTX code generation
    double ptxasMs = 0;    // "PTX Translation": ptxas, PTX to SASS
    double otherMs = 0;    // any phase not named above
  } phases;
};

// Adds up the table that NVRTC's `--time=<file>` writes ("file, phase, metric, unit"
// per line, a header line first) into phases. Lines it cannot read are skipped.
CompiledBinary::Phases parseNvrtcTimeTable(llvm::StringRef csv);

// Whether this NVRTC version has `--minimal` (12.4 and newer).
bool nvrtcHasMinimal(int major, int minor);

// Whether this NVRTC version keeps its own cache of compiled programs (12.9 and newer),
// which compile() turns off: a program served from it comes without ptxas's report.
bool nvrtcCachesPrograms(int major, int minor);

// "13.0": the version of the NVRTC library that compile() uses.
llvm::Expected<std::string> nvrtcVersion();

// Which NVRTC library compile() uses and whether another library in the process uses
// it too, e.g. "libnvrtc.so.13 (flashjit's own copy)" or "libnvrtc.so.13 (shared:
// <why>)"; for `flashjit info`.
llvm::Expected<std::string> nvrtcLibrary();

// Why compile() shares its NVRTC with another library in the process (nvrtcLibrary()'s
// reason); nothing when it has a copy of its own or NVRTC does not load.
std::optional<std::string> nvrtcSharedBecause();

// True for the targets compile() accepts ("sm_XY" or "sm_XYa").
bool isValidTarget(llvm::StringRef target);

// Compiles one translation unit to a cubin for options.target. On failure the
// error (ErrorCode::Compile) carries the NVRTC log. Thread-safe.
llvm::Expected<CompiledBinary> compile(llvm::StringRef source, const CompileOptions &options);

} // namespace flashjit::runtime
