#include "runtime/nvrtc.h"

#include "runtime/nvrtc_api.h"
#include "runtime/resource_usage.h"
#include "support/error.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <chrono>
#include <ctime>

namespace flashjit::runtime {
namespace {

llvm::Error nvrtcError(const detail::NvrtcApi &api, nvrtcResult result, const char *call) {
  return makeError(ErrorCode::Compile, "{0} failed: {1}", call,
                   api.nvrtcGetErrorString(result));
}

// CPU time of the calling thread, in milliseconds.
double threadCpuMs() {
  timespec now{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0)
    return 0;
  return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

} // namespace

CompiledBinary::Phases parseNvrtcTimeTable(llvm::StringRef csv) {
  CompiledBinary::Phases phases;
  llvm::SmallVector<llvm::StringRef, 16> lines;
  csv.split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef, 4> fields;
    line.split(fields, ',');
    if (fields.size() < 4 || fields[3].trim() != "ms")
      continue; // the header, or a metric that is not a time
    double ms = 0;
    if (fields[2].trim().getAsDouble(ms))
      continue;
    llvm::StringRef phase = fields[1].trim();
    if (phase == "CUDA C++ Frontend")
      phases.frontEndMs += ms;
    else if (phase == "NVVM Optimizer")
      phases.nvvmMs += ms;
    else if (phase == "PTX Translation")
      phases.ptxasMs += ms;
    else
      phases.otherMs += ms;
  }
  return phases;
}

llvm::Expected<std::string> nvrtcVersion() {
  auto api = detail::nvrtc();
  if (!api)
    return api.takeError();
  int major = 0, minor = 0;
  if (nvrtcResult result = api->nvrtcVersion(&major, &minor); result != NVRTC_SUCCESS)
    return nvrtcError(*api, result, "nvrtcVersion");
  return llvm::formatv("{0}.{1}", major, minor).str();
}

llvm::Expected<std::string> nvrtcLibrary() {
  auto api = detail::nvrtc();
  if (!api)
    return api.takeError();
  if (api->ownCopy)
    return api->path + " (flashjit's own copy)";
  return api->path + " (shared: " + api->sharedBecause + ")";
}

std::optional<std::string> nvrtcSharedBecause() {
  auto api = detail::nvrtc();
  if (!api) {
    llvm::consumeError(api.takeError());
    return std::nullopt;
  }
  if (api->ownCopy)
    return std::nullopt;
  return api->sharedBecause;
}

bool nvrtcCachesPrograms(int major, int minor) {
  return major > 12 || (major == 12 && minor >= 9);
}

bool nvrtcHasMinimal(int major, int minor) {
  return major > 12 || (major == 12 && minor >= 4);
}

bool isValidTarget(llvm::StringRef target) {
  if (!target.consume_front("sm_"))
    return false;
  target.consume_back("a"); // the arch-specific variant: wgmma, setmaxnreg, ...
  unsigned arch = 0;
  if (target.size() < 2 || target.size() > 3 || target.getAsInteger(10, arch))
    return false;
  return arch >= 50;
}

llvm::Expected<CompiledBinary> compile(llvm::StringRef source, const CompileOptions &options) {
  if (!isValidTarget(options.target))
    return makeError(ErrorCode::InvalidValue, "invalid compile target '{0}'", options.target);
  auto api = detail::nvrtc();
  if (!api)
    return api.takeError();
  auto started = std::chrono::steady_clock::now();
  double startedCpuMs = threadCpuMs();

  // One program per call: NVRTC is thread-safe across distinct programs.
  nvrtcProgram program = nullptr;
  std::string text = source.str(); // NVRTC wants a NUL-terminated string
  if (nvrtcResult result = api->nvrtcCreateProgram(&program, text.c_str(),
                                                   options.programName.c_str(), 0, nullptr,
                                                   nullptr);
      result != NVRTC_SUCCESS)
    return nvrtcError(*api, result, "nvrtcCreateProgram");
  auto destroy = llvm::make_scope_exit([&] { api->nvrtcDestroyProgram(&program); });

  // ptxas -v makes the log report registers, spills, stack and shared memory.
  // PTX alone: the target's virtual architecture (sm_90a -> compute_90a), no ptxas.
  std::vector<std::string> owned =
      options.ptxOnly ? std::vector<std::string>{"--gpu-architecture=compute_" +
                                                 options.target.substr(3)}
                      : std::vector<std::string>{"--gpu-architecture=" + options.target,
                                                 "--ptxas-options=-v"};
  // NVRTC 12.9 and newer serve a program they compiled before (in any process on the
  // machine) from their own cache, without running ptxas: the log then has no report,
  // and a kernel that spills looks like one that does not. flashjit caches binaries
  // itself (cache/), so NVRTC's cache only hid what the tuner checks.
  int major = 0, minor = 0;
  bool versionKnown = api->nvrtcVersion(&major, &minor) == NVRTC_SUCCESS;
  if (versionKnown && nvrtcCachesPrograms(major, minor))
    owned.push_back("--no-cache");
  if (options.minimal && versionKnown && nvrtcHasMinimal(major, minor))
    owned.push_back("--minimal");
  // --time appends its table to a file (its "-" writes nothing we can read back): one
  // temporary file per compile, so that concurrent compiles keep their tables apart.
  llvm::SmallString<128> timeFile;
  auto removeTimeFile = llvm::make_scope_exit([&] {
    if (!timeFile.empty())
      llvm::sys::fs::remove(timeFile);
  });
  if (options.timePhases) {
    if (std::error_code ec =
            llvm::sys::fs::createTemporaryFile("flashjit-nvrtc-time", "csv", timeFile))
      return makeError(ErrorCode::Compile, "cannot create a file for NVRTC's times: {0}",
                       ec.message());
    owned.push_back(("--time=" + timeFile).str());
  }
  owned.insert(owned.end(), options.options.begin(), options.options.end());
  llvm::SmallVector<const char *, 16> argv;
  for (const std::string &option : owned)
    argv.push_back(option.c_str());
  nvrtcResult compiled = api->nvrtcCompileProgram(program, static_cast<int>(argv.size()),
                                                  argv.data());

  CompiledBinary binary;
  binary.target = options.target;
  size_t size = 0;
  if (api->nvrtcGetProgramLogSize(program, &size) == NVRTC_SUCCESS && size > 0) {
    std::string log(size, '\0');
    if (api->nvrtcGetProgramLog(program, log.data()) == NVRTC_SUCCESS)
      binary.log = log.c_str(); // up to the terminating NUL
  }
  if (compiled != NVRTC_SUCCESS)
    return makeError(ErrorCode::Compile, "NVRTC could not compile {0} for {1} ({2}):\n{3}",
                     options.programName, options.target, api->nvrtcGetErrorString(compiled),
                     binary.log);

  // One of NVRTC's outputs (cubin, PTX) into `out`: its size, then its bytes.
  auto fetch = [&](auto getSize, const char *sizeName, auto get, const char *getName,
                   std::string &out) -> llvm::Error {
    if (nvrtcResult result = getSize(program, &size); result != NVRTC_SUCCESS)
      return nvrtcError(*api, result, sizeName);
    out.resize(size);
    if (nvrtcResult result = get(program, out.data()); result != NVRTC_SUCCESS)
      return nvrtcError(*api, result, getName);
    return llvm::Error::success();
  };
  if (!options.ptxOnly)
    if (llvm::Error err = fetch(api->nvrtcGetCUBINSize, "nvrtcGetCUBINSize", api->nvrtcGetCUBIN,
                                "nvrtcGetCUBIN", binary.cubin))
      return std::move(err);
  if (options.keepPtx || options.ptxOnly) {
    if (llvm::Error err = fetch(api->nvrtcGetPTXSize, "nvrtcGetPTXSize", api->nvrtcGetPTX,
                                "nvrtcGetPTX", binary.ptx))
      return std::move(err);
    if (!binary.ptx.empty() && binary.ptx.back() == '\0')
      binary.ptx.pop_back();
  }

  if (!timeFile.empty())
    if (auto table = llvm::MemoryBuffer::getFile(timeFile))
      binary.phases = parseNvrtcTimeTable((*table)->getBuffer());

  ResourceUsage usage = parsePtxasLog(binary.log);
  binary.registers = usage.registers;
  binary.spillStoreBytes = usage.spillStoreBytes;
  binary.spillLoadBytes = usage.spillLoadBytes;
  binary.stackFrameBytes = usage.stackFrameBytes;
  binary.staticSharedBytes = usage.staticSharedBytes;
  binary.compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - started)
                         .count();
  binary.compileCpuMs = threadCpuMs() - startedCpuMs;
  return binary;
}

} // namespace flashjit::runtime
