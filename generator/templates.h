// The device code of templates/, embedded at build time (cmake/EmbedTemplates.cmake).
#pragma once

#include "llvm/ADT/StringRef.h"

#include <string>

#include <optional>

namespace flashjit::generator {

struct EmbeddedTemplate {
  const char *name;     // file name, e.g. "fwd_mma.cuh"
  const char *content;
};

extern const EmbeddedTemplate kEmbeddedTemplates[];
extern const unsigned kEmbeddedTemplateCount;

// The text of one embedded file, or nothing if there is no such file.
std::optional<llvm::StringRef> templateText(llvm::StringRef name);

// SHA-256 over every embedded file and the generator's own version: changes
// whenever generated code could change, so tuning rows made by another
// generator are never reused.
const std::string &generatorFingerprint();

} // namespace flashjit::generator
