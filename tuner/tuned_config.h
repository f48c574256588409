// What a tune chooses and a tuning row records as its `config`: the tile, and for
// split-KV kernels (decode) the split count it was fastest with. "bm16.bn64.w4.s2" for
// a tile alone (every row before protocol 3, and every non-decode row), or
// "bm16.bn64.w4.s2+splits8" for a tile that runs its bucket's calls as 8 splits.
#pragma once

#include "generator/spec.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace flashjit::tuner {

struct TunedConfig {
  generator::TileConfig tile;
  int splits = 0;  // 0: the split heuristic (tuner/decode_kernel.h), else 1..kMaxDecodeSplits

  std::string key() const;
  static llvm::Expected<TunedConfig> parse(llvm::StringRef key);
  bool operator==(const TunedConfig &o) const { return tile == o.tile && splits == o.splits; }
};

} // namespace flashjit::tuner
