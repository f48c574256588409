#include "tuner/space.h"

#include "generator/bwd_mma.h"
#include "generator/bwd_wgmma.h"
#include "tuner/roofline.h"
#include "tuner/select.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace flashjit::tuner {
namespace {

// Registers a thread needs beyond its accumulators (addresses, indices, softmax
// state, fragments in flight): the smallest overhead ptxas was seen to need for
// fwd_mma, so that only tiles that surely spill are pruned before compiling.
constexpr int kMinimalOverheadRegisters = 40;
// A typical overhead, for the occupancy estimate.
constexpr int kTypicalOverheadRegisters = 80;
constexpr int kMaxRegistersPerThread = 255;
// Shared memory the driver reserves per block (sm_80 and newer).
constexpr int kReservedSharedPerBlock = 1024;
// An SM keeps its tensor cores busy with mma.sync from about 8 resident warps.
constexpr int kSaturatingWarps = 8;

// fwd_wgmma (mirrors FwdWgmmaConfig in templates/fwd_wgmma.cuh): registers per thread
// after setmaxnreg, for the producer warpgroup and for each consumer one.
constexpr int kWgmmaProducerRegisters = 24;
int wgmmaConsumerRegisters(int consumers) { return consumers == 3 ? 160 : 240; }

// fwd_wgmma priors, not measurements (the tuner's timings decide; these only order and
// prune before compiling):
// - one consumer warpgroup hides its softmax only under its own P V (no second
//   warpgroup's GEMMs to overlap, and one CTA per SM), so it is taken to run at this
//   fraction of a CTA with two or three (docs/PERF.md, fwd_wgmma v1 and v2);
constexpr double kWgmmaSingleConsumerThroughput = 0.75;
// - each key tile costs a fixed amount beyond its GEMMs (mbarrier waits, the row max and
//   sum across the quad, the rescale test, releasing the slots), taken as worth this
//   many keys of MMA work, so wider key tiles amortize it.
constexpr int kWgmmaTileOverheadKeys = 16;

int ceilDiv(long long a, long long b) { return (int)((a + b - 1) / b); }
int roundUp(int x, int m) { return (x + m - 1) / m * m; }

bool isWgmma(const generator::KernelSpec &spec) {
  return spec.family == generator::Family::FwdWgmma;
}
bool isBackward(const generator::KernelSpec &spec) {
  return generator::operationOf(spec.family) == generator::Operation::Backward;
}
bool isBwdWgmma(const generator::KernelSpec &spec) {
  return spec.family == generator::Family::BwdWgmma;
}
bool isDecode(const generator::KernelSpec &spec) {
  return generator::operationOf(spec.family) == generator::Operation::Decode;
}

// Throughput of an SM holding `ctas` resident CTAs of `tile`, relative to a saturated
// one.
double smThroughput(const generator::KernelSpec &spec, const generator::TileConfig &tile,
                    int ctas) {
  if (isWgmma(spec)) {
    // The wgmma schedule does not rely on other CTAs for overlap: its consumer
    // warpgroups (64 rows each) ping-pong GEMMs and softmax within the CTA.
    int consumers = std::max(1, tile.blockM / 64);
    double overlap = consumers * ctas >= 2 ? 1.0 : kWgmmaSingleConsumerThroughput;
    return overlap * tile.blockN / (double)(tile.blockN + kWgmmaTileOverheadKeys);
  }
  return std::min(1.0, 0.5 + 0.5 * ctas * std::max(1, tile.warps) / kSaturatingWarps);
}

// Work the kernel does (query x key pairs computed, masked or not) over the pairs
// that matter: key blocks are whole, and causal blocks stop at the diagonal of
// their last row, so the diagonal tiles compute pairs that are then masked.
double wastedWork(const generator::KernelSpec &spec, const generator::TileConfig &tile,
                  int seqQ, int seqK) {
  double computed = 0;
  int diag = seqK - seqQ;
  for (int q0 = 0; q0 < seqQ; q0 += tile.blockM) {
    int rows = std::min(tile.blockM, seqQ - q0);
    long long keys = seqK;
    if (spec.causal) {
      long long last = (long long)q0 + rows - 1 + diag;
      keys = last < 0 ? 0 : std::min<long long>(seqK, last + 1);
    }
    long long blocks = (keys + tile.blockN - 1) / tile.blockN;
    computed += (double)rows * (double)blocks * tile.blockN;
  }
  double visible = spec.causal ? (double)causalVisiblePairs(seqQ, seqK)
                               : (double)seqQ * (double)seqK;
  return visible > 0 ? std::max(0.0, computed / visible - 1) : 0;
}

// fwd_mma: each warp owns 16 or 32 query rows. fwd_wgmma's warps are fixed by
// block_m (validateTile checks them).
bool rowsPerWarpAllowed(const generator::KernelSpec &spec, const generator::TileConfig &tile) {
  if (isWgmma(spec) || isBackward(spec) || isDecode(spec))
    return true;  // fixed by the family's own rules (validateTile)
  if (tile.warps <= 0 || tile.blockM % tile.warps)
    return false;
  int rows = tile.blockM / tile.warps;
  return rows == 16 || rows == 32;
}

} // namespace

DeviceModel deviceModelFor(const runtime::DeviceProperties &props) {
  DeviceModel m;
  m.name = props.name;
  m.gpu = gpuSpecFromDevice(props);
  if (props.smCount > 0)
    m.smCount = props.smCount;
  if (props.maxSharedPerSM > 0)
    m.sharedPerSM = props.maxSharedPerSM;
  if (props.maxSharedPerBlockOptin > 0)
    m.sharedPerBlock = props.maxSharedPerBlockOptin;
  if (props.maxRegistersPerSM > 0)
    m.registersPerSM = props.maxRegistersPerSM;
  // Per-SM limits the driver does not report through DeviceProperties, from the CUDA
  // programming guide's table of compute capabilities.
  int cc = props.ccMajor * 10 + props.ccMinor;
  if (cc == 86 || cc == 89 || cc >= 120) {
    m.maxThreadsPerSM = 1536;
    m.maxBlocksPerSM = cc == 86 ? 16 : 24;
  }
  return m;
}

llvm::Expected<DeviceModel> deviceModelForPreset(llvm::StringRef name) {
  llvm::Expected<GpuSpec> gpu = lookupGpu(name);
  if (!gpu)
    return gpu.takeError();
  DeviceModel m;
  m.name = gpu->name;
  m.gpu = *gpu;
  if (gpu->smCount > 0)
    m.smCount = gpu->smCount;
  if (gpu->sharedPerSM > 0)
    m.sharedPerSM = gpu->sharedPerSM;
  if (gpu->sharedPerBlock > 0)
    m.sharedPerBlock = gpu->sharedPerBlock;
  return m;
}

std::string TileEstimate::limiter() const {
  if (modelSeconds == computeSeconds)
    return llvm::formatv("compute (waves {0:F0}%{1})", waveEfficiency * 100,
                         causalWaste > 0.005
                             ? llvm::formatv(", {0:F0}% masked work", causalWaste * 100).str()
                             : std::string())
        .str();
  return modelSeconds == l2Seconds ? "L2 (K/V re-read per query tile)" : "HBM";
}

TileEstimate estimateTile(const generator::KernelSpec &spec, const generator::TileConfig &tile,
                          const Bucket &bucket, const DeviceModel &device) {
  TileEstimate e;
  e.sharedBytes = generator::sharedBytes(spec, tile);
  int warps = std::max(1, tile.warps);
  int launchRegisters = 0;  // per thread, as the CTA is launched
  if (isWgmma(spec)) {
    // Per consumer thread: S (64 x bn over 128 threads) and O (64 x dv padded to 32);
    // Q, K and V stay in shared memory. Each consumer gets its setmaxnreg budget (whether
    // the tile fits it is validateTile's register rule), the producer keeps the minimum,
    // and the launch reserves their average for every thread.
    int consumers = std::max(1, tile.blockM / 64);
    e.accumulatorRegisters = tile.blockN / 2 + roundUp(spec.headDimV, 32) / 2;
    e.registers = wgmmaConsumerRegisters(consumers);
    launchRegisters = roundUp(
        ceilDiv(kWgmmaProducerRegisters + (long long)consumers * e.registers, consumers + 1),
        8);
  } else if (isBwdWgmma(spec)) {
    // The generator's count; whether they fit the consumers' setmaxnreg budget is
    // validateTile's register rule. The launch reserves the average of the two consumer
    // warpgroups' budget and the serving warpgroup's minimum for every thread.
    e.accumulatorRegisters = generator::bwdWgmmaAccumulatorRegisters(spec, tile);
    e.registers = std::min(kMaxRegistersPerThread,
                           e.accumulatorRegisters + kTypicalOverheadRegisters);
    launchRegisters = roundUp(ceilDiv(generator::kBwdWgmmaServerRegisters +
                                          2LL * generator::kBwdWgmmaConsumerRegisters,
                                      3),
                              8);
  } else if (isBackward(spec)) {
    // Per thread of the main kernel (its larger pass): dK and/or dV of the warp's key
    // rows, plus P^T and dS^T of one query step (validateTile holds it to 255).
    int kt = std::max(1, tile.blockN / warps / 16);
    bool split = generator::bwdMmaSplitPasses(spec, tile);
    int dkdv = split ? std::max(spec.headDim, spec.headDimV) : spec.headDim + spec.headDimV;
    e.accumulatorRegisters = kt * dkdv / 2 + kt * tile.blockM;
    e.registers = std::min(kMaxRegistersPerThread,
                           e.accumulatorRegisters + kTypicalOverheadRegisters);
    launchRegisters = e.registers;
  } else {
    int mTiles = std::max(1, tile.blockM / warps / 16);
    // Per thread: O is mTiles x (dv/8) MMA tiles of 4 floats, S is mTiles x (bn/8) of 4,
    // and Q's A fragments (4 registers per 16x16) when the template keeps them.
    e.accumulatorRegisters = mTiles * spec.headDimV / 2 + mTiles * tile.blockN / 2 +
                             (mTiles * spec.headDim <= 128 ? mTiles * spec.headDim / 4 : 0);
    e.registers = std::min(kMaxRegistersPerThread,
                           e.accumulatorRegisters + kTypicalOverheadRegisters);
    launchRegisters = e.registers;
  }

  // Occupancy: registers are allocated per warp in units of 256.
  int registersPerWarp = ceilDiv((long long)launchRegisters * 32, 256) * 256;
  int byRegisters = device.registersPerSM / (registersPerWarp * warps);
  int byShared = device.sharedPerSM / (e.sharedBytes + kReservedSharedPerBlock);
  int byThreads = device.maxThreadsPerSM / (warps * 32);
  e.blocksPerSM = std::max(0, std::min({byRegisters, byShared, byThreads,
                                        device.maxBlocksPerSM}));

  ForwardShape shape = timingShape(spec, bucket);
  // The backward's CTAs own key blocks (and loop over the query heads of a group).
  // The decode's CTAs own packed rows of a KV head (before the split-KV cut, which the
  // launch sizes to fill the device).
  e.ctas = isBackward(spec)
               ? (long long)ceilDiv(shape.seqK, std::max(1, tile.blockN)) * shape.batch *
                     shape.headsKV
           : isDecode(spec)
               ? std::max<long long>(
                     (long long)device.smCount * std::max(1, e.blocksPerSM),
                     (long long)ceilDiv((long long)shape.seqQ * (shape.headsQ / std::max(1, shape.headsKV)),
                                        std::max(1, tile.blockM)) *
                         shape.batch * shape.headsKV)
               : (long long)ceilDiv(shape.seqQ, std::max(1, tile.blockM)) * shape.batch *
                     shape.headsQ;
  // The busiest SM runs ceil(ctas / SMs) CTAs, blocksPerSM at a time; a round with
  // k resident CTAs runs at smThroughput(k). Efficiency: the ideal (every SM
  // saturated, work spread evenly) over that.
  if (e.blocksPerSM > 0 && e.ctas > 0) {
    long long busiest = (e.ctas + device.smCount - 1) / device.smCount;
    long long full = busiest / e.blocksPerSM, rest = busiest % e.blocksPerSM;
    double units = full * (e.blocksPerSM / smThroughput(spec, tile, e.blocksPerSM));
    if (rest)
      units += rest / smThroughput(spec, tile, (int)rest);
    e.waveEfficiency = ((double)e.ctas / device.smCount) / units;
    e.waveFill = ((double)e.ctas / device.smCount) / busiest;
  }
  // The backward's query step plays the forward's key block (roughly: the same diagonal
  // tiles are computed and masked).
  e.causalWaste = isBackward(spec)
                      ? wastedWork(spec, {tile.blockN, tile.blockM, tile.warps, tile.stages},
                                   shape.seqQ, shape.seqK)
                      : wastedWork(spec, tile, shape.seqQ, shape.seqK);

  AttentionShape a = attentionShapeOf(spec, shape);
  double flops = isBackward(spec) ? (double)attentionBackwardFlops(a) : (double)attentionFlops(a);
  double bandwidth = device.gpu.hbmBytesPerSec > 0 ? device.gpu.hbmBytesPerSec : 1e12;
  double peak = device.gpu.peakFlops > 0 ? device.gpu.peakFlops : 1e14;
  e.computeSeconds = e.waveEfficiency > 0
                         ? flops * (1 + e.causalWaste) / (peak * e.waveEfficiency)
                         : INFINITY;
  e.hbmSeconds = (isBackward(spec) ? (double)compulsoryAttentionBackwardBytes(a)
                                   : (double)compulsoryAttentionBytes(a, true)) /
                 bandwidth;
  e.l2Seconds = (double)flashAttentionBytes(a, std::max(1, tile.blockM), true) /
                (bandwidth * device.l2OverHbm);
  e.modelSeconds = std::max({e.computeSeconds, e.hbmSeconds, e.l2Seconds});
  return e;
}

std::vector<generator::TileConfig> enumerateTiles(const generator::KernelSpec &spec) {
  std::vector<generator::TileConfig> tiles;
  if (spec.family == generator::Family::BwdWgmma) {
    // bwd_wgmma: the query step x the head dim's keys per CTA on two consumer warpgroups
    // (and the one that serves them) x stages of Q and dO; validateTile drops what a head
    // dim's registers or shared memory cannot take.
    const int keys = generator::bwdWgmmaKeysPerCta(spec);
    for (int blockM : {64, 128})
      for (int stages = generator::bwdWgmmaMinStages(spec);
           stages <= generator::kBwdWgmmaMaxStages; ++stages)
        tiles.push_back({blockM, keys, 12, stages});
    return tiles;
  }
  if (isBackward(spec)) {
    // bwd_mma: the query step x (keys per CTA, warps) with 16 or 32 key rows per warp.
    for (int blockM : {16, 32, 64, 128})
      for (auto [blockN, warps] : {std::pair{64, 4}, std::pair{128, 4}, std::pair{128, 8},
                                   std::pair{256, 8}})
        tiles.push_back({blockM, blockN, warps, 2});
    return tiles;
  }
  if (isDecode(spec)) {
    // dec_mma: packed rows x (keys per stage, warps) x stages; validateTile drops the
    // combinations whose warps do not split the keys in multiples of 16.
    for (int blockM : {16, 32, 64})
      for (auto [blockN, warps] : {std::pair{32, 2}, std::pair{64, 2}, std::pair{64, 4},
                                   std::pair{128, 4}, std::pair{128, 8}})
        for (int stages : {2, 3, 4})
          tiles.push_back({blockM, blockN, warps, stages});
    return tiles;
  }
  if (isWgmma(spec)) {
    // block_n: wgmma's N in steps of 16 (the register rule caps it per head dim),
    // FlashAttention-3's 176 and 80 included.
    for (int blockM : {64, 128, 192})
      for (int blockN : {64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256})
        for (int stages : {2, 3})
          tiles.push_back({blockM, blockN, 4 * (blockM / 64 + 1), stages});
    return tiles;
  }
  for (int blockM : {64, 128, 256})
    for (int warps : {4, 8})
      for (int blockN : {32, 64, 128})
        for (int stages : {2, 3}) {
          generator::TileConfig tile{blockM, blockN, warps, stages};
          if (rowsPerWarpAllowed(spec, tile))
            tiles.push_back(tile);
        }
  return tiles;
}

llvm::StringRef verdictName(Verdict verdict) {
  switch (verdict) {
  case Verdict::Candidate: return "candidate";
  case Verdict::PrunedFit: return "pruned (fit)";
  case Verdict::PrunedModel: return "pruned (model)";
  }
  return "unknown";
}

std::vector<SpaceEntry> buildSpace(const generator::KernelSpec &spec, const Bucket &bucket,
                                   const DeviceModel &device, const SpaceOptions &options) {
  std::vector<generator::TileConfig> tiles =
      options.only.empty() ? enumerateTiles(spec) : options.only;
  std::vector<SpaceEntry> entries;
  for (const generator::TileConfig &tile : tiles) {
    SpaceEntry entry;
    entry.tile = tile;
    if (llvm::Error err = generator::validateTile(spec, tile)) {
      entry.verdict = Verdict::PrunedFit;
      entry.reason = llvm::toString(std::move(err));
      entries.push_back(std::move(entry));
      continue;
    }
    entry.estimate = estimateTile(spec, tile, bucket, device);
    // fwd_wgmma's and bwd_wgmma's accumulators were held to their register budgets by
    // validateTile.
    bool spills = !isWgmma(spec) && !isBwdWgmma(spec) &&
                  entry.estimate.accumulatorRegisters + kMinimalOverheadRegisters >
                      kMaxRegistersPerThread;
    if (!rowsPerWarpAllowed(spec, tile)) {
      entry.verdict = Verdict::PrunedFit;
      entry.reason = "rows per warp must be 16 or 32";
    } else if (entry.estimate.sharedBytes > device.sharedPerBlock) {
      entry.verdict = Verdict::PrunedFit;
      entry.reason = llvm::formatv("needs {0} bytes of shared memory, the device allows {1}",
                                   entry.estimate.sharedBytes, device.sharedPerBlock);
    } else if (entry.estimate.blocksPerSM == 0) {
      entry.verdict = Verdict::PrunedFit;
      entry.reason = "not even one block fits on an SM";
    } else if (options.pruneByModel && spills) {
      entry.verdict = Verdict::PrunedModel;
      entry.reason = llvm::formatv("its accumulators alone need {0} registers per thread "
                                   "(+{1} overhead > {2}): it would spill",
                                   entry.estimate.accumulatorRegisters,
                                   kMinimalOverheadRegisters, kMaxRegistersPerThread);
    }
    entries.push_back(std::move(entry));
  }

  double best = INFINITY;
  for (const SpaceEntry &e : entries)
    if (e.verdict == Verdict::Candidate)
      best = std::min(best, e.estimate.modelSeconds);
  if (options.pruneByModel && std::isfinite(best))
    for (SpaceEntry &e : entries)
      if (e.verdict == Verdict::Candidate &&
          e.estimate.modelSeconds > options.rooflineFactor * best) {
        e.verdict = Verdict::PrunedModel;
        e.reason = llvm::formatv("the model says {0:F1} us ({1}), over {2:F1}x the best "
                                 "tile's {3:F1} us: it cannot win",
                                 e.estimate.modelSeconds * 1e6, e.estimate.limiter(),
                                 options.rooflineFactor, best * 1e6);
      }

  auto rank = [](const SpaceEntry &e) {
    RankedCandidate r;
    r.tile = e.tile;
    r.sharedBytes = e.estimate.sharedBytes;
    r.registers = e.estimate.registers;
    return r;
  };
  std::stable_sort(entries.begin(), entries.end(), [&](const SpaceEntry &a, const SpaceEntry &b) {
    bool ca = a.verdict == Verdict::Candidate, cb = b.verdict == Verdict::Candidate;
    if (ca != cb)
      return ca;
    if (!ca)
      return false;  // pruned tiles keep their enumeration order
    if (a.estimate.modelSeconds != b.estimate.modelSeconds)
      return a.estimate.modelSeconds < b.estimate.modelSeconds;
    return smallerFootprint(rank(a), rank(b));
  });
  return entries;
}

generator::TileConfig preferredTile(const generator::KernelSpec &spec, const Bucket &bucket) {
  generator::TileConfig tile = generator::defaultTile(spec);
  // The default's consumers are the measured picks for short walks: at d <= 64, two
  // (causal) or three over 128 keys. Over longer walks a 192-row tile's longer prologue
  // is paid back, and 96 keys keep its softmax under the tensor cores' work: the H200's
  // tuner screens over the length ladder (bf16 and fp16) ran bm192.bn96 at 1.03-1.10x the
  // default's speed from 2k keys without causal (1.00x at 1k, 0.89x at 512) and at
  // 1.09-1.24x from 4k keys with it (0.98-0.99x at 2k, 0.92x at 1k; docs/PERF.md bw13).
  if (isWgmma(spec) && spec.dtype != generator::DType::E4M3 && !spec.features.any() &&
      std::max(spec.headDim, spec.headDimV) <= 64 &&
      bucket.seqK >= (spec.causal ? 4096 : 2048))
    tile = {192, 96, 16, 2};
  return tile;
}

const SpaceEntry *heuristicChoice(llvm::ArrayRef<SpaceEntry> space,
                                  const generator::KernelSpec &spec, const Bucket &bucket) {
  if (space.empty() || space.front().verdict != Verdict::Candidate)
    return nullptr;
  generator::TileConfig preferred = preferredTile(spec, bucket);
  // The length rule above was measured on grids that fill the GPU many times over; where
  // its tile's waves would leave SMs idle (a few long sequences), the default stays.
  if (!(preferred == generator::defaultTile(spec))) {
    auto at = std::find_if(space.begin(), space.end(),
                           [&](const SpaceEntry &e) { return e.tile == preferred; });
    if (at == space.end() || at->verdict != Verdict::Candidate ||
        at->estimate.waveFill < 0.9)
      preferred = generator::defaultTile(spec);
  }
  // The preferred tile is taken where the model ties it with its first (within 1 %); for
  // fwd_wgmma wherever it is a candidate: that model is priors (the constants above) and
  // its default tiles are measured picks. The model put bm128.bn256 first for d64
  // N = 512 on an H200, 10 % slower than the default bm192.bn128, and a cold 5 s tune had
  // time to screen only the first tile (docs/TUNING.md).
  // bwd_mma's default tiles are likewise the measured register survey's picks, and
  // bwd_wgmma's the one configuration per head dim its template is written for.
  double limit = isWgmma(spec) || isBackward(spec) ? std::numeric_limits<double>::infinity()
                               : space.front().estimate.modelSeconds * 1.01;
  for (const SpaceEntry &e : space) {
    if (e.verdict != Verdict::Candidate || e.estimate.modelSeconds > limit)
      break;
    if (e.tile == preferred)
      return &e;
  }
  return &space.front();
}

bool leadWithHeuristicChoice(std::vector<SpaceEntry> &space, const generator::KernelSpec &spec,
                             const Bucket &bucket) {
  const SpaceEntry *choice = heuristicChoice(space, spec, bucket);
  if (!choice)
    return false;
  auto at = space.begin() + (choice - space.data());
  std::rotate(space.begin(), at, at + 1);
  return true;
}

} // namespace flashjit::tuner
