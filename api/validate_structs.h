// The struct_size rules of validate.h, as templates (one instance per struct).
#pragma once

#include "support/env.h"
#include "support/error.h"

#include <cstring>

namespace flashjit::api {

template <typename T>
llvm::Error checkStructSize(size_t size, const char *name, const char *typeName) {
  if (size < sizeof(T))
    return makeError(ErrorCode::InvalidValue,
                     "{0}->struct_size is {1}, smaller than sizeof({2}) = {3}: set it with "
                     "sizeof or the _init function",
                     name, size, typeName, sizeof(T));
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
  std::memcpy(out, &value, sizeof(T));
  out->struct_size = size;
  std::memset(reinterpret_cast<unsigned char *>(out) + sizeof(T), 0, size - sizeof(T));
  return llvm::Error::success();
}

} // namespace flashjit::api
