// The ptxas -v parser, on a log captured from NVRTC 13 (sm_80, two kernels).
#include "runtime/resource_usage.h"

#include <gtest/gtest.h>

namespace flashjit::runtime {
namespace {

constexpr const char *kCapturedLog =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'tiny' for 'sm_80'\n"
    "ptxas info    : Function properties for tiny\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n"
    "ptxas info    : Compile time = 3.347 ms\n"
    "ptxas info    : Overriding maximum register limit 256 for 'spill' with  32 of "
    "maxrregcount option\n"
    "ptxas info    : Compiling entry function 'spill' for 'sm_80'\n"
    "ptxas info    : Function properties for spill\n"
    "ptxas         .     536 bytes stack frame, 984 bytes spill stores, 1160 bytes spill "
    "loads\n"
    "ptxas info    : Used 32 registers, used 1 barriers, 536 bytes cumulative stack size, "
    "256 bytes smem, 368 bytes cmem[0]\n"
    "ptxas info    : Compile time = 58.372 ms\n";

TEST(ResourceUsage, TakesTheLargestValueOverKernels) {
  ResourceUsage usage = parsePtxasLog(kCapturedLog);
  EXPECT_EQ(usage.registers, 32);
  EXPECT_EQ(usage.stackFrameBytes, 536);
  EXPECT_EQ(usage.spillStoreBytes, 984);
  EXPECT_EQ(usage.spillLoadBytes, 1160);
  EXPECT_EQ(usage.staticSharedBytes, 256);
}

TEST(ResourceUsage, SingleKernelWithoutSpills) {
  ResourceUsage usage = parsePtxasLog(
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 0 barriers\n");
  EXPECT_EQ(usage.registers, 10);
  EXPECT_EQ(usage.stackFrameBytes, 0);
  EXPECT_EQ(usage.spillStoreBytes, 0);
  EXPECT_EQ(usage.staticSharedBytes, 0);
}

TEST(ResourceUsage, LogWithoutPtxasLinesReportsNoRegisters) {
  EXPECT_EQ(parsePtxasLog("").registers, -1);
  // Compiler warnings that happen to mention the words are not ptxas lines.
  ResourceUsage usage =
      parsePtxasLog("x.cu(3): warning: variable uses 12 registers, 40 bytes stack frame\n");
  EXPECT_EQ(usage.registers, -1);
  EXPECT_EQ(usage.stackFrameBytes, 0);
}

// Lines as NVRTC 13 printed them for an sm_90a wgmma kernel.
TEST(PtxasNotes, KeepsWarningsAndCodedAdvisoriesOnly) {
  std::vector<std::string> notes = ptxasNotes(
      "ptxas info    : (C7519) warpgroup.arrive is injected in around line 2933 by compiler "
      "to allow use of registers in GMMA in function 'k'\n"
      "ptxas info    : 104 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
      "ptxas warning : Registers are spilled to local memory in function 'k'\n"
      "ptxas         .     8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 16 barriers\n"
      "k.cu(3): warning: (C1234) not a ptxas line\n");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], "(C7519) warpgroup.arrive is injected in around line 2933 by compiler "
                      "to allow use of registers in GMMA in function 'k'");
  EXPECT_EQ(notes[1], "Registers are spilled to local memory in function 'k'");
  EXPECT_TRUE(ptxasNotes(kCapturedLog).empty());
}

// A module's spilling functions are named, so a rejection says which kernel spills.
TEST(ResourceUsage, NamesTheFunctionsThatSpill) {
  const char *log =
      "ptxas info    : Compiling entry function 'flashjit_bwd_prep' for 'sm_90a'\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'flashjit_bwd_main' for 'sm_90a'\n"
      "ptxas info    : Function properties for flashjit_bwd_main\n"
      "ptxas         .     24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 16 barriers\n";
  EXPECT_EQ(spillingFunctions(log),
            std::vector<std::string>{"flashjit_bwd_main: 16 bytes stored, 12 loaded"});
  EXPECT_TRUE(spillingFunctions("ptxas info    : Used 40 registers\n").empty());
}

} // namespace
} // namespace flashjit::runtime
