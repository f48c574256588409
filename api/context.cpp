// fj_context: one device (its primary context), the caches and a tuner.
#include "api/handles.h"
#include "api/live_handles.h"

#include "generator/templates.h"
#include "runtime/nvrtc.h"
#include "support/error.h"

#include <cmath>

namespace flashjit::api {
namespace {

llvm::Expected<tuner::TuneMode> tuneModeFor(int32_t mode) {
  switch (mode) {
  case FJ_TUNE_AUTO: return tuner::tuneModeFromEnv(tuner::TuneMode::Default);
  case FJ_TUNE_DEFAULT: return tuner::TuneMode::Default;
  case FJ_TUNE_CACHED: return tuner::TuneMode::Cached;
  case FJ_TUNE_HEURISTIC: return tuner::TuneMode::Heuristic;
  case FJ_TUNE_EXHAUSTIVE: return tuner::TuneMode::Exhaustive;
  }
  return makeError(ErrorCode::InvalidValue,
                   "options->tune_mode is {0}: expected FJ_TUNE_AUTO (0), FJ_TUNE_DEFAULT (1), "
                   "FJ_TUNE_CACHED (2), FJ_TUNE_HEURISTIC (3) or FJ_TUNE_EXHAUSTIVE (4)",
                   mode);
}

fj_tune_mode publicMode(tuner::TuneMode mode) {
  switch (mode) {
  case tuner::TuneMode::Default: return FJ_TUNE_DEFAULT;
  case tuner::TuneMode::Cached: return FJ_TUNE_CACHED;
  case tuner::TuneMode::Heuristic: return FJ_TUNE_HEURISTIC;
  case tuner::TuneMode::Exhaustive: return FJ_TUNE_EXHAUSTIVE;
  }
  return FJ_TUNE_DEFAULT;
}

// The options, checked, as the cache wants them.
llvm::Expected<cache::CacheOptions> cacheOptionsFor(const fj_context_options &o,
                                                    const Logger &log) {
  cache::CacheOptions options;
  if (o.user_cache_path)
    options.userPath = std::string(o.user_cache_path);
  if (o.num_shipped_cache_paths < 0)
    return makeError(ErrorCode::InvalidValue, "options->num_shipped_cache_paths is {0}: "
                     "must be >= 0", o.num_shipped_cache_paths);
  if (o.num_shipped_cache_paths > 0 && !o.shipped_cache_paths)
    return makeError(ErrorCode::InvalidValue,
                     "options->shipped_cache_paths is NULL but num_shipped_cache_paths is {0}",
                     o.num_shipped_cache_paths);
  for (int i = 0; i < o.num_shipped_cache_paths; ++i) {
    if (!o.shipped_cache_paths[i])
      return makeError(ErrorCode::InvalidValue, "options->shipped_cache_paths[{0}] is NULL", i);
    options.shippedPaths.push_back(o.shipped_cache_paths[i]);
  }
  options.warn = [log](llvm::StringRef message) { log(FJ_LOG_WARNING, message); };
  return std::move(options);
}

llvm::Expected<std::unique_ptr<runtime::Device>> openDevice(int ordinal) {
  if (ordinal < 0)
    return makeError(ErrorCode::InvalidValue, "options->device is {0}: must be >= 0", ordinal);
  if (llvm::Error error = runtime::driverAvailable())
    return std::move(error);
  auto count = runtime::deviceCount();
  if (!count)
    return count.takeError();
  if (*count == 0)
    return makeError(ErrorCode::NoDevice, "the CUDA driver reports no device");
  if (ordinal >= *count)
    return makeError(ErrorCode::InvalidValue,
                     "options->device is {0}: this machine has {1} CUDA device(s), 0 to {2}",
                     ordinal, *count, *count - 1);
  return runtime::Device::open(ordinal);
}

} // namespace

llvm::Error checkLiveContext(const fj_context_s *context) {
  if (!context)
    return makeError(ErrorCode::InvalidValue, "context is NULL");
  if (!LiveHandles::get().contains(context) || context->magic != kContextMagic)
    return makeError(ErrorCode::InvalidValue,
                     "context {0} is not a live context (destroyed already, or not one)",
                     (const void *)context);
  return llvm::Error::success();
}

void adoptKernel(fj_context_s &context, fj_kernel_s *kernel) {
  kernel->context = &context;
  {
    std::lock_guard<std::mutex> lock(context.mutex);
    ++context.outstanding;
  }
  LiveHandles::get().add(kernel);
}

llvm::Expected<fj_context_s *> createContext(const fj_context_options *in) {
  fj_context_options o;
  if (in) {
    if (llvm::Error error = copyInStruct(in, "options", "fj_context_options", o))
      return std::move(error);
  } else {
    fj_context_options_init(&o);
  }
  if (!std::isfinite(o.tuning_budget_seconds) || o.tuning_budget_seconds < 0)
    return makeError(ErrorCode::InvalidValue,
                     "options->tuning_budget_seconds is {0}: must be finite and >= 0 "
                     "(0: the default)",
                     floatText(o.tuning_budget_seconds));
  auto mode = tuneModeFor(o.tune_mode);
  if (!mode)
    return mode.takeError();

  auto context = std::make_unique<fj_context_s>();
  context->log = Logger{o.log_callback, o.log_user_data};
  context->mode = publicMode(*mode);
  context->ordinal = o.device;
  auto cacheOptions = cacheOptionsFor(o, context->log);
  if (!cacheOptions)
    return cacheOptions.takeError();

  auto device = openDevice(o.device);
  if (!device)
    return device.takeError();
  context->device = std::move(*device);
  const runtime::DeviceProperties &props = context->device->properties();
  context->deviceName = props.name;
  context->target = props.target();
  context->deviceKey = props.deviceKey();
  auto families = tuner::familyPlanFromEnv(context->target);
  if (!families)
    return families.takeError();
  context->families = *families;
  if (families->forced)
    context->log(FJ_LOG_INFO, "kernel families from $FLASHJIT_FAMILY: " + families->describe());
  if (families->backwardForced)
    context->log(FJ_LOG_INFO, "backward family from $FLASHJIT_BACKWARD_FAMILY: " +
                                  generator::familyName(families->backward).str());

  auto cache = cache::Cache::open(std::move(*cacheOptions));
  if (!cache)
    return cache.takeError();
  context->cache = std::move(*cache);
  context->userCachePath = context->cache->userPath();

  // One-time costs paid here rather than by the first fj_kernel_get: every binary key
  // names the NVRTC version (loading libnvrtc takes milliseconds) and every tuning key
  // its family's generator fingerprint (a hash of the templates the family embeds).
  // Without NVRTC, cached kernels may still be found; the first compilation will say
  // what is missing.
  if (auto version = runtime::nvrtcVersion(); !version)
    context->log(FJ_LOG_WARNING, "NVRTC is not available: " + llvm::toString(version.takeError()));
  (void)generator::familyFingerprint(generator::Family::FwdMma);  // hashes every family's

  tuner::TunerOptions tunerOptions;
  tunerOptions.mode = *mode;
  if (o.tuning_budget_seconds > 0)
    tunerOptions.budgetSeconds = o.tuning_budget_seconds;
  Logger log = context->log;
  tunerOptions.log = [log](llvm::StringRef message) { log(FJ_LOG_INFO, message); };
  context->tuner = std::make_unique<tuner::Tuner>(context->device.get(), *context->cache,
                                                  std::move(tunerOptions));
  fj_context_s *handle = context.release();
  LiveHandles::get().add(handle);
  return handle;
}

llvm::Error destroyContext(fj_context_s *context) {
  if (llvm::Error error = checkLiveContext(context))
    return error;
  {
    std::lock_guard<std::mutex> lock(context->mutex);
    if (context->outstanding > 0)
      return makeError(ErrorCode::InvalidValue,
                       "context has {0} kernel(s) outstanding; release them first (the "
                       "context was not destroyed)",
                       context->outstanding);
  }
  if (!LiveHandles::get().remove(context))  // another thread destroyed it meanwhile
    return makeError(ErrorCode::InvalidValue, "context {0} is not a live context",
                     (const void *)context);
  context->magic = kDeadMagic;
  // Unloading modules and destroying streams need the context current on this thread.
  if (context->device)
    llvm::consumeError(context->device->makeCurrent());
  delete context;
  return llvm::Error::success();
}

llvm::Error contextInfo(const fj_context_s *context, struct fj_context_info *info) {
  if (llvm::Error error = checkLiveContext(context))
    return error;
  struct fj_context_info out {};
  out.device = context->ordinal;
  out.tune_mode = context->mode;
  {
    std::lock_guard<std::mutex> lock(context->mutex);
    out.kernels_outstanding = context->outstanding;
  }
  tuner::TunerCounters counters = context->tuner->counters();
  out.compilations = counters.compilations;
  out.tunes = counters.tunes;
  out.device_name = context->deviceName.c_str();
  out.target = context->target.c_str();
  out.device_key = context->deviceKey.c_str();
  out.user_cache_path = context->userCachePath.c_str();
  return copyOutStruct(out, info, "info", "struct fj_context_info");
}

} // namespace flashjit::api
