// Seeded mutations of a cache DB file (bit flips, truncation to 0/100/512/any bytes,
// random bytes, a zeroed header, a directory in its place, a page copied over another),
// each opened as the user DB and as a shipped DB. Run it under ASan/UBSan
// (.ci/cache_checks.sh). Passes when nothing crashes, every call returns a status,
// every row handed out is exactly a row that was written, a user DB that could not be
// used was moved aside and rebuilt (and then works), a shipped one was ignored, and no
// file appeared next to a shipped DB.
//   stress_cache_corruption --mutations 1000 --seed 1
#include "tests/stress/stress_common.h"

#include "cache/ship.h"

#include "llvm/Support/CommandLine.h"

#include <map>
#include <random>

using namespace flashjit::cache;
using namespace flashjit::cache::stress;
namespace cl = llvm::cl;

static cl::opt<int> mutations("mutations", cl::desc("mutated files to try"), cl::init(1000));
static cl::opt<unsigned> seed("seed", cl::desc("random seed"), cl::init(1));
static cl::opt<bool> verbose("verbose", cl::desc("print every mutation"));
static cl::opt<std::string> saveFailing("save-failing",
                                        cl::desc("copy each file that failed into this directory"));

namespace {

const int kRows = 12;

enum Kind {
  FlipBits,
  FlipHeaderBits,
  TruncateTo0,
  TruncateTo100,
  TruncateTo512,
  TruncateAnywhere,
  RandomRange,
  ZeroHeader,
  Directory,
  AllRandom,
  CopyPage,
  kKinds
};
const char *kKindNames[] = {"flip bits",       "flip header bits", "truncate to 0",
                            "truncate to 100", "truncate to 512",  "truncate anywhere",
                            "random bytes",    "zeroed header",    "directory",
                            "all random",      "page copied"};

// Mutated contents of `original` (nullopt: put a directory there instead).
std::optional<std::string> mutate(const std::string &original, Kind kind, std::mt19937_64 &rng) {
  std::string data = original;
  auto at = [&](size_t size) { return std::uniform_int_distribution<size_t>(0, size - 1)(rng); };
  switch (kind) {
  case FlipBits:
  case FlipHeaderBits: {
    size_t range = kind == FlipHeaderBits ? std::min<size_t>(data.size(), 4096) : data.size();
    for (int i = 0, n = 1 + int(rng() % 8); i < n; ++i)
      data[at(range)] ^= char(1 << (rng() % 8));
    return data;
  }
  case TruncateTo0:
    return std::string();
  case TruncateTo100:
    return data.substr(0, 100);
  case TruncateTo512:
    return data.substr(0, 512);
  case TruncateAnywhere:
    return data.substr(0, at(data.size()));
  case RandomRange: {
    size_t start = at(data.size()), length = 1 + rng() % 4096;
    for (size_t i = start; i < std::min(data.size(), start + length); ++i)
      data[i] = char(rng());
    return data;
  }
  case ZeroHeader:
    std::fill(data.begin(), data.begin() + 100, '\0');
    return data;
  case Directory:
    return std::nullopt;
  case AllRandom:
    return bytes(rng(), data.size());
  case CopyPage: {
    size_t pages = data.size() / 4096;
    size_t from = at(pages), to = at(pages);
    std::copy(data.begin() + from * 4096, data.begin() + (from + 1) * 4096,
              data.begin() + to * 4096);
    return data;
  }
  case kKinds:
    break;
  }
  return data;
}

struct Totals {
  std::map<std::string, int> outcomes;
  int hits = 0;
};

// Every call must return a status; every row handed out must be one that was written.
void lookUpEverything(Cache &cache, Verdict &verdict, Totals &totals, const std::string &label) {
  for (int i = 0; i < kRows; ++i) {
    Published p = rowFor(7, 0, i);
    auto tuned = cache.findTuned(p.tuning.key);
    if (!tuned) {
      verdict.fail(label + ": findTuned: " + llvm::toString(tuned.takeError()));
      continue;
    }
    if (tuned->has_value()) {
      ++totals.hits;
      verdict.expect(testing::sameTuning((*tuned)->tuning.row, p.tuning), label + ": wrong row");
      if ((*tuned)->binary)
        verdict.expect(testing::sameBinary((*tuned)->binary->row, p.binary),
                       label + ": wrong binary");
    }
    auto binary = cache.findBinary(p.binary.key);
    if (!binary)
      verdict.fail(label + ": findBinary: " + llvm::toString(binary.takeError()));
    else if (binary->has_value())
      verdict.expect(testing::sameBinary((*binary)->row, p.binary), label + ": wrong binary");
  }
  auto family = cache.tuningsFor(rowFor(7, 0, 0).tuning.key);
  if (!family)
    verdict.fail(label + ": tuningsFor: " + llvm::toString(family.takeError()));
  auto all = cache.allTunings();
  if (!all)
    verdict.fail(label + ": allTunings: " + llvm::toString(all.takeError()));
  else
    for (const auto &found : *all)
      verdict.expect(found.row.key.spec == "stress.p7", label + ": a row nobody wrote");
  (void)cache.explainMiss(rowFor(8, 0, 0).tuning.key);
  (void)cache.explainBinaryMiss("x", "sm_90a", "13.0");
}

bool movedAside(const testing::TempDir &dir) {
  for (const std::string &entry : dir.entries())
    if (llvm::StringRef(entry).contains(".corrupt-"))
      return true;
  return false;
}

void place(const std::string &path, const std::optional<std::string> &contents) {
  if (contents)
    testing::writeFile(path, *contents);
  else
    llvm::sys::fs::create_directory(path);
}

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "cache corruption stress test\n");
  Verdict verdict;
  Totals totals;

  // Pristine files: a user DB (WAL, checkpointed on close) and its shipped export.
  testing::TempDir pristine;
  std::string userFile = pristine.file("user.sqlite"), shippedFile = pristine.file("ship.sqlite");
  {
    std::unique_ptr<Cache> cache = openUser(userFile);
    if (!cache)
      return 2;
    for (int i = 0; i < kRows; ++i) {
      Published p = rowFor(7, 0, i); // blobs of up to 16 KB: some span several pages
      if (llvm::Error error = cache->publish(&p.binary, &p.tuning)) {
        llvm::errs() << llvm::toString(std::move(error)) << "\n";
        return 3;
      }
    }
    llvm::Expected<ShipReport> exported = exportDb(*cache, {"STRESS.sm90.132sm"}, shippedFile);
    if (!exported) {
      llvm::errs() << llvm::toString(exported.takeError()) << "\n";
      return 4;
    }
  }
  const std::string originals[] = {testing::readFile(userFile), testing::readFile(shippedFile)};

  std::mt19937_64 rng(seed);
  for (int m = 0; m < mutations; ++m) {
    Kind kind = Kind(m % kKinds);
    const std::string &original = originals[(m / kKinds) % 2];
    std::optional<std::string> mutated = mutate(original, kind, rng);
    std::string what = llvm::formatv("mutation {0} ({1} of the {2} file)", m, kKindNames[kind],
                                     (m / kKinds) % 2 ? "shipped" : "user");
    int failuresBefore = verdict.failures();

    { // As the user DB: usable afterwards, moved aside if it had to be.
      testing::TempDir dir;
      std::string path = dir.file("cache.sqlite");
      place(path, mutated);
      std::atomic<int> warnings{0};
      CacheOptions options;
      options.userPath = path;
      options.warn = [&](llvm::StringRef line) {
        ++warnings;
        if (verbose)
          llvm::errs() << "  " << line << "\n";
      };
      auto cache = Cache::open(options);
      if (!cache) {
        verdict.fail(what + " as user: open: " + llvm::toString(cache.takeError()));
        continue;
      }
      lookUpEverything(**cache, verdict, totals, what + " as user");
      // Only a header that claims a newer schema makes the cache leave the user DB alone:
      // damage that reads as a newer version is indistinguishable from one.
      bool newer = false;
      for (const DatabaseInfo &db : (*cache)->databases())
        newer |= llvm::StringRef(db.note).contains("newer than this build");
      verdict.expect((*cache)->persistent() || newer, what + ": the user DB was given up");
      Published fresh = rowFor(9, 9, m);
      if (llvm::Error error = (*cache)->publish(&fresh.binary, &fresh.tuning))
        verdict.fail(what + " as user: publish: " + llvm::toString(std::move(error)));
      else
        verdict.expect(check(**cache, fresh).empty(), what + " as user: " + check(**cache, fresh));
      cache->reset();
      bool aside = movedAside(dir);
      bool mustMove =
          kind == ZeroHeader || kind == Directory || kind == AllRandom || kind == TruncateTo100;
      verdict.expect(aside || !mustMove, what + ": an unusable user DB was not moved aside");
      std::string health = integrity(path);
      std::string outcome = aside            ? "user: moved aside and rebuilt"
                            : health == "ok" ? "user: used as is"
                                             : "user: damage in pages no call read";
      if (aside)
        verdict.expect(health == "ok", what + ": rebuilt DB: " + health);
      ++totals.outcomes[outcome];
      if (verbose)
        llvm::errs() << what << ": " << outcome << ", " << warnings << " warnings\n";
    }

    { // As a shipped DB: ignored or read, never written, nothing created beside it.
      testing::TempDir dir;
      std::string path = dir.file("ship.sqlite");
      place(path, mutated);
      std::set<std::string> before = dir.entries();
      CacheOptions options;
      options.userPath = "";
      options.shippedPaths = {path};
      options.warn = [](llvm::StringRef) {};
      auto cache = Cache::open(options);
      if (!cache) {
        verdict.fail(what + " as shipped: open: " + llvm::toString(cache.takeError()));
        continue;
      }
      lookUpEverything(**cache, verdict, totals, what + " as shipped");
      bool usable = (*cache)->databases()[1].usable;
      cache->reset();
      verdict.expect(dir.entries() == before, what + " as shipped: files appeared beside it");
      if (mutated)
        verdict.expect(testing::readFile(path) == *mutated, what + " as shipped: file changed");
      ++totals.outcomes[usable ? "shipped: read (bad rows are misses)" : "shipped: ignored"];
    }
    if (verdict.failures() > failuresBefore && !saveFailing.empty() && mutated)
      testing::writeFile(llvm::formatv("{0}/mutation-{1}.sqlite", saveFailing, m), *mutated);
  }
  for (const auto &[outcome, count] : totals.outcomes)
    llvm::outs() << llvm::formatv("  {0,-40} {1}\n", outcome, count);
  llvm::outs() << llvm::formatv("{0} mutations x 2 roles, {1} exact hits\n", int(mutations),
                                totals.hits);
  return verdict.exitCode("stress_cache_corruption");
}
