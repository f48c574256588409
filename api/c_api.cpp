// The entry points that use a device: thin wrappers that run each body through
// guard(), so every failure becomes a status and a message.
#include "api/handles.h"
#include "api/status.h"

using namespace flashjit;

extern "C" {

fj_status fj_context_create(const fj_context_options *options, fj_context *context) {
  return api::guard("fj_context_create", [&]() -> llvm::Error {
    if (!context)
      return makeError(ErrorCode::InvalidValue, "context (the output pointer) is NULL");
    *context = nullptr;
    auto created = api::createContext(options);
    if (!created)
      return created.takeError();
    *context = *created;
    return llvm::Error::success();
  });
}

fj_status fj_context_destroy(fj_context context) {
  return api::guard("fj_context_destroy", [&] { return api::destroyContext(context); });
}

fj_status fj_context_info(fj_context context, struct fj_context_info *info) {
  return api::guard("fj_context_info", [&] { return api::contextInfo(context, info); });
}

fj_status fj_kernel_get(fj_context context, const fj_attention_desc *desc, fj_kernel *kernel) {
  return api::guard("fj_kernel_get", [&]() -> llvm::Error {
    if (!kernel)
      return makeError(ErrorCode::InvalidValue, "kernel (the output pointer) is NULL");
    *kernel = nullptr;
    auto got = api::getKernel(context, desc);
    if (!got)
      return got.takeError();
    *kernel = *got;
    return llvm::Error::success();
  });
}

fj_status fj_kernel_release(fj_kernel kernel) {
  return api::guard("fj_kernel_release", [&] { return api::releaseKernel(kernel); });
}

fj_status fj_forward(fj_kernel kernel, const fj_forward_args *args, void *stream) {
  return api::guard("fj_forward", [&] { return api::forward(kernel, args, stream); });
}

fj_status fj_block_mask_create(fj_kernel kernel, const fj_forward_args *args,
                               const fj_block_mask_options *options, void *stream,
                               fj_block_mask *mask) {
  return api::guard("fj_block_mask_create", [&]() -> llvm::Error {
    if (!mask)
      return makeError(ErrorCode::InvalidValue, "mask (the output pointer) is NULL");
    *mask = nullptr;
    auto created = api::createBlockMask(kernel, args, options, stream);
    if (!created)
      return created.takeError();
    *mask = *created;
    return llvm::Error::success();
  });
}

fj_status fj_block_mask_update(fj_block_mask mask, const fj_forward_args *args, void *stream) {
  return api::guard("fj_block_mask_update",
                    [&] { return api::updateBlockMask(mask, args, stream); });
}

fj_status fj_block_mask_destroy(fj_block_mask mask) {
  return api::guard("fj_block_mask_destroy", [&] { return api::destroyBlockMask(mask); });
}

fj_status fj_backward_workspace_size(fj_kernel kernel, const fj_backward_args *args,
                                     size_t *bytes) {
  return api::guard("fj_backward_workspace_size",
                    [&] { return api::backwardWorkspaceSize(kernel, args, bytes); });
}

fj_status fj_backward(fj_kernel kernel, const fj_backward_args *args, void *stream) {
  return api::guard("fj_backward", [&] { return api::backward(kernel, args, stream); });
}

fj_status fj_decode_workspace_size(fj_kernel kernel, const fj_decode_args *args,
                                   size_t *bytes) {
  return api::guard("fj_decode_workspace_size",
                    [&] { return api::decodeWorkspaceSize(kernel, args, bytes); });
}

fj_status fj_decode(fj_kernel kernel, const fj_decode_args *args, void *stream) {
  return api::guard("fj_decode", [&] { return api::decode(kernel, args, stream); });
}

fj_status fj_kv_append(fj_kernel kernel, const fj_kv_append_args *args, void *stream) {
  return api::guard("fj_kv_append", [&] { return api::kvAppend(kernel, args, stream); });
}

fj_status fj_forward_dispatch_info(fj_kernel kernel, const fj_forward_args *args,
                                   fj_dispatch_info *info) {
  return api::guard("fj_forward_dispatch_info",
                    [&] { return api::forwardDispatchInfo(kernel, args, info); });
}

fj_status fj_forward_workspace_size(fj_kernel kernel, const fj_forward_args *args,
                                    size_t *bytes) {
  return api::guard("fj_forward_workspace_size",
                    [&] { return api::forwardWorkspaceSize(kernel, args, bytes); });
}

fj_status fj_kernel_info(fj_kernel kernel, struct fj_kernel_info *info) {
  return api::guard("fj_kernel_info", [&] { return api::kernelInfo(kernel, info); });
}

fj_status fj_kernel_variant_info(fj_kernel kernel, int32_t index, fj_variant_info *info) {
  return api::guard("fj_kernel_variant_info",
                    [&] { return api::variantInfo(kernel, index, info); });
}

fj_status fj_kernel_source(fj_kernel kernel, int32_t index, const char **source,
                           size_t *length) {
  return api::guard("fj_kernel_source",
                    [&] { return api::kernelSource(kernel, index, source, length); });
}

} // extern "C"
