// Runs one disabled test of this binary in a child process with extra environment
// variables: how the tuner tests show what a *second process* sees (a cache filled
// by another process, a process without NVRTC).
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"

#include <string>
#include <vector>

#include <unistd.h> // environ

namespace flashjit::testing {

// Exit status of `<this test binary> --gtest_filter=<test>` (a DISABLED_ test, run on
// purpose) with `extra` ("NAME=value") added to the environment; -1 when it could not
// run, with `error` set.
inline int runTestInChild(llvm::StringRef test, const std::vector<std::string> &extra,
                          std::string &error) {
  std::string self = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  std::vector<std::string> envStore;
  for (char **e = environ; *e; ++e)
    envStore.push_back(*e);
  envStore.insert(envStore.end(), extra.begin(), extra.end());
  std::vector<llvm::StringRef> env(envStore.begin(), envStore.end());
  std::string filter = "--gtest_filter=" + test.str();
  std::vector<llvm::StringRef> args = {self, "--gtest_also_run_disabled_tests", filter};
  return llvm::sys::ExecuteAndWait(self, args, llvm::ArrayRef<llvm::StringRef>(env), {}, 300, 0,
                                   &error);
}

} // namespace flashjit::testing
