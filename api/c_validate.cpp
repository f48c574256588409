// The entry points that need no device: status strings, the last error, version,
// struct initialisers and the validators (what fj_kernel_get / fj_forward check first).
#include "api/status.h"
#include "api/validate.h"
#include "support/env.h"

#include <cstring>

using namespace flashjit;

extern "C" {

const char *fj_status_string(fj_status status) {
  switch (status) {
  case FJ_SUCCESS: return "FJ_SUCCESS: success";
  case FJ_ERROR_INVALID_VALUE: return "FJ_ERROR_INVALID_VALUE: invalid value";
  case FJ_ERROR_NOT_SUPPORTED: return "FJ_ERROR_NOT_SUPPORTED: not supported";
  case FJ_ERROR_NO_DEVICE: return "FJ_ERROR_NO_DEVICE: no CUDA driver or device";
  case FJ_ERROR_COMPILE: return "FJ_ERROR_COMPILE: kernel compilation failed";
  case FJ_ERROR_CUDA: return "FJ_ERROR_CUDA: CUDA driver error";
  case FJ_ERROR_CACHE: return "FJ_ERROR_CACHE: kernel cache error";
  case FJ_ERROR_NOT_FOUND: return "FJ_ERROR_NOT_FOUND: not in the kernel caches";
  case FJ_ERROR_OUT_OF_MEMORY: return "FJ_ERROR_OUT_OF_MEMORY: out of memory";
  case FJ_ERROR_INTERNAL: return "FJ_ERROR_INTERNAL: internal error";
  }
  return "FJ_UNKNOWN_STATUS";
}

const char *fj_last_error_message(void) { return api::lastErrorMessage(); }

const char *fj_version(void) { return flashjitVersion(); }

void fj_context_options_init(fj_context_options *options) {
  if (!options)
    return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->tune_mode = FJ_TUNE_AUTO;
}

void fj_attention_desc_init(fj_attention_desc *desc) {
  if (!desc)
    return;
  std::memset(desc, 0, sizeof(*desc));
  desc->struct_size = sizeof(*desc);
}

void fj_forward_args_init(fj_forward_args *args) {
  if (!args)
    return;
  std::memset(args, 0, sizeof(*args));
  args->struct_size = sizeof(*args);
}

void fj_block_mask_options_init(fj_block_mask_options *options) {
  if (!options)
    return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
}

void fj_backward_args_init(fj_backward_args *args) {
  if (!args)
    return;
  std::memset(args, 0, sizeof(*args));
  args->struct_size = sizeof(*args);
}

void fj_decode_args_init(fj_decode_args *args) {
  if (!args)
    return;
  std::memset(args, 0, sizeof(*args));
  args->struct_size = sizeof(*args);
}

void fj_kv_append_args_init(fj_kv_append_args *args) {
  if (!args)
    return;
  std::memset(args, 0, sizeof(*args));
  args->struct_size = sizeof(*args);
}

fj_status fj_validate_attention_desc(const fj_attention_desc *desc) {
  return api::guard("fj_validate_attention_desc", [&]() -> llvm::Error {
    auto checked = api::checkDesc(desc);
    return checked ? llvm::Error::success() : checked.takeError();
  });
}

fj_status fj_validate_forward_args(const fj_attention_desc *desc, const fj_forward_args *args) {
  return api::guard("fj_validate_forward_args", [&]() -> llvm::Error {
    auto checked = api::checkDesc(desc);
    if (!checked)
      return checked.takeError();
    FjForwardParams params;
    bool noWork = false;
    return api::checkForwardArgs(*checked, args, params, noWork);
  });
}

fj_status fj_validate_backward_args(const fj_attention_desc *desc,
                                    const fj_backward_args *args) {
  return api::guard("fj_validate_backward_args", [&]() -> llvm::Error {
    auto checked = api::checkDesc(desc);
    if (!checked)
      return checked.takeError();
    FjBackwardParams params;
    bool noWork = false;
    return api::checkBackwardArgs(*checked, args, params, noWork);
  });
}

fj_status fj_validate_decode_args(const fj_attention_desc *desc, const fj_decode_args *args) {
  return api::guard("fj_validate_decode_args", [&]() -> llvm::Error {
    auto checked = api::checkDesc(desc);
    if (!checked)
      return checked.takeError();
    FjDecodeParams params;
    bool noWork = false;
    return api::checkDecodeArgs(*checked, args, params, noWork);
  });
}

fj_status fj_validate_kv_append_args(const fj_attention_desc *desc,
                                     const fj_kv_append_args *args) {
  return api::guard("fj_validate_kv_append_args", [&]() -> llvm::Error {
    auto checked = api::checkDesc(desc);
    if (!checked)
      return checked.takeError();
    FjDecodeParams params;
    bool noWork = false;
    return api::checkKvAppendArgs(*checked, args, params, noWork);
  });
}

} // extern "C"
