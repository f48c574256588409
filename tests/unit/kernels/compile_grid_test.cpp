// NVRTC compiles every variant of the grid (no GPU needed): head dims x dtypes x
// causal with the default tiles, fwd_mma for sm_80 and sm_90a (no register spills for
// head_dim <= 128), fwd_wgmma for sm_90a (no spills at any head dim, and no ptxas
// warning that serializes wgmma or ignores setmaxnreg), the backward pass bwd_mma and
// the decode kernels dec_mma for sm_80 and sm_90a (no spills at any head dim), and the
// Hopper backward bwd_wgmma for sm_90a at the head dims it takes (64, 128; no spills).
// Prints the compile times.
#include "generator/bwd_wgmma.h"
#include "generator/emit.h"
#include "tuner/loaded_kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

using namespace flashjit;
using generator::DType;

namespace {

const std::vector<int> kHeadDims = {32, 40, 64, 72, 80, 96, 128, 160, 192, 224, 256};

// The head dims a family has kernels for: bwd_wgmma takes those from 32 (bwd_mma
// runs the others), every other family the whole grid.
std::vector<int> headDimsOf(generator::Family family) {
  if (family != generator::Family::BwdWgmma)
    return kHeadDims;
  std::vector<int> taken;
  for (int d : kHeadDims) {
    generator::KernelSpec spec;
    spec.family = family;
    spec.headDim = spec.headDimV = d;
    if (generator::bwdWgmmaSupportsHeadDims(spec))
      taken.push_back(d);
  }
  return taken;
}

struct FamilyTarget {
  generator::Family family;
  const char *target;
};

class CompileGrid
    : public ::testing::TestWithParam<std::tuple<FamilyTarget, DType, bool>> {};

TEST_P(CompileGrid, EveryHeadDimCompiles) {
  auto [familyTarget, dtype, causal] = GetParam();
  const char *target = familyTarget.target;
  const bool wgmma = familyTarget.family == generator::Family::FwdWgmma;
  // Families that must not spill at any head dim (beside fwd_wgmma).
  const bool backward = familyTarget.family == generator::Family::BwdMma ||
                        familyTarget.family == generator::Family::BwdWgmma ||
                        familyTarget.family == generator::Family::DecMma;
  std::vector<double> times;
  std::vector<std::pair<int, int>> dims;
  for (int d : headDimsOf(familyTarget.family))
    dims.emplace_back(d, d);
  // The Hopper backward takes head_dim != head_dim_v on the panels that hold the larger.
  if (familyTarget.family == generator::Family::BwdWgmma)
    for (auto pair : {std::pair{192, 128}, std::pair{128, 64}, std::pair{64, 128},
                      std::pair{40, 72}})
      dims.push_back(pair);
  for (auto [d, dv] : dims) {
    generator::KernelSpec spec;
    spec.family = familyTarget.family;
    spec.dtype = dtype;
    spec.headDim = d;
    spec.headDimV = dv;
    spec.causal = causal;
    spec.target = target;
    generator::TileConfig tile = generator::defaultTile(spec);
    auto kernel = generator::emitKernel(spec, tile);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    auto binary = tuner::compileEmitted(*kernel, target);
    ASSERT_TRUE(bool(binary)) << spec.key() << ": " << llvm::toString(binary.takeError());
    EXPECT_GT(binary->cubin.size(), 1000u);
    EXPECT_GT(binary->registers, 0) << spec.key();
    if (d <= 128 || wgmma || backward) {
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
    ::testing::Combine(::testing::Values(FamilyTarget{generator::Family::FwdMma, "sm_80"},
                                         FamilyTarget{generator::Family::FwdMma, "sm_90a"},
                                         FamilyTarget{generator::Family::FwdWgmma, "sm_90a"},
                                         FamilyTarget{generator::Family::BwdMma, "sm_80"},
                                         FamilyTarget{generator::Family::BwdMma, "sm_90a"},
                                         FamilyTarget{generator::Family::BwdWgmma, "sm_90a"},
                                         FamilyTarget{generator::Family::DecMma, "sm_80"},
                                         FamilyTarget{generator::Family::DecMma, "sm_90a"}),
                       ::testing::Values(DType::FP16, DType::BF16), ::testing::Bool()),
    [](const auto &info) {
      const FamilyTarget &ft = std::get<0>(info.param);
      return std::string(generator::familyName(ft.family)) + "_" + ft.target +
             (std::get<1>(info.param) == DType::BF16 ? "_bf16" : "_fp16") +
             (std::get<2>(info.param) ? "_causal" : "_full");
    });

TEST(CompileReference, BackwardBothModesCompile) {
  for (DType dtype : {DType::FP16, DType::BF16})
    for (bool emulate : {false, true}) {
      auto kernel = generator::emitBackwardReference(dtype, emulate, "sm_80");
      ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
      auto binary = tuner::compileEmitted(*kernel, "sm_80");
      ASSERT_TRUE(bool(binary)) << llvm::toString(binary.takeError());
    }
}

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
