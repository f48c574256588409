// Hopper (sm_90a) primitives: mbarriers, TMA tile loads, wgmma shared-memory
// descriptors and ordering, named barriers and register reallocation. The wgmma
// instructions themselves have one operand per accumulator register, so the generator
// emits them for the exact shapes a kernel uses (generator/wgmma_wrappers.cpp).
#pragma once

#include "fj_common.cuh"

namespace fj {

// A CUtensorMap as the kernel sees it: 128 opaque bytes, 64-byte aligned, passed by
// value as a __grid_constant__ parameter and encoded by the host.
struct __align__(64) TensorMap {
  u64 opaque[16];
};

// ---- mbarrier (shared-memory transaction barriers) ----
__device__ __forceinline__ void mbar_init(u32 bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the copy engine and to the other threads.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives once and tells the barrier that `bytes` more will land through TMA.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// `count` arrivals at once.
__device__ __forceinline__ void mbar_arrive_count(u32 bar, u32 count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count)
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 done;
  asm volatile("{\n.reg .pred p;\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
// Waits until the phase with the given parity has completed. A fresh barrier is in
// phase 0, so waiting for parity 1 returns at once (how producers start on empty slots).
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA ----
__device__ __forceinline__ void tma_prefetch_map(const TensorMap &map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map) : "memory");
}
// One box of a rank-4 tensor map (dims: column, row, head, batch) into shared memory;
// completion is counted in bytes on `bar`. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TensorMap &map, u32 bar, int col,
                                            int row, int head, int batch) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
               "l"(&map), "r"(col), "r"(row), "r"(head), "r"(batch), "r"(bar)
               : "memory");
}

// One box of shared memory out to a rank-4 tensor map (same dims as tma_load_4d);
// elements outside the tensor are not written. Tracked in this thread's bulk groups.
__device__ __forceinline__ void tma_store_4d(const TensorMap &map, u32 src, int col, int row,
                                             int head, int batch) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
               " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(&map),
               "r"(src), "r"(col), "r"(row), "r"(head), "r"(batch)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until this thread's committed bulk stores have read their shared memory (it may then
// be overwritten); the writes to global memory may still be under way.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Until this thread's committed bulk stores are complete.
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// ---- shared-memory stores of mma fragments ----
// Four 8 x 8 tiles of 16-bit values to shared memory in one instruction (sm_90): lane l
// gives the address of row l % 8 of tile l / 8 (16-byte aligned), and r_i holds the
// lane's part of tile i in the mma accumulator's layout (row lane / 4, columns
// 2 (lane % 4) and 2 (lane % 4) + 1).
__device__ __forceinline__ void stmatrix_x4(u32 row_addr, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                   row_addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// ---- wgmma ordering ----
// Before the first wgmma that reads or writes registers the thread changed.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins accumulator registers at this point of the program, so the compiler neither
// reads them before the wgmma_wait that completes them nor writes them while a wgmma
// that uses them is in flight.
template <int R> __device__ __forceinline__ void pin_registers(float (&regs)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
    asm volatile("" : "+f"(regs[i])::"memory");
}

// Shared-memory matrix descriptor. Operands are stored as panels of rows of
// `swizzle_bytes` (128 or 64), swizzled the way TMA writes them; `lbo` and `sbo` are the
// leading and stride byte offsets of the PTX ISA's canonical layouts.
__device__ __forceinline__ u64 wgmma_desc(u32 addr, u32 lbo, u32 sbo, int swizzle_bytes) {
  const u64 layout = swizzle_bytes == 128 ? 1 : swizzle_bytes == 64 ? 2 : 3;
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) |
         ((u64)((sbo >> 4) & 0x3FFF) << 32) | (layout << 62);
}

// The descriptor of an operand `bytes` past the one `desc` describes: one add to the
// address field (the low 14 bits; shared memory ends below 256 KB, so it never carries
// out), instead of rebuilding the descriptor from the address for every wgmma.
__device__ __forceinline__ u64 wgmma_desc_add(u64 desc, u32 bytes) {
  const u32 lo = (u32)desc + (bytes >> 4), hi = (u32)(desc >> 32);
  return ((u64)hi << 32) | lo;
}

// ---- warp specialization ----
template <int kRegs> __device__ __forceinline__ void regs_raise() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs> __device__ __forceinline__ void regs_lower() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// Orders this thread's earlier generic-proxy shared-memory accesses before later
// async-proxy ones (TMA, wgmma) to the same bytes, e.g. a buffer handed back to TMA.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Named barriers (0 is __syncthreads): `threads` threads must reach `id`.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fj
