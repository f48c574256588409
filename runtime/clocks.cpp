#include "runtime/clocks.h"

#include "runtime/driver_api.h"
#include "support/error.h"

#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdio>

namespace flashjit::runtime {
namespace {

// The few NVML declarations we need (nvml.h is not part of every toolkit install).
// The values are NVML's stable ABI.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st *;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlClockSM = 1;
constexpr int kNvmlClockMem = 2;

struct Nvml {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*handleByPciBusId)(const char *, nvmlDevice_t *) = nullptr;
  nvmlReturn_t (*clockInfo)(nvmlDevice_t, int, unsigned *) = nullptr;
  nvmlReturn_t (*maxClockInfo)(nvmlDevice_t, int, unsigned *) = nullptr;
  const char *(*errorString)(nvmlReturn_t) = nullptr;
  std::string failure; // non-empty: NVML is not usable, and why

  std::string describe(nvmlReturn_t result) const {
    const char *text = errorString ? errorString(result) : nullptr;
    return text ? text : llvm::formatv("NVML error {0}", result).str();
  }
};

const Nvml &nvml() {
  static const Nvml loaded = [] {
    Nvml n;
    std::string why;
    auto library = llvm::sys::DynamicLibrary::getPermanentLibrary("libnvidia-ml.so.1", &why);
    if (!library.isValid()) {
      n.failure = "NVML not found (libnvidia-ml.so.1: " + why + ")";
      return n;
    }
    auto symbol = [&](const char *name) { return library.getAddressOfSymbol(name); };
    n.init = reinterpret_cast<decltype(n.init)>(symbol("nvmlInit_v2"));
    n.handleByPciBusId =
        reinterpret_cast<decltype(n.handleByPciBusId)>(symbol("nvmlDeviceGetHandleByPciBusId_v2"));
    n.clockInfo = reinterpret_cast<decltype(n.clockInfo)>(symbol("nvmlDeviceGetClockInfo"));
    n.maxClockInfo =
        reinterpret_cast<decltype(n.maxClockInfo)>(symbol("nvmlDeviceGetMaxClockInfo"));
    n.errorString = reinterpret_cast<decltype(n.errorString)>(symbol("nvmlErrorString"));
    if (!n.init || !n.handleByPciBusId || !n.clockInfo) {
      n.failure = "NVML lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or "
                  "nvmlDeviceGetClockInfo";
      return n;
    }
    if (nvmlReturn_t r = n.init(); r != kNvmlSuccess)
      n.failure = "nvmlInit_v2 failed: " + n.describe(r);
    return n;
  }();
  return loaded;
}

} // namespace

llvm::Expected<std::string> pciBusId(int ordinal) {
  auto api = detail::driver();
  if (!api)
    return api.takeError();
  CUdevice device = 0;
  if (llvm::Error err = FLASHJIT_CU(cuDeviceGet)(&device, ordinal))
    return std::move(err);
  int domain = 0, bus = 0, slot = 0;
  for (auto [attribute, out] : {std::pair{CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &domain},
                                std::pair{CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &bus},
                                std::pair{CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &slot}})
    if (llvm::Error err = FLASHJIT_CU(cuDeviceGetAttribute)(out, attribute, device))
      return std::move(err);
  char text[32];
  std::snprintf(text, sizeof text, "%08X:%02X:%02X.0", (unsigned)domain, (unsigned)bus,
                (unsigned)slot);
  return std::string(text);
}

ClockReading readClocks(int ordinal) {
  ClockReading reading;
  const Nvml &n = nvml();
  if (!n.failure.empty()) {
    reading.reason = n.failure;
    return reading;
  }
  llvm::Expected<std::string> bus = pciBusId(ordinal);
  if (!bus) {
    reading.reason = "no PCI bus id: " + llvm::toString(bus.takeError());
    return reading;
  }
  reading.pciBusId = *bus;
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t r = n.handleByPciBusId(bus->c_str(), &device); r != kNvmlSuccess) {
    reading.reason = "nvmlDeviceGetHandleByPciBusId_v2(" + *bus + ") failed: " + n.describe(r);
    return reading;
  }
  if (nvmlReturn_t r = n.clockInfo(device, kNvmlClockSM, &reading.smMHz); r != kNvmlSuccess) {
    reading.reason = "nvmlDeviceGetClockInfo failed: " + n.describe(r);
    return reading;
  }
  // The rest is extra: a failure leaves the field 0.
  if (n.clockInfo(device, kNvmlClockMem, &reading.memoryMHz) != kNvmlSuccess)
    reading.memoryMHz = 0;
  if (!n.maxClockInfo || n.maxClockInfo(device, kNvmlClockSM, &reading.maxSmMHz) != kNvmlSuccess)
    reading.maxSmMHz = 0;
  reading.available = true;
  return reading;
}

} // namespace flashjit::runtime
