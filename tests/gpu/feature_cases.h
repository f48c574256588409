// What the attention features' GPU tests share (features_test.cpp: the forward families;
// bwd_features_test.cpp: the backward ones): the cases both check, and the shapes every
// case is checked on.
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

template <typename Set> NamedFeatures namedFeatures(const char *name, Set set) {
  generator::Features f;
  set(f);
  return {name, f};
}

// The built-in features one at a time: windows one- and two-sided, soft-capping (a cap
// well into tanh's bend too), ALiBi.
inline std::vector<NamedFeatures> builtinFeatureCases() {
  return {
      namedFeatures("window_left100",
                    [](auto &f) { f.window = true, f.windowLeft = 100, f.windowRight = 0; }),
      namedFeatures("window_70_45",
                    [](auto &f) { f.window = true, f.windowLeft = 70, f.windowRight = 45; }),
      namedFeatures("window_right33", [](auto &f) { f.window = true, f.windowRight = 33; }),
      namedFeatures("softcap30", [](auto &f) { f.softcap = 30.f; }),
      namedFeatures("softcap2", [](auto &f) { f.softcap = 2.f; }),
      namedFeatures("alibi", [](auto &f) { f.alibi = true; }),
  };
}

// A prefix-LM mask_mod reading its prefix (50 keys) from an int argument.
inline NamedFeatures prefixLmCase() {
  return namedFeatures("mask_mod_prefix_lm", [](auto &f) {
    f.maskMod = "return kv_idx <= q_idx || kv_idx < args.integer[0];";
    f.hasTuningArgs = true;
    f.tuningArgs.integer[0] = 50;
  });
}

// The three built-in features at once.
inline NamedFeatures windowSoftcapAlibiCase() {
  return namedFeatures("window_softcap_alibi", [](auto &f) {
    f.window = true, f.windowLeft = 150, f.windowRight = 20;
    f.softcap = 20.f;
    f.alibi = true;
  });
}

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
