// Deviceless preparation of a deployment cache: the default tile of a spec, compiled
// for its target, so that a handle whose spec has no tuned bucket finds its fallback
// binary without compiling.
#include "support/error.h"
#include "tuner/tuner.h"
#include "tuner/variants.h"

namespace flashjit::tuner {

llvm::Expected<std::string> compileOnly(cache::Cache &cache, const generator::KernelSpec &spec,
                                        bool *compiledNow) {
  if (llvm::Error err = generator::validateSpec(spec))
    return std::move(err);
  BuildOptions build;
  build.threads = 1;
  generator::TileConfig tile = generator::defaultTile(spec);
  llvm::Expected<BuildResult> built = buildVariants(cache, spec, {tile}, build);
  if (!built)
    return built.takeError();
  const Variant &v = built->variants.front();
  if (compiledNow)
    *compiledNow = v.compiledNow;
  if (!v.error.empty())
    return makeError(ErrorCode::Compile, "{0}: {1}", v.keyText, v.error);
  return v.key;
}

} // namespace flashjit::tuner
