// Checking what callers pass in, before anything touches a device: the versioned
// structs (struct_size), the attention description and the forward, backward and decode
// arguments. Every
// rejection names the field and the value. Needs no GPU, so the unit tests and the
// fuzzer run it in full; fj_forward runs it on every launch, so on success it neither
// allocates nor locks.
#pragma once

#include "flashjit/flashjit.h"
#include "generator/spec.h"
#include "templates/fj_bwd_params.h"
#include "templates/fj_decode_params.h"
#include "templates/fj_params.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace flashjit::api {

// A float as the caller wrote it ("-0.125", "nan", "3e+38"), not rounded.
std::string floatText(double value);

// Largest struct_size accepted: a guard against a garbage size, far above any
// version of the structs.
constexpr size_t kMaxStructSize = 64 * 1024;

// Limits of the launch: heads and batch are grid dimensions y and z (at most 65535);
// sequence lengths are kept where the kernels' int arithmetic cannot overflow.
constexpr int kMaxGridYZ = 65535;
constexpr int kMaxSeqlen = 1 << 30;
// The most splits a decode call takes (tuner::kMaxDecodeSplits; api/decode.cpp checks
// they agree), and the fewest packed query rows a decode row tile has (dec_mma's
// smallest block_m): the grid's y dimension is ceil(seqlen_q * group / that).
constexpr int kMaxDecodeSplits = 128;
constexpr int kMinDecodeRowTile = 16;

constexpr float kLog2e = 1.4426950408889634f;
// The smallest softmax_scale an ALiBi call takes (its kernels divide the slopes by it).
constexpr float kMinAlibiScale = 0x1p-60f;

// Copies a caller's versioned struct into `out`. A struct_size below sizeof(T) is
// rejected; a larger one (a newer header) is accepted when the fields this version
// does not know are all zero, and NOT_SUPPORTED otherwise. `name` is how the message
// names the argument ("desc").
template <typename T>
llvm::Error copyInStruct(const T *in, const char *name, const char *typeName, T &out);

// Writes an output struct into a caller's buffer of in->struct_size bytes (the part
// this version knows; a larger buffer's tail is zeroed).
template <typename T>
llvm::Error copyOutStruct(const T &value, T *out, const char *name, const char *typeName);

// The description, checked, with its defaults applied.
struct AttentionDesc {
  fj_dtype dtype = FJ_DTYPE_BF16;
  fj_dtype outDtype = FJ_DTYPE_BF16;  // o's type: dtype, or out_dtype for FJ_DTYPE_E4M3
  int headDim = 0, headDimV = 0;
  bool causal = false;
  int headsQ = 0, headsKV = 0;
  float scale = 0;  // resolved: never 0
  int seqQHint = 0, seqKHint = 0, batchHint = 0;  // resolved: >= 1
  bool seqHinted = false;    // the caller gave seqlen_q_hint (else 1024 is assumed)
  bool batchHinted = false;  // the caller gave batch_hint (else 1 is assumed here)
  fj_tune_lengths tuneLengths = FJ_TUNE_LENGTHS_AUTO;
  // Whether fj_kernel_get tunes the length ladder (tune_lengths, AUTO resolved).
  bool tunesLadder() const {
    return tuneLengths == FJ_TUNE_LENGTHS_LADDER ||
           (tuneLengths == FJ_TUNE_LENGTHS_AUTO && !seqHinted);
  }
  bool backward = false;  // the kernel also carries the backward pass
  bool decode = false;    // the kernel also carries the decode kernels (dec_mma)
  // The decode cache's type: dtype, or FJ_DTYPE_E4M3 (desc.kv_cache_dtype).
  fj_dtype kvCacheDtype = FJ_DTYPE_BF16;
  bool fp8Cache() const { return kvCacheDtype == FJ_DTYPE_E4M3; }
  // Window, softcap, ALiBi and the user's code (copied), checked; all off for a
  // description older than 0.3. tuningArgs are the caller's, valid during fj_kernel_get
  // only.
  generator::Features features;
};

llvm::Expected<AttentionDesc> checkDesc(const fj_attention_desc *desc);

// "desc->window, desc->alibi": the description's fields that set `features`.
std::string featureFields(const generator::Features &features);

// FP8 (api/validate_fp8.cpp): the description's out_dtype into `out` (for any dtype) and,
// for FJ_DTYPE_E4M3, what it cannot have yet (features, backward, decode: NotSupported).
llvm::Error checkFp8Desc(const fj_attention_desc &desc, AttentionDesc &out);
// FP8 dequantization factors (the forward's q/k/v, the decode cache's k/v): each pointer
// 4-byte aligned (NULL: a factor of 1), both strides from 0 to 2^40.
llvm::Error checkDescaleFactors(
    std::initializer_list<std::pair<const char *, const float *>> factors,
    int64_t batchStride, int64_t headStride);
// desc.kv_cache_dtype into `out` (after dtype and decode): 0 or the dtype, or
// FJ_DTYPE_E4M3 with a 16-bit dtype, desc.decode and head dims multiples of 16.
llvm::Error checkKvCacheDtype(const fj_attention_desc &desc, AttentionDesc &out);
// An FP8 call's own arguments (checkFp8Sizes, byte strides multiples of 16, descale
// factors, workspace) into `params`, after checkForwardArgs' common checks.
llvm::Error checkFp8ForwardArgs(const AttentionDesc &desc, const fj_forward_args &args,
                                FjForwardParams &params);
// The sizes an FP8 call's V^T workspace depends on: with cu_seqlens both packed row
// counts, each at most batch x its longest sequence; V^T within TMA's reach (below 2^31
// key columns and 2^40 bytes a batch). Success for 16-bit descriptions.
llvm::Error checkFp8Sizes(const AttentionDesc &desc, const fj_forward_args &args);
// The workspace an FP8 call of these sizes needs (0 for 16-bit descriptions), once
// checkFp8Sizes passed.
uint64_t fp8WorkspaceBytes(const AttentionDesc &desc, const fj_forward_args &args);

// Checks `args` for a kernel of `desc` and fills the kernels' parameters. `noWork`
// is set when there is nothing to compute (batch or seqlen_q is 0): then nothing
// must be launched. `blockMask`, when given, receives args->block_mask (NULL where the
// caller's struct ends before it); the mask itself is checked against the kernel later
// (api/block_mask.cpp), here only that the description has a mask_mod.
// `tileCounter`, when given, receives the workspace of a 16-bit call with a block mask
// (the persistent walk's tile counter, optional; kTileCounterBytes, 4-byte aligned), else
// NULL.
llvm::Error checkForwardArgs(const AttentionDesc &desc, const fj_forward_args *args,
                             FjForwardParams &params, bool &noWork,
                             fj_block_mask *blockMask = nullptr, void **tileCounter = nullptr);

// The workspace a 16-bit call with a block mask may give: the counter its persistent
// walk hands work tiles out from (docs/API.md, "Block masks").
inline constexpr uint64_t kTileCounterBytes = 4;

// NotSupported when `features` has any (the backward pass has none yet); `what` starts
// the message ("desc->backward is set").
llvm::Error checkBackwardFeatures(const generator::Features &features, const char *what);

// The forward arguments that a backward call carries (lse required by the caller): what
// checkBackwardArgs checks them as, and what fj_block_mask_create takes for them.
fj_forward_args forwardPart(const fj_backward_args &a);

// Checks backward arguments for a kernel of `desc` and fills the kernels' parameters
// (the workspace pointers are left null: the caller binds them). `noWork` as above.
// `blockMask`, when given, receives args->block_mask as checkForwardArgs's does.
llvm::Error checkBackwardArgs(const AttentionDesc &desc, const fj_backward_args *args,
                              FjBackwardParams &params, bool &noWork,
                              fj_block_mask *blockMask = nullptr);

// ALiBi's per-call slopes (fj_forward_args', fj_backward_args', fj_decode_args' fields of
// that name) for a description with desc.alibi: INVALID_VALUE naming the field.
llvm::Error checkAlibiSlopes(const float *slopes, int64_t batchStride, int batch,
                             const AttentionDesc &desc);

// The sizes of a decode call alone (batch, seqlen_q, seqlen_k, num_splits and the grid
// limits they imply): what fj_decode_workspace_size reads.
llvm::Error checkDecodeSizes(const AttentionDesc &desc, const fj_decode_args &args);

// Checks decode arguments for a kernel of `desc` and fills the kernels' parameters:
// num_splits holds the caller's request (0: automatic) until DecodeKernel::plan
// replaces it, tiles_per_split and the workspace pointers are left zero. `noWork` is
// set when batch or seqlen_q is 0.
llvm::Error checkDecodeArgs(const AttentionDesc &desc, const fj_decode_args *args,
                            FjDecodeParams &params, bool &noWork);

// Checks append arguments for a kernel of `desc` and fills the append kernel's
// parameters (the cache, k_new / v_new, new_len). `noWork`: batch or new_len is 0.
llvm::Error checkKvAppendArgs(const AttentionDesc &desc, const fj_kv_append_args *args,
                              FjDecodeParams &params, bool &noWork);

} // namespace flashjit::api

#include "api/validate_structs.h"
