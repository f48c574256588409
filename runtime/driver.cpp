#include "runtime/driver.h"

#include "runtime/driver_api.h"
#include "support/error.h"

#include <algorithm>
#include <utility>

namespace flashjit::runtime {

using detail::driver;

std::string DeviceProperties::target() const {
  // The "a" variants unlock the arch-specific instructions (wgmma, setmaxnreg, tcgen05)
  // that our Hopper and Blackwell kernels use; cubins are per exact target anyway.
  bool archSpecific = (ccMajor == 9 || ccMajor == 10) && ccMinor == 0;
  return llvm::formatv("sm_{0}{1}{2}", ccMajor, ccMinor, archSpecific ? "a" : "").str();
}

std::string DeviceProperties::deviceKey() const {
  std::string key = name;
  std::replace(key.begin(), key.end(), ' ', '_');
  return llvm::formatv("{0}.sm{1}{2}.{3}sm", key, ccMajor, ccMinor, smCount).str();
}

llvm::Error driverAvailable() { return driver().takeError(); }

llvm::Expected<int> deviceCount() {
  int count = 0;
  if (llvm::Error error = FLASHJIT_CU(cuDeviceGetCount)(&count))
    return error;
  return count;
}

llvm::Expected<std::string> driverVersion() {
  int version = 0; // 1000 * major + 10 * minor
  if (llvm::Error error = FLASHJIT_CU(cuDriverGetVersion)(&version))
    return error;
  return llvm::formatv("{0}.{1}", version / 1000, version % 1000 / 10).str();
}

// ---- Device ----

static llvm::Expected<DeviceProperties> readProperties(int ordinal, CUdevice device) {
  DeviceProperties props;
  props.ordinal = ordinal;
  char name[256] = {};
  if (llvm::Error error = FLASHJIT_CU(cuDeviceGetName)(name, int(sizeof(name)), device))
    return error;
  props.name = name;
  if (llvm::Error error = FLASHJIT_CU(cuDeviceTotalMem)(&props.totalMemoryBytes, device))
    return error;
  const std::pair<int *, CUdevice_attribute> attributes[] = {
      {&props.ccMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {&props.ccMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {&props.smCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {&props.maxSharedPerBlockOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
      {&props.maxSharedPerSM, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR},
      {&props.maxRegistersPerSM, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR},
      {&props.maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {&props.l2Bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
      {&props.clockKHz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE},
      {&props.memoryClockKHz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE},
      {&props.memoryBusWidthBits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH},
  };
  for (auto [field, attribute] : attributes)
    if (llvm::Error error = FLASHJIT_CU(cuDeviceGetAttribute)(field, attribute, device))
      return error;
  return props;
}

llvm::Expected<std::unique_ptr<Device>> Device::open(int ordinal) {
  auto count = deviceCount();
  if (!count)
    return count.takeError();
  if (ordinal < 0 || ordinal >= *count)
    return makeError(ErrorCode::InvalidValue, "no CUDA device {0} (the driver reports {1})",
                     ordinal, *count);
  CUdevice device = 0;
  if (llvm::Error error = FLASHJIT_CU(cuDeviceGet)(&device, ordinal))
    return error;
  CUcontext context = nullptr;
  if (llvm::Error error = FLASHJIT_CU(cuDevicePrimaryCtxRetain)(&context, device))
    return error;
  auto props = readProperties(ordinal, device);
  if (!props) {
    llvm::consumeError(FLASHJIT_CU(cuDevicePrimaryCtxRelease)(device));
    return props.takeError();
  }
  std::unique_ptr<Device> opened(new Device(ordinal, device, context, std::move(*props)));
  if (llvm::Error error = opened->makeCurrent())
    return error; // the destructor releases the context
  return opened;
}

Device::Device(int ordinal, CUdevice device, CUcontext context, DeviceProperties props)
    : ordinal_(ordinal), device_(device), context_(context), props_(std::move(props)) {}

Device::~Device() { llvm::consumeError(FLASHJIT_CU(cuDevicePrimaryCtxRelease)(device_)); }

llvm::Error Device::makeCurrent() const { return FLASHJIT_CU(cuCtxSetCurrent)(context_); }

llvm::Error Device::synchronize() const {
  if (llvm::Error error = makeCurrent())
    return error;
  return FLASHJIT_CU(cuCtxSynchronize)();
}

// ---- DeviceBuffer ----

llvm::Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  if (bytes == 0)
    return makeError(ErrorCode::InvalidValue, "cannot allocate 0 bytes of device memory");
  DeviceBuffer buffer;
  if (llvm::Error error = FLASHJIT_CU(cuMemAlloc)(&buffer.ptr_, bytes))
    return error;
  buffer.size_ = bytes;
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_)
    llvm::consumeError(FLASHJIT_CU(cuMemFree)(ptr_));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(size_, other.size_);
  return *this; // `other` frees what this held
}

static llvm::Error checkRange(size_t offset, size_t bytes, size_t size) {
  if (offset > size || bytes > size - offset)
    return makeError(ErrorCode::InvalidValue,
                     "{0} bytes at offset {1} do not fit a buffer of {2} bytes", bytes, offset,
                     size);
  return llvm::Error::success();
}

llvm::Error DeviceBuffer::upload(const void *host, size_t bytes, size_t offset) {
  if (llvm::Error error = checkRange(offset, bytes, size_))
    return error;
  return FLASHJIT_CU(cuMemcpyHtoD)(ptr_ + offset, host, bytes);
}

llvm::Error DeviceBuffer::download(void *host, size_t bytes, size_t offset) const {
  if (llvm::Error error = checkRange(offset, bytes, size_))
    return error;
  return FLASHJIT_CU(cuMemcpyDtoH)(host, ptr_ + offset, bytes);
}

llvm::Error DeviceBuffer::fill(unsigned char value) {
  return FLASHJIT_CU(cuMemsetD8)(ptr_, value, size_);
}

llvm::Error DeviceBuffer::fillWordsAsync(uint32_t value, size_t offset, size_t count,
                                         CUstream stream) {
  if (llvm::Error error = checkRange(offset, 4 * count, size_))
    return error;
  return runtime::fillWordsAsync(ptr_ + offset, value, count, stream);
}

llvm::Error fillWordsAsync(CUdeviceptr ptr, uint32_t value, size_t count, CUstream stream) {
  return FLASHJIT_CU(cuMemsetD32Async)(ptr, value, count, stream);
}

llvm::Error DeviceBuffer::copyFrom(const DeviceBuffer &source, size_t bytes, CUstream stream) {
  if (bytes > size_ || bytes > source.size_)
    return makeError(ErrorCode::InvalidValue,
                     "copy of {0} bytes between buffers of {1} and {2} bytes", bytes,
                     source.size_, size_);
  return FLASHJIT_CU(cuMemcpyDtoDAsync)(ptr_, source.ptr_, bytes, stream);
}

// ---- Kernel and Module ----

llvm::Error Kernel::setMaxDynamicSharedMemory(int bytes) const {
  return FLASHJIT_CU(cuFuncSetAttribute)(
      function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

llvm::Expected<int> Kernel::attribute(CUfunction_attribute attribute) const {
  int value = 0;
  if (llvm::Error error = FLASHJIT_CU(cuFuncGetAttribute)(&value, attribute, function_))
    return error;
  return value;
}

llvm::Error Kernel::launch(unsigned gridX, unsigned gridY, unsigned gridZ, unsigned blockX,
                           unsigned sharedBytes, CUstream stream, void **params) const {
  if (!function_)
    return makeError(ErrorCode::InvalidValue, "launch of an empty Kernel");
  return FLASHJIT_CU(cuLaunchKernel)(function_, gridX, gridY, gridZ, blockX, 1u, 1u,
                                     sharedBytes, stream, params, nullptr);
}

llvm::Error Kernel::launchDependent(unsigned gridX, unsigned gridY, unsigned gridZ,
                                    unsigned blockX, unsigned sharedBytes, CUstream stream,
                                    void **params) const {
  if (!function_)
    return makeError(ErrorCode::InvalidValue, "launch of an empty Kernel");
  auto api = detail::driver();
  if (!api)
    return api.takeError();
  if (!api->cuLaunchKernelEx)  // a driver older than CUDA 12.0
    return launch(gridX, gridY, gridZ, blockX, sharedBytes, stream, params);
  CUlaunchAttribute attribute = {};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config = {};
  config.gridDimX = gridX;
  config.gridDimY = gridY;
  config.gridDimZ = gridZ;
  config.blockDimX = blockX;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = sharedBytes;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return FLASHJIT_CU(cuLaunchKernelEx)(&config, function_, params, nullptr);
}

llvm::Expected<std::unique_ptr<Module>> Module::load(llvm::StringRef cubin) {
  CUmodule module = nullptr;
  if (llvm::Error error = FLASHJIT_CU(cuModuleLoadData)(&module, cubin.data())) {
    ErrorReport report = takeErrorReport(std::move(error));
    return makeError(report.code, "{0} (loading a cubin of {1} bytes)", report.message,
                     cubin.size());
  }
  return std::unique_ptr<Module>(new Module(module));
}

Module::~Module() { llvm::consumeError(FLASHJIT_CU(cuModuleUnload)(module_)); }

llvm::Expected<Kernel> Module::kernel(llvm::StringRef name) const {
  CUfunction function = nullptr;
  if (llvm::Error error = FLASHJIT_CU(cuModuleGetFunction)(&function, module_,
                                                           name.str().c_str())) {
    ErrorReport report = takeErrorReport(std::move(error));
    return makeError(report.code, "{0} (kernel '{1}')", report.message, name);
  }
  return Kernel(function);
}

// ---- EventTimer ----

llvm::Expected<EventTimer> EventTimer::create() {
  EventTimer timer;
  if (llvm::Error error = FLASHJIT_CU(cuEventCreate)(&timer.start_, CU_EVENT_DEFAULT))
    return error;
  if (llvm::Error error = FLASHJIT_CU(cuEventCreate)(&timer.stop_, CU_EVENT_DEFAULT))
    return error;
  return timer;
}

EventTimer::~EventTimer() {
  for (CUevent event : {start_, stop_})
    if (event)
      llvm::consumeError(FLASHJIT_CU(cuEventDestroy)(event));
}

EventTimer::EventTimer(EventTimer &&other) noexcept
    : start_(std::exchange(other.start_, nullptr)), stop_(std::exchange(other.stop_, nullptr)) {}

EventTimer &EventTimer::operator=(EventTimer &&other) noexcept {
  std::swap(start_, other.start_);
  std::swap(stop_, other.stop_);
  return *this;
}

llvm::Error EventTimer::start(CUstream stream) { return FLASHJIT_CU(cuEventRecord)(start_, stream); }

llvm::Error EventTimer::stop(CUstream stream) { return FLASHJIT_CU(cuEventRecord)(stop_, stream); }

llvm::Expected<float> EventTimer::elapsedMs() {
  if (llvm::Error error = FLASHJIT_CU(cuEventSynchronize)(stop_))
    return error;
  float ms = 0;
  if (llvm::Error error = FLASHJIT_CU(cuEventElapsedTime)(&ms, start_, stop_))
    return error;
  return ms;
}

// ---- Streams, context errors, tensor maps ----

llvm::Expected<CUstream> createStream() {
  CUstream stream = nullptr;
  if (llvm::Error error = FLASHJIT_CU(cuStreamCreate)(&stream, CU_STREAM_NON_BLOCKING))
    return error;
  return stream;
}

void destroyStream(CUstream stream) {
  if (stream)
    llvm::consumeError(FLASHJIT_CU(cuStreamDestroy)(stream));
}

llvm::Error synchronizeStream(CUstream stream) {
  return FLASHJIT_CU(cuStreamSynchronize)(stream);
}

llvm::Error checkContext() {
  // The driver API has no "last error" query; querying the legacy stream does not
  // block and returns the context's sticky error (e.g. an illegal address) if any.
  auto api = driver();
  if (!api)
    return api.takeError();
  if (!api->cuStreamQuery)
    return detail::missingFunction("cuStreamQuery");
  CUresult result = api->cuStreamQuery(nullptr);
  return detail::cuError(*api, result == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : result,
                         "cuStreamQuery (context check)");
}

llvm::Expected<int> currentDeviceAttribute(CUdevice_attribute attribute) {
  CUdevice device;
  if (llvm::Error error = FLASHJIT_CU(cuCtxGetDevice)(&device))
    return std::move(error);
  int value = 0;
  if (llvm::Error error = FLASHJIT_CU(cuDeviceGetAttribute)(&value, attribute, device))
    return std::move(error);
  return value;
}

llvm::Expected<int> currentDeviceSmCount() {
  return currentDeviceAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
}

llvm::Error encodeTensorMapTiled(CUtensorMap *map, CUtensorMapDataType dtype,
                                 unsigned rank, void *globalAddress,
                                 const uint64_t *globalDim, const uint64_t *globalStrides,
                                 const unsigned *boxDim, const unsigned *elementStrides,
                                 CUtensorMapSwizzle swizzle) {
  return FLASHJIT_CU(cuTensorMapEncodeTiled)(
      map, dtype, rank, globalAddress, globalDim, globalStrides, boxDim, elementStrides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

} // namespace flashjit::runtime
