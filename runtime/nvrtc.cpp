#include "runtime/nvrtc.h"

#include "runtime/nvrtc_api.h"
#include "runtime/resource_usage.h"
#include "support/error.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallVector.h"

#include <chrono>

namespace flashjit::runtime {
namespace {

llvm::Error nvrtcError(const detail::NvrtcApi &api, nvrtcResult result, const char *call) {
  return makeError(ErrorCode::Compile, "{0} failed: {1}", call,
                   api.nvrtcGetErrorString(result));
}

} // namespace

llvm::Expected<std::string> nvrtcVersion() {
  auto api = detail::nvrtc();
  if (!api)
    return api.takeError();
  int major = 0, minor = 0;
  if (nvrtcResult result = api->nvrtcVersion(&major, &minor); result != NVRTC_SUCCESS)
    return nvrtcError(*api, result, "nvrtcVersion");
  return llvm::formatv("{0}.{1}", major, minor).str();
}

bool nvrtcCachesPrograms(int major, int minor) {
  return major > 12 || (major == 12 && minor >= 9);
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
  std::vector<std::string> owned = {"--gpu-architecture=" + options.target,
                                     "--ptxas-options=-v"};
  // NVRTC 12.9 and newer serve a program they compiled before (in any process on the
  // machine) from their own cache, without running ptxas: the log then has no report,
  // and a kernel that spills looks like one that does not. flashjit caches binaries
  // itself (cache/), so NVRTC's cache only hid what the tuner checks.
  int major = 0, minor = 0;
  if (api->nvrtcVersion(&major, &minor) == NVRTC_SUCCESS && nvrtcCachesPrograms(major, minor))
    owned.push_back("--no-cache");
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

  if (nvrtcResult result = api->nvrtcGetCUBINSize(program, &size); result != NVRTC_SUCCESS)
    return nvrtcError(*api, result, "nvrtcGetCUBINSize");
  binary.cubin.resize(size);
  if (nvrtcResult result = api->nvrtcGetCUBIN(program, binary.cubin.data());
      result != NVRTC_SUCCESS)
    return nvrtcError(*api, result, "nvrtcGetCUBIN");
  if (options.keepPtx) {
    if (nvrtcResult result = api->nvrtcGetPTXSize(program, &size); result != NVRTC_SUCCESS)
      return nvrtcError(*api, result, "nvrtcGetPTXSize");
    binary.ptx.resize(size);
    if (nvrtcResult result = api->nvrtcGetPTX(program, binary.ptx.data());
        result != NVRTC_SUCCESS)
      return nvrtcError(*api, result, "nvrtcGetPTX");
    if (!binary.ptx.empty() && binary.ptx.back() == '\0')
      binary.ptx.pop_back();
  }

  ResourceUsage usage = parsePtxasLog(binary.log);
  binary.registers = usage.registers;
  binary.spillStoreBytes = usage.spillStoreBytes;
  binary.spillLoadBytes = usage.spillLoadBytes;
  binary.stackFrameBytes = usage.stackFrameBytes;
  binary.staticSharedBytes = usage.staticSharedBytes;
  binary.compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - started)
                         .count();
  return binary;
}

} // namespace flashjit::runtime
