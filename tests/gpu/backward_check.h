// The backward checker run on one kernel of the pool: the GPU tests of the backward
// families (bwd_mma_test.cpp) and of their features (bwd_features_test.cpp).
#pragma once

#include "kernel_pool.h"

#include "tuner/backward_checker.h"

#include <string>

namespace flashjit::testing {

// Runs the backward checker in the chosen mode; "" or the failure.
// `blockSteps`: a mask_mod's bwd_wgmma kernel walks the steps of a block mask built
// for the shape first (tuner::BackwardChecker::BlockSteps).
inline std::string
checkBackward(const KernelSpec &spec, const TileConfig &tile, const tuner::ForwardShape &shape,
              uint64_t seed, bool deterministic,
              tuner::BackwardChecker::BlockSteps blockSteps =
                  tuner::BackwardChecker::BlockSteps::None) {
  return checkWith(spec, tile, [&] {
    return tuner::BackwardChecker::create(spec, shape, seed, nullptr, deterministic,
                                          blockSteps);
  });
}

} // namespace flashjit::testing
