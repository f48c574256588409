// One tile of one spec as a binary in the cache (found there, or compiled and
// published), without a device: what compile-only sweeps and winner imports share.
#pragma once

#include "tuner/variants.h"

namespace flashjit::tuner {

// Fails only when the cache or NVRTC cannot be used; a tile that does not emit or
// compile, or that the log rejects, is said so in the Variant (error, rejection).
llvm::Expected<Variant> compileTile(cache::Cache &cache, const generator::KernelSpec &spec,
                                    const generator::TileConfig &tile);

} // namespace flashjit::tuner
