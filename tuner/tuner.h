// The tuner: for a kernel spec and a shape bucket, the variant to launch. It answers
// from the cache (user DB, then shipped DBs) and, on a miss, per mode: tunes (prune
// the space, compile the candidates in parallel, gate each on the correctness bar,
// time the survivors, pick the winner, publish binary and row in one transaction),
// compiles the model's choice, or fails. docs/TUNING.md describes it all.
#pragma once

#include "cache/cache.h"
#include "generator/spec.h"
#include "runtime/driver.h"
#include "tuner/bucket.h"
#include "tuner/loaded_kernel.h"
#include "tuner/measure.h"
#include "tuner/mode.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace flashjit::tuner {

enum class Origin { ShippedCache, UserCache, CompiledNow, TunedNow, SystemCache };
llvm::StringRef originName(Origin origin); // "shipped cache", "user cache", "compiled now",
                                           // "tuned now"

// What one tune did and cost, for `flashjit tune` and the 30 s budget.
struct TuneReport {
  int space = 0;            // tiles enumerated
  int pruned = 0;           // before compiling (fit and model)
  int compiled = 0;         // NVRTC compilations run now (the rest came from the cache)
  int rejectedCompile = 0;  // failed to compile, spilled, or the log reported problems
  int rejectedWrong = 0;    // failed the correctness bar
  int splitVariants = 0;    // split-KV (decode): the tiles' timings at fixed split counts,
                            // besides the heuristic's; counted below like tiles
  int screened = 0;         // timed briefly (the screening pass)
  int timed = 0;            // finalists: timed with the full protocol
  int skippedBudget = 0;    // passed the bar but not screened: the budget ran out
  double compileSeconds = 0, checkSeconds = 0, timeSeconds = 0, totalSeconds = 0;
  double smClockMHzBefore = 0, smClockMHzAfter = 0; // 0 when NVML is unavailable
};

// A ready-to-launch variant: what a C API handle dispatches to.
struct Selection {
  generator::KernelSpec spec;
  Bucket bucket;                         // the bucket the row was tuned for
  generator::TileConfig tile;
  int splits = 0;                        // decode: the split count tuned with the tile for
                                         // this bucket (0: the heuristic; the kernel
                                         // launches with it, DecodeKernel::plan)
  Origin origin = Origin::CompiledNow;
  std::string binaryKey, tuningKeyText;  // readable key strings (tuningKeyText empty when
                                         // untuned)
  std::string binaryKeyText;             // "spec/tile"
  std::string source;                    // the emitted CUDA source of this variant
  std::shared_ptr<LoadedKernel> kernel;  // loaded on the tuner's device (null without one)
  int registers = 0, sharedBytes = 0;
  double tunedUs = 0;                    // 0 when not timed
  double tflops = 0;                     // of the tuned bucket's timing problem, 0 untimed
  std::string note;                      // how it was chosen, fallbacks included
  TuneReport report;                     // filled when origin is TunedNow
};

struct TunerOptions {
  TuneMode mode = TuneMode::Default;
  double budgetSeconds = 30;  // per (spec, bucket) tune; candidates not yet screened when it
                              // runs out are skipped (heuristic mode's tile, then the
                              // model's best, are screened first)
  // The timing's floor as a share of the seconds compiling and checking took: where they
  // overran the budget, the timing still gets that long (tuner/screening.h,
  // timingAllowance). 0: the budget alone decides.
  double buildShare = 0.25;
  std::function<void(llvm::StringRef)> log; // progress / warnings; may be empty
  unsigned compileThreads = 0;              // 0: one per core
  MeasureOptions measure;                   // the timing protocol's knobs (finalists)
  // The screening pass every candidate gets first; the few near the fastest then get
  // `measure` (docs/TUNING.md, "The measurement protocol").
  MeasureOptions screen = MeasureOptions::screening();
  bool retune = false;        // tune even when the cache has a row (replaces it)
  // The device key to look rows up under when there is no device (select() then
  // returns cache hits without loading them). Ignored with a device.
  std::string deviceKey;

  // ---- test hooks ----
  // Non-empty: the candidate space is exactly these tiles (still fit-checked).
  std::vector<generator::TileConfig> candidates;
  // Edits a candidate's source before it is compiled (e.g. to plant a wrong kernel).
  std::function<void(const generator::TileConfig &, std::string &source)> mutateSource;
};

// Work done by one Tuner since it was made: what the tests count.
struct TunerCounters {
  int compilations = 0; // NVRTC runs
  int timings = 0;      // candidates timed
  int checks = 0;       // candidates run against the reference
  int tunes = 0;        // (spec, bucket) tunes
};

// The tuning key of (spec, bucket) on the device with this key, for this generator and
// measurement protocol: what a tuning row is stored and found under.
cache::TuningKey tuningKeyFor(const generator::KernelSpec &spec, const Bucket &bucket,
                              llvm::StringRef deviceKey);

class Tuner { // thread-safe: many threads may call select() at once; the same
              // (spec, bucket) requested concurrently is tuned once (others wait).
public:
  // `device` may be null for compile-only use (then select() can only return cache
  // hits' binaries without loading them, under options.deviceKey).
  Tuner(runtime::Device *device, cache::Cache &cache, TunerOptions options);
  ~Tuner();
  Tuner(const Tuner &) = delete;
  Tuner &operator=(const Tuner &) = delete;

  // The variant for `spec` at `bucket`: the cached winner (user, then shipped);
  // else per mode: Default/Exhaustive tune now (and publish binary + row to the
  // cache in one transaction), Heuristic compile the model-chosen tile (binary
  // cached, no tuning row), Cached -> ErrorCode::NotFound with cache::Cache::explainMiss
  // text.
  llvm::Expected<Selection> select(const generator::KernelSpec &spec, const Bucket &bucket);

  // Every bucket already tuned for `spec` on this device (from the caches), loaded,
  // never tuning or compiling anything new except a binary missing for a tuned row
  // (which is compiled unless mode is Cached). For handles to dispatch over.
  llvm::Expected<std::vector<Selection>> loadTuned(const generator::KernelSpec &spec);

  // The generator's default tile for `spec` (what `flashjit tune --compile-only`
  // prepares), from the cache or compiled (not in Cached mode), loaded: the last
  // fallback of a handle whose spec has no tuned bucket. Its note says so.
  llvm::Expected<Selection> heuristicDefault(const generator::KernelSpec &spec);

  // Among `variants`, the one to use for a launch of this bucket: exact bucket, else
  // the nearest by Bucket::distance (ties: the smaller bucket). Pure, no locking.
  // Null when `variants` is empty.
  static const Selection *dispatch(llvm::ArrayRef<Selection> variants, const Bucket &bucket);
  // What dispatch() chose, in words: "tuned for q1024.k1024.bh32", or "bucket
  // q2048.k2048.bh32 never tuned: using nearest tuned bucket q1024.k1024.bh32".
  static std::string dispatchNote(const Selection &chosen, const Bucket &wanted);

  // The tuning key of (spec, bucket) on this tuner's device.
  llvm::Expected<cache::TuningKey> tuningKey(const generator::KernelSpec &spec,
                                             const Bucket &bucket) const;

  const TunerOptions &options() const;
  TunerCounters counters() const;

  class Impl;

private:
  std::unique_ptr<Impl> impl_;
};

// No device: compile the heuristic default tile of `spec` for spec.target into the
// cache (reusing a cached binary). Used by `flashjit tune --compile-only`.
// `compiledNow`, when given, says whether NVRTC ran.
llvm::Expected<std::string /*binaryKey*/> compileOnly(cache::Cache &cache,
                                                      const generator::KernelSpec &spec,
                                                      bool *compiledNow = nullptr);

// No device: a tuning winner measured elsewhere (a row of a winners file), made usable
// here: its tile compiled for its spec's target with this NVRTC, and the row published
// pointing at that binary, every measured field kept. Only rows measured with this
// build's generator fingerprint and measurement protocol are taken; the others are
// Stale (their kernels or timings may differ from what this build runs).
struct WinnerImport {
  enum Status { Imported, Stale, Failed } status = Failed;
  std::string label; // "spec bucket device"
  std::string why;   // Stale and Failed: the reason
  bool compiledNow = false;
};
llvm::Expected<WinnerImport> importWinner(cache::Cache &cache, const cache::TuningRow &winner);

// Why this build would never load a tuning row of this spec, measured elsewhere: its
// generator fingerprint is not the spec family's here, or its measurement protocol is
// another. Nothing when the row is current.
std::optional<std::string> staleReason(const generator::KernelSpec &spec,
                                       const cache::TuningKey &key);

// Binary key of DESIGN.md: sha256(source + '\0' + options joined + '\0' + NVRTC
// version + '\0' + exact target) (tuner/variants.h), and its readable text
// "spec/tile" (binaryKeyText()).
std::string binaryKey(llvm::StringRef source, llvm::ArrayRef<std::string> options,
                      llvm::StringRef nvrtcVersion, llvm::StringRef target);

} // namespace flashjit::tuner
