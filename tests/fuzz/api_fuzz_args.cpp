// libFuzzer target over the C API's argument checking: fj_validate_attention_desc,
// fj_validate_forward_args and fj_validate_backward_args (its arguments derived from
// the fuzzed forward ones, the tail bytes choosing what differs) on arbitrary
// descriptions and arguments, including
// struct_size values that lie (smaller, larger, garbage) and structs from a "newer
// header" with extra bytes, and the attention features of 0.3 (the description's host
// pointers, user code and tuning args, aimed at memory of the harness's own with fuzzed
// contents), and 0.6's args->block_mask (a handle the checks never dereference, so a
// fuzzed value is safe to pass). Beyond "no crash" (ASan/UBSan), it checks what the API
// promises: a known status, a message naming the entry point on failure, the same
// answer twice, desc errors reported first, and, when the arguments are accepted,
// kernel parameters that are safe to launch with (and a block mask only for a
// description with a mask_mod, not yet in the parameters: fj_forward checks it first).
#include "api_fuzz_input.h"

#include "api/validate.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

using flashjit::fuzz::ApiFuzzInput;

#define FJ_FUZZ_CHECK(condition, ...)                                                     \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      std::fprintf(stderr, "fuzz check failed: %s: ", #condition);                        \
      std::fprintf(stderr, __VA_ARGS__);                                                  \
      std::fprintf(stderr, "\n");                                                         \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

// A caller's struct: exactly as many bytes as its struct_size says (so reading past it
// is an ASan error), except for implausible sizes, which must be rejected unread.
template <typename T>
std::unique_ptr<uint8_t[]> buildStruct(const T &value, const ApiFuzzInput &in, bool fuzzSize,
                                       uint64_t fuzzedSize, bool withTail) {
  uint64_t declared = sizeof(T) + (withTail ? in.tail.size() : 0);
  if (fuzzSize)
    declared = fuzzedSize;
  size_t bytes = declared <= flashjit::api::kMaxStructSize
                     ? std::max<size_t>(declared, sizeof(size_t))
                     : sizeof(T);
  auto buffer = std::make_unique<uint8_t[]>(bytes);
  std::memset(buffer.get(), 0, bytes);
  std::memcpy(buffer.get(), &value, std::min(bytes, sizeof(T)));
  if (bytes > sizeof(T) && !in.tail.empty())
    std::memcpy(buffer.get() + sizeof(T), in.tail.data(),
                std::min(bytes - sizeof(T), in.tail.size()));
  size_t size = (size_t)declared;
  std::memcpy(buffer.get(), &size, sizeof(size));  // struct_size is the first field
  return buffer;
}

bool knownStatus(fj_status s) { return s >= FJ_SUCCESS && s <= FJ_ERROR_INTERNAL; }

bool aligned(const void *p, unsigned n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

bool strideOk(long long stride, long long size) {
  return size <= 1 || (stride > 0 && stride % 8 == 0);
}

// What the description's host pointers point at: the validator reads them, so fuzzed
// addresses would crash it for no fault of its own.
struct HostPointees {
  std::string scoreMod, maskMod;
  fj_mod_args tuning{};
};

// A fuzzed text: its length from the fuzzed pointer's value (up to one byte past the
// limit), its bytes the tail's, repeated (a NUL among them ends it early, as in C).
std::string fuzzedText(const void *pointer, const std::vector<uint8_t> &tail) {
  const size_t limit = flashjit::generator::kMaxUserCodeBytes;
  std::string text(reinterpret_cast<uintptr_t>(pointer) % (limit + 2), 'x');
  for (size_t i = 0; i < text.size() && !tail.empty(); ++i)
    text[i] = (char)tail[i % tail.size()];
  return text;
}

// Each non-NULL host pointer of the description aimed at the harness's own memory.
void aimHostPointers(ApiFuzzInput &in, HostPointees &own) {
  fj_attention_desc &d = in.desc;
  if (d.score_mod) {
    own.scoreMod = fuzzedText(d.score_mod, in.tail);
    d.score_mod = own.scoreMod.c_str();
  }
  if (d.mask_mod) {
    own.maskMod = fuzzedText(d.mask_mod, in.tail);
    d.mask_mod = own.maskMod.c_str();
  }
  if (d.tuning_mod_args) {
    own.tuning = in.args.mod_args;
    d.tuning_mod_args = &own.tuning;
  }
}

// The features of an accepted description are ones a kernel can be compiled for.
void checkFeatures(const flashjit::generator::Features &f) {
  if (f.window)
    FJ_FUZZ_CHECK(f.windowLeft >= -1 && f.windowRight >= -1 &&
                      (f.windowLeft >= 0 || f.windowRight >= 0),
                  "window %d %d", f.windowLeft, f.windowRight);
  FJ_FUZZ_CHECK(std::isfinite(f.softcap) && f.softcap >= 0, "softcap %g", (double)f.softcap);
  FJ_FUZZ_CHECK(f.scoreMod.size() <= flashjit::generator::kMaxUserCodeBytes &&
                    f.maskMod.size() <= flashjit::generator::kMaxUserCodeBytes,
                "user code of %zu and %zu bytes", f.scoreMod.size(), f.maskMod.size());
}

// The parameters fj_forward would launch with, for accepted arguments.
void checkParams(const flashjit::api::AttentionDesc &desc, const fj_forward_args *args) {
  FjForwardParams p;
  bool noWork = false;
  fj_block_mask blockMask = nullptr;
  llvm::Error error = flashjit::api::checkForwardArgs(desc, args, p, noWork, &blockMask);
  FJ_FUZZ_CHECK(!error, "the C API accepted what the internal check rejects: %s",
                llvm::toString(std::move(error)).c_str());
  FJ_FUZZ_CHECK(!blockMask || !desc.features.maskMod.empty(),
                "block mask %p accepted for a description without mask_mod",
                (const void *)blockMask);
  FJ_FUZZ_CHECK(!p.block_counts && !p.block_tiles,
                "the argument checks pointed the parameters at a block mask");
  FJ_FUZZ_CHECK(p.batch >= 0 && p.batch <= 65535, "batch %d", p.batch);
  FJ_FUZZ_CHECK(p.heads_q >= 1 && p.heads_q <= 65535 && p.heads_kv >= 1 &&
                    p.heads_q % p.heads_kv == 0,
                "heads %d/%d", p.heads_q, p.heads_kv);
  FJ_FUZZ_CHECK(p.seqlen_q >= 0 && p.seqlen_q <= (1 << 30) && p.seqlen_k >= 0 &&
                    p.seqlen_k <= (1 << 30),
                "seqlens %d %d", p.seqlen_q, p.seqlen_k);
  FJ_FUZZ_CHECK(std::isfinite(p.softmax_scale) && p.softmax_scale > 0 &&
                    std::isfinite(p.scale_log2),
                "scale %g", (double)p.softmax_scale);
  FJ_FUZZ_CHECK(desc.headDim % 8 == 0 && desc.headDim >= 8 && desc.headDim <= 256 &&
                    desc.headDimV % 8 == 0 && desc.headDimV >= 8 && desc.headDimV <= 256,
                "head dims %d %d", desc.headDim, desc.headDimV);
  if (noWork) {
    FJ_FUZZ_CHECK(p.batch == 0 || p.seqlen_q == 0, "no work with batch %d seqlen_q %d",
                  p.batch, p.seqlen_q);
    return;
  }
  const bool varlen = p.cu_seqlens_q != nullptr;
  FJ_FUZZ_CHECK(varlen == (p.cu_seqlens_k != nullptr), "one cu_seqlens without the other");
  FJ_FUZZ_CHECK(!varlen || (p.seqlen_q >= 1 && p.seqlen_k >= 1), "varlen without max");
  FJ_FUZZ_CHECK(p.q && p.o && aligned(p.q, 16) && aligned(p.o, 16), "q/o %p %p", p.q, p.o);
  FJ_FUZZ_CHECK(!p.lse || aligned(p.lse, 4), "lse %p", (void *)p.lse);
  const long long batches = varlen ? 1 : p.batch;
  const long long rowsQ = varlen ? (long long)p.batch * p.seqlen_q : p.seqlen_q;
  const long long rowsK = varlen ? (long long)p.batch * p.seqlen_k : p.seqlen_k;
  FJ_FUZZ_CHECK(strideOk(p.q_batch_stride, batches) && strideOk(p.q_row_stride, rowsQ) &&
                    strideOk(p.q_head_stride, p.heads_q),
                "q strides");
  FJ_FUZZ_CHECK(strideOk(p.o_batch_stride, batches) && strideOk(p.o_row_stride, rowsQ) &&
                    strideOk(p.o_head_stride, p.heads_q),
                "o strides");
  if (rowsK > 0) {
    FJ_FUZZ_CHECK(p.k && p.v && aligned(p.k, 16) && aligned(p.v, 16), "k/v %p %p", p.k, p.v);
    FJ_FUZZ_CHECK(strideOk(p.k_batch_stride, batches) && strideOk(p.k_row_stride, rowsK) &&
                      strideOk(p.k_head_stride, p.heads_kv),
                  "k strides");
    FJ_FUZZ_CHECK(strideOk(p.v_batch_stride, batches) && strideOk(p.v_row_stride, rowsK) &&
                      strideOk(p.v_head_stride, p.heads_kv),
                  "v strides");
  }
  if (varlen && p.lse)
    FJ_FUZZ_CHECK(p.lse_head_stride >= 1, "varlen lse stride %lld", p.lse_head_stride);
  if (desc.features.alibi)
    FJ_FUZZ_CHECK(p.alibi_slopes && aligned(p.alibi_slopes, 4) && p.alibi_batch_stride >= 0,
                  "alibi slopes %p stride %lld", (const void *)p.alibi_slopes,
                  p.alibi_batch_stride);
  else
    FJ_FUZZ_CHECK(!p.alibi_slopes, "slopes %p without alibi", (const void *)p.alibi_slopes);
}

void checkFailureMessage(fj_status status, const char *function) {
  if (status == FJ_SUCCESS)
    return;
  std::string message = fj_last_error_message();
  std::string prefix = std::string(function) + ": ";
  FJ_FUZZ_CHECK(message.rfind(prefix, 0) == 0 && message.size() > prefix.size(),
                "status %d with message \"%s\"", (int)status, message.c_str());
}

// Backward arguments over the forward's: dout, dq, dk and dv alias o, q, k and v (the
// validator does not read memory), with strides and flags taken from the tail bytes so
// each can differ from the tensor it mirrors.
fj_backward_args backwardArgsOf(const fj_forward_args &f, const ApiFuzzInput &in) {
  fj_backward_args b;
  fj_backward_args_init(&b);
  b.q = f.q, b.k = f.k, b.v = f.v, b.o = f.o, b.lse = f.lse;
  b.dout = f.o, b.dq = const_cast<void *>(f.q), b.dk = const_cast<void *>(f.k);
  b.dv = const_cast<void *>(f.v);
  b.batch = f.batch, b.seqlen_q = f.seqlen_q, b.seqlen_k = f.seqlen_k;
  int64_t strides[8][3] = {
      {f.q_batch_stride, f.q_seq_stride, f.q_head_stride},
      {f.k_batch_stride, f.k_seq_stride, f.k_head_stride},
      {f.v_batch_stride, f.v_seq_stride, f.v_head_stride},
      {f.o_batch_stride, f.o_seq_stride, f.o_head_stride},
      {f.o_batch_stride, f.o_seq_stride, f.o_head_stride},
      {f.q_batch_stride, f.q_seq_stride, f.q_head_stride},
      {f.k_batch_stride, f.k_seq_stride, f.k_head_stride},
      {f.v_batch_stride, f.v_seq_stride, f.v_head_stride}};
  // Tail byte i (when present) perturbs stride i / 3 of tensor i % 8 by a small amount.
  // (Wrapping, as unsigned: a fuzzed stride near INT64_MIN must not overflow here.)
  for (size_t i = 0; i < in.tail.size() && i < 24; ++i)
    strides[i % 8][i / 8] =
        (int64_t)((uint64_t)strides[i % 8][i / 8] + (uint64_t)(int64_t)(int8_t)in.tail[i]);
  int64_t *out[8][3] = {{&b.q_batch_stride, &b.q_seq_stride, &b.q_head_stride},
                        {&b.k_batch_stride, &b.k_seq_stride, &b.k_head_stride},
                        {&b.v_batch_stride, &b.v_seq_stride, &b.v_head_stride},
                        {&b.o_batch_stride, &b.o_seq_stride, &b.o_head_stride},
                        {&b.dout_batch_stride, &b.dout_seq_stride, &b.dout_head_stride},
                        {&b.dq_batch_stride, &b.dq_seq_stride, &b.dq_head_stride},
                        {&b.dk_batch_stride, &b.dk_seq_stride, &b.dk_head_stride},
                        {&b.dv_batch_stride, &b.dv_seq_stride, &b.dv_head_stride}};
  for (int t = 0; t < 8; ++t)
    for (int d = 0; d < 3; ++d)
      *out[t][d] = strides[t][d];
  b.cu_seqlens_q = f.cu_seqlens_q, b.cu_seqlens_k = f.cu_seqlens_k;
  b.total_q = f.total_q, b.total_k = f.total_k;
  b.deterministic = in.tail.size() > 24 ? (int8_t)in.tail[24] : 0;
  b.workspace = in.tail.size() > 25 ? reinterpret_cast<void *>((uintptr_t)in.tail[25] << 4 |
                                                               (in.tail[25] & 1 ? 4 : 0))
                                    : nullptr;
  return b;
}

void checkBackward(const fj_attention_desc *desc, const fj_forward_args *args,
                   const ApiFuzzInput &in, fj_status descStatus) {
  // From the decoded struct, not the caller's buffer: that one may be shorter than
  // fj_forward_args (a fuzzed struct_size).
  fj_backward_args b = backwardArgsOf(in.args, in);
  const fj_backward_args *bp = args ? &b : nullptr;
  fj_status status = fj_validate_backward_args(desc, bp);
  FJ_FUZZ_CHECK(knownStatus(status), "backward status %d", (int)status);
  checkFailureMessage(status, "fj_validate_backward_args");
  std::string message = fj_last_error_message();
  FJ_FUZZ_CHECK(fj_validate_backward_args(desc, bp) == status &&
                    message == fj_last_error_message(),
                "a second backward call answered differently");
  if (descStatus != FJ_SUCCESS) {
    FJ_FUZZ_CHECK(status == descStatus, "desc status %d but backward status %d",
                  (int)descStatus, (int)status);
    return;
  }
  if (status != FJ_SUCCESS)
    return;
  auto checked = flashjit::api::checkDesc(desc);
  FJ_FUZZ_CHECK((bool)checked, "desc accepted, then rejected");
  FjBackwardParams p;
  bool noWork = false;
  llvm::Error error = flashjit::api::checkBackwardArgs(*checked, bp, p, noWork);
  FJ_FUZZ_CHECK(!error, "the C API accepted backward arguments the internal check rejects");
  if (noWork)
    return;
  FJ_FUZZ_CHECK(b.deterministic == 0 || b.deterministic == 1, "deterministic %d",
                b.deterministic);
  const long long rowsQ = p.fwd.cu_seqlens_q ? (long long)p.fwd.batch * p.fwd.seqlen_q
                                             : p.fwd.seqlen_q;
  const long long rowsK = p.fwd.cu_seqlens_q ? (long long)p.fwd.batch * p.fwd.seqlen_k
                                             : p.fwd.seqlen_k;
  if (p.fwd.batch > 0 && p.fwd.seqlen_q > 0)
    FJ_FUZZ_CHECK(p.fwd.lse != nullptr, "backward accepted without lse");
  if (rowsQ > 0)
    FJ_FUZZ_CHECK(p.dq && aligned(p.dq, 16) && p.dout && aligned(p.dout, 16) &&
                      strideOk(p.dq_row_stride, rowsQ) && strideOk(p.dout_row_stride, rowsQ) &&
                      strideOk(p.dq_head_stride, p.fwd.heads_q),
                  "dq/dout");
  if (rowsK > 0)
    FJ_FUZZ_CHECK(p.dk && p.dv && aligned(p.dk, 16) && aligned(p.dv, 16) &&
                      strideOk(p.dk_row_stride, rowsK) && strideOk(p.dv_row_stride, rowsK) &&
                      strideOk(p.dk_head_stride, p.fwd.heads_kv),
                  "dk/dv");
  FJ_FUZZ_CHECK(!b.workspace || aligned(b.workspace, 16), "workspace %p", b.workspace);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace flashjit::fuzz;
  ApiFuzzInput in = ApiFuzzInput::decode(data, size);
  HostPointees own;
  aimHostPointers(in, own);
  auto descBuffer = buildStruct(in.desc, in, in.flags & kFlagDescSize, in.descSize,
                                in.flags & kFlagDescTail);
  auto argsBuffer = buildStruct(in.args, in, in.flags & kFlagArgsSize, in.argsSize,
                                in.flags & kFlagArgsTail);
  const auto *desc = in.flags & kFlagDescNull
                         ? nullptr
                         : reinterpret_cast<const fj_attention_desc *>(descBuffer.get());
  const auto *args = in.flags & kFlagArgsNull
                         ? nullptr
                         : reinterpret_cast<const fj_forward_args *>(argsBuffer.get());

  fj_status descStatus = fj_validate_attention_desc(desc);
  FJ_FUZZ_CHECK(knownStatus(descStatus), "desc status %d", (int)descStatus);
  checkFailureMessage(descStatus, "fj_validate_attention_desc");

  checkBackward(desc, args, in, descStatus);

  fj_status status = fj_validate_forward_args(desc, args);
  FJ_FUZZ_CHECK(knownStatus(status), "status %d", (int)status);
  checkFailureMessage(status, "fj_validate_forward_args");
  std::string message = fj_last_error_message();
  FJ_FUZZ_CHECK(fj_validate_forward_args(desc, args) == status &&
                    message == fj_last_error_message(),
                "a second call answered differently");
  if (descStatus != FJ_SUCCESS) {
    FJ_FUZZ_CHECK(status == descStatus, "desc status %d but args status %d", (int)descStatus,
                  (int)status);
    return 0;
  }
  if (status == FJ_SUCCESS) {
    auto checked = flashjit::api::checkDesc(desc);
    FJ_FUZZ_CHECK((bool)checked, "desc accepted, then rejected");
    checkFeatures(checked->features);
    checkParams(*checked, args);
  }
  return 0;
}
