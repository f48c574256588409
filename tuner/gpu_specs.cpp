#include "tuner/gpu_specs.h"

#include "runtime/driver.h"
#include "support/error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <vector>

namespace flashjit::tuner {
namespace {

constexpr int KiB = 1024;

// Figures: dense (no sparsity) fp16/bf16 tensor throughput with fp32 accumulate, as
// the vendor's datasheet or architecture whitepaper states it; shared memory as the
// CUDA programming guide's compute-capability table gives it.
const std::vector<GpuSpec> &presetTable() {
  static const std::vector<GpuSpec> table = {
      {"H100-SXM", 989e12, 3.35e12, 228 * KiB, 227 * KiB, 132, "datasheet"},
      {"H100-PCIe", 756e12, 2.0e12, 228 * KiB, 227 * KiB, 114, "datasheet"},
      {"H200", 989e12, 4.8e12, 228 * KiB, 227 * KiB, 132, "datasheet"},
      // Measured on the project's H200 (shared/GPU.md): an 8192^3 bf16 matrix product
      // and a device-to-device copy (bytes read + written).
      {"H200-measured", 784e12, 4.3e12, 228 * KiB, 227 * KiB, 132,
       "measured here: bf16 GEMM 8192^3, D2D copy"},
      {"A100-SXM", 312e12, 2.039e12, 164 * KiB, 163 * KiB, 108, "datasheet (80GB)"},
      // The seeds' A100 ("about 1.5 TB/s") is this part.
      {"A100-SXM-40GB", 312e12, 1.555e12, 164 * KiB, 163 * KiB, 108, "datasheet (40GB)"},
      // GeForce Ada: fp16 with fp32 accumulate runs at half the fp16-accumulate rate.
      {"RTX-4090", 165.2e12, 1.008e12, 100 * KiB, 99 * KiB, 128,
       "datasheet (fp32 accumulate)"},
      {"L40S", 362.05e12, 0.864e12, 100 * KiB, 99 * KiB, 142, "datasheet"},
      {"A10", 125e12, 0.6e12, 100 * KiB, 99 * KiB, 72, "datasheet"},
  };
  return table;
}

// Short names people type, normalized (see normalize()).
struct Alias {
  const char *alias;
  const char *preset;
};
constexpr Alias aliases[] = {
    {"h100", "H100-SXM"},          {"h100sxm5", "H100-SXM"}, {"h200sxm", "H200"},
    {"a100", "A100-SXM"},          {"a10080gb", "A100-SXM"}, {"a10040gb", "A100-SXM-40GB"},
    {"4090", "RTX-4090"},          {"rtx4090", "RTX-4090"},
};

// Lower-case letters and digits only, without a leading "nvidia": "NVIDIA H100 80GB
// HBM3" -> "h10080gbhbm3", "H100-SXM" -> "h100sxm".
std::string normalize(llvm::StringRef name) {
  std::string out;
  for (char c : name)
    if (llvm::isAlnum(c))
      out.push_back(llvm::toLower(c));
  llvm::StringRef ref(out);
  if (ref.consume_front("nvidia"))
    return ref.str();
  return out;
}

const GpuSpec *presetNamed(llvm::StringRef name) {
  for (const GpuSpec &spec : presetTable())
    if (spec.name == name)
      return &spec;
  return nullptr;
}

// The preset a CUDA device name denotes, by the model number in it. Variants whose
// bandwidth or clocks differ from every preset return nullptr.
const GpuSpec *presetForDeviceName(llvm::StringRef n) {
  auto has = [&](llvm::StringRef part) { return n.contains(part); };
  if (has("laptop") || has("mobile"))
    return nullptr;
  if (has("nvl"))
    return nullptr; // H100/H200 NVL: other clocks and bandwidth
  if (has("h200"))
    return presetNamed("H200");
  if (has("h100")) {
    return presetNamed(has("pcie") ? "H100-PCIe" : "H100-SXM");
  }
  if (has("a100")) {
    if (has("40gb"))
      return presetNamed("A100-SXM-40GB");
    return has("pcie") ? nullptr : presetNamed("A100-SXM");
  }
  if (has("4090"))
    return presetNamed("RTX-4090");
  if (has("l40s"))
    return presetNamed("L40S");
  if (n == "a10")
    return presetNamed("A10");
  return nullptr;
}

} // namespace

llvm::Error validateGpuSpec(const GpuSpec &spec) {
  if (!(spec.peakFlops > 0) || !std::isfinite(spec.peakFlops))
    return makeError(ErrorCode::InvalidValue, "GPU '{0}': peak FLOP/s must be positive",
                     spec.name);
  if (!(spec.hbmBytesPerSec > 0) || !std::isfinite(spec.hbmBytesPerSec))
    return makeError(ErrorCode::InvalidValue, "GPU '{0}': bandwidth must be positive",
                     spec.name);
  if (spec.sharedPerSM < 0 || spec.sharedPerBlock < 0 || spec.smCount < 0)
    return makeError(ErrorCode::InvalidValue,
                     "GPU '{0}': shared memory and SM count cannot be negative", spec.name);
  return llvm::Error::success();
}

llvm::ArrayRef<GpuSpec> gpuPresets() { return presetTable(); }

const GpuSpec &defaultGpuPreset() { return presetTable().front(); }

std::optional<GpuSpec> findGpuPreset(llvm::StringRef nameOrDeviceName) {
  std::string key = normalize(nameOrDeviceName);
  if (key.empty())
    return std::nullopt;
  for (const GpuSpec &spec : presetTable())
    if (normalize(spec.name) == key)
      return spec;
  for (const Alias &alias : aliases)
    if (key == alias.alias)
      return *presetNamed(alias.preset);
  if (const GpuSpec *spec = presetForDeviceName(key))
    return *spec;
  return std::nullopt;
}

llvm::Expected<GpuSpec> lookupGpu(llvm::StringRef nameOrDeviceName) {
  if (std::optional<GpuSpec> spec = findGpuPreset(nameOrDeviceName))
    return *spec;
  std::string known;
  for (const GpuSpec &spec : presetTable())
    known += (known.empty() ? "" : ", ") + spec.name;
  return makeError(ErrorCode::InvalidValue,
                   "unknown GPU '{0}' (known: {1}; or give --peak-tflops and "
                   "--bandwidth-tbs)",
                   nameOrDeviceName, known);
}

int tensorFlopsPerClockPerSM(int ccMajor, int ccMinor) {
  // 2 FLOPs per multiply-add. Derived from the datasheets: V100/T4 1024, A100 2048,
  // GA10x/AD10x professional parts 1024, H100 4096, B200 8192.
  if (ccMajor >= 11)
    return 1024; // consumer/embedded Blackwell and later: the conservative rate
  if (ccMajor == 10)
    return 8192;
  if (ccMajor == 9)
    return 4096;
  if (ccMajor == 8)
    return ccMinor == 0 ? 2048 : 1024;
  if (ccMajor == 7)
    return 1024;
  return 256; // no tensor cores: packed fp16 FMA on the CUDA cores
}

GpuSpec estimateGpuSpec(llvm::StringRef name, int ccMajor, int ccMinor, int smCount,
                        int clockKHz, int memoryClockKHz, int memoryBusWidthBits,
                        int sharedPerSM, int sharedPerBlock) {
  GpuSpec spec;
  spec.name = name.str();
  spec.peakFlops = double(tensorFlopsPerClockPerSM(ccMajor, ccMinor)) * smCount *
                   (double(clockKHz) * 1e3);
  spec.hbmBytesPerSec = 2.0 * (double(memoryClockKHz) * 1e3) * memoryBusWidthBits / 8.0;
  spec.sharedPerSM = sharedPerSM;
  spec.sharedPerBlock = sharedPerBlock;
  spec.smCount = smCount;
  spec.source = llvm::formatv("estimated from sm_{0}{1} properties", ccMajor, ccMinor);
  return spec;
}

GpuSpec gpuSpecFromDevice(const runtime::DeviceProperties &props) {
  std::optional<GpuSpec> preset = findGpuPreset(props.name);
  if (!preset)
    return estimateGpuSpec(props.name, props.ccMajor, props.ccMinor, props.smCount,
                           props.clockKHz, props.memoryClockKHz, props.memoryBusWidthBits,
                           props.maxSharedPerSM, props.maxSharedPerBlockOptin);
  GpuSpec spec = *preset;
  if (props.smCount > 0 && props.smCount < spec.smCount) {
    // A MIG slice (or a cut-down part): compute and memory both scale with the slice.
    double share = double(props.smCount) / spec.smCount;
    spec.peakFlops *= share;
    spec.hbmBytesPerSec *= share;
    spec.source = llvm::formatv("{0}, scaled to {1} of {2} SMs", spec.source,
                                props.smCount, spec.smCount);
    spec.smCount = props.smCount;
  }
  spec.name = llvm::formatv("{0} ({1})", props.name, spec.name);
  if (props.maxSharedPerSM > 0)
    spec.sharedPerSM = props.maxSharedPerSM;
  if (props.maxSharedPerBlockOptin > 0)
    spec.sharedPerBlock = props.maxSharedPerBlockOptin;
  return spec;
}

} // namespace flashjit::tuner
