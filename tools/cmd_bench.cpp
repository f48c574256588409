// `flashjit bench`: time a kernel family over a set of hand-picked tiles on the peers' shapes
// (batch * N = tokens, heads * head_dim = hidden), after checking each tile against
// the reference, and report TFLOP/s and the fraction of the roofline. bench/ holds the
// script that puts these numbers next to PyTorch's kernels from the same run.
// --time-wrong-output times tiles that fail the check too, marked: for oracles that drop
// part of the work on purpose to measure what it costs. --heat-ms (500 ms) runs each
// shape's first tile that long first, so that all its tiles are timed at the GPU's
// power-capped steady state, as the peers benches time theirs (docs/PERF.md bw17).
#include "tools/command.h"
#include "tools/spec_options.h"

#include "generator/emit.h"
#include "runtime/driver.h"
#include "support/error.h"
#include "tuner/checker.h"
#include "tuner/gpu_specs.h"
#include "tuner/loaded_kernel.h"
#include "tuner/measure.h"
#include "tuner/operation.h"
#include "tuner/roofline.h"
#include "tuner/space.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <mutex>

namespace {
namespace cl = llvm::cl;
using namespace flashjit;

cl::SubCommand benchCommand("bench",
                            "Time a kernel family on the peers' shapes over hand-picked tiles");
// --window, --softcap, --alibi, --score-mod, --mask-mod (after benchCommand: it needs it).
flashjit::tools::FeatureOptions featureOptions(benchCommand);
cl::opt<std::string> familyOpt("family",
                               cl::desc("fwd_mma, fwd_wgmma (sm_90a), bwd_mma or bwd_wgmma "
                                        "(sm_90a, head dims that are multiples of 8 from 32 "
                                        "to 256)"),
                               cl::init("fwd_mma"), cl::sub(benchCommand));
cl::list<int> headDims("head-dims", cl::desc("Head dims"), cl::CommaSeparated,
                       cl::sub(benchCommand));
cl::list<std::string> dtypes("dtypes", cl::desc("bf16,fp16,e4m3 (FP8 inputs, bf16 output)"), cl::CommaSeparated,
                             cl::sub(benchCommand));
cl::opt<std::string> causalOpt("causal", cl::desc("yes, no or both"), cl::init("both"),
                               cl::sub(benchCommand));
cl::list<int> seqlens("seqlens", cl::desc("Sequence lengths N"), cl::CommaSeparated,
                      cl::sub(benchCommand));
cl::opt<int> tokens("tokens", cl::desc("batch * N"), cl::init(16384), cl::sub(benchCommand));
cl::opt<int> hidden("hidden", cl::desc("heads * head_dim"), cl::init(2048),
                    cl::sub(benchCommand));
cl::list<std::string> tiles("tiles", cl::desc("Tiles to try (default: a hand-picked set)"),
                            cl::CommaSeparated, cl::sub(benchCommand));
cl::opt<std::string> jsonOut("json", cl::desc("Write the results as JSON to this file"),
                             cl::sub(benchCommand));
cl::opt<int> device("device", cl::desc("CUDA device ordinal"), cl::init(0),
                    cl::sub(benchCommand));
cl::opt<bool> timeWrongOutput("time-wrong-output", cl::desc(tools::kTimeWrongOutputHelp),
                              cl::init(false), cl::sub(benchCommand));
cl::opt<unsigned> heatMs(
    "heat-ms",
    cl::desc("Run each shape's first tile this many milliseconds before timing it, so that "
             "its tiles are timed at the GPU's power-capped steady state rather than at "
             "the boost clock the pause before the shape leaves (default 500; 0: the "
             "tuner's 20 ms warm-up alone, as runs before docs/PERF.md bw17)"),
    cl::init(500), cl::sub(benchCommand));

const char *kDefaultMmaTiles[] = {
    "bm128.bn64.w8.s2", "bm128.bn128.w8.s2", "bm128.bn128.w8.s3", "bm64.bn64.w4.s2",
    "bm64.bn128.w4.s2", "bm128.bn64.w4.s2", "bm128.bn64.w4.s3", "bm128.bn32.w4.s2",
    "bm256.bn64.w8.s2", "bm256.bn32.w8.s2", "bm128.bn128.w4.s2", "bm64.bn32.w4.s3"};
// FlashAttention-3's starting points and their neighbours; those that do not fit a
// head dim are skipped with the reason.
const char *kDefaultWgmmaTiles[] = {
    "bm128.bn64.w12.s2",  "bm128.bn80.w12.s2",  "bm128.bn96.w12.s2",  "bm128.bn112.w12.s2",
    "bm128.bn128.w12.s2", "bm128.bn144.w12.s2", "bm128.bn176.w12.s2", "bm128.bn64.w12.s3",
    "bm192.bn128.w16.s2", "bm192.bn160.w16.s2", "bm192.bn192.w16.s2", "bm64.bn128.w8.s2",
    // FP8 (block_n a multiple of 32; its halved operands make room for wider tiles)
    "bm128.bn192.w12.s2", "bm128.bn256.w12.s2", "bm192.bn64.w16.s2",  "bm128.bn128.w12.s3",
    "bm192.bn96.w16.s2",  "bm128.bn224.w12.s2"};
// bwd_mma: block_m is the query step, block_n the keys per CTA (those that do not fit a
// head dim's registers or shared memory are skipped with the reason).
const char *kDefaultBwdMmaTiles[] = {
    "bm16.bn64.w4.s2",  "bm32.bn64.w4.s2",  "bm64.bn64.w4.s2",  "bm32.bn128.w8.s2",
    "bm64.bn128.w8.s2", "bm32.bn128.w4.s2", "bm64.bn128.w4.s2", "bm16.bn128.w8.s2",
    "bm32.bn64.w4.s3",  "bm64.bn128.w8.s3", "bm128.bn128.w8.s2", "bm32.bn256.w8.s2"};

int fail(llvm::Error error) {
  llvm::errs() << "flashjit bench: " << llvm::toString(std::move(error)) << "\n";
  return 1;
}

struct Candidate {
  generator::KernelSpec spec;
  generator::TileConfig tile;
  std::unique_ptr<tuner::LoadedKernel> kernel;
  std::string rejected;  // why it is not timed
  bool wrong = false;    // failed the check, timed only under --time-wrong-output
  int registers = 0;
};

int runBench() {
  // The spec's options first: a mistake in them is reported without a GPU.
  auto family = generator::parseFamily(familyOpt);
  if (!family)
    return fail(family.takeError());
  auto features = featureOptions.features();
  if (!features)
    return fail(features.takeError());
  if (auto err = tools::checkFamilyTakesFeatures(*family, *features, "--family " + familyOpt))
    return fail(std::move(err));
  // The checker and the timing run the user's code with zeroed `args`.
  if (auto err = tools::checkUserCodeRunsWithZeroArgs(*features, "bench"))
    return fail(std::move(err));
  if (!features->maskMod.empty())
    llvm::errs() << "flashjit bench: note: a mask_mod's tiles run under their block mask "
                    "(skipped tiles not computed); TFLOP/s and roofline count every pair "
                    "causal and the window leave, as if none were masked\n";
  auto dev = runtime::Device::open(device);
  if (!dev)
    return fail(dev.takeError());
  const runtime::DeviceProperties &props = (*dev)->properties();
  tuner::GpuSpec gpu = tuner::gpuSpecFromDevice(props);

  std::vector<int> dims(headDims.begin(), headDims.end());
  if (dims.empty())
    dims = {64, 128};
  std::vector<std::string> types(dtypes.begin(), dtypes.end());
  if (types.empty())
    types = {"bf16", "fp16"};
  std::vector<bool> causals;
  if (causalOpt != "yes")
    causals.push_back(false);
  if (causalOpt != "no")
    causals.push_back(true);
  std::vector<int> ns(seqlens.begin(), seqlens.end());
  if (ns.empty())
    ns = {512, 1024, 2048, 4096, 8192, 16384};
  const tuner::Operation &operation = tuner::operationFor(*family);
  std::vector<std::string> tileKeys(tiles.begin(), tiles.end());
  if (tileKeys.empty()) {
    if (*family == generator::Family::FwdWgmma)
      tileKeys.assign(std::begin(kDefaultWgmmaTiles), std::end(kDefaultWgmmaTiles));
    else if (*family == generator::Family::BwdMma)
      tileKeys.assign(std::begin(kDefaultBwdMmaTiles), std::end(kDefaultBwdMmaTiles));
    else if (*family == generator::Family::BwdWgmma) {
      // Its whole space at each head dim asked (a few tiles; above 128 the consumers split
      // the head dim on 64-key blocks), each head dim taking what fits.
      for (int d : dims) {
        generator::KernelSpec any;
        any.family = *family;
        any.headDim = any.headDimV = d;
        for (const generator::TileConfig &tile : tuner::enumerateTiles(any))
          if (llvm::find(tileKeys, tile.key()) == tileKeys.end())
            tileKeys.push_back(tile.key());
      }
    }
    else
      tileKeys.assign(std::begin(kDefaultMmaTiles), std::end(kDefaultMmaTiles));
  }

  // Every (spec, tile) that fits, compiled in parallel.
  std::vector<Candidate> candidates;
  for (const std::string &type : types)
    for (int d : dims)
      for (bool causal : causals)
        for (const std::string &key : tileKeys) {
          auto dtype = generator::parseDType(type);
          if (!dtype)
            return fail(dtype.takeError());
          auto tile = generator::TileConfig::parse(key);
          if (!tile)
            return fail(tile.takeError());
          Candidate c;
          c.spec.family = *family;
          c.spec.dtype = *dtype;
          c.spec.headDim = c.spec.headDimV = d;
          c.spec.causal = causal;
          c.spec.target = props.target();
          c.spec.features = *features;
          c.tile = *tile;
          if (llvm::Error err = generator::validateSpec(c.spec))
            c.rejected = llvm::toString(std::move(err));
          else if (llvm::Error err = generator::validateTile(c.spec, c.tile))
            c.rejected = llvm::toString(std::move(err));
          candidates.push_back(std::move(c));
        }
  std::vector<runtime::CompiledBinary> binaries(candidates.size());
  std::vector<generator::EmittedKernel> emitted(candidates.size());
  {
    llvm::ThreadPool pool;
    std::mutex mutex;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!candidates[i].rejected.empty())
        continue;
      pool.async([&, i] {
        Candidate &c = candidates[i];
        auto kernel = generator::emitKernel(c.spec, c.tile);
        llvm::Expected<runtime::CompiledBinary> binary =
            kernel ? tuner::compileEmitted(*kernel, c.spec.target)
                   : llvm::Expected<runtime::CompiledBinary>(kernel.takeError());
        std::lock_guard<std::mutex> lock(mutex);
        if (!binary) {
          c.rejected = llvm::toString(binary.takeError());
          return;
        }
        if (binary->spillStoreBytes + binary->spillLoadBytes > 0)
          c.rejected = llvm::formatv("spills {0} bytes", binary->spillStoreBytes).str();
        binaries[i] = std::move(*binary);
        emitted[i] = std::move(*kernel);
      });
    }
    pool.wait();
  }
  // Load and gate each on the reference.
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate &c = candidates[i];
    if (!c.rejected.empty())
      continue;
    auto loaded = operation.load(binaries[i].cubin, emitted[i]);
    if (!loaded) {
      c.rejected = llvm::toString(loaded.takeError());
      continue;
    }
    tuner::ForwardShape small;
    small.batch = 2;
    small.headsQ = 4;
    small.headsKV = 2;
    small.seqQ = 257;
    small.seqK = 389;
    small.headDim = c.spec.headDim;
    small.headDimV = c.spec.headDimV;
    auto checker = operation.makeChecker(c.spec, small, 42, nullptr);
    if (!checker)
      return fail(checker.takeError());
    auto report = (*checker)->check(**loaded, nullptr);
    if (!report)
      return fail(report.takeError());
    if (!report->passed) {
      if (!timeWrongOutput) {
        c.rejected = "wrong output: " + report->summary();
        continue;
      }
      c.wrong = true;
      llvm::errs() << "  WRONG output, timed anyway: " << c.spec.key() << " "
                   << c.tile.key() << ": " << report->summary() << "\n";
    }
    c.registers = (*loaded)->registers();
    c.kernel = std::move(*loaded);
  }
  for (const Candidate &c : candidates)
    if (!c.rejected.empty())
      llvm::errs() << "  skip " << c.spec.key() << " " << c.tile.key() << ": " << c.rejected
                   << "\n";

  llvm::json::Array rows;
  llvm::outs() << llvm::formatv("{0,-5} {1,4} {2,6} {3,4} {4,4} {5,-7} {6,-18} {7,10} {8,8} "
                                "{9,9}\n",
                                "dtype", "d", "N", "B", "H", "causal", "best tile", "us",
                                "TFLOP/s", "roofline");
  for (const std::string &type : types)
    for (int d : dims)
      for (bool causal : causals)
        for (int n : ns) {
          tuner::ForwardShape shape;
          shape.batch = std::max(1, tokens / n);
          shape.headsQ = shape.headsKV = std::max(1, hidden / d);
          shape.seqQ = shape.seqK = n;
          shape.headDim = shape.headDimV = d;
          shape.withLse = true;
          auto dtype = generator::parseDType(type);
          generator::KernelSpec modelSpec;
          modelSpec.family = *family;
          modelSpec.dtype = *dtype;
          modelSpec.headDim = modelSpec.headDimV = d;
          modelSpec.causal = causal;
          modelSpec.target = props.target();
          modelSpec.features = *features;
          auto problem = operation.makeTimingProblem(modelSpec, shape, props.l2Bytes);
          if (!problem)
            return fail(problem.takeError());
          const double flops = operation.flops(modelSpec, shape);
          llvm::json::Object perTile;
          double bestUs = 0;
          const Candidate *best = nullptr;
          // Under load an H200 holds its boost clock for a fraction of a second, then
          // runs at its power cap (docs/PERF.md bw17). The shape's inputs were just made,
          // so its first tile heats the GPU; the others follow back to back at the cap.
          tuner::MeasureOptions measure;
          measure.warmupMs = std::max<double>(measure.warmupMs, heatMs);
          for (const Candidate &c : candidates) {
            if (!c.kernel || c.spec.headDim != d || c.spec.causal != causal ||
                c.spec.dtype != *dtype)
              continue;
            auto m = (*problem)->time(*c.kernel, nullptr, measure);
            measure = tuner::MeasureOptions();
            if (!m)
              return fail(m.takeError());
            perTile[c.tile.key()] = llvm::json::Object{
                {"us", m->medianUs}, {"tflops", flops / m->medianUs / 1e6},
                {"spread", m->spread()}, {"registers", c.registers},
                {"wrong_output", c.wrong}};
            if (!best || m->medianUs < bestUs) {
              best = &c;
              bestUs = m->medianUs;
            }
          }
          if (!best)
            continue;
          // The operation's roofline floor: FLOPs at peak or compulsory bytes at HBM.
          double fraction = 0;
          tuner::RooflinePoint floor = operation.floor(modelSpec, shape, gpu);
          if (auto f = tuner::fractionOfRoofline(floor.predictedSeconds, bestUs * 1e-6))
            fraction = *f;
          else
            llvm::consumeError(f.takeError());
          llvm::outs() << llvm::formatv(
              "{0,-5} {1,4} {2,6} {3,4} {4,4} {5,-7} {6,-18} {7,10:f1} {8,8:f1} {9,8:f1}%{10}\n",
              type, d, n, shape.batch, shape.headsQ, causal ? "yes" : "no",
              best->tile.key(), bestUs, flops / bestUs / 1e6, 100 * fraction,
              best->wrong ? "  WRONG OUTPUT" : "");
          llvm::outs().flush();
          rows.push_back(llvm::json::Object{{"dtype", type},
                                            {"d", d},
                                            {"N", n},
                                            {"B", shape.batch},
                                            {"H", shape.headsQ},
                                            {"causal", causal},
                                            {"tile", best->tile.key()},
                                            {"us", bestUs},
                                            {"tflops", flops / bestUs / 1e6},
                                            {"roofline_fraction", fraction},
                                            {"wrong_output", best->wrong},
                                            {"tiles", std::move(perTile)}});
        }
  if (!jsonOut.empty()) {
    generator::KernelSpec protocolSpec;  // what decides the protocol: family and features
    protocolSpec.family = *family;
    protocolSpec.features = *features;
    std::error_code ec;
    llvm::raw_fd_ostream file(jsonOut, ec);
    if (ec)
      return fail(llvm::createStringError(ec, "cannot write " + jsonOut));
    file << llvm::formatv("{0:2}", llvm::json::Value(llvm::json::Object{
                                       {"device", props.name},
                                       {"family", familyOpt.getValue()},
                                       {"protocol", tuner::measurementProtocol(protocolSpec)},
                                       {"rows", std::move(rows)}}));
  }
  return 0;
}

flashjit::tools::RegisterCommand registerBench(benchCommand, &runBench);
} // namespace
