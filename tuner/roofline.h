// The roofline model of attention forward: how many FLOPs it does, how many bytes
// standard attention (S and P materialized in HBM) and flash attention (K and V
// re-read once per query tile, FlashAttention Theorem 2) move, and the time each
// needs on a GPU at best: max(FLOPs / peak, bytes / bandwidth). Pure arithmetic, no
// CUDA: it answers "how much faster will flash attention be at this sequence length"
// before any kernel runs, and "how close did the kernel get" after one did.
//
// Counts are exact integers (uint64_t); only rates and times are doubles.
// See docs/ROOFLINE.md for the model, its assumptions and the CLI.
#pragma once

#include "tuner/gpu_specs.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace flashjit::tuner {

struct AttentionShape {
  int batch = 1;
  int headsQ = 1;
  int headsKV = 1;      // divides headsQ (GQA/MQA when smaller)
  int seqQ = 1;
  int seqK = 1;
  int headDim = 128;    // d: Q and K
  int headDimV = 128;   // d_v: V and O
  bool causal = false;  // bottom-right aligned: query i sees keys j <= i + seqK - seqQ
  // Sliding window (also bottom-right aligned): keys i + diag - windowLeft ..
  // i + diag + windowRight; -1: that side unbounded.
  int windowLeft = -1, windowRight = -1;
  int elementBytes = 2; // Q, K, V, O element size: 2 for fp16/bf16
};

// Every size positive, headsKV divides headsQ, element size 1, 2 or 4, and the
// counts below fit in 63 bits. The counting functions assume a valid shape.
llvm::Error validateShape(const AttentionShape &shape);

// One n x n score buffer: n * n * bytesPerScore (N = 4096 in fp32: 64 MiB).
uint64_t scoreBufferBytes(uint64_t n, uint64_t bytesPerScore);

// One on-chip tile of `rows` rows of a head: rows * headDim * elementBytes
// (64 x 128 in fp16: 16 KiB).
uint64_t tileBytes(uint64_t rows, uint64_t headDim, uint64_t elementBytes);

// The (query, key) pairs a causal mask leaves visible, bottom-right aligned: query i
// (0-based) sees keys j <= i + seqK - seqQ. Exact: seqQ = seqK = n gives n(n+1)/2.
uint64_t causalVisiblePairs(uint64_t seqQ, uint64_t seqK);

// FLOPs of the forward pass: 2*Nq*Nk*(d + dv) per (batch, query head), i.e.
// 4*B*H*Nq*Nk*d when dv = d. Causal with Nq = Nk: exactly half (the FlashAttention
// papers' convention, which the peers' TFLOP/s use); causal with Nq != Nk: the
// visible pairs, causalVisiblePairs(), instead of Nq*Nk.
uint64_t attentionFlops(const AttentionShape &shape);

// HBM bytes of standard attention: read Q, K, V; write S; read S; write P; read P;
// write O. S and P hold scoreBytes per score (4: fp32) and are the full Nq x Nk
// matrices even when causal (the mask is applied to a materialized S). K and V are
// read once per query head (a batched GEMM per head; with GQA the KV head is read
// by each query head that uses it).
uint64_t standardAttentionBytes(const AttentionShape &shape, uint64_t scoreBytes = 4);

// HBM bytes of flash attention with query tiles of blockM rows: Q read once, O
// written once, K and V read once per query tile of each query head, i.e.
// ceil(Nq / blockM) times (with GQA: no reuse of a KV head across the query heads
// that share it is assumed, the worst case). Causal: each query tile reads only the
// keys its last row can see (fully masked key blocks are skipped), counted exactly
// by key, not rounded up to the kernel's key block. writeLse adds the fp32
// log-sum-exp per query row.
uint64_t flashAttentionBytes(const AttentionShape &shape, uint64_t blockM,
                             bool writeLse = false);

// The bytes no kernel can avoid: Q, K, V read once (K and V once per KV head, shared
// by its query heads), O (and the LSE) written once. Flash attention approaches this
// when the K/V re-reads hit L2, so it bounds the best possible time from below.
uint64_t compulsoryAttentionBytes(const AttentionShape &shape, bool writeLse = false);

// FLOPs of the backward pass as the FlashAttention papers count them: 2.5 times the
// forward's (five matrix products, S, dP, dV, dK and dQ, of 2*Nq*Nk*d each, against
// the forward's two), causal halved in the same way. Rounded down to an integer.
uint64_t attentionBackwardFlops(const AttentionShape &shape);

// The bytes no backward kernel can avoid: q, k, v, o, dO and the lse read once, dq, dk
// and dv written once (k/v and dk/dv once per KV head).
uint64_t compulsoryAttentionBackwardBytes(const AttentionShape &shape);

enum class Bound { Compute, Memory };
llvm::StringRef boundName(Bound bound); // "compute" / "memory"

// One kernel on the roofline.
struct RooflinePoint {
  uint64_t flops = 0;
  uint64_t bytes = 0;
  double intensity = 0;        // FLOPs per byte
  double computeSeconds = 0;   // flops / peak
  double memorySeconds = 0;    // bytes / bandwidth
  double predictedSeconds = 0; // the larger of the two
  Bound bound = Bound::Compute; // which one it is (compute on a tie)
};

RooflinePoint rooflinePoint(uint64_t flops, uint64_t bytes, const GpuSpec &gpu);

struct RooflineEstimate {
  AttentionShape shape;
  GpuSpec gpu;
  uint64_t blockM = 0;
  uint64_t scoreBytes = 0;
  bool writeLse = false;
  double ridgeIntensity = 0;  // peak / bandwidth: where memory-bound turns compute-bound
  RooflinePoint standard;     // S and P in HBM
  RooflinePoint flash;        // K/V re-read per query tile
  RooflinePoint compulsory;   // the lower bound: each tensor moved once
  double predictedSpeedup = 0; // standard.predictedSeconds / flash.predictedSeconds
  double lowerBoundSpeedup = 0; // standard.predictedSeconds / compulsory.predictedSeconds:
                                // the win if L2 served every K/V re-read
};

// All three points for one shape on one GPU (the same FLOPs for each: the useful
// work). An error for an invalid shape, GPU, blockM (< 1) or scoreBytes (not 2 or 4).
llvm::Expected<RooflineEstimate> estimate(const AttentionShape &shape, const GpuSpec &gpu,
                                          uint64_t blockM, uint64_t scoreBytes = 4,
                                          bool writeLse = false);

// predicted / measured: 1 means the kernel runs as fast as the model allows. An
// error unless both are positive and finite.
llvm::Expected<double> fractionOfRoofline(double predictedSeconds, double measuredSeconds);

// A measured run against the estimate: what `tune` and `bench` print per winner.
struct MeasuredReport {
  double measuredSeconds = 0;
  double achievedFlopsPerSec = 0;   // the useful FLOPs / measured time
  double fractionOfRoofline = 0;    // compulsory.predictedSeconds / measured (<= ~1)
  double fractionOfTileModel = 0;   // flash.predictedSeconds / measured (> 1 when L2
                                    // serves the K/V re-reads the model counts)
};
llvm::Expected<MeasuredReport> compareMeasured(const RooflineEstimate &estimate,
                                               double measuredSeconds);

} // namespace flashjit::tuner
