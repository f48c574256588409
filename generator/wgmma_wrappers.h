// wgmma.mma_async takes one asm operand per accumulator register, so its wrappers are
// generated for the exact shapes a kernel uses instead of being written out by hand
// for every N in templates/.
#pragma once

#include "generator/spec.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace flashjit::generator {

// One device function in namespace fj's scope (the caller wraps it):
//   name(float (&d)[n/2], u64 a_desc, u64 b_desc, int accumulate): m64 x n x k16, both
//   operands in shared memory; transA / transB: the operand is MN-major (transposed)
//   instead of K-major.
std::string emitWgmmaSmemSmem(llvm::StringRef name, DType dtype, int n, bool transA,
                              bool transB);
//   name(float (&d)[n/2], const u32 (&a)[4], u64 b_desc): m64 x n x k16 (k32 for e4m3),
//   A from registers, B in shared memory, MN-major (N contiguous) or with kMajorB
//   K-major (e4m3: always K-major), always accumulating.
std::string emitWgmmaRegSmem(llvm::StringRef name, DType dtype, int n, bool kMajorB = false);

// Device functions in namespace fj for fwd_wgmma (templates/fwd_wgmma.cuh calls them):
//   wgmma_qk(float (&d)[n/2], u64 a_desc, u64 b_desc, int accumulate): m64 x nQk x k16,
//     both operands K-major in shared memory;
//   wgmma_pv(float (&d)[nPv/2], const u32 (&a)[4], u64 b_desc): m64 x nPv x k16, A from
//     registers, B N-major, accumulating;
//   with alibiBias, wgmma_qk_bias(float (&d)[nQk/2], const u32 (&a)[4], u64 b_desc):
//     m64 x nQk x k16 in bf16 whatever dtype is, A from registers, B K-major,
//     accumulating (ALiBi's bias on the tensor cores, FwdWgmmaConfig::kAlibiByMma).
std::string emitWgmmaWrappers(DType dtype, int nQk, int nPv, bool alibiBias = false);

} // namespace flashjit::generator
