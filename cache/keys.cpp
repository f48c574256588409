#include "cache/cache.h"

#include "support/hash.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit::cache {

// Fields in a fixed order, each named where a bare value would be ambiguous. publish()
// rejects fields containing '|', so the text (and so the hash) is unique per key.
std::string TuningKey::text() const {
  return llvm::formatv("{0}|{1}|{2}|gen={3}|protocol={4}", spec, bucket, deviceKey,
                       generatorFingerprint, protocolVersion)
      .str();
}

std::string TuningKey::hash() const { return sha256Hex(text()); }

} // namespace flashjit::cache
