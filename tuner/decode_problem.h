// A decode problem on the device: new query rows, a KV cache (contiguous, or paged with
// the pages of every sequence shuffled through a block table), the outputs and the
// split-KV workspace, turned into the kernels' FjDecodeParams. Shared by the decode
// checker, its timing problem and the GPU tests.
#pragma once

#include "generator/spec.h"
#include "runtime/driver.h"
#include "templates/fj_decode_params.h"
#include "tuner/forward_problem.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace flashjit::tuner {

// The cache length of sequence b of a decode shape.
int decodeCacheLength(const ForwardShape &shape, int b);

// Device buffers of a decode problem. The cache is laid out [pages, page_size,
// heads_kv, dim] (contiguous: [batch, seqK, heads_kv, dim]); q and o are
// [batch, seqQ, heads_q, dim]; lse is [batch, heads_q, seqQ].
struct DecodeBuffers {
  runtime::DeviceBuffer q, k, v, o, lse, blockTable, cacheSeqlens, workspace;
  // An FP8 cache: the factors of K and V, [batch, heads_kv] (decodeCacheFactor).
  runtime::DeviceBuffer kDescale, vDescale;
  // With ALiBi (the shape's `alibi`): the slopes, [batch, heads_q] (testAlibiSlopes).
  runtime::DeviceBuffer alibiSlopes;
  bool fp8 = false;
  int pages = 0, tableStride = 0;
  std::vector<int> table;  // host copy of the block table ([batch, tableStride])
};

// An FP8 cache's dequantization factor of K (or V) for (sequence b, KV head h): powers of
// two from 1/4 to 4 that differ between neighbours, so that a 16-bit value on the e4m3
// grid times it is exact and a factor applied to the wrong head or batch shows.
float decodeCacheFactor(bool ofV, int b, int h);

// Allocates the buffers for `shape` and, from host K/V given as packed rows (sequence
// b's token j at row sum(len[0..b-1]) + j, [rows, heads_kv, dim]), writes the cache: the
// pages of all sequences shuffled by `seed`, tokens past a sequence's length and pages
// no sequence owns filled with NaN (a kernel that reads them fails the check). With
// empty kRows/vRows the cache is left random (timing). The workspace is sized for
// kMaxDecodeSplits.
// dtype E4M3: an FP8 cache, q and o of outDtype. The rows are then 16-bit values of
// outDtype on the e4m3 grid times decodeCacheFactor, stored as their e4m3 bytes (exact).
llvm::Expected<DecodeBuffers>
allocateDecodeBuffers(generator::DType dtype, const ForwardShape &shape,
                      const std::vector<uint16_t> &kRows, const std::vector<uint16_t> &vRows,
                      uint64_t seed, generator::DType outDtype = generator::DType::BF16);

// Puts packed K/V rows (as above, 16-bit outDtype) on the values an FP8 cache holds:
// each x becomes e4m3(x / f) * f, f = decodeCacheFactor of its sequence and head.
void quantizeDecodeRows(const ForwardShape &shape, generator::DType outDtype, bool ofV,
                        int dim, std::vector<uint16_t> &rows);

// Parameters over the buffers (num_splits and the workspace are the caller's: see
// DecodeKernel::plan and bindDecodeWorkspace).
FjDecodeParams makeDecodeParams(const ForwardShape &shape, const DecodeBuffers &buffers);
// The sizes and strides alone, no pointers: what DecodeKernel::plan reads.
FjDecodeParams decodeSizes(const ForwardShape &shape);

// The same shape as a variable-length forward problem (one sequence of seqQ queries and
// its cache length of keys per batch entry): what the forward reference computes.
ForwardShape decodeAsForward(const ForwardShape &shape);

} // namespace flashjit::tuner
