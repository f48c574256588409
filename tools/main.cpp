// Entry point of the `flashjit` CLI: parse, then run the verb that was named.
#include "tools/command.h"

#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <utility>
#include <vector>

namespace flashjit::tools {
namespace {
std::vector<std::pair<llvm::cl::SubCommand *, RunFn>> &registry() {
  static std::vector<std::pair<llvm::cl::SubCommand *, RunFn>> commands;
  return commands;
}
} // namespace

RegisterCommand::RegisterCommand(llvm::cl::SubCommand &sub, RunFn run) {
  registry().emplace_back(&sub, run);
}

} // namespace flashjit::tools

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "flashjit: run-time generated, auto-tuned flash-attention kernels\n\n"
      "  Verbs: info, gen, roofline, tune, bench, bench-decode, cache.\n"
      "  `flashjit VERB --help` for each.\n");
  for (auto &[sub, run] : flashjit::tools::registry())
    if (*sub)
      return run();
  llvm::errs() << "flashjit: name a verb; see `flashjit --help`\n";
  return 2;
}
