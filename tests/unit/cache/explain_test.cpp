// explainMiss / explainBinaryMiss name the part of the key that had no match.
#include "tests/unit/cache/fixtures.h"

#include <gtest/gtest.h>

using namespace flashjit::cache;
using namespace flashjit::cache::testing;

namespace {

class CacheExplain : public ::testing::Test {
protected:
  void SetUp() override {
    CacheOptions options;
    options.userPath = "";
    auto opened = Cache::open(options);
    ASSERT_TRUE(bool(opened));
    cache = std::move(*opened);
    binary = makeBinary(1, 100, built);
    tuned = makeKey(1, built, "NVIDIA_H200.sm90.132sm");
    TuningRow t = makeTuning(tuned, binary);
    ASSERT_FALSE(cache->publish(&binary, &t));
    TuningKey other = tuned;
    other.bucket = "q4096.k4096.bh64";
    t = makeTuning(other, binary);
    ASSERT_FALSE(cache->publish(nullptr, &t));
  }
  bool says(const TuningKey &key, llvm::StringRef text) {
    std::string explanation = cache->explainMiss(key);
    bool ok = llvm::StringRef(explanation).contains(text);
    if (!ok)
      ADD_FAILURE() << "explanation: " << explanation << "\nexpected: " << text.str();
    return ok;
  }
  Versions built;
  std::unique_ptr<Cache> cache;
  BinaryRow binary;
  TuningKey tuned;
};

} // namespace

TEST_F(CacheExplain, NamesTheFieldThatDiffers) {
  TuningKey key = tuned;
  key.spec = "fwd_mma.fp16.d96.dv96.sm80";
  says(key, "no row for spec fwd_mma.fp16.d96.dv96.sm80");

  key = tuned;
  key.deviceKey = "sm90_132";
  says(key, "no row for device key sm90_132");
  says(key, "NVIDIA_H200.sm90.132sm"); // and where it is tuned

  key = tuned;
  key.generatorFingerprint = "beef";
  says(key, "generator fingerprint changed");

  key = tuned;
  key.protocolVersion = 9;
  says(key, "measurement protocol version differs");

  key = tuned;
  key.bucket = "q64.k64.bh8";
  says(key, "no row for bucket q64.k64.bh8");
  says(key, "q4096.k4096.bh64");

  says(tuned, "no miss");
}

TEST_F(CacheExplain, BinaryMissNamesTargetOrNvrtc) {
  auto explain = [&](llvm::StringRef keyText, llvm::StringRef target, llvm::StringRef nvrtc) {
    return cache->explainBinaryMiss(keyText, target, nvrtc);
  };
  EXPECT_NE(explain("fwd_mma.other/cfg", "sm_90a", "13.0").find("no binary for fwd_mma.other/cfg"),
            std::string::npos);
  EXPECT_NE(explain(binary.keyText, "sm_100a", "13.0").find("target differs"), std::string::npos);
  EXPECT_NE(explain(binary.keyText, "sm_90a", "12.8").find("NVRTC version differs"),
            std::string::npos);
  EXPECT_NE(explain(binary.keyText, "sm_90a", "13.0").find("source or compile options changed"),
            std::string::npos);
}
