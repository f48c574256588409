// `flashjit bench-decode`: the decode kernels (dec_mma) on serving shapes, against the
// memory's own speed. Decode reads the KV cache once and does little else, so its
// measure is the bytes of K and V it must read over its time, next to the bandwidth of a
// device-to-device copy (bytes read + written over time) measured in the same run.
// Every tile is first checked against the reference on a small paged problem.
#include "tools/command.h"
#include "tools/spec_options.h"

#include "generator/emit.h"
#include "runtime/driver.h"
#include "support/error.h"
#include "tuner/checker.h"
#include "tuner/decode_kernel.h"
#include "tuner/decode_problem.h"
#include "tuner/loaded_kernel.h"
#include "tuner/measure.h"
#include "tuner/operation.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace {
namespace cl = llvm::cl;
using namespace flashjit;

cl::SubCommand decodeCommand("bench-decode",
                             "Time the decode kernels (dec_mma) against the copy bandwidth");
// The features (dec_mma takes them all; docs/FEATURES.md).
flashjit::tools::FeatureOptions featureOptions(decodeCommand);
cl::list<int> headDims("head-dims", cl::desc("Head dims (default 128)"), cl::CommaSeparated,
                       cl::sub(decodeCommand));
cl::list<std::string> dtypes("dtypes",
                             cl::desc("bf16,fp16,e4m3 (default bf16; e4m3: an FP8 cache, bf16 "
                                      "q and o)"),
                             cl::CommaSeparated, cl::sub(decodeCommand));
cl::list<int> batches("batches", cl::desc("Batch sizes (default 1,4,16,64,256)"),
                      cl::CommaSeparated, cl::sub(decodeCommand));
cl::list<int> kvLens("kv-lens", cl::desc("Cache lengths (default 1024,4096,16384,65536,131072)"),
                     cl::CommaSeparated, cl::sub(decodeCommand));
cl::opt<int> headsQ("heads-q", cl::desc("Query heads"), cl::init(32), cl::sub(decodeCommand));
cl::opt<int> headsKV("heads-kv", cl::desc("KV heads"), cl::init(8), cl::sub(decodeCommand));
cl::opt<int> queryRows("q-len", cl::desc("New query rows per sequence"), cl::init(1),
                       cl::sub(decodeCommand));
cl::opt<int> pageSize("page-size", cl::desc("Tokens per page (0: contiguous cache)"),
                      cl::init(64), cl::sub(decodeCommand));
cl::opt<bool> causal("causal", cl::desc("Causal (bottom-right)"), cl::init(false),
                     cl::sub(decodeCommand));
cl::list<std::string> tiles("tiles", cl::desc("Tiles (default: a hand-picked set)"),
                            cl::CommaSeparated, cl::sub(decodeCommand));
cl::opt<double> maxCacheGb("max-cache-gb", cl::desc("Skip shapes whose K+V exceed this"),
                           cl::init(24), cl::sub(decodeCommand));
cl::list<int> splitCounts("splits",
                          cl::desc("Split counts to time (0: the heuristic; default 0)"),
                          cl::CommaSeparated, cl::sub(decodeCommand));
cl::opt<std::string> jsonOut("json", cl::desc("Write the results as JSON to this file"),
                             cl::sub(decodeCommand));
cl::opt<bool> timeWrongOutput("time-wrong-output", cl::desc(tools::kTimeWrongOutputHelp),
                              cl::init(false), cl::sub(decodeCommand));

const char *kDefaultTiles[] = {"bm16.bn64.w4.s3", "bm16.bn64.w4.s4", "bm16.bn128.w4.s3",
                               "bm16.bn128.w8.s3", "bm16.bn32.w2.s4", "bm16.bn64.w2.s4",
                               "bm32.bn64.w4.s3"};

int fail(llvm::Error error) {
  llvm::errs() << "flashjit bench-decode: " << llvm::toString(std::move(error)) << "\n";
  return 1;
}

// Bytes read + written per second by a device-to-device copy of 1 GiB (median of 20).
llvm::Expected<double> copyBandwidth(CUstream stream) {
  constexpr size_t kBytes = 1ull << 30;
  auto a = runtime::DeviceBuffer::allocate(kBytes);
  if (!a)
    return a.takeError();
  auto b = runtime::DeviceBuffer::allocate(kBytes);
  if (!b)
    return b.takeError();
  if (llvm::Error err = a->fill(1))
    return std::move(err);
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    auto timer = runtime::EventTimer::create();
    if (!timer)
      return timer.takeError();
    if (llvm::Error err = timer->start(stream))
      return std::move(err);
    if (llvm::Error err = (i % 2 ? a : b)->copyFrom(*(i % 2 ? b : a), kBytes, stream))
      return std::move(err);
    if (llvm::Error err = timer->stop(stream))
      return std::move(err);
    auto elapsed = timer->elapsedMs();
    if (!elapsed)
      return elapsed.takeError();
    if (i >= 3)
      ms.push_back(*elapsed);
  }
  return 2.0 * kBytes / (tuner::median(ms) * 1e-3);
}

struct Candidate {
  generator::KernelSpec spec;
  generator::TileConfig tile;
  std::unique_ptr<tuner::LoadedKernel> kernel;
  bool wrong = false;  // failed its check (timed only with --time-wrong-output)
};

int runBenchDecode() {
  auto features = featureOptions.features();
  if (!features)
    return fail(features.takeError());
  if (auto err = tools::checkFamilyTakesFeatures(generator::Family::DecMma, *features,
                                                 "the feature options"))
    return fail(std::move(err));
  // The checker and the timing run the user's code with zeroed `args`.
  if (auto err = tools::checkUserCodeRunsWithZeroArgs(*features, "bench-decode"))
    return fail(std::move(err));
  auto dev = runtime::Device::open(0);
  if (!dev)
    return fail(dev.takeError());
  const runtime::DeviceProperties &props = (*dev)->properties();
  const tuner::Operation &operation = tuner::decodeOperation();
  std::vector<int> dims(headDims.begin(), headDims.end());
  if (dims.empty())
    dims = {128};
  std::vector<std::string> types(dtypes.begin(), dtypes.end());
  if (types.empty())
    types = {"bf16"};
  std::vector<int> bs(batches.begin(), batches.end());
  if (bs.empty())
    bs = {1, 4, 16, 64, 256};
  std::vector<int> lens(kvLens.begin(), kvLens.end());
  if (lens.empty())
    lens = {1024, 4096, 16384, 65536, 131072};
  std::vector<std::string> tileKeys(tiles.begin(), tiles.end());
  if (tileKeys.empty())
    tileKeys.assign(std::begin(kDefaultTiles), std::end(kDefaultTiles));

  auto copy = copyBandwidth(nullptr);
  if (!copy)
    return fail(copy.takeError());
  llvm::outs() << llvm::formatv("{0}: device-to-device copy {1:f0} GB/s (read + write)\n",
                                props.name, *copy / 1e9);
  llvm::json::Array rows;
  for (const std::string &type : types)
    for (int d : dims) {
      auto dtype = generator::parseDType(type);
      if (!dtype)
        return fail(dtype.takeError());
      // Compile, load and check each tile on a small paged problem.
      std::vector<Candidate> candidates;
      for (const std::string &key : tileKeys) {
        auto tile = generator::TileConfig::parse(key);
        if (!tile)
          return fail(tile.takeError());
        Candidate c;
        c.spec.family = generator::Family::DecMma;
        c.spec.dtype = *dtype;
        c.spec.headDim = c.spec.headDimV = d;
        c.spec.causal = causal;
        c.spec.features = *features;
        c.spec.target = props.target();
        c.tile = *tile;
        auto emitted = generator::emitKernel(c.spec, c.tile);
        if (!emitted) {
          llvm::errs() << "  skip " << key << ": " << llvm::toString(emitted.takeError()) << "\n";
          continue;
        }
        auto binary = tuner::compileEmitted(*emitted, c.spec.target);
        if (!binary)
          return fail(binary.takeError());
        if (binary->spillStoreBytes + binary->spillLoadBytes > 0) {
          llvm::errs() << "  skip " << key << ": spills\n";
          continue;
        }
        auto loaded = operation.load(binary->cubin, *emitted);
        if (!loaded)
          return fail(loaded.takeError());
        for (const tuner::ForwardShape &small : operation.correctnessShapes(c.spec)) {
          auto checker = operation.makeChecker(c.spec, small, 42, nullptr);
          if (!checker)
            return fail(checker.takeError());
          auto report = (*checker)->check(**loaded, nullptr);
          if (!report)
            return fail(report.takeError());
          if (!report->passed && !timeWrongOutput)
            return fail(makeError(ErrorCode::Internal, "{0} {1} fails its check: {2}",
                                  c.spec.key(), key, report->summary()));
          c.wrong |= !report->passed;
        }
        c.kernel = std::move(*loaded);
        candidates.push_back(std::move(c));
      }
      llvm::outs() << llvm::formatv("{0,-5} {1,4} {2,6} {3,7} {4,-18} {5,10} {6,9} {7,7} "
                                    "{8,6}\n",
                                    "dtype", "d", "batch", "kv_len", "best tile", "us",
                                    "GB/s", "% copy", "splits");
      std::vector<int> splitList(splitCounts.begin(), splitCounts.end());
      if (splitList.empty())
        splitList = {0};
      for (int batch : bs)
        for (int len : lens)
          for (int requested : splitList) {
          // The keys a step reads: with a window's left side, the union of its rows'
          // windows (window_left + the new rows), else the whole cache.
          const bool windowed = features->window && features->windowLeft >= 0;
          const long long keysRead =
              windowed ? std::min<long long>(len, (long long)features->windowLeft + queryRows)
                       : len;
          const double rowBytes =
              (double)batch * headsKV * 2.0 * d * generator::elementBytes(*dtype);
          const double kvBytes = rowBytes * keysRead;
          if (rowBytes * len > maxCacheGb * 1e9)
            continue;
          tuner::ForwardShape shape;
          shape.batch = batch;
          shape.headsQ = headsQ;
          shape.headsKV = headsKV;
          shape.seqQ = queryRows;
          shape.seqK = len;
          shape.headDim = shape.headDimV = d;
          shape.pageSize = pageSize;
          shape.withLse = true;
          shape.decodeSplits = requested;
          const Candidate *best = nullptr;
          double bestUs = 0;
          llvm::json::Object perTile;
          if (candidates.empty())
            continue;
          // One problem for every tile (it depends on the dtype and head dims only).
          auto problem = operation.makeTimingProblem(candidates.front().spec, shape, props.l2Bytes);
          if (!problem)
            return fail(problem.takeError());
          for (const Candidate &c : candidates) {
            auto m = (*problem)->time(*c.kernel, nullptr);
            if (!m)
              return fail(m.takeError());
            perTile[c.tile.key()] = m->medianUs;
            if (!best || m->medianUs < bestUs) {
              best = &c;
              bestUs = m->medianUs;
            }
          }
          if (!best)
            continue;
          // The split count the launch used (the heuristic's).
          FjDecodeParams p = tuner::decodeSizes(shape);
          const auto *kernel = tuner::DecodeKernel::of(*best->kernel);
          const int splits = kernel ? kernel->plan(p, requested).numSplits : 0;
          const double gbps = kvBytes / (bestUs * 1e-6) / 1e9;
          llvm::outs() << llvm::formatv(
              "{0,-5} {1,4} {2,6} {3,7} {4,-18} {5,10:f1} {6,9:f0} {7,6:f1}% {8,6}\n", type, d,
              batch, len, best->tile.key() + (best->wrong ? " WRONG" : ""), bestUs, gbps,
              100 * gbps * 1e9 / *copy, splits);
          llvm::outs().flush();
          rows.push_back(llvm::json::Object{{"dtype", type},
                                            {"d", d},
                                            {"batch", batch},
                                            {"kv_len", len},
                                            {"tile", best->tile.key()},
                                            {"us", bestUs},
                                            {"kv_gbps", gbps},
                                            {"copy_fraction", gbps * 1e9 / *copy},
                                            {"splits", splits},
                                            {"tiles", std::move(perTile)}});
        }
    }
  if (!jsonOut.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream file(jsonOut, ec);
    if (ec)
      return fail(llvm::createStringError(ec, "cannot write " + jsonOut));
    file << llvm::formatv("{0:2}", llvm::json::Value(llvm::json::Object{
                                       {"device", props.name},
                                       {"copy_gbps", *copy / 1e9},
                                       {"heads_q", (int)headsQ},
                                       {"heads_kv", (int)headsKV},
                                       {"q_len", (int)queryRows},
                                       {"page_size", (int)pageSize},
                                       {"protocol", tuner::kMeasurementProtocolVersion},
                                       {"rows", std::move(rows)}}));
  }
  return 0;
}

flashjit::tools::RegisterCommand registerBenchDecode(decodeCommand, &runBenchDecode);
} // namespace
