// wgmma.mma_async takes one asm operand per accumulator register, so its wrappers are
// generated for the exact shapes a kernel uses instead of being written out by hand
// for every N in templates/.
#pragma once

#include "generator/spec.h"

#include <string>

namespace flashjit::generator {

// Device functions in namespace fj for fwd_wgmma (templates/fwd_wgmma.cuh calls them):
//   wgmma_qk(float (&d)[n/2], u64 a_desc, u64 b_desc, int accumulate): m64 x nQk x k16,
//     both operands K-major in shared memory;
//   wgmma_pv(float (&d)[nPv/2], const u32 (&a)[4], u64 b_desc): m64 x nPv x k16, A from
//     registers, B N-major, accumulating.
std::string emitWgmmaWrappers(DType dtype, int nQk, int nPv);

} // namespace flashjit::generator
