// Deviceless preparation of a deployment cache: the default tile of a spec, compiled
// for its target, so that a handle whose spec has no tuned bucket finds its fallback
// binary without compiling; and (import_winner.cpp) a measured winner's tile.
#include "support/error.h"
#include "tuner/compile_tile.h"
#include "tuner/tuner.h"

namespace flashjit::tuner {

llvm::Expected<Variant> compileTile(cache::Cache &cache, const generator::KernelSpec &spec,
                                    const generator::TileConfig &tile) {
  BuildOptions build;
  build.threads = 1;
  llvm::Expected<BuildResult> built = buildVariants(cache, spec, {tile}, build);
  if (!built)
    return built.takeError();
  return std::move(built->variants.front());
}

llvm::Expected<std::string> compileOnly(cache::Cache &cache, const generator::KernelSpec &spec,
                                        bool *compiledNow) {
  if (llvm::Error err = generator::validateSpec(spec))
    return std::move(err);
  llvm::Expected<Variant> v = compileTile(cache, spec, generator::defaultTile(spec));
  if (!v)
    return v.takeError();
  if (compiledNow)
    *compiledNow = v->compiledNow;
  if (!v->error.empty())
    return makeError(ErrorCode::Compile, "{0}: {1}", v->keyText, v->error);
  return v->key;
}

} // namespace flashjit::tuner
