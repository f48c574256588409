// The byte layout of one input of the C API fuzzer, shared by the fuzz target and
// the seed writer:
//   byte 0        flags (kFlag* below)
//   next 8        fuzzed desc->struct_size   (used with kFlagDescSize)
//   next 8        fuzzed args->struct_size   (used with kFlagArgsSize)
//   sizeof(fj_attention_desc) bytes: the description (struct_size overwritten)
//   sizeof(fj_forward_args) bytes:   the arguments   (struct_size overwritten)
//   the rest      bytes past the known struct, as a newer header would send them
// Shorter inputs are zero-padded, so every input decodes.
#pragma once

#include "flashjit/flashjit.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace flashjit::fuzz {

enum : uint8_t {
  kFlagDescSize = 1,   // use the fuzzed desc struct_size
  kFlagArgsSize = 2,   // use the fuzzed args struct_size
  kFlagDescNull = 4,   // pass desc = NULL
  kFlagArgsNull = 8,   // pass args = NULL
  kFlagDescTail = 16,  // desc is followed by the tail bytes (struct_size grows to match)
  kFlagArgsTail = 32,  // args is followed by the tail bytes
};

constexpr size_t kHeaderBytes = 1 + 8 + 8;
constexpr size_t kMaxTail = 256;

struct ApiFuzzInput {
  uint8_t flags = 0;
  uint64_t descSize = sizeof(fj_attention_desc), argsSize = sizeof(fj_forward_args);
  fj_attention_desc desc{};
  fj_forward_args args{};
  std::vector<uint8_t> tail;

  static ApiFuzzInput decode(const uint8_t *data, size_t size) {
    std::vector<uint8_t> bytes(data, data + size);
    size_t fixed = kHeaderBytes + sizeof(fj_attention_desc) + sizeof(fj_forward_args);
    if (bytes.size() < fixed)
      bytes.resize(fixed, 0);
    ApiFuzzInput in;
    const uint8_t *p = bytes.data();
    in.flags = p[0];
    std::memcpy(&in.descSize, p + 1, 8);
    std::memcpy(&in.argsSize, p + 9, 8);
    std::memcpy(&in.desc, p + kHeaderBytes, sizeof(in.desc));
    std::memcpy(&in.args, p + kHeaderBytes + sizeof(in.desc), sizeof(in.args));
    size_t tail = std::min(bytes.size() - fixed, kMaxTail);
    in.tail.assign(bytes.begin() + fixed, bytes.begin() + fixed + tail);
    return in;
  }

  std::vector<uint8_t> encode() const {
    std::vector<uint8_t> bytes(kHeaderBytes + sizeof(desc) + sizeof(args));
    bytes[0] = flags;
    std::memcpy(bytes.data() + 1, &descSize, 8);
    std::memcpy(bytes.data() + 9, &argsSize, 8);
    std::memcpy(bytes.data() + kHeaderBytes, &desc, sizeof(desc));
    std::memcpy(bytes.data() + kHeaderBytes + sizeof(desc), &args, sizeof(args));
    bytes.insert(bytes.end(), tail.begin(), tail.end());
    return bytes;
  }
};

} // namespace flashjit::fuzz
