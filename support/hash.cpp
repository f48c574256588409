#include "support/hash.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/xxhash.h"

namespace flashjit {

std::string sha256Hex(llvm::StringRef bytes) {
  llvm::SHA256 hasher;
  hasher.update(bytes);
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

std::string xxhashHex(llvm::StringRef bytes) {
  return llvm::utohexstr(llvm::xxHash64(bytes), /*LowerCase=*/true, /*Width=*/16);
}

} // namespace flashjit
