// Compiled by nvcc in a test (ctest: templates_nvcc): the device templates must also
// build with the full CUDA compiler, which catches errors NVRTC's subset would hide
// until a spec needing them is generated.
#include "fwd_mma.cuh"
#include "reference.cuh"

template <typename Cfg> __global__ void __launch_bounds__(Cfg::kThreads) fwd(const FjForwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  fj::fwd_mma::run<Cfg>(p, smem);
}

template <typename T, bool kEmulate>
__global__ void reference(const FjForwardParams p, int d, int dv, int causal) {
  fj::reference::run<T, kEmulate>(p, d, dv, causal != 0);
}

// One instantiation per code path: Q in registers or not, swizzled or padded rows,
// the k=8 tail, an odd number of V tiles, both dtypes, causal or not.
template __global__ void fwd<fj::FwdMmaConfig<fj::bf16, 128, 128, 128, 64, 8, 2, true>>(FjForwardParams);
template __global__ void fwd<fj::FwdMmaConfig<fj::f16, 40, 72, 64, 32, 4, 3, false>>(FjForwardParams);
template __global__ void fwd<fj::FwdMmaConfig<fj::f16, 256, 256, 64, 32, 4, 2, true>>(FjForwardParams);
template __global__ void reference<fj::bf16, true>(FjForwardParams, int, int, int);
template __global__ void reference<fj::f16, false>(FjForwardParams, int, int, int);
