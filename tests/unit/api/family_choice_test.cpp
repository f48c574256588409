// The kernel family fj_kernel_get loads for a device's target, without a GPU:
// fwd_wgmma first and fwd_mma as its fallback on sm_90a, fwd_mma alone elsewhere or when
// forced; the backward pass's family per head dims; and the arguments that make fj_forward take the fallback are ones the C API
// accepts.
#include "api_fixtures.h"

#include "api/handles.h"
#include "api/validate.h"
#include "support/error.h"
#include "tuner/loaded_kernel.h"

using namespace flashjit;
using namespace flashjit::apitest;
using generator::Family;

namespace {

api::AttentionDesc checkedDesc() {
  fj_attention_desc desc = validDesc();  // bf16, d128, causal
  auto checked = api::checkDesc(&desc);
  EXPECT_TRUE((bool)checked) << llvm::toString(checked.takeError());
  return *checked;
}

std::vector<generator::KernelSpec> specsFor(const char *target, const char *forced = "") {
  auto plan = tuner::familyPlan(target, forced);
  EXPECT_TRUE((bool)plan) << llvm::toString(plan.takeError());
  return api::kernelSpecsFor(checkedDesc(), target, *plan);
}

TEST(ApiFamily, Sm90aLoadsWgmmaThenItsMmaFallback) {
  auto specs = specsFor("sm_90a");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].key(), "fwd_wgmma.bf16.d128.dv128.causal.sm90a");
  EXPECT_EQ(specs[1].key(), "fwd_mma.bf16.d128.dv128.causal.sm90a");
  for (const generator::KernelSpec &spec : specs)
    EXPECT_FALSE(bool(generator::validateSpec(spec))) << spec.key();
}

TEST(ApiFamily, OtherTargetsAndForcedMmaLoadMmaAlone) {
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    auto specs = specsFor(target);
    ASSERT_EQ(specs.size(), 1u) << target;
    EXPECT_EQ(specs[0].family, Family::FwdMma) << target;
    EXPECT_EQ(specs[0].target, target);
  }
  auto forced = specsFor("sm_90a", "fwd_mma");
  ASSERT_EQ(forced.size(), 1u);
  EXPECT_EQ(forced[0].key(), "fwd_mma.bf16.d128.dv128.causal.sm90a");
}

TEST(ApiFamily, SpecsFollowTheDescription) {
  fj_attention_desc desc = validDesc();
  desc.dtype = FJ_DTYPE_FP16;
  desc.head_dim = 72;
  desc.head_dim_v = 40;
  desc.causal = 0;
  auto checked = api::checkDesc(&desc);
  ASSERT_TRUE((bool)checked);
  auto specs = api::kernelSpecsFor(*checked, "sm_90a", *tuner::familyPlan("sm_90a"));
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].key(), "fwd_wgmma.fp16.d72.dv40.nocausal.sm90a");
  EXPECT_EQ(specs[1].key(), "fwd_mma.fp16.d72.dv40.nocausal.sm90a");
}

// The backward pass (desc.backward): bwd_wgmma on sm_90a for head dims 64, 128 and 256,
// bwd_mma for the others and elsewhere; $FLASHJIT_BACKWARD_FAMILY's choice honoured or
// refused with its name.
TEST(ApiFamily, BackwardSpecFollowsTheTargetAndHeadDims) {
  auto backwardKey = [](const char *target, int d, int dv, const char *forced = "") {
    fj_attention_desc desc = validDesc();  // bf16, causal
    desc.head_dim = d;
    desc.head_dim_v = dv;
    desc.backward = 1;
    auto checked = api::checkDesc(&desc);
    EXPECT_TRUE((bool)checked) << llvm::toString(checked.takeError());
    auto plan = tuner::familyPlan(target, "", forced);
    EXPECT_TRUE((bool)plan) << llvm::toString(plan.takeError());
    auto spec = api::backwardSpecFor(*checked, target, *plan);
    return spec ? spec->key() : "error: " + takeErrorReport(spec.takeError()).message;
  };
  EXPECT_EQ(backwardKey("sm_90a", 128, 128), "bwd_wgmma.bf16.d128.dv128.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 64, 64), "bwd_wgmma.bf16.d64.dv64.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 256, 256), "bwd_wgmma.bf16.d256.dv256.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 192, 192), "bwd_wgmma.bf16.d192.dv192.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 96, 96), "bwd_wgmma.bf16.d96.dv96.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 72, 72), "bwd_wgmma.bf16.d72.dv72.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 24, 24), "bwd_mma.bf16.d24.dv24.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 128, 64), "bwd_wgmma.bf16.d128.dv64.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 192, 128), "bwd_wgmma.bf16.d192.dv128.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_90a", 128, 16), "bwd_mma.bf16.d128.dv16.causal.sm90a");
  EXPECT_EQ(backwardKey("sm_80", 128, 128), "bwd_mma.bf16.d128.dv128.causal.sm80");
  EXPECT_EQ(backwardKey("sm_90", 64, 64), "bwd_mma.bf16.d64.dv64.causal.sm90");
  EXPECT_EQ(backwardKey("sm_90a", 128, 128, "bwd_mma"), "bwd_mma.bf16.d128.dv128.causal.sm90a");
  std::string refused = backwardKey("sm_90a", 24, 24, "bwd_wgmma");
  EXPECT_EQ(refused.rfind("error: ", 0), 0u) << refused;
  EXPECT_NE(refused.find("$FLASHJIT_BACKWARD_FAMILY"), std::string::npos) << refused;
}

// The calls that go to the fallback are valid C API calls (so fj_forward must serve them,
// not reject them): variable-length batches without their packed row counts, and a
// stride that is not a multiple of 8 on a dimension of one element (never multiplied by
// anything but 0, but not encodable in a tensor map).
TEST(ApiFamily, CallsForTheFallbackPassValidation) {
  fj_attention_desc desc = validDesc();
  api::AttentionDesc checked = checkedDesc();
  FjForwardParams params;
  bool noWork = false;

  fj_forward_args args = validArgs(desc);
  llvm::Error error = api::checkForwardArgs(checked, &args, params, noWork);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_EQ(tuner::tmaArgumentProblem(params), nullptr) << "the ordinary call stays on TMA";

  args = validArgs(desc);
  args.batch = 1;
  args.q_batch_stride = 12345;
  args.k_batch_stride = 3;
  error = api::checkForwardArgs(checked, &args, params, noWork);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_NE(tuner::tmaArgumentProblem(params), nullptr);

  args = validArgs(desc);
  args.seqlen_k = 0;
  args.k = args.v = nullptr;
  error = api::checkForwardArgs(checked, &args, params, noWork);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_FALSE(noWork) << "no keys still writes o (and lse)";
  EXPECT_NE(tuner::tmaArgumentProblem(params), nullptr);

  args = validArgs(desc);
  static const int32_t *fakeCu = reinterpret_cast<const int32_t *>(fakeDevicePointer(9));
  args.cu_seqlens_q = args.cu_seqlens_k = fakeCu;
  args.total_q = 300;
  error = api::checkForwardArgs(checked, &args, params, noWork);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_NE(tuner::tmaArgumentProblem(params), nullptr) << "total_k unknown";

  // With both packed row counts a variable-length batch stays on TMA.
  args.total_k = 500;
  error = api::checkForwardArgs(checked, &args, params, noWork);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  EXPECT_EQ(params.total_q, 300);
  EXPECT_EQ(params.total_k, 500);
  EXPECT_EQ(tuner::tmaArgumentProblem(params), nullptr);
}

} // namespace
