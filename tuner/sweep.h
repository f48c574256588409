// Offline sweeps (`flashjit tune`): the cross product of specs and buckets, split
// into disjoint shards (many hosts) and per-device parts (many GPUs), resumed from
// the cache, and run through Tuners or, with no GPU, compiled only.
#pragma once

#include "cache/cache.h"
#include "generator/spec.h"
#include "tuner/bucket.h"
#include "tuner/gpu_specs.h"
#include "tuner/tuner.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flashjit::tuner {

struct SweepConfig {
  // Kernel families. Empty (the default, `--family auto`): on each target, the families
  // the C API loads there (tuner/family.h), so that the cache holds what fj_kernel_get
  // asks for: fwd_wgmma and its fwd_mma fallback on sm_90a, fwd_mma elsewhere. A family
  // is left out on targets it cannot run on (sweepFamilies).
  std::vector<generator::Family> families;
  // With `families` empty: also the backward pass's family (what fj_kernel_get loads
  // for desc.backward: bwd_wgmma on sm_90a for the head dims it takes, else bwd_mma),
  // after the forward's.
  bool backward = false;
  // With `families` empty: also the decode kernels' family (dec_mma: what fj_kernel_get
  // loads for desc.decode), after the others.
  bool decode = false;
  std::vector<int> headDims;
  std::vector<generator::DType> dtypes;
  std::vector<bool> causal;  // {false, true}: both
  std::vector<int> seqlens;  // seqlen_q = seqlen_k
  std::vector<int> batchHeads;
  // Query-head counts whose length ladder (lengthLadder(heads, 0): what fj_kernel_get
  // tunes for a description with no length hint) joins the buckets above.
  std::vector<int> ladderHeads;
  // The decode specs' buckets, instead of the ones above (Bucket::forDecode of each
  // query length x head layout x batch x KV length; duplicates dropped).
  std::vector<int> decodeQueryLens, decodeBatches, decodeKvLens;
  std::vector<std::pair<int, int>> decodeHeads;  // (query heads, KV heads)
};

// The buckets a decode spec of the sweep is tuned at, in a stable order.
std::vector<Bucket> decodeBuckets(const SweepConfig &config);

// The README's main job: head dims 64, 128 and 256, bf16 and fp16, causal and not, over
// sequence lengths 1024, 4096 and 16384 at batch x heads 32. Its decode buckets (used
// with `decode` or a decode family): a step of 1 query row, heads 32/8, 32/32 and 64/8,
// batch 1, 4, 16, 64, KV lengths 1024, 4096, 16384 (at most 4.3 GB of K+V at d 128:
// longer caches are asked for, --decode-kv-lens 65536, where the device holds them).
SweepConfig defaultSweep();
// The targets the deviceless default sweep compiles for.
std::vector<std::string> defaultCompileTargets(); // sm_80, sm_86, sm_89, sm_90a

// "both" -> {false, true}; "yes"/"true"/"causal" -> {true}; "no"/"false"/"nocausal" ->
// {false}.
llvm::Expected<std::vector<bool>> parseCausalChoice(llvm::StringRef text);

struct SweepItem {
  generator::KernelSpec spec;
  std::optional<Bucket> bucket; // none: compile-only
  std::string label() const;    // "spec bucket" or "spec"
};

// The families the sweep covers on `target`, in order (the API's primary first): the
// configured ones that run there, or the API's plan for it (whose backward family a
// spec of the sweep gets where it takes the spec's head dims, bwd_mma where not).
std::vector<generator::Family> sweepFamilies(const SweepConfig &config, llvm::StringRef target);

// Tuning items for one device target, in a stable order with the buckets of one spec
// adjacent (they share compiled candidates): dtype, head dim, causal, family, then
// seqlen, batch x heads, then the ladders' buckets (a decode spec: decodeBuckets).
// Duplicated buckets are dropped. A
// spec its family cannot take (--family bwd_wgmma at head dim 256) is left out,
// described in `leftOut` when given.
std::vector<SweepItem> tuneItems(const SweepConfig &config, llvm::StringRef target,
                                 std::vector<std::string> *leftOut = nullptr);
// Compile-only items: one per (spec, target), in the same order, targets then families
// innermost. A spec its family cannot take, or whose default tile does not fit its
// target, has no kernel and is left out, described in `leftOut` when given.
std::vector<SweepItem> compileItems(const SweepConfig &config,
                                    llvm::ArrayRef<std::string> targets,
                                    std::vector<std::string> *leftOut = nullptr);

// --shard I/N: the I-th of N disjoint parts (0 <= I < N).
struct Shard {
  int index = 0, count = 1;
};
llvm::Expected<Shard> parseShard(llvm::StringRef text);
// Item i (in the stable order) belongs to shard I iff i % N == I.
std::vector<SweepItem> shardItems(llvm::ArrayRef<SweepItem> items, Shard shard);
// Round-robin parts for `workers` workers (one per device): item i to worker i % workers.
std::vector<std::vector<SweepItem>> partitionItems(llvm::ArrayRef<SweepItem> items, int workers);

// Resume: whether an item's result is already in the cache. Tuning items: a tuning
// row under `deviceKey`; compile-only items: the default tile's binary for this NVRTC.
llvm::Expected<bool> itemDone(cache::Cache &cache, const SweepItem &item,
                              llvm::StringRef deviceKey);

// One item's outcome, for the summary table.
struct SweepResult {
  SweepItem item;
  enum Status { Tuned, Cached, Compiled, Failed } status = Failed;
  std::string tile;          // the winner (or the compiled default tile)
  double us = 0, tflops = 0; // 0 when not timed
  double rooflineFraction = 0;
  double seconds = 0;        // spent on this item now (0 when cached)
  int compiled = 0;          // NVRTC runs for this item
  std::string message;       // error, or a note
  int device = -1;           // ordinal that ran it (-1: none)
};
llvm::StringRef statusName(SweepResult::Status status);

// Progress events: an item starts or finishes (on any worker thread; the callback
// must be thread-safe).
struct SweepProgress {
  std::function<void(const SweepItem &, int device)> started;
  std::function<void(const SweepResult &)> finished;
};

struct TuneSweepOptions {
  std::vector<int> devices{0};
  TunerOptions tuner;            // per-worker copy; mode Default or Exhaustive
};

struct SweepOutcome {
  std::vector<SweepResult> results; // pending items only, in completion order
  TunerCounters counters;           // summed over the workers
};

// Tunes `items` (already filtered to the pending ones) on the given devices, one
// worker thread per device with its own Device and Tuner over the shared cache,
// items partitioned round-robin. An item that fails is recorded and the sweep goes on.
llvm::Expected<SweepOutcome> runTuneSweep(cache::Cache &cache, llvm::ArrayRef<SweepItem> items,
                                          const TuneSweepOptions &options,
                                          const SweepProgress &progress);

// Compiles `items` (compile-only) on `threads` threads into the cache.
SweepOutcome runCompileSweep(cache::Cache &cache, llvm::ArrayRef<SweepItem> items,
                             unsigned threads, const SweepProgress &progress);

// The result of an item found done in the cache (the row's winner and time), for the
// summary. `gpu` (optional) gives the roofline fraction.
llvm::Expected<SweepResult> cachedResult(cache::Cache &cache, const SweepItem &item,
                                         llvm::StringRef deviceKey, const GpuSpec *gpu);

// The fraction of the roofline (tuner/roofline.h) a time reaches on the bucket's
// timing problem, 0 when it cannot be computed.
double rooflineFraction(const generator::KernelSpec &spec, const Bucket &bucket, double us,
                        const GpuSpec &gpu);

} // namespace flashjit::tuner
