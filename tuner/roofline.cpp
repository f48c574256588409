#include "tuner/roofline.h"

#include "support/error.h"

#include <algorithm>
#include <cmath>

namespace flashjit::tuner {
namespace {

// Bytes of the fp32 log-sum-exp kept per query row.
constexpr uint64_t lseBytesPerRow = 4;

uint64_t u(int v) { return static_cast<uint64_t>(v); }

uint64_t queryHeads(const AttentionShape &s) { return u(s.batch) * u(s.headsQ); }

// 1 + 2 + ... + n.
uint64_t triangle(uint64_t n) { return n % 2 == 0 ? (n / 2) * (n + 1) : n * ((n + 1) / 2); }

// Keys read by one query head across all its query tiles. Non-causal: every tile
// reads all seqK keys. Causal: a tile reads the keys its last row sees,
// min(seqK, lastRow + 1 + seqK - seqQ), clamped at 0 for tiles wholly above the
// diagonal (seqQ > seqK).
uint64_t keysReadPerHead(const AttentionShape &s, uint64_t blockM) {
  uint64_t nq = u(s.seqQ), nk = u(s.seqK);
  uint64_t tiles = (nq + blockM - 1) / blockM;
  if (!s.causal)
    return tiles * nk;
  // Full tiles u = 1..F end at row u*blockM - 1 and read max(0, u*blockM + offset)
  // keys, which never exceeds nk because u*blockM <= nq. A partial last tile ends at
  // row nq - 1 and reads all nk keys.
  int64_t offset = static_cast<int64_t>(nk) - static_cast<int64_t>(nq);
  uint64_t full = nq / blockM;
  uint64_t first = 1; // first tile index u whose count is positive
  if (offset < 0)
    first = static_cast<uint64_t>(-offset) / blockM + 1;
  uint64_t keys = 0;
  if (first <= full) {
    uint64_t count = full - first + 1;
    uint64_t rowsPart = blockM * (triangle(full) - triangle(first - 1));
    keys = static_cast<uint64_t>(static_cast<int64_t>(rowsPart) +
                                 static_cast<int64_t>(count) * offset);
  }
  if (nq % blockM != 0)
    keys += nk;
  return keys;
}

} // namespace

llvm::Error validateShape(const AttentionShape &s) {
  struct Field {
    const char *name;
    int value;
  };
  for (Field f : {Field{"batch", s.batch}, Field{"heads", s.headsQ},
                  Field{"kv heads", s.headsKV}, Field{"query length", s.seqQ},
                  Field{"key length", s.seqK}, Field{"head dim", s.headDim},
                  Field{"value head dim", s.headDimV}})
    if (f.value < 1)
      return makeError(ErrorCode::InvalidValue, "{0} must be at least 1 (got {1})", f.name,
                       f.value);
  if (s.headsQ % s.headsKV != 0)
    return makeError(ErrorCode::InvalidValue,
                     "kv heads ({0}) must divide the query heads ({1})", s.headsKV,
                     s.headsQ);
  if (s.elementBytes != 1 && s.elementBytes != 2 && s.elementBytes != 4)
    return makeError(ErrorCode::InvalidValue, "element size must be 1, 2 or 4 bytes (got {0})",
                     s.elementBytes);
  // A bound on every count this file makes (flash bytes at blockM = 1 and fp32
  // scores are the largest), so none can wrap.
  long double bound = static_cast<long double>(s.batch) * s.headsQ * (s.seqQ + 1.0L) *
                      (s.seqK + 1.0L) *
                      ((s.headDim + s.headDimV) * (2.0L * s.elementBytes + 2.0L) + 20.0L);
  if (bound >= 9.2e18L)
    return makeError(ErrorCode::InvalidValue,
                     "shape too large for the model's 64-bit counts");
  return llvm::Error::success();
}

uint64_t scoreBufferBytes(uint64_t n, uint64_t bytesPerScore) { return n * n * bytesPerScore; }

uint64_t tileBytes(uint64_t rows, uint64_t headDim, uint64_t elementBytes) {
  return rows * headDim * elementBytes;
}

uint64_t causalVisiblePairs(uint64_t seqQ, uint64_t seqK) {
  // Row i sees max(0, min(seqK, i + 1 + seqK - seqQ)) keys; the last row sees all seqK,
  // and the counts go down by one per row until they reach 0. So the sum is
  // seqK + (seqK - 1) + ... over min(seqQ, seqK) rows.
  uint64_t rows = std::min(seqQ, seqK);
  return triangle(seqK) - triangle(seqK - rows);
}

uint64_t attentionFlops(const AttentionShape &s) {
  uint64_t dims = u(s.headDim) + u(s.headDimV);
  uint64_t nq = u(s.seqQ), nk = u(s.seqK);
  uint64_t perHead;
  if (s.windowLeft >= 0 || s.windowRight >= 0) {
    // Row by row: what a window leaves has no short closed form with every clip.
    uint64_t pairs = 0;
    const int64_t diag = (int64_t)s.seqK - s.seqQ;
    for (int64_t i = 0; i < s.seqQ; ++i) {
      int64_t lo = s.windowLeft >= 0 ? i + diag - s.windowLeft : 0;
      int64_t hi = s.windowRight >= 0 ? i + diag + s.windowRight : s.seqK - 1;
      if (s.causal)
        hi = std::min(hi, i + diag);
      lo = std::max<int64_t>(lo, 0);
      hi = std::min<int64_t>(hi, s.seqK - 1);
      if (hi >= lo)
        pairs += u(hi - lo + 1);
    }
    perHead = 2 * pairs * dims;
  } else if (!s.causal)
    perHead = 2 * nq * nk * dims;
  else if (nq == nk)
    perHead = nq * nk * dims; // half of 2*N*N*(d + dv), exact for odd N too
  else
    perHead = 2 * causalVisiblePairs(nq, nk) * dims;
  return queryHeads(s) * perHead;
}

uint64_t standardAttentionBytes(const AttentionShape &s, uint64_t scoreBytes) {
  uint64_t e = u(s.elementBytes);
  uint64_t nq = u(s.seqQ), nk = u(s.seqK), d = u(s.headDim), dv = u(s.headDimV);
  uint64_t q = nq * d * e, k = nk * d * e, v = nk * dv * e, o = nq * dv * e;
  uint64_t scores = 4 * nq * nk * scoreBytes; // write S, read S, write P, read P
  return queryHeads(s) * (q + k + v + scores + o);
}

uint64_t flashAttentionBytes(const AttentionShape &s, uint64_t blockM, bool writeLse) {
  uint64_t e = u(s.elementBytes);
  uint64_t nq = u(s.seqQ), d = u(s.headDim), dv = u(s.headDimV);
  uint64_t q = nq * d * e, o = nq * dv * e;
  uint64_t kv = keysReadPerHead(s, blockM) * (d + dv) * e;
  uint64_t lse = writeLse ? nq * lseBytesPerRow : 0;
  return queryHeads(s) * (q + kv + o + lse);
}

uint64_t compulsoryAttentionBytes(const AttentionShape &s, bool writeLse) {
  uint64_t e = u(s.elementBytes);
  uint64_t nq = u(s.seqQ), nk = u(s.seqK), d = u(s.headDim), dv = u(s.headDimV);
  uint64_t perQueryHead = nq * d * e + nq * dv * e + (writeLse ? nq * lseBytesPerRow : 0);
  uint64_t perKVHead = nk * (d + dv) * e;
  return queryHeads(s) * perQueryHead + u(s.batch) * u(s.headsKV) * perKVHead;
}

uint64_t attentionBackwardFlops(const AttentionShape &s) {
  return attentionFlops(s) * 5 / 2;
}

uint64_t compulsoryAttentionBackwardBytes(const AttentionShape &s) {
  uint64_t e = u(s.elementBytes);
  uint64_t nq = u(s.seqQ), nk = u(s.seqK), d = u(s.headDim), dv = u(s.headDimV);
  // q, dq (d); o, dO (dv); the lse.
  uint64_t perQueryHead = 2 * nq * d * e + 2 * nq * dv * e + nq * lseBytesPerRow;
  uint64_t perKVHead = 2 * nk * (d + dv) * e;  // k, v, dk, dv
  return queryHeads(s) * perQueryHead + u(s.batch) * u(s.headsKV) * perKVHead;
}

llvm::StringRef boundName(Bound bound) {
  return bound == Bound::Compute ? "compute" : "memory";
}

RooflinePoint rooflinePoint(uint64_t flops, uint64_t bytes, const GpuSpec &gpu) {
  RooflinePoint p;
  p.flops = flops;
  p.bytes = bytes;
  p.intensity = bytes ? double(flops) / double(bytes) : 0.0;
  p.computeSeconds = double(flops) / gpu.peakFlops;
  p.memorySeconds = double(bytes) / gpu.hbmBytesPerSec;
  p.bound = p.computeSeconds >= p.memorySeconds ? Bound::Compute : Bound::Memory;
  p.predictedSeconds = std::max(p.computeSeconds, p.memorySeconds);
  return p;
}

llvm::Expected<RooflineEstimate> estimate(const AttentionShape &shape, const GpuSpec &gpu,
                                          uint64_t blockM, uint64_t scoreBytes,
                                          bool writeLse) {
  if (llvm::Error err = validateShape(shape))
    return err;
  if (llvm::Error err = validateGpuSpec(gpu))
    return err;
  if (blockM < 1 || blockM > (1u << 20))
    return makeError(ErrorCode::InvalidValue, "block-m must be in [1, 2^20] (got {0})",
                     blockM);
  if (scoreBytes != 2 && scoreBytes != 4)
    return makeError(ErrorCode::InvalidValue,
                     "score element size must be 2 or 4 bytes (got {0})", scoreBytes);
  RooflineEstimate e;
  e.shape = shape;
  e.gpu = gpu;
  e.blockM = blockM;
  e.scoreBytes = scoreBytes;
  e.writeLse = writeLse;
  e.ridgeIntensity = gpu.peakFlops / gpu.hbmBytesPerSec;
  uint64_t flops = attentionFlops(shape);
  e.standard = rooflinePoint(flops, standardAttentionBytes(shape, scoreBytes), gpu);
  e.flash = rooflinePoint(flops, flashAttentionBytes(shape, blockM, writeLse), gpu);
  e.compulsory = rooflinePoint(flops, compulsoryAttentionBytes(shape, writeLse), gpu);
  e.predictedSpeedup = e.standard.predictedSeconds / e.flash.predictedSeconds;
  e.lowerBoundSpeedup = e.standard.predictedSeconds / e.compulsory.predictedSeconds;
  return e;
}

llvm::Expected<double> fractionOfRoofline(double predictedSeconds, double measuredSeconds) {
  if (!(predictedSeconds > 0) || !std::isfinite(predictedSeconds))
    return makeError(ErrorCode::InvalidValue, "predicted time must be positive");
  if (!(measuredSeconds > 0) || !std::isfinite(measuredSeconds))
    return makeError(ErrorCode::InvalidValue, "measured time must be positive");
  return predictedSeconds / measuredSeconds;
}

llvm::Expected<MeasuredReport> compareMeasured(const RooflineEstimate &estimate,
                                               double measuredSeconds) {
  MeasuredReport r;
  r.measuredSeconds = measuredSeconds;
  llvm::Expected<double> lower =
      fractionOfRoofline(estimate.compulsory.predictedSeconds, measuredSeconds);
  if (!lower)
    return lower.takeError();
  r.fractionOfRoofline = *lower;
  llvm::Expected<double> tile =
      fractionOfRoofline(estimate.flash.predictedSeconds, measuredSeconds);
  if (!tile)
    return tile.takeError();
  r.fractionOfTileModel = *tile;
  r.achievedFlopsPerSec = double(estimate.flash.flops) / measuredSeconds;
  return r;
}

} // namespace flashjit::tuner
