// The CUDA Driver API, loaded at run time (libcuda.so.1 through
// llvm::sys::DynamicLibrary) so that binaries start on machines with no driver:
// every call then fails with ErrorCode::NoDevice and a "no CUDA driver" message.
// This module knows nothing of attention: devices, memory, modules, launches, events.
#pragma once

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>

namespace flashjit::runtime {

struct DeviceProperties {
  int ordinal = 0;
  std::string name;               // "NVIDIA H200"
  int ccMajor = 0, ccMinor = 0;   // compute capability
  int smCount = 0;
  int maxSharedPerBlockOptin = 0; // bytes a block may use after opting in
  int maxSharedPerSM = 0;
  int maxRegistersPerSM = 0;
  int maxThreadsPerBlock = 0;
  int l2Bytes = 0;
  int clockKHz = 0;               // peak SM clock
  int memoryClockKHz = 0;
  int memoryBusWidthBits = 0;
  size_t totalMemoryBytes = 0;

  // Exact NVRTC target for this device: "sm_90a" on 9.0, "sm_100a" on 10.0 (the
  // arch-specific variants our kernels need), else "sm_XY".
  std::string target() const;
  // Readable device key for the tuning cache: "NVIDIA_H200.sm90.132sm".
  std::string deviceKey() const;
};

// Whether a driver can be loaded and initialised; the error says why not.
llvm::Error driverAvailable();

// Number of CUDA devices (an error when there is no driver).
llvm::Expected<int> deviceCount();

// Driver version as "13.0".
llvm::Expected<std::string> driverVersion();

// One device, through its primary context (shared with the CUDA runtime and
// frameworks such as PyTorch). Methods make the context current on the calling
// thread first, so any thread may use a Device.
class Device {
public:
  static llvm::Expected<std::unique_ptr<Device>> open(int ordinal);
  ~Device();
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;

  const DeviceProperties &properties() const { return props_; }
  llvm::Error makeCurrent() const;
  llvm::Error synchronize() const;
  CUcontext context() const { return context_; }

private:
  Device(int ordinal, CUdevice device, CUcontext context, DeviceProperties props);
  int ordinal_;
  CUdevice device_;
  CUcontext context_;
  DeviceProperties props_;
};

// Asynchronously sets `count` 32-bit words from `ptr` (4-byte aligned) to `value` on
// `stream`: memory the caller owns, e.g. a workspace inside its allocation.
llvm::Error fillWordsAsync(CUdeviceptr ptr, uint32_t value, size_t count, CUstream stream);

// Device memory, freed on destruction. Make the owning device current before use.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  static llvm::Expected<DeviceBuffer> allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;

  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return size_; }
  llvm::Error upload(const void *host, size_t bytes, size_t offset = 0);
  llvm::Error download(void *host, size_t bytes, size_t offset = 0) const;
  // Fills every byte with `value` (0xFF poisons fp16/bf16 outputs with NaN).
  llvm::Error fill(unsigned char value);
  // Asynchronously sets `count` 32-bit words from byte `offset` (4-byte aligned) to
  // `value` on `stream` (a memset node when captured in a graph).
  llvm::Error fillWordsAsync(uint32_t value, size_t offset, size_t count, CUstream stream);
  // Asynchronous device-to-device copy of `bytes` from `source` (benchmarks use it for
  // the copy bandwidth that memory-bound kernels are measured against).
  llvm::Error copyFrom(const DeviceBuffer &source, size_t bytes, CUstream stream);

private:
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

// A function inside a loaded module.
class Kernel {
public:
  Kernel() = default;
  explicit Kernel(CUfunction function) : function_(function) {}
  CUfunction handle() const { return function_; }
  // Raises the dynamic shared-memory limit (needed above 48 KB).
  llvm::Error setMaxDynamicSharedMemory(int bytes) const;
  llvm::Expected<int> attribute(CUfunction_attribute attribute) const;
  // Launches with the given parameter pointers (cuLaunchKernel's kernelParams).
  llvm::Error launch(unsigned gridX, unsigned gridY, unsigned gridZ, unsigned blockX,
                     unsigned sharedBytes, CUstream stream, void **params) const;
  // The same, as a programmatic dependent of the kernel before it in `stream` (sm_90
  // and newer): it may start before that kernel ends, and must call griddepcontrol.wait
  // (fj_common.cuh's pdl_wait) before it reads what that kernel wrote. A plain launch
  // where the driver has no cuLaunchKernelEx.
  llvm::Error launchDependent(unsigned gridX, unsigned gridY, unsigned gridZ, unsigned blockX,
                              unsigned sharedBytes, CUstream stream, void **params) const;

private:
  CUfunction function_ = nullptr;
};

// A loaded cubin, unloaded on destruction.
class Module {
public:
  static llvm::Expected<std::unique_ptr<Module>> load(llvm::StringRef cubin);
  ~Module();
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  llvm::Expected<Kernel> kernel(llvm::StringRef name) const;

private:
  explicit Module(CUmodule module) : module_(module) {}
  CUmodule module_;
};

// A pair of events around device work on a stream.
class EventTimer {
public:
  static llvm::Expected<EventTimer> create();
  ~EventTimer();
  EventTimer(EventTimer &&other) noexcept;
  EventTimer &operator=(EventTimer &&other) noexcept;
  llvm::Error start(CUstream stream);
  llvm::Error stop(CUstream stream);
  // Waits for the stop event, returns milliseconds between the two.
  llvm::Expected<float> elapsedMs();

private:
  EventTimer() = default;
  CUevent start_ = nullptr, stop_ = nullptr;
};

// Streams owned by the caller.
llvm::Expected<CUstream> createStream();
void destroyStream(CUstream stream);
llvm::Error synchronizeStream(CUstream stream);

// The current context's sticky error, if any (e.g. an illegal address in a kernel
// launched earlier). Does not block: work still running is not an error.
llvm::Error checkContext();

// Multiprocessors of the current context's device (persistent kernels size their grid
// by it).
llvm::Expected<int> currentDeviceSmCount();
// Any attribute of the current context's device.
llvm::Expected<int> currentDeviceAttribute(CUdevice_attribute attribute);

// cuTensorMapEncodeTiled through the loaded driver (for TMA-based kernels).
llvm::Error encodeTensorMapTiled(CUtensorMap *map, CUtensorMapDataType dtype,
                                 unsigned rank, void *globalAddress,
                                 const uint64_t *globalDim, const uint64_t *globalStrides,
                                 const unsigned *boxDim, const unsigned *elementStrides,
                                 CUtensorMapSwizzle swizzle);

} // namespace flashjit::runtime
