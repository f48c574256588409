// One strided tensor of a call's arguments as the kernels walk it, and its check
// (pointer, alignment, strides, extent): shared by the forward, backward and decode
// validators.
#pragma once

#include "llvm/Support/Error.h"

#include <cstdint>

namespace flashjit::api {

// One dimension of a tensor as the kernels walk it.
struct Dim {
  const char *strideField;  // "q_seq_stride"
  int64_t stride;
  int64_t size;             // elements along it (an upper bound for varlen rows)
};

// A tensor: its pointer, its three strided dimensions and its contiguous last dimension.
struct Tensor {
  const char *name;         // "q"
  const void *ptr;
  Dim dims[3];
  int lastDim;
};

// Non-null, 16-byte aligned, strides non-negative multiples of 8 (0 only over one
// element), and an extent that the kernels' 64-bit offsets hold. Errors name the field.
llvm::Error checkTensor(const Tensor &tensor);

// A size field: InvalidValue below 0, NotSupported above `limit` (`why` says which limit).
llvm::Error checkSize(const char *field, int value, int limit, const char *why);
// A pointer field (NULL passes): a multiple of `alignment` bytes.
llvm::Error checkAligned(const char *field, const void *ptr, unsigned alignment);

} // namespace flashjit::api
