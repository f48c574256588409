// `flashjit gen`: print the CUDA source generated for a spec and tile, or compile it
// and show what it costs (registers, spills, shared memory, compile time) and what the
// tuner and ptxas make of it; or compile every tile of the tuner's space for the spec
// (--space), to see which ones a change to the templates makes spill.
#include "tools/command.h"
#include "tools/spec_options.h"

#include "generator/emit.h"
#include "runtime/nvrtc.h"
#include "runtime/resource_usage.h"
#include "support/hash.h"
#include "tuner/space.h"
#include "tuner/variants.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace {
namespace cl = llvm::cl;
using namespace flashjit;

cl::SubCommand genCommand("gen", "Print (or compile) the kernel generated for a spec");
// --window, --softcap, --alibi, --score-mod, --mask-mod (after genCommand: it needs it).
flashjit::tools::FeatureOptions featureOptions(genCommand);
cl::opt<std::string> family("family", cl::desc("Kernel family"), cl::init("fwd_mma"),
                            cl::sub(genCommand));
cl::opt<int> headDim("head-dim", cl::desc("Head dim of Q and K (multiple of 8, <= 256)"),
                     cl::init(128), cl::sub(genCommand));
cl::opt<int> headDimV("head-dim-v", cl::desc("Head dim of V (default: --head-dim)"),
                      cl::init(0), cl::sub(genCommand));
cl::opt<std::string> dtype("dtype",
                           cl::desc("fp16, bf16 or e4m3 (FP8 inputs of fwd_wgmma; dec_mma: an "
                                    "FP8 KV cache, q and o of --out-dtype)"),
                           cl::init("bf16"), cl::sub(genCommand));
cl::opt<std::string> outDtype("out-dtype", cl::desc("O's type with e4m3 inputs: bf16 or fp16"),
                              cl::init("bf16"), cl::sub(genCommand));
cl::opt<bool> causal("causal", cl::desc("Causal mask (bottom-right aligned)"),
                     cl::sub(genCommand));
cl::opt<std::string> target("target", cl::desc("Exact target: sm_80, sm_86, sm_89, sm_90a"),
                            cl::init("sm_90a"), cl::sub(genCommand));
cl::opt<int> blockM("block-m", cl::desc("Query rows per block (default: heuristic)"),
                    cl::init(0), cl::sub(genCommand));
cl::opt<int> blockN("block-n", cl::desc("Keys per K/V tile"), cl::init(0), cl::sub(genCommand));
cl::opt<int> warps("warps", cl::desc("Warps per block"), cl::init(0), cl::sub(genCommand));
cl::opt<int> stages("stages", cl::desc("K/V pipeline stages"), cl::init(0), cl::sub(genCommand));
cl::opt<bool> compile("compile", cl::desc("Compile with NVRTC and print the resource usage"),
                      cl::sub(genCommand));
cl::opt<bool> configOnly("config-only",
                         cl::desc("Print only the generated configuration and entry point"),
                         cl::sub(genCommand));
cl::opt<std::string> output("o", cl::desc("Write the source to this file"),
                            cl::value_desc("file"), cl::sub(genCommand));
cl::opt<bool> space("space",
                    cl::desc("Compile every tile of the tuner's space that the target fits, "
                             "and list each one's registers, spills and the tuner's verdict"),
                    cl::sub(genCommand));
cl::opt<unsigned> jobs("jobs", cl::desc("Compile threads for --space (default: one per core)"),
                       cl::init(0), cl::sub(genCommand));

int fail(llvm::Error error) {
  llvm::errs() << "flashjit gen: " << llvm::toString(std::move(error)) << "\n";
  return 1;
}

llvm::Expected<runtime::CompiledBinary> compileKernel(const generator::KernelSpec &spec,
                                                      const generator::EmittedKernel &kernel) {
  runtime::CompileOptions options;
  options.target = spec.target;
  options.options = kernel.options;
  options.timePhases = true; // where NVRTC's time goes; the cubin is the same
  return runtime::compile(kernel.source, options);
}

// Why the tuner would not time this binary, or "" (tuner::compileRejection).
std::string rejectionOf(const runtime::CompiledBinary &binary) {
  return tuner::compileRejection(binary.spillStoreBytes + binary.spillLoadBytes, binary.log);
}
std::string verdictText(llvm::StringRef rejection) {
  return rejection.empty() ? "accepts it" : ("rejects it: " + rejection).str();
}

// One tile of --space: its line (and ptxas's advisories below it), and the verdict.
struct SpaceRow {
  std::string text;
  bool accepted = false;
  bool failed = false;
  double compileMs = 0;
  double compileCpuMs = 0;
  runtime::CompiledBinary::Phases phases;
};

std::string phaseText(const runtime::CompiledBinary::Phases &phases) {
  return llvm::formatv("front end {0,3:f0} + NVVM {1,4:f0} + ptxas {2,4:f0}",
                       phases.frontEndMs, phases.nvvmMs, phases.ptxasMs)
      .str();
}

// The first 16 hex digits of the cubin's SHA-256.
std::string cubinHash(const runtime::CompiledBinary &binary) {
  return sha256Hex(binary.cubin).substr(0, 16);
}

double median(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

SpaceRow compileForSpace(const generator::KernelSpec &spec, const generator::TileConfig &tile) {
  SpaceRow row;
  auto failed = [&](llvm::Error error) {
    row.failed = true;
    row.text = llvm::formatv("  {0,-20} failed: {1}\n", tile.key(),
                             llvm::toString(std::move(error)))
                   .str();
    return row;
  };
  auto kernel = generator::emitKernel(spec, tile);
  if (!kernel)
    return failed(kernel.takeError());
  auto binary = compileKernel(spec, *kernel);
  if (!binary)
    return failed(binary.takeError());
  std::string rejection = rejectionOf(*binary);
  row.accepted = rejection.empty();
  row.compileMs = binary->compileMs;
  row.compileCpuMs = binary->compileCpuMs;
  row.phases = binary->phases;
  // The cubin's hash shows which tiles a change to the templates or to the NVRTC options
  // touched at all.
  row.text = llvm::formatv("  {0,-20} {1,3} registers {2,5} B spilled {3,6:f0} ms, CPU {4,5:f0} "
                           "ms ({5})  cubin {6}  tuner {7}\n",
                           tile.key(), binary->registers,
                           binary->spillStoreBytes + binary->spillLoadBytes, binary->compileMs,
                           binary->compileCpuMs, phaseText(binary->phases),
                           cubinHash(*binary), verdictText(rejection))
                 .str();
  for (const std::string &note : runtime::ptxasNotes(binary->log))
    row.text += "      ptxas: " + note + "\n";
  return row;
}

// --space: the tiles of the tuner's space that the target fits, compiled in parallel and
// listed in the space's order. Fails if any tile does not compile.
int runSpace(const generator::KernelSpec &spec) {
  std::vector<generator::TileConfig> all = tuner::enumerateTiles(spec), fits;
  for (const generator::TileConfig &tile : all)
    if (llvm::Error err = generator::validateTile(spec, tile))
      llvm::consumeError(std::move(err));
    else
      fits.push_back(tile);
  llvm::outs() << llvm::formatv("{0}: {1} of the space's {2} tiles fit; compiling them\n",
                                spec.key(), fits.size(), all.size());
  llvm::outs().flush();
  std::vector<SpaceRow> rows(fits.size());
  unsigned threads = jobs ? unsigned(jobs) : llvm::hardware_concurrency().compute_thread_count();
  {
    llvm::ThreadPool pool(llvm::hardware_concurrency(std::max(1u, threads)));
    for (size_t i = 0; i < fits.size(); ++i)
      pool.async([&, i] { rows[i] = compileForSpace(spec, fits[i]); });
    pool.wait();
  }
  int accepted = 0, failures = 0, fast = 0;
  std::vector<double> total, cpu, frontEnd, nvvm, ptxas;
  for (const SpaceRow &row : rows) {
    llvm::outs() << row.text;
    accepted += row.accepted;
    failures += row.failed;
    if (row.failed)
      continue;
    total.push_back(row.compileMs);
    cpu.push_back(row.compileCpuMs);
    frontEnd.push_back(row.phases.frontEndMs);
    nvvm.push_back(row.phases.nvvmMs);
    ptxas.push_back(row.phases.ptxasMs);
    fast += row.compileMs <= 500;
  }
  llvm::outs() << llvm::formatv("{0} of {1} compiled tiles the tuner would time\n", accepted,
                                fits.size() - failures);
  if (!total.empty())
    llvm::outs() << llvm::formatv(
        "NVRTC time per tile ({0} threads): median {1:f0} ms (CPU {2:f0} ms), {3:f0} to {4:f0} "
        "ms, {5} of {6} tiles <= 500 ms; median phases: {7} ms\n",
        threads, median(total), median(cpu), *std::min_element(total.begin(), total.end()),
        *std::max_element(total.begin(), total.end()), fast, total.size(),
        phaseText({median(frontEnd), median(nvvm), median(ptxas), 0}));
  if (failures)
    llvm::errs() << llvm::formatv("flashjit gen: {0} tile(s) failed to compile\n", failures);
  return failures ? 1 : 0;
}

int runGen() {
  generator::KernelSpec spec;
  auto fam = generator::parseFamily(family);
  if (!fam)
    return fail(fam.takeError());
  auto dt = generator::parseDType(dtype);
  if (!dt)
    return fail(dt.takeError());
  auto features = featureOptions.features();
  if (!features)
    return fail(features.takeError());
  if (auto err = tools::checkFamilyTakesFeatures(*fam, *features, "--family " + family))
    return fail(std::move(err));
  auto out = generator::parseDType(outDtype);
  if (!out)
    return fail(out.takeError());
  spec.family = *fam;
  spec.dtype = *dt;
  spec.outDtype = *out;
  spec.features = std::move(*features);
  spec.headDim = headDim;
  spec.headDimV = headDimV ? int(headDimV) : int(headDim);
  spec.causal = causal;
  spec.target = target;
  if (auto err = generator::validateSpec(spec))
    return fail(std::move(err));
  if (space) {
    if (blockM || blockN || warps || stages || configOnly || !output.empty())
      return fail(llvm::createStringError(
          std::errc::invalid_argument,
          "--space compiles every tile of the space; it takes no tile, -o or --config-only"));
    return runSpace(spec);
  }
  generator::TileConfig tile = generator::defaultTile(spec);
  if (blockM) tile.blockM = blockM;
  if (blockN) tile.blockN = blockN;
  if (warps) tile.warps = warps;
  if (stages) tile.stages = stages;

  if (configOnly) {
    auto config = generator::emitConfigBlock(spec, tile);
    if (!config)
      return fail(config.takeError());
    llvm::outs() << *config;
    return 0;
  }
  auto kernel = generator::emitKernel(spec, tile);
  if (!kernel)
    return fail(kernel.takeError());
  if (!output.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream file(output, ec);
    if (ec) {
      llvm::errs() << "flashjit gen: cannot write " << output << ": " << ec.message() << "\n";
      return 1;
    }
    file << kernel->source;
  }
  if (!compile) {
    if (output.empty())
      llvm::outs() << kernel->source;
    return 0;
  }
  auto binary = compileKernel(spec, *kernel);
  if (!binary)
    return fail(binary.takeError());
  llvm::outs() << llvm::formatv(
      "{0} / {1}\n  target           {2}\n  threads          {3}\n"
      "  registers        {4}\n  spills           {5} B stored, {6} B loaded\n"
      "  stack frame      {7} B\n  shared memory    {8} B dynamic, {9} B static\n"
      "  cubin            {10} B, sha256 {13}\n"
      "  compile time     {11:f0} ms, CPU {14:f0} ms ({12} ms)\n",
      spec.key(), tile.key(), spec.target, kernel->threads, binary->registers,
      binary->spillStoreBytes, binary->spillLoadBytes, binary->stackFrameBytes,
      kernel->sharedBytes, binary->staticSharedBytes, binary->cubin.size(),
      binary->compileMs, phaseText(binary->phases), cubinHash(*binary), binary->compileCpuMs);
  // What the tuner would make of it, and why: its rejections (spills, serialised wgmma,
  // ignored setmaxnreg) and ptxas's other advisories, which cost speed silently.
  llvm::outs() << "  tuner            " << verdictText(rejectionOf(*binary)) << "\n";
  for (const std::string &note : runtime::ptxasNotes(binary->log))
    llvm::outs() << "  ptxas note       " << note << "\n";
  return 0;
}

flashjit::tools::RegisterCommand registerGen(genCommand, &runGen);
} // namespace
