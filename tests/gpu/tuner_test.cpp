// The tuner on a GPU (issue 4's acceptance): a sweep over head_dim {64, 128} x bf16 x
// {causal, not} x seqlen {1024, 8192} (for each family the C API loads on the device:
// fwd_wgmma too on sm_90a) whose every winner passes the correctness bar
// (checked again here, on other shapes) and whose re-run performs 0 compilations and
// 0 timings; a planted wrong candidate rejected and recorded, never selected; two
// independent tunes that agree (same winner, or winners within 2%); heuristic and
// cached modes; concurrent requests for one (spec, bucket) tuned once; the screening
// pass and the finalists' full timings; and each cold tune within the 30 s budget.
// Prints what it measured.
#include "gpu_skip.h"
#include "kernel_pool.h"

#include "support/error.h"
#include "tuner/checker.h"
#include "tuner/decode_checker.h"
#include "tuner/decode_kernel.h"
#include "tuner/sweep.h"
#include "tuner/tuned_config.h"
#include "tuner/tuner.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>

using namespace flashjit;
using generator::DType;
using generator::KernelSpec;
using generator::TileConfig;
using tuner::Bucket;
using tuner::SweepItem;
using tuner::SweepResult;
using tuner::TuneMode;
using tuner::Tuner;
using tuner::TunerOptions;

namespace {

std::string target() { return flashjit::testing::openTestDevice()->properties().target(); }

KernelSpec specFor(int d, bool causal,
                   generator::Family family = generator::Family::FwdMma) {
  KernelSpec s;
  s.family = family;
  s.dtype = DType::BF16;
  s.headDim = s.headDimV = d;
  s.causal = causal;
  s.target = target();
  return s;
}

std::unique_ptr<cache::Cache> openCache(std::optional<std::string> path) {
  cache::CacheOptions options;
  options.userPath = path ? *path : "";
  auto c = cache::Cache::open(options);
  EXPECT_TRUE(bool(c)) << llvm::toString(c.takeError());
  return c ? std::move(*c) : nullptr;
}

// A file cache in a fresh directory, removed at the end.
struct TempCache {
  TempCache() {
    llvm::SmallString<128> dir;
    if (llvm::sys::fs::createUniqueDirectory("flashjit-tuner-gpu", dir))
      std::abort();
    dir_ = std::string(dir);
  }
  ~TempCache() { llvm::sys::fs::remove_directories(dir_); }
  std::string path() const { return dir_ + "/cache.sqlite"; }
  std::string dir_;
};

// The row a tune published, and its candidates JSON parsed.
struct PublishedRow {
  cache::TuningRow row;
  llvm::json::Value candidates = nullptr;
};
std::optional<PublishedRow> publishedRow(cache::Cache &cache, Tuner &tuner,
                                         const KernelSpec &spec, const Bucket &bucket) {
  auto key = tuner.tuningKey(spec, bucket);
  EXPECT_TRUE(bool(key)) << llvm::toString(key.takeError());
  if (!key)
    return std::nullopt;
  auto found = cache.findTuning(*key);
  EXPECT_TRUE(bool(found)) << llvm::toString(found.takeError());
  if (!found || !*found)
    return std::nullopt;
  PublishedRow r;
  r.row = (*found)->row;
  auto parsed = llvm::json::parse(r.row.candidatesJson);
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  if (parsed)
    r.candidates = std::move(*parsed);
  return r;
}

// Candidate entry of a row by tile key (null when absent).
const llvm::json::Object *candidate(const PublishedRow &r, llvm::StringRef tile) {
  const llvm::json::Object *o = r.candidates.getAsObject();
  const llvm::json::Array *list = o ? o->getArray("candidates") : nullptr;
  if (!list)
    return nullptr;
  for (const llvm::json::Value &v : *list)
    if (const llvm::json::Object *c = v.getAsObject())
      if (c->getString("tile") == tile)
        return c;
  return nullptr;
}

// The correctness bar on a shape none of the tuner's own checks used.
void expectCorrect(const tuner::Selection &s, CUstream stream) {
  ASSERT_NE(s.kernel, nullptr) << s.binaryKeyText;
  tuner::ForwardShape shape;
  shape.batch = 2;
  shape.headsQ = 4;
  shape.headsKV = 2;
  shape.seqQ = 1000;
  shape.seqK = 1500;
  auto checker = tuner::ForwardChecker::create(s.spec, shape, 99, stream);
  ASSERT_TRUE(bool(checker)) << llvm::toString(checker.takeError());
  auto report = (*checker)->check(*s.kernel, stream);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_TRUE(report->passed) << s.binaryKeyText << " (" << s.bucket.key() << "): "
                              << report->summary();
  std::printf("    %-56s %-18s %s\n", s.binaryKeyText.c_str(), s.bucket.key().c_str(),
              report->summary().c_str());
}

struct Stream {
  Stream() {
    auto s = runtime::createStream();
    EXPECT_TRUE(bool(s)) << llvm::toString(s.takeError());
    if (s)
      stream = *s;
  }
  ~Stream() {
    if (stream)
      runtime::destroyStream(stream);
  }
  CUstream stream = nullptr;
};

TEST(TunerGpu, SweepWinnersPassTheBarAndRerunIsFree) {
  FLASHJIT_REQUIRE_GPU();
  TempCache dir;
  tuner::SweepConfig config;
  config.headDims = {64, 128};
  config.dtypes = {DType::BF16};
  config.causal = {false, true};
  config.seqlens = {1024, 8192};
  config.batchHeads = {32};
  // The families the C API loads here: fwd_wgmma and fwd_mma on sm_90a, else fwd_mma.
  const std::vector<generator::Family> families = tuner::sweepFamilies(config, target());
  const int perFamily = 8;
  std::vector<SweepItem> items = tuner::tuneItems(config, target());
  ASSERT_EQ(items.size(), perFamily * families.size());

  tuner::TuneSweepOptions options;
  options.devices = {0};
  options.tuner.budgetSeconds = 30;
  tuner::SweepProgress progress;
  progress.finished = [](const SweepResult &r) {
    std::printf("  %-52s %-18s %-8s %-18s %9.1f us %7.1f TFLOP/s %5.1f%% roofline %6.1f s "
                "%3d compiled\n",
                r.item.spec.key().c_str(), r.item.bucket->key().c_str(),
                tuner::statusName(r.status).str().c_str(), r.tile.c_str(), r.us, r.tflops,
                r.rooflineFraction * 100, r.seconds, r.compiled);
    if (r.status == SweepResult::Failed)
      std::printf("    %s\n", r.message.c_str());
    std::fflush(stdout);
  };
  std::vector<double> coldSeconds;
  {
    auto cache = openCache(dir.path());
    ASSERT_NE(cache, nullptr);
    auto outcome = tuner::runTuneSweep(*cache, items, options, progress);
    ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
    ASSERT_EQ(outcome->results.size(), items.size());
    for (const SweepResult &r : outcome->results) {
      EXPECT_EQ(r.status, SweepResult::Tuned) << r.item.label() << ": " << r.message;
      EXPECT_GT(r.us, 0);
      if (r.compiled > 0)
        coldSeconds.push_back(r.seconds);
    }
    EXPECT_EQ(outcome->counters.tunes, (int)items.size());
    EXPECT_GT(outcome->counters.compilations, 0);
    EXPECT_GT(outcome->counters.timings, (int)items.size());
    std::printf("  first run: %d compilations, %d checks, %d timings\n",
                outcome->counters.compilations, outcome->counters.checks,
                outcome->counters.timings);
  }
  // The budget: a cold tune (compiling its candidates) of one spec for one bucket.
  ASSERT_FALSE(coldSeconds.empty());
  std::sort(coldSeconds.begin(), coldSeconds.end());
  std::printf("  cold tunes: %zu, min %.1f s, median %.1f s, max %.1f s (budget 30 s)\n",
              coldSeconds.size(), coldSeconds.front(), coldSeconds[coldSeconds.size() / 2],
              coldSeconds.back());
  for (double s : coldSeconds)
    EXPECT_LE(s, 30.0) << "a cold tune went over the 30 s budget";

  // Every winner, loaded by a fresh cache and tuner as a new process would, passes
  // the bar on a shape the tune never checked.
  {
    auto cache = openCache(dir.path());
    TunerOptions cached;
    cached.mode = TuneMode::Cached;
    Tuner tuner(flashjit::testing::openTestDevice().get(), *cache, cached);
    Stream stream;
    std::printf("  winners on batch 2, heads 4/2, seqlen 1000 x 1500:\n");
    int loaded = 0;
    for (generator::Family family : families) {
      for (int d : {64, 128})
        for (bool causal : {false, true}) {
          auto tuned = tuner.loadTuned(specFor(d, causal, family));
          ASSERT_TRUE(bool(tuned)) << llvm::toString(tuned.takeError());
          ASSERT_EQ(tuned->size(), 2u);
          for (const tuner::Selection &s : *tuned) {
            expectCorrect(s, stream.stream);
            ++loaded;
          }
          // A bucket between the two tuned ones dispatches to the nearest, and says so.
          const tuner::Selection *near = Tuner::dispatch(*tuned, {2048, 2048, 32});
          ASSERT_NE(near, nullptr);
          EXPECT_EQ(near->bucket, (Bucket{1024, 1024, 32}));
          EXPECT_NE(Tuner::dispatchNote(*near, {2048, 2048, 32}).find("never tuned"),
                    std::string::npos);
        }
    }
    EXPECT_EQ(loaded, perFamily * (int)families.size());
    EXPECT_EQ(tuner.counters().compilations, 0);
    auto row = publishedRow(*cache, tuner, specFor(128, true), {8192, 8192, 32});
    ASSERT_TRUE(row.has_value());
    std::printf("  clocks of q8192 d128 causal: %s\n", row->row.clocksJson.c_str());
  }

  // Re-running the sweep: everything is cached; nothing is compiled or timed.
  {
    auto cache = openCache(dir.path());
    for (const SweepItem &item : items) {
      auto done = tuner::itemDone(*cache, item,
                                  flashjit::testing::openTestDevice()->properties().deviceKey());
      ASSERT_TRUE(bool(done));
      EXPECT_TRUE(*done) << item.label();
    }
    auto again = tuner::runTuneSweep(*cache, items, options, progress);
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    for (const SweepResult &r : again->results)
      EXPECT_EQ(r.status, SweepResult::Cached) << r.item.label();
    EXPECT_EQ(again->counters.compilations, 0);
    EXPECT_EQ(again->counters.timings, 0);
    EXPECT_EQ(again->counters.checks, 0);
    EXPECT_EQ(again->counters.tunes, 0);
    std::printf("  re-run: %d compilations, %d timings\n", again->counters.compilations,
                again->counters.timings);
  }
}

// --devices: one worker per GPU over one cache. Each worker has its own context, so
// nothing loaded in one may be launched in another (the reference kernels once were).
TEST(TunerGpu, SweepOverTwoDevicesSharesOneCache) {
  FLASHJIT_REQUIRE_GPU();
  auto count = runtime::deviceCount();
  ASSERT_TRUE(bool(count));
  if (*count < 2)
    GTEST_SKIP() << "needs 2 GPUs (this machine has " << *count << ")";
  TempCache dir;
  tuner::SweepConfig config;
  config.headDims = {64};
  config.dtypes = {DType::BF16};
  config.causal = {false, true};
  config.seqlens = {1024, 4096};
  config.batchHeads = {32};
  std::vector<SweepItem> items = tuner::tuneItems(config, target());
  tuner::TuneSweepOptions options;
  options.devices = {0, 1};
  auto cache = openCache(dir.path());
  auto outcome = tuner::runTuneSweep(*cache, items, options, {});
  ASSERT_TRUE(bool(outcome)) << llvm::toString(outcome.takeError());
  ASSERT_EQ(outcome->results.size(), items.size());
  std::set<int> devices;
  for (const SweepResult &r : outcome->results) {
    EXPECT_EQ(r.status, SweepResult::Tuned) << r.item.label() << " on GPU " << r.device << ": "
                                            << r.message;
    devices.insert(r.device);
    std::printf("  GPU %d: %-40s %-18s %-18s %8.1f us\n", r.device,
                r.item.spec.key().c_str(), r.item.bucket->key().c_str(), r.tile.c_str(), r.us);
  }
  EXPECT_EQ(devices, (std::set<int>{0, 1}));
  EXPECT_EQ(outcome->counters.tunes, (int)items.size());
}

// The planted candidate normalises O by 1.25 / sum instead of 1 / sum: it compiles
// and runs like the others, and is off by 25%.
void plant(const TileConfig &tile, std::string &source, const TileConfig &planted,
           int *planted_count) {
  if (!(tile == planted))
    return;
  const std::string from = "const float inv = sum > 0.f ? 1.f / sum : 0.f;";
  size_t at = source.find(from);
  ASSERT_NE(at, std::string::npos) << "the template changed: update the planted edit";
  source.replace(at, from.size(), "const float inv = sum > 0.f ? 1.25f / sum : 0.f;");
  ++*planted_count;
}

TEST(TunerGpu, PlantedWrongCandidateIsRejectedAndRecorded) {
  FLASHJIT_REQUIRE_GPU();
  KernelSpec spec = specFor(64, false);
  Bucket bucket{1024, 1024, 32};
  TileConfig planted{128, 64, 8, 2}, honest{64, 64, 4, 2};
  int plantedCount = 0;
  TunerOptions options;
  options.candidates = {planted, honest};
  options.mutateSource = [&](const TileConfig &t, std::string &source) {
    plant(t, source, planted, &plantedCount);
  };
  auto cache = openCache(std::nullopt);
  Tuner tuner(flashjit::testing::openTestDevice().get(), *cache, options);
  auto sel = tuner.select(spec, bucket);
  ASSERT_TRUE(bool(sel)) << llvm::toString(sel.takeError());
  EXPECT_EQ(plantedCount, 1);
  EXPECT_EQ(sel->tile, honest) << "the planted wrong kernel was selected";
  EXPECT_EQ(sel->report.rejectedWrong, 1);
  auto row = publishedRow(*cache, tuner, spec, bucket);
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->row.config, honest.key());
  const llvm::json::Object *wrong = candidate(*row, planted.key());
  ASSERT_NE(wrong, nullptr);
  EXPECT_EQ(wrong->getString("fate"), llvm::StringRef("wrong"));
  std::printf("  planted %s: %s\n", planted.key().c_str(),
              wrong->getString("reason").getValueOr("").str().c_str());
  const llvm::json::Object *kept = candidate(*row, honest.key());
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->getString("fate"), llvm::StringRef("timed"));

  // With only the planted candidate there is nothing to select, and no row.
  auto lonely = openCache(std::nullopt);
  TunerOptions only = options;
  only.candidates = {planted};
  Tuner alone(flashjit::testing::openTestDevice().get(), *lonely, only);
  auto none = alone.select(spec, bucket);
  ASSERT_FALSE(bool(none));
  ErrorReport report = takeErrorReport(none.takeError());
  EXPECT_EQ(report.code, ErrorCode::NotSupported);
  EXPECT_NE(report.message.find("wrong"), std::string::npos) << report.message;
  EXPECT_FALSE(publishedRow(*lonely, alone, spec, bucket).has_value());
}

// Two tunes of one (spec, bucket), each with its own tuner and cache (so each compiles
// and measures everything itself): the same winner, or winners within 2% of each other
// as one tune measured both (the same clocks). The first tune is asked for by two
// threads at once.
void expectAgreement(const KernelSpec &spec, const Bucket &bucket) {
  auto cacheA = openCache(std::nullopt);
  Tuner a(flashjit::testing::openTestDevice().get(), *cacheA, TunerOptions{});
  std::optional<tuner::Selection> first, second;
  std::string errors;
  std::thread t1([&] {
    auto s = a.select(spec, bucket);
    if (s)
      first = std::move(*s);
    else
      errors += llvm::toString(s.takeError());
  });
  std::thread t2([&] {
    auto s = a.select(spec, bucket);
    if (s)
      second = std::move(*s);
    else
      errors += llvm::toString(s.takeError());
  });
  t1.join();
  t2.join();
  ASSERT_TRUE(first && second) << errors;
  EXPECT_EQ(a.counters().tunes, 1) << "concurrent requests must share one tune";
  EXPECT_EQ(first->tile, second->tile);

  auto cacheB = openCache(std::nullopt);
  Tuner b(flashjit::testing::openTestDevice().get(), *cacheB, TunerOptions{});
  auto other = b.select(spec, bucket);
  ASSERT_TRUE(bool(other)) << llvm::toString(other.takeError());
  std::string winnerA = first->tile.key(), winnerB = other->tile.key();
  auto rowA = publishedRow(*cacheA, a, spec, bucket);
  auto rowB = publishedRow(*cacheB, b, spec, bucket);
  ASSERT_TRUE(rowA && rowB);
  // What each tune ranked a tile by (its median, or the mean of two for a re-timed one).
  auto time = [](const PublishedRow &r, const std::string &tile) {
    const llvm::json::Object *c = candidate(r, tile);
    // A tile only screened in this tune (not a finalist) has its screening time.
    return !c ? 0.0 : c->getNumber("ranked_us").getValueOr(
                          c->getNumber("screen_median_us").getValueOr(0));
  };
  double aInA = time(*rowA, winnerA), bInA = time(*rowA, winnerB);
  double aInB = time(*rowB, winnerA), bInB = time(*rowB, winnerB);
  std::printf("  %s %s: tune A picked %s, tune B picked %s; A timed them %.1f / %.1f us, "
              "B timed them %.1f / %.1f us\n",
              spec.key().c_str(), bucket.key().c_str(), winnerA.c_str(), winnerB.c_str(), aInA,
              bInA, aInB, bInB);
  if (winnerA == winnerB)
    return;
  // Different winners: within 2% of each other as one tune measured both (same clocks).
  auto within = [](double x, double y) {
    return x > 0 && y > 0 && std::fabs(x - y) <= 0.02 * std::min(x, y);
  };
  EXPECT_TRUE(within(aInA, bInA) || within(aInB, bInB))
      << "the two tunes' winners differ by more than 2%";
}

TEST(TunerGpu, TwoIndependentTunesAgree) {
  FLASHJIT_REQUIRE_GPU();
  expectAgreement(specFor(128, false), {4096, 4096, 32});
  expectAgreement(specFor(64, true), {8192, 8192, 32});
}

// Two passes: every candidate screened briefly, the few within 10% of the fastest
// screened time (at most 4) timed in full, the winner among those. Checked on the
// row of a whole-space tune: the fates agree with the screened times, and a finalist's
// screened and full medians tell the same story.
TEST(TunerGpu, ScreeningTimesOnlyTheNearFastestInFull) {
  FLASHJIT_REQUIRE_GPU();
  KernelSpec spec = specFor(64, false);
  Bucket bucket{2048, 2048, 32};
  auto cache = openCache(std::nullopt);
  Tuner tuner(flashjit::testing::openTestDevice().get(), *cache, TunerOptions{});
  auto sel = tuner.select(spec, bucket);
  ASSERT_TRUE(bool(sel)) << llvm::toString(sel.takeError());
  const tuner::TuneReport &report = sel->report;
  EXPECT_EQ(report.skippedBudget, 0) << "a 30 s budget screens a fwd_mma space whole";
  EXPECT_GE(report.timed, 1);
  EXPECT_LE(report.timed, 4);
  EXPECT_GE(report.screened, report.timed);
  auto row = publishedRow(*cache, tuner, spec, bucket);
  ASSERT_TRUE(row.has_value());
  const llvm::json::Array *list = row->candidates.getAsObject()->getArray("candidates");
  ASSERT_NE(list, nullptr);
  double bestScreen = INFINITY;
  for (const llvm::json::Value &v : *list)
    if (auto t = v.getAsObject()->getNumber("screen_median_us"))
      bestScreen = std::min(bestScreen, *t);
  ASSERT_TRUE(std::isfinite(bestScreen));
  int finalists = 0, screenedOnly = 0, fasterLeftOut = 0;
  double worstFinalistScreen = 0;
  for (const llvm::json::Value &v : *list) {
    const llvm::json::Object *c = v.getAsObject();
    llvm::StringRef fate = c->getString("fate").getValueOr("");
    if (fate == "timed") {
      ++finalists;
      double screen = c->getNumber("screen_median_us").getValueOr(0);
      double full = c->getNumber("median_us").getValueOr(0);
      ASSERT_GT(screen, 0);
      ASSERT_GT(full, 0);
      worstFinalistScreen = std::max(worstFinalistScreen, screen);
      EXPECT_LE(screen, 1.10 * bestScreen + 1e-3) << c->getString("tile")->str();
      EXPECT_NEAR(screen / full, 1.0, 0.2)
          << c->getString("tile")->str() << ": screened " << screen << " us, full " << full;
      std::printf("  finalist %-20s screened %8.1f us, full %8.1f us%s\n",
                  c->getString("tile")->str().c_str(), screen, full,
                  c->getBoolean("winner").getValueOr(false) ? "  (winner)" : "");
    } else if (fate == "screened") {
      ++screenedOnly;
      EXPECT_FALSE(c->getNumber("median_us").hasValue());
      if (c->getNumber("screen_median_us").getValueOr(0) <= 1.10 * bestScreen)
        ++fasterLeftOut;
    }
  }
  EXPECT_EQ(finalists, report.timed);
  EXPECT_EQ(finalists + screenedOnly, report.screened);
  // A screened tile within 10% of the fastest was left out only because 4 went on.
  if (fasterLeftOut > 0) {
    EXPECT_EQ(finalists, 4);
  }
  const llvm::json::Object *winner = candidate(*row, row->row.config);
  ASSERT_NE(winner, nullptr);
  EXPECT_EQ(winner->getString("fate"), llvm::StringRef("timed")) << "the winner is a finalist";
  std::printf("  %d screened (best %.1f us), %d timed in full, tune %.1f s (timing %.1f s)\n",
              report.screened, bestScreen, report.timed, report.totalSeconds,
              report.timeSeconds);
}

// A budget spent before timing begins still screens one candidate and times it in full
// (the budget alone: no floor from the compiling).
TEST(TunerGpu, SpentBudgetStillTimesOneCandidate) {
  FLASHJIT_REQUIRE_GPU();
  KernelSpec spec = specFor(64, true);
  TunerOptions options;
  options.candidates = {{64, 64, 4, 2}, {128, 64, 8, 2}, {128, 32, 4, 2}};
  options.budgetSeconds = 1e-6;
  options.buildShare = 0;
  auto cache = openCache(std::nullopt);
  Tuner tuner(flashjit::testing::openTestDevice().get(), *cache, options);
  auto sel = tuner.select(spec, {1024, 1024, 16});
  ASSERT_TRUE(bool(sel)) << llvm::toString(sel.takeError());
  EXPECT_EQ(sel->report.screened, 1);
  EXPECT_EQ(sel->report.timed, 1);
  EXPECT_EQ(sel->report.skippedBudget, 2);
  EXPECT_GT(sel->tunedUs, 0);
  std::printf("  %s\n", sel->note.c_str());
}

// Compiling that overran the budget earns the timing a share of its own time: a cold tune
// screens the binaries it paid for instead of keeping the first. (With a share this large
// every candidate fits; the default, 0.25, is what TimingAllowance's CPU tests pin.)
TEST(TunerGpu, CompilingPastTheBudgetStillScreensWhatItBuilt) {
  FLASHJIT_REQUIRE_GPU();
  KernelSpec spec = specFor(64, true);
  TunerOptions options;
  options.candidates = {{64, 64, 4, 2}, {128, 64, 8, 2}, {128, 32, 4, 2}, {128, 64, 4, 3}};
  options.budgetSeconds = 1e-6;
  options.buildShare = 1000;
  auto cache = openCache(std::nullopt);
  Tuner tuner(flashjit::testing::openTestDevice().get(), *cache, options);
  auto sel = tuner.select(spec, {1024, 1024, 16});
  ASSERT_TRUE(bool(sel)) << llvm::toString(sel.takeError());
  ASSERT_GT(sel->report.compiled, 0) << "a fresh cache compiles";
  EXPECT_EQ(sel->report.skippedBudget, 0);
  EXPECT_EQ(sel->report.screened, 4);
  EXPECT_GE(sel->report.timed, 1);
  EXPECT_GT(sel->tunedUs, 0);
  std::printf("  %s\n", sel->note.c_str());
}

// A mask_mod's candidates are timed as their callers run them fast, under their block
// mask (ForwardTimingProblem): a mask that keeps each query's own 64-row document drops
// all but ~1 of a query block's key tiles, so the masked kernel's timed launch takes a
// fraction of the same tile's without a mask. Timed without its block mask it would take
// as long or longer (every tile computed, mask_mod called on every score).
TEST(TunerGpu, AMaskModIsTimedUnderItsBlockMask) {
  FLASHJIT_REQUIRE_GPU();
  const generator::Family family =
      target() == "sm_90a" ? generator::Family::FwdWgmma : generator::Family::FwdMma;
  KernelSpec plain = specFor(64, false, family);
  KernelSpec masked = plain;
  masked.features.maskMod = "return (q_idx >> 6) == (kv_idx >> 6);";
  const TileConfig tile = generator::defaultTile(masked);
  tuner::ForwardShape shape = flashjit::testing::shapeOf(4, 8, 8, 4096, 4096);
  shape.headDim = shape.headDimV = 64;
  const int l2Bytes = flashjit::testing::openTestDevice()->properties().l2Bytes;
  double us[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const KernelSpec &spec = i == 0 ? plain : masked;
    std::string error;
    const tuner::LoadedKernel *kernel =
        flashjit::testing::KernelPool::get().find(spec, tile, error);
    ASSERT_NE(kernel, nullptr) << spec.key() << " " << tile.key() << ": " << error;
    auto problem = tuner::operationFor(family).makeTimingProblem(spec, shape, l2Bytes);
    ASSERT_TRUE(bool(problem)) << llvm::toString(problem.takeError());
    auto m = (*problem)->time(*kernel, nullptr);
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    us[i] = m->medianUs;
  }
  std::printf("  %s: %.1f us without a mask, %.1f us with the 64-row document mask\n",
              tile.key().c_str(), us[0], us[1]);
  EXPECT_LT(us[1], 0.25 * us[0]) << "the mask_mod kernel was not timed under its block mask";
}

// Tuning args are the caller's, valid for one fj_kernel_get and not part of the spec's
// key: a later tune of the same spec (another bucket), whose args hold other contents,
// checks its candidates against a reference made with those. (The first tune's checkers
// were once kept by spec key: the second tune's every candidate failed against a
// reference of the old documents, or read freed memory.)
TEST(TunerGpu, EachTuneChecksWithItsOwnTuningArgs) {
  FLASHJIT_REQUIRE_GPU();
  const generator::Family family =
      target() == "sm_90a" ? generator::Family::FwdWgmma : generator::Family::FwdMma;
  KernelSpec spec = specFor(64, false, family);
  spec.features.maskMod = "const int *doc = (const int *)args.tensor[0];\n"
                          "return doc[q_idx] == doc[kv_idx];";
  constexpr int kPositions = 4096;
  auto docs = runtime::DeviceBuffer::allocate(kPositions * sizeof(int));
  ASSERT_TRUE(bool(docs)) << llvm::toString(docs.takeError());
  auto documentsOf = [&](int length) {
    std::vector<int> ids(kPositions);
    for (int i = 0; i < kPositions; ++i)
      ids[i] = i / length;
    return docs->upload(ids.data(), ids.size() * sizeof(int));
  };
  spec.features.hasTuningArgs = true;
  spec.features.tuningArgs.tensor[0] = reinterpret_cast<const void *>(docs->ptr());
  TunerOptions options;
  options.candidates = {generator::defaultTile(spec)};
  options.budgetSeconds = 1;
  auto cache = openCache(std::nullopt);
  Tuner tuner(flashjit::testing::openTestDevice().get(), *cache, options);
  if (llvm::Error err = documentsOf(100))
    FAIL() << llvm::toString(std::move(err));
  auto first = tuner.select(spec, {1024, 1024, 8});
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  if (llvm::Error err = documentsOf(37))  // the same pointer, other documents
    FAIL() << llvm::toString(std::move(err));
  auto second = tuner.select(spec, {2048, 2048, 8});
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(second->report.timed, 1);
}

// Decode tunes its split count with the tile (issue 27): a GQA step's bucket (4 query
// rows packed per KV head, 128 (sequence, KV head) pairs, 4096 keys) times each tile at
// the heuristic's split count and at fixed ones; the winner's config carries its count,
// a later handle loads it from the row, and the kernel runs the calls that request no
// count with it, correctly.
TEST(TunerGpu, DecodeTunesTheSplitCountWithTheTile) {
  FLASHJIT_REQUIRE_GPU();
  KernelSpec spec = specFor(128, false, generator::Family::DecMma);
  const Bucket bucket{4, 4096, 128};
  TunerOptions options;
  options.candidates = {{16, 32, 2, 2}, {16, 64, 4, 2}, {16, 128, 8, 2}};
  TempCache dir;
  auto cache = openCache(dir.path());
  Tuner tuner(flashjit::testing::openTestDevice().get(), *cache, options);
  auto sel = tuner.select(spec, bucket);
  ASSERT_TRUE(bool(sel)) << llvm::toString(sel.takeError());
  EXPECT_GT(sel->report.splitVariants, 0);
  EXPECT_EQ(sel->report.skippedBudget, 0);
  auto row = publishedRow(*cache, tuner, spec, bucket);
  ASSERT_TRUE(row.has_value());
  auto config = tuner::TunedConfig::parse(row->row.config);
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  EXPECT_EQ(config->tile, sel->tile);
  EXPECT_EQ(config->splits, sel->splits);
  // Every tile was screened at fixed counts too; the winner's entry is the one marked.
  const llvm::json::Array *list = row->candidates.getAsObject()->getArray("candidates");
  ASSERT_NE(list, nullptr);
  std::set<std::string> tilesWithSplits;
  int winners = 0;
  for (const llvm::json::Value &v : *list) {
    const llvm::json::Object *c = v.getAsObject();
    const int splits = (int)c->getInteger("splits").getValueOr(0);
    if (splits > 0) {
      tilesWithSplits.insert(c->getString("tile")->str());
      EXPECT_TRUE(c->getNumber("screen_median_us").hasValue()) << c->getString("tile")->str();
    }
    if (c->getBoolean("winner").getValueOr(false)) {
      ++winners;
      EXPECT_EQ(c->getString("tile")->str(), config->tile.key());
      EXPECT_EQ(splits, config->splits);
    }
    std::printf("    %-18s splits %3d  %-9s screened %7.2f us%s\n",
                c->getString("tile")->str().c_str(), splits,
                c->getString("fate")->str().c_str(),
                c->getNumber("screen_median_us").getValueOr(0),
                c->getBoolean("winner").getValueOr(false) ? "  (winner)" : "");
  }
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(tilesWithSplits.size(), options.candidates.size());
  std::printf("  %s: %s\n", row->row.config.c_str(), sel->note.c_str());

  // A new tuner finds the row and launches with its count.
  Tuner again(flashjit::testing::openTestDevice().get(), *cache, options);
  auto hit = again.select(spec, bucket);
  ASSERT_TRUE(bool(hit)) << llvm::toString(hit.takeError());
  EXPECT_EQ(again.counters().timings, 0);
  EXPECT_EQ(hit->splits, config->splits);
  const tuner::DecodeKernel *kernel = tuner::DecodeKernel::of(*hit->kernel);
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->tunedSplits(), config->splits);

  // Correct, and at the tuned count, on a call of the bucket's size (128 (sequence, KV
  // head) pairs of 4 packed rows; odd lengths, paged); a call of a quarter the pairs
  // keeps the tuned CTAs in flight with 4x the splits (fewer when its keys run out).
  Stream stream;
  for (int batch : {32, 8}) {
    tuner::ForwardShape shape;
    shape.batch = batch, shape.headsQ = 16, shape.headsKV = 4, shape.seqQ = 1;
    shape.seqlensK.assign(batch, 4001);
    shape.seqlensK[1] = 2050, shape.seqlensK[batch - 1] = 3333;
    shape.seqK = 4001;
    shape.headDim = shape.headDimV = 128;
    shape.pageSize = 16;
    auto checker = tuner::DecodeChecker::create(spec, shape, 5, stream.stream);
    ASSERT_TRUE(bool(checker)) << llvm::toString(checker.takeError());
    auto report = (*checker)->check(*hit->kernel, stream.stream);
    ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
    EXPECT_TRUE(report->passed) << report->summary();
    // 4001 keys: a power of two up to the 2-tile minimum splits them evenly.
    const int tiles = (4001 + kernel->blockN() - 1) / kernel->blockN();
    const int expected =
        config->splits == 0 ? 0 : std::min(config->splits * (32 / batch), (tiles + 1) / 2);
    if (expected > 1) {
      const int perSplit = (tiles + expected - 1) / expected;
      const int planned = (tiles + perSplit - 1) / perSplit;
      EXPECT_EQ(report->output, llvm::formatv("o ({0} splits)", planned).str()) << batch;
    }
    std::printf("  %s, batch %d, at its tuned count: %s, %s\n", hit->binaryKeyText.c_str(),
                batch, report->output.c_str(), report->summary().c_str());
  }
}

TEST(TunerGpu, HeuristicCompilesOneTileAndCachedNeverCompiles) {
  FLASHJIT_REQUIRE_GPU();
  KernelSpec spec = specFor(128, true);
  Bucket bucket{2048, 2048, 16};
  auto cache = openCache(std::nullopt);

  TunerOptions cachedOptions;
  cachedOptions.mode = TuneMode::Cached;
  Tuner cached(flashjit::testing::openTestDevice().get(), *cache, cachedOptions);
  auto miss = cached.select(spec, bucket);
  ASSERT_FALSE(bool(miss));
  ErrorReport why = takeErrorReport(miss.takeError());
  EXPECT_EQ(why.code, ErrorCode::NotFound);
  std::printf("  cached-mode miss: %s\n", why.message.c_str());

  TunerOptions heuristicOptions;
  heuristicOptions.mode = TuneMode::Heuristic;
  Tuner heuristic(flashjit::testing::openTestDevice().get(), *cache, heuristicOptions);
  auto sel = heuristic.select(spec, bucket);
  ASSERT_TRUE(bool(sel)) << llvm::toString(sel.takeError());
  EXPECT_EQ(sel->origin, tuner::Origin::CompiledNow);
  EXPECT_EQ(sel->tunedUs, 0);
  EXPECT_EQ(heuristic.counters().timings, 0);
  EXPECT_EQ(heuristic.counters().compilations, 1);
  std::printf("  heuristic: %s (%s)\n", sel->tile.key().c_str(), sel->note.c_str());
  Stream stream;
  expectCorrect(*sel, stream.stream);
  EXPECT_FALSE(publishedRow(*cache, heuristic, spec, bucket).has_value())
      << "heuristic mode writes no tuning row";
  // Its binary is cached: heuristic again compiles nothing.
  Tuner again(flashjit::testing::openTestDevice().get(), *cache, heuristicOptions);
  auto hit = again.select(spec, bucket);
  ASSERT_TRUE(bool(hit)) << llvm::toString(hit.takeError());
  EXPECT_EQ(again.counters().compilations, 0);
  EXPECT_EQ(hit->origin, tuner::Origin::UserCache);
}

} // namespace
