#include "tuner/bucket.h"

#include "support/error.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace flashjit::tuner {
namespace {

// Rounded up to a power of two; sizes beyond 2^30 share the last bucket.
int roundUpPow2(int n) {
  if (n <= 1)
    return 1;
  if (n > (1 << 30))
    return 1 << 30;
  return (int)llvm::PowerOf2Ceil((uint64_t)n);
}

} // namespace

Bucket Bucket::forShape(int seqQ, int seqK, int batchHeads) {
  return Bucket{roundUpPow2(seqQ), roundUpPow2(seqK), roundUpPow2(batchHeads)};
}

Bucket Bucket::forDecode(int64_t seqQ, int64_t seqK, int64_t batch, int64_t headsQ,
                         int64_t headsKV) {
  auto dim = [](int64_t n) { return (int)std::clamp<int64_t>(n, 1, 1 << 30); };
  const int64_t kvHeads = std::max<int64_t>(1, headsKV);
  const int64_t group = std::max<int64_t>(1, headsQ / kvHeads);
  return forShape(dim(dim(seqQ) * group), dim(seqK), dim(dim(batch) * kvHeads));
}

std::string Bucket::key() const {
  return llvm::formatv("q{0}.k{1}.bh{2}", seqQ, seqK, batchHeads).str();
}

llvm::Expected<Bucket> Bucket::parse(llvm::StringRef key) {
  llvm::SmallVector<llvm::StringRef, 3> parts;
  key.split(parts, '.');
  Bucket b;
  auto field = [](llvm::StringRef part, llvm::StringRef prefix, int &out) {
    return part.consume_front(prefix) && !part.getAsInteger(10, out) && out >= 1 &&
           llvm::isPowerOf2_32((uint32_t)out);
  };
  if (parts.size() != 3 || !field(parts[0], "q", b.seqQ) || !field(parts[1], "k", b.seqK) ||
      !field(parts[2], "bh", b.batchHeads))
    return makeError(ErrorCode::InvalidValue,
                     "bad bucket '{0}' (expected e.g. q1024.k1024.bh64, powers of two)", key);
  return b;
}

double Bucket::distance(const Bucket &o) const {
  auto d = [](int a, int b) { return std::fabs(std::log2((double)a / (double)b)); };
  return d(seqQ, o.seqQ) + d(seqK, o.seqK) + d(batchHeads, o.batchHeads);
}

bool Bucket::smallerThan(const Bucket &o) const {
  auto scores = [](const Bucket &b) { return (double)b.seqQ * b.seqK * b.batchHeads; };
  return std::make_tuple(scores(*this), seqQ, seqK, batchHeads) <
         std::make_tuple(scores(o), o.seqQ, o.seqK, o.batchHeads);
}

int nearestBucket(llvm::ArrayRef<Bucket> tuned, const Bucket &wanted) {
  int best = -1;
  for (int i = 0; i < (int)tuned.size(); ++i) {
    if (tuned[i] == wanted)
      return i;
    if (best < 0) {
      best = i;
      continue;
    }
    double d = tuned[i].distance(wanted), bestD = tuned[best].distance(wanted);
    // Distances are sums of small integers (log2 of powers of two): compare exactly
    // enough that equal distances are seen as equal.
    if (d < bestD - 1e-9 || (std::fabs(d - bestD) <= 1e-9 && tuned[i].smallerThan(tuned[best])))
      best = i;
  }
  return best;
}

int ladderBatch(int length) { return std::max(1, kLadderTokens / std::max(1, length)); }

std::vector<Bucket> lengthLadder(int headsQ, int batch) {
  std::vector<Bucket> ladder;
  for (int length = kLadderMinLength; length <= kLadderMaxLength; length *= 2) {
    const int64_t batchHeads =
        (int64_t)(batch > 0 ? batch : ladderBatch(length)) * std::max(1, headsQ);
    const int bh = (int)std::min<int64_t>(batchHeads, 1 << 30);
    ladder.push_back(Bucket::forShape(length, length, bh));
  }
  return ladder;
}

bool boundedByTuningShape(const generator::KernelSpec &spec) {
  return spec.features.hasTuningArgs && spec.features.tuningShape.known() &&
         spec.features.readsTensors();
}

ForwardShape withinTuningShape(const generator::KernelSpec &spec, ForwardShape shape) {
  if (!boundedByTuningShape(spec))
    return shape;
  const generator::Features::TuningShape &bound = spec.features.tuningShape;
  shape.batch = std::clamp(shape.batch, 1, std::max(1, bound.batch));
  shape.headsQ = std::clamp(shape.headsQ, 1, std::max(1, bound.headsQ));
  if (shape.headsKV < 1 || shape.headsKV > shape.headsQ || shape.headsQ % shape.headsKV)
    shape.headsKV = 1;
  auto clampLengths = [&](std::vector<int> &lengths, int bound, int &longest) {
    longest = std::clamp(longest, 1, std::max(1, bound));
    if (lengths.empty())
      return;
    lengths.resize(std::min<size_t>(lengths.size(), (size_t)shape.batch));
    for (int &n : lengths)
      n = std::min(n, longest);
    longest = std::max(1, *std::max_element(lengths.begin(), lengths.end()));
  };
  // seqlensQ and seqlensK hold one length a sequence (varlen, or decode's cache lengths).
  clampLengths(shape.seqlensQ, bound.seqQ, shape.seqQ);
  clampLengths(shape.seqlensK, bound.seqK, shape.seqK);
  if (!shape.seqlensQ.empty() || !shape.seqlensK.empty())
    shape.batch = (int)std::max(shape.seqlensQ.size(), shape.seqlensK.size());
  return shape;
}

ForwardShape timingShape(const generator::KernelSpec &spec, const Bucket &bucket) {
  ForwardShape shape;
  if (boundedByTuningShape(spec)) {
    // The hinted problem exactly: its bucket's rounding up, or its heads laid out 16 a
    // sequence, would index past the tensors sized for it.
    const generator::Features::TuningShape &bound = spec.features.tuningShape;
    shape.batch = bound.batch;
    shape.headsQ = bound.headsQ;
    shape.headsKV = bound.headsKV;
    shape.seqQ = bound.seqQ;
    shape.seqK = bound.seqK;
    shape = withinTuningShape(spec, shape);  // sizes >= 1, KV heads a divisor
  } else {
    shape.batch = std::max(1, bucket.batchHeads / 16);
    shape.headsQ = shape.headsKV = std::max(1, bucket.batchHeads / shape.batch);
    shape.seqQ = bucket.seqQ;
    shape.seqK = bucket.seqK;
  }
  shape.headDim = spec.headDim;
  shape.headDimV = spec.headDimV;
  shape.layout = Layout::BSHD;
  shape.withLse = true;
  return shape;
}

std::vector<ForwardShape> correctnessShapes(const generator::KernelSpec &spec) {
  ForwardShape base;
  base.headDim = spec.headDim;
  base.headDimV = spec.headDimV;
  base.layout = Layout::BSHD;
  base.withLse = true;
  // 257 and 389 are prime: not multiples of any tile, so every edge path runs.
  ForwardShape a = base;
  a.batch = 1;
  a.headsQ = 2;
  a.headsKV = 2;
  a.seqQ = 257;
  a.seqK = 389;
  ForwardShape b = base;  // more queries than keys: causal rows that see no key; GQA
  b.batch = 2;
  b.headsQ = 2;
  b.headsKV = 1;
  b.seqQ = 389;
  b.seqK = 257;
  return {withinTuningShape(spec, a), withinTuningShape(spec, b)};
}

} // namespace flashjit::tuner
