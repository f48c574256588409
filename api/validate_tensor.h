// One strided tensor of a call's arguments as the kernels walk it, and its check
// (pointer, alignment, strides, extent): shared by the forward and backward validators.
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

} // namespace flashjit::api
