// What the roofline model needs to know about a GPU: peak dense fp16/bf16 tensor
// throughput, HBM bandwidth and shared memory. Named presets for the parts flashjit
// is used on (datasheet figures, plus the figures measured on the project's own
// H200), a lookup from a CUDA device name to a preset, and a rough estimate from
// device properties for GPUs with no preset.
#pragma once

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace flashjit::runtime {
struct DeviceProperties;
}

namespace flashjit::tuner {

struct GpuSpec {
  std::string name;            // preset name ("H100-SXM") or the device's name
  double peakFlops = 0;        // dense fp16/bf16 tensor-core FLOP/s, fp32 accumulate
  double hbmBytesPerSec = 0;   // device memory bandwidth, bytes read + written per second
  int sharedPerSM = 0;         // bytes of shared memory per SM
  int sharedPerBlock = 0;      // bytes a block may use after opting in
  int smCount = 0;
  std::string source;          // where the numbers come from: "datasheet", "measured", ...
};

// Peak FLOP/s and bandwidth must be positive and finite; shared memory and SM counts
// may be 0 (unknown) but not negative.
llvm::Error validateGpuSpec(const GpuSpec &spec);

// Every preset, in a stable order (the first is the default when no GPU is found).
llvm::ArrayRef<GpuSpec> gpuPresets();

// The preset used when neither a GPU nor a name is given.
const GpuSpec &defaultGpuPreset();

// A preset by its name or a short alias ("H100", "h200-measured", "4090"), or by the
// name a CUDA device reports ("NVIDIA H100 80GB HBM3", "NVIDIA H200"). Case, spaces,
// dashes and a leading "NVIDIA" are ignored. Nothing when no preset fits; variants
// whose numbers differ from every preset (H100 NVL, A100 80GB PCIe, laptop parts,
// plain L40) are deliberately not matched so that the caller estimates them instead.
std::optional<GpuSpec> findGpuPreset(llvm::StringRef nameOrDeviceName);

// As findGpuPreset, with an InvalidValue error that lists the known names.
llvm::Expected<GpuSpec> lookupGpu(llvm::StringRef nameOrDeviceName);

// The dense fp16/bf16 tensor-core FLOPs one SM retires per clock on this compute
// capability (fp32 accumulate, the rate datacenter parts are quoted at).
int tensorFlopsPerClockPerSM(int ccMajor, int ccMinor);

// A rough spec for a GPU with no preset: peak = FLOPs/clock/SM x SMs x clock,
// bandwidth = 2 (double data rate) x memory clock x bus width / 8.
GpuSpec estimateGpuSpec(llvm::StringRef name, int ccMajor, int ccMinor, int smCount,
                        int clockKHz, int memoryClockKHz, int memoryBusWidthBits,
                        int sharedPerSM, int sharedPerBlock);

// The spec for a detected device: its preset when the name matches one (scaled down
// by SM count when the device reports fewer SMs, as a MIG slice does), else
// estimateGpuSpec from its properties.
GpuSpec gpuSpecFromDevice(const runtime::DeviceProperties &props);

} // namespace flashjit::tuner
