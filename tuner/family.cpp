#include "tuner/family.h"

#include "support/env.h"
#include "support/error.h"

namespace flashjit::tuner {
namespace {

// Whether the generator accepts `family` for `target` (the single source of truth for
// where a family runs: generator::validateSpec).
bool runsOn(generator::Family family, llvm::StringRef target) {
  generator::KernelSpec probe;
  probe.family = family;
  probe.target = target.str();
  if (llvm::Error err = generator::validateSpec(probe)) {
    llvm::consumeError(std::move(err));
    return false;
  }
  return true;
}

} // namespace

std::vector<generator::Family> FamilyPlan::families() const {
  std::vector<generator::Family> out{primary};
  if (fallback)
    out.push_back(*fallback);
  return out;
}

std::string FamilyPlan::describe() const {
  std::string text = generator::familyName(primary).str();
  if (fallback)
    text += " (" + generator::familyName(*fallback).str() + " fallback)";
  return text;
}

llvm::Expected<FamilyPlan> familyPlan(llvm::StringRef target, llvm::StringRef forced) {
  llvm::StringRef name = forced.trim();
  FamilyPlan plan;
  plan.forced = !name.empty() && !name.equals_insensitive("auto");
  generator::Family wanted = generator::Family::FwdWgmma;
  if (plan.forced) {
    llvm::Expected<generator::Family> family = generator::parseFamily(name.lower());
    if (!family) {
      llvm::consumeError(family.takeError());
      return makeError(ErrorCode::InvalidValue,
                       "unknown kernel family '{0}' (expected auto, fwd_mma or fwd_wgmma)",
                       name);
    }
    wanted = *family;
  }
  if (wanted == generator::Family::FwdMma)
    return plan;  // fwd_mma takes every argument: no fallback
  if (!runsOn(wanted, target)) {
    if (plan.forced)
      return makeError(ErrorCode::NotSupported,
                       "{0} cannot run on target '{1}' (it needs sm_90a); use fwd_mma or "
                       "auto there",
                       generator::familyName(wanted), target);
    return plan;
  }
  plan.primary = wanted;
  plan.fallback = generator::Family::FwdMma;
  return plan;
}

llvm::Expected<FamilyPlan> familyPlanFromEnv(llvm::StringRef target) {
  std::optional<std::string> value = getEnv("FLASHJIT_FAMILY");
  llvm::Expected<FamilyPlan> plan = familyPlan(target, value ? *value : "");
  if (!plan) {
    ErrorReport report = takeErrorReport(plan.takeError());
    return makeError(report.code, "$FLASHJIT_FAMILY: {0}", report.message);
  }
  return plan;
}

} // namespace flashjit::tuner
