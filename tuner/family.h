// Which kernel family serves an attention description on a target, and which one takes
// the calls the first cannot (docs/API.md, "Kernel families"). One policy for the C
// API (what fj_kernel_get loads) and for `flashjit tune` (what a sweep prepares), so a
// swept cache holds what the API will ask for.
#pragma once

#include "generator/spec.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <vector>

namespace flashjit::tuner {

struct FamilyPlan {
  generator::Family primary = generator::Family::FwdMma;
  // Loaded next to the primary for the arguments it cannot take: fwd_wgmma loads through
  // TMA, which refuses cu_seqlens, strides that are not multiples of 16 bytes and empty
  // K/V (tuner::tmaArgumentProblem); fwd_mma takes everything the API accepts.
  std::optional<generator::Family> fallback;
  bool forced = false;  // chosen by $FLASHJIT_FAMILY rather than by the target
  // The backward pass's family (desc.backward) where the spec's head dims allow it:
  // bwd_wgmma on sm_90a, bwd_mma (every target, every head dim) elsewhere. Which one a
  // spec gets is backwardFamilyFor's.
  generator::Family backward = generator::Family::BwdMma;
  bool backwardForced = false;  // chosen by $FLASHJIT_BACKWARD_FAMILY
  // The decode kernels' family (desc.decode): dec_mma, which runs on every target.
  generator::Family decode = generator::Family::DecMma;

  // The families a kernel loads, primary first.
  std::vector<generator::Family> families() const;
  // "fwd_wgmma (fwd_mma fallback)", "fwd_mma".
  std::string describe() const;
};

// The plan for `target`. `forced` is "" or "auto" (the default: fwd_wgmma with an
// fwd_mma fallback where the generator accepts fwd_wgmma, i.e. sm_90a; fwd_mma alone
// elsewhere), or a forward family's name: "fwd_mma" alone, or "fwd_wgmma" with its
// fwd_mma fallback (an error on a target it cannot run on). `forcedBackward` likewise
// for the backward pass: "" or "auto" (bwd_wgmma where the generator accepts it, i.e.
// sm_90a, else bwd_mma), "bwd_mma", or "bwd_wgmma" (an error on a target it cannot run
// on). Pure: no device, no environment.
llvm::Expected<FamilyPlan> familyPlan(llvm::StringRef target, llvm::StringRef forced = "",
                                      llvm::StringRef forcedBackward = "");

// familyPlan(target, $FLASHJIT_FAMILY, $FLASHJIT_BACKWARD_FAMILY); errors name the
// variable.
llvm::Expected<FamilyPlan> familyPlanFromEnv(llvm::StringRef target);

// The backward family of a spec (its head dims and features; its family is ignored)
// under `plan`: plan.backward where that family takes the spec's head dims, else bwd_mma,
// which takes every head dim. A forced bwd_wgmma that cannot take them is an error
// (NotSupported, naming $FLASHJIT_BACKWARD_FAMILY) rather than a silent bwd_mma. One
// rule for fj_kernel_get and for `flashjit tune --backward`, so that a swept cache holds
// what the API asks for.
llvm::Expected<generator::Family> backwardFamilyFor(const FamilyPlan &plan,
                                                    const generator::KernelSpec &spec);

} // namespace flashjit::tuner
