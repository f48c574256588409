// `flashjit tune`: offline sweeps. Tunes the cross product of specs (head dims x
// dtypes x causal) and buckets (sequence lengths x batch*heads) on the local GPUs,
// resuming from the cache, with a progress line and a summary table; or, with
// --compile-only (or no GPU at all), compiles the default tile of every spec for the
// given targets so a build machine can prepare a deployment cache. --shard I/N takes
// the I-th of N disjoint parts for job arrays; docs/TUNING.md shows how.
#include "tools/command.h"
#include "tools/spec_options.h"

#include "cache/cache.h"
#include "cache/winners.h"
#include "runtime/driver.h"
#include "runtime/nvrtc.h"
#include "support/error.h"
#include "tuner/gpu_specs.h"
#include "tuner/sweep.h"
#include "tuner/sweep_report.h"
#include "tuner/tuner.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace flashjit::tools {
namespace {

namespace cl = llvm::cl;
using namespace flashjit::tuner;

cl::SubCommand sub("tune",
                   "Tune a sweep of specs and shape buckets on the local GPU(s) into the "
                   "cache (or, with --compile-only or no GPU, compile them)");
// --window, --softcap, --alibi, --score-mod, --mask-mod: every spec of the sweep gets
// them (after `sub`: it needs it).
FeatureOptions featureOptions(sub);

cl::OptionCategory sweepCat("tune: the sweep (no spec option: the default sweep)");
cl::list<unsigned> headDims("head-dims", cl::desc("Head dims, comma-separated (e.g. 64,128)"),
                            cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::list<std::string> dtypes("dtypes", cl::desc("Dtypes: bf16,fp16,e4m3 (FP8 inputs with a bf16 output on fwd_wgmma; with dec_mma an FP8 KV cache, bf16 q and o)"), cl::CommaSeparated,
                             cl::sub(sub), cl::cat(sweepCat));
cl::opt<std::string> causal("causal", cl::desc("Causal: both, yes or no (default: both)"),
                            cl::sub(sub), cl::cat(sweepCat));
cl::list<unsigned> seqlens("seqlens",
                           cl::desc("Sequence lengths (seqlen_q = seqlen_k), e.g. "
                                    "512,1024,2048"),
                           cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::list<unsigned> batchHeads("batch-heads",
                              cl::desc("batch x heads of the buckets (default: 32)"),
                              cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::list<unsigned> ladderHeads("ladder-heads",
                               cl::desc("Also the length ladder of descriptions with these "
                                        "query-head counts: what fj_kernel_get tunes with no "
                                        "length hint (N 512..16384, batch 16384/N). Alone, "
                                        "without --seqlens/--batch-heads: only the ladder"),
                               cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::opt<std::string> family("family",
                            cl::desc("Kernel family: auto (what the C API loads on each "
                                     "target: fwd_wgmma and its fwd_mma fallback on sm_90a, "
                                     "fwd_mma elsewhere), fwd_mma, fwd_wgmma, the "
                                     "backward pass's bwd_mma or bwd_wgmma (sm_90a, head "
                                     "dims multiples of 8 from 32 to 256), or decode's "
                                     "dec_mma"),
                            cl::init("auto"), cl::sub(sub), cl::cat(sweepCat));
cl::opt<bool> backwardFlag("backward",
                           cl::desc("With --family auto: also the backward pass (bwd_wgmma "
                                    "on sm_90a for head dims multiples of 8 from 32 to 256, else "
                                    "bwd_mma), what "
                                    "fj_kernel_get loads for desc.backward"),
                           cl::sub(sub), cl::cat(sweepCat));
cl::opt<bool> decodeFlag("decode",
                         cl::desc("With --family auto: also the decode kernels (dec_mma), "
                                  "what fj_kernel_get loads for desc.decode, at the decode "
                                  "buckets of --decode-q-lens x --decode-heads x "
                                  "--decode-batches x --decode-kv-lens"),
                         cl::sub(sub), cl::cat(sweepCat));
cl::list<unsigned> decodeQueryLens("decode-q-lens",
                                   cl::desc("Decode: query rows per sequence (default: 1)"),
                                   cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::list<std::string> decodeHeads("decode-heads",
                                  cl::desc("Decode: query/KV head counts (default: "
                                           "32/8,32/32,64/8)"),
                                  cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::list<unsigned> decodeBatches("decode-batches",
                                 cl::desc("Decode: sequences per step (default: 1,4,16,64)"),
                                 cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::list<unsigned> decodeKvLens("decode-kv-lens",
                                cl::desc("Decode: KV cache lengths (default: "
                                         "1024,4096,16384)"),
                                cl::CommaSeparated, cl::sub(sub), cl::cat(sweepCat));
cl::opt<bool> defaultSweepFlag("default-sweep",
                               cl::desc("The default sweep (what plain `flashjit tune` runs)"),
                               cl::sub(sub), cl::cat(sweepCat));

cl::OptionCategory runCat("tune: how");
cl::opt<std::string> cachePath("cache",
                               cl::desc("The cache DB to write (default: $FLASHJIT_CACHE, else "
                                        "~/.cache/flashjit/cache.sqlite)"),
                               cl::value_desc("file"), cl::sub(sub), cl::cat(runCat));
cl::opt<double> budget("budget-s", cl::desc("Time budget per (spec, bucket) tune, seconds"),
                       cl::init(30), cl::sub(sub), cl::cat(runCat));
cl::opt<std::string> modeName("mode",
                              cl::desc("default or exhaustive (no pruning by the model); "
                                       "default: $FLASHJIT_TUNE, else default"),
                              cl::sub(sub), cl::cat(runCat));
cl::opt<bool> retune("retune", cl::desc("Tune again what the cache already has"),
                     cl::sub(sub), cl::cat(runCat));
cl::opt<bool> compileOnlyFlag("compile-only",
                              cl::desc("No GPU needed: compile the default tile of every spec "
                                       "for --targets into the cache"),
                              cl::sub(sub), cl::cat(runCat));
cl::list<std::string> targets("targets",
                              cl::desc("--compile-only targets (default: sm_80,sm_86,sm_89,"
                                       "sm_90a)"),
                              cl::CommaSeparated, cl::sub(sub), cl::cat(runCat));
cl::list<std::string> winnersFiles(
    "winners",
    cl::desc("--compile-only: also make the tuning winners of this file usable from the "
             "cache (a file of `flashjit cache export --format json`): each winner's tile is "
             "compiled here and its measured row kept; rows measured with another generator "
             "are skipped as stale (repeatable)"),
    cl::value_desc("file"), cl::sub(sub), cl::cat(runCat));
cl::list<unsigned> devices("devices",
                           cl::desc("GPUs to tune on, one worker each (default: 0)"),
                           cl::CommaSeparated, cl::sub(sub), cl::cat(runCat));
cl::opt<std::string> shardText("shard",
                               cl::desc("I/N: only the I-th of N disjoint parts of the sweep "
                                        "(for job arrays; merge with `flashjit cache merge`)"),
                               cl::sub(sub), cl::cat(runCat));
cl::opt<unsigned> jobs("jobs", cl::desc("Compile threads (default: one per core)"),
                       cl::init(0), cl::sub(sub), cl::cat(runCat));
cl::opt<bool> verbose("verbose", cl::desc("Log each tune's steps and rejections"),
                      cl::sub(sub), cl::cat(runCat));

int fail(llvm::Error err) {
  llvm::errs() << "flashjit tune: " << takeErrorReport(std::move(err)).message << "\n";
  return 1;
}

bool anySpecOption() {
  return headDims.getNumOccurrences() || dtypes.getNumOccurrences() ||
         causal.getNumOccurrences() || seqlens.getNumOccurrences() ||
         batchHeads.getNumOccurrences() || ladderHeads.getNumOccurrences() ||
         decodeQueryLens.getNumOccurrences() || decodeHeads.getNumOccurrences() ||
         decodeBatches.getNumOccurrences() || decodeKvLens.getNumOccurrences() ||
         featureOptions.given();
}

// The sweep: the default one, with any option given replacing its part.
llvm::Expected<SweepConfig> sweepConfig() {
  SweepConfig c = defaultSweep();
  if (!llvm::StringRef(family).trim().equals_insensitive("auto")) {
    llvm::Expected<generator::Family> fam = generator::parseFamily(family);
    if (!fam) {
      llvm::consumeError(fam.takeError());
      return makeError(ErrorCode::InvalidValue,
                       "--family '{0}': expected auto, fwd_mma, fwd_wgmma, bwd_mma, "
                       "bwd_wgmma or dec_mma",
                       family);
    }
    c.families = {*fam};
  }
  c.backward = backwardFlag;
  c.decode = decodeFlag;
  if (decodeQueryLens.getNumOccurrences())
    c.decodeQueryLens.assign(decodeQueryLens.begin(), decodeQueryLens.end());
  if (decodeBatches.getNumOccurrences())
    c.decodeBatches.assign(decodeBatches.begin(), decodeBatches.end());
  if (decodeKvLens.getNumOccurrences())
    c.decodeKvLens.assign(decodeKvLens.begin(), decodeKvLens.end());
  if (decodeHeads.getNumOccurrences()) {
    c.decodeHeads.clear();
    for (const std::string &text : decodeHeads) {
      std::optional<std::pair<int, int>> heads = parseHeadLayout(text);
      if (!heads)
        return makeError(ErrorCode::InvalidValue,
                         "--decode-heads '{0}': expected query/KV head counts, the KV heads "
                         "dividing the query heads (e.g. 32/8)",
                         text);
      c.decodeHeads.push_back(*heads);
    }
  }
  for (const std::vector<int> *list : {&c.decodeQueryLens, &c.decodeBatches, &c.decodeKvLens})
    for (int v : *list)
      if (v < 1)
        return makeError(ErrorCode::InvalidValue,
                         "--decode-q-lens, --decode-batches and --decode-kv-lens take sizes "
                         ">= 1 (got {0})",
                         v);
  for (int q : c.decodeQueryLens)
    if (q > 64)
      return makeError(ErrorCode::InvalidValue,
                       "--decode-q-lens: {0} query rows; a decode step has 1 to 64", q);
  if (headDims.getNumOccurrences())
    c.headDims.assign(headDims.begin(), headDims.end());
  if (dtypes.getNumOccurrences()) {
    c.dtypes.clear();
    for (const std::string &name : dtypes) {
      llvm::Expected<generator::DType> d = generator::parseDType(name);
      if (!d)
        return d.takeError();
      c.dtypes.push_back(*d);
    }
  }
  if (causal.getNumOccurrences()) {
    llvm::Expected<std::vector<bool>> choice = parseCausalChoice(causal);
    if (!choice)
      return choice.takeError();
    c.causal = *choice;
  }
  if (seqlens.getNumOccurrences())
    c.seqlens.assign(seqlens.begin(), seqlens.end());
  if (batchHeads.getNumOccurrences())
    c.batchHeads.assign(batchHeads.begin(), batchHeads.end());
  if (ladderHeads.getNumOccurrences()) {
    c.ladderHeads.assign(ladderHeads.begin(), ladderHeads.end());
    if (!seqlens.getNumOccurrences() && !batchHeads.getNumOccurrences())
      c.seqlens.clear(), c.batchHeads.clear();  // the ladder alone
  }
  for (int v : c.ladderHeads)
    if (v < 1)
      return makeError(ErrorCode::InvalidValue, "--ladder-heads: {0} is not a head count", v);
  for (int d : c.headDims) {
    generator::KernelSpec probe;
    probe.headDim = probe.headDimV = d;
    if (llvm::Error err = generator::validateSpec(probe))
      return std::move(err);
  }
  for (int v : c.seqlens)
    if (v < 1)
      return makeError(ErrorCode::InvalidValue, "--seqlens: {0} is not a length", v);
  for (int v : c.batchHeads)
    if (v < 1)
      return makeError(ErrorCode::InvalidValue, "--batch-heads: {0} is not a count", v);
  // Checked whatever the mode, so a mistyped budget fails before a long sweep, not in it.
  if (!std::isfinite(budget) || budget <= 0)
    return makeError(ErrorCode::InvalidValue,
                     "--budget-s: {0} is not a time budget (seconds, finite and > 0)",
                     budget.getValue());
  if (c.headDims.empty() || c.dtypes.empty() || c.causal.empty() ||
      ((c.seqlens.empty() || c.batchHeads.empty()) && c.ladderHeads.empty()))
    return makeError(ErrorCode::InvalidValue, "the sweep is empty");
  return c;
}

llvm::Expected<std::unique_ptr<cache::Cache>> openCache() {
  cache::CacheOptions options;
  if (cachePath.getNumOccurrences())
    options.userPath = cachePath.getValue();
  // A sweep writes what it makes into the DB it names; a row of the system cache must
  // not stand in for it (a deployment cache prepared with a system DB installed would
  // lack those rows).
  options.systemPaths = std::vector<std::string>{};
  auto opened = cache::Cache::open(std::move(options));
  if (opened && !(*opened)->persistent())
    llvm::errs() << "flashjit tune: warning: the cache is in memory only ($FLASHJIT_CACHE is "
                    "empty or the DB cannot be used): nothing will be kept; name one with "
                    "--cache\n";
  return opened;
}

// --shard, parsed (nothing when not given).
llvm::Expected<std::optional<Shard>> shardOption() {
  if (!shardText.getNumOccurrences())
    return std::nullopt;
  llvm::Expected<Shard> shard = parseShard(shardText);
  if (!shard)
    return shard.takeError();
  return std::optional<Shard>(*shard);
}

// Items already done are reported from the cache and not redone (resume).
struct Plan {
  std::vector<SweepItem> all, pending;
  std::map<std::string, SweepResult> cached; // by label
};

llvm::Expected<Plan> plan(cache::Cache &cache, std::vector<SweepItem> items,
                          llvm::StringRef deviceKey, const GpuSpec *gpu) {
  Plan p;
  llvm::Expected<std::optional<Shard>> shard = shardOption();
  if (!shard)
    return shard.takeError();
  if (*shard)
    items = shardItems(items, **shard);
  p.all = items;
  for (const SweepItem &item : items) {
    llvm::Expected<bool> done = retune ? false : itemDone(cache, item, deviceKey);
    if (!done)
      return done.takeError();
    if (!*done) {
      p.pending.push_back(item);
      continue;
    }
    llvm::Expected<SweepResult> r = cachedResult(cache, item, deviceKey, gpu);
    if (!r)
      return r.takeError();
    p.cached[item.label()] = *r;
  }
  return p;
}

// The summary in the sweep's order, then the time per spec and the distribution of
// cold tune times (the 30 s budget).
int finish(const Plan &p, const SweepOutcome &outcome, bool tuning) {
  std::map<std::string, SweepResult> byLabel = p.cached;
  for (const SweepResult &r : outcome.results)
    byLabel[r.item.label()] = r;
  std::vector<SweepResult> ordered;
  for (const SweepItem &item : p.all) {
    auto it = byLabel.find(item.label());
    if (it == byLabel.end()) {
      // A worker tunes for its own device's target: find the result under its label.
      for (const SweepResult &r : outcome.results)
        if (r.item.bucket == item.bucket && r.item.spec.headDim == item.spec.headDim &&
            r.item.spec.dtype == item.spec.dtype && r.item.spec.causal == item.spec.causal &&
            r.item.spec.family == item.spec.family)
          ordered.push_back(r);
      continue;
    }
    ordered.push_back(it->second);
  }
  llvm::outs() << "\n";
  printSummary(llvm::outs(), ordered);

  int failed = 0;
  std::vector<double> cold;
  std::map<std::string, std::pair<double, int>> perSpec; // seconds, compilations
  for (const SweepResult &r : outcome.results) {
    if (r.status == SweepResult::Failed)
      ++failed;
    if (r.status == SweepResult::Tuned || r.status == SweepResult::Compiled) {
      cold.push_back(r.seconds);
      perSpec[r.item.spec.key()].first += r.seconds;
      perSpec[r.item.spec.key()].second += r.compiled;
    }
  }
  if (!perSpec.empty()) {
    llvm::outs() << "\ntime per spec (compiling and " << (tuning ? "tuning" : "nothing else")
                 << "):\n";
    for (const auto &[spec, v] : perSpec)
      llvm::outs() << llvm::formatv("  {0,-44} {1,8:F1} s  {2,4} compiled\n", spec, v.first,
                                    v.second);
  }
  if (tuning && !cold.empty()) {
    std::sort(cold.begin(), cold.end());
    auto at = [&](double q) { return cold[std::min(cold.size() - 1, (size_t)(q * (cold.size() - 1) + 0.5))]; };
    int within = (int)std::count_if(cold.begin(), cold.end(), [](double s) { return s <= budget; });
    llvm::outs() << llvm::formatv("\ntune time per (spec, bucket), compile included: min {0:F1} s, "
                                  "median {1:F1} s, p90 {2:F1} s, max {3:F1} s; {4} of {5} within "
                                  "{6:F1} s\n",
                                  cold.front(), at(0.5), at(0.9), cold.back(), within,
                                  cold.size(), budget.getValue());
  }
  llvm::outs() << llvm::formatv("{0} items: {1} done now, {2} from the cache, {3} failed; "
                                "{4} compilations, {5} timings\n",
                                p.all.size(), outcome.results.size() - failed, p.cached.size(),
                                failed, outcome.counters.compilations, outcome.counters.timings);
  return failed ? 1 : 0;
}

ProgressBar makeBar(int total) {
  bool interactive = llvm::sys::Process::StandardErrIsDisplayed();
  return ProgressBar(llvm::errs(), total, interactive,
                     interactive ? llvm::sys::Process::StandardErrColumns() : 0);
}

// --winners: each file's rows (this shard's part of them) made usable from the cache.
// A stale row is a note, not a failure: the file was measured before the kernels changed.
int importWinners(cache::Cache &cache) {
  llvm::Expected<std::optional<Shard>> shard = shardOption();
  if (!shard)
    return fail(shard.takeError());
  int failed = 0;
  for (const std::string &file : winnersFiles) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> text = llvm::MemoryBuffer::getFile(file);
    if (!text)
      return fail(makeError(ErrorCode::InvalidValue, "--winners {0}: {1}", file,
                            text.getError().message()));
    llvm::Expected<std::vector<cache::TuningRow>> rows =
        cache::winnersFromJson((*text)->getBuffer(), file);
    if (!rows)
      return fail(rows.takeError());
    int imported = 0, stale = 0, compiled = 0, index = -1;
    for (const cache::TuningRow &row : *rows) {
      ++index;
      if (*shard && index % (*shard)->count != (*shard)->index)
        continue;
      llvm::Expected<WinnerImport> done = importWinner(cache, row);
      if (!done)
        return fail(done.takeError());
      compiled += done->compiledNow;
      switch (done->status) {
      case WinnerImport::Imported: ++imported; break;
      case WinnerImport::Stale:
        ++stale;
        llvm::errs() << "flashjit tune: note: " << file << ": " << done->label << ": stale ("
                     << done->why << ")\n";
        break;
      case WinnerImport::Failed:
        ++failed;
        llvm::errs() << "flashjit tune: " << file << ": " << done->label << ": " << done->why
                     << "\n";
        break;
      }
    }
    llvm::outs() << llvm::formatv("winners {0}: {1} imported ({2} compiled now), {3} stale, "
                                  "{4} failed\n",
                                  file, imported, compiled, stale, failed);
  }
  return failed ? 1 : 0;
}

// The sweep's items with the feature options' features. A compile-only item whose
// default tile no longer fits with them is left out (described in `leftOut`).
std::vector<SweepItem> withFeatures(std::vector<SweepItem> items,
                                    const generator::Features &features,
                                    std::vector<std::string> *leftOut) {
  if (!features.any())
    return items;
  std::vector<SweepItem> out;
  for (SweepItem &item : items) {
    item.spec.features = features;
    if (!item.bucket)
      if (llvm::Error err =
              generator::validateTile(item.spec, generator::defaultTile(item.spec))) {
        std::string why = llvm::toString(std::move(err));
        if (leftOut)
          leftOut->push_back(item.spec.key() + ": " + why);
        continue;
      }
    out.push_back(std::move(item));
  }
  return out;
}

int runCompileOnly(const SweepConfig &config, const generator::Features &features,
                   bool announce, const std::string &why) {
  std::vector<std::string> list = targets.empty()
                                      ? defaultCompileTargets()
                                      : std::vector<std::string>(targets.begin(), targets.end());
  for (const std::string &t : list) {
    generator::KernelSpec probe;
    probe.target = t;
    if (llvm::Error err = generator::validateSpec(probe))
      return fail(std::move(err));
  }
  if (announce)
    llvm::errs() << "flashjit tune: no GPU (" << why << "): running the deviceless sweep: "
                 << "compiling the default tile of each spec for " << llvm::join(list, ", ")
                 << " into the cache\n";
  if (seqlens.getNumOccurrences() || batchHeads.getNumOccurrences() ||
      ladderHeads.getNumOccurrences())
    llvm::errs() << "flashjit tune: note: --compile-only compiles one tile per spec; "
                    "--seqlens, --batch-heads and --ladder-heads do not change it\n";
  std::vector<std::string> leftOut;
  std::vector<SweepItem> items =
      withFeatures(compileItems(config, list, &leftOut), features, &leftOut);
  for (const std::string &line : leftOut)
    llvm::errs() << "flashjit tune: note: left out: " << line << "\n";
  for (const std::string &t : list)
    if (sweepFamilies(config, t).empty())
      llvm::errs() << "flashjit tune: note: " << t << " is left out: "
                   << generator::familyName(config.families.front()) << " does not run there\n";
  if (items.empty())
    return fail(makeError(ErrorCode::InvalidValue,
                          "the sweep is empty: --family {0} runs on none of the targets ({1})",
                          family.getValue(), llvm::join(list, ", ")));
  auto cache = openCache();
  if (!cache)
    return fail(cache.takeError());
  llvm::Expected<std::string> nvrtc = runtime::nvrtcVersion();
  if (!nvrtc)
    return fail(nvrtc.takeError());
  llvm::Expected<Plan> p = plan(**cache, std::move(items), "", nullptr);
  if (!p)
    return fail(p.takeError());
  llvm::errs() << llvm::formatv("flashjit tune: {0} specs x targets{1}: {2} in the cache, {3} "
                                "to compile (NVRTC {4}) -> {5}\n",
                                p->all.size(),
                                shardText.getNumOccurrences() ? " (shard " + shardText + ")" : "",
                                p->cached.size(), p->pending.size(), *nvrtc,
                                (*cache)->persistent() ? (*cache)->userPath() : "memory");
  ProgressBar bar = makeBar((int)p->pending.size());
  SweepOutcome outcome = runCompileSweep(**cache, p->pending, jobs, bar.callbacks());
  bar.close();
  int status = finish(*p, outcome, false);
  int winnersStatus = importWinners(**cache);
  return std::max(status, winnersStatus);
}

int runTuneSweep(const SweepConfig &config, const generator::Features &features) {
  llvm::Expected<TuneMode> mode = modeName.getNumOccurrences()
                                      ? parseTuneMode(modeName)
                                      : tuneModeFromEnv(TuneMode::Default);
  if (!mode)
    return fail(mode.takeError());
  if (*mode != TuneMode::Default && *mode != TuneMode::Exhaustive)
    return fail(makeError(ErrorCode::InvalidValue,
                          "a tune sweep runs in default or exhaustive mode, not {0}",
                          tuneModeName(*mode)));
  std::vector<int> ordinals(devices.begin(), devices.end());
  if (ordinals.empty())
    ordinals = {0};
  auto first = runtime::Device::open(ordinals.front());
  if (!first)
    return fail(first.takeError());
  const runtime::DeviceProperties props = (*first)->properties();
  GpuSpec gpu = gpuSpecFromDevice(props);
  std::vector<std::string> leftOut;
  std::vector<SweepItem> items =
      withFeatures(tuneItems(config, props.target(), &leftOut), features, nullptr);
  for (const std::string &line : leftOut)
    llvm::errs() << "flashjit tune: note: left out: " << line << "\n";
  // What the tuner can do with the user's code: the CLI gives it no `args`.
  if (features.needsTuningArgs())
    llvm::errs() << "flashjit tune: note: the user code reads args.tensor and the CLI has no "
                    "tensors to give it: each spec gets the default tile, compiled, not tuned "
                    "(the C API tunes it with tuning_mod_args)\n";
  else if (!features.scoreMod.empty() || !features.maskMod.empty())
    llvm::errs() << "flashjit tune: note: the user code is checked and timed with args all "
                    "zero\n";
  if (items.empty())
    return fail(makeError(ErrorCode::NotSupported,
                          "the sweep is empty: --family {0} does not run on {1} ({2}); use "
                          "--family auto or fwd_mma",
                          family.getValue(), props.name, props.target()));
  auto cache = openCache();
  if (!cache)
    return fail(cache.takeError());
  llvm::Expected<Plan> p = plan(**cache, std::move(items), props.deviceKey(), &gpu);
  if (!p)
    return fail(p.takeError());
  llvm::errs() << llvm::formatv(
      "flashjit tune: {0} (spec, bucket) items{1} on {2} GPU(s) ({3}, {4}): {5} in the cache, "
      "{6} to tune ({7} mode, {8:F1} s budget each) -> {9}\n",
      p->all.size(), shardText.getNumOccurrences() ? " (shard " + shardText + ")" : "",
      ordinals.size(), props.name, props.target(), p->cached.size(), p->pending.size(),
      tuneModeName(*mode), budget.getValue(),
      (*cache)->persistent() ? (*cache)->userPath() : "memory");

  TuneSweepOptions options;
  options.devices = ordinals;
  options.tuner.mode = *mode;
  options.tuner.budgetSeconds = budget;
  options.tuner.retune = retune;
  options.tuner.compileThreads = jobs;
  ProgressBar bar = makeBar((int)p->pending.size());
  if (verbose)
    options.tuner.log = [](llvm::StringRef line) { llvm::errs() << "\n" << line << "\n"; };
  llvm::Expected<SweepOutcome> outcome =
      tuner::runTuneSweep(**cache, p->pending, options, bar.callbacks());
  bar.close();
  if (!outcome)
    return fail(outcome.takeError());
  return finish(*p, *outcome, true);
}

// The feature options, refused where the sweep has a family that cannot take them (the
// backward's).
llvm::Expected<generator::Features> sweepFeatures(const SweepConfig &config) {
  llvm::Expected<generator::Features> features = featureOptions.features();
  if (!features || !features->any())
    return features;
  if (config.backward)
    if (llvm::Error err =
            checkFamilyTakesFeatures(generator::Family::BwdMma, *features, "--backward"))
      return std::move(err);
  for (generator::Family fam : config.families)
    if (llvm::Error err = checkFamilyTakesFeatures(
            fam, *features, ("--family " + generator::familyName(fam)).str()))
      return std::move(err);
  return features;
}

int runTune() {
  llvm::Expected<SweepConfig> config = sweepConfig();
  if (!config)
    return fail(config.takeError());
  llvm::Expected<generator::Features> features = sweepFeatures(*config);
  if (!features)
    return fail(features.takeError());
  if (compileOnlyFlag)
    return runCompileOnly(*config, *features, false, "");
  if (targets.getNumOccurrences())
    return fail(makeError(ErrorCode::InvalidValue, "--targets goes with --compile-only (a "
                                                   "tune uses the GPU's own target)"));
  if (winnersFiles.getNumOccurrences())
    return fail(makeError(ErrorCode::InvalidValue,
                          "--winners goes with --compile-only (it fills a cache without a "
                          "GPU from winners measured elsewhere)"));
  // Is there a GPU?
  std::string why;
  llvm::Expected<int> count = runtime::deviceCount();
  if (!count)
    why = takeErrorReport(count.takeError()).message;
  else if (*count == 0)
    why = "the CUDA driver reports no device";
  if (!why.empty()) {
    if (anySpecOption() && !defaultSweepFlag)
      return fail(makeError(ErrorCode::NoDevice,
                            "no GPU to tune on ({0}); to prepare a cache without one, add "
                            "--compile-only --targets sm_80,sm_90a",
                            why));
    return runCompileOnly(*config, *features, true, why);
  }
  return runTuneSweep(*config, *features);
}

RegisterCommand reg(sub, &runTune);

} // namespace
} // namespace flashjit::tools
