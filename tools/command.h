// The `flashjit` CLI is a set of verbs, one file each (cmd_*.cpp). Each file
// declares its llvm::cl::SubCommand and options as globals and registers itself
// here, so adding a verb touches no other file.
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

#include <optional>
#include <utility>

namespace flashjit::tools {

using RunFn = int (*)();

struct RegisterCommand {
  RegisterCommand(llvm::cl::SubCommand &sub, RunFn run);
};

// The help of the benchmark verbs' --time-wrong-output (bench, bench-decode).
inline constexpr const char *kTimeWrongOutputHelp =
    "Also time tiles whose output fails the check, marked WRONG (for experiments that drop "
    "part of the work to find its cost; never a result)";

// A head layout as the decode options write it, "32/8": (query heads, KV heads), both
// >= 1 and the KV heads dividing the query heads; nullopt for anything else.
inline std::optional<std::pair<int, int>> parseHeadLayout(llvm::StringRef text) {
  auto [q, kv] = text.trim().split('/');
  int hq = 0, hkv = 0;
  if (q.getAsInteger(10, hq) || kv.getAsInteger(10, hkv) || hq < 1 || hkv < 1 || hq % hkv)
    return std::nullopt;
  return std::pair{hq, hkv};
}

} // namespace flashjit::tools
