// Content hashes used for cache keys.
#pragma once

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace flashjit {

// Lower-case hex SHA-256 of the bytes.
std::string sha256Hex(llvm::StringRef bytes);

// Fast non-cryptographic 64-bit hash (xxHash64) for blob checksums, as 16 hex digits.
std::string xxhashHex(llvm::StringRef bytes);

} // namespace flashjit
