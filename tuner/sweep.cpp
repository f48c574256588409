#include "tuner/sweep.h"

#include "generator/templates.h"
#include "support/elapsed.h"
#include "support/error.h"
#include "tuner/family.h"
#include "tuner/operation.h"
#include "tuner/roofline.h"
#include "tuner/space.h"
#include "tuner/tuned_config.h"
#include "tuner/variants.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace flashjit::tuner {
namespace {

template <typename T> std::vector<T> unique(const std::vector<T> &values) {
  std::vector<T> out;
  for (const T &v : values)
    if (!llvm::is_contained(out, v))
      out.push_back(v);
  return out;
}

} // namespace

SweepConfig defaultSweep() {
  SweepConfig c;
  c.headDims = {64, 128, 256};
  c.dtypes = {generator::DType::BF16, generator::DType::FP16};
  c.causal = {false, true};
  c.seqlens = {1024, 4096, 16384};
  c.batchHeads = {32};
  c.decodeQueryLens = {1};
  c.decodeBatches = {1, 4, 16, 64};
  c.decodeKvLens = {1024, 4096, 16384};
  c.decodeHeads = {{32, 8}, {32, 32}, {64, 8}};
  return c;
}

std::vector<Bucket> decodeBuckets(const SweepConfig &c) {
  std::vector<Bucket> buckets;
  for (int q : unique(c.decodeQueryLens))
    for (const std::pair<int, int> &heads : unique(c.decodeHeads))
      for (int batch : unique(c.decodeBatches))
        for (int kv : unique(c.decodeKvLens)) {
          Bucket b = Bucket::forDecode(q, kv, batch, heads.first, heads.second);
          if (!llvm::is_contained(buckets, b))
            buckets.push_back(b);
        }
  return buckets;
}

std::vector<std::string> defaultCompileTargets() { return {"sm_80", "sm_86", "sm_89", "sm_90a"}; }

llvm::Expected<std::vector<bool>> parseCausalChoice(llvm::StringRef text) {
  std::string t = text.trim().lower();
  if (t == "both" || t == "all")
    return std::vector<bool>{false, true};
  if (t == "yes" || t == "true" || t == "causal" || t == "1")
    return std::vector<bool>{true};
  if (t == "no" || t == "false" || t == "nocausal" || t == "0")
    return std::vector<bool>{false};
  return makeError(ErrorCode::InvalidValue, "--causal '{0}': expected both, yes or no", text);
}

std::string SweepItem::label() const {
  return bucket ? spec.key() + " " + bucket->key() : spec.key();
}

std::vector<generator::Family> sweepFamilies(const SweepConfig &config, llvm::StringRef target) {
  if (config.families.empty()) {
    llvm::Expected<FamilyPlan> plan = familyPlan(target);
    if (!plan) {  // a target the generator does not know: validateSpec will say so
      llvm::consumeError(plan.takeError());
      return {generator::Family::FwdMma};
    }
    std::vector<generator::Family> families = plan->families();
    if (config.backward)
      families.push_back(plan->backward);
    if (config.decode)
      families.push_back(plan->decode);
    return families;
  }
  std::vector<generator::Family> families;
  for (generator::Family family : unique(config.families)) {
    generator::KernelSpec probe;
    probe.family = family;
    probe.target = target.str();
    if (llvm::Error err = generator::validateSpec(probe))
      llvm::consumeError(std::move(err));
    else
      families.push_back(family);
  }
  return families;
}

namespace {
// The family a spec of the sweep gets from sweepFamilies' `family`: with --family auto,
// the backward pass's is the API's choice for the spec's head dims (backwardFamilyFor),
// so the cache holds what fj_kernel_get asks for.
generator::Family sweptFamily(const SweepConfig &c, generator::Family family,
                              const generator::KernelSpec &spec) {
  if (!c.families.empty() || generator::operationOf(family) != generator::Operation::Backward)
    return family;
  // The auto plan forces nothing, so neither fails for a target the generator knows
  // (and validateSpec says why for one it does not).
  llvm::Expected<FamilyPlan> plan = familyPlan(spec.target);
  if (!plan) {
    llvm::consumeError(plan.takeError());
    return family;
  }
  llvm::Expected<generator::Family> chosen = backwardFamilyFor(*plan, spec);
  if (!chosen) {
    llvm::consumeError(chosen.takeError());
    return family;
  }
  return *chosen;
}

// Specs of the cross product, in the documented order, for each target. A spec the
// family cannot take (bwd_wgmma at a head dim it has no kernel for) is left out,
// described in `leftOut` when given.
std::vector<generator::KernelSpec> specsOf(const SweepConfig &c,
                                           llvm::ArrayRef<std::string> targets,
                                           std::vector<std::string> *leftOut) {
  std::vector<generator::KernelSpec> specs;
  for (generator::DType dtype : unique(c.dtypes))
    for (int d : unique(c.headDims))
      for (bool causal : unique(c.causal))
        for (const std::string &target : unique(targets.vec()))
          for (generator::Family family : sweepFamilies(c, target)) {
            generator::KernelSpec spec;
            spec.dtype = dtype;
            spec.headDim = spec.headDimV = d;
            spec.causal = causal;
            spec.target = target;
            spec.family = sweptFamily(c, family, spec);
            if (llvm::Error err = generator::validateSpec(spec)) {
              std::string why = llvm::toString(std::move(err));
              if (leftOut)
                leftOut->push_back(spec.key() + ": " + why);
              continue;
            }
            specs.push_back(spec);
          }
  return specs;
}
} // namespace

std::vector<SweepItem> tuneItems(const SweepConfig &config, llvm::StringRef target,
                                 std::vector<std::string> *leftOut) {
  std::vector<SweepItem> items;
  for (const generator::KernelSpec &spec : specsOf(config, {target.str()}, leftOut)) {
    if (generator::operationOf(spec.family) == generator::Operation::Decode) {
      for (const Bucket &b : decodeBuckets(config))
        items.push_back({spec, b});
      continue;
    }
    std::vector<Bucket> buckets;
    auto add = [&](const Bucket &b) {
      if (!llvm::is_contained(buckets, b))
        buckets.push_back(b);
    };
    for (int s : unique(config.seqlens))
      for (int bh : unique(config.batchHeads))
        add(Bucket::forShape(s, s, bh));
    for (int heads : unique(config.ladderHeads))
      for (const Bucket &b : lengthLadder(heads, 0))
        add(b);
    for (const Bucket &b : buckets)
      items.push_back({spec, b});
  }
  return items;
}

std::vector<SweepItem> compileItems(const SweepConfig &config,
                                    llvm::ArrayRef<std::string> targets,
                                    std::vector<std::string> *leftOut) {
  std::vector<SweepItem> items;
  for (const generator::KernelSpec &spec : specsOf(config, targets, leftOut)) {
    // A spec with no tile that fits its target (bwd_mma at d256 on sm_86/sm_89, whose
    // shared memory is 256 bytes short) has no kernel to prepare: left out, not failed.
    // (bwd_wgmma is never swept where it has no tile: specsOf keeps it to the head dims
    // it takes, on sm_90a.)
    if (llvm::Error err = generator::validateTile(spec, generator::defaultTile(spec))) {
      std::string why = llvm::toString(std::move(err));
      if (leftOut)
        leftOut->push_back(spec.key() + ": " + why);
      continue;
    }
    SweepItem item;
    item.spec = spec;
    items.push_back(item);
  }
  return items;
}

llvm::Expected<Shard> parseShard(llvm::StringRef text) {
  auto [left, right] = text.split('/');
  Shard s;
  if (left.trim().getAsInteger(10, s.index) || right.trim().getAsInteger(10, s.count) ||
      s.count < 1 || s.index < 0 || s.index >= s.count)
    return makeError(ErrorCode::InvalidValue,
                     "--shard '{0}': expected I/N with 0 <= I < N (e.g. 0/4)", text);
  return s;
}

std::vector<SweepItem> shardItems(llvm::ArrayRef<SweepItem> items, Shard shard) {
  std::vector<SweepItem> out;
  for (size_t i = 0; i < items.size(); ++i)
    if ((int)(i % shard.count) == shard.index)
      out.push_back(items[i]);
  return out;
}

std::vector<std::vector<SweepItem>> partitionItems(llvm::ArrayRef<SweepItem> items, int workers) {
  std::vector<std::vector<SweepItem>> parts(std::max(1, workers));
  for (size_t i = 0; i < items.size(); ++i)
    parts[i % parts.size()].push_back(items[i]);
  return parts;
}

llvm::Expected<bool> itemDone(cache::Cache &cache, const SweepItem &item,
                              llvm::StringRef deviceKey) {
  if (item.bucket) {
    llvm::Expected<std::optional<cache::Found<cache::TuningRow>>> row =
        cache.findTuning(tuningKeyFor(item.spec, *item.bucket, deviceKey));
    if (!row)
      return row.takeError();
    return row->has_value();
  }
  BuildOptions build;
  build.allowCompile = false;
  llvm::Expected<BuildResult> built =
      buildVariants(cache, item.spec, {generator::defaultTile(item.spec)}, build);
  if (!built)
    return built.takeError();
  return built->variants.front().binary.has_value();
}

llvm::StringRef statusName(SweepResult::Status status) {
  switch (status) {
  case SweepResult::Tuned: return "tuned";
  case SweepResult::Cached: return "cached";
  case SweepResult::Compiled: return "compiled";
  case SweepResult::Failed: return "FAILED";
  }
  return "unknown";
}

double rooflineFraction(const generator::KernelSpec &spec, const Bucket &bucket, double us,
                        const GpuSpec &gpu) {
  if (us <= 0)
    return 0;
  ForwardShape shape = timingShape(spec, bucket);
  if (llvm::Error err = validateShape(attentionShapeOf(spec, shape))) {
    llvm::consumeError(std::move(err));
    return 0;
  }
  RooflinePoint floor = operationFor(spec.family).floor(spec, shape, gpu);
  llvm::Expected<double> fraction = fractionOfRoofline(floor.predictedSeconds, us * 1e-6);
  if (!fraction) {
    llvm::consumeError(fraction.takeError());
    return 0;
  }
  return *fraction;
}

llvm::Expected<SweepResult> cachedResult(cache::Cache &cache, const SweepItem &item,
                                         llvm::StringRef deviceKey, const GpuSpec *gpu) {
  SweepResult r;
  r.item = item;
  r.status = SweepResult::Cached;
  if (!item.bucket) {
    r.tile = generator::defaultTile(item.spec).key();
    return r;
  }
  llvm::Expected<std::optional<cache::Found<cache::TuningRow>>> row =
      cache.findTuning(tuningKeyFor(item.spec, *item.bucket, deviceKey));
  if (!row)
    return row.takeError();
  if (!*row)
    return makeError(ErrorCode::NotFound, "{0}: not in the cache", item.label());
  r.tile = (*row)->row.config;
  r.us = (*row)->row.medianUs;
  r.tflops = (*row)->row.tflops;
  r.message = "from " + (*row)->path;
  if (gpu)
    r.rooflineFraction = rooflineFraction(item.spec, *item.bucket, r.us, *gpu);
  return r;
}

llvm::Expected<SweepOutcome> runTuneSweep(cache::Cache &cache, llvm::ArrayRef<SweepItem> items,
                                          const TuneSweepOptions &options,
                                          const SweepProgress &progress) {
  if (options.devices.empty())
    return makeError(ErrorCode::InvalidValue, "a tune sweep needs at least one device");
  for (const SweepItem &item : items)
    if (!item.bucket)
      return makeError(ErrorCode::InvalidValue, "{0}: a tune sweep item needs a bucket",
                       item.label());
  std::vector<std::vector<SweepItem>> parts = partitionItems(items, (int)options.devices.size());
  std::mutex mutex;
  SweepOutcome outcome;
  unsigned cores = llvm::hardware_concurrency().compute_thread_count();
  auto record = [&](SweepResult r) {
    if (progress.finished)
      progress.finished(r);
    std::lock_guard<std::mutex> lock(mutex);
    outcome.results.push_back(std::move(r));
  };

  auto worker = [&](size_t w) {
    int ordinal = options.devices[w];
    llvm::Expected<std::unique_ptr<runtime::Device>> device = runtime::Device::open(ordinal);
    if (!device) {
      std::string why = llvm::toString(device.takeError());
      for (const SweepItem &item : parts[w]) {
        SweepResult r;
        r.item = item;
        r.device = ordinal;
        r.message = why;
        record(std::move(r));
      }
      return;
    }
    const runtime::DeviceProperties &props = (*device)->properties();
    GpuSpec gpu = gpuSpecFromDevice(props);
    TunerOptions tunerOptions = options.tuner;
    if (!tunerOptions.compileThreads)
      tunerOptions.compileThreads = std::max(1u, cores / (unsigned)options.devices.size());
    Tuner tuner(device->get(), cache, tunerOptions);
    for (SweepItem item : parts[w]) {
      item.spec.target = props.target();  // a worker tunes for the device it has
      if (progress.started)
        progress.started(item, ordinal);
      TunerCounters before = tuner.counters();
      auto start = std::chrono::steady_clock::now();
      llvm::Expected<Selection> sel = tuner.select(item.spec, *item.bucket);
      SweepResult r;
      r.item = item;
      r.device = ordinal;
      r.seconds = secondsSince(start);
      r.compiled = tuner.counters().compilations - before.compilations;
      if (!sel) {
        r.message = llvm::toString(sel.takeError());
      } else {
        r.status = sel->origin == Origin::TunedNow ? SweepResult::Tuned : SweepResult::Cached;
        r.tile = TunedConfig{sel->tile, sel->splits}.key();  // the row's config
        r.us = sel->tunedUs;
        r.tflops = sel->tflops;
        r.rooflineFraction = rooflineFraction(item.spec, *item.bucket, r.us, gpu);
        r.message = sel->note;
      }
      record(std::move(r));
    }
    TunerCounters c = tuner.counters();
    std::lock_guard<std::mutex> lock(mutex);
    outcome.counters.compilations += c.compilations;
    outcome.counters.timings += c.timings;
    outcome.counters.checks += c.checks;
    outcome.counters.tunes += c.tunes;
  };

  if (parts.size() == 1) {
    worker(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t w = 0; w < parts.size(); ++w)
      threads.emplace_back(worker, w);
    for (std::thread &t : threads)
      t.join();
  }
  return std::move(outcome);
}

SweepOutcome runCompileSweep(cache::Cache &cache, llvm::ArrayRef<SweepItem> items,
                             unsigned threads, const SweepProgress &progress) {
  SweepOutcome outcome;
  std::mutex mutex;
  if (!threads)
    threads = llvm::hardware_concurrency().compute_thread_count();
  llvm::ThreadPool pool(llvm::hardware_concurrency(std::max(1u, threads)));
  for (const SweepItem &item : items)
    pool.async([&, item] {
      if (progress.started)
        progress.started(item, -1);
      auto start = std::chrono::steady_clock::now();
      SweepResult r;
      r.item = item;
      r.tile = generator::defaultTile(item.spec).key();
      bool compiled = false;
      llvm::Expected<std::string> key = compileOnly(cache, item.spec, &compiled);
      r.seconds = secondsSince(start);
      r.compiled = compiled ? 1 : 0;
      if (!key) {
        r.message = llvm::toString(key.takeError());
      } else {
        r.status = compiled ? SweepResult::Compiled : SweepResult::Cached;
        r.message = *key;
      }
      if (progress.finished)
        progress.finished(r);
      std::lock_guard<std::mutex> lock(mutex);
      outcome.counters.compilations += r.compiled;
      outcome.results.push_back(std::move(r));
    });
  pool.wait();
  return outcome;
}

} // namespace flashjit::tuner
