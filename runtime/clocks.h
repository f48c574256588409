// The clocks a GPU is running at, read through NVML (libnvidia-ml.so.1, loaded at run
// time with llvm::sys::DynamicLibrary like the driver), so that a measurement can
// record the SM clock it saw: two timings of the same kernel at different clocks
// are not comparable. NVML is optional: without it a reading says why not.
#pragma once

#include "llvm/Support/Error.h"

#include <string>

namespace flashjit::runtime {

// The device's PCI address as NVML expects it, e.g. "00000000:3B:00.0", from the
// driver's PCI domain, bus and device attributes.
llvm::Expected<std::string> pciBusId(int ordinal);

struct ClockReading {
  bool available = false;
  std::string reason;         // why not, when not available
  std::string pciBusId;
  unsigned smMHz = 0;         // current SM clock
  unsigned maxSmMHz = 0;      // the highest SM clock the device allows
  unsigned memoryMHz = 0;     // current memory clock
};

// Reads the clocks of CUDA device `ordinal` now. Never fails: problems are reported
// in the reading. Thread-safe; NVML is loaded and initialised once per process.
ClockReading readClocks(int ordinal);

} // namespace flashjit::runtime
