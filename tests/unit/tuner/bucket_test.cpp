// Shape buckets: rounding, keys, distance, and the dispatch of a launch to its
// bucket's winner or the nearest tuned bucket (no GPU).
#include "tuner/bucket.h"
#include "tuner/operation.h"
#include "tuner/tuner.h"

#include <gtest/gtest.h>

#include <vector>

using namespace flashjit;
using tuner::Bucket;
using tuner::Selection;
using tuner::Tuner;

namespace {

TEST(Bucket, RoundsEachSizeUpToAPowerOfTwo) {
  Bucket b = Bucket::forShape(1000, 1025, 48);
  EXPECT_EQ(b.seqQ, 1024);
  EXPECT_EQ(b.seqK, 2048);
  EXPECT_EQ(b.batchHeads, 64);
  EXPECT_EQ(Bucket::forShape(1024, 1024, 32), (Bucket{1024, 1024, 32}));
  EXPECT_EQ(Bucket::forShape(1, 1, 1), (Bucket{1, 1, 1}));
  EXPECT_EQ(Bucket::forShape(0, -5, 0), (Bucket{1, 1, 1}));
  EXPECT_EQ(Bucket::forShape(3, 5, 17), (Bucket{4, 8, 32}));
  EXPECT_EQ(Bucket::forShape(2000000000, 1, 1).seqQ, 1 << 30) << "no overflow";
}

TEST(Bucket, KeyRoundTrips) {
  Bucket b{2048, 512, 64};
  EXPECT_EQ(b.key(), "q2048.k512.bh64");
  auto parsed = Bucket::parse(b.key());
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(*parsed, b);
  for (const char *bad : {"", "q1024.k1024", "q1000.k1024.bh64", "k1024.q1024.bh64",
                          "q1024.k1024.bh0", "q1024.k1024.bh64.x", "qx.k1.bh1"}) {
    auto p = Bucket::parse(bad);
    EXPECT_FALSE(bool(p)) << bad;
    llvm::consumeError(p.takeError());
  }
}

TEST(Bucket, DistanceCountsDoublings) {
  Bucket a{1024, 1024, 32};
  EXPECT_EQ(a.distance(a), 0);
  EXPECT_DOUBLE_EQ(a.distance({2048, 1024, 32}), 1);
  EXPECT_DOUBLE_EQ(a.distance({256, 1024, 32}), 2);
  EXPECT_DOUBLE_EQ(a.distance({2048, 2048, 64}), 3);
  EXPECT_DOUBLE_EQ(a.distance({2048, 512, 32}), 2) << "|+1| + |-1|";
  EXPECT_DOUBLE_EQ(Bucket({2048, 2048, 64}).distance(a), 3) << "symmetric";
}

TEST(Bucket, NearestPrefersExactThenNearestThenSmaller) {
  std::vector<Bucket> tuned = {{1024, 1024, 32}, {4096, 4096, 32}, {16384, 16384, 32}};
  EXPECT_EQ(tuner::nearestBucket(tuned, {4096, 4096, 32}), 1);
  EXPECT_EQ(tuner::nearestBucket(tuned, {8192, 8192, 32}), 1) << "distance 2 vs 2: smaller";
  EXPECT_EQ(tuner::nearestBucket(tuned, {16384, 8192, 32}), 2) << "distance 1 vs 3";
  EXPECT_EQ(tuner::nearestBucket(tuned, {512, 512, 32}), 0);
  EXPECT_EQ(tuner::nearestBucket(tuned, {1024, 1024, 1}), 0);
  EXPECT_EQ(tuner::nearestBucket({}, {1024, 1024, 32}), -1);
  // The order of the tuned list does not change the answer.
  std::vector<Bucket> reversed(tuned.rbegin(), tuned.rend());
  EXPECT_EQ(reversed[tuner::nearestBucket(reversed, {8192, 8192, 32})], tuned[1]);
}

TEST(Bucket, LengthLadderSpansTheLengthsAtATrainingStepsTokens) {
  // No batch hinted: 16384 tokens per step, so batch x length stays 16k down to 1 sequence.
  std::vector<Bucket> ladder = tuner::lengthLadder(/*headsQ=*/16, /*batch=*/0);
  std::vector<Bucket> expected = {{512, 512, 512},    {1024, 1024, 256}, {2048, 2048, 128},
                                  {4096, 4096, 64},   {8192, 8192, 32},  {16384, 16384, 16}};
  EXPECT_EQ(ladder, expected);
  EXPECT_EQ(tuner::ladderBatch(1024), 16);
  EXPECT_EQ(tuner::ladderBatch(65536), 1) << "at least one sequence";
  // A hinted batch holds at every length; heads that are not powers of two round up.
  for (const Bucket &b : tuner::lengthLadder(/*headsQ=*/12, /*batch=*/3))
    EXPECT_EQ(b.batchHeads, 64) << b.key();
  // Every length is a power of two from 512 to 16384, each once.
  ASSERT_EQ(ladder.size(), 6u);
  for (size_t i = 0; i < ladder.size(); ++i)
    EXPECT_EQ(ladder[i].seqQ, tuner::kLadderMinLength << i);
}

TEST(Bucket, TimingShapeSplitsBatchAndHeads) {
  generator::KernelSpec spec;
  spec.headDim = spec.headDimV = 64;
  auto s = tuner::timingShape(spec, {4096, 2048, 64});
  EXPECT_EQ(s.batch, 4);
  EXPECT_EQ(s.headsQ, 16);
  EXPECT_EQ(s.headsKV, 16);
  EXPECT_EQ(s.seqQ, 4096);
  EXPECT_EQ(s.seqK, 2048);
  EXPECT_EQ(s.headDim, 64);
  EXPECT_EQ(s.layout, tuner::Layout::BSHD);
  auto small = tuner::timingShape(spec, {128, 128, 4});
  EXPECT_EQ(small.batch, 1);
  EXPECT_EQ(small.headsQ, 4);
}

TEST(Bucket, CorrectnessShapesAreAwkward) {
  generator::KernelSpec spec;
  auto shapes = tuner::correctnessShapes(spec);
  ASSERT_GE(shapes.size(), 2u);
  bool qShorter = false, kShorter = false, gqa = false;
  for (const auto &s : shapes) {
    EXPECT_NE(s.seqQ % 16, 0);
    EXPECT_NE(s.seqK % 16, 0);
    qShorter |= s.seqQ < s.seqK;
    kShorter |= s.seqQ > s.seqK;
    gqa |= s.headsKV < s.headsQ;
  }
  EXPECT_TRUE(qShorter && kShorter && gqa);
}

// User code that reads args.tensor runs while tuning on tensors sized for the hinted
// shape: every problem a tune runs (each family's checks, the timing problem) stays
// inside it, whatever the bucket rounds to; without a known shape nothing changes.
TEST(Bucket, TensorReadingCodeStaysInsideItsTuningShape) {
  const generator::Features::TuningShape bound{3, 6, 2, 300, 200};
  for (generator::Family family : {generator::Family::FwdMma, generator::Family::BwdMma,
                                   generator::Family::DecMma}) {
    generator::KernelSpec spec;
    spec.family = family;
    spec.features.maskMod = "return ((const int *)args.tensor[0])[kv_idx] != 0;";
    spec.features.hasTuningArgs = true;
    spec.features.tuningShape = bound;
    SCOPED_TRACE(generator::familyName(family).str());
    ASSERT_TRUE(tuner::boundedByTuningShape(spec));
    const tuner::Operation &operation = tuner::operationFor(family);
    std::vector<tuner::ForwardShape> shapes = operation.correctnessShapes(spec);
    ASSERT_FALSE(shapes.empty());
    shapes.push_back(tuner::timingShape(spec, Bucket::forShape(300, 200, 18)));
    for (const tuner::ForwardShape &s : shapes) {
      EXPECT_LE(s.batch, bound.batch);
      EXPECT_LE(s.headsQ, bound.headsQ);
      EXPECT_EQ(s.headsQ % s.headsKV, 0);
      EXPECT_LE(s.seqQ, bound.seqQ);
      EXPECT_LE(s.seqK, bound.seqK);
      for (int n : s.seqlensK)
        EXPECT_LE(n, bound.seqK);
      if (!s.seqlensK.empty())
        EXPECT_EQ((int)s.seqlensK.size(), s.batch);
    }
    const tuner::ForwardShape timed = shapes.back();
    EXPECT_EQ(timed.batch, 3) << "the hinted problem exactly";
    EXPECT_EQ(timed.headsQ, 6);
    EXPECT_EQ(timed.headsKV, 2);
    EXPECT_EQ(timed.seqQ, 300);
    EXPECT_EQ(timed.seqK, 200);

    spec.features.tuningShape = {};  // not known (a spec made outside the C API)
    EXPECT_FALSE(tuner::boundedByTuningShape(spec));
    EXPECT_EQ(tuner::timingShape(spec, Bucket::forShape(300, 200, 18)).seqQ, 512);
    spec.features.tuningShape = bound;
    spec.features.maskMod = "return kv_idx < 100;";  // reads no tensor: the tuner's shapes
    EXPECT_FALSE(tuner::boundedByTuningShape(spec));
    EXPECT_EQ(tuner::timingShape(spec, Bucket::forShape(300, 200, 18)).seqK, 256);
  }
}

// Clamping keeps a shape valid: one length a sequence, each at least 1, KV heads that
// divide the query heads.
TEST(Bucket, ClampingKeepsAShapeValid) {
  generator::KernelSpec spec;
  spec.features.scoreMod = "return score + ((const float *)args.tensor[0])[q_idx];";
  spec.features.hasTuningArgs = true;
  spec.features.tuningShape = {1, 3, 3, 1, 40};
  tuner::ForwardShape s;
  s.batch = 3, s.headsQ = 8, s.headsKV = 2, s.seqQ = 7, s.seqK = 2050;
  s.seqlensK = {1003, 77, 2050};
  tuner::ForwardShape c = tuner::withinTuningShape(spec, s);
  EXPECT_EQ(c.batch, 1);
  EXPECT_EQ(c.headsQ, 3);
  EXPECT_EQ(c.headsKV, 1) << "2 does not divide 3";
  EXPECT_EQ(c.seqQ, 1);
  EXPECT_EQ(c.seqlensK, std::vector<int>{40});
  EXPECT_EQ(c.seqK, 40);
}

Selection variant(Bucket b, const char *tile) {
  Selection s;
  s.bucket = b;
  s.tile = *generator::TileConfig::parse(tile);
  return s;
}

TEST(Dispatch, ExactBucketThenNearestWithANote) {
  std::vector<Selection> variants = {variant({1024, 1024, 32}, "bm64.bn64.w4.s2"),
                                     variant({8192, 8192, 32}, "bm128.bn64.w8.s2")};
  const Selection *exact = Tuner::dispatch(variants, {1024, 1024, 32});
  ASSERT_EQ(exact, &variants[0]);
  EXPECT_EQ(Tuner::dispatchNote(*exact, {1024, 1024, 32}), "tuned for q1024.k1024.bh32");

  const Selection *near = Tuner::dispatch(variants, Bucket::forShape(6000, 6000, 20));
  ASSERT_EQ(near, &variants[1]);
  EXPECT_EQ(Tuner::dispatchNote(*near, Bucket::forShape(6000, 6000, 20)),
            "tuned for q8192.k8192.bh32")
      << "6000 x 6000 x 20 rounds up to the tuned bucket";
}

TEST(Dispatch, NeverTunedBucketFallsBackToTheNearest) {
  std::vector<Selection> variants = {variant({1024, 1024, 32}, "bm64.bn64.w4.s2"),
                                     variant({8192, 8192, 32}, "bm128.bn64.w8.s2")};
  Bucket wanted{2048, 2048, 32};
  const Selection *chosen = Tuner::dispatch(variants, wanted);
  ASSERT_EQ(chosen, &variants[0]);
  EXPECT_EQ(Tuner::dispatchNote(*chosen, wanted),
            "bucket q2048.k2048.bh32 never tuned: using nearest tuned bucket q1024.k1024.bh32");
  EXPECT_EQ(Tuner::dispatch({}, wanted), nullptr) << "nothing tuned: the caller's default";
}

} // namespace

TEST(Bucket, ADecodeBucketCountsPackedRowsAndKvHeadPairs) {
  // GQA 32/8 at batch 16: 4 query rows packed per KV head, 128 (sequence, KV head) pairs.
  EXPECT_EQ(Bucket::forDecode(1, 4096, 16, 32, 8), (Bucket{4, 4096, 128}));
  // MHA: one row per head, batch x heads pairs, as the forward's bucket would say.
  EXPECT_EQ(Bucket::forDecode(1, 1000, 3, 32, 32), (Bucket{1, 1024, 128}));
  // MQA, 7 speculative rows of 64 heads: 448 packed rows.
  EXPECT_EQ(Bucket::forDecode(7, 70000, 2, 64, 1), (Bucket{512, 131072, 2}));
  // Nonsense sizes still give a bucket (the API has rejected them before dispatch).
  EXPECT_EQ(Bucket::forDecode(0, 0, 0, 8, 0), (Bucket{8, 1, 1}));
  EXPECT_EQ(Bucket::forDecode(64, 1LL << 40, 1LL << 40, 1 << 20, 1).seqK, 1 << 30)
      << "no overflow";
  EXPECT_EQ(Bucket::forDecode(64, 1, 1LL << 40, 1 << 20, 1 << 20).batchHeads, 1 << 30);
}
