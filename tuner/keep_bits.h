// How a block mask is sized and built: once to count the tiles (or the backward's steps)
// that a mask keeps only partly, then again with a slot of keep bits for each. Shared by
// fj_block_mask_create (api/block_mask.cpp) and the tuner, which times a mask_mod's
// candidates under the mask their callers build (tuner/measure.cpp).
#pragma once

#include "runtime/driver.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>

namespace flashjit::tuner {

// At most this much memory goes to the keep bits of partly masked tiles (and as much
// again to those of the backward's steps); a mask whose tiles need more calls mask_mod
// in the rest.
inline constexpr int64_t kMaxKeepBitBytes = 256ll << 20;

// Replaces `buffer` with one of `bytes` (the old one freed first).
inline llvm::Error reallocate(runtime::DeviceBuffer &buffer, int64_t bytes) {
  buffer = runtime::DeviceBuffer();
  auto fresh = runtime::DeviceBuffer::allocate((size_t)bytes);
  if (!fresh)
    return fresh.takeError();
  buffer = std::move(*fresh);
  return llvm::Error::success();
}

// Allocates `buffer` for `shape` (no bit slots) and builds it with `build`; with
// `withBits`, once that build has counted the partly masked tiles (or steps) into the
// int at shape.usedOffset() (read back: this synchronises `stream`), gives each a slot of
// keep bits and a quarter more (and 16) for updates, at most shape.entries() and
// kMaxKeepBitBytes of bits, and builds again (no second build when nothing is partly
// masked). For the forward's tiles (BlockMaskShape) and the backward's steps
// (BlockStepsShape).
template <typename Shape, typename Build>
llvm::Error allocateAndBuild(Shape &shape, runtime::DeviceBuffer &buffer, bool withBits,
                             Build build, CUstream stream) {
  shape.bitCapacity = 0;
  if (llvm::Error error = reallocate(buffer, shape.bytes()))
    return error;
  if (llvm::Error error = build())
    return error;
  if (!withBits)
    return llvm::Error::success();
  if (llvm::Error error = runtime::synchronizeStream(stream))
    return error;
  int32_t partial = 0;
  if (llvm::Error error = buffer.download(&partial, sizeof partial, (size_t)shape.usedOffset()))
    return error;
  if (partial <= 0)
    return llvm::Error::success();
  shape.bitCapacity = std::min({(int64_t)partial + partial / 4 + 16, shape.entries(),
                                std::max<int64_t>(kMaxKeepBitBytes / shape.bytesPerSlot(), 1)});
  if (llvm::Error error = reallocate(buffer, shape.bytes()))
    return error;
  return build();
}

} // namespace flashjit::tuner
