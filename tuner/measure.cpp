#include "tuner/measure.h"

#include "support/error.h"
#include "tuner/half_precision.h"
#include "tuner/keep_bits.h"

#include <algorithm>
#include <cmath>

namespace flashjit::tuner {
namespace {
// Uniform samples in [-1, 1) from a seeded xorshift (fast for large timing inputs).
template <typename Convert> auto randomValues(size_t count, uint64_t seed, Convert convert) {
  std::vector<decltype(convert(0.f))> out(count);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto &x : out) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    x = convert((float)((state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f);
  }
  return out;
}
} // namespace

std::vector<uint16_t> randomHalves(size_t count, generator::DType dtype, uint64_t seed) {
  return randomValues(count, seed, [dtype](float f) {
    return dtype == generator::DType::BF16 ? floatToBf16(f) : floatToFp16(f);
  });
}

std::vector<uint8_t> randomE4m3(size_t count, uint64_t seed) {
  return randomValues(count, seed, [](float f) { return floatToE4m3(f); });
}

int measurementProtocol(const generator::KernelSpec &spec) {
  return generator::operationOf(spec.family) == generator::Operation::Forward &&
                 !spec.features.maskMod.empty()
             ? kBlockMaskProtocolVersion
             : kMeasurementProtocolVersion;
}

int rotationSets(uint64_t bytesPerSet, uint64_t l2Bytes) {
  return (int)std::clamp<uint64_t>((2 * l2Bytes + bytesPerSet - 1) /
                                       std::max<uint64_t>(bytesPerSet, 1),
                                   1, 32);
}

namespace {

double percentile(const std::vector<double> &sorted, double q) {
  return sorted[std::min(sorted.size() - 1, (size_t)std::floor(q * (sorted.size() - 1) + 0.5))];
}

} // namespace

double median(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

MeasureOptions MeasureOptions::round(int rounds) const {
  rounds = std::max(rounds, 1);
  MeasureOptions r = *this;
  r.warmupMs = 0;
  r.warmupLaunches = 1;
  r.targetMs = targetMs / rounds;
  r.minRuns = (minRuns + rounds - 1) / rounds;
  r.maxRuns = (maxRuns + rounds - 1) / rounds;
  return r;
}

double MeasureOptions::costMs(double launchMs) const {
  launchMs = std::max(launchMs, 1e-3);
  double warm = std::max(warmupMs, std::max(warmupLaunches, 1) * launchMs);
  int runs = std::clamp((int)(targetMs / launchMs), minRuns, maxRuns);
  return warm + runs * launchMs;
}

llvm::Expected<std::unique_ptr<ForwardTimingProblem>>
ForwardTimingProblem::create(generator::DType dtype, const ForwardShape &shape,
                             uint64_t l2Bytes, uint64_t seed) {
  auto problem = std::unique_ptr<ForwardTimingProblem>(new ForwardTimingProblem());
  problem->shape_ = shape;
  auto first = allocateBuffers(shape, false);
  if (!first)
    return first.takeError();
  uint64_t bytes = first->q.size() + first->k.size() + first->v.size() + first->o.size();
  int sets = rotationSets(bytes, l2Bytes);
  problem->sets_.push_back(std::move(*first));
  for (int i = 1; i < sets; ++i) {
    auto more = allocateBuffers(shape, false);
    if (!more)
      return more.takeError();
    problem->sets_.push_back(std::move(*more));
  }
  for (size_t i = 0; i < problem->sets_.size(); ++i) {
    ForwardBuffers &b = problem->sets_[i];
    for (runtime::DeviceBuffer *buffer : {&b.q, &b.k, &b.v}) {
      const uint64_t setSeed = seed + i * 3 + (buffer == &b.k) + 2 * (buffer == &b.v);
      if (dtype == generator::DType::E4M3) {
        auto host = randomE4m3(buffer->size(), setSeed);
        if (auto err = buffer->upload(host.data(), host.size()))
          return std::move(err);
        continue;
      }
      auto host = randomHalves(buffer->size() / 2, dtype, setSeed);
      if (auto err = buffer->upload(host.data(), host.size() * 2))
        return std::move(err);
    }
  }
  return std::move(problem);
}

FjForwardParams ForwardTimingProblem::params(int i) const {
  FjForwardParams p = makeParams(shape_, sets_[i % sets_.size()], false);
  if (prepared_.blockMask)
    prepared_.maskShape.describe(p, prepared_.mask.ptr());
  return p;
}

namespace {
llvm::Error notForward(const LoadedKernel &loaded) {
  return makeError(ErrorCode::Internal, "a forward timing problem was given a {0} kernel",
                   generator::operationName(loaded.operation()));
}
} // namespace

llvm::Error ForwardTimingProblem::prepare(const LoadedKernel &loaded, CUstream stream) const {
  const ForwardKernel *kernel = ForwardKernel::of(loaded);
  if (!kernel)
    return notForward(loaded);
  // Until it succeeds, no kernel is prepared: launch() then refuses a block-mask kernel.
  prepared_.kernel = nullptr;
  prepared_.blockMask = false;
  if (kernel->geometry().blockMask)
    if (auto err = buildBlockMask(*kernel, stream))
      return err;
  prepared_.kernel = &loaded;
  return llvm::Error::success();
}

llvm::Error ForwardTimingProblem::buildBlockMask(const ForwardKernel &kernel,
                                                 CUstream stream) const {
  // The mask depends on the shape and mod_args, the same in every rotation set, not on
  // the inputs: one serves them all.
  FjForwardParams p = makeParams(shape_, sets_[0], false);
  BlockMaskShape maskShape = kernel.blockMaskShape(p, false, false);
  if (maskShape.workTiles() == 0)
    return llvm::Error::success();
  if (auto err = allocateAndBuild(
          maskShape, prepared_.mask, /*withBits=*/true,
          [&] { return kernel.buildBlockMask(p, maskShape, prepared_.mask, stream); }, stream))
    return err;
  if (prepared_.counter.size() == 0) {
    auto counter = runtime::DeviceBuffer::allocate(kTileCounterBytes);
    if (!counter)
      return counter.takeError();
    prepared_.counter = std::move(*counter);
  }
  prepared_.maskShape = maskShape;
  prepared_.blockMask = true;
  return llvm::Error::success();
}

llvm::Error ForwardTimingProblem::launch(const LoadedKernel &loaded, int set,
                                         CUstream stream) const {
  const ForwardKernel *kernel = ForwardKernel::of(loaded);
  if (!kernel)
    return notForward(loaded);
  if (kernel->geometry().blockMask && prepared_.kernel != &loaded)
    return makeError(ErrorCode::Internal,
                     "a forward timing problem launched a block-mask kernel it did not prepare");
  return kernel->launch(params(set), stream,
                        prepared_.blockMask ? (void *)prepared_.counter.ptr() : nullptr);
}

Measurement summarize(std::vector<double> us, int rotation) {
  Measurement m;
  if (us.empty())
    return m;
  std::sort(us.begin(), us.end());
  m.medianUs = median(us);
  m.minUs = us.front();
  m.p10Us = percentile(us, 0.1);
  m.p90Us = percentile(us, 0.9);
  m.runs = (int)us.size();
  m.rotation = rotation;
  return m;
}

llvm::Expected<Measurement> TimingProblem::time(const LoadedKernel &kernel, CUstream stream,
                                                const MeasureOptions &options) const {
  llvm::Expected<std::vector<double>> us = sample(kernel, stream, options);
  if (!us)
    return us.takeError();
  return summarize(std::move(*us), rotation());
}

llvm::Expected<std::vector<double>>
TimingProblem::sample(const LoadedKernel &kernel, CUstream stream,
                      const MeasureOptions &options) const {
  const int sets = std::max(rotation(), 1);
  if (auto err = prepare(kernel, stream))
    return std::move(err);

  // Warm-up, which also estimates one launch's time to size the timed sample.
  auto warm = runtime::EventTimer::create();
  if (!warm)
    return warm.takeError();
  int warmLaunches = 0;
  double warmMs = 0;
  while (warmLaunches < std::max(options.warmupLaunches, 1) || warmMs < options.warmupMs) {
    if (auto err = warm->start(stream))
      return std::move(err);
    if (auto err = launch(kernel, warmLaunches % sets, stream))
      return std::move(err);
    if (auto err = warm->stop(stream))
      return std::move(err);
    auto ms = warm->elapsedMs();
    if (!ms)
      return ms.takeError();
    warmMs += *ms;
    if (++warmLaunches > 10000)
      break;
  }
  double perLaunchMs = std::max(warmMs / warmLaunches, 1e-3);
  int runs = std::clamp((int)(options.targetMs / perLaunchMs), options.minRuns, options.maxRuns);

  // Each launch between its own events, all queued before reading any.
  std::vector<runtime::EventTimer> timers;
  timers.reserve(runs);
  for (int i = 0; i < runs; ++i) {
    auto timer = runtime::EventTimer::create();
    if (!timer)
      return timer.takeError();
    timers.push_back(std::move(*timer));
  }
  for (int i = 0; i < runs; ++i) {
    if (auto err = timers[i].start(stream))
      return std::move(err);
    if (auto err = launch(kernel, (warmLaunches + i) % sets, stream))
      return std::move(err);
    if (auto err = timers[i].stop(stream))
      return std::move(err);
  }
  std::vector<double> us;
  for (auto &timer : timers) {
    auto ms = timer.elapsedMs();
    if (!ms)
      return ms.takeError();
    us.push_back(*ms * 1000.0);
  }
  if (auto err = runtime::checkContext())
    return std::move(err);
  return us;
}

} // namespace flashjit::tuner
