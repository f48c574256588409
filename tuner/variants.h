// Candidates as binaries: emit the source of each tile, key it, take its binary from
// the cache or compile it with NVRTC (many at once, on a thread pool), publish what
// was compiled, and reject what compiled badly (spills; serialized or ignored
// instructions). Shared by tuning, heuristic selection and compile-only sweeps.
#pragma once

#include "cache/cache.h"
#include "generator/emit.h"
#include "generator/spec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flashjit::tuner {

// Binary key of DESIGN.md: sha256(source + '\0' + options joined by '\n' + '\0' +
// NVRTC version + '\0' + exact target), lower-case hex.
std::string binaryKey(llvm::StringRef source, llvm::ArrayRef<std::string> options,
                      llvm::StringRef nvrtcVersion, llvm::StringRef target);
// Its readable text: "fwd_mma.bf16.d128.dv128.causal.sm90a/bm128.bn64.w8.s2".
std::string binaryKeyText(const generator::KernelSpec &spec, const generator::TileConfig &tile);

// Why a compiled variant must not be used, or "" when it may: it spills registers,
// or a line of the NVRTC/ptxas log reports serialized or ignored instructions.
std::string compileRejection(int spillBytes, llvm::StringRef log);

struct Variant {
  generator::TileConfig tile;
  generator::EmittedKernel emitted;
  std::string key, keyText;
  std::optional<cache::BinaryRow> binary; // when found in the cache or compiled
  bool compiledNow = false;
  std::optional<cache::Source> cachedIn;  // where a cached binary came from
  std::string error;                      // emitting or compiling failed
  std::string rejection;                  // compileRejection()
  bool usable() const { return binary && error.empty() && rejection.empty(); }
  // NVRTC rejected the source of a spec with the user's code: every tile fails alike,
  // and the caller's fix is in that code (FJ_ERROR_COMPILE with NVRTC's log).
  bool userCodeFailed(const generator::KernelSpec &spec) const {
    return (!spec.features.scoreMod.empty() || !spec.features.maskMod.empty()) &&
           error.find("NVRTC_ERROR_COMPILATION") != std::string::npos;
  }
};

struct BuildOptions {
  bool allowCompile = true;   // false: a binary missing from the cache is an error (in
                              // the variant, not of the call)
  unsigned threads = 0;       // compile threads; 0: one per core
  // Compile again a tile whose cached row spilled, rather than reject it on the row's
  // word: rows written by flashjit 0.12.0 and earlier, which compiled with whatever copy
  // of NVRTC the process shared, may carry a spill that another library's use of NVRTC
  // caused (runtime/nvrtc_api.h).
  bool recheckSpills = false;
  // Test hook: edits a candidate's source before it is keyed and compiled (the GPU
  // tests plant a wrong kernel this way).
  std::function<void(const generator::TileConfig &, std::string &source)> mutateSource;
};

struct BuildResult {
  std::vector<Variant> variants; // one per tile, in the order given
  int compiled = 0;              // NVRTC compilations this call ran
  double seconds = 0;            // wall time, compiling included
};

// Every tile of `spec` as a Variant. Fails only when the cache or NVRTC's version
// cannot be read; a tile that does not emit or compile is recorded in its Variant.
// Compiled binaries are published to the cache as soon as they are made (so an
// interrupted tune keeps them), except those the log rejects: the cache does not keep
// the log, so a cached copy could not be rejected again.
llvm::Expected<BuildResult> buildVariants(cache::Cache &cache, const generator::KernelSpec &spec,
                                          llvm::ArrayRef<generator::TileConfig> tiles,
                                          const BuildOptions &options);

// The Variant of `tile` with the binary a tuning row recorded under `key`, taken from
// the cache as is: for a process that cannot compute binary keys itself (no NVRTC).
// Nothing when the cache does not have that binary.
llvm::Expected<std::optional<Variant>> recordedVariant(cache::Cache &cache,
                                                       const generator::KernelSpec &spec,
                                                       const generator::TileConfig &tile,
                                                       llvm::StringRef key);

} // namespace flashjit::tuner
