// `flashjit info`: what this machine offers flashjit: driver, devices, NVRTC, caches.
#include "tools/command.h"

#include "cache/cache.h"
#include "generator/templates.h"
#include "tuner/measure.h"
#include "runtime/driver.h"
#include "runtime/nvrtc.h"
#include "support/env.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace {
llvm::cl::SubCommand infoCommand("info", "Show the driver, devices, NVRTC and cache locations");

int runInfo() {
  auto &out = llvm::outs();
  out << "flashjit " << flashjit::flashjitVersion() << " (generator "
      << flashjit::generator::generatorFingerprint().substr(0, 12) << ")\n";
  // What a tuning row must carry to be used by this build (winners files, docs/CACHE.md):
  // the measurement protocol, and the generator fingerprint of its spec's family.
  out << "Keys:    measurement protocol " << flashjit::tuner::kMeasurementProtocolVersion
      << " (a forward mask_mod's: " << flashjit::tuner::kBlockMaskProtocolVersion << ")\n";
  for (flashjit::generator::Family family : flashjit::generator::kAllFamilies)
    out << llvm::formatv("         generator {0,-9} {1}\n",
                         flashjit::generator::familyName(family),
                         flashjit::generator::familyFingerprint(family));
  auto nvrtc = flashjit::runtime::nvrtcVersion();
  out << "NVRTC:   " << (nvrtc ? *nvrtc : llvm::toString(nvrtc.takeError())) << "\n";
  if (nvrtc)
    if (auto library = flashjit::runtime::nvrtcLibrary())
      out << "         " << *library << "\n";
  auto driver = flashjit::runtime::driverVersion();
  if (!driver) {
    out << "Driver:  " << llvm::toString(driver.takeError())
        << "\n         (code generation, compilation and the cache still work)\n";
  } else {
    out << "Driver:  CUDA " << *driver << "\n";
    auto count = flashjit::runtime::deviceCount();
    if (!count) {
      out << "Devices: " << llvm::toString(count.takeError()) << "\n";
    } else {
      for (int i = 0; i < *count; ++i) {
        auto device = flashjit::runtime::Device::open(i);
        if (!device) {
          out << "Device " << i << ": " << llvm::toString(device.takeError()) << "\n";
          continue;
        }
        const auto &p = (*device)->properties();
        out << llvm::formatv("Device {0}: {1}, compute capability {2}.{3} (target {4}), {5} "
                             "SMs, {6} KiB shared memory per block, {7} MiB L2, {8} GiB\n",
                             i, p.name, p.ccMajor, p.ccMinor, p.target(), p.smCount,
                             p.maxSharedPerBlockOptin / 1024, p.l2Bytes >> 20,
                             p.totalMemoryBytes >> 30);
        out << "          device key " << p.deviceKey() << "\n";
      }
    }
  }
  std::string user = flashjit::cache::defaultUserCachePath();
  out << "Cache:   user   " << (user.empty() ? "(disabled: FLASHJIT_CACHE is empty)" : user) << "\n";
  std::vector<std::string> system = flashjit::cache::defaultSystemCachePaths();
  for (const std::string &path : system)
    out << "         system " << path << "\n";
  if (system.empty())
    out << "         system (none"
        << (flashjit::getEnv("FLASHJIT_SYSTEM_CACHE")
                ? std::string(": FLASHJIT_SYSTEM_CACHE is empty")
                : "; looked for " + llvm::join(flashjit::cache::installedSystemCachePaths(), ", "))
        << ")\n";
  return 0;
}

flashjit::tools::RegisterCommand registerInfo(infoCommand, &runInfo);
} // namespace
