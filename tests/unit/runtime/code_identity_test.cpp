// runtime::ptxCodeHash on PTX that NVRTC makes here: the same kernel beside unused
// constants (which NVRTC declares as globals all the same) hashes the same; a changed
// instruction, a changed constant table it reads, or more shared memory does not.
#include "runtime/code_identity.h"
#include "runtime/nvrtc.h"

#include <gtest/gtest.h>

namespace flashjit::runtime {
namespace {

// `extra` goes before the kernel; `scale` into the product, `last` into the table it reads.
std::string kernel(const std::string &extra, const std::string &scale,
                   const std::string &shared = "64", const std::string &last = "5") {
  return extra + R"(
struct Cfg { static constexpr float kScale = )" + scale + R"(f; static constexpr int kShared = )" +
         shared + R"(; };
__device__ constexpr float kTable[4] = {1.f, 2.f, 3.f, )" + last + R"(.f};
extern "C" __global__ void scaled(const float *in, float *out) {
  __shared__ float tile[Cfg::kShared];
  tile[threadIdx.x % Cfg::kShared] = in[threadIdx.x] * Cfg::kScale * kTable[threadIdx.x & 3];
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % Cfg::kShared];
})";
}

std::string codeOf(const std::string &source) {
  CompileOptions options;
  options.target = "sm_90a";
  options.options = {"-std=c++17"};
  options.ptxOnly = true;
  auto binary = compile(source, options);
  if (!binary) {
    ADD_FAILURE() << llvm::toString(binary.takeError());
    return {};
  }
  EXPECT_TRUE(binary->cubin.empty()) << "PTX only: no ptxas";
  auto hash = ptxCodeHash(binary->ptx);
  if (!hash) {
    ADD_FAILURE() << llvm::toString(hash.takeError());
    return {};
  }
  return *hash;
}

TEST(CodeIdentity, UnusedConstantsLeaveTheHashAsItWas) {
  const std::string base = codeOf(kernel("", "3.5"));
  ASSERT_EQ(base.size(), 64u);
  // Constexpr members of a struct, and a namespace-scope one, that the kernel never
  // reads: NVRTC declares them in the PTX, as it does the templates' configuration.
  EXPECT_EQ(base, codeOf(kernel("namespace probe { constexpr float kUnused = 7.f; struct Extra { "
                                "static constexpr int kA = 3; static constexpr bool kB = kA > "
                                "2; }; }\n",
                                "3.5")));
  EXPECT_EQ(base, codeOf(kernel("// a comment\n", "3.5")));
}

TEST(CodeIdentity, AChangedKernelHashesDifferently) {
  const std::string base = codeOf(kernel("", "3.5"));
  EXPECT_NE(base, codeOf(kernel("", "2.5"))) << "another constant in an instruction";
  EXPECT_NE(base, codeOf(kernel("", "3.5", "128"))) << "more shared memory";
  EXPECT_NE(base, codeOf(kernel("", "3.5", "64", "6"))) << "a table it reads, changed";
}

TEST(CodeIdentity, TextWithoutAKernelIsAnError) {
  for (const char *bad : {"", "not PTX", ".version 9.0\n.target sm_90a\n"}) {
    auto hash = ptxCodeHash(bad);
    ASSERT_FALSE(bool(hash)) << bad;
    EXPECT_NE(llvm::toString(hash.takeError()).find("no .entry"), std::string::npos);
  }
}

} // namespace
} // namespace flashjit::runtime
