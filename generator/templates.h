// The device code of templates/, embedded at build time (cmake/EmbedTemplates.cmake).
#pragma once

#include "generator/spec.h"

#include "llvm/ADT/ArrayRef.h"
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

// The template files a family's kernels are made of, in the order they are inlined. For
// the wgmma families the last one is the schedule, which the emitter places after the
// generated wgmma wrappers it uses. Every file a family's source embeds is listed here:
// the family's fingerprint is taken over exactly these.
llvm::ArrayRef<llvm::StringRef> familyTemplates(Family family);

// SHA-256 over the generator's own revision and these files' names and texts.
std::string templatesFingerprint(llvm::ArrayRef<llvm::StringRef> files);

// The fingerprint of the templates one family's kernels embed: a tuning row carries its
// family's, so a template change re-keys the rows (and the binaries) of the families that
// embed that template and leaves every other family's measured winners valid.
const std::string &familyFingerprint(Family family);

// SHA-256 over every embedded file and the generator's revision: this build's
// generator as a whole (`flashjit info`).
const std::string &generatorFingerprint();

} // namespace flashjit::generator
