// The struct_size rules of validate.h, as templates (one instance per struct).
#pragma once

#include "support/env.h"
#include "support/error.h"

#include <cstring>

#include "llvm/Support/FormatVariadic.h"

#include <cstddef>
#include <string>

namespace flashjit::api {

// The smallest struct_size a caller may pass: sizeof(T), or, for a struct that grew in a
// later version, its size in the version that introduced it (the fields appended since
// then read as zero on input and are not written on output).
template <typename T> constexpr size_t minStructSize() { return sizeof(T); }
template <> constexpr size_t minStructSize<fj_attention_desc>() {
  return offsetof(fj_attention_desc, backward);  // 0.1
}
template <> constexpr size_t minStructSize<fj_forward_args>() {
  return offsetof(fj_forward_args, alibi_slopes);  // 0.2
}
template <> constexpr size_t minStructSize<fj_backward_args>() {
  return offsetof(fj_backward_args, alibi_slopes);  // 0.2
}
template <> constexpr size_t minStructSize<struct fj_kernel_info>() {
  return offsetof(struct fj_kernel_info, backward_family);  // 0.1
}
template <> constexpr size_t minStructSize<fj_variant_info>() {
  return offsetof(fj_variant_info, calls);  // 0.1
}
template <> constexpr size_t minStructSize<fj_decode_args>() {
  return offsetof(fj_decode_args, k_descale);  // 0.4
}
template <> constexpr size_t minStructSize<fj_kv_append_args>() {
  return offsetof(fj_kv_append_args, k_descale);  // 0.4
}
// The version whose size minStructSize is, for messages.
template <typename T> constexpr const char *minStructVersion() { return "0.1"; }
template <> constexpr const char *minStructVersion<fj_forward_args>() { return "0.2"; }
template <> constexpr const char *minStructVersion<fj_backward_args>() { return "0.2"; }
template <> constexpr const char *minStructVersion<fj_decode_args>() { return "0.4"; }
template <> constexpr const char *minStructVersion<fj_kv_append_args>() { return "0.4"; }

// How many of an older caller's `size` bytes are fields. A version's sizeof may end in
// padding where a later version put a field: those bytes are whatever the caller's
// compiler left there (a struct filled field by field), not a request, so they read as
// zero. fj_attention_desc of 0.2 ends with `backward` and 4 bytes of padding, where
// `window` now is.
template <typename T> constexpr size_t fieldBytes(size_t size) { return size; }
// A version whose fields end at `fields` had sizeof `fields` rounded up to the struct's
// alignment: a size in (fields, that] is that version's, its tail padding.
constexpr size_t versionFields(size_t size, size_t fields, size_t align) {
  const size_t padded = (fields + align - 1) / align * align;
  return size <= padded && size > fields ? fields : size;
}
template <> constexpr size_t fieldBytes<fj_attention_desc>(size_t size) {
  constexpr size_t align = alignof(fj_attention_desc);
  constexpr size_t fields02 = offsetof(fj_attention_desc, backward) + sizeof(int32_t);
  static_assert(offsetof(fj_attention_desc, window) == fields02,
                "window is the first field after 0.2's (in its padding)");
  // 0.4 ends with `decode` and 4 bytes of padding (now reserved_04, never read), so
  // its sizeof is where `tune_lengths` starts.
  constexpr size_t fields04 = offsetof(fj_attention_desc, decode) + sizeof(int32_t);
  static_assert(offsetof(fj_attention_desc, tune_lengths) == fields04 + sizeof(int32_t) &&
                    offsetof(fj_attention_desc, tune_lengths) % alignof(fj_attention_desc) == 0,
                "tune_lengths starts at 0.4's sizeof");
  // 0.6 ends with `tune_lengths` and 4 bytes of padding (now reserved_06, never read), so
  // its sizeof is where `out_dtype` starts.
  constexpr size_t fields06 = offsetof(fj_attention_desc, tune_lengths) + sizeof(int32_t);
  static_assert(offsetof(fj_attention_desc, out_dtype) == fields06 + sizeof(int32_t) &&
                    offsetof(fj_attention_desc, out_dtype) % alignof(fj_attention_desc) == 0,
                "out_dtype starts at 0.6's sizeof");
  // 0.7 ends with `out_dtype` and 4 bytes of padding (now reserved_07, never read), so
  // its sizeof is where `kv_cache_dtype` starts.
  constexpr size_t fields07 = offsetof(fj_attention_desc, out_dtype) + sizeof(int32_t);
  static_assert(offsetof(fj_attention_desc, kv_cache_dtype) == fields07 + sizeof(int32_t) &&
                    offsetof(fj_attention_desc, kv_cache_dtype) % alignof(fj_attention_desc) == 0,
                "kv_cache_dtype starts at 0.7's sizeof");
  return versionFields(
      versionFields(versionFields(versionFields(size, fields02, align), fields04, align),
                    fields06, align),
      fields07, align);
}

// The host pointer field (one the library dereferences) that an older version's
// struct_size would cut: read up to `bytes`, it would be the caller's low bytes and
// zeros, an address nobody passed. NULL when `bytes` cuts none. No version of a struct
// ends inside a field, so such a size is a wrong one, never an old one.
template <typename T> constexpr const char *cutHostPointer(size_t) { return nullptr; }
template <> constexpr const char *cutHostPointer<fj_attention_desc>(size_t bytes) {
  struct Field {
    size_t offset;
    const char *name;
  };
  constexpr Field fields[] = {{offsetof(fj_attention_desc, score_mod), "score_mod"},
                              {offsetof(fj_attention_desc, mask_mod), "mask_mod"},
                              {offsetof(fj_attention_desc, tuning_mod_args), "tuning_mod_args"}};
  for (const Field &f : fields)
    if (bytes > f.offset && bytes < f.offset + sizeof(void *))
      return f.name;
  return nullptr;
}

template <> constexpr const char *cutHostPointer<fj_forward_args>(size_t bytes) {
  constexpr size_t at = offsetof(fj_forward_args, block_mask);
  return bytes > at && bytes < at + sizeof(void *) ? "block_mask" : nullptr;
}

template <> constexpr const char *cutHostPointer<fj_backward_args>(size_t bytes) {
  constexpr size_t at = offsetof(fj_backward_args, block_mask);
  return bytes > at && bytes < at + sizeof(void *) ? "block_mask" : nullptr;
}

template <typename T>
llvm::Error checkStructSize(size_t size, const char *name, const char *typeName) {
  if (size < minStructSize<T>())
    return makeError(ErrorCode::InvalidValue,
                     "{0}->struct_size is {1}, smaller than sizeof({2}) = {3}{4}: set it "
                     "with sizeof or the _init function",
                     name, size, typeName, sizeof(T),
                     minStructSize<T>() < sizeof(T)
                         ? llvm::formatv(" (or {0}, its size in flashjit {1})",
                                         minStructSize<T>(), minStructVersion<T>()).str()
                         : std::string());
  if (size > kMaxStructSize)
    return makeError(ErrorCode::InvalidValue,
                     "{0}->struct_size is {1}: not a plausible size of {2} (this version's "
                     "is {3}); is it set?",
                     name, size, typeName, sizeof(T));
  return llvm::Error::success();
}

template <typename T>
llvm::Error copyInStruct(const T *in, const char *name, const char *typeName, T &out) {
  if (!in)
    return makeError(ErrorCode::InvalidValue, "{0} is NULL", name);
  size_t size = in->struct_size;
  if (llvm::Error error = checkStructSize<T>(size, name, typeName))
    return error;
  // Fields of a newer version: fine while unused (zero), else we would ignore a
  // request the caller made.
  const unsigned char *bytes = reinterpret_cast<const unsigned char *>(in);
  if (size < sizeof(T)) {  // an older version's struct: what it lacks reads as zero
    if (const char *field = cutHostPointer<T>(fieldBytes<T>(size)))
      return makeError(ErrorCode::InvalidValue,
                       "{0}->struct_size is {1}: it ends inside the pointer `{2}`, which no "
                       "version of {3} does (this version's sizeof is {4}); set it with "
                       "sizeof or the _init function",
                       name, size, field, typeName, sizeof(T));
    std::memset(&out, 0, sizeof(T));
    std::memcpy(&out, in, fieldBytes<T>(size));
    return llvm::Error::success();
  }
  for (size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0)
      return makeError(ErrorCode::NotSupported,
                       "{0} has struct_size {1} and a non-zero byte at offset {2}: a field "
                       "that this version of flashjit ({3}, sizeof({4}) = {5}) does not know",
                       name, size, i, flashjitVersion(), typeName, sizeof(T));
  std::memcpy(&out, in, sizeof(T));
  return llvm::Error::success();
}

template <typename T>
llvm::Error copyOutStruct(const T &value, T *out, const char *name, const char *typeName) {
  if (!out)
    return makeError(ErrorCode::InvalidValue, "{0} is NULL", name);
  size_t size = out->struct_size;
  if (llvm::Error error = checkStructSize<T>(size, name, typeName))
    return error;
  if (size < sizeof(T)) {  // an older version's struct: only the fields it has
    std::memcpy(out, &value, size);
    out->struct_size = size;
    return llvm::Error::success();
  }
  std::memcpy(out, &value, sizeof(T));
  out->struct_size = size;
  std::memset(reinterpret_cast<unsigned char *>(out) + sizeof(T), 0, size - sizeof(T));
  return llvm::Error::success();
}

} // namespace flashjit::api
