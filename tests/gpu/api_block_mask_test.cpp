// Block masks (C API 0.6) on a GPU, through the C API only (the harness computes the
// references: tuner::ForwardChecker, the fp32 reference with the same mask_mod, outputs
// and LSE poisoned with NaN before every run): on kernels of a FJ_TUNE_HEURISTIC context,
//   - a document mask_mod reading int ids from args.tensor[0] (documents of 97..400 rows,
//     not tile multiples; optionally per head, dropping whole documents so that their
//     rows see no key: o = 0 and lse = -inf), bf16 d128 and fp16 d64, causal and not,
//     GQA 8/2, 1000x1000 and 777x1029: fj_forward with a block mask and without, both
//     against the reference;
//   - that the mask is used: a mask_mod that counts its calls (atomicAdd on args.tensor[1])
//     is called strictly fewer times by fj_forward with the mask than without, not at all
//     when every tile is dropped or when documents align with the tiles (all kept or
//     dropped), and a shared mask's build calls it once per shared head / sequence;
//   - shared_across_heads / shared_across_batch give the per-head mask's output bit for
//     bit; fj_block_mask_update follows new ids (eagerly and inside a captured CUDA
//     graph), while a stale mask gives a wrong result;
//   - every refusal (status and message);
//   - variable-length batches (cu_seqlens), with the packed row counts (fwd_wgmma on
//     sm_90a) and without total_k (the fwd_mma fallback).
#include "api_context.h"
#include "api_asserts.h"
#include "gpu_skip.h"
#include "graph_api.h"
#include "tests/fails_with.h"

#include "flashjit/flashjit.h"
#include "tuner/check_support.h"
#include "tuner/checker.h"
#include "tuner/forward_problem.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace flashjit;

namespace {

#define FJ_ASSERT_NO_ERROR(expr)                                                         \
  do {                                                                                   \
    llvm::Error error_ = (expr);                                                         \
    ASSERT_FALSE((bool)error_) << #expr << ": " << llvm::toString(std::move(error_));    \
  } while (0)

// For code that cannot ASSERT (lambdas returning values): reports a failure, consumed.
bool succeeded(llvm::Error error, const char *what) {
  if (!error)
    return true;
  ADD_FAILURE() << what << ": " << llvm::toString(std::move(error));
  return false;
}

std::string target() { return flashjit::testing::openTestDevice()->properties().target(); }
bool hopper() { return target() == "sm_90a"; }

// ---- the masks --------------------------------------------------------------------------

// Documents: args.tensor[0] holds, per sequence b (args.integer[1] ints apart; 0: one
// layout for every sequence), the document id of each key position, then from
// args.integer[0] on that of each query row. With args.integer[2] set, query head h
// drops the documents whose (id + h) % 3 == 0: their rows see no key.
const char *kDocumentMask =
    "const int *ids = (const int *)args.tensor[0] + b * args.integer[1];\n"
    "const int doc = ids[args.integer[0] + q_idx];\n"
    "return doc == ids[kv_idx] && (args.integer[2] == 0 || (doc + h) % 3 != 0);";

// The same documents (without the per-head drop), counting its own calls in the int at
// args.tensor[1].
const char *kCountingMask =
    "atomicAdd((int *)args.tensor[1], 1);\n"
    "const int *ids = (const int *)args.tensor[0] + b * args.integer[1];\n"
    "return ids[args.integer[0] + q_idx] == ids[kv_idx];";

// Document ids of a problem, laid out as the masks above read them.
struct Documents {
  int kMax = 0, qMax = 0, segments = 1;
  bool shared = false;             // one layout for every sequence (args.integer[1] = 0)
  std::vector<int> ids;            // per segment: keys [0, kMax), queries [kMax, kMax + qMax)
  runtime::DeviceBuffer device;

  int stride() const { return kMax + qMax; }
  int &key(int b, int j) { return ids[(size_t)(shared ? 0 : b) * stride() + j]; }
  int &query(int b, int i) { return ids[(size_t)(shared ? 0 : b) * stride() + kMax + i]; }
  int queryDoc(int b, int i) const {
    return ids[(size_t)(shared ? 0 : b) * stride() + kMax + i];
  }
  llvm::Error upload() { return device.upload(ids.data(), ids.size() * sizeof(int)); }

  // The args the masks read (tensor[1]: the counter, when given).
  FjModArgs modArgs(const runtime::DeviceBuffer *counter, bool dropHeads) const {
    FjModArgs a{};
    a.tensor[0] = reinterpret_cast<const void *>(device.ptr());
    a.tensor[1] = counter ? reinterpret_cast<const void *>(counter->ptr()) : nullptr;
    a.integer[0] = kMax;
    a.integer[1] = shared ? 0 : stride();
    a.integer[2] = dropHeads ? 1 : 0;
    return a;
  }
};

int seqQ(const tuner::ForwardShape &s, int b) { return s.varlen() ? s.seqlensQ[b] : s.seqQ; }
int seqK(const tuner::ForwardShape &s, int b) { return s.varlen() ? s.seqlensK[b] : s.seqK; }

// Ids for `shape` (allocated, not yet filled or uploaded).
llvm::Expected<std::unique_ptr<Documents>> documentsFor(const tuner::ForwardShape &shape,
                                                        bool shared) {
  auto d = std::make_unique<Documents>();
  d->kMax = shape.seqK;
  d->qMax = shape.seqQ;
  d->shared = shared;
  d->segments = shared ? 1 : shape.batch;
  d->ids.assign((size_t)d->segments * d->stride(), -1);
  auto buffer = runtime::DeviceBuffer::allocate(d->ids.size() * sizeof(int));
  if (!buffer)
    return buffer.takeError();
  d->device = std::move(*buffer);
  return std::move(d);
}

// Key position j of sequence b gets `keyDoc(b, j)`; query row i that of the key on its
// diagonal (i + seqlen_k - seqlen_q: bottom-right aligned, as causal is), so that every
// row sees at least that key unless its head drops its document.
void fillDocuments(Documents &d, const tuner::ForwardShape &shape,
                   const std::function<int(int b, int j)> &keyDoc) {
  for (int b = 0; b < d.segments; ++b) {
    const int sk = seqK(shape, b), sq = seqQ(shape, b);
    for (int j = 0; j < sk; ++j)
      d.key(b, j) = keyDoc(b, j);
    for (int i = 0; i < sq; ++i)
      d.query(b, i) = d.key(b, i + sk - sq);
  }
}

// Documents of 97..400 positions (never a tile multiple by design), drawn per sequence.
void unevenDocuments(Documents &d, const tuner::ForwardShape &shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int>> docs(d.segments);
  for (int b = 0; b < d.segments; ++b) {
    int id = 0, left = 0;
    for (int j = 0; j < d.kMax; ++j) {
      if (left == 0) {
        left = 97 + (int)(rng() % 304);
        ++id;
      }
      docs[b].push_back(id);
      --left;
    }
  }
  fillDocuments(d, shape, [&](int b, int j) { return docs[b][j]; });
}

// ---- problems, arguments, kernels -----------------------------------------------------

fj_attention_desc maskDesc(int dtype, bool causal, const char *maskMod) {
  fj_attention_desc desc;
  fj_attention_desc_init(&desc);
  desc.dtype = dtype;
  desc.head_dim = dtype == FJ_DTYPE_BF16 ? 128 : 64;
  desc.causal = causal;
  desc.num_heads_q = 8;
  desc.num_heads_kv = 2;
  desc.mask_mod = maskMod;
  return desc;
}

tuner::ForwardShape shapeOf(int batch, int seqQ, int seqK) {
  tuner::ForwardShape s;
  s.batch = batch;
  s.headsQ = 8;
  s.headsKV = 2;
  s.seqQ = seqQ;
  s.seqK = seqK;
  s.withLse = true;
  return s;
}

// Random normal q, k, v for `shape` and the fp32 (and same-dtype) references of the
// description's attention with `maskMod` run on `args` (read on the device now: the
// references hold the ids as they are at this call).
llvm::Expected<std::unique_ptr<tuner::ForwardChecker>>
referenceFor(const fj_attention_desc &desc, tuner::ForwardShape shape, const FjModArgs &args,
             uint64_t seed) {
  generator::KernelSpec spec;
  spec.dtype = desc.dtype == FJ_DTYPE_FP16 ? generator::DType::FP16 : generator::DType::BF16;
  spec.headDim = spec.headDimV = desc.head_dim;
  spec.causal = desc.causal != 0;
  spec.target = target();
  spec.features.maskMod = desc.mask_mod ? desc.mask_mod : "";
  spec.features.hasTuningArgs = true;  // the reference runs the mask with these args
  spec.features.tuningArgs = args;
  shape.headsQ = desc.num_heads_q;
  shape.headsKV = desc.num_heads_kv;
  return tuner::ForwardChecker::create(spec, shape, seed, nullptr);
}

// The checker's problem as C API arguments (its buffers, strides and the mask's args).
fj_forward_args argsOf(const tuner::ForwardChecker &c) {
  const tuner::ForwardShape &s = c.shape();
  const FjForwardParams p = tuner::makeParams(s, c.buffers(), /*fp32Output=*/false);
  fj_forward_args a;
  fj_forward_args_init(&a);
  a.q = p.q, a.k = p.k, a.v = p.v, a.o = p.o, a.lse = p.lse;
  a.batch = s.batch, a.seqlen_q = s.seqQ, a.seqlen_k = s.seqK;
  a.q_batch_stride = p.q_batch_stride, a.q_seq_stride = p.q_row_stride;
  a.q_head_stride = p.q_head_stride;
  a.k_batch_stride = p.k_batch_stride, a.k_seq_stride = p.k_row_stride;
  a.k_head_stride = p.k_head_stride;
  a.v_batch_stride = p.v_batch_stride, a.v_seq_stride = p.v_row_stride;
  a.v_head_stride = p.v_head_stride;
  a.o_batch_stride = p.o_batch_stride, a.o_seq_stride = p.o_row_stride;
  a.o_head_stride = p.o_head_stride;
  a.cu_seqlens_q = p.cu_seqlens_q, a.cu_seqlens_k = p.cu_seqlens_k;
  a.total_q = p.total_q, a.total_k = p.total_k;
  static_assert(sizeof(fj_mod_args) == sizeof(FjModArgs), "one layout");
  std::memcpy(&a.mod_args, &p.mod_args, sizeof(a.mod_args));
  return a;
}

// Poisons the outputs, runs fj_forward with `args` and judges them.
llvm::Expected<tuner::CheckReport> runForward(tuner::ForwardChecker &c, fj_kernel kernel,
                                              const fj_forward_args &args) {
  if (llvm::Error e = c.poisonOutputs())
    return std::move(e);
  fj_status status = fj_forward(kernel, &args, nullptr);
  if (status != FJ_SUCCESS)
    return llvm::createStringError(std::errc::invalid_argument, "fj_forward: %s: %s",
                                   fj_status_string(status), fj_last_error_message());
  return c.compareOutputs(nullptr);
}

// The output and LSE bits now in the checker's buffers.
struct Outputs {
  std::vector<uint16_t> o;
  std::vector<float> lse;
  bool operator==(const Outputs &other) const {
    return o == other.o && lse.size() == other.lse.size() &&
           std::memcmp(lse.data(), other.lse.data(), lse.size() * sizeof(float)) == 0;
  }
};
llvm::Expected<Outputs> outputsOf(const tuner::ForwardChecker &c) {
  auto o = tuner::downloadAll<uint16_t>(c.buffers().o);
  if (!o)
    return o.takeError();
  auto lse = tuner::downloadAll<float>(c.buffers().lse);
  if (!lse)
    return lse.takeError();
  return Outputs{std::move(*o), std::move(*lse)};
}

// Rows whose keys the mask drops all (`empty(b, h, i)`) hold o = 0 (every column) and
// lse = -inf; returns how many such rows there are.
long long expectEmptyRows(const tuner::ForwardChecker &c,
                          const std::function<bool(int b, int h, int i)> &empty) {
  const tuner::ForwardShape &s = c.shape();
  const FjForwardParams p = tuner::makeParams(s, c.buffers(), false);
  auto out = outputsOf(c);
  EXPECT_TRUE((bool)out) << llvm::toString(out.takeError());
  if (!out)
    return 0;
  long long rows = 0, wrong = 0;
  long long packed = 0;
  for (int b = 0; b < s.batch; ++b) {
    for (int i = 0; i < seqQ(s, b); ++i)
      for (int h = 0; h < s.headsQ; ++h) {
        if (!empty(b, h, i))
          continue;
        ++rows;
        const long long row = s.varlen() ? packed + i : i;
        const long long base = (s.varlen() ? 0 : b * p.o_batch_stride) +
                               row * p.o_row_stride + h * p.o_head_stride;
        bool zero = true;
        for (int d = 0; d < s.headDimV; ++d)
          zero &= (out->o[base + d] & 0x7fff) == 0;
        const float lse = out->lse[(s.varlen() ? 0 : b * p.lse_batch_stride) +
                                   h * p.lse_head_stride + row];
        if (!zero || !(std::isinf(lse) && lse < 0)) {
          if (++wrong <= 3)
            ADD_FAILURE() << "row " << i << " of sequence " << b << ", head " << h
                          << " sees no key: o must be 0 and lse -inf (lse " << lse << ")";
        }
      }
    packed += seqQ(s, b);
  }
  EXPECT_EQ(wrong, 0) << "of " << rows << " rows that see no key";
  return rows;
}

// An int on the device that the counting mask increments.
struct Counter {
  runtime::DeviceBuffer buffer;
  static llvm::Expected<Counter> make() {
    auto b = runtime::DeviceBuffer::allocate(16);
    if (!b)
      return b.takeError();
    Counter c{std::move(*b)};
    if (llvm::Error e = c.reset())
      return std::move(e);
    return std::move(c);
  }
  llvm::Error reset() {
    if (llvm::Error e = runtime::synchronizeStream(nullptr))
      return e;
    return buffer.fill(0);
  }
  // After the work queued so far.
  llvm::Expected<long long> read() const {
    if (llvm::Error e = runtime::synchronizeStream(nullptr))
      return std::move(e);
    int value = 0;
    if (llvm::Error e = buffer.download(&value, sizeof value))
      return std::move(e);
    return (long long)value;
  }
};

// The tiles of the variant fj_forward launches for `args`.
struct Tiles {
  int variant = -1, blockM = 0, blockN = 0;
  std::string tile;
};
Tiles tilesFor(fj_kernel kernel, const fj_forward_args &args) {
  Tiles t;
  fj_dispatch_info info;
  info.struct_size = sizeof info;
  EXPECT_EQ(fj_forward_dispatch_info(kernel, &args, &info), FJ_SUCCESS)
      << fj_last_error_message();
  fj_variant_info v;
  v.struct_size = sizeof v;
  EXPECT_EQ(fj_kernel_variant_info(kernel, info.variant, &v), FJ_SUCCESS)
      << fj_last_error_message();
  t.variant = info.variant;
  t.blockM = v.block_m;
  t.blockN = v.block_n;
  t.tile = v.tile ? v.tile : "";
  return t;
}

// RAII for a mask made in a test (destroyed at scope exit unless released).
struct Mask {
  fj_block_mask handle = nullptr;
  Mask() = default;
  Mask(const Mask &) = delete;
  ~Mask() {
    if (handle) {
      EXPECT_EQ(fj_block_mask_destroy(handle), FJ_SUCCESS) << fj_last_error_message();
    }
  }
};

// One context for the suite and its kernels, each compiled once (heuristic tile, no
// tuning; fwd_wgmma and its fwd_mma fallback on sm_90a), released at the suite's end.
class ApiBlockMaskGpu : public ::testing::Test {
protected:
  static void TearDownTestSuite() {
    for (auto &[key, kernel] : kernels())
      EXPECT_EQ(fj_kernel_release(kernel), FJ_SUCCESS) << key << ": " << fj_last_error_message();
    kernels().clear();
    context().reset();
  }

  static std::unique_ptr<apitest::HeuristicContext> &context() {
    static std::unique_ptr<apitest::HeuristicContext> shared;
    return shared;
  }
  static std::map<std::string, fj_kernel> &kernels() {
    static std::map<std::string, fj_kernel> shared;
    return shared;
  }
  static fj_context ctx() {
    if (!context())
      context() = std::make_unique<apitest::HeuristicContext>();
    return context()->handle;
  }
  // The suite's handle for `desc` (got on first use); NULL after a failure.
  static fj_kernel kernelFor(const fj_attention_desc &desc) {
    const std::string key =
        llvm::formatv("{0}.d{1}.c{2}.h{3}/{4}.{5}", desc.dtype, desc.head_dim, desc.causal,
                      desc.num_heads_q, desc.num_heads_kv,
                      desc.mask_mod ? desc.mask_mod : "(none)")
            .str();
    fj_kernel &slot = kernels()[key];
    if (!slot && ctx()) {
      fj_status status = fj_kernel_get(ctx(), &desc, &slot);
      EXPECT_EQ(status, FJ_SUCCESS) << fj_last_error_message();
      if (status != FJ_SUCCESS)
        kernels().erase(key);
      return status == FJ_SUCCESS ? kernels()[key] : nullptr;
    }
    return slot;
  }
};

// ---- a. the document mask against the reference ---------------------------------------

TEST_F(ApiBlockMaskGpu, DocumentMaskMatchesTheReferenceWithAndWithoutTheMask) {
  FLASHJIT_REQUIRE_GPU();
  struct Sizes {
    int batch, q, k;
  };
  uint64_t seed = 100;
  for (int dtype : {FJ_DTYPE_BF16, FJ_DTYPE_FP16})
    for (bool causal : {false, true}) {
      const fj_attention_desc desc = maskDesc(dtype, causal, kDocumentMask);
      fj_kernel kernel = kernelFor(desc);
      ASSERT_NE(kernel, nullptr);
      for (Sizes sizes : {Sizes{2, 1000, 1000}, Sizes{2, 777, 1029}})
        for (bool dropHeads : {false, true}) {
          ++seed;
          const tuner::ForwardShape shape = shapeOf(sizes.batch, sizes.q, sizes.k);
          FJ_ASSERT_VALUE(docs, documentsFor(shape, /*shared=*/false));
          unevenDocuments(**docs, shape, seed);
          FJ_ASSERT_NO_ERROR((*docs)->upload());
          FJ_ASSERT_VALUE(checker,
                          referenceFor(desc, shape, (*docs)->modArgs(nullptr, dropHeads), seed));
          const std::string what =
              llvm::formatv("{0} d{1} {2} {3}x{4}x{5}{6}", dtype == FJ_DTYPE_BF16 ? "bf16" : "fp16",
                            desc.head_dim, causal ? "causal" : "full", sizes.batch, sizes.q,
                            sizes.k, dropHeads ? ", documents dropped per head" : "")
                  .str();
          SCOPED_TRACE(what);
          fj_forward_args args = argsOf(**checker);

          FJ_ASSERT_VALUE(plain, runForward(**checker, kernel, args));
          EXPECT_TRUE(plain->passed) << "without a block mask: " << plain->summary();

          Mask mask;
          FJ_ASSERT_OK(fj_block_mask_create(kernel, &args, nullptr, nullptr, &mask.handle));
          fj_forward_args masked = args;
          masked.block_mask = mask.handle;
          FJ_ASSERT_VALUE(withMask, runForward(**checker, kernel, masked));
          EXPECT_TRUE(withMask->passed) << "with a block mask: " << withMask->summary();

          // Rows of a dropped document see no key.
          const Documents &d = **docs;
          long long empty = expectEmptyRows(**checker, [&](int b, int h, int i) {
            return dropHeads && (d.queryDoc(b, i) + h) % 3 == 0;
          });
          if (dropHeads) {
            EXPECT_GT(empty, 0) << "the case must have rows that see no key";
          }
        }
    }
}

// ---- b. the mask is used ----------------------------------------------------------------

TEST_F(ApiBlockMaskGpu, ForwardWithTheMaskCallsMaskModLess) {
  FLASHJIT_REQUIRE_GPU();
  const fj_attention_desc desc = maskDesc(FJ_DTYPE_BF16, /*causal=*/false, kCountingMask);
  fj_kernel kernel = kernelFor(desc);
  ASSERT_NE(kernel, nullptr);
  FJ_ASSERT_VALUE(counter, Counter::make());

  // Runs fj_forward without and with a block mask (options as given) on the documents
  // `fill` writes; returns the forward's calls of mask_mod (the build's not counted) and
  // the build's, after checking both outputs against the reference.
  struct Calls {
    long long withoutMask = -1, withMask = -1, build = -1;
  };
  auto count = [&](const tuner::ForwardShape &shape, bool shared,
                   const std::function<void(Documents &)> &fill,
                   const fj_block_mask_options *options, uint64_t seed,
                   const std::function<bool(int, int, int)> &empty,
                   const std::function<void(const fj_forward_args &)> &inspect = {}) -> Calls {
    Calls calls;
    auto docs = documentsFor(shape, shared);
    EXPECT_TRUE((bool)docs) << llvm::toString(docs.takeError());
    if (!docs)
      return calls;
    fill(**docs);
    if (!succeeded((*docs)->upload(), "ids"))
      return calls;
    auto checker = referenceFor(desc, shape, (*docs)->modArgs(&counter->buffer, false), seed);
    EXPECT_TRUE((bool)checker) << llvm::toString(checker.takeError());
    if (!checker)
      return calls;
    fj_forward_args args = argsOf(**checker);
    if (inspect)
      inspect(args);

    succeeded(counter->reset(), "counter");
    auto plain = runForward(**checker, kernel, args);
    EXPECT_TRUE(plain && plain->passed)
        << "without a block mask: " << (plain ? plain->summary() : llvm::toString(plain.takeError()));
    auto n = counter->read();
    calls.withoutMask = n ? *n : -1;

    succeeded(counter->reset(), "counter");
    Mask mask;
    EXPECT_EQ(fj_block_mask_create(kernel, &args, options, nullptr, &mask.handle), FJ_SUCCESS)
        << fj_last_error_message();
    n = counter->read();  // synchronizes: the build is done
    calls.build = n ? *n : -1;
    succeeded(counter->reset(), "counter");
    fj_forward_args masked = args;
    masked.block_mask = mask.handle;
    auto report = runForward(**checker, kernel, masked);
    EXPECT_TRUE(report && report->passed)
        << "with a block mask: " << (report ? report->summary() : llvm::toString(report.takeError()));
    n = counter->read();
    calls.withMask = n ? *n : -1;
    if (empty)
      expectEmptyRows(**checker, empty);
    return calls;
  };
  auto pairs = [](const tuner::ForwardShape &s) {
    return (long long)s.batch * s.headsQ * s.seqQ * s.seqK;
  };

  {
    SCOPED_TRACE("documents of 97..400 rows, 2 x 1000 x 1000");
    const tuner::ForwardShape shape = shapeOf(2, 1000, 1000);
    Calls calls = count(
        shape, false, [&](Documents &d) { unevenDocuments(d, shape, 7); }, nullptr, 7, {});
    // Without the mask every pair is scored at least once (non-causal: all of them).
    EXPECT_GE(calls.withoutMask, pairs(shape));
    EXPECT_GE(calls.build, pairs(shape)) << "the build evaluates every pair";
    EXPECT_GE(calls.withMask, 0);
    EXPECT_LT(calls.withMask, calls.withoutMask) << "the block mask skipped nothing";
  }
  {
    SCOPED_TRACE("every tile dropped (no query shares a document with a key)");
    const tuner::ForwardShape shape = shapeOf(2, 777, 1029);
    Calls calls = count(
        shape, false,
        [&](Documents &d) {
          for (int b = 0; b < d.segments; ++b) {
            for (int j = 0; j < d.kMax; ++j)
              d.key(b, j) = 0;
            for (int i = 0; i < d.qMax; ++i)
              d.query(b, i) = 1;
          }
        },
        nullptr, 8, [](int, int, int) { return true; });
    EXPECT_GE(calls.withoutMask, pairs(shape));
    EXPECT_EQ(calls.withMask, 0) << "a dropped tile is never computed";
  }
  {
    // Documents as long as both tile sizes' least common multiple: every (query block,
    // key tile) lies inside one document or between two, kept or dropped whole.
    fj_forward_args probe;
    {
      FJ_ASSERT_VALUE(docs, documentsFor(shapeOf(1, 1024, 1024), false));
      unevenDocuments(**docs, shapeOf(1, 1024, 1024), 1);
      FJ_ASSERT_VALUE(checker, referenceFor(desc, shapeOf(1, 1024, 1024),
                                            (*docs)->modArgs(&counter->buffer, false), 1));
      probe = argsOf(**checker);
      probe.mod_args = {};
    }
    const Tiles tiles = tilesFor(kernel, probe);
    ASSERT_GT(tiles.blockM, 0);
    ASSERT_GT(tiles.blockN, 0);
    const int length = std::lcm(tiles.blockM, tiles.blockN);
    const tuner::ForwardShape shape = shapeOf(1, 2 * length, 2 * length);
    SCOPED_TRACE(llvm::formatv("documents of {0} rows (tile {1}), 1 x {2} x {2}", length,
                               tiles.tile, 2 * length)
                     .str());
    Calls calls = count(
        shape, false,
        [&](Documents &d) {
          fillDocuments(d, shape, [&](int, int j) { return j / length; });
        },
        nullptr, 9, {}, [&](const fj_forward_args &args) {
          EXPECT_EQ(tilesFor(kernel, args).tile, tiles.tile) << "another variant than probed";
        });
    EXPECT_GE(calls.withoutMask, pairs(shape));
    EXPECT_EQ(calls.withMask, 0) << "kept tiles run without mask_mod, dropped ones not at all";
  }
  {
    // Shared masks: the build calls mask_mod for one head / one sequence only.
    SCOPED_TRACE("shared builds, 2 x 1000 x 1000");
    const tuner::ForwardShape shape = shapeOf(2, 1000, 1000);
    auto fill = [&](Documents &d) { unevenDocuments(d, shape, 10); };
    const Calls perHead = count(shape, true, fill, nullptr, 10, {});
    fj_block_mask_options heads;
    fj_block_mask_options_init(&heads);
    heads.shared_across_heads = 1;
    const Calls sharedHeads = count(shape, true, fill, &heads, 10, {});
    fj_block_mask_options both = heads;
    both.shared_across_batch = 1;
    const Calls sharedBoth = count(shape, true, fill, &both, 10, {});
    EXPECT_GT(perHead.build, 0);
    EXPECT_EQ(sharedHeads.build * shape.headsQ, perHead.build);
    EXPECT_EQ(sharedBoth.build * shape.batch, sharedHeads.build);
    EXPECT_EQ(sharedHeads.withMask, perHead.withMask) << "the same tiles, the same calls";
    EXPECT_EQ(sharedBoth.withMask, perHead.withMask);
  }
}

// ---- c. sharing, updates, refusals -------------------------------------------------------

TEST_F(ApiBlockMaskGpu, SharedMasksGiveThePerHeadOutput) {
  FLASHJIT_REQUIRE_GPU();
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    const fj_attention_desc desc = maskDesc(FJ_DTYPE_BF16, causal, kDocumentMask);
    fj_kernel kernel = kernelFor(desc);
    ASSERT_NE(kernel, nullptr);
    // One layout of documents for every sequence and head: the mask depends on neither.
    const tuner::ForwardShape shape = shapeOf(3, 777, 1029);
    FJ_ASSERT_VALUE(docs, documentsFor(shape, /*shared=*/true));
    unevenDocuments(**docs, shape, 21);
    FJ_ASSERT_NO_ERROR((*docs)->upload());
    FJ_ASSERT_VALUE(checker, referenceFor(desc, shape, (*docs)->modArgs(nullptr, false), 21));
    const fj_forward_args args = argsOf(**checker);

    std::vector<Outputs> outputs;
    for (int shared = 0; shared < 4; ++shared) {
      fj_block_mask_options options;
      fj_block_mask_options_init(&options);
      options.shared_across_heads = shared & 1;
      options.shared_across_batch = (shared >> 1) & 1;
      SCOPED_TRACE(llvm::formatv("shared_across_heads {0}, shared_across_batch {1}",
                                 options.shared_across_heads, options.shared_across_batch)
                       .str());
      Mask mask;
      FJ_ASSERT_OK(fj_block_mask_create(kernel, &args, shared ? &options : nullptr, nullptr,
                                        &mask.handle));
      fj_forward_args masked = args;
      masked.block_mask = mask.handle;
      FJ_ASSERT_VALUE(report, runForward(**checker, kernel, masked));
      EXPECT_TRUE(report->passed) << report->summary();
      FJ_ASSERT_VALUE(out, outputsOf(**checker));
      outputs.push_back(std::move(*out));
      if (shared) {
        EXPECT_TRUE(outputs.back() == outputs.front()) << "differs from the per-head mask's";
      }
    }
  }
}

// A block-mask call's workspace is the persistent walk's tile counter: the tiles are
// handed out as CTAs free up instead of by a fixed stride, and each is still computed
// once, the same way. Enough work tiles (3 x 8 heads x 16 blocks) for the counter to hand
// out most of them; the workspace starts poisoned (the launch zeroes it) and serves
// calls one after another.
TEST_F(ApiBlockMaskGpu, TileCounterWalkGivesTheStaticWalksOutput) {
  FLASHJIT_REQUIRE_GPU();
  const fj_attention_desc desc = maskDesc(FJ_DTYPE_BF16, /*causal=*/false, kDocumentMask);
  fj_kernel kernel = kernelFor(desc);
  ASSERT_NE(kernel, nullptr);
  const tuner::ForwardShape shape = shapeOf(3, 2001, 1990);
  FJ_ASSERT_VALUE(docs, documentsFor(shape, /*shared=*/false));
  unevenDocuments(**docs, shape, 41);
  FJ_ASSERT_NO_ERROR((*docs)->upload());
  FJ_ASSERT_VALUE(checker, referenceFor(desc, shape, (*docs)->modArgs(nullptr, false), 41));
  fj_forward_args args = argsOf(**checker);
  size_t bytes = 99;
  FJ_ASSERT_OK(fj_forward_workspace_size(kernel, &args, &bytes));
  EXPECT_EQ(bytes, 0u) << "no block mask: no workspace";
  Mask mask;
  FJ_ASSERT_OK(fj_block_mask_create(kernel, &args, nullptr, nullptr, &mask.handle));
  args.block_mask = mask.handle;
  FJ_ASSERT_OK(fj_forward_workspace_size(kernel, &args, &bytes));
  EXPECT_EQ(bytes, 4u) << "a block mask: the tile counter";

  FJ_ASSERT_VALUE(staticWalk, runForward(**checker, kernel, args));
  EXPECT_TRUE(staticWalk->passed) << staticWalk->summary();
  FJ_ASSERT_VALUE(expected, outputsOf(**checker));
  FJ_ASSERT_VALUE(counter, runtime::DeviceBuffer::allocate(16));
  FJ_ASSERT_NO_ERROR(counter->fill(0xFF));
  fj_forward_args counted = args;
  counted.workspace = (void *)counter->ptr();
  counted.workspace_bytes = 4;
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(llvm::formatv("call {0} with the counter", call).str());
    FJ_ASSERT_VALUE(report, runForward(**checker, kernel, counted));
    EXPECT_TRUE(report->passed) << report->summary();
    FJ_ASSERT_VALUE(out, outputsOf(**checker));
    EXPECT_TRUE(*out == *expected) << "differs from the static walk's output";
  }
  // A counter must be 4 bytes, 4-byte aligned.
  fj_forward_args bad = counted;
  bad.workspace_bytes = 2;
  EXPECT_EQ(fj_forward(kernel, &bad, nullptr), FJ_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(fj_last_error_message()).find("tile counter"), std::string::npos)
      << fj_last_error_message();
  bad = counted;
  bad.workspace = (char *)counted.workspace + 2;
  EXPECT_EQ(fj_forward(kernel, &bad, nullptr), FJ_ERROR_INVALID_VALUE);
}

TEST_F(ApiBlockMaskGpu, UpdateFollowsNewIds) {
  FLASHJIT_REQUIRE_GPU();
  const fj_attention_desc desc = maskDesc(FJ_DTYPE_FP16, /*causal=*/false, kDocumentMask);
  fj_kernel kernel = kernelFor(desc);
  ASSERT_NE(kernel, nullptr);
  const tuner::ForwardShape shape = shapeOf(2, 1000, 1000);
  FJ_ASSERT_VALUE(docs, documentsFor(shape, false));
  Documents &d = **docs;
  // Three contents of the same tensor, each with its reference.
  std::vector<std::vector<int>> contents;
  unevenDocuments(d, shape, 31);
  contents.push_back(d.ids);
  fillDocuments(d, shape, [](int, int) { return 0; });  // one document: every key seen
  contents.push_back(d.ids);
  unevenDocuments(d, shape, 32);
  contents.push_back(d.ids);
  std::vector<std::unique_ptr<tuner::ForwardChecker>> refs;
  for (const std::vector<int> &ids : contents) {
    d.ids = ids;
    FJ_ASSERT_NO_ERROR(d.upload());
    FJ_ASSERT_VALUE(checker, referenceFor(desc, shape, d.modArgs(nullptr, false), 33));
    refs.push_back(std::move(*checker));
  }

  d.ids = contents[0];
  FJ_ASSERT_NO_ERROR(d.upload());
  fj_forward_args args = argsOf(*refs[0]);
  Mask mask;
  FJ_ASSERT_OK(fj_block_mask_create(kernel, &args, nullptr, nullptr, &mask.handle));
  for (size_t n = 0; n < contents.size(); ++n) {
    SCOPED_TRACE(llvm::formatv("ids {0}", n).str());
    d.ids = contents[n];
    FJ_ASSERT_NO_ERROR(d.upload());
    fj_forward_args call = argsOf(*refs[n]);
    call.block_mask = mask.handle;
    if (n == 1) {
      // The mask of the first ids drops tiles the one document needs: a stale mask is
      // the caller's mistake, and shows (it is not checked against the ids).
      FJ_ASSERT_VALUE(stale, runForward(*refs[n], kernel, call));
      EXPECT_FALSE(stale->passed) << "a stale mask gave the new ids' output: " << stale->summary();
    }
    if (n > 0)
      FJ_ASSERT_OK(fj_block_mask_update(mask.handle, &args, nullptr));  // same shape
    FJ_ASSERT_VALUE(report, runForward(*refs[n], kernel, call));
    EXPECT_TRUE(report->passed) << report->summary();
  }
}

// ---- CUDA graphs ---------------------------------------------------------------------

// fj_block_mask_update then fj_forward, captured once (global mode: an allocation or a
// synchronisation inside either would fail the capture) and replayed after the ids change
// in place: each replay gives the output of an eager run on those ids.
TEST_F(ApiBlockMaskGpu, UpdateAndForwardInACapturedGraph) {
  FLASHJIT_REQUIRE_GPU();
  GraphApi graph = GraphApi::load();
  ASSERT_TRUE(graph.complete()) << "the driver lacks the graph API";
  const fj_attention_desc desc = maskDesc(FJ_DTYPE_BF16, /*causal=*/true, kDocumentMask);
  fj_kernel kernel = kernelFor(desc);
  ASSERT_NE(kernel, nullptr);
  FJ_ASSERT_VALUE(stream, runtime::createStream());
  struct StreamGuard {
    CUstream s;
    ~StreamGuard() { runtime::destroyStream(s); }
  } guard{*stream};

  const tuner::ForwardShape shape = shapeOf(2, 777, 1029);
  FJ_ASSERT_VALUE(docs, documentsFor(shape, false));
  Documents &d = **docs;
  std::vector<std::vector<int>> contents;
  for (uint64_t seed : {41, 42}) {
    unevenDocuments(d, shape, seed);
    contents.push_back(d.ids);
  }
  // Per content: a reference problem (the same q, k, v: one seed), its eager output
  // with a mask built for it, checked against the reference.
  std::vector<std::unique_ptr<tuner::ForwardChecker>> refs;
  std::vector<Outputs> eager;
  for (const std::vector<int> &ids : contents) {
    d.ids = ids;
    FJ_ASSERT_NO_ERROR(d.upload());
    FJ_ASSERT_VALUE(checker, referenceFor(desc, shape, d.modArgs(nullptr, false), 43));
    fj_forward_args args = argsOf(**checker);
    Mask mask;
    FJ_ASSERT_OK(fj_block_mask_create(kernel, &args, nullptr, nullptr, &mask.handle));
    args.block_mask = mask.handle;
    FJ_ASSERT_VALUE(report, runForward(**checker, kernel, args));
    ASSERT_TRUE(report->passed) << report->summary();
    FJ_ASSERT_VALUE(out, outputsOf(**checker));
    eager.push_back(std::move(*out));
    refs.push_back(std::move(*checker));
  }

  // Captured on the first problem's buffers, with a mask built for other ids.
  tuner::ForwardChecker &problem = *refs[0];
  const fj_forward_args args = argsOf(problem);
  Mask mask;
  d.ids = contents[1];
  FJ_ASSERT_NO_ERROR(d.upload());
  FJ_ASSERT_NO_ERROR(runtime::synchronizeStream(nullptr));
  FJ_ASSERT_OK(fj_block_mask_create(kernel, &args, nullptr, *stream, &mask.handle));
  FJ_ASSERT_NO_ERROR(runtime::synchronizeStream(*stream));
  fj_forward_args masked = args;
  masked.block_mask = mask.handle;
  ASSERT_EQ(graph.beginCapture(*stream, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  fj_status updated = fj_block_mask_update(mask.handle, &args, *stream);
  std::string updateMessage = updated == FJ_SUCCESS ? "" : fj_last_error_message();
  fj_status forwarded = fj_forward(kernel, &masked, *stream);
  std::string forwardMessage = forwarded == FJ_SUCCESS ? "" : fj_last_error_message();
  CUgraph captured = nullptr;
  CUresult ended = graph.endCapture(*stream, &captured);
  ASSERT_EQ(updated, FJ_SUCCESS) << "fj_block_mask_update in capture: " << updateMessage;
  ASSERT_EQ(forwarded, FJ_SUCCESS) << "fj_forward in capture: " << forwardMessage;
  ASSERT_EQ(ended, CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(graph.instantiate(&exec, captured, 0), CUDA_SUCCESS);

  for (size_t n : {0, 1, 0}) {
    SCOPED_TRACE(llvm::formatv("replay on ids {0}", n).str());
    d.ids = contents[n];
    FJ_ASSERT_NO_ERROR(d.upload());
    FJ_ASSERT_NO_ERROR(problem.poisonOutputs());
    // Both went to the legacy stream, which the (non-blocking) stream does not wait for.
    FJ_ASSERT_NO_ERROR(runtime::synchronizeStream(nullptr));
    ASSERT_EQ(graph.launch(exec, *stream), CUDA_SUCCESS);
    FJ_ASSERT_NO_ERROR(runtime::synchronizeStream(*stream));
    FJ_ASSERT_VALUE(out, outputsOf(problem));
    EXPECT_TRUE(*out == eager[n]) << "the replay differs from the eager run on these ids";
    if (n == 0) {
      FJ_ASSERT_VALUE(report, problem.compareOutputs(*stream));
      EXPECT_TRUE(report->passed) << report->summary();
    }
  }
  graph.execDestroy(exec);
  graph.destroy(captured);
}

TEST_F(ApiBlockMaskGpu, RefusalsSayWhy) {
  FLASHJIT_REQUIRE_GPU();
  const fj_attention_desc desc = maskDesc(FJ_DTYPE_BF16, /*causal=*/true, kDocumentMask);
  fj_kernel kernel = kernelFor(desc);
  fj_kernel other = kernelFor(maskDesc(FJ_DTYPE_BF16, /*causal=*/false, kDocumentMask));
  fj_attention_desc plainDesc = maskDesc(FJ_DTYPE_BF16, true, nullptr);
  fj_kernel plain = kernelFor(plainDesc);
  ASSERT_TRUE(kernel && other && plain);

  const tuner::ForwardShape shape = shapeOf(2, 333, 517);
  FJ_ASSERT_VALUE(docs, documentsFor(shape, false));
  unevenDocuments(**docs, shape, 51);
  FJ_ASSERT_NO_ERROR((*docs)->upload());
  FJ_ASSERT_VALUE(checker, referenceFor(desc, shape, (*docs)->modArgs(nullptr, false), 51));
  const fj_forward_args args = argsOf(**checker);
  fj_block_mask dummy = nullptr;

  // A kernel without mask_mod has no use for a mask.
  EXPECT_TRUE(failsWith(fj_block_mask_create(plain, &args, nullptr, nullptr, &dummy),
                        FJ_ERROR_INVALID_VALUE, {"fj_block_mask_create: ", "has no mask_mod"}));
  EXPECT_EQ(dummy, nullptr);

  Mask mask;
  FJ_ASSERT_OK(fj_block_mask_create(kernel, &args, nullptr, nullptr, &mask.handle));
  fj_forward_args withMask = args;
  withMask.block_mask = mask.handle;
  FJ_ASSERT_VALUE(good, runForward(**checker, kernel, withMask));
  EXPECT_TRUE(good->passed) << good->summary();

  // Arguments for a build must not carry a mask.
  EXPECT_TRUE(failsWith(fj_block_mask_create(kernel, &withMask, nullptr, nullptr, &dummy),
                        FJ_ERROR_INVALID_VALUE, {"args->block_mask is set", "must not carry"}));
  EXPECT_TRUE(failsWith(fj_block_mask_update(mask.handle, &withMask, nullptr),
                        FJ_ERROR_INVALID_VALUE,
                        {"fj_block_mask_update: ", "args->block_mask is set"}));

  // The same shape only: batch, seqlen_q, seqlen_k, cu_seqlens or not.
  FJ_ASSERT_VALUE(cuQ, runtime::DeviceBuffer::allocate(3 * sizeof(int)));
  FJ_ASSERT_VALUE(cuK, runtime::DeviceBuffer::allocate(3 * sizeof(int)));
  const int cuQHost[] = {0, 333, 666}, cuKHost[] = {0, 517, 1034};
  FJ_ASSERT_NO_ERROR(cuQ->upload(cuQHost, sizeof cuQHost));
  FJ_ASSERT_NO_ERROR(cuK->upload(cuKHost, sizeof cuKHost));
  struct Edit {
    const char *name;
    std::function<void(fj_forward_args &)> edit;
    const char *says;
  };
  const std::vector<Edit> shapes = {
      {"batch", [](fj_forward_args &a) { a.batch = 1; }, "this call has batch 1"},
      {"seqlen_q", [](fj_forward_args &a) { a.seqlen_q = 300; }, "seqlen_q 300"},
      {"seqlen_k", [](fj_forward_args &a) { a.seqlen_k = 500; }, "seqlen_k 500"},
      {"cu_seqlens",
       [&](fj_forward_args &a) {  // the same rows, packed: only cu_seqlens differs
         a.cu_seqlens_q = reinterpret_cast<const int32_t *>(cuQ->ptr());
         a.cu_seqlens_k = reinterpret_cast<const int32_t *>(cuK->ptr());
         a.total_q = 666, a.total_k = 1034;
       },
       "seqlen_k 517 (cu_seqlens)"},
  };
  for (const Edit &e : shapes) {
    SCOPED_TRACE(e.name);
    fj_forward_args changed = withMask;
    e.edit(changed);
    EXPECT_TRUE(failsWith(fj_forward(kernel, &changed, nullptr), FJ_ERROR_INVALID_VALUE,
                          {"fj_forward: ", "args->block_mask was built for batch 2, seqlen_q 333, "
                                           "seqlen_k 517", e.says, "build a mask for this shape"}));
    fj_forward_args update = args;
    e.edit(update);
    EXPECT_TRUE(failsWith(fj_block_mask_update(mask.handle, &update, nullptr),
                          FJ_ERROR_INVALID_VALUE, {"fj_block_mask_update: ", e.says}));
  }

  // Another kernel's mask; a mask for a description without mask_mod.
  EXPECT_TRUE(failsWith(fj_forward(other, &withMask, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"args->block_mask was built for kernel", "not this one"}));
  EXPECT_TRUE(failsWith(fj_forward(plain, &withMask, nullptr), FJ_ERROR_INVALID_VALUE,
                        {"fj_forward: ", "args->block_mask is set", "no mask_mod"}));
  EXPECT_TRUE(failsWith(fj_validate_forward_args(&plainDesc, &withMask), FJ_ERROR_INVALID_VALUE,
                        {"fj_validate_forward_args: ", "no mask_mod"}));
  fj_dispatch_info info;
  info.struct_size = sizeof info;
  EXPECT_TRUE(failsWith(fj_forward_dispatch_info(plain, &withMask, &info),
                        FJ_ERROR_INVALID_VALUE, {"no mask_mod"}));

  // Nothing refused above ran: the outputs still hold the poison.
  FJ_ASSERT_NO_ERROR((*checker)->poisonOutputs());
  for (const Edit &e : shapes) {
    fj_forward_args changed = withMask;
    e.edit(changed);
    EXPECT_NE(fj_forward(kernel, &changed, nullptr), FJ_SUCCESS);
  }
  FJ_ASSERT_VALUE(untouched, (*checker)->compareOutputs(nullptr));
  EXPECT_EQ(untouched->badValues,
            (long long)shape.batch * shape.seqQ * shape.headsQ * (desc.head_dim + 1))
      << "a refused call wrote its outputs (every element and LSE must still be NaN)";

  // A variable-length batch cannot share one mask across its sequences.
  {
    fj_forward_args varlen = args;
    shapes[3].edit(varlen);
    fj_block_mask_options options;
    fj_block_mask_options_init(&options);
    options.shared_across_batch = 1;
    EXPECT_TRUE(failsWith(fj_block_mask_create(kernel, &varlen, &options, nullptr, &dummy),
                          FJ_ERROR_INVALID_VALUE,
                          {"options->shared_across_batch is set", "cu_seqlens"}));
    options.struct_size = 3;
    EXPECT_TRUE(failsWith(fj_block_mask_create(kernel, &args, &options, nullptr, &dummy),
                          FJ_ERROR_INVALID_VALUE, {"options->struct_size is 3"}));
  }

  // Another variant (sm_90a: a variable-length call with its packed row counts runs on
  // fwd_wgmma, without total_k on the fwd_mma fallback).
  if (hopper()) {
    fj_forward_args varlen = args;
    shapes[3].edit(varlen);
    Mask wgmma;
    FJ_ASSERT_OK(fj_block_mask_create(kernel, &varlen, nullptr, nullptr, &wgmma.handle));
    fj_forward_args fallback = varlen;
    fallback.total_k = 0;
    fallback.block_mask = wgmma.handle;
    EXPECT_NE(tilesFor(kernel, varlen).variant, tilesFor(kernel, fallback).variant);
    EXPECT_TRUE(failsWith(fj_forward(kernel, &fallback, nullptr), FJ_ERROR_INVALID_VALUE,
                          {"args->block_mask was built for variant", "build the mask with the "
                                                                     "arguments of the calls"}));
  }

  // A kernel with masks cannot be released; it stays usable, and goes once they are.
  {
    fj_kernel own = nullptr;
    FJ_ASSERT_OK(fj_kernel_get(ctx(), &desc, &own));  // from the context's memory cache
    fj_block_mask first = nullptr, second = nullptr;
    FJ_ASSERT_OK(fj_block_mask_create(own, &args, nullptr, nullptr, &first));
    FJ_ASSERT_OK(fj_block_mask_create(own, &args, nullptr, nullptr, &second));
    EXPECT_TRUE(failsWith(fj_kernel_release(own), FJ_ERROR_INVALID_VALUE,
                          {"fj_kernel_release: ", "2 block mask(s) not yet destroyed"}));
    fj_forward_args call = args;
    call.block_mask = first;
    FJ_ASSERT_VALUE(still, runForward(**checker, own, call));
    EXPECT_TRUE(still->passed) << "after a refused release: " << still->summary();
    FJ_EXPECT_OK(fj_block_mask_destroy(first));
    EXPECT_TRUE(failsWith(fj_block_mask_destroy(first), FJ_ERROR_INVALID_VALUE,
                          {"fj_block_mask_destroy: ", "not a live block mask"}));
    EXPECT_TRUE(failsWith(fj_block_mask_update(first, &args, nullptr), FJ_ERROR_INVALID_VALUE,
                          {"not a live block mask"}));
    EXPECT_TRUE(failsWith(fj_kernel_release(own), FJ_ERROR_INVALID_VALUE,
                          {"1 block mask(s) not yet destroyed"}));
    FJ_EXPECT_OK(fj_block_mask_destroy(second));
    FJ_EXPECT_OK(fj_kernel_release(own));
  }
}

// ---- d. variable-length batches --------------------------------------------------------

TEST_F(ApiBlockMaskGpu, VariableLengthBatches) {
  FLASHJIT_REQUIRE_GPU();
  for (bool causal : {false, true}) {
    const fj_attention_desc desc = maskDesc(FJ_DTYPE_BF16, causal, kDocumentMask);
    fj_kernel kernel = kernelFor(desc);
    ASSERT_NE(kernel, nullptr);
    tuner::ForwardShape shape = shapeOf(3, 0, 0);
    shape.seqlensQ = {300, 777, 150};
    shape.seqlensK = {300, 1029, 611};
    shape.seqQ = 777;
    shape.seqK = 1029;
    for (bool dropHeads : {false, true}) {
      SCOPED_TRACE(llvm::formatv("{0}{1}", causal ? "causal" : "full",
                                 dropHeads ? ", documents dropped per head" : "")
                       .str());
      FJ_ASSERT_VALUE(docs, documentsFor(shape, false));
      unevenDocuments(**docs, shape, 61 + dropHeads);
      FJ_ASSERT_NO_ERROR((*docs)->upload());
      FJ_ASSERT_VALUE(checker,
                      referenceFor(desc, shape, (*docs)->modArgs(nullptr, dropHeads), 61));
      const fj_forward_args packed = argsOf(**checker);
      fj_forward_args noTotal = packed;  // on sm_90a: the fwd_mma fallback
      noTotal.total_k = 0;
      for (const fj_forward_args *call :
           std::initializer_list<const fj_forward_args *>{&packed, &noTotal}) {
        SCOPED_TRACE(call == &packed ? "with total_q/total_k" : "without total_k");
        FJ_ASSERT_VALUE(plain, runForward(**checker, kernel, *call));
        EXPECT_TRUE(plain->passed) << "without a block mask: " << plain->summary();
        for (int sharedHeads : {0, 1}) {
          fj_block_mask_options options;
          fj_block_mask_options_init(&options);
          options.shared_across_heads = sharedHeads && !dropHeads;
          Mask mask;
          FJ_ASSERT_OK(fj_block_mask_create(kernel, call, &options, nullptr, &mask.handle));
          fj_forward_args masked = *call;
          masked.block_mask = mask.handle;
          FJ_ASSERT_VALUE(report, runForward(**checker, kernel, masked));
          EXPECT_TRUE(report->passed)
              << "with a block mask" << (options.shared_across_heads ? " shared across heads" : "")
              << ": " << report->summary();
        }
        const Documents &d = **docs;
        long long empty = expectEmptyRows(**checker, [&](int b, int h, int i) {
          return dropHeads && (d.queryDoc(b, i) + h) % 3 == 0;
        });
        if (dropHeads) {
          EXPECT_GT(empty, 0);
        }
      }
    }
  }
}

} // namespace
