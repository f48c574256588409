// What the attention features' GPU tests share (features_test.cpp: the forward families;
// bwd_features_test.cpp: the backward ones): a named set of features, and the shapes
// every case is checked on.
#pragma once

#include "kernel_pool.h"

#include <string>
#include <utility>
#include <vector>

namespace flashjit::testing {

struct NamedFeatures {
  const char *name;
  generator::Features features;
};

// Odd lengths (seqlen_q > seqlen_k too: rows that see no key), MHA/GQA/MQA, varlen.
inline std::vector<std::pair<std::string, tuner::ForwardShape>> featureCheckShapes() {
  std::vector<std::pair<std::string, tuner::ForwardShape>> shapes = {
      {"1x147 MHA", shapeOf(2, 4, 4, 1, 147)},
      {"113x203 GQA", shapeOf(2, 4, 2, 113, 203)},
      {"1023x1024 MQA", shapeOf(1, 4, 1, 1023, 1024)},
      {"333x333 GQA", shapeOf(2, 8, 2, 333, 333)},
      {"700x300 MHA", shapeOf(1, 2, 2, 700, 300)},
  };
  tuner::ForwardShape varlen = shapeOf(3, 4, 2, 0, 0);
  varlen.seqlensQ = {37, 300, 1};
  varlen.seqlensK = {200, 300, 129};
  varlen.seqQ = 300;
  varlen.seqK = 300;
  shapes.push_back({"varlen GQA", varlen});
  return shapes;
}

} // namespace flashjit::testing
