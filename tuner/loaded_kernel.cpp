#include "tuner/loaded_kernel.h"

#include "support/error.h"

namespace flashjit::tuner {

llvm::Expected<runtime::CompiledBinary> compileEmitted(const generator::EmittedKernel &kernel,
                                                       const std::string &target) {
  runtime::CompileOptions options;
  options.target = target;
  options.options = kernel.options;
  return runtime::compile(kernel.source, options);
}

llvm::Expected<std::unique_ptr<ForwardKernel>>
ForwardKernel::load(llvm::StringRef cubin, llvm::StringRef entryName, LaunchGeometry geometry) {
  auto module = runtime::Module::load(cubin);
  if (!module)
    return module.takeError();
  auto kernel = (*module)->kernel(entryName);
  if (!kernel)
    return kernel.takeError();
  if (geometry.sharedBytes > 48 * 1024)
    if (auto err = kernel->setMaxDynamicSharedMemory(geometry.sharedBytes))
      return std::move(err);
  auto result = std::unique_ptr<ForwardKernel>(new ForwardKernel());
  auto regs = kernel->attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
  if (!regs)
    return regs.takeError();
  result->registers_ = *regs;
  result->module_ = std::move(*module);
  result->kernel_ = *kernel;
  result->geometry_ = geometry;
  return std::move(result);
}

llvm::Error ForwardKernel::launch(const FjForwardParams &params, CUstream stream) const {
  unsigned blocks = (unsigned)((params.seqlen_q + geometry_.blockM - 1) / geometry_.blockM);
  if (blocks == 0 || params.batch == 0 || params.heads_q == 0)
    return llvm::Error::success();  // nothing to compute
  void *args[] = {const_cast<FjForwardParams *>(&params)};
  return kernel_.launch(blocks, (unsigned)params.heads_q, (unsigned)params.batch,
                        (unsigned)geometry_.threads, (unsigned)geometry_.sharedBytes, stream,
                        args);
}

llvm::Expected<std::unique_ptr<ReferenceKernel>>
ReferenceKernel::build(generator::DType dtype, bool emulateLowPrecision,
                       const std::string &target) {
  auto emitted = generator::emitReference(dtype, emulateLowPrecision, target);
  if (!emitted)
    return emitted.takeError();
  auto binary = compileEmitted(*emitted, target);
  if (!binary)
    return binary.takeError();
  auto module = runtime::Module::load(binary->cubin);
  if (!module)
    return module.takeError();
  auto kernel = (*module)->kernel(emitted->entryName);
  if (!kernel)
    return kernel.takeError();
  auto result = std::unique_ptr<ReferenceKernel>(new ReferenceKernel());
  result->module_ = std::move(*module);
  result->kernel_ = *kernel;
  result->threads_ = emitted->threads;
  return std::move(result);
}

llvm::Error ReferenceKernel::launch(const FjForwardParams &params, int headDim, int headDimV,
                                    bool causal, CUstream stream) const {
  if (params.seqlen_q == 0 || params.batch == 0 || params.heads_q == 0)
    return llvm::Error::success();
  int isCausal = causal ? 1 : 0;
  void *args[] = {const_cast<FjForwardParams *>(&params), &headDim, &headDimV, &isCausal};
  return kernel_.launch((unsigned)params.seqlen_q, (unsigned)params.heads_q,
                        (unsigned)params.batch, (unsigned)threads_, 0, stream, args);
}

} // namespace flashjit::tuner
