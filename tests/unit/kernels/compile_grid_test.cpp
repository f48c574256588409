// NVRTC compiles every fwd_mma variant of the grid (no GPU needed): head dims x
// dtypes x causal, for sm_80 and sm_90a, with the default tiles; no register spills
// for head_dim <= 128. Prints the compile-time distribution.
#include "generator/emit.h"
#include "tuner/loaded_kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

using namespace flashjit;
using generator::DType;

namespace {

const int kHeadDims[] = {32, 40, 64, 72, 80, 96, 128, 160, 192, 224, 256};

class CompileGrid
    : public ::testing::TestWithParam<std::tuple<const char *, DType, bool>> {};

TEST_P(CompileGrid, EveryHeadDimCompiles) {
  auto [target, dtype, causal] = GetParam();
  std::vector<double> times;
  for (int d : kHeadDims) {
    generator::KernelSpec spec;
    spec.dtype = dtype;
    spec.headDim = spec.headDimV = d;
    spec.causal = causal;
    spec.target = target;
    generator::TileConfig tile = generator::defaultTile(spec);
    auto kernel = generator::emitForward(spec, tile);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    auto binary = tuner::compileEmitted(*kernel, target);
    ASSERT_TRUE(bool(binary)) << spec.key() << ": " << llvm::toString(binary.takeError());
    EXPECT_GT(binary->cubin.size(), 1000u);
    EXPECT_GT(binary->registers, 0) << spec.key();
    if (d <= 128) {
      EXPECT_EQ(binary->spillStoreBytes, 0) << spec.key() << " " << tile.key();
      EXPECT_EQ(binary->spillLoadBytes, 0) << spec.key() << " " << tile.key();
    }
    times.push_back(binary->compileMs);
    std::printf("  %-40s %-18s %4d regs  %4d B spill  %6.0f ms\n", spec.key().c_str(),
                tile.key().c_str(), binary->registers,
                binary->spillStoreBytes + binary->spillLoadBytes, binary->compileMs);
  }
  std::sort(times.begin(), times.end());
  std::printf("  compile ms: min %.0f  median %.0f  max %.0f\n", times.front(),
              times[times.size() / 2], times.back());
}

INSTANTIATE_TEST_SUITE_P(
    Targets, CompileGrid,
    ::testing::Combine(::testing::Values("sm_80", "sm_90a"),
                       ::testing::Values(DType::FP16, DType::BF16), ::testing::Bool()),
    [](const auto &info) {
      return std::string(std::get<0>(info.param)) +
             (std::get<1>(info.param) == DType::BF16 ? "_bf16" : "_fp16") +
             (std::get<2>(info.param) ? "_causal" : "_full");
    });

TEST(CompileReference, BothModesCompile) {
  for (DType dtype : {DType::FP16, DType::BF16})
    for (bool emulate : {false, true}) {
      auto kernel = generator::emitReference(dtype, emulate, "sm_80");
      ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
      auto binary = tuner::compileEmitted(*kernel, "sm_80");
      ASSERT_TRUE(bool(binary)) << llvm::toString(binary.takeError());
    }
}

} // namespace
