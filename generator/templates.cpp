#include "generator/templates.h"

#include "support/hash.h"

namespace flashjit::generator {

// Bump when the generator's host-side emission changes what it writes.
static constexpr const char *kGeneratorRevision = "fwd_mma-1";

std::optional<llvm::StringRef> templateText(llvm::StringRef name) {
  for (unsigned i = 0; i < kEmbeddedTemplateCount; ++i)
    if (name == kEmbeddedTemplates[i].name)
      return llvm::StringRef(kEmbeddedTemplates[i].content);
  return std::nullopt;
}

const std::string &generatorFingerprint() {
  static const std::string fingerprint = [] {
    std::string all = kGeneratorRevision;
    for (unsigned i = 0; i < kEmbeddedTemplateCount; ++i) {
      all += '\0';
      all += kEmbeddedTemplates[i].name;
      all += '\0';
      all += kEmbeddedTemplates[i].content;
    }
    return sha256Hex(all);
  }();
  return fingerprint;
}

} // namespace flashjit::generator
