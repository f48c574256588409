// The `flashjit` CLI is a set of verbs, one file each (cmd_*.cpp). Each file
// declares its llvm::cl::SubCommand and options as globals and registers itself
// here, so adding a verb touches no other file.
#pragma once

#include "llvm/Support/CommandLine.h"

namespace flashjit::tools {

using RunFn = int (*)();

struct RegisterCommand {
  RegisterCommand(llvm::cl::SubCommand &sub, RunFn run);
};

// The help of the benchmark verbs' --time-wrong-output (bench, bench-decode).
inline constexpr const char *kTimeWrongOutputHelp =
    "Also time tiles whose output fails the check, marked WRONG (for experiments that drop "
    "part of the work to find its cost; never a result)";

} // namespace flashjit::tools
