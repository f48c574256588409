// The attention-feature options shared by gen, tune and bench (tools/spec_options.h).
#include "tools/spec_options.h"

#include "support/error.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>

namespace flashjit::tools {
namespace cl = llvm::cl;

namespace {
cl::OptionCategory &featureCategory() {
  static cl::OptionCategory category(
      "attention features (the forward families and the backward pass; docs/FEATURES.md)");
  return category;
}
} // namespace

FeatureOptions::FeatureOptions(cl::SubCommand &sub)
    : window_("window",
              cl::desc("Sliding window, bottom-right aligned like --causal: query i sees keys "
                       "i+diag-L .. i+diag+R; -1 leaves a side unbounded (e.g. 1024,0)"),
              cl::value_desc("L,R"), cl::sub(sub), cl::cat(featureCategory())),
      softcap_("softcap",
               cl::desc("Soft-capping: scores become X * tanh(score / X) (X > 0; 0: off)"),
               cl::value_desc("X"), cl::sub(sub), cl::cat(featureCategory())),
      alibi_("alibi",
             cl::desc("ALiBi: bias -slope[b,h] * |i + diag - j| (slopes given at run time)"),
             cl::sub(sub), cl::cat(featureCategory())),
      scoreModFile_("score-mod",
                    cl::desc("User CUDA code: the body of float score_mod(float score, int b, "
                             "int h, int q_idx, int kv_idx, const FjModArgs &args)"),
                    cl::value_desc("file"), cl::sub(sub), cl::cat(featureCategory())),
      maskModFile_("mask-mod",
                   cl::desc("User CUDA code: the body of bool mask_mod(int b, int h, int "
                            "q_idx, int kv_idx, const FjModArgs &args) (true keeps the key)"),
                   cl::value_desc("file"), cl::sub(sub), cl::cat(featureCategory())) {}

bool FeatureOptions::given() const {
  return window_.getNumOccurrences() || softcap_.getNumOccurrences() ||
         alibi_.getNumOccurrences() || scoreModFile_.getNumOccurrences() ||
         maskModFile_.getNumOccurrences();
}

llvm::Expected<std::pair<int, int>> parseWindowOption(llvm::StringRef text) {
  auto bad = [&] {
    return makeError(ErrorCode::InvalidValue,
                     "--window '{0}': expected L,R, each an integer >= 0 or -1 for an "
                     "unbounded side (e.g. --window 1024,0)",
                     text);
  };
  llvm::SmallVector<llvm::StringRef, 3> parts;
  text.split(parts, ',');
  if (parts.size() != 2)
    return bad();
  int left = 0, right = 0;
  if (parts[0].trim().getAsInteger(10, left) || parts[1].trim().getAsInteger(10, right))
    return bad();
  if (left < -1 || right < -1)
    return makeError(ErrorCode::InvalidValue,
                     "--window {0}: window sizes are {1} (left) and {2} (right): each must be "
                     ">= 0, or -1 for unbounded",
                     text, left, right);
  if (left < 0 && right < 0)
    return makeError(ErrorCode::InvalidValue,
                     "--window {0}: a window with both sides unbounded is no window: bound a "
                     "side or leave --window out",
                     text);
  return std::make_pair(left, right);
}

llvm::Expected<std::string> readUserCodeFile(llvm::StringRef option, llvm::StringRef path) {
  if (path.empty())
    return makeError(ErrorCode::InvalidValue, "{0}: expected a file name", option);
  if (llvm::sys::fs::is_directory(path))
    return makeError(ErrorCode::InvalidValue, "{0} {1}: cannot read it: it is a directory",
                     option, path);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return makeError(ErrorCode::InvalidValue, "{0} {1}: cannot read it: {2}", option, path,
                     buffer.getError().message());
  std::string text = (*buffer)->getBuffer().str();
  if (llvm::StringRef(text).trim().empty())
    return makeError(ErrorCode::InvalidValue,
                     "{0} {1}: the file is empty (expected the body of the function, e.g. "
                     "`return score;`)",
                     option, path);
  return text;
}

llvm::Error checkFamilyTakesFeatures(generator::Family family,
                                     const generator::Features &features, llvm::StringRef how) {
  generator::KernelSpec probe;
  probe.family = family;
  probe.features = features;
  if (family == generator::Family::FwdWgmma || family == generator::Family::BwdWgmma)
    probe.target = "sm_90a";
  if (llvm::Error err = generator::validateFeatures(probe)) {
    ErrorReport report = takeErrorReport(std::move(err));
    return makeError(report.code, "{0}: {1}", how, report.message);
  }
  return llvm::Error::success();
}

llvm::Error checkUserCodeRunsWithZeroArgs(const generator::Features &features,
                                          llvm::StringRef verb) {
  if (features.needsTuningArgs())
    return makeError(ErrorCode::NotSupported,
                     "not supported yet: the user code reads args.tensor, and {0} has no "
                     "tensors to pass it (its args are zero); time a mod that does not, or "
                     "tune it through the C API with tuning_mod_args",
                     verb);
  if (!features.scoreMod.empty() || !features.maskMod.empty())
    llvm::errs() << "flashjit " << verb
                 << ": note: the user code runs with args all zero (args.scalar[i] = 0, "
                    "args.integer[i] = 0)\n";
  return llvm::Error::success();
}

llvm::Expected<generator::Features> FeatureOptions::features() const {
  generator::Features f;
  if (window_.getNumOccurrences()) {
    llvm::Expected<std::pair<int, int>> sides = parseWindowOption(window_);
    if (!sides)
      return sides.takeError();
    f.window = true;
    f.windowLeft = sides->first;
    f.windowRight = sides->second;
  }
  if (softcap_.getNumOccurrences()) {
    double value = 0;
    if (llvm::StringRef(softcap_).trim().getAsDouble(value, /*AllowInexact=*/true))
      return makeError(ErrorCode::InvalidValue,
                       "--softcap '{0}': expected a number > 0 (e.g. --softcap 30; 0: off)",
                       softcap_.getValue());
    // Checked here too: validateFeatures lets a spec with no feature on through, and a
    // NaN or negative cap turns no feature on.
    if (!std::isfinite((float)value) || value < 0)
      return makeError(ErrorCode::InvalidValue,
                       "--softcap {0}: must be finite and > 0 (0: no soft-capping)",
                       softcap_.getValue());
    f.softcap = (float)value;
  }
  f.alibi = alibi_;
  if (scoreModFile_.getNumOccurrences()) {
    llvm::Expected<std::string> text = readUserCodeFile("--score-mod", scoreModFile_);
    if (!text)
      return text.takeError();
    f.scoreMod = std::move(*text);
  }
  if (maskModFile_.getNumOccurrences()) {
    llvm::Expected<std::string> text = readUserCodeFile("--mask-mod", maskModFile_);
    if (!text)
      return text.takeError();
    f.maskMod = std::move(*text);
  }
  // The rest of validateFeatures' checks (softcap finite and >= 0, code size, NUL; its
  // messages name the feature), as for a forward family: a verb checks its own families
  // with checkFamilyTakesFeatures.
  generator::KernelSpec probe;
  probe.features = f;
  if (llvm::Error err = generator::validateFeatures(probe))
    return std::move(err);
  return f;
}

} // namespace flashjit::tools
