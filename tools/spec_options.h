// The attention-feature options (issue 28, docs/FEATURES.md) of the verbs that take a
// kernel spec (gen, tune, bench), declared and parsed in this one place:
//   --window L,R  --softcap X  --alibi  --score-mod FILE  --mask-mod FILE
// A verb declares one FeatureOptions after its SubCommand, in the same file (so that
// the SubCommand is constructed first), and asks it for the Features once its own
// options are parsed.
#pragma once

#include "generator/spec.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

#include <string>
#include <utility>

namespace flashjit::tools {

class FeatureOptions {
public:
  explicit FeatureOptions(llvm::cl::SubCommand &sub);
  FeatureOptions(const FeatureOptions &) = delete;
  FeatureOptions &operator=(const FeatureOptions &) = delete;

  // Whether any feature option was given on the command line.
  bool given() const;
  // The features the options name, user code read from its files, checked as
  // validateFeatures checks them for a forward family (InvalidValue errors naming the
  // option or the file).
  llvm::Expected<generator::Features> features() const;

private:
  llvm::cl::opt<std::string> window_;
  llvm::cl::opt<std::string> softcap_;
  llvm::cl::opt<bool> alibi_;
  llvm::cl::opt<std::string> scoreModFile_;
  llvm::cl::opt<std::string> maskModFile_;
};

// "--window L,R": each side an integer >= 0, or -1 for unbounded (not both -1).
llvm::Expected<std::pair<int, int>> parseWindowOption(llvm::StringRef text);
// The text of a user-code file named by `option` ("--score-mod"): an error naming the
// path when it is missing, unreadable, a directory or empty.
llvm::Expected<std::string> readUserCodeFile(llvm::StringRef option, llvm::StringRef path);
// An error when `family` cannot be compiled with `features` (the backward's families:
// validateFeatures' message), else success. `how` names what asked for the family
// ("--family bwd_mma", "--backward").
llvm::Error checkFamilyTakesFeatures(generator::Family family,
                                     const generator::Features &features, llvm::StringRef how);
// For the verbs that run user code with zeroed `args` (bench, bench-decode, named by
// `verb`): NotSupported when the code reads args.tensor (it would read through null
// pointers), else success, with a note on stderr when there is user code.
llvm::Error checkUserCodeRunsWithZeroArgs(const generator::Features &features,
                                          llvm::StringRef verb);

} // namespace flashjit::tools
