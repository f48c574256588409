// FP8 (e4m3) fwd_wgmma through NVRTC, no GPU needed: at head dims 64, 128 and 256,
// causal or not, with a bf16 or fp16 output, the default tile's kernel compiles for
// sm_90a with no register spills and nothing the tuner would refuse (no serialized wgmma,
// no ignored setmaxnreg: compileEmitted and compileRejection), the host's shared memory
// and TMA-store plan agree with the template's (the config block's static_asserts), and
// the module holds the k32 e4m3 wgmma and the V transpose kernel; so do head dims padded
// to whole panels and head_dim_v != head_dim. The FP8 references
// (fp32 and emulating, each output type) compile too. Prints the compile times.
#include "generator/emit.h"
#include "runtime/nvrtc.h"
#include "tuner/loaded_kernel.h"
#include "tuner/variants.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <tuple>

using namespace flashjit;
using generator::DType;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

generator::KernelSpec fp8Spec(int d, bool causal, DType out) {
  generator::KernelSpec spec;
  spec.family = generator::Family::FwdWgmma;
  spec.dtype = DType::E4M3;
  spec.outDtype = out;
  spec.headDim = spec.headDimV = d;
  spec.causal = causal;
  spec.target = "sm_90a";
  return spec;
}

class Fp8Compile : public ::testing::TestWithParam<std::tuple<int, bool, DType>> {};

TEST_P(Fp8Compile, DefaultTileCompilesWithoutSpills) {
  auto [d, causal, out] = GetParam();
  generator::KernelSpec spec = fp8Spec(d, causal, out);
  generator::TileConfig tile = generator::defaultTile(spec);
  auto kernel = generator::emitKernel(spec, tile);
  ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
  // The module's source: the 8-bit wgmma (32 of K) and the V transpose entry.
  EXPECT_TRUE(contains(kernel->source, "wgmma.mma_async.sync.aligned.m64n"));
  EXPECT_TRUE(contains(kernel->source, "k32.f32.e4m3.e4m3")) << spec.key();
  EXPECT_EQ(kernel->entryName, "flashjit_fwd_wgmma");
  EXPECT_EQ(kernel->fp8TransposeEntry, generator::kFp8TransposeEntry);
  EXPECT_TRUE(contains(kernel->source, std::string(generator::kFp8TransposeEntry) + "("));
  EXPECT_TRUE(kernel->tma.vTransposed);

  auto binary = tuner::compileEmitted(*kernel, spec.target);
  ASSERT_TRUE(bool(binary)) << spec.key() << " " << tile.key() << ": "
                            << llvm::toString(binary.takeError());
  EXPECT_GT(binary->cubin.size(), 1000u);
  EXPECT_GT(binary->registers, 0) << spec.key();
  // Both kernels are in the cubin under their extern "C" names.
  EXPECT_TRUE(contains(binary->cubin, "flashjit_fwd_wgmma")) << spec.key();
  EXPECT_TRUE(contains(binary->cubin, generator::kFp8TransposeEntry)) << spec.key();
  EXPECT_EQ(binary->spillStoreBytes, 0) << spec.key() << " " << tile.key();
  EXPECT_EQ(binary->spillLoadBytes, 0) << spec.key() << " " << tile.key();
  EXPECT_EQ(tuner::compileRejection(binary->spillStoreBytes + binary->spillLoadBytes,
                                    binary->log),
            "")
      << spec.key() << " " << tile.key() << "\n"
      << binary->log;
  std::printf("  %-52s %-18s %4d regs  %4d B spill  %4d B stack  %6.0f ms\n",
              spec.key().c_str(), tile.key().c_str(), binary->registers,
              binary->spillStoreBytes + binary->spillLoadBytes, binary->stackFrameBytes,
              binary->compileMs);
}

INSTANTIATE_TEST_SUITE_P(
    HeadDims, Fp8Compile,
    ::testing::Combine(::testing::Values(64, 128, 256), ::testing::Bool(),
                       ::testing::Values(DType::BF16, DType::FP16)),
    [](const auto &info) {
      return "d" + std::to_string(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_causal" : "_full") +
             (std::get<2>(info.param) == DType::BF16 ? "_obf16" : "_ofp16");
    });

// Head dims that are not whole 64-byte panels (padded to 64 in shared memory, V^T rows
// to 32) and head_dim_v != head_dim: the host's shared memory plan still matches the
// template's (the config block's static_assert) and nothing spills.
TEST(Fp8CompilePadded, PaddedAndUnequalHeadDimsCompile) {
  struct Dims {
    int d, dv;
  };
  for (Dims dims : {Dims{48, 48}, Dims{80, 80}, Dims{192, 128}}) {
    generator::KernelSpec spec = fp8Spec(dims.d, false, DType::BF16);
    spec.headDimV = dims.dv;
    generator::TileConfig tile = generator::defaultTile(spec);
    auto kernel = generator::emitKernel(spec, tile);
    ASSERT_TRUE(bool(kernel)) << spec.key() << ": " << llvm::toString(kernel.takeError());
    auto binary = tuner::compileEmitted(*kernel, spec.target);
    ASSERT_TRUE(bool(binary)) << spec.key() << " " << tile.key() << ": "
                              << llvm::toString(binary.takeError());
    EXPECT_EQ(tuner::compileRejection(binary->spillStoreBytes + binary->spillLoadBytes,
                                      binary->log),
              "")
        << spec.key() << " " << tile.key();
    std::printf("  %-52s %-18s %4d regs  %4d B spill  %6.0f ms\n", spec.key().c_str(),
                tile.key().c_str(), binary->registers,
                binary->spillStoreBytes + binary->spillLoadBytes, binary->compileMs);
  }
}

// The references the checker builds for an FP8 spec: fp32 and emulating, per output type.
TEST(Fp8CompileReference, BothModesAndOutputsCompile) {
  for (DType out : {DType::BF16, DType::FP16})
    for (bool emulate : {false, true}) {
      auto kernel = generator::emitReference(DType::E4M3, emulate, "sm_90a", {}, out);
      ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
      auto binary = tuner::compileEmitted(*kernel, "sm_90a");
      ASSERT_TRUE(bool(binary)) << generator::dtypeName(out).str()
                                << (emulate ? " emulated" : " fp32") << ": "
                                << llvm::toString(binary.takeError());
      EXPECT_GT(binary->cubin.size(), 1000u);
      EXPECT_TRUE(contains(binary->cubin, kernel->entryName));
      std::printf("  reference e4m3_o%s %-8s %6.0f ms\n", generator::dtypeName(out).str().c_str(),
                  emulate ? "emulated" : "fp32", binary->compileMs);
    }
}

} // namespace
