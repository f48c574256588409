// Block masks (C API 0.6) without a GPU: fj_forward_args.block_mask as the argument
// checks see it (refused without a mask_mod, read as NULL from a 0.5-sized struct, a
// struct_size cutting it refused), fj_block_mask_options_init, and the checks that
// fj_block_mask_create / _update / _destroy and fj_kernel_release make before any device
// use, on handles built here from their parts (api/handles.h) as in handles_test.cpp.
// What needs kernels (building, launching, the shape and variant checks of fj_forward)
// is in tests/gpu/api_block_mask_test.cpp.
#include "api_fixtures.h"

#include "api/handles.h"
#include "api/live_handles.h"
#include "api/validate.h"

#include <cstring>
#include <string>

using namespace flashjit;
using namespace flashjit::apitest;

namespace {

const char *kDocumentMask =
    "const int *doc = (const int *)args.tensor[0];\nreturn doc[q_idx] == doc[kv_idx];";

fj_attention_desc maskDesc() {
  fj_attention_desc desc = validDesc();  // bf16, d128, causal, 8 / 2 heads
  desc.mask_mod = kDocumentMask;
  return desc;
}

// Never dereferenced by the argument checks (they only look at whether it is set).
fj_block_mask fakeMask() { return static_cast<fj_block_mask>(fakeDevicePointer(30)); }

api::AttentionDesc checked(const fj_attention_desc &desc) {
  auto out = api::checkDesc(&desc);
  EXPECT_TRUE((bool)out) << llvm::toString(out.takeError());
  return out ? *out : api::AttentionDesc{};
}

// A context with no device, registered as live, and kernels of it with a description.
fj_context_s *deviceFreeContext() {
  auto *context = new fj_context_s();
  api::LiveHandles::get().add(context);
  return context;
}

fj_kernel_s *kernelOf(fj_context_s *context, const fj_attention_desc &desc) {
  auto *kernel = new fj_kernel_s();
  kernel->desc = checked(desc);
  api::adoptKernel(*context, kernel);
  return kernel;
}

// What fj_block_mask_destroy does, less the device: the context has none to make current
// (a real context always has one).
void forgetMask(fj_block_mask mask) {
  ASSERT_TRUE(api::LiveHandles::get().remove(mask));
  mask->kernel->blockMasks.fetch_sub(1);
  delete mask;
}

TEST(ApiBlockMask, OptionsInitZeroesAndSetsTheSize) {
  fj_block_mask_options options;
  std::memset(&options, 0x5A, sizeof options);
  fj_block_mask_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(fj_block_mask_options));
  EXPECT_EQ(options.shared_across_batch, 0);
  EXPECT_EQ(options.shared_across_heads, 0);
  fj_block_mask_options_init(nullptr);  // a no-op, as the other _init functions
}

TEST(ApiBlockMask, ArgsInitLeavesNoMask) {
  fj_forward_args args;
  std::memset(&args, 0x5A, sizeof args);
  fj_forward_args_init(&args);
  EXPECT_EQ(args.block_mask, nullptr);
  EXPECT_EQ(args.struct_size, sizeof(fj_forward_args));
}

// ---- fj_forward_args.block_mask in the argument checks --------------------------------

TEST(ApiBlockMask, ValidateRefusesABlockMaskWithoutMaskMod) {
  expectRejected({"BlockMaskWithoutMaskMod",
                  [](fj_attention_desc &, fj_forward_args &a) { a.block_mask = fakeMask(); },
                  FJ_ERROR_INVALID_VALUE,
                  {"args->block_mask is set", "the description has no mask_mod"}});
  // The other features do not make a description one a block mask serves.
  expectRejected({"BlockMaskWithScoreModOnly",
                  [](fj_attention_desc &d, fj_forward_args &a) {
                    d.score_mod = "return score;";
                    d.window = 1, d.window_left = 64, d.window_right = 0;
                    a.block_mask = fakeMask();
                  },
                  FJ_ERROR_INVALID_VALUE, {"args->block_mask", "no mask_mod"}});
}

TEST(ApiBlockMask, ValidateAcceptsABlockMaskWithMaskMod) {
  fj_attention_desc desc = maskDesc();
  fj_forward_args args = validArgs(desc);
  args.block_mask = fakeMask();
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &args)));
  // The checks hand the mask to the caller; the launch parameters do not point at it
  // until fj_forward has checked it against the kernel (api/block_mask.cpp).
  FjForwardParams params;
  bool noWork = true;
  fj_block_mask given = nullptr;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork, &given)));
  EXPECT_EQ(given, fakeMask());
  EXPECT_EQ(params.block_counts, nullptr);
  EXPECT_EQ(params.block_tiles, nullptr);
  // Without a mask: NULL.
  args.block_mask = nullptr;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork, &given)));
  EXPECT_EQ(given, nullptr);
}

// A 16-bit call's workspace is read only with a block mask, as the walk's tile counter:
// then it is checked (4 bytes, 4-byte aligned) and handed on; without a mask it is
// ignored as before.
TEST(ApiBlockMask, WorkspaceIsTheTileCounterOfABlockMaskCall) {
  fj_attention_desc desc = maskDesc();
  fj_forward_args args = validArgs(desc);
  alignas(16) static int word[4];
  args.workspace = word;
  args.workspace_bytes = 4;
  FjForwardParams params;
  bool noWork = true;
  void *counter = &params;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork, nullptr,
                                          &counter)));
  EXPECT_EQ(counter, nullptr) << "no block mask: the workspace is not read";
  args.block_mask = fakeMask();
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork, nullptr,
                                          &counter)));
  EXPECT_EQ(counter, (void *)word);
  args.workspace = nullptr;
  ASSERT_FALSE(bool(api::checkForwardArgs(checked(desc), &args, params, noWork, nullptr,
                                          &counter)));
  EXPECT_EQ(counter, nullptr) << "optional: a static walk without it";
  expectRejected({"TileCounterTooSmall",
                  [](fj_attention_desc &d, fj_forward_args &a) {
                    d.mask_mod = "return true;";
                    a.block_mask = fakeMask();
                    a.workspace = word;
                    a.workspace_bytes = 2;
                  },
                  FJ_ERROR_INVALID_VALUE, {"args->workspace_bytes is 2", "tile counter"}});
  expectRejected({"TileCounterMisaligned",
                  [](fj_attention_desc &d, fj_forward_args &a) {
                    d.mask_mod = "return true;";
                    a.block_mask = fakeMask();
                    a.workspace = (char *)word + 2;
                    a.workspace_bytes = 4;
                  },
                  FJ_ERROR_INVALID_VALUE, {"workspace"}});
}

// 0.5's forward arguments end at mod_args: accepted, block_mask read as NULL even with
// the caller's garbage after the struct.
TEST(ApiBlockMask, ForwardArgumentsOf05SizeReadBlockMaskAsNull) {
  const size_t sizeof05 = offsetof(fj_forward_args, block_mask);
  static_assert(offsetof(fj_forward_args, block_mask) % alignof(fj_forward_args) == 0,
                "0.5's sizeof is where block_mask starts");
  struct OldArgsInBiggerBuffer {
    fj_forward_args args;
    unsigned char garbage[32];
  };
  for (const fj_attention_desc &desc : {validDesc(), maskDesc()}) {
    OldArgsInBiggerBuffer old;
    std::memset(&old, 0x5A, sizeof(old));
    fj_forward_args valid = validArgs(desc);
    std::memcpy(&old.args, &valid, sizeof05);
    old.args.struct_size = sizeof05;
    // Read as 0x5A5A..., it would be refused on the plain description.
    EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &old.args)));
    FjForwardParams params;
    bool noWork = true;
    fj_block_mask given = fakeMask();
    ASSERT_FALSE(
        bool(api::checkForwardArgs(checked(desc), &old.args, params, noWork, &given)));
    EXPECT_EQ(given, nullptr);
  }
}

// A struct_size that ends inside block_mask is no version's size: refused, naming it.
TEST(ApiBlockMask, StructSizeInsideBlockMaskIsRefused) {
  const size_t at = offsetof(fj_forward_args, block_mask);
  for (const fj_attention_desc &desc : {validDesc(), maskDesc()}) {
    for (size_t cut = at + 1; cut < at + sizeof(void *); ++cut) {
      fj_forward_args args = validArgs(desc);
      args.block_mask = fakeMask();
      args.struct_size = cut;
      const std::string size = "args->struct_size is " + std::to_string(cut) + ":";
      EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &args), FJ_ERROR_INVALID_VALUE,
                            {"fj_validate_forward_args: ", size.c_str(), "block_mask"}))
          << "size " << cut;
    }
  }
  fj_attention_desc desc = maskDesc();
  fj_forward_args whole = validArgs(desc);
  whole.block_mask = fakeMask();
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &whole)));
}

// A newer caller's bytes after block_mask: zero is fine, anything else a request this
// version does not know.
TEST(ApiBlockMask, NewerArgumentsAfterBlockMask) {
  fj_attention_desc desc = maskDesc();
  struct Newer {
    fj_forward_args args;
    unsigned char tail[16];
  } newer;
  std::memset(&newer, 0, sizeof newer);
  newer.args = validArgs(desc);
  newer.args.block_mask = fakeMask();
  newer.args.struct_size = sizeof newer;
  EXPECT_TRUE(succeeds(fj_validate_forward_args(&desc, &newer.args)));
  newer.tail[3] = 1;
  EXPECT_TRUE(failsWith(fj_validate_forward_args(&desc, &newer.args), FJ_ERROR_NOT_SUPPORTED,
                        {"non-zero byte"}));
}

// ---- the entry points, before any device use -----------------------------------------

TEST(ApiBlockMask, NullHandlesAndOutputs) {
  fj_attention_desc desc = maskDesc();
  fj_forward_args args = validArgs(desc);
  fj_block_mask mask = fakeMask();  // must be reset to NULL on failure
  EXPECT_TRUE(failsWith(fj_block_mask_create(nullptr, &args, nullptr, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE, {"fj_block_mask_create: ", "kernel is NULL"}));
  EXPECT_EQ(mask, nullptr);
  fj_kernel_s unregistered;  // never given out: not live
  EXPECT_TRUE(failsWith(fj_block_mask_create(&unregistered, &args, nullptr, nullptr, nullptr),
                        FJ_ERROR_INVALID_VALUE,
                        {"fj_block_mask_create: ", "mask (the output pointer) is NULL"}));
  mask = fakeMask();
  EXPECT_TRUE(failsWith(fj_block_mask_create(&unregistered, &args, nullptr, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE, {"is not a live kernel"}));
  EXPECT_EQ(mask, nullptr);

  EXPECT_TRUE(failsWith(fj_block_mask_update(nullptr, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_block_mask_update: ", "mask is NULL"}));
  EXPECT_TRUE(failsWith(fj_block_mask_destroy(nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_block_mask_destroy: ", "mask is NULL"}));
  // Not a mask at all: found out from the registry, the memory never read.
  int notAHandle = 0;
  auto *bogus = reinterpret_cast<fj_block_mask>(&notAHandle);
  EXPECT_TRUE(failsWith(fj_block_mask_update(bogus, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"is not a live block mask"}));
  EXPECT_TRUE(failsWith(fj_block_mask_destroy(bogus), FJ_ERROR_INVALID_VALUE,
                        {"is not a live block mask"}));
}

TEST(ApiBlockMask, CreateChecksBeforeTouchingADevice) {
  fj_context_s *context = deviceFreeContext();
  fj_kernel_s *plain = kernelOf(context, validDesc());
  fj_kernel_s *masked = kernelOf(context, maskDesc());
  fj_attention_desc desc = maskDesc();
  fj_forward_args args = validArgs(desc);
  fj_block_mask mask = nullptr;

  EXPECT_TRUE(failsWith(fj_block_mask_create(plain, &args, nullptr, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE,
                        {"fj_block_mask_create: ", "has no mask_mod",
                         "a block mask serves only a mask_mod's kernel"}));
  EXPECT_EQ(mask, nullptr);
  EXPECT_TRUE(failsWith(fj_block_mask_create(masked, nullptr, nullptr, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE, {"args is NULL"}));

  fj_block_mask_options options;
  fj_block_mask_options_init(&options);
  options.struct_size = 4;
  EXPECT_TRUE(failsWith(fj_block_mask_create(masked, &args, &options, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE,
                        {"options->struct_size is 4", "fj_block_mask_options"}));
  fj_block_mask_options_init(&options);

  // The arguments are checked as fj_forward checks them: the tensors too, though the
  // build reads none of them.
  fj_forward_args bad = validArgs(desc);
  bad.k_seq_stride = 12;
  EXPECT_TRUE(failsWith(fj_block_mask_create(masked, &bad, &options, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE, {"args->k_seq_stride is 12"}));
  bad = validArgs(desc);
  bad.q = nullptr;
  EXPECT_TRUE(failsWith(fj_block_mask_create(masked, &bad, &options, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE, {"args->q is NULL"}));
  // ... and must not carry a mask themselves.
  fj_forward_args carrying = validArgs(desc);
  carrying.block_mask = fakeMask();
  EXPECT_TRUE(failsWith(fj_block_mask_create(masked, &carrying, nullptr, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE,
                        {"args->block_mask is set", "must not carry one"}));

  // Sequences of different lengths cannot share one mask.
  fj_forward_args varlen = validArgs(desc);
  varlen.cu_seqlens_q = static_cast<const int32_t *>(fakeDevicePointer(6));
  varlen.cu_seqlens_k = static_cast<const int32_t *>(fakeDevicePointer(7));
  options.shared_across_batch = 1;
  EXPECT_TRUE(failsWith(fj_block_mask_create(masked, &varlen, &options, nullptr, &mask),
                        FJ_ERROR_INVALID_VALUE,
                        {"options->shared_across_batch is set", "cu_seqlens"}));
  EXPECT_EQ(mask, nullptr);
  EXPECT_EQ(masked->blockMasks.load(), 0) << "a refused create holds no mask";

  EXPECT_TRUE(succeeds(fj_kernel_release(plain)));
  EXPECT_TRUE(succeeds(fj_kernel_release(masked)));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}

// A call with no work (batch 0) needs no device memory, so its mask is built here: the
// checks of update, fj_forward's no-op and the kernel's release can be seen without one.
TEST(ApiBlockMask, AMaskHoldsItsKernel) {
  fj_context_s *context = deviceFreeContext();
  fj_kernel_s *kernel = kernelOf(context, maskDesc());
  fj_attention_desc desc = maskDesc();
  fj_forward_args none = validArgs(desc);
  none.batch = 0;
  fj_block_mask mask = nullptr;
  ASSERT_TRUE(succeeds(fj_block_mask_create(kernel, &none, nullptr, nullptr, &mask)));
  ASSERT_NE(mask, nullptr);
  EXPECT_EQ(kernel->blockMasks.load(), 1);

  // Release is refused while the mask lives, and the kernel stays live.
  EXPECT_TRUE(failsWith(fj_kernel_release(kernel), FJ_ERROR_INVALID_VALUE,
                        {"fj_kernel_release: ", "1 block mask(s) not yet destroyed",
                         "destroy them first"}));
  EXPECT_TRUE(api::LiveHandles::get().contains(kernel));
  EXPECT_EQ(context->outstanding, 1);

  // Update: the same shape is fine (nothing to build), another shape is refused.
  EXPECT_TRUE(succeeds(fj_block_mask_update(mask, &none, nullptr)));
  fj_forward_args other = validArgs(desc);  // batch 2
  EXPECT_TRUE(failsWith(fj_block_mask_update(mask, &other, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_block_mask_update: ", "built for batch 0", "this call has batch 2",
                         "build a mask for this shape"}));
  fj_forward_args carrying = none;
  carrying.block_mask = mask;
  EXPECT_TRUE(failsWith(fj_block_mask_update(mask, &carrying, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"args->block_mask is set", "must not carry one"}));
  // fj_forward with the mask and no work: a no-op.
  EXPECT_TRUE(succeeds(fj_forward(kernel, &carrying, nullptr)));
  // A second mask counts too.
  fj_block_mask second = nullptr;
  ASSERT_TRUE(succeeds(fj_block_mask_create(kernel, &none, nullptr, nullptr, &second)));
  EXPECT_TRUE(failsWith(fj_kernel_release(kernel), FJ_ERROR_INVALID_VALUE,
                        {"2 block mask(s) not yet destroyed"}));

  forgetMask(second);
  forgetMask(mask);
  EXPECT_TRUE(succeeds(fj_kernel_release(kernel)));
  EXPECT_TRUE(succeeds(fj_context_destroy(context)));
}

} // namespace
