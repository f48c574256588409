#include "tuner/family.h"

#include "generator/bwd_wgmma.h"
#include "support/env.h"
#include "support/error.h"

namespace flashjit::tuner {
namespace {

// Whether the generator accepts `family` for `target` (the single source of truth for
// where a family runs: generator::validateSpec), at the default spec's head dims (128,
// which every family takes).
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

// `name` parsed as a family of `op`; InvalidValue listing `expected` otherwise (a typo, or
// another operation's family).
llvm::Expected<generator::Family> parseFamilyOf(generator::Operation op, llvm::StringRef name,
                                                llvm::StringRef expected) {
  llvm::Expected<generator::Family> family = generator::parseFamily(name.lower());
  if (family && generator::operationOf(*family) == op)
    return *family;
  if (!family)
    llvm::consumeError(family.takeError());
  return makeError(ErrorCode::InvalidValue, "'{0}' is not a {1} kernel family (expected {2})",
                   name, generator::operationName(op), expected);
}

// The forward part of familyPlan.
llvm::Expected<FamilyPlan> forwardPlan(llvm::StringRef target, llvm::StringRef forced) {
  llvm::StringRef name = forced.trim();
  FamilyPlan plan;
  plan.forced = !name.empty() && !name.equals_insensitive("auto");
  generator::Family wanted = generator::Family::FwdWgmma;
  if (plan.forced) {
    // A backward or decode family is no primary: fj_forward would launch it.
    llvm::Expected<generator::Family> family =
        parseFamilyOf(generator::Operation::Forward, name, "auto, fwd_mma or fwd_wgmma");
    if (!family)
      return family.takeError();
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

// plan.backward and plan.backwardForced for `target` (familyPlan's `forcedBackward`).
llvm::Error chooseBackward(FamilyPlan &plan, llvm::StringRef target, llvm::StringRef forced) {
  llvm::StringRef name = forced.trim();
  plan.backwardForced = !name.empty() && !name.equals_insensitive("auto");
  plan.backward = generator::Family::BwdMma;
  generator::Family wanted = generator::Family::BwdWgmma;
  if (plan.backwardForced) {
    llvm::Expected<generator::Family> family =
        parseFamilyOf(generator::Operation::Backward, name, "auto, bwd_mma or bwd_wgmma");
    if (!family)
      return family.takeError();
    wanted = *family;
  }
  if (runsOn(wanted, target))
    plan.backward = wanted;
  else if (plan.backwardForced)
    return makeError(ErrorCode::NotSupported,
                     "{0} cannot run on target '{1}' (it needs sm_90a); use bwd_mma or auto "
                     "there",
                     generator::familyName(wanted), target);
  return llvm::Error::success();
}

// An error named after the environment variable it came from.
llvm::Error prefixed(llvm::StringRef variable, llvm::Error err) {
  ErrorReport report = takeErrorReport(std::move(err));
  return makeError(report.code, "${0}: {1}", variable, report.message);
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

llvm::Expected<FamilyPlan> familyPlan(llvm::StringRef target, llvm::StringRef forced,
                                      llvm::StringRef forcedBackward) {
  llvm::Expected<FamilyPlan> plan = forwardPlan(target, forced);
  if (!plan)
    return plan.takeError();
  if (llvm::Error err = chooseBackward(*plan, target, forcedBackward))
    return std::move(err);
  return plan;
}

llvm::Expected<FamilyPlan> familyPlanFromEnv(llvm::StringRef target) {
  std::optional<std::string> forward = getEnv("FLASHJIT_FAMILY");
  llvm::Expected<FamilyPlan> plan = forwardPlan(target, forward ? *forward : "");
  if (!plan)
    return prefixed("FLASHJIT_FAMILY", plan.takeError());
  std::optional<std::string> backward = getEnv("FLASHJIT_BACKWARD_FAMILY");
  if (llvm::Error err = chooseBackward(*plan, target, backward ? *backward : ""))
    return prefixed("FLASHJIT_BACKWARD_FAMILY", std::move(err));
  return plan;
}

llvm::Expected<generator::Family> backwardFamilyFor(const FamilyPlan &plan,
                                                    const generator::KernelSpec &spec) {
  if (plan.backward != generator::Family::BwdWgmma)
    return plan.backward;
  generator::KernelSpec probe = spec;
  probe.family = generator::Family::BwdWgmma;
  // Features bwd_wgmma does not take (soft-capping with ALiBi, ...): bwd_mma runs those.
  if (std::optional<std::string> why = generator::bwdWgmmaFeatureRefusal(probe)) {
    if (!plan.backwardForced)
      return generator::Family::BwdMma;
    return makeError(ErrorCode::NotSupported,
                     "$FLASHJIT_BACKWARD_FAMILY is bwd_wgmma, and {0}; unset it or set auto to "
                     "run bwd_mma there",
                     *why);
  }
  if (generator::bwdWgmmaSupportsHeadDims(probe))
    return generator::Family::BwdWgmma;
  if (!plan.backwardForced)
    return generator::Family::BwdMma;  // takes every head dim
  return makeError(ErrorCode::NotSupported,
                   "$FLASHJIT_BACKWARD_FAMILY is bwd_wgmma, which does not take head_dim {0} / "
                   "head_dim_v {1} (it takes each a multiple of 8 from 32 to 256); unset it or "
                   "set auto to run bwd_mma there",
                   spec.headDim, spec.headDimV);
}

} // namespace flashjit::tuner
