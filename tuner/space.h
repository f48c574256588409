// The candidate space of a kernel family on a device, and the model that prunes it
// before anything is compiled (docs/TUNING.md, "Space and pruning").
//
//   fit    (always):    the tile must be valid for the family and fit the target:
//                       shared memory per block, threads, 16 or 32 rows per warp
//                       (fwd_mma), 64 rows per consumer warpgroup and the setmaxnreg
//                       register budget (fwd_wgmma).
//   model  (not in exhaustive mode):
//     registers:  (fwd_mma) the accumulators the tile keeps per thread (O, S, and Q
//                 when it stays in registers) plus a minimal overhead exceed the 255
//                 registers a thread may have: it would spill.
//     roofline:   the model's time for the bucket is more than twice the best
//                 tile's. The model is max(compute, HBM, L2) where compute is the
//                 FLOPs (plus the masked work causal tiles waste on the diagonal) at
//                 peak, scaled by the fraction of SM slots the CTAs' waves keep busy
//                 (occupancy from shared memory, registers and threads); HBM moves
//                 each tensor once; L2 serves K and V once per query tile.
//                 fwd_mma's SM throughput grows with resident warps (other CTAs hide
//                 a CTA's softmax); fwd_wgmma's runs one CTA per SM (setmaxnreg takes
//                 the register file) whose consumer warpgroups overlap each other's
//                 softmax, so one consumer runs slower, and a fixed cost per key tile
//                 favours wider block_n (priors for ordering; the timings decide).
#pragma once

#include "generator/spec.h"
#include "runtime/driver.h"
#include "tuner/bucket.h"
#include "tuner/gpu_specs.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace flashjit::tuner {

// What the model knows of the device.
struct DeviceModel {
  std::string name;
  int smCount = 132;
  int sharedPerSM = 228 * 1024;    // bytes usable by blocks on one SM
  int sharedPerBlock = 227 * 1024; // opt-in limit per block
  int registersPerSM = 65536;
  int maxThreadsPerSM = 2048;
  int maxBlocksPerSM = 32;
  GpuSpec gpu;                     // peak FLOP/s and HBM bandwidth
  // L2 bandwidth as a multiple of HBM bandwidth (about 2.5 on A100/H100/H200).
  double l2OverHbm = 2.5;
};

DeviceModel deviceModelFor(const runtime::DeviceProperties &props);
// A device model from a GPU preset (tuner/gpu_specs.h), e.g. "H100" or "A100": for
// tests and for reasoning about a device that is not here.
llvm::Expected<DeviceModel> deviceModelForPreset(llvm::StringRef name);

// The model's view of one tile for one bucket.
struct TileEstimate {
  int sharedBytes = 0;
  int accumulatorRegisters = 0; // 32-bit registers per thread the tile's state needs
  int registers = 0;            // estimated per thread (capped at 255)
  int blocksPerSM = 0;          // occupancy
  long long ctas = 0;           // for the bucket's timing shape
  double waveEfficiency = 0;    // busy SM slots over slots held, over all waves
  double waveFill = 0;          // the same, counting one CTA a slot (no per-SM throughput)
  double causalWaste = 0;       // extra work on masked diagonal tiles, fraction
  double computeSeconds = 0, hbmSeconds = 0, l2Seconds = 0;
  double modelSeconds = 0;      // the largest of the three
  std::string limiter() const;  // "compute (waves 97%)", "L2", "HBM"
};

TileEstimate estimateTile(const generator::KernelSpec &spec, const generator::TileConfig &tile,
                          const Bucket &bucket, const DeviceModel &device);

// Every tile of the family's space, valid or not, in a stable order:
//   fwd_mma:   blockM {64, 128, 256} x warps {4, 8} (16 or 32 rows per warp) x
//              blockN {32, 64, 128} x stages {2, 3} (24 tiles);
//   fwd_wgmma: blockM {64, 128, 192} with warps 4 x (blockM / 64 + 1) (consumer
//              warpgroups and the producer) x blockN {64, 80, ..., 192 in steps of 16,
//              224, 256} x stages {2, 3} (66 tiles);
//   bwd_mma:   blockM (queries per step) {16, 32, 64, 128} x (blockN, warps) {(64, 4),
//              (128, 4), (128, 8), (256, 8)} x stages 2 (16 tiles);
//   bwd_wgmma: blockM (queries per step) {64, 128} x (blockN, warps) (128, 8) (two
//              consumer warpgroups of 64 keys) x stages {2, 3} (4 tiles).
std::vector<generator::TileConfig> enumerateTiles(const generator::KernelSpec &spec);

enum class Verdict { Candidate, PrunedFit, PrunedModel };
llvm::StringRef verdictName(Verdict verdict); // "candidate", "pruned (fit)", "pruned (model)"

struct SpaceEntry {
  generator::TileConfig tile;
  Verdict verdict = Verdict::Candidate;
  std::string reason; // why it was pruned
  TileEstimate estimate;
};

struct SpaceOptions {
  bool pruneByModel = true;                 // false: exhaustive mode
  double rooflineFactor = 2.0;              // prune above this many times the best
  std::vector<generator::TileConfig> only;  // non-empty: the space is exactly these tiles
};

// The space for one spec and bucket with each tile's verdict. Candidates come first,
// ordered by the model (best first; model ties broken as between measured ties),
// then the pruned tiles in enumeration order.
std::vector<SpaceEntry> buildSpace(const generator::KernelSpec &spec, const Bucket &bucket,
                                   const DeviceModel &device, const SpaceOptions &options = {});

// The tile heuristic mode prefers for `bucket`: the generator's default tile
// (generator::defaultTile), except where the measured picks depend on the length of the
// key walk: fwd_wgmma at d <= 64 (16-bit, no features) takes three consumers over 96
// keys from 2k keys without causal and from 4k with it (docs/PERF.md bw13).
generator::TileConfig preferredTile(const generator::KernelSpec &spec, const Bucket &bucket);

// The model's choice (heuristic mode) for the bucket `space` was built for: the first
// candidate of buildSpace, with preferredTile preferred among the model's ties. Null when
// every tile was pruned.
const SpaceEntry *heuristicChoice(llvm::ArrayRef<SpaceEntry> space,
                                  const generator::KernelSpec &spec, const Bucket &bucket);

// Moves the heuristic choice to the front of `space`, the other entries keeping their
// order: the order candidates are tried in. A tune whose budget allows one timing then
// gets what heuristic mode would, not the tile the model's tie-break (smallest
// footprint) happens to put first. False when there is no choice (nothing moves).
bool leadWithHeuristicChoice(std::vector<SpaceEntry> &space, const generator::KernelSpec &spec,
                             const Bucket &bucket);

} // namespace flashjit::tuner
