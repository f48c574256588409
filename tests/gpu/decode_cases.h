// Decode problems the dec_mma GPU tests share (16-bit and FP8 caches): a shape of
// per-sequence cache lengths, its description, and the grid of query rows x heads x
// pages x split counts each spec of a grid is checked on.
#pragma once

#include "kernel_pool.h"

#include "tuner/space.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace flashjit::testing {

inline tuner::ForwardShape decodeShape(int hq, int hkv, int sq, std::vector<int> lens, int page,
                                       int splits) {
  tuner::ForwardShape s = shapeOf((int)lens.size(), hq, hkv, sq, 1);
  s.seqK = std::max(1, *std::max_element(lens.begin(), lens.end()));
  s.seqlensK = std::move(lens);
  s.pageSize = page;
  s.decodeSplits = splits;
  return s;
}

inline std::string describe(const tuner::ForwardShape &s) {
  std::string lens;
  for (int l : s.seqlensK)
    lens += (lens.empty() ? "" : ",") + std::to_string(l);
  return llvm::formatv("q {0} heads {1}/{2} lens [{3}] page {4} splits {5}", s.seqQ, s.headsQ,
                       s.headsKV, lens, s.pageSize, s.decodeSplits)
      .str();
}

inline const int kQueryRows[] = {1, 2, 7, 16, 64};

// 5 query lengths x MHA/GQA/MQA, each over three sequences of odd lengths (one shorter
// than the query rows), cycling through page sizes (16, 64, 256, contiguous) and split
// counts (heuristic, 1, 5): each failure as a gtest failure; returns the shapes checked.
inline int checkDecodeGrid(const KernelSpec &spec, const TileConfig &tile) {
  const Heads heads[] = {{4, 4, "MHA"}, {8, 2, "GQA"}, {8, 1, "MQA"}};
  const int pages[] = {16, 64, 256, 0};
  const int splits[] = {0, 1, 5};
  int checked = 0;
  for (int sq : kQueryRows)
    for (const Heads &h : heads) {
      std::mt19937 rng(checked * 31 + spec.headDim);
      std::vector<int> lens = {std::max(1, sq - 1), 1 + (int)(rng() % 3000),
                               4000 + (int)(rng() % 97)};
      tuner::ForwardShape shape = decodeShape(h.q, h.kv, sq, lens, pages[checked % 4],
                                              splits[checked % 3]);
      EXPECT_EQ(checkShape(spec, tile, shape, 100 + checked), "")
          << spec.key() << " " << tile.key() << " " << describe(shape);
      ++checked;
    }
  return checked;
}

// Every (head dim, query dtype, causal) of a grid with its default tile, compiled up front
// (a grid fixture's SetUpTestSuite). makeSpec(d, dtype, causal) gives the spec.
template <typename MakeSpec>
void prepareDecodeGrid(llvm::ArrayRef<int> headDims, MakeSpec makeSpec) {
  if (!openTestDevice())
    return;
  std::vector<std::pair<KernelSpec, TileConfig>> all;
  for (int d : headDims)
    for (DType dtype : {DType::FP16, DType::BF16})
      for (bool causal : {false, true}) {
        KernelSpec spec = makeSpec(d, dtype, causal);
        all.emplace_back(spec, generator::defaultTile(spec));
      }
  KernelPool::get().prepare(all);
}

// Every tile of the tuner's space that fits and does not spill, for head dims 64, 128 and
// 256, causal or not (makeSpec(d, causal)), on two shapes; returns the checks run.
template <typename MakeSpec> int checkEveryDecodeTile(MakeSpec makeSpec) {
  std::vector<std::pair<KernelSpec, TileConfig>> wanted;
  for (int d : {64, 128, 256})
    for (bool causal : {false, true}) {
      KernelSpec spec = makeSpec(d, causal);
      for (const TileConfig &tile : tuner::enumerateTiles(spec))
        if (llvm::Error err = generator::validateTile(spec, tile))
          llvm::consumeError(std::move(err));
        else
          wanted.emplace_back(spec, tile);
    }
  KernelPool::get().prepare(wanted);
  int checked = 0;
  for (const auto &[spec, tile] : wanted) {
    if (KernelPool::get().spillBytes(spec, tile) > 0)
      continue;
    for (auto shape : {decodeShape(32, 4, 1, {2500, 17}, 16, 0),
                       decodeShape(8, 2, 9, {999, 1300}, 0, 3)}) {
      EXPECT_EQ(checkShape(spec, tile, shape, 3), "")
          << spec.key() << " " << tile.key() << " " << describe(shape);
      ++checked;
    }
  }
  return checked;
}

} // namespace flashjit::testing
