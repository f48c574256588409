// Reading the resource usage that ptxas reports (with -v) out of an NVRTC log.
#pragma once

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace flashjit::runtime {

// The largest value of each quantity over the functions in the log: a program's
// worst kernel is the one that limits occupancy or spills.
struct ResourceUsage {
  int registers = -1; // -1: the log reported none (ptxas ran without -v)
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  int stackFrameBytes = 0;
  int staticSharedBytes = 0;
};

// Parses lines such as
//   ptxas         .     1024 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
//   ptxas info    : Used 40 registers, used 1 barriers, 256 bytes smem, 364 bytes cmem[0]
// Lines it does not recognise are ignored.
ResourceUsage parsePtxasLog(llvm::StringRef log);

// The functions that spill, each as "name: S bytes stored, L loaded", in log order (the
// entry named by the "Compiling entry function 'name'" line before the spill line), so
// that a rejection says which of a module's kernels spills.
std::vector<std::string> spillingFunctions(llvm::StringRef log);

// What ptxas says about the code beyond its resource usage: its warnings and its coded
// advisories, such as
//   ptxas info    : (C7519) warpgroup.arrive is injected in around line 2933 by ...
// (a wgmma fenced or serialised by the compiler costs speed without failing the
// compile). Each message without its "ptxas info    : " prefix, in log order.
std::vector<std::string> ptxasNotes(llvm::StringRef log);

} // namespace flashjit::runtime
