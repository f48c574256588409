#include "tuner/variants.h"

#include "runtime/nvrtc.h"
#include "runtime/resource_usage.h"
#include "support/elapsed.h"
#include "support/error.h"
#include "support/hash.h"
#include "tuner/loaded_kernel.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"

#include <chrono>
#include <mutex>

namespace flashjit::tuner {

std::string binaryKey(llvm::StringRef source, llvm::ArrayRef<std::string> options,
                      llvm::StringRef nvrtcVersion, llvm::StringRef target) {
  std::string text = source.str();
  text += '\0';
  text += llvm::join(options.begin(), options.end(), "\n");
  text += '\0';
  text += nvrtcVersion;
  text += '\0';
  text += target;
  return sha256Hex(text);
}

std::string binaryKeyText(const generator::KernelSpec &spec, const generator::TileConfig &tile) {
  return spec.key() + "/" + tile.key();
}

std::string compileRejection(int spillBytes, llvm::StringRef log) {
  if (spillBytes > 0) {
    std::string message = llvm::formatv("spills {0} bytes of registers", spillBytes).str();
    std::vector<std::string> where = runtime::spillingFunctions(log);
    if (!where.empty())
      message += " (" + llvm::join(where, "; ") + ")";
    // Another library's use of a shared NVRTC has made clean kernels spill (PERF bw12).
    if (runtime::nvrtcSharedBecause())
      message += "; flashjit's NVRTC is shared with another library in this process, "
                 "whose compiles can change what it makes (`flashjit info`; "
                 "FLASHJIT_NVRTC_LIBRARY can name a copy of its own)";
    return message;
  }
  llvm::SmallVector<llvm::StringRef, 16> lines;
  log.split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    std::string lower = line.lower();
    llvm::StringRef l(lower);
    bool aboutInstructions = l.contains("ptxas") || l.contains("instruction");
    if (aboutInstructions && (l.contains("serializ") || l.contains("ignored")))
      return ("the compiler reports: " + line.trim()).str();
  }
  return "";
}

llvm::Expected<BuildResult> buildVariants(cache::Cache &cache, const generator::KernelSpec &spec,
                                          llvm::ArrayRef<generator::TileConfig> tiles,
                                          const BuildOptions &options) {
  auto start = std::chrono::steady_clock::now();
  llvm::Expected<std::string> nvrtc = runtime::nvrtcVersion();
  if (!nvrtc)
    return nvrtc.takeError();
  BuildResult result;
  result.variants.resize(tiles.size());

  // Emit, key and look up; collect what must be compiled.
  std::vector<size_t> toCompile;
  for (size_t i = 0; i < tiles.size(); ++i) {
    Variant &v = result.variants[i];
    v.tile = tiles[i];
    v.keyText = binaryKeyText(spec, v.tile);
    llvm::Expected<generator::EmittedKernel> emitted = generator::emitKernel(spec, v.tile);
    if (!emitted) {
      v.error = llvm::toString(emitted.takeError());
      continue;
    }
    v.emitted = std::move(*emitted);
    if (options.mutateSource)
      options.mutateSource(v.tile, v.emitted.source);
    v.key = binaryKey(v.emitted.source, v.emitted.options, *nvrtc, spec.target);
    llvm::Expected<std::optional<cache::Found<cache::BinaryRow>>> found = cache.findBinary(v.key);
    if (!found)
      return found.takeError();
    // A binary stored without ptxas's report (NVRTC 12.9+ served it from its own cache
    // before compile() turned that off) may spill or have its wgmma serialised unseen:
    // compiled again, it replaces the row.
    if (*found && options.allowCompile &&
        ((*found)->row.registers < 0 || (options.recheckSpills && (*found)->row.spillBytes > 0)))
      found->reset();
    if (*found) {
      v.binary = std::move((*found)->row);
      v.cachedIn = (*found)->source;
      v.rejection = compileRejection(v.binary->spillBytes, "");
    } else if (!options.allowCompile) {
      v.error = "not in the cache (" +
                cache.explainBinaryMiss(v.keyText, spec.target, *nvrtc) +
                ") and compiling is not allowed";
    } else {
      toCompile.push_back(i);
    }
  }

  // Compile the misses in parallel; each thread publishes its own binary.
  std::mutex mutex;
  std::string cacheError;
  if (!toCompile.empty()) {
    unsigned threads = options.threads ? options.threads
                                       : llvm::hardware_concurrency().compute_thread_count();
    llvm::ThreadPool pool(llvm::hardware_concurrency(
        std::max(1u, std::min<unsigned>(threads, toCompile.size()))));
    for (size_t i : toCompile)
      pool.async([&, i] {
        Variant &v = result.variants[i];
        llvm::Expected<runtime::CompiledBinary> compiled = compileEmitted(v.emitted, spec.target);
        if (!compiled) {
          v.error = llvm::toString(compiled.takeError());
          return;
        }
        cache::BinaryRow row;
        row.key = v.key;
        row.keyText = v.keyText;
        row.target = spec.target;
        row.nvrtcVersion = *nvrtc;
        row.cubin = std::move(compiled->cubin);
        row.registers = compiled->registers;
        row.spillBytes = compiled->spillStoreBytes + compiled->spillLoadBytes;
        row.sharedBytes = v.emitted.sharedBytes;
        row.compileMs = compiled->compileMs;
        v.rejection = compileRejection(row.spillBytes, compiled->log);
        v.compiledNow = true;
        if (v.rejection.empty() || row.spillBytes > 0)
          if (llvm::Error err = cache.publish(&row, nullptr)) {
            std::lock_guard<std::mutex> lock(mutex);
            cacheError = llvm::toString(std::move(err));
          }
        v.binary = std::move(row);
        std::lock_guard<std::mutex> lock(mutex);
        ++result.compiled;
      });
    pool.wait();
  }
  if (!cacheError.empty())
    return makeError(ErrorCode::Cache, "publishing a compiled binary: {0}", cacheError);
  result.seconds = secondsSince(start);
  return std::move(result);
}

llvm::Expected<std::optional<Variant>> recordedVariant(cache::Cache &cache,
                                                       const generator::KernelSpec &spec,
                                                       const generator::TileConfig &tile,
                                                       llvm::StringRef key) {
  llvm::Expected<std::optional<cache::Found<cache::BinaryRow>>> found = cache.findBinary(key);
  if (!found)
    return found.takeError();
  if (!*found)
    return std::nullopt;
  llvm::Expected<generator::EmittedKernel> emitted = generator::emitKernel(spec, tile);
  if (!emitted)
    return emitted.takeError();
  Variant v;
  v.tile = tile;
  v.emitted = std::move(*emitted);
  v.key = key.str();
  v.keyText = binaryKeyText(spec, tile);
  v.binary = std::move((*found)->row);
  v.cachedIn = (*found)->source;
  v.rejection = compileRejection(v.binary->spillBytes, "");
  return std::optional<Variant>(std::move(v));
}

} // namespace flashjit::tuner
