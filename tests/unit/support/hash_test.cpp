#include "support/error.h"
#include "support/hash.h"

#include <gtest/gtest.h>

using namespace flashjit;

TEST(Hash, Sha256OfKnownInput) {
  EXPECT_EQ(sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Hash, XxhashIsSixteenHexDigits) {
  EXPECT_EQ(xxhashHex("").size(), 16u);
  EXPECT_NE(xxhashHex("a"), xxhashHex("b"));
}

TEST(Error, ReportKeepsCodeAndMessage) {
  ErrorReport report = takeErrorReport(makeError(ErrorCode::NotSupported, "head_dim {0}", 12));
  EXPECT_EQ(report.code, ErrorCode::NotSupported);
  EXPECT_EQ(report.message, "head_dim 12");
  ErrorReport other = takeErrorReport(llvm::createStringError(
      std::make_error_code(std::errc::io_error), "disk"));
  EXPECT_EQ(other.code, ErrorCode::Internal);
}
