// fwd_mma against the reference on the GPU (DESIGN.md's correctness bar): every head
// dim of the grid x fp16/bf16 x causal, over sequence pairs that are not multiples of
// the tiles, MHA/GQA/MQA, plus variable-length batches and strided layouts.
#include "gpu_skip.h"

#include "generator/emit.h"
#include "tuner/checker.h"
#include "tuner/loaded_kernel.h"

#include "llvm/Support/ThreadPool.h"

#include <map>
#include <mutex>
#include <tuple>

using namespace flashjit;
using generator::DType;
using generator::KernelSpec;
using generator::TileConfig;

namespace {

const int kHeadDims[] = {32, 40, 64, 72, 80, 96, 128, 160, 192, 224, 256};
const std::pair<int, int> kSeqPairs[] = {{1, 1},     {1, 147},     {113, 203}, {128, 128},
                                         {1023, 1024}, {2048, 2048}, {4096, 1}};
struct Heads {
  int q, kv;
  const char *name;
};
const Heads kHeads[] = {{4, 4, "MHA"}, {4, 2, "GQA"}, {4, 1, "MQA"}};

KernelSpec specFor(int d, int dv, DType dtype, bool causal) {
  KernelSpec spec;
  spec.dtype = dtype;
  spec.headDim = d;
  spec.headDimV = dv;
  spec.causal = causal;
  spec.target = flashjit::testing::openTestDevice()->properties().target();
  return spec;
}

// Kernels compiled once per binary, in parallel, keyed by spec + tile.
class KernelPool {
public:
  static KernelPool &get() {
    static KernelPool pool;
    return pool;
  }
  // Compiles every (spec, tile) not yet compiled, on all cores.
  void prepare(const std::vector<std::pair<KernelSpec, TileConfig>> &wanted) {
    llvm::ThreadPool threads;
    std::mutex mutex;
    std::map<std::string, runtime::CompiledBinary> binaries;
    std::map<std::string, generator::EmittedKernel> emitted;
    for (const auto &[spec, tile] : wanted) {
      std::string key = spec.key() + "/" + tile.key();
      if (kernels_.count(key) || errors_.count(key))
        continue;
      threads.async([&, spec = spec, tile = tile, key] {
        auto kernel = generator::emitForward(spec, tile);
        if (!kernel) {
          std::lock_guard<std::mutex> lock(mutex);
          errors_[key] = llvm::toString(kernel.takeError());
          return;
        }
        auto binary = tuner::compileEmitted(*kernel, spec.target);
        std::lock_guard<std::mutex> lock(mutex);
        if (!binary) {
          errors_[key] = llvm::toString(binary.takeError());
          return;
        }
        binaries[key] = std::move(*binary);
        emitted[key] = std::move(*kernel);
      });
    }
    threads.wait();
    for (auto &[key, binary] : binaries) {
      const generator::EmittedKernel &k = emitted[key];
      auto loaded = tuner::ForwardKernel::load(binary.cubin, k.entryName,
                                               {k.threads, k.sharedBytes, k.blockM});
      if (!loaded)
        errors_[key] = llvm::toString(loaded.takeError());
      else
        kernels_[key] = std::move(*loaded);
    }
  }
  const tuner::ForwardKernel *find(const KernelSpec &spec, const TileConfig &tile,
                                   std::string &error) {
    prepare({{spec, tile}});
    std::string key = spec.key() + "/" + tile.key();
    if (errors_.count(key))
      error = errors_[key];
    auto it = kernels_.find(key);
    return it == kernels_.end() ? nullptr : it->second.get();
  }

private:
  std::map<std::string, std::unique_ptr<tuner::ForwardKernel>> kernels_;
  std::map<std::string, std::string> errors_;
};

// Checks one kernel on one shape; returns "" or the failure.
std::string checkShape(const KernelSpec &spec, const TileConfig &tile,
                       const tuner::ForwardShape &shape, uint64_t seed) {
  std::string error;
  const tuner::ForwardKernel *kernel = KernelPool::get().find(spec, tile, error);
  if (!kernel)
    return "compile/load failed: " + error;
  auto checker = tuner::ForwardChecker::create(spec, shape, seed, nullptr);
  if (!checker)
    return "reference failed: " + llvm::toString(checker.takeError());
  auto report = (*checker)->check(*kernel, nullptr);
  if (!report)
    return "run failed: " + llvm::toString(report.takeError());
  return report->passed ? "" : report->summary();
}

class FwdMmaGrid : public ::testing::TestWithParam<std::tuple<int, DType, bool>> {
protected:
  static void SetUpTestSuite() {
    if (!flashjit::testing::openTestDevice())
      return;
    std::vector<std::pair<KernelSpec, TileConfig>> all;
    for (int d : kHeadDims)
      for (DType dtype : {DType::FP16, DType::BF16})
        for (bool causal : {false, true}) {
          KernelSpec spec = specFor(d, d, dtype, causal);
          all.emplace_back(spec, generator::defaultTile(spec));
        }
    KernelPool::get().prepare(all);
  }
};

TEST_P(FwdMmaGrid, MatchesReference) {
  FLASHJIT_REQUIRE_GPU();
  auto [d, dtype, causal] = GetParam();
  KernelSpec spec = specFor(d, d, dtype, causal);
  TileConfig tile = generator::defaultTile(spec);
  int checked = 0;
  for (auto [sq, sk] : kSeqPairs)
    for (const Heads &heads : kHeads) {
      tuner::ForwardShape shape;
      shape.batch = 2;
      shape.headsQ = heads.q;
      shape.headsKV = heads.kv;
      shape.seqQ = sq;
      shape.seqK = sk;
      std::string failure = checkShape(spec, tile, shape, 1000 + sq * 7 + sk);
      EXPECT_EQ(failure, "") << spec.key() << " " << tile.key() << " seq (" << sq << ", "
                             << sk << ") " << heads.name;
      ++checked;
    }
  EXPECT_EQ(checked, 21);
}

INSTANTIATE_TEST_SUITE_P(
    AllHeadDims, FwdMmaGrid,
    ::testing::Combine(::testing::ValuesIn(kHeadDims),
                       ::testing::Values(DType::FP16, DType::BF16), ::testing::Bool()),
    [](const auto &info) {
      return "d" + std::to_string(std::get<0>(info.param)) +
             (std::get<1>(info.param) == DType::BF16 ? "_bf16" : "_fp16") +
             (std::get<2>(info.param) ? "_causal" : "_full");
    });

TEST(FwdMma, VariableLengthBatch) {
  FLASHJIT_REQUIRE_GPU();
  for (bool causal : {false, true})
    for (int d : {64, 72, 128}) {
      KernelSpec spec = specFor(d, d, DType::BF16, causal);
      tuner::ForwardShape shape;
      shape.batch = 4;
      shape.headsQ = 6;
      shape.headsKV = 2;
      shape.seqlensQ = {1, 300, 77, 1024};
      shape.seqlensK = {17, 300, 513, 999};
      shape.seqQ = 1024;
      shape.seqK = 999;
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 7), "")
          << spec.key() << " varlen";
    }
}

TEST(FwdMma, StridedLayouts) {
  FLASHJIT_REQUIRE_GPU();
  for (tuner::Layout layout : {tuner::Layout::BSHD, tuner::Layout::BHSD})
    for (int padding : {0, 24})
      for (bool causal : {false, true}) {
        KernelSpec spec = specFor(96, 96, DType::FP16, causal);
        tuner::ForwardShape shape;
        shape.batch = 3;
        shape.headsQ = 8;
        shape.headsKV = 2;
        shape.seqQ = 333;
        shape.seqK = 517;
        shape.layout = layout;
        shape.rowPadding = padding;
        EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 11), "")
            << spec.key() << (layout == tuner::Layout::BSHD ? " BSHD" : " BHSD")
            << " padding " << padding;
      }
}

TEST(FwdMma, HeadDimVDiffers) {
  FLASHJIT_REQUIRE_GPU();
  for (auto [d, dv] : {std::pair{128, 64}, std::pair{64, 128}, std::pair{40, 72},
                       std::pair{192, 128}})
    for (bool causal : {false, true}) {
      KernelSpec spec = specFor(d, dv, DType::BF16, causal);
      tuner::ForwardShape shape;
      shape.batch = 2;
      shape.headsQ = 4;
      shape.headsKV = 4;
      shape.seqQ = 257;
      shape.seqK = 311;
      EXPECT_EQ(checkShape(spec, generator::defaultTile(spec), shape, 5), "") << spec.key();
    }
}

TEST(FwdMma, EveryTileShapeOfTheSpace) {
  FLASHJIT_REQUIRE_GPU();
  // Tiles other than the defaults: one and two 16-row tiles per warp, 3 stages.
  for (TileConfig tile : {TileConfig{64, 64, 4, 2}, TileConfig{128, 64, 4, 2},
                          TileConfig{128, 32, 8, 3}, TileConfig{64, 128, 4, 2},
                          TileConfig{16, 16, 1, 2}})
    for (bool causal : {false, true}) {
      KernelSpec spec = specFor(64, 64, DType::FP16, causal);
      tuner::ForwardShape shape;
      shape.batch = 2;
      shape.headsQ = 2;
      shape.headsKV = 1;
      shape.seqQ = 301;
      shape.seqK = 457;
      EXPECT_EQ(checkShape(spec, tile, shape, 3), "") << spec.key() << " " << tile.key();
    }
}

} // namespace
