#include "tuner/tuner.h"

#include "generator/templates.h"
#include "support/error.h"
#include "tuner/space.h"
#include "tuner/tuned_config.h"
#include "tuner/tuner_impl.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit::tuner {

llvm::StringRef originName(Origin origin) {
  switch (origin) {
  case Origin::ShippedCache: return "shipped cache";
  case Origin::UserCache: return "user cache";
  case Origin::CompiledNow: return "compiled now";
  case Origin::TunedNow: return "tuned now";
  case Origin::SystemCache: return "system cache";
  }
  return "unknown";
}

Selection selectionOf(const generator::KernelSpec &spec, const Bucket &bucket,
                      const Variant &variant, Origin origin) {
  Selection s;
  s.spec = spec;
  s.bucket = bucket;
  s.tile = variant.tile;
  s.origin = origin;
  s.binaryKey = variant.key;
  s.binaryKeyText = variant.keyText;
  s.source = variant.emitted.source;
  s.sharedBytes = variant.emitted.sharedBytes;
  if (variant.binary)
    s.registers = variant.binary->registers;
  return s;
}

namespace {
Origin originOf(cache::Source source) {
  switch (source) {
  case cache::Source::User: return Origin::UserCache;
  case cache::Source::Shipped: return Origin::ShippedCache;
  case cache::Source::System: return Origin::SystemCache;
  }
  return Origin::ShippedCache;
}
} // namespace

// ---- Impl -------------------------------------------------------------------------

Tuner::Impl::Impl(runtime::Device *device, cache::Cache &cache, TunerOptions options)
    : device(device), cache(cache), options(std::move(options)) {}

Tuner::Impl::~Impl() {
  // Device memory, modules and the stream are released in the device's context, which
  // need not be current on the thread that destroys the tuner.
  if (device)
    llvm::consumeError(device->makeCurrent());
  checkers.clear();
  tuningArgsCheckers.clear();
  {
    std::lock_guard<std::mutex> lock(kernelsMutex);
    kernels.clear();
  }
  if (stream)
    runtime::destroyStream(stream);
}

cache::TuningKey tuningKeyFor(const generator::KernelSpec &spec, const Bucket &bucket,
                              llvm::StringRef deviceKey) {
  cache::TuningKey key;
  key.spec = spec.key();
  key.bucket = bucket.key();
  key.deviceKey = deviceKey.str();
  key.generatorFingerprint = generator::familyFingerprint(spec.family);
  key.protocolVersion = measurementProtocol(spec);
  return key;
}

llvm::Expected<cache::TuningKey> Tuner::Impl::tuningKey(const generator::KernelSpec &spec,
                                                        const Bucket &bucket) const {
  std::string deviceKey = device ? device->properties().deviceKey() : options.deviceKey;
  if (deviceKey.empty())
    return makeError(ErrorCode::NoDevice,
                     "no device: tuning rows are per device, and neither a device nor a "
                     "device key was given");
  return tuningKeyFor(spec, bucket, deviceKey);
}

llvm::Error Tuner::Impl::checkSpec(const generator::KernelSpec &spec) const {
  if (llvm::Error err = generator::validateSpec(spec))
    return err;
  if (device && spec.target != device->properties().target())
    return makeError(ErrorCode::InvalidValue,
                     "spec {0} is compiled for {1}, but the device ({2}) needs {3}", spec.key(),
                     spec.target, device->properties().name, device->properties().target());
  return llvm::Error::success();
}

llvm::Expected<std::shared_ptr<LoadedKernel>> Tuner::Impl::load(const generator::KernelSpec &spec,
                                                                const Variant &variant,
                                                                int splits,
                                                                const Bucket &bucket) {
  if (!device)
    return nullptr;
  std::lock_guard<std::mutex> lock(kernelsMutex);
  const std::string key = loadedKey(variant, splits, bucket);
  auto &slot = kernels[key];
  if (slot)
    return slot;
  if (llvm::Error err = device->makeCurrent())
    return std::move(err);
  const Operation &operation = operationFor(spec.family);
  auto loaded = operation.load(variant.binary->cubin, variant.emitted);
  if (loaded && splits > 0) {
    std::unique_ptr<LoadedKernel> fixed =
        operation.withSplits(**loaded, splits, timingShape(spec, bucket));
    if (!fixed)
      loaded = makeError(ErrorCode::InvalidValue,
                         "{0} was tuned with {1} splits, but its kernels take no split count",
                         variant.keyText, splits);
    else
      *loaded = std::move(fixed);
  }
  if (!loaded) {
    kernels.erase(key);
    return loaded.takeError();
  }
  slot = std::shared_ptr<LoadedKernel>(std::move(*loaded));
  return slot;
}

llvm::Expected<Selection> Tuner::Impl::fromRow(const generator::KernelSpec &spec,
                                               const cache::Found<cache::TuningRow> &found) {
  const cache::TuningRow &row = found.row;
  llvm::Expected<TunedConfig> config = TunedConfig::parse(row.config);
  if (!config)
    return config.takeError();
  const generator::TileConfig &tile = config->tile;
  llvm::Expected<Bucket> bucket = Bucket::parse(row.key.bucket);
  if (!bucket)
    return bucket.takeError();
  BuildOptions build;
  build.allowCompile = options.mode != TuneMode::Cached;
  build.threads = 1;
  llvm::Expected<BuildResult> built = buildVariants(cache, spec, {tile}, build);
  std::string noCompiler;
  if (!built) {
    // No NVRTC here (so no binary key of our own): the binary the row recorded, as is.
    noCompiler = takeErrorReport(built.takeError()).message;
    llvm::Expected<std::optional<Variant>> recorded =
        recordedVariant(cache, spec, tile, row.binaryKey);
    if (!recorded)
      return recorded.takeError();
    if (!*recorded)
      return makeError(ErrorCode::NotFound, "tuned winner {0} for {1}: {2}, and its binary {3} "
                       "is not in the cache", binaryKeyText(spec, tile), row.key.bucket,
                       noCompiler, row.binaryKey);
    built = BuildResult{};
    built->variants.push_back(std::move(**recorded));
  }
  compilations += built->compiled;
  Variant &v = built->variants.front();
  if (!v.error.empty() || !v.binary)
    return makeError(options.mode == TuneMode::Cached ? ErrorCode::NotFound : ErrorCode::Compile,
                     "tuned winner {0} for {1} ({2}): {3}", v.keyText, row.key.bucket,
                     found.path, v.error);
  Selection s = selectionOf(spec, *bucket, v, originOf(found.source));
  s.splits = config->splits;
  s.tuningKeyText = row.key.text();
  s.tunedUs = row.medianUs;
  s.tflops = row.tflops;
  s.note = llvm::formatv("tuned winner from the {0} ({1})", originName(s.origin), found.path);
  if (!noCompiler.empty())
    s.note += "; its recorded binary, used as is (" + noCompiler + ")";
  if (v.compiledNow)
    s.note += v.key == row.binaryKey
                  ? "; its binary was missing and was compiled now"
                  : "; binary compiled now (this NVRTC or target differs from the tune's)";
  if (!v.rejection.empty())
    s.note += "; warning: with this compiler it " + v.rejection;
  if (s.splits > 0)
    s.note += llvm::formatv("; {0} splits, tuned with the tile", s.splits).str();
  llvm::Expected<std::shared_ptr<LoadedKernel>> kernel = load(spec, v, s.splits, *bucket);
  if (!kernel)
    return kernel.takeError();
  s.kernel = std::move(*kernel);
  return s;
}

llvm::Expected<Selection> Tuner::Impl::heuristic(const generator::KernelSpec &spec,
                                                 const Bucket &bucket) {
  SpaceOptions spaceOptions;
  spaceOptions.only = options.candidates;
  std::vector<SpaceEntry> space =
      buildSpace(spec, bucket, deviceModelFor(device->properties()), spaceOptions);
  // The model's choice first; should it not compile cleanly, the next best.
  leadWithHeuristicChoice(space, spec, bucket);
  std::string failures;
  BuildOptions build;
  build.threads = 1;
  build.mutateSource = options.mutateSource;
  // A cached spill would refuse the tile for good, and this mode has only a tile or two
  // to offer: such a row is checked by compiling again (BuildOptions::recheckSpills).
  build.recheckSpills = true;
  for (const SpaceEntry &entry : space) {
    if (entry.verdict != Verdict::Candidate)
      continue;
    llvm::Expected<BuildResult> built = buildVariants(cache, spec, {entry.tile}, build);
    if (!built)
      return built.takeError();
    compilations += built->compiled;
    Variant &v = built->variants.front();
    if (v.userCodeFailed(spec))
      return makeError(ErrorCode::Compile, "{0}", v.error);
    if (!v.usable()) {
      failures += llvm::formatv("; {0}: {1}", v.tile.key(), v.error.empty() ? v.rejection : v.error);
      continue;
    }
    Selection s = selectionOf(spec, bucket, v,
                              v.compiledNow ? Origin::CompiledNow : originOf(*v.cachedIn));
    s.note = llvm::formatv("heuristic: the model's tile for {0} ({1:F1} us predicted, {2}); "
                           "not timed",
                           bucket.key(), entry.estimate.modelSeconds * 1e6,
                           entry.estimate.limiter());
    llvm::Expected<std::shared_ptr<LoadedKernel>> kernel = load(spec, v);
    if (!kernel)
      return kernel.takeError();
    s.kernel = std::move(*kernel);
    return s;
  }
  return makeError(ErrorCode::NotSupported, "heuristic mode: no tile of {0} for {1} is usable{2}",
                   spec.key(), bucket.key(), failures);
}

// ---- Tuner ------------------------------------------------------------------------

Tuner::Tuner(runtime::Device *device, cache::Cache &cache, TunerOptions options)
    : impl_(std::make_unique<Impl>(device, cache, std::move(options))) {}

Tuner::~Tuner() = default;

const TunerOptions &Tuner::options() const { return impl_->options; }

TunerCounters Tuner::counters() const {
  return {impl_->compilations.load(), impl_->timings.load(), impl_->checks.load(),
          impl_->tunes.load()};
}

llvm::Expected<cache::TuningKey> Tuner::tuningKey(const generator::KernelSpec &spec,
                                                  const Bucket &bucket) const {
  return impl_->tuningKey(spec, bucket);
}

llvm::Expected<Selection> Tuner::select(const generator::KernelSpec &spec, const Bucket &bucket) {
  Impl &impl = *impl_;
  if (llvm::Error err = impl.checkSpec(spec))
    return std::move(err);
  llvm::Expected<cache::TuningKey> key = impl.tuningKey(spec, bucket);
  if (!key)
    return key.takeError();
  auto lookup = [&]() -> llvm::Expected<std::optional<Selection>> {
    llvm::Expected<std::optional<cache::Found<cache::TuningRow>>> row = impl.cache.findTuning(*key);
    if (!row)
      return row.takeError();
    if (!*row)
      return std::nullopt;
    llvm::Expected<Selection> s = impl.fromRow(spec, **row);
    if (!s)
      return s.takeError();
    return std::move(*s);
  };
  if (!impl.options.retune) {
    llvm::Expected<std::optional<Selection>> hit = lookup();
    if (!hit)
      return hit.takeError();
    if (*hit)
      return std::move(**hit);
  }
  if (impl.options.mode == TuneMode::Cached)
    return makeError(ErrorCode::NotFound, "cached mode: no tuned kernel for {0} at {1}: {2}",
                     spec.key(), bucket.key(), impl.cache.explainMiss(*key));
  if (!impl.device)
    return makeError(ErrorCode::NoDevice,
                     "no device to {0} {1} at {2} on (without one, use compileOnly())",
                     impl.options.mode == TuneMode::Heuristic ? "compile" : "tune", spec.key(),
                     bucket.key());
  if (impl.options.mode == TuneMode::Heuristic)
    return impl.heuristic(spec, bucket);
  // User code that reads tensors of the caller's cannot run on the tuner's inputs: the
  // model's tile, compiled, not run (the caller can pass tuning args to tune it).
  if (spec.features.needsTuningArgs()) {
    llvm::Expected<Selection> s = impl.heuristic(spec, bucket);
    if (s)
      s->note = "not tuned: the user code reads args.tensor and no tuning args were given; " +
                s->note;
    return s;
  }

  std::lock_guard<std::mutex> lock(impl.tuneMutex);
  if (!impl.options.retune) {
    // Another thread may have tuned it while this one waited.
    llvm::Expected<std::optional<Selection>> hit = lookup();
    if (!hit)
      return hit.takeError();
    if (*hit)
      return std::move(**hit);
  }
  return impl.tune(spec, bucket, impl.options.mode == TuneMode::Exhaustive);
}

llvm::Expected<std::vector<Selection>> Tuner::loadTuned(const generator::KernelSpec &spec) {
  Impl &impl = *impl_;
  if (llvm::Error err = impl.checkSpec(spec))
    return std::move(err);
  llvm::Expected<cache::TuningKey> key = impl.tuningKey(spec, Bucket{});
  if (!key)
    return key.takeError();
  llvm::Expected<std::vector<cache::Found<cache::TuningRow>>> rows = impl.cache.tuningsFor(*key);
  if (!rows)
    return rows.takeError();
  std::vector<Selection> selections;
  for (const cache::Found<cache::TuningRow> &row : *rows) {
    llvm::Expected<Selection> s = impl.fromRow(spec, row);
    if (!s) {
      // One unusable row (its binary missing in cached mode, a damaged config) must not
      // cost the handle the other buckets: dispatch falls back to the nearest.
      impl.log(llvm::formatv("skipping the tuned bucket {0} of {1}: {2}", row.row.key.bucket,
                             spec.key(), llvm::toString(s.takeError()))
                   .str());
      continue;
    }
    selections.push_back(std::move(*s));
  }
  return std::move(selections);
}

llvm::Expected<Selection> Tuner::heuristicDefault(const generator::KernelSpec &spec) {
  Impl &impl = *impl_;
  if (llvm::Error err = impl.checkSpec(spec))
    return std::move(err);
  BuildOptions build;
  build.allowCompile = impl.options.mode != TuneMode::Cached;
  build.threads = 1;
  generator::TileConfig tile = generator::defaultTile(spec);
  llvm::Expected<BuildResult> built = buildVariants(impl.cache, spec, {tile}, build);
  if (!built)
    return built.takeError();
  impl.compilations += built->compiled;
  Variant &v = built->variants.front();
  if (!v.error.empty() || !v.binary)
    return makeError(impl.options.mode == TuneMode::Cached ? ErrorCode::NotFound
                                                           : ErrorCode::Compile,
                     "the heuristic default {0}: {1}", v.keyText, v.error);
  Selection s = selectionOf(spec, Bucket{}, v,
                            v.compiledNow ? Origin::CompiledNow : originOf(*v.cachedIn));
  s.note = llvm::formatv("heuristic default tile {0}: no bucket of this spec is tuned",
                         tile.key());
  if (!v.rejection.empty())
    s.note += "; warning: it " + v.rejection;
  llvm::Expected<std::shared_ptr<LoadedKernel>> kernel = impl.load(spec, v);
  if (!kernel)
    return kernel.takeError();
  s.kernel = std::move(*kernel);
  return s;
}

const Selection *Tuner::dispatch(llvm::ArrayRef<Selection> variants, const Bucket &bucket) {
  std::vector<Bucket> buckets;
  buckets.reserve(variants.size());
  for (const Selection &s : variants)
    buckets.push_back(s.bucket);
  int i = nearestBucket(buckets, bucket);
  return i < 0 ? nullptr : &variants[i];
}

std::string Tuner::dispatchNote(const Selection &chosen, const Bucket &wanted) {
  if (chosen.bucket == wanted)
    return "tuned for " + wanted.key();
  return llvm::formatv("bucket {0} never tuned: using nearest tuned bucket {1}", wanted.key(),
                       chosen.bucket.key())
      .str();
}

} // namespace flashjit::tuner
