// What a TMA kernel (fwd_wgmma) can take, decided without a GPU and without allocating
// (fj_forward asks on every launch and sends the rest to fwd_mma).
#include "tuner/loaded_kernel.h"

#include "support/error.h"

#include <gtest/gtest.h>

using namespace flashjit;

namespace {

// BSHD, batch 2, 4 heads, 128 x 256, head dim 64: what TMA takes.
FjForwardParams good() {
  FjForwardParams p{};
  p.q = reinterpret_cast<const void *>(0x7f0000000000);
  p.k = reinterpret_cast<const void *>(0x7f0010000000);
  p.v = reinterpret_cast<const void *>(0x7f0020000000);
  p.batch = 2;
  p.heads_q = p.heads_kv = 4;
  p.seqlen_q = 128;
  p.seqlen_k = 256;
  p.q_row_stride = 4 * 64, p.q_head_stride = 64, p.q_batch_stride = 128 * 4 * 64;
  p.k_row_stride = 4 * 64, p.k_head_stride = 64, p.k_batch_stride = 256 * 4 * 64;
  p.v_row_stride = 4 * 64, p.v_head_stride = 64, p.v_batch_stride = 256 * 4 * 64;
  p.o = reinterpret_cast<void *>(0x7f0030000000);
  p.o_row_stride = 4 * 64, p.o_head_stride = 64, p.o_batch_stride = 128 * 4 * 64;
  return p;
}

// good() as a variable-length batch of two sequences (100 and 28 rows), packed row
// counts given.
FjForwardParams goodVarlen() {
  static const int cu[3] = {0, 100, 128};
  FjForwardParams p = good();
  p.cu_seqlens_q = p.cu_seqlens_k = cu;
  p.total_q = p.total_k = 128;
  return p;
}

std::string problemOf(const FjForwardParams &p) {
  const char *problem = tuner::tmaArgumentProblem(p);
  llvm::Error checked = tuner::checkTmaArguments(p);
  // The two answers agree.
  EXPECT_EQ(problem == nullptr, !checked) << (problem ? problem : "");
  if (checked) {
    EXPECT_EQ(takeErrorReport(std::move(checked)).code, ErrorCode::NotSupported);
  }
  return problem ? problem : "";
}

TEST(TmaArguments, TakesAlignedFixedLengthBatches) {
  EXPECT_EQ(problemOf(good()), "");
  FjForwardParams zero = good();
  zero.k_head_stride = zero.v_head_stride = 0;  // one KV head broadcast: encoded as 16
  zero.heads_kv = 1;
  EXPECT_EQ(problemOf(zero), "");
}

// A variable-length batch is one packed sequence to TMA (no batch strides), bounded by
// its packed row counts.
TEST(TmaArguments, TakesVariableLengthBatchesWithTheirRowCounts) {
  FjForwardParams varlen = goodVarlen();
  EXPECT_EQ(problemOf(varlen), "");
  varlen.q_batch_stride = 3;  // ignored with cu_seqlens
  EXPECT_EQ(problemOf(varlen), "");
}

TEST(TmaArguments, RefusesWhatFwdMmaMustTake) {
  FjForwardParams varlen = goodVarlen();
  varlen.total_k = 0;  // unknown
  EXPECT_NE(problemOf(varlen).find("cu_seqlens"), std::string::npos);

  FjForwardParams noKeys = good();
  noKeys.seqlen_k = 0;
  noKeys.k = noKeys.v = nullptr;
  EXPECT_NE(problemOf(noKeys).find("key"), std::string::npos);

  FjForwardParams misaligned = good();
  misaligned.v = reinterpret_cast<const void *>(0x7f0020000008);
  EXPECT_NE(problemOf(misaligned).find("aligned"), std::string::npos);

  // The C API checks strides only on dimensions of more than one element: batch 1 with
  // an odd batch stride is valid there, and not for TMA.
  FjForwardParams oddStride = good();
  oddStride.batch = 1;
  oddStride.q_batch_stride = 12345;
  long long bad = 0;
  ASSERT_NE(tuner::tmaArgumentProblem(oddStride, &bad), nullptr);
  EXPECT_EQ(bad, 12345);
  llvm::Error checked = tuner::checkTmaArguments(oddStride);
  ASSERT_TRUE(bool(checked));
  EXPECT_NE(takeErrorReport(std::move(checked)).message.find("got 12345"), std::string::npos);

  FjForwardParams huge = good();
  huge.k_batch_stride = 1ll << 39;  // 2^40 bytes: beyond a tensor map's strides
  EXPECT_NE(problemOf(huge).find("strides"), std::string::npos);
}

// O goes out through a tensor map only where one describes it exactly; elsewhere the
// kernel stores it itself (the arguments are still taken).
TEST(TmaArguments, StoresOutputByTmaWhereItsMapFits) {
  EXPECT_TRUE(tuner::outputByTma(good()));

  FjForwardParams varlen = goodVarlen();  // a tile may end inside the next sequence's rows
  EXPECT_EQ(problemOf(varlen), "");
  EXPECT_FALSE(tuner::outputByTma(varlen));

  FjForwardParams misaligned = good();
  misaligned.o = reinterpret_cast<void *>(0x7f0030000008);
  EXPECT_EQ(problemOf(misaligned), "");
  EXPECT_FALSE(tuner::outputByTma(misaligned));

  FjForwardParams oddRows = good();
  oddRows.o_row_stride = 4 * 64 + 4;
  EXPECT_FALSE(tuner::outputByTma(oddRows));

  FjForwardParams sharedHead = good();  // heads written over one another
  sharedHead.o_head_stride = 0;
  EXPECT_FALSE(tuner::outputByTma(sharedHead));
  sharedHead.heads_q = sharedHead.heads_kv = 1;  // one head: the stride is never used
  EXPECT_TRUE(tuner::outputByTma(sharedHead));

  FjForwardParams huge = good();
  huge.o_batch_stride = 1ll << 39;
  EXPECT_FALSE(tuner::outputByTma(huge));
}

} // namespace
