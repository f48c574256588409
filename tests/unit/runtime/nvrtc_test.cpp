// NVRTC through runtime/nvrtc.h: real compiles with the libnvrtc of this machine.
#include "runtime/nvrtc.h"
#include "runtime/nvrtc_api.h"
#include "support/error.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace flashjit::runtime {
namespace {

constexpr const char *kTinyKernel = R"(
extern "C" __global__ void fill(float *out, float value) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = value;
})";

// A local array indexed with a run-time value cannot live in registers: it goes to
// the stack.
constexpr const char *kLocalArrayKernel = R"(
extern "C" __global__ void lookup(const float *in, float *out, int index) {
  float table[256];
  for (int i = 0; i < 256; ++i) table[i] = in[i] * i;
  out[threadIdx.x] = table[(index + threadIdx.x) & 255];
})";

// 64 live values per thread: under a 32-register cap ptxas must spill.
constexpr const char *kRegisterHungryKernel = R"(
extern "C" __global__ void hungry(const float *in, float *out) {
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = in[threadIdx.x * 64 + j];
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j * 7 + r) & 63] + 1.0f;
#pragma unroll
  for (int j = 0; j < 64; ++j) out[threadIdx.x * 64 + j] = acc[j];
})";

constexpr const char *kSharedKernel = R"(
extern "C" __global__ void reverse(float *data) {
  __shared__ float tile[512];
  tile[threadIdx.x] = data[threadIdx.x];
  __syncthreads();
  data[threadIdx.x] = tile[511 - threadIdx.x];
})";

CompiledBinary compileOrFail(const char *source, CompileOptions options) {
  auto binary = compile(source, options);
  if (!binary) {
    ADD_FAILURE() << llvm::toString(binary.takeError());
    return {};
  }
  return std::move(*binary);
}

TEST(Nvrtc, VersionIs13) {
  auto version = nvrtcVersion();
  ASSERT_TRUE(bool(version)) << llvm::toString(version.takeError());
  EXPECT_EQ(*version, "13.0");
}

TEST(Nvrtc, CompilesAnElfCubinForEachTarget) {
  for (const char *target : {"sm_80", "sm_90a"}) {
    CompileOptions options;
    options.target = target;
    CompiledBinary binary = compileOrFail(kTinyKernel, options);
    ASSERT_GE(binary.cubin.size(), 4u) << target;
    EXPECT_EQ(binary.cubin.substr(0, 4), "\x7f" "ELF") << target;
    EXPECT_EQ(binary.target, target);
    EXPECT_TRUE(binary.ptx.empty()) << "PTX was not asked for";
    EXPECT_GT(binary.registers, 0) << binary.log;
    EXPECT_EQ(binary.stackFrameBytes, 0) << binary.log;
    EXPECT_EQ(binary.spillStoreBytes, 0) << binary.log;
    EXPECT_GT(binary.compileMs, 0);
    EXPECT_NE(binary.log.find(std::string("for '") + target + "'"), std::string::npos)
        << "ptxas did not compile for the exact target:\n" << binary.log;
  }
}

TEST(Nvrtc, KeepsPtxWhenAsked) {
  CompileOptions options;
  options.keepPtx = true;
  CompiledBinary binary = compileOrFail(kTinyKernel, options);
  EXPECT_NE(binary.ptx.find(".target sm_90a"), std::string::npos) << binary.ptx;
  EXPECT_NE(binary.ptx.find(".entry fill"), std::string::npos) << binary.ptx;
  EXPECT_EQ(binary.ptx.find('\0'), std::string::npos);
}

TEST(Nvrtc, SyntaxErrorIsACompileErrorCarryingTheLog) {
  CompileOptions options;
  options.programName = "broken.cu";
  auto binary = compile("extern \"C\" __global__ void k() { undeclared_thing = 1; }", options);
  ASSERT_FALSE(bool(binary));
  ErrorReport report = takeErrorReport(binary.takeError());
  EXPECT_EQ(report.code, ErrorCode::Compile);
  EXPECT_NE(report.message.find("broken.cu"), std::string::npos) << report.message;
  EXPECT_NE(report.message.find("undeclared_thing"), std::string::npos) << report.message;
  EXPECT_NE(report.message.find("error"), std::string::npos) << report.message;
}

TEST(Nvrtc, PassesExtraOptions) {
  CompileOptions options;
  options.options = {"-DVALUE_FROM_OPTIONS=3"};
  compileOrFail("static_assert(VALUE_FROM_OPTIONS == 3, \"\");", options);
}

TEST(Nvrtc, RejectsAnInvalidTarget) {
  CompileOptions options;
  options.target = "compute_90";
  auto binary = compile(kTinyKernel, options);
  ASSERT_FALSE(bool(binary));
  EXPECT_EQ(takeErrorReport(binary.takeError()).code, ErrorCode::InvalidValue);
}

TEST(Nvrtc, ReportsStackFrameOfARuntimeIndexedLocalArray) {
  CompiledBinary binary = compileOrFail(kLocalArrayKernel, {});
  EXPECT_GE(binary.stackFrameBytes, 1024) << binary.log;
  EXPECT_GT(binary.registers, 0) << binary.log;
}

TEST(Nvrtc, ReportsSpillsUnderARegisterCap) {
  CompileOptions options;
  options.target = "sm_80";
  options.options = {"--maxrregcount=32"};
  CompiledBinary binary = compileOrFail(kRegisterHungryKernel, options);
  EXPECT_LE(binary.registers, 32) << binary.log;
  EXPECT_GT(binary.spillStoreBytes, 0) << binary.log;
  EXPECT_GT(binary.spillLoadBytes, 0) << binary.log;
}

// NVRTC 12.9+ would serve the second compile from its own cache, without ptxas and so
// without the report the tuner's spill check reads (seen on the GPU machine, where it
// is on; compile() turns it off).
TEST(Nvrtc, ReportsSpillsOnARepeatedCompile) {
  CompileOptions options;
  options.target = "sm_80";
  options.options = {"--maxrregcount=32"};
  for (int i = 0; i < 2; ++i) {
    CompiledBinary binary = compileOrFail(kRegisterHungryKernel, options);
    EXPECT_GT(binary.registers, 0) << "compile " << i << ":\n" << binary.log;
    EXPECT_GT(binary.spillStoreBytes, 0) << "compile " << i << ":\n" << binary.log;
  }
}

TEST(Nvrtc, CachesProgramsFromVersion12_9) {
  EXPECT_FALSE(nvrtcCachesPrograms(12, 8));
  EXPECT_TRUE(nvrtcCachesPrograms(12, 9));
  EXPECT_TRUE(nvrtcCachesPrograms(13, 0));
  EXPECT_FALSE(nvrtcCachesPrograms(11, 9));
}

TEST(Nvrtc, HasMinimalFromVersion12_4) {
  EXPECT_FALSE(nvrtcHasMinimal(12, 3));
  EXPECT_TRUE(nvrtcHasMinimal(12, 4));
  EXPECT_TRUE(nvrtcHasMinimal(13, 0));
  EXPECT_FALSE(nvrtcHasMinimal(11, 9));
}

// --minimal leaves out texture functions and the runtime's types: the same cubin for a
// kernel that needs neither, a compile error for one that does, unless turned off.
TEST(Nvrtc, MinimalKeepsTheCubinAndCanBeTurnedOff) {
  CompileOptions options;
  options.target = "sm_90a";
  options.minimal = false;
  std::string full = compileOrFail(kRegisterHungryKernel, options).cubin;
  options.minimal = true;
  std::string minimal = compileOrFail(kRegisterHungryKernel, options).cubin;
  ASSERT_FALSE(full.empty());
  EXPECT_EQ(full, minimal) << "--minimal changed the cubin";

  constexpr const char *kTextureKernel = R"(
extern "C" __global__ void sample(cudaTextureObject_t t, float *out) {
  out[threadIdx.x] = tex1Dfetch<float>(t, threadIdx.x);
})";
  auto refused = compile(kTextureKernel, options);
  ASSERT_FALSE(bool(refused)) << "NVRTC 13 declares no textures under --minimal";
  llvm::consumeError(refused.takeError());
  options.minimal = false;
  EXPECT_FALSE(compileOrFail(kTextureKernel, options).cubin.empty());
}

TEST(Nvrtc, ParsesTheTimeTable) {
  CompiledBinary::Phases phases = parseNvrtcTimeTable(
      "File name, phase name, metric, unit\n"
      "k.cu, CUDA C++ Frontend, 41, ms\n"
      "k.cu, NVVM Optimizer, 199, ms\n"
      "k.cu, PTX Translation, 204, ms\n"
      "k.cu, Something New, 7, ms\n"
      "k.cu, NVVM Optimizer, 1, ms\n"
      "k.cu, Memory, 12, MB\n"
      "garbage\n");
  EXPECT_EQ(phases.frontEndMs, 41);
  EXPECT_EQ(phases.nvvmMs, 200);
  EXPECT_EQ(phases.ptxasMs, 204);
  EXPECT_EQ(phases.otherMs, 7);
  CompiledBinary::Phases none = parseNvrtcTimeTable("");
  EXPECT_EQ(none.frontEndMs + none.nvvmMs + none.ptxasMs + none.otherMs, 0);
}

// --time reports where the time went and changes nothing in the cubin.
TEST(Nvrtc, TimesItsPhasesWithoutChangingTheCubin) {
  CompileOptions options;
  options.target = "sm_90a";
  CompiledBinary plain = compileOrFail(kRegisterHungryKernel, options);
  options.timePhases = true;
  CompiledBinary timed = compileOrFail(kRegisterHungryKernel, options);
  ASSERT_FALSE(plain.cubin.empty());
  EXPECT_EQ(plain.cubin, timed.cubin);
  EXPECT_EQ(plain.phases.frontEndMs + plain.phases.nvvmMs + plain.phases.ptxasMs, 0)
      << "phases were not asked for";
  EXPECT_GT(timed.phases.frontEndMs, 0);
  EXPECT_GT(timed.phases.frontEndMs + timed.phases.nvvmMs + timed.phases.ptxasMs, 0);
  EXPECT_LE(timed.phases.frontEndMs + timed.phases.nvvmMs + timed.phases.ptxasMs,
            timed.compileMs + 1);
  // NVRTC works on the calling thread: its CPU time is most of the compile, never more.
  EXPECT_GT(timed.compileCpuMs, 0);
  EXPECT_LE(timed.compileCpuMs, timed.compileMs + 1);
}

TEST(Nvrtc, ReportsStaticSharedMemory) {
  CompiledBinary binary = compileOrFail(kSharedKernel, {});
  EXPECT_EQ(binary.staticSharedBytes, 512 * 4) << binary.log;
}

TEST(Nvrtc, CompilesFromSeveralThreadsAtOnce) {
  std::vector<std::thread> threads;
  std::vector<std::string> cubins(3);
  for (size_t i = 0; i < cubins.size(); ++i)
    threads.emplace_back([&, i] {
      CompileOptions options;
      options.options = {"-DSEED=" + std::to_string(i)};
      auto binary = compile(kTinyKernel, options);
      if (binary)
        cubins[i] = binary->cubin;
      else
        llvm::consumeError(binary.takeError());
    });
  for (std::thread &thread : threads)
    thread.join();
  for (const std::string &cubin : cubins)
    EXPECT_EQ(cubin.substr(0, 4), "\x7f" "ELF");
}

TEST(Nvrtc, ValidTargets) {
  for (const char *target : {"sm_50", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a",
                             "sm_100a", "sm_120"})
    EXPECT_TRUE(isValidTarget(target)) << target;
  for (const char *target : {"", "sm_", "sm_8", "sm_35", "sm_90b", "sm_a", "compute_90",
                             "sm_1000", "SM_90", "sm_90aa", "sm_-90"})
    EXPECT_FALSE(isValidTarget(target)) << target;
}

TEST(NvrtcLoader, MissingLibraryGivesAClearError) {
  auto api = detail::loadNvrtc("/nonexistent/libnvrtc.so.13");
  ASSERT_FALSE(bool(api));
  std::string message = llvm::toString(api.takeError());
  EXPECT_NE(message.find("cannot load NVRTC"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << message;
}

TEST(NvrtcLoader, LibraryWithoutNvrtcIsRejected) {
  // libm is always there and exports none of NVRTC's functions.
  auto api = detail::loadNvrtc("libm.so.6");
  ASSERT_FALSE(bool(api));
  EXPECT_NE(llvm::toString(api.takeError()).find("lacks nvrtcVersion"), std::string::npos);
}

// When the library is loaded, another file of it under $CUDA_HOME is the separate copy
// (libm stands in for NVRTC: loaded in every C++ process, and small to copy), and the
// loaded file itself never is.
TEST(NvrtcLoader, SeparateCopyIsAnotherFileUnderTheToolkit) {
  std::string inUse;
  llvm::SmallString<128> root;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("fj-toolkit", root));
  llvm::SmallString<128> lib64(root);
  llvm::sys::path::append(lib64, "lib64");
  ASSERT_FALSE(llvm::sys::fs::create_directory(lib64));
  llvm::SmallString<128> copy(lib64);
  llvm::sys::path::append(copy, "libm.so.6");
  std::optional<std::string> loaded = [] {
    std::string file;
    detail::separateCopyOf("libm.so.6", &file);
    return file.empty() ? std::nullopt : std::optional<std::string>(file);
  }();
  ASSERT_TRUE(loaded) << "libm is loaded in this process";
  ASSERT_FALSE(llvm::sys::fs::copy_file(*loaded, copy));

  const char *saved = std::getenv("CUDA_HOME");
  std::string previous = saved ? saved : "";
  setenv("CUDA_HOME", root.c_str(), 1);
  std::optional<std::string> separate = detail::separateCopyOf("libm.so.6", &inUse);
  EXPECT_EQ(inUse, *loaded);
  EXPECT_EQ(separate, std::optional<std::string>(std::string(copy)));
  auto notNvrtc = detail::loadNvrtcCopy(std::string(copy));  // loads, then lacks NVRTC
  ASSERT_FALSE(bool(notNvrtc));
  EXPECT_NE(llvm::toString(notNvrtc.takeError()).find("lacks nvrtcVersion"), std::string::npos);
  // A link to the loaded file is that file, not a copy.
  llvm::sys::fs::remove(copy);
  ASSERT_FALSE(llvm::sys::fs::create_link(*loaded, copy));
  EXPECT_NE(detail::separateCopyOf("libm.so.6", &inUse),
            std::optional<std::string>(std::string(copy)));
  if (saved)
    setenv("CUDA_HOME", previous.c_str(), 1);
  else
    unsetenv("CUDA_HOME");
  llvm::sys::fs::remove_directories(root);
}

TEST(NvrtcLoader, NothingLoadedNeedsNoSeparateCopy) {
  std::string inUse = "unset";
  EXPECT_FALSE(detail::separateCopyOf("libflashjit-nonexistent.so.1", &inUse));
  EXPECT_EQ(inUse, "");
}

TEST(NvrtcLoader, EnvironmentOverridesThePath) {
  const char *saved = std::getenv("FLASHJIT_NVRTC_LIBRARY");
  std::string previous = saved ? saved : "";
  setenv("FLASHJIT_NVRTC_LIBRARY", "/opt/custom/libnvrtc.so", 1);
  EXPECT_EQ(detail::defaultNvrtcPath(), "/opt/custom/libnvrtc.so");
  unsetenv("FLASHJIT_NVRTC_LIBRARY");
  EXPECT_EQ(detail::defaultNvrtcPath(), "libnvrtc.so.13");
  if (saved)
    setenv("FLASHJIT_NVRTC_LIBRARY", previous.c_str(), 1);
}

// The process loads NVRTC once, so the variable is tested in a fresh process: the
// "threadsafe" death-test style re-executes this binary for just this statement.
TEST(NvrtcLoaderDeathTest, CompileReportsAMissingOverride) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("FLASHJIT_NVRTC_LIBRARY", "/nonexistent/custom-nvrtc.so", 1);
        auto binary = compile(kTinyKernel, {});
        std::string message = binary ? "compiled" : llvm::toString(binary.takeError());
        fprintf(stderr, "%s\n", message.c_str());
        std::exit(message.find("/nonexistent/custom-nvrtc.so") != std::string::npos ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "cannot load NVRTC from '/nonexistent/custom-nvrtc.so'");
}

} // namespace
} // namespace flashjit::runtime
