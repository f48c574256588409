#include "generator/templates.h"

#include "support/hash.h"

#include <array>
#include <iterator>
#include <vector>

namespace flashjit::generator {

// Bump when the generator's host-side emission changes what it writes.
static constexpr const char *kGeneratorRevision = "fwd_mma-1";

std::optional<llvm::StringRef> templateText(llvm::StringRef name) {
  for (unsigned i = 0; i < kEmbeddedTemplateCount; ++i)
    if (name == kEmbeddedTemplates[i].name)
      return llvm::StringRef(kEmbeddedTemplates[i].content);
  return std::nullopt;
}

llvm::ArrayRef<llvm::StringRef> familyTemplates(Family family) {
  static const llvm::StringRef fwdMma[] = {"fj_params.h",       "fj_common.cuh", "fj_features.cuh",
                                           "fj_block_mask.cuh", "fj_smem.cuh",   "fwd_mma.cuh"};
  static const llvm::StringRef fwdWgmma[] = {"fj_params.h",       "fj_common.cuh",
                                             "fj_features.cuh",   "fj_block_mask.cuh",
                                             "fj_hopper.cuh",     "fj_fp8.cuh",
                                             "fwd_wgmma.cuh"};
  static const llvm::StringRef bwdMma[] = {"fj_params.h",     "fj_bwd_params.h", "fj_common.cuh",
                                           "fj_features.cuh", "fj_smem.cuh",     "bwd_mma.cuh"};
  // bwd_wgmma shares bwd_mma's auxiliary kernels (prep, dQ convert).
  static const llvm::StringRef bwdWgmma[] = {
      "fj_params.h", "fj_bwd_params.h", "fj_common.cuh", "fj_features.cuh",
      "fj_smem.cuh", "fj_hopper.cuh",   "bwd_mma.cuh",   "bwd_wgmma.cuh"};
  static const llvm::StringRef decMma[] = {"fj_params.h",      "fj_decode_params.h",
                                           "fj_common.cuh",    "fj_features.cuh",
                                           "fj_fp8_cache.cuh", "fj_smem.cuh",
                                           "dec_mma.cuh"};
  switch (family) {
  case Family::FwdMma: return fwdMma;
  case Family::FwdWgmma: return fwdWgmma;
  case Family::BwdMma: return bwdMma;
  case Family::BwdWgmma: return bwdWgmma;
  case Family::DecMma: return decMma;
  }
  return {};
}

std::string templatesFingerprint(llvm::ArrayRef<llvm::StringRef> files) {
  std::string all = kGeneratorRevision;
  for (llvm::StringRef file : files) {
    all += '\0';
    all += file.str();
    all += '\0';
    // A file that is not embedded fails the emitter that inlines it; here it just
    // leaves its text out.
    if (std::optional<llvm::StringRef> text = templateText(file))
      all += text->str();
  }
  return sha256Hex(all);
}

const std::string &familyFingerprint(Family family) {
  static const std::array<std::string, std::size(kAllFamilies)> fingerprints = [] {
    std::array<std::string, std::size(kAllFamilies)> out;
    for (Family f : kAllFamilies)
      out[size_t(f)] = templatesFingerprint(familyTemplates(f));
    return out;
  }();
  return fingerprints[size_t(family)];
}

const std::string &generatorFingerprint() {
  static const std::string fingerprint = [] {
    std::vector<llvm::StringRef> all;
    for (unsigned i = 0; i < kEmbeddedTemplateCount; ++i)
      all.push_back(kEmbeddedTemplates[i].name);
    return templatesFingerprint(all);
  }();
  return fingerprint;
}

} // namespace flashjit::generator
