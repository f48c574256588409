// `flashjit roofline`: the FlashAttention win for a shape on a GPU, on graph paper.
// FLOPs, HBM bytes, arithmetic intensity and roofline time of standard attention
// (S and P in HBM) and of flash attention (K/V re-read per query tile), the predicted
// speedup, and, given a measured time, the fraction of the roofline reached.
// `--sweep` prints one line per sequence length. The model is tuner/roofline.h.
#include "tools/command.h"

#include "runtime/driver.h"
#include "support/error.h"
#include "tuner/gpu_specs.h"
#include "tuner/roofline.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>
#include <string>

namespace flashjit::tools {
namespace {

namespace cl = llvm::cl;
using tuner::AttentionShape;
using tuner::GpuSpec;
using tuner::RooflineEstimate;
using tuner::RooflinePoint;

cl::SubCommand sub("roofline",
                   "Roofline estimate of standard vs flash attention for a shape and GPU");

cl::OptionCategory shapeCat("roofline: shape");
cl::opt<unsigned> headDim("head-dim", cl::desc("Head dim of Q and K (required)"),
                          cl::sub(sub), cl::cat(shapeCat));
cl::opt<unsigned> headDimV("head-dim-v", cl::desc("Head dim of V and O (default: head-dim)"),
                           cl::sub(sub), cl::cat(shapeCat));
cl::opt<unsigned> seqlen("seqlen", cl::desc("Query sequence length (required unless --sweep)"),
                         cl::sub(sub), cl::cat(shapeCat));
cl::opt<unsigned> seqlenK("seqlen-k", cl::desc("Key sequence length (default: seqlen)"),
                          cl::sub(sub), cl::cat(shapeCat));
cl::opt<unsigned> batch("batch", cl::desc("Batch size"), cl::init(1), cl::sub(sub),
                        cl::cat(shapeCat));
cl::opt<unsigned> heads("heads", cl::desc("Query heads"), cl::init(16), cl::sub(sub),
                        cl::cat(shapeCat));
cl::opt<unsigned> headsKV("heads-kv", cl::desc("KV heads, dividing --heads (default: heads)"),
                          cl::sub(sub), cl::cat(shapeCat));
cl::opt<bool> causal("causal", cl::desc("Causal mask (bottom-right aligned)"), cl::sub(sub),
                     cl::cat(shapeCat));
enum class DType { BF16, FP16, FP32 };
cl::opt<DType> dtype("dtype", cl::desc("Element type of Q, K, V, O"), cl::init(DType::BF16),
                     cl::values(clEnumValN(DType::BF16, "bf16", "bfloat16 (2 bytes)"),
                                clEnumValN(DType::FP16, "fp16", "float16 (2 bytes)")),
                     cl::sub(sub), cl::cat(shapeCat));

cl::OptionCategory modelCat("roofline: model");
cl::opt<unsigned> blockM("block-m", cl::desc("Query tile rows of the flash kernel"),
                         cl::init(128), cl::sub(sub), cl::cat(modelCat));
cl::opt<DType> scoreDtype(
    "score-dtype", cl::desc("Element type of the materialized S and P (standard attention)"),
    cl::init(DType::FP32),
    cl::values(clEnumValN(DType::FP32, "fp32", "4 bytes"),
               clEnumValN(DType::FP16, "fp16", "2 bytes"),
               clEnumValN(DType::BF16, "bf16", "2 bytes")),
    cl::sub(sub), cl::cat(modelCat));
cl::opt<bool> lse("lse", cl::desc("Flash attention also writes the fp32 log-sum-exp"),
                  cl::sub(sub), cl::cat(modelCat));

cl::OptionCategory gpuCat("roofline: GPU (default: the CUDA device found, else H100-SXM)");
cl::opt<std::string> gpuName("gpu", cl::desc("A preset (see --list-gpus) or a device name"),
                             cl::sub(sub), cl::cat(gpuCat));
cl::opt<double> peakTflops("peak-tflops", cl::desc("Peak dense fp16/bf16 TFLOP/s"),
                           cl::sub(sub), cl::cat(gpuCat));
cl::opt<double> bandwidthTbs("bandwidth-tbs", cl::desc("HBM bandwidth in TB/s"),
                             cl::sub(sub), cl::cat(gpuCat));
cl::opt<double> smemKib("smem-kib", cl::desc("Shared memory per block in KiB"), cl::sub(sub),
                        cl::cat(gpuCat));
cl::opt<bool> listGpus("list-gpus", cl::desc("List the GPU presets and exit"), cl::sub(sub),
                       cl::cat(gpuCat));

cl::OptionCategory outCat("roofline: output");
cl::opt<double> measuredUs("measured-us",
                           cl::desc("A measured kernel time in microseconds: report the "
                                    "fraction of the roofline it reaches"),
                           cl::sub(sub), cl::cat(outCat));
cl::list<unsigned> sweep("sweep", cl::desc("Sequence lengths, comma-separated: one line each"),
                         cl::CommaSeparated, cl::sub(sub), cl::cat(outCat));
cl::opt<bool> json("json", cl::desc("Print JSON instead of a table"), cl::sub(sub),
                   cl::cat(outCat));

const char *dtypeName(DType t) {
  switch (t) {
  case DType::BF16:
    return "bf16";
  case DType::FP16:
    return "fp16";
  case DType::FP32:
    return "fp32";
  }
  return "?";
}

unsigned dtypeBytes(DType t) { return t == DType::FP32 ? 4 : 2; }

// ---- formatting -----------------------------------------------------------------

std::string humanBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) {
    bytes /= 1024;
    ++i;
  }
  if (i == 0)
    return llvm::formatv("{0} B", uint64_t(bytes));
  // Exact multiples print without decimals: "64 MiB", "16 KiB".
  if (bytes == std::floor(bytes))
    return llvm::formatv("{0} {1}", uint64_t(bytes), units[i]);
  return llvm::formatv("{0:F2} {1}", bytes, units[i]);
}

std::string humanFlops(double flops) {
  if (flops >= 1e15)
    return llvm::formatv("{0:F3} PFLOP", flops / 1e15);
  if (flops >= 1e12)
    return llvm::formatv("{0:F3} TFLOP", flops / 1e12);
  if (flops >= 1e9)
    return llvm::formatv("{0:F3} GFLOP", flops / 1e9);
  return llvm::formatv("{0:F3} MFLOP", flops / 1e6);
}

std::string humanTime(double seconds) {
  if (seconds < 1e-3)
    return llvm::formatv("{0:F2} us", seconds * 1e6);
  if (seconds < 1)
    return llvm::formatv("{0:F3} ms", seconds * 1e3);
  return llvm::formatv("{0:F3} s", seconds);
}

// 1099511627776 -> "1,099,511,627,776".
std::string withCommas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string percent(double fraction) { return llvm::formatv("{0:F1}%", fraction * 100); }

// ---- inputs -----------------------------------------------------------------------

llvm::Expected<AttentionShape> shapeFromOptions(unsigned seqQ, unsigned seqK) {
  if (!headDim.getNumOccurrences())
    return makeError(ErrorCode::InvalidValue, "--head-dim is required");
  AttentionShape s;
  s.batch = int(batch);
  s.headsQ = int(heads);
  s.headsKV = headsKV.getNumOccurrences() ? int(headsKV) : int(heads);
  s.seqQ = int(seqQ);
  s.seqK = int(seqK);
  s.headDim = int(headDim);
  s.headDimV = headDimV.getNumOccurrences() ? int(headDimV) : int(headDim);
  s.causal = causal;
  s.elementBytes = int(dtypeBytes(dtype));
  if (llvm::Error err = tuner::validateShape(s))
    return err;
  return s;
}

// The GPU to model and, when it is a fallback, why.
struct ChosenGpu {
  GpuSpec spec;
  std::string note;
};

llvm::Expected<ChosenGpu> chooseGpu() {
  ChosenGpu chosen;
  bool custom = peakTflops.getNumOccurrences() && bandwidthTbs.getNumOccurrences();
  if (gpuName.getNumOccurrences()) {
    llvm::Expected<GpuSpec> spec = tuner::lookupGpu(gpuName);
    if (!spec)
      return spec.takeError();
    chosen.spec = *spec;
  } else if (custom) {
    chosen.spec.name = "custom";
    chosen.spec.source = "given on the command line";
  } else {
    llvm::Expected<std::unique_ptr<runtime::Device>> device = runtime::Device::open(0);
    if (device) {
      chosen.spec = tuner::gpuSpecFromDevice((*device)->properties());
      chosen.note = "the CUDA device found (device 0)";
    } else {
      chosen.spec = tuner::defaultGpuPreset();
      chosen.note = llvm::formatv("no CUDA device ({0}); assuming {1}, name one with --gpu",
                                  takeErrorReport(device.takeError()).message,
                                  chosen.spec.name);
    }
  }
  bool overridden = false;
  if (peakTflops.getNumOccurrences()) {
    chosen.spec.peakFlops = peakTflops * 1e12;
    overridden = true;
  }
  if (bandwidthTbs.getNumOccurrences()) {
    chosen.spec.hbmBytesPerSec = bandwidthTbs * 1e12;
    overridden = true;
  }
  if (smemKib.getNumOccurrences()) {
    chosen.spec.sharedPerBlock = int(std::lround(smemKib * 1024));
    overridden = true;
  }
  if (overridden && !custom)
    chosen.spec.source += ", with figures given on the command line";
  if (llvm::Error err = tuner::validateGpuSpec(chosen.spec))
    return err;
  return chosen;
}

// ---- JSON -------------------------------------------------------------------------

llvm::json::Value pointJson(const RooflinePoint &p) {
  return llvm::json::Object{
      {"flops", int64_t(p.flops)},
      {"bytes", int64_t(p.bytes)},
      {"intensity", p.intensity},
      {"compute_seconds", p.computeSeconds},
      {"memory_seconds", p.memorySeconds},
      {"predicted_seconds", p.predictedSeconds},
      {"bound", tuner::boundName(p.bound)},
  };
}

llvm::json::Value gpuJson(const ChosenGpu &gpu) {
  llvm::json::Object o{
      {"name", gpu.spec.name},
      {"source", gpu.spec.source},
      {"peak_flops", gpu.spec.peakFlops},
      {"bandwidth_bytes_per_second", gpu.spec.hbmBytesPerSec},
      {"shared_per_sm", gpu.spec.sharedPerSM},
      {"shared_per_block", gpu.spec.sharedPerBlock},
      {"sm_count", gpu.spec.smCount},
  };
  if (!gpu.note.empty())
    o["note"] = gpu.note;
  return o;
}

llvm::json::Object estimateJson(const RooflineEstimate &e) {
  const AttentionShape &s = e.shape;
  return llvm::json::Object{
      {"shape",
       llvm::json::Object{{"batch", s.batch},
                          {"heads", s.headsQ},
                          {"heads_kv", s.headsKV},
                          {"seqlen_q", s.seqQ},
                          {"seqlen_k", s.seqK},
                          {"head_dim", s.headDim},
                          {"head_dim_v", s.headDimV},
                          {"causal", s.causal},
                          {"dtype", dtypeName(dtype)}}},
      {"block_m", int64_t(e.blockM)},
      {"score_bytes", int64_t(e.scoreBytes)},
      {"lse", e.writeLse},
      {"score_buffer_bytes_per_head",
       int64_t(uint64_t(s.seqQ) * uint64_t(s.seqK) * e.scoreBytes)},
      {"ridge_intensity", e.ridgeIntensity},
      {"standard", pointJson(e.standard)},
      {"flash", pointJson(e.flash)},
      {"lower_bound", pointJson(e.compulsory)},
      {"predicted_speedup", e.predictedSpeedup},
      {"lower_bound_speedup", e.lowerBoundSpeedup},
  };
}

// ---- tables -----------------------------------------------------------------------

void printHeader(llvm::raw_ostream &os, const AttentionShape &s, const ChosenGpu &gpu) {
  os << llvm::formatv("Attention forward: {0}, batch {1}, heads {2} (KV {3}), head dim {4}"
                      "{5}, {6}\n",
                      dtypeName(dtype), s.batch, s.headsQ, s.headsKV, s.headDim,
                      s.headDimV == s.headDim ? std::string()
                                              : llvm::formatv(" (V: {0})", s.headDimV).str(),
                      s.causal ? "causal" : "not causal");
  const GpuSpec &g = gpu.spec;
  os << llvm::formatv("GPU: {0} [{1}]: {2:F1} TFLOP/s, {3:F3} TB/s, ridge {4:F1} FLOP/B",
                      g.name, g.source, g.peakFlops / 1e12, g.hbmBytesPerSec / 1e12,
                      g.peakFlops / g.hbmBytesPerSec);
  if (g.sharedPerBlock > 0)
    os << ", " << humanBytes(g.sharedPerBlock) << " shared per block";
  os << "\n";
  if (!gpu.note.empty())
    os << "note: " << gpu.note << "\n";
}

void printEstimate(llvm::raw_ostream &os, const RooflineEstimate &e) {
  const AttentionShape &s = e.shape;
  uint64_t scores = uint64_t(s.seqQ) * uint64_t(s.seqK);
  os << llvm::formatv("Sequence length {0} x {1}: {2} scores per head, S = {3} in {4}, "
                      "S + P = {5}\n",
                      s.seqQ, s.seqK, withCommas(scores), humanBytes(double(scores * e.scoreBytes)),
                      e.scoreBytes == 4 ? "fp32" : "16 bits",
                      humanBytes(double(2 * scores * e.scoreBytes)));
  uint64_t elt = uint64_t(s.elementBytes);
  uint64_t qTile = tuner::tileBytes(e.blockM, uint64_t(s.headDim), elt);
  uint64_t kvTiles = tuner::tileBytes(e.blockM, uint64_t(s.headDim), elt) +
                     tuner::tileBytes(e.blockM, uint64_t(s.headDimV), elt);
  os << llvm::formatv("Flash tiles: block-m {0}: Q tile {1} + K, V tiles of {0} rows {2} "
                      "= {3} on chip",
                      e.blockM, humanBytes(double(qTile)), humanBytes(double(kvTiles)),
                      humanBytes(double(qTile + kvTiles)));
  if (e.gpu.sharedPerBlock > 0)
    os << llvm::formatv(" (of {0}{1})", humanBytes(e.gpu.sharedPerBlock),
                        qTile + kvTiles > uint64_t(e.gpu.sharedPerBlock) ? ": does NOT fit"
                                                                         : "");
  os << "\n";
  os << llvm::formatv("FLOPs: {0} ({1})\n\n", withCommas(e.flash.flops),
                      humanFlops(double(e.flash.flops)));

  const RooflinePoint *points[] = {&e.standard, &e.flash, &e.compulsory};
  auto row = [&](llvm::StringRef label, auto cell) {
    os << llvm::formatv("{0,-20}", label);
    for (const RooflinePoint *p : points)
      os << llvm::formatv("{0,22}", cell(*p));
    os << "\n";
  };
  os << llvm::formatv("{0,-20}{1,22}{2,22}{3,22}\n", "", "standard", "flash", "lower bound");
  row("HBM bytes", [](const RooflinePoint &p) { return humanBytes(double(p.bytes)); });
  row("HBM bytes (exact)", [](const RooflinePoint &p) { return withCommas(p.bytes); });
  row("intensity (FLOP/B)",
      [](const RooflinePoint &p) { return llvm::formatv("{0:F1}", p.intensity).str(); });
  row("compute time", [](const RooflinePoint &p) { return humanTime(p.computeSeconds); });
  row("memory time", [](const RooflinePoint &p) { return humanTime(p.memorySeconds); });
  row("predicted time", [](const RooflinePoint &p) { return humanTime(p.predictedSeconds); });
  row("bound", [](const RooflinePoint &p) { return tuner::boundName(p.bound).str(); });
  os << llvm::formatv("\nPredicted speedup of flash over standard: {0:F2}x "
                      "(up to {1:F2}x at the lower bound)\n",
                      e.predictedSpeedup, e.lowerBoundSpeedup);
  os << llvm::formatv("  standard: S and P written and read in HBM ({0}).\n"
                      "  flash: Q read and O written once, K and V read once per "
                      "{1}-row query tile{2}.\n"
                      "  lower bound: every tensor moved once (flash with all K/V "
                      "re-reads served by L2).\n",
                      e.scoreBytes == 4 ? "fp32" : "16-bit", e.blockM,
                      e.writeLse ? ", plus the fp32 log-sum-exp" : "");
}

void printMeasured(llvm::raw_ostream &os, const RooflineEstimate &e,
                   const tuner::MeasuredReport &m) {
  os << llvm::formatv("\nMeasured {0}: {1:F1} TFLOP/s\n", humanTime(m.measuredSeconds),
                      m.achievedFlopsPerSec / 1e12);
  os << llvm::formatv("  {0} of the roofline (lower bound {1}, {2}-bound)\n",
                      percent(m.fractionOfRoofline), humanTime(e.compulsory.predictedSeconds),
                      tuner::boundName(e.compulsory.bound));
  os << llvm::formatv("  {0} of the flash tile model ({1}){2}\n",
                      percent(m.fractionOfTileModel), humanTime(e.flash.predictedSeconds),
                      m.fractionOfTileModel > 1 ? ": faster than the model, so L2 serves "
                                                  "some of the K/V re-reads"
                                                : "");
}

int fail(llvm::Error err) {
  llvm::errs() << "flashjit roofline: " << takeErrorReport(std::move(err)).message << "\n";
  return 1;
}

int listPresets() {
  llvm::outs() << llvm::formatv("{0,-15}{1,12}{2,10}{3,12}{4,14}{5,6}  {6}\n", "name",
                                "TFLOP/s", "TB/s", "smem/SM", "smem/block", "SMs", "source");
  for (const GpuSpec &g : tuner::gpuPresets())
    llvm::outs() << llvm::formatv("{0,-15}{1,12:F1}{2,10:F3}{3,12}{4,14}{5,6}  {6}\n", g.name,
                                  g.peakFlops / 1e12, g.hbmBytesPerSec / 1e12,
                                  humanBytes(g.sharedPerSM), humanBytes(g.sharedPerBlock),
                                  g.smCount, g.source);
  return 0;
}

int runSweep(const ChosenGpu &gpu) {
  if (seqlen.getNumOccurrences() || seqlenK.getNumOccurrences() ||
      measuredUs.getNumOccurrences())
    return fail(makeError(ErrorCode::InvalidValue,
                          "--sweep sets both sequence lengths; it takes no --seqlen, "
                          "--seqlen-k or --measured-us"));
  llvm::json::Array rows;
  bool first = true;
  for (unsigned n : sweep) {
    llvm::Expected<AttentionShape> shape = shapeFromOptions(n, n);
    if (!shape)
      return fail(shape.takeError());
    llvm::Expected<RooflineEstimate> e =
        tuner::estimate(*shape, gpu.spec, blockM, dtypeBytes(scoreDtype), lse);
    if (!e)
      return fail(e.takeError());
    if (json) {
      rows.push_back(estimateJson(*e));
      continue;
    }
    if (first) {
      printHeader(llvm::outs(), *shape, gpu);
      llvm::outs() << llvm::formatv("flash: block-m {0}; standard: S, P in {1}\n\n", blockM,
                                    dtypeName(scoreDtype));
      llvm::outs() << llvm::formatv("{0,8}{1,14}{2,9}{3,14}{4,9}{5,10}{6,14}{7,10}\n", "N",
                                    "standard", "bound", "flash", "bound", "speedup",
                                    "lower bound", "up to");
      first = false;
    }
    llvm::outs() << llvm::formatv("{0,8}{1,14}{2,9}{3,14}{4,9}{5,9:F2}x{6,14}{7,9:F2}x\n",
                                  n, humanTime(e->standard.predictedSeconds),
                                  tuner::boundName(e->standard.bound),
                                  humanTime(e->flash.predictedSeconds),
                                  tuner::boundName(e->flash.bound), e->predictedSpeedup,
                                  humanTime(e->compulsory.predictedSeconds),
                                  e->lowerBoundSpeedup);
  }
  if (json)
    llvm::outs() << llvm::formatv(
        "{0:2}\n", llvm::json::Value(llvm::json::Object{{"gpu", gpuJson(gpu)},
                                                       {"rows", std::move(rows)}}));
  return 0;
}

int runRoofline() {
  if (listGpus)
    return listPresets();
  llvm::Expected<ChosenGpu> gpu = chooseGpu();
  if (!gpu)
    return fail(gpu.takeError());
  if (!sweep.empty())
    return runSweep(*gpu);
  if (!seqlen.getNumOccurrences())
    return fail(makeError(ErrorCode::InvalidValue, "--seqlen (or --sweep) is required"));
  llvm::Expected<AttentionShape> shape =
      shapeFromOptions(seqlen, seqlenK.getNumOccurrences() ? unsigned(seqlenK) : seqlen);
  if (!shape)
    return fail(shape.takeError());
  llvm::Expected<RooflineEstimate> e =
      tuner::estimate(*shape, gpu->spec, blockM, dtypeBytes(scoreDtype), lse);
  if (!e)
    return fail(e.takeError());
  std::optional<tuner::MeasuredReport> measured;
  if (measuredUs.getNumOccurrences()) {
    llvm::Expected<tuner::MeasuredReport> m = tuner::compareMeasured(*e, measuredUs * 1e-6);
    if (!m)
      return fail(m.takeError());
    measured = *m;
  }
  if (json) {
    llvm::json::Object o = estimateJson(*e);
    o["gpu"] = gpuJson(*gpu);
    if (measured)
      o["measured"] = llvm::json::Object{
          {"seconds", measured->measuredSeconds},
          {"achieved_flops_per_second", measured->achievedFlopsPerSec},
          {"fraction_of_roofline", measured->fractionOfRoofline},
          {"fraction_of_tile_model", measured->fractionOfTileModel},
      };
    llvm::outs() << llvm::formatv("{0:2}\n", llvm::json::Value(std::move(o)));
    return 0;
  }
  printHeader(llvm::outs(), *shape, *gpu);
  printEstimate(llvm::outs(), *e);
  if (measured)
    printMeasured(llvm::outs(), *e, *measured);
  return 0;
}

RegisterCommand reg(sub, &runRoofline);

} // namespace
} // namespace flashjit::tools
