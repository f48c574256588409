/*
 * flashjit: flash-attention CUDA kernels generated, compiled, tuned and cached at
 * run time. This is the public C API (C99; no C++ or CUDA types).
 *
 * The idiom is that of CUDA libraries such as cuBLASLt and cuDNN:
 *   - opaque handles: fj_context (one device, its caches, its tuner) and fj_kernel
 *     (a kernel ready to launch for one attention description);
 *   - every function returns an fj_status; when it is not FJ_SUCCESS,
 *     fj_last_error_message() says what was wrong (on the calling thread);
 *   - every struct passed in or out starts with `struct_size`, which the caller sets
 *     to sizeof(the struct) (the *_init functions do it), so that later versions can
 *     add fields at the end without breaking programs built against this header.
 *
 * Typical use (see examples/attention.c):
 *
 *   fj_context ctx;
 *   fj_context_create(NULL, &ctx);                 // device 0, default caches
 *   fj_attention_desc desc;
 *   fj_attention_desc_init(&desc);
 *   desc.dtype = FJ_DTYPE_BF16; desc.head_dim = 128;
 *   desc.num_heads_q = 32; desc.num_heads_kv = 8; desc.causal = 1;
 *   fj_kernel kernel;
 *   fj_kernel_get(ctx, &desc, &kernel);            // cache hit, else tune/compile
 *   fj_forward_args args;
 *   fj_forward_args_init(&args);
 *   args.q = q; ... strides, sizes ...
 *   fj_forward(kernel, &args, stream);             // asynchronous on `stream`
 *   fj_kernel_release(kernel);
 *   fj_context_destroy(ctx);
 *
 * Thread safety: any number of threads may call fj_kernel_get on one context and
 * the launches (fj_forward, fj_backward, fj_decode, fj_kv_append), fj_kernel_info and
 * fj_kernel_source on shared kernels at the same time.
 * A description requested by several threads at once is tuned once (the others
 * wait for it). Destroying a context or releasing a kernel while another thread uses
 * it is the caller's error.
 *
 * CUDA context: flashjit uses the device's primary context (the one the CUDA runtime
 * and PyTorch use). fj_context_create, fj_kernel_get and the launches make it current
 * on the calling thread, as cudaSetDevice would.
 */
#ifndef FLASHJIT_FLASHJIT_H
#define FLASHJIT_FLASHJIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FJ_API __attribute__((visibility("default")))
#else
#define FJ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHJIT_VERSION_MAJOR 0
#define FLASHJIT_VERSION_MINOR 14
#define FLASHJIT_VERSION_PATCH 1

/* ---- Status codes ------------------------------------------------------------ */

typedef enum fj_status {
  FJ_SUCCESS = 0,
  FJ_ERROR_INVALID_VALUE = 1,  /* a bad argument; the message names it and its value */
  FJ_ERROR_NOT_SUPPORTED = 2,  /* valid, but this build or device cannot serve it */
  FJ_ERROR_NO_DEVICE = 3,      /* no CUDA driver, or no such device */
  FJ_ERROR_COMPILE = 4,        /* NVRTC rejected a kernel; the message has its log */
  FJ_ERROR_CUDA = 5,           /* a CUDA driver call failed; the message has its error */
  FJ_ERROR_CACHE = 6,          /* the kernel cache (SQLite) failed */
  FJ_ERROR_NOT_FOUND = 7,      /* FJ_TUNE_CACHED and the caches have no kernel for it */
  FJ_ERROR_OUT_OF_MEMORY = 8,  /* host or device memory exhausted */
  FJ_ERROR_INTERNAL = 9        /* a bug in flashjit: please report the message */
} fj_status;

/* The status as a constant string, e.g. "FJ_ERROR_INVALID_VALUE: invalid value".
 * Never NULL (an unknown value gives "FJ_UNKNOWN_STATUS"). */
FJ_API const char *fj_status_string(fj_status status);

/* The message of the most recent call that failed on the calling thread: it names
 * the argument and the value that was wrong, or carries the NVRTC / driver message.
 * "" before any failure. Successful calls leave it unchanged. The pointer is valid on
 * this thread until its next failing call. */
FJ_API const char *fj_last_error_message(void);

/* The library's version, "MAJOR.MINOR.PATCH". */
FJ_API const char *fj_version(void);

/* ---- Enumerations (stored as int32_t in the structs, so that any value read
 *      from a struct is well defined and can be checked) ----------------------- */

/* Element type of q, k, v and o. 0 is deliberately not a type: a description whose
 * dtype was never set is reported rather than silently taken as fp16.
 * FJ_DTYPE_E4M3 (added in 0.7): FP8 q, k and v (float8_e4m3fn, one byte), o of the
 * description's out_dtype; the forward pass only, on sm_90a (H100, H200). Since 0.12
 * also the type of a decode KV cache (desc.kv_cache_dtype), on every target. */
typedef enum fj_dtype {
  FJ_DTYPE_FP16 = 1,
  FJ_DTYPE_BF16 = 2,
  FJ_DTYPE_E4M3 = 3
} fj_dtype;

/* What fj_kernel_get does when the caches have no tuned kernel for a description. */
typedef enum fj_tune_mode {
  FJ_TUNE_AUTO = 0,       /* $FLASHJIT_TUNE ("default", "cached", "heuristic",
                             "exhaustive") when set, else FJ_TUNE_DEFAULT */
  FJ_TUNE_DEFAULT = 1,    /* tune now within the budget, store the winner */
  FJ_TUNE_CACHED = 2,     /* never compile or tune: the hinted bucket's winner, else
                             the nearest tuned bucket, else the default tile if its
                             binary is cached; FJ_ERROR_NOT_FOUND when none is */
  FJ_TUNE_HEURISTIC = 3,  /* compile the heuristic tile (docs/TUNING.md) without tuning */
  FJ_TUNE_EXHAUSTIVE = 4  /* tune every candidate, no budget cut */
} fj_tune_mode;

/* Which shape buckets fj_kernel_get tunes for the forward pass (desc.tune_lengths), in
 * the modes that tune (FJ_TUNE_DEFAULT, FJ_TUNE_EXHAUSTIVE). Every bucket already tuned
 * is loaded whatever this says, and fj_forward runs each call on its own bucket's
 * variant, else the nearest one's (docs/TUNING.md, "One handle, every length"). */
typedef enum fj_tune_lengths {
  FJ_TUNE_LENGTHS_AUTO = 0,    /* the length ladder when seqlen_q_hint is 0 (the caller
                                  does not know its lengths), else the hinted bucket */
  FJ_TUNE_LENGTHS_HINTED = 1,  /* the hinted bucket only */
  FJ_TUNE_LENGTHS_LADDER = 2   /* the hinted bucket and the length ladder: square
                                  buckets N = 512, 1024, ..., 16384 at batch_hint, or
                                  when it is 0 at a 16384-token batch (16384 / N) */
} fj_tune_lengths;

/* Where a kernel variant came from. */
typedef enum fj_origin {
  FJ_ORIGIN_SHIPPED_CACHE = 1,  /* a read-only cache shipped with the application */
  FJ_ORIGIN_USER_CACHE = 2,     /* the user's (writable) cache */
  FJ_ORIGIN_COMPILED_NOW = 3,   /* compiled by this call, not tuned */
  FJ_ORIGIN_TUNED_NOW = 4,      /* tuned (and compiled) by this call */
  FJ_ORIGIN_SYSTEM_CACHE = 5    /* the system cache installed with flashjit (added in 0.2) */
} fj_origin;

/* Levels passed to the log callback. */
typedef enum fj_log_level {
  FJ_LOG_ERROR = 1,
  FJ_LOG_WARNING = 2,
  FJ_LOG_INFO = 3
} fj_log_level;

/* Receives flashjit's progress and warnings. May be called from any thread that
 * calls into flashjit, and from several at once; `message` is valid during the call. */
typedef void (*fj_log_callback)(int level, const char *message, void *user_data);

/* ---- Context ------------------------------------------------------------------ */

typedef struct fj_context_s *fj_context;
typedef struct fj_kernel_s *fj_kernel;
typedef struct fj_block_mask_s *fj_block_mask;  /* see fj_block_mask_create (0.6) */

typedef struct fj_context_options {
  size_t struct_size;       /* sizeof(fj_context_options) */
  int32_t device;           /* CUDA device ordinal (default 0) */
  /* The writable user cache (an SQLite file, created if missing). NULL: the default,
   * $FLASHJIT_CACHE, else $XDG_CACHE_HOME/flashjit/cache.sqlite, else
   * ~/.cache/flashjit/cache.sqlite. "": no persistent cache (kernels compiled or tuned
   * by this context are kept in memory only). */
  const char *user_cache_path;
  /* Read-only caches shipped with the application, searched after the user cache in
   * this order. `num_shipped_cache_paths` entries; may be NULL when 0. */
  const char *const *shipped_cache_paths;
  int32_t num_shipped_cache_paths;
  int32_t tune_mode;        /* an fj_tune_mode (default FJ_TUNE_AUTO) */
  /* Seconds one (description, shape bucket) may spend tuning; 0: the default (30).
   * Compiling counts; where it alone overran the budget, the timing still gets a
   * quarter of the compile time, so that the candidates compiled are compared. */
  double tuning_budget_seconds;
  fj_log_callback log_callback;  /* NULL: warnings to stderr, progress dropped */
  void *log_user_data;
} fj_context_options;

/* Zeroes `options`, sets its struct_size and the defaults. */
FJ_API void fj_context_options_init(fj_context_options *options);

/* Opens the device, its primary context (shared with the CUDA runtime and frameworks
 * such as PyTorch) and the caches. `options` NULL: the defaults. Without a CUDA
 * driver or device: FJ_ERROR_NO_DEVICE with the driver's message. On failure
 * *context is set to NULL. */
FJ_API fj_status fj_context_create(const fj_context_options *options, fj_context *context);

/* Destroys a context. Every kernel obtained from it must have been released first:
 * otherwise FJ_ERROR_INVALID_VALUE ("context has N kernels outstanding") and the
 * context is left intact and usable. A context destroyed twice is detected. */
FJ_API fj_status fj_context_destroy(fj_context context);

/* What a context is bound to. The struct and the function share a name, like POSIX's
 * `struct stat` and stat(): declare it as `struct fj_context_info info;`. */
struct fj_context_info {
  size_t struct_size;          /* set by the caller: sizeof(struct fj_context_info) */
  int32_t device;              /* ordinal */
  int32_t tune_mode;           /* the fj_tune_mode in effect (never FJ_TUNE_AUTO) */
  int32_t kernels_outstanding; /* kernels obtained and not yet released */
  int32_t compilations;        /* NVRTC compilations this context has run (tuning too) */
  int32_t tunes;               /* (description, bucket) pairs this context has tuned */
  /* Strings owned by the context, valid until it is destroyed. */
  const char *device_name;     /* "NVIDIA H200" */
  const char *target;          /* the exact compile target, "sm_90a" */
  const char *device_key;      /* the tuning cache's device key */
  const char *user_cache_path; /* "" when the cache is in memory only */
};

FJ_API fj_status fj_context_info(fj_context context, struct fj_context_info *info);

/* ---- Attention description: what a kernel is specialized for ------------------ */

/* What the user code of a description (score_mod, mask_mod) sees as `args`: the
 * caller's tensors and numbers, passed to the kernel unchanged (no copy, no check).
 * tensor[] are device pointers of any type (the code casts them); unused entries are
 * ignored. Laid out as the kernels' FjModArgs. (Added in 0.3.) */
typedef struct fj_mod_args {
  const void *tensor[4];
  float scalar[4];
  int32_t integer[4];
} fj_mod_args;

/* Attention features (added in 0.3), fields of fj_attention_desc. Each is off when zero,
 * so a zero-initialised description is the plain kernel. A score s = q.k of query i
 * (0-based within its sequence) and key j becomes, in this order:
 *   1. s * softmax_scale;
 *   2. softcap (> 0): softcap * tanh(s / softcap);
 *   3. ALiBi: s - slope * |i + diag - j|, diag = seqlen_k - seqlen_q, the slope of the
 *      sequence's head given to fj_forward (fj_forward_args.alibi_slopes);
 *   4. score_mod: the user's function of it;
 * then the masks remove keys: past the sequence's end, causal, the sliding window, and
 * mask_mod. A query row that sees no key gets o = 0 and lse = -inf.
 * The features are part of what a kernel is compiled for (fj_kernel_info's spec_key
 * ends with them, e.g. ".win256_0.cap30.alibi"). The backward pass (0.9) takes the
 * window, softcap, ALiBi and mask_mod (on the bwd_mma family, whatever the target);
 * desc.backward with a score_mod is FJ_ERROR_NOT_SUPPORTED (its derivative is unknown).
 * The decode kernels take the window, softcap and ALiBi (0.13; fj_decode_args.alibi_slopes)
 * and score_mod and mask_mod (0.14; fj_decode_args.mod_args), over a 16-bit cache and
 * (0.14) an FP8 one. */
typedef struct fj_attention_desc {
  size_t struct_size;     /* sizeof(fj_attention_desc) */
  int32_t dtype;          /* an fj_dtype */
  int32_t head_dim;       /* of q and k: a multiple of 8 from 8 to 256 */
  int32_t head_dim_v;     /* of v and o; 0: same as head_dim */
  int32_t causal;         /* non-zero: causal mask, aligned to the bottom right (query
                             i sees keys j <= i + seqlen_k - seqlen_q), as FlashAttention
                             >= 2.1 */
  int32_t num_heads_q;    /* >= 1 */
  int32_t num_heads_kv;   /* >= 1, divides num_heads_q (GQA / MQA when smaller) */
  float softmax_scale;    /* finite, >= 0; 0: 1 / sqrt(head_dim); >= 2^-60 with alibi */
  /* Typical sizes, which choose the shape bucket tuned first; 0: unknown (1024 for
   * the sequence lengths, seqlen_k defaults to seqlen_q; the batch of a 16384-token
   * step, 16384 / seqlen_q_hint and at least 1, for the forward and backward pass, 1
   * for decode). A kernel runs any size; other buckets use the tuning already cached
   * for them, else the nearest one; tune_lengths says which more fj_kernel_get tunes. */
  int32_t seqlen_q_hint;
  int32_t seqlen_k_hint;
  int32_t batch_hint;
  /* Non-zero: the kernel also carries the backward pass (fj_backward), chosen by the
   * same tune mode and cached like the forward. 0 (the default): forward only, and
   * fj_kernel_get prepares nothing for gradients. (Added in 0.2: a struct_size that
   * ends before this field is accepted and reads as 0.) */
  int32_t backward;
  /* ---- Features (added in 0.3: a struct_size that ends before them is accepted, and
   * they read as off; see the order of application above). */
  /* Non-zero: a sliding window, aligned to the bottom right like causal: query i sees
   * keys i + diag - window_left .. i + diag + window_right (diag = seqlen_k - seqlen_q).
   * Each side >= 0 (keys), or -1 for unbounded; not both -1. With window 0 the sides
   * must be 0. With causal, the window's right side beyond the diagonal is masked too. */
  int32_t window;
  int32_t window_left;
  int32_t window_right;
  /* 0: none; else finite and > 0: scaled scores become softcap * tanh(score / softcap)
   * (Gemma 2, Grok). */
  float softcap;
  /* Non-zero: ALiBi, the bias -slope * |i + diag - j| on the scaled scores; the slopes
   * are given per call (fj_forward_args.alibi_slopes), so one kernel serves any. */
  int32_t alibi;
  /* User CUDA code (NULL or "": none), the body of
   *   float score_mod(float score, int b, int h, int q_idx, int kv_idx,
   *                   const FjModArgs &args)
   *   bool mask_mod(int b, int h, int q_idx, int kv_idx, const FjModArgs &args)
   * (mask_mod returns true to keep key kv_idx). b is the sequence, h the query head,
   * q_idx and kv_idx count within the sequence; args is fj_forward_args.mod_args (as a
   * struct of the same layout, FjModArgs; in decode fj_decode_args.mod_args, and q_idx
   * counts the step's rows: row i is the cache's key i + cache_seqlens[b] - seqlen_q).
   * NUL-terminated, at most 65536 bytes each; copied by fj_kernel_get, not retained.
   * Code that does not compile fails fj_kernel_get with NVRTC's log in the message
   * (FJ_ERROR_COMPILE, or FJ_ERROR_NOT_SUPPORTED when no tile the tuner tried compiled).
   * The text is part of the kernel's identity (its hash ends spec_key), so the same text
   * finds the same cached kernel. */
  const char *score_mod;
  const char *mask_mod;
  /* Optional (NULL: none): the args the tuner runs score_mod / mask_mod with while
   * fj_kernel_get tunes (device pointers valid during the call, tensors sized for the
   * hinted shape: seqlen_q_hint, seqlen_k_hint, batch_hint). Not part of the kernel's
   * identity, not retained. User code that mentions `tensor` without them is never run
   * by the tuner: it gets the default tile, compiled but not tuned. */
  const fj_mod_args *tuning_mod_args;
  /* Non-zero: the kernel also carries the decode kernels (fj_decode, fj_kv_append: a few
   * new query rows against a KV cache, contiguous or paged), family dec_mma on every
   * target (sm_80 and newer), chosen by the same tune mode and cached like the forward.
   * Combines with backward, since 0.13 with the window, softcap and ALiBi, and since
   * 0.14 with score_mod and mask_mod and with every feature over an FP8 cache.
   * 0 (the default): no decode kernels. (Added in 0.4: a struct_size that ends before
   * this field is accepted and reads as 0.) */
  int32_t decode;
  int32_t reserved_04;  /* 0.4's tail padding: never read */
  /* An fj_tune_lengths: the shape buckets fj_kernel_get tunes for the forward pass when
   * it tunes (0, FJ_TUNE_LENGTHS_AUTO: every length when seqlen_q_hint is 0). Not part
   * of the kernel's identity. (Added in 0.5: a struct_size that ends before this field
   * is accepted and reads as 0.) */
  int32_t tune_lengths;
  int32_t reserved_06;  /* 0.6's tail padding: never read */
  /* With dtype FJ_DTYPE_E4M3: the type of o, FJ_DTYPE_BF16 or FJ_DTYPE_FP16 (0: bf16);
   * with a 16-bit dtype: 0 or that dtype. An FP8 description takes no features, no
   * backward and no decode (FJ_ERROR_NOT_SUPPORTED) and needs an sm_90a device.
   * (Added in 0.7: a struct_size that ends before this field is accepted and reads as 0.) */
  int32_t out_dtype;
  int32_t reserved_07;  /* 0.7's tail padding: never read */
  /* With desc.decode: the type of the KV cache that fj_decode reads and fj_kv_append
   * writes. 0 or the dtype: a 16-bit cache, as q. FJ_DTYPE_E4M3: an FP8 cache, one byte a
   * value (float8_e4m3fn), that the decode kernels dequantize as they read it, by the
   * factors fj_decode_args.k_descale / v_descale; q, o and fj_kv_append's new rows keep
   * the 16-bit dtype. Needs a 16-bit dtype, desc.decode, and head_dim and head_dim_v
   * multiples of 16; runs on every target the decode kernels do (sm_80 and newer). The
   * forward and backward passes of the handle are not affected. (Added in 0.12: a
   * struct_size that ends before this field is accepted and reads as 0.) */
  int32_t kv_cache_dtype;
  int32_t reserved_12;  /* 0.12's tail padding: never read */
} fj_attention_desc;

/* Zeroes `desc` and sets its struct_size (dtype must still be chosen). */
FJ_API void fj_attention_desc_init(fj_attention_desc *desc);

/* Checks a description without a device: FJ_SUCCESS, or the status and message
 * fj_kernel_get would give for it. */
FJ_API fj_status fj_validate_attention_desc(const fj_attention_desc *desc);

/* ---- Kernels --------------------------------------------------------------------- */

/* A kernel ready to launch for `desc` on the context's device: from the caches when
 * they have it (no compilation), else tuned or compiled as the context's tune mode
 * says. It also loads every other shape bucket already tuned for this description, so
 * that fj_forward can pick the variant tuned for the sizes it is given. The handle
 * keeps a copy of `desc`. On failure *kernel is set to NULL.
 *
 * Kernel family: on an sm_90a device (H100, H200) the kernel is fwd_wgmma (TMA, wgmma,
 * warp specialization), and the handle also carries an fwd_mma kernel for the same
 * description, chosen by the same tune mode, for the calls fwd_wgmma cannot take
 * (cu_seqlens, strides that are not multiples of 8 elements on a dimension of one
 * element, seqlen_k == 0); fj_forward picks it by itself. Should no fwd_wgmma kernel
 * be available (e.g. FJ_TUNE_CACHED with a cache prepared without one), fwd_mma alone
 * serves the handle. Elsewhere the kernel is fwd_mma. $FLASHJIT_FAMILY (auto, fwd_mma,
 * fwd_wgmma), read by fj_context_create, overrides the choice; fj_kernel_info says
 * which family a handle uses. The backward pass (desc.backward) is bwd_wgmma on sm_90a
 * for head_dim and head_dim_v each a multiple of 8 from 32 to 256, else bwd_mma;
 * $FLASHJIT_BACKWARD_FAMILY (auto,
 * bwd_mma, bwd_wgmma) overrides it. */
FJ_API fj_status fj_kernel_get(fj_context context, const fj_attention_desc *desc,
                               fj_kernel *kernel);

/* Releases a kernel. Releasing one twice is detected where possible
 * (FJ_ERROR_INVALID_VALUE): handles are checked against the live ones, so it is
 * caught unless the memory has since been reused for a new handle. */
FJ_API fj_status fj_kernel_release(fj_kernel kernel);

/* ---- Forward pass ---------------------------------------------------------------- */

/* Tensors are addressed through strides in elements; the last dimension (head_dim,
 * or head_dim_v for v and o) is contiguous. Element (b, s, h, d) of q is at
 *   q + b * q_batch_stride + s * q_seq_stride + h * q_head_stride + d.
 * The kernels read and write 16-byte vectors: q, k, v and o must be 16-byte aligned
 * and every stride a multiple of 8. A stride may be 0 only where its dimension has
 * one element (e.g. k_head_stride with num_heads_kv == 1); strides are never
 * negative. o must not overlap q, k, v or lse (not checked). */
typedef struct fj_forward_args {
  size_t struct_size;  /* sizeof(fj_forward_args) */
  /* Device pointers. q: [batch, seqlen_q, num_heads_q, head_dim], k:
   * [batch, seqlen_k, num_heads_kv, head_dim], v: [batch, seqlen_k, num_heads_kv,
   * head_dim_v], o (written): [batch, seqlen_q, num_heads_q, head_dim_v], all of the
   * description's dtype (FJ_DTYPE_E4M3: q, k and v one byte an element, their strides
   * multiples of 16; o of desc.out_dtype). May be NULL only when the tensor is empty. */
  const void *q;
  const void *k;
  const void *v;
  void *o;
  /* Optional (NULL: not written) log-sum-exp of each query row (natural log, fp32,
   * 4-byte aligned): [batch, num_heads_q, seqlen_q] contiguous, or with cu_seqlens
   * [num_heads_q, total_q] where row cu_seqlens_q[b] + i is query i of sequence b. */
  float *lse;
  int32_t batch;     /* >= 0; 0 is a valid no-op */
  int32_t seqlen_q;  /* >= 0 (0: no-op); with cu_seqlens: the longest query sequence */
  int32_t seqlen_k;  /* >= 0; with cu_seqlens: the longest key sequence */
  int64_t q_batch_stride, q_seq_stride, q_head_stride;
  int64_t k_batch_stride, k_seq_stride, k_head_stride;
  int64_t v_batch_stride, v_seq_stride, v_head_stride;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
  /* Variable-length batches (optional; both or neither): batch + 1 prefix sums of the
   * sequence lengths, int32 in device memory, 4-byte aligned. Sequence b holds rows
   * cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of q and o (and likewise for k and v,
   * addressed as rows through the seq strides); the batch strides are then ignored and
   * seqlen_q / seqlen_k must hold the longest lengths (>= 1). The contents are the
   * caller's promise: non-decreasing, each length at most seqlen_q / seqlen_k. */
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  /* With cu_seqlens: the numbers of packed query and key rows (cu_seqlens_q[batch],
   * cu_seqlens_k[batch]); 0 when not known. total_q is lse's row stride, so lse needs
   * it. The TMA kernels (fwd_wgmma) need both to bound their loads; without them a
   * variable-length call runs on the fallback family. Ignored without cu_seqlens. */
  int64_t total_q;
  int64_t total_k;
  /* ---- Features (added in 0.3: a struct_size that ends before them is accepted, and
   * they read as zero). */
  /* With desc.alibi (required then; ignored otherwise): fp32 slopes in device memory,
   * 4-byte aligned; the slope of query head h of sequence b is
   * alibi_slopes[b * alibi_batch_stride + h]. alibi_batch_stride >= 0: 0 for one slope
   * per head shared by the batch ([num_heads_q]), num_heads_q for [batch, num_heads_q]. */
  const float *alibi_slopes;
  int64_t alibi_batch_stride;
  /* What the description's score_mod / mask_mod see as `args` (ignored without them). */
  fj_mod_args mod_args;
  /* Optional (NULL: none; added in 0.6, a struct_size that ends before it reads as NULL):
   * a block mask of this kernel for exactly these arguments' shape (fj_block_mask_create),
   * so that key tiles mask_mod drops everywhere are skipped and those it keeps everywhere
   * run without it. Only with desc.mask_mod. */
  fj_block_mask block_mask;
  /* ---- FP8 (added in 0.7, read only for an FJ_DTYPE_E4M3 description; a struct_size
   * that ends before them reads them as NULL / 0). */
  /* Dequantization factors (fp32, device memory, 4-byte aligned; NULL: 1): q, k and v
   * hold x / factor, and kv head h of sequence b uses
   * factor[b * descale_batch_stride + h * descale_head_stride]; both strides 0 for one
   * factor per tensor, (num_heads_kv, 1) for [batch, num_heads_kv] (FlashAttention-3's
   * layout). The scores use q_descale * k_descale * softmax_scale, o is multiplied by
   * v_descale. Strides >= 0. */
  const float *q_descale;
  const float *k_descale;
  const float *v_descale;
  int64_t descale_batch_stride;
  int64_t descale_head_stride;
  /* Device memory the FP8 kernel writes v into, transposed (8-bit tensor cores read it
   * key-major), before each call: at least fj_forward_workspace_size bytes, 16-byte
   * aligned, not used by anything else while the call runs on its stream.
   * A 16-bit call with a block_mask may give 4 bytes here (4-byte aligned, the same
   * rule of use; 0.11): fj_forward zeroes them on the stream and the persistent
   * sm_90a kernel (not causal) takes its work tiles from this counter as its CTAs free
   * up, instead of by a fixed stride; the output is the same. Optional: NULL keeps the
   * fixed walk. A 16-bit call without a block mask does not read it. */
  void *workspace;
  size_t workspace_bytes;
} fj_forward_args;

/* Zeroes `args` and sets its struct_size. */
FJ_API void fj_forward_args_init(fj_forward_args *args);

/* Checks arguments against a description without a device (what fj_forward checks
 * before it launches): FJ_SUCCESS, or the status and message fj_forward would give. */
FJ_API fj_status fj_validate_forward_args(const fj_attention_desc *desc,
                                          const fj_forward_args *args);

/* o = softmax(q k^T * scale [causal mask]) v, per head (head h of q uses head
 * h / (num_heads_q / num_heads_kv) of k and v), and the optional lse; with the
 * description's features applied to the scores (see fj_attention_desc).
 * Launches on `stream` (a CUstream; NULL: the legacy default stream) and returns
 * without waiting. It never compiles, tunes, allocates or synchronizes, so it may be
 * captured in a CUDA graph. It picks the variant tuned for the nearest shape bucket
 * of (seqlen_q, seqlen_k, batch * num_heads_q), among the fallback family's variants
 * when the arguments are ones the primary family cannot take (see fj_kernel_get). A kernel released before the call is
 * detected on a best-effort basis only (a check of the handle's magic word). Errors
 * from the kernel itself appear later, on the stream, as with any CUDA launch. */
FJ_API fj_status fj_forward(fj_kernel kernel, const fj_forward_args *args, void *stream);

/* What fj_forward does with `args` (added in 0.5): the variant it launches and whether
 * that variant was tuned for the call's own shape bucket, so a caller can see which of
 * its lengths run on a nearest bucket's tile. Checks `args` as fj_forward does and
 * launches nothing. */
typedef struct fj_dispatch_info {
  size_t struct_size;  /* set by the caller: sizeof(fj_dispatch_info) */
  int32_t variant;     /* the index fj_forward launches (fj_kernel_variant_info); -1 when
                          the call has no work (batch or seqlen_q 0) */
  /* 1: the variant was tuned on this device for the call's bucket (its own timing
   * decided the tile); 0: it was tuned for another bucket (the nearest), or never
   * tuned (a default tile, FJ_TUNE_HEURISTIC). */
  int32_t tuned;
  int32_t bucket_seqlen_q, bucket_seqlen_k, bucket_batch_heads;  /* the call's bucket */
  char bucket[40];     /* the call's bucket, "q2048.k2048.bh128" */
} fj_dispatch_info;

FJ_API fj_status fj_forward_dispatch_info(fj_kernel kernel, const fj_forward_args *args,
                                          fj_dispatch_info *info);

/* The workspace fj_forward needs for `args` (added in 0.7): 0 for 16-bit kernels (4,
 * optional, when args->block_mask is set: the tile counter above); for an
 * FP8 kernel batch * num_heads_kv * head_dim_v * (seqlen_k rounded up to 64) bytes, or
 * with cu_seqlens num_heads_kv * head_dim_v * (total_k rounded up to 64 + 320 * batch).
 * Reads only the sizes of `args` (batch, seqlen_k, whether cu_seqlens_q is set, total_q,
 * total_k): FJ_ERROR_INVALID_VALUE for packed row counts that batch sequences of the
 * longest lengths cannot hold, FJ_ERROR_NOT_SUPPORTED where v transposed would pass 2^31
 * key columns or 2^40 bytes a batch (what TMA addresses). */
FJ_API fj_status fj_forward_workspace_size(fj_kernel kernel, const fj_forward_args *args,
                                           size_t *bytes);

/* ---- Block masks (added in 0.6) --------------------------------------------------
 *
 * Without a block mask, a kernel with a mask_mod computes every key tile and calls the
 * mask on every score. A block mask records, per block of query rows and per tile of
 * keys of the kernel's own tiles, whether mask_mod (with causal and the window) drops
 * the whole tile (it is skipped: not loaded, not computed), keeps all of it (computed
 * without calling mask_mod) or some of it (masked score by score). It is built once on
 * the GPU by evaluating mask_mod on every pair, and serves every fj_forward call of the
 * same shape and mask, e.g. every layer of a model step (document masks, prefix-LM).
 * The output is the same with or without it up to rounding: a row can differ in its
 * last bit (partly masked tiles with keep bits take the fast softmax). */
typedef struct fj_block_mask_options {
  size_t struct_size;  /* sizeof(fj_block_mask_options) */
  /* Non-zero: mask_mod does not depend on b (it is called with b = 0), so one mask
   * serves every sequence. Not with cu_seqlens (lengths differ per sequence). */
  int32_t shared_across_batch;
  /* Non-zero: mask_mod does not depend on h (it is called with h = 0). */
  int32_t shared_across_heads;
} fj_block_mask_options;

/* Zeroes `options` and sets its struct_size: a mask per sequence and per head. */
FJ_API void fj_block_mask_options_init(fj_block_mask_options *options);

/* Builds a block mask for fj_forward(kernel, args) calls (and, on a kernel got with
 * desc.backward, for the fj_backward calls of the same shape: see fj_backward_args.
 * block_mask, 0.10): args as fj_forward takes them
 * (checked the same way; the tensors' contents are not read, but mod_args, cu_seqlens
 * and, with ALiBi, alibi_slopes are read on the device as the kernel reads them, and
 * must hold what the calls will). Requires desc.mask_mod. options NULL: per sequence and
 * per head. Allocates the mask in device memory: batch x heads x ceil(seqlen_q /
 * block_m) lists of up to ceil(seqlen_k / block_n) entries, 8 bytes each (fewer when
 * shared), and block_m x block_n bits for each partly masked tile (a quarter more for
 * updates; at most 256 MiB of them, tiles beyond call mask_mod); with the backward
 * pass, its step lists and, for bwd_wgmma, the bits of its partly masked steps alike.
 * Builds it on `stream` twice, reading the count of partly masked tiles (and steps) back
 * in between, so it synchronises `stream` (not capturable in a CUDA graph;
 * fj_block_mask_update is). The mask is for
 * the variant fj_forward picks for these arguments, and fj_forward refuses it for
 * arguments of another shape (batch, seqlen_q, seqlen_k, cu_seqlens or not) or another
 * variant. The kernel cannot be released while it has masks. */
FJ_API fj_status fj_block_mask_create(fj_kernel kernel, const fj_forward_args *args,
                                      const fj_block_mask_options *options, void *stream,
                                      fj_block_mask *mask);

/* Rebuilds `mask` in place on `stream` for new contents of what mask_mod reads (args of
 * the shape it was created for): no allocation and no synchronisation, so it may be
 * captured in a CUDA graph. Partly masked tiles beyond the bits allocated at creation
 * call mask_mod (slower). */
FJ_API fj_status fj_block_mask_update(fj_block_mask mask, const fj_forward_args *args,
                                      void *stream);

/* Frees a block mask (after the work queued on it: the free synchronises the device).
 * Destroying one twice is detected where possible, as for kernels. */
FJ_API fj_status fj_block_mask_destroy(fj_block_mask mask);

/* ---- Backward pass ----------------------------------------------------------------
 *
 * Gradients of o = softmax(q k^T * scale [causal mask]) v with respect to q, k and v,
 * given the gradient of o (dout), with the description's features (a window, softcap,
 * ALiBi, a mask_mod: the scores and masks the forward used; the slopes get no gradient). The probabilities are recomputed from q, k and the
 * forward's log-sum-exp, so no N x N matrix is ever stored. With GQA/MQA, dk and dv
 * of a key/value head are summed over the query heads that share it.
 *
 * Strides, alignment and sizes follow fj_forward_args (16-byte aligned tensors, strides
 * in elements, multiples of 8, last dimension contiguous). dq, dk and dv are written
 * in full (rows no query attends to get zeros) and must not overlap each other or any
 * input (not checked). */
typedef struct fj_backward_args {
  size_t struct_size;  /* sizeof(fj_backward_args) */
  /* Inputs: the forward's q, k, v, its output o and log-sum-exp lse (as fj_forward
   * wrote them; lse is required), and dout, the gradient of o (shaped like o). */
  const void *q;
  const void *k;
  const void *v;
  const void *o;
  const void *dout;
  const float *lse;
  /* Outputs (written): dq shaped like q, dk like k, dv like v. */
  void *dq;
  void *dk;
  void *dv;
  int32_t batch;     /* >= 0; 0 is a valid no-op */
  int32_t seqlen_q;  /* >= 0; with cu_seqlens: the longest query sequence */
  int32_t seqlen_k;  /* >= 0; with cu_seqlens: the longest key sequence */
  int64_t q_batch_stride, q_seq_stride, q_head_stride;
  int64_t k_batch_stride, k_seq_stride, k_head_stride;
  int64_t v_batch_stride, v_seq_stride, v_head_stride;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
  int64_t dout_batch_stride, dout_seq_stride, dout_head_stride;
  int64_t dq_batch_stride, dq_seq_stride, dq_head_stride;
  int64_t dk_batch_stride, dk_seq_stride, dk_head_stride;
  int64_t dv_batch_stride, dv_seq_stride, dv_head_stride;
  /* Variable-length batches, as in fj_forward_args (both or neither). total_q is
   * required with them (lse's row stride); total_k may be 0 when not known. */
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  int64_t total_q;
  int64_t total_k;
  /* Non-zero: bitwise-identical gradients from run to run (dq by a pass of its own
   * instead of fp32 atomics; somewhat slower). */
  int32_t deterministic;
  /* Scratch device memory of at least fj_backward_workspace_size() bytes, 16-byte
   * aligned, not used by anything else while the call runs on `stream`. Its contents
   * need not be initialised and are undefined afterwards. */
  void *workspace;
  size_t workspace_bytes;
  /* ---- Features (added in 0.9: a struct_size that ends before them reads them as
   * NULL / 0), as in fj_forward_args and the same as the forward call was given. */
  /* With desc.alibi (required then): the slopes, laid out as fj_forward_args's. */
  const float *alibi_slopes;
  int64_t alibi_batch_stride;
  /* What the description's mask_mod sees as `args`. */
  fj_mod_args mod_args;
  /* Optional (NULL: none; added in 0.10, a struct_size that ends before it reads as
   * NULL): the block mask the forward call used (fj_block_mask_create on this kernel, for
   * these arguments' shape). On a kernel got with desc.backward the mask also holds the
   * backward pass's block sparsity, at its own tiles: key blocks skip the query blocks
   * mask_mod drops everywhere and run those it keeps everywhere without calling it. The
   * gradients are the same with or without it. The deterministic mode's dq pass does not
   * read it (every key block of a query block, as without a mask). */
  fj_block_mask block_mask;
} fj_backward_args;

/* Zeroes `args` and sets its struct_size. */
FJ_API void fj_backward_args_init(fj_backward_args *args);

/* Checks backward arguments against a description without a device (what fj_backward
 * checks before it launches, except the workspace size): FJ_SUCCESS, or the status and
 * message fj_backward would give. */
FJ_API fj_status fj_validate_backward_args(const fj_attention_desc *desc,
                                           const fj_backward_args *args);

/* The workspace fj_backward needs for `args` (only its sizes, cu_seqlens presence,
 * total_q and deterministic are read; pointers may be NULL): *bytes, a multiple of 256.
 * The kernel must have been obtained with desc.backward set. */
FJ_API fj_status fj_backward_workspace_size(fj_kernel kernel, const fj_backward_args *args,
                                            size_t *bytes);

/* Writes dq, dk and dv. Launches on `stream` and returns without waiting; like
 * fj_forward it never compiles, tunes, allocates or synchronizes (graph-capturable).
 * The kernel must have been obtained with desc.backward set (FJ_ERROR_INVALID_VALUE
 * otherwise); the variant is picked by shape bucket as for fj_forward. */
FJ_API fj_status fj_backward(fj_kernel kernel, const fj_backward_args *args, void *stream);

/* ---- Decode over a KV cache (added in 0.4) ----------------------------------------
 *
 * Attention of seqlen_q new query rows per sequence (a decode step: 1, or a few with
 * speculative decoding) against each sequence's cached keys and values, on a handle got
 * with desc.decode set. Sequence b has cache_seqlens[b] keys (its new tokens included:
 * append them first, fj_kv_append). The cache is either
 *   - contiguous (block_table NULL): k_cache [batch, seqlen_k, num_heads_kv, head_dim],
 *     element (b, j, h, d) at k_cache + b * k_page_stride + j * k_row_stride +
 *     h * k_head_stride + d (k_page_stride is the batch stride); or
 *   - paged (the vLLM / FlashAttention layout): a pool of num_pages pages of page_size
 *     tokens, k_cache [num_pages, page_size, num_heads_kv, head_dim] through the same
 *     strides; token j of sequence b lives in page block_table[b * table_stride +
 *     j / page_size], at row j % page_size of it.
 * v_cache likewise with head_dim_v. With desc.causal the mask is bottom-right aligned per
 * sequence: query i of sequence b sees keys j <= i + cache_seqlens[b] - seqlen_q; a row
 * that sees no key gets o = 0 and lse = -inf. GQA / MQA as for fj_forward. A window
 * (0.13) is aligned the same way: query i sees keys i + diag - window_left .. i + diag +
 * window_right, diag = cache_seqlens[b] - seqlen_q, and a call reads only the keys its
 * rows' windows hold; softcap and ALiBi (its distance counted the same way, its slopes in
 * alibi_slopes) apply as in the forward.
 *
 * Long caches are cut into num_splits ranges of keys, each computed by its own CTAs, then
 * merged (split-KV): the splits' partial outputs go to a workspace the caller provides
 * (fj_decode_workspace_size; none with one split).
 *
 * Strides are in elements, the last dimension contiguous, q / k_cache / v_cache / o
 * 16-byte aligned and every stride a multiple of 8, as for fj_forward_args. */
typedef struct fj_decode_args {
  size_t struct_size;  /* sizeof(fj_decode_args) */
  /* Device pointers. q: [batch, seqlen_q, num_heads_q, head_dim]; k_cache, v_cache: the
   * cache as above; o (written): [batch, seqlen_q, num_heads_q, head_dim_v]. NULL only
   * when nothing is read from them (no work; no keys for the caches). */
  const void *q;
  const void *k_cache;
  const void *v_cache;
  void *o;
  /* Optional (NULL: not written): log-sum-exp of each query row (natural log, fp32,
   * 4-byte aligned), [batch, num_heads_q, seqlen_q] contiguous. */
  float *lse;
  /* NULL: a contiguous cache. Else int32 [batch, table_stride] in device memory, 4-byte
   * aligned: the pages of each sequence, in token order. Entries past a sequence's last
   * page are not read; the others must be pages of the pool (< num_pages; the caller's
   * promise, not checked on the device). */
  const int32_t *block_table;
  /* NULL: every sequence has seqlen_k keys. Else int32 [batch] in device memory, 4-byte
   * aligned: the keys of each sequence, each at most seqlen_k (the caller's promise). */
  const int32_t *cache_seqlens;
  int32_t batch;     /* >= 0; 0 is a valid no-op */
  int32_t seqlen_q;  /* new query rows per sequence, >= 0 (0: no-op) */
  int32_t seqlen_k;  /* the longest cache length (the bound of cache_seqlens); for a
                        contiguous cache its row count. >= 0 */
  /* Paged cache only (ignored when block_table is NULL): tokens per page (>= 1, any
   * size; multiples of 16 are the usual ones), pages in the pool (>= 1), and entries
   * per block_table row (the most pages a sequence may have: >= ceil(seqlen_k /
   * page_size)). */
  int32_t page_size;
  int32_t num_pages;
  int32_t table_stride;
  int64_t q_batch_stride, q_seq_stride, q_head_stride;
  int64_t k_page_stride, k_row_stride, k_head_stride;  /* page: the batch when contiguous */
  int64_t v_page_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
  /* 0: automatic (enough CTAs to fill the device, at least a few key tiles each); else
   * 1 to 128, capped at the number of key tiles. */
  int32_t num_splits;
  /* Scratch device memory of at least fj_decode_workspace_size() bytes (may be NULL
   * when that is 0), 16-byte aligned, not used by anything else while the call runs on
   * `stream`. Need not be initialised; undefined afterwards. */
  void *workspace;
  size_t workspace_bytes;
  /* An FP8 cache (desc.kv_cache_dtype FJ_DTYPE_E4M3; added in 0.12, a struct_size that
   * ends before them reads them as NULL and 0): the dequantization factors, device fp32
   * arrays, 4-byte aligned. Key d of token j, KV head h of sequence b is its stored byte's
   * value times k_descale[b * descale_batch_stride + h * descale_head_stride], and v's
   * likewise by v_descale; both strides 0 for one factor per tensor (strides >= 0).
   * NULL: a factor of 1. Factors must be finite and > 0 (not checked on the device).
   * Ignored with a 16-bit cache. A stored byte of NaN (0x7f, 0xff) may read as -+480,
   * not NaN (docs/API.md): fj_kv_append never writes one from a finite value. */
  const float *k_descale;
  const float *v_descale;
  int64_t descale_batch_stride;
  int64_t descale_head_stride;
  /* With desc.alibi (required then; ignored otherwise; added in 0.13, a struct_size that
   * ends before them reads them as NULL and 0): the slopes, laid out as
   * fj_forward_args's: the slope of sequence b, query head h is
   * alibi_slopes[b * alibi_batch_stride + h]. */
  const float *alibi_slopes;
  int64_t alibi_batch_stride;
  /* What the description's score_mod / mask_mod see as `args` (ignored without them;
   * added in 0.14, a struct_size that ends before it reads it as zeros). No block mask in
   * decode: mask_mod is called for every key a row may see. */
  fj_mod_args mod_args;
} fj_decode_args;

/* Zeroes `args` and sets its struct_size. */
FJ_API void fj_decode_args_init(fj_decode_args *args);

/* Checks decode arguments against a description without a device (what fj_decode
 * checks before it launches, except the workspace size): FJ_SUCCESS, or the status and
 * message fj_decode would give. */
FJ_API fj_status fj_validate_decode_args(const fj_attention_desc *desc,
                                         const fj_decode_args *args);

/* The workspace fj_decode needs for `args` with the split count it will use (only the
 * sizes and num_splits are read; pointers may be NULL): *bytes, a multiple of 256; 0
 * when the call runs as one split. The kernel must have been obtained with desc.decode
 * set. */
FJ_API fj_status fj_decode_workspace_size(fj_kernel kernel, const fj_decode_args *args,
                                          size_t *bytes);

/* Writes o (and lse). Launches on `stream` and returns without waiting; like fj_forward
 * it never compiles, tunes, allocates or synchronizes (graph-capturable). The kernel
 * must have been obtained with desc.decode set (FJ_ERROR_INVALID_VALUE otherwise); the
 * variant is picked by shape bucket of (seqlen_q, seqlen_k, batch * num_heads_q). */
FJ_API fj_status fj_decode(fj_kernel kernel, const fj_decode_args *args, void *stream);

/* Appending new keys and values to the cache: new_len rows of each sequence, k_new
 * [batch, new_len, num_heads_kv, head_dim] and v_new [batch, new_len, num_heads_kv,
 * head_dim_v], written to cache tokens cache_seqlens[b] - new_len .. cache_seqlens[b] - 1
 * (the lengths count the new rows already: update them first). The cache's fields mean
 * what they mean in fj_decode_args; its pages for the new tokens must be in block_table. */
typedef struct fj_kv_append_args {
  size_t struct_size;  /* sizeof(fj_kv_append_args) */
  void *k_cache;       /* written */
  void *v_cache;
  const int32_t *block_table;    /* NULL: contiguous */
  const int32_t *cache_seqlens;  /* NULL: every sequence has seqlen_k keys */
  int32_t batch;       /* >= 0; 0 is a valid no-op */
  int32_t seqlen_k;    /* the longest cache length, new rows included; >= new_len */
  int32_t page_size;   /* paged only, as in fj_decode_args */
  int32_t num_pages;
  int32_t table_stride;
  int64_t k_page_stride, k_row_stride, k_head_stride;
  int64_t v_page_stride, v_row_stride, v_head_stride;
  const void *k_new;   /* device pointers, 16-byte aligned; NULL only with no work */
  const void *v_new;
  int32_t new_len;     /* rows per sequence, >= 0 (0: no-op) */
  int64_t k_new_batch_stride, k_new_seq_stride, k_new_head_stride;
  int64_t v_new_batch_stride, v_new_seq_stride, v_new_head_stride;
  /* An FP8 cache (desc.kv_cache_dtype FJ_DTYPE_E4M3; added in 0.12, a struct_size that
   * ends before them reads them as NULL and 0): the factors of fj_decode_args, the same
   * arrays fj_decode will be given. Each new value x of (b, h) is stored as x divided by
   * its factor, rounded to the nearest e4m3 value (ties to even) and saturated to +-448.
   * Ignored with a 16-bit cache. */
  const float *k_descale;
  const float *v_descale;
  int64_t descale_batch_stride;
  int64_t descale_head_stride;
} fj_kv_append_args;

/* Zeroes `args` and sets its struct_size. */
FJ_API void fj_kv_append_args_init(fj_kv_append_args *args);

/* Checks append arguments against a description without a device: FJ_SUCCESS, or the
 * status and message fj_kv_append would give. */
FJ_API fj_status fj_validate_kv_append_args(const fj_attention_desc *desc,
                                            const fj_kv_append_args *args);

/* Writes k_new and v_new into the cache. Asynchronous on `stream`, graph-capturable, no
 * allocation; the kernel must have been obtained with desc.decode set. */
FJ_API fj_status fj_kv_append(fj_kernel kernel, const fj_kv_append_args *args, void *stream);

/* ---- What a kernel is ---------------------------------------------------------- */

/* A kernel holds one or more variants, each tuned (or chosen) for one shape bucket.
 * The struct and the function share a name, like POSIX's `struct stat` and stat():
 * declare it as `struct fj_kernel_info info;`. */
struct fj_kernel_info {
  size_t struct_size;       /* set by the caller: sizeof(struct fj_kernel_info) */
  /* Strings owned by the kernel, valid until it is released. */
  const char *family;       /* the primary family: "fwd_wgmma" or "fwd_mma" */
  const char *spec_key;     /* "fwd_wgmma.bf16.d128.dv128.causal.sm90a", then the
                               features if any (".win256_0.cap30.alibi.score-<hash>") */
  const char *device_key;   /* the tuning cache's device key */
  /* >= 1: the primary family's variants, then the fallback family's (fj_kernel_get;
   * their binary_key_text names the family, their note says "fallback"), then the
   * backward pass's (see num_backward_variants), then the decode kernels' (see
   * num_decode_variants). */
  int32_t num_variants;
  int32_t primary_variant;  /* index of the variant for the description's hinted bucket */
  /* Variants that fj_kernel_get compiled or tuned, fallback included (0: everything
   * came from the caches). */
  int32_t compiled_now;
  /* The primary variant, for convenience (fj_kernel_variant_info has them all). */
  int32_t origin;           /* an fj_origin */
  int32_t block_m, block_n, warps, stages;
  int32_t registers;        /* per thread */
  int32_t shared_bytes;     /* dynamic shared memory per block */
  double tuned_us;          /* median time when it was tuned; 0 when never timed */
  double get_ms;            /* how long fj_kernel_get took for this handle */
  /* The backward pass (desc.backward): its family ("bwd_wgmma" or "bwd_mma"; "" when
   * the kernel has none) and how many variants it has; they follow the forward
   * families' variants (fj_kernel_variant_info), before the decode kernels'.
   * num_variants counts them too.
   * (Added in 0.2: a struct_size that ends before them is accepted.) */
  const char *backward_family;
  int32_t num_backward_variants;
  /* The decode kernels (desc.decode): their family ("dec_mma"; "" when the kernel has
   * none) and how many variants they have: the last num_decode_variants of the
   * kernel's variants. num_variants counts them too. (Added in 0.4: a struct_size that
   * ends before them is accepted, and they are not written.) */
  const char *decode_family;
  int32_t num_decode_variants;
  /* Forward launches since fj_kernel_get (fj_forward calls that launched), and those of
   * them whose shape bucket had no variant tuned for it on this device (they ran on the
   * nearest bucket's tile, or an untuned one): the gap an offline sweep
   * (`flashjit tune --seqlens ...`) or FJ_TUNE_LENGTHS_LADDER closes. (Added in 0.5: a
   * struct_size that ends before them is accepted, and they are not written.) */
  int64_t forward_calls;
  int64_t forward_calls_untuned;
  /* The bucket of the latest such call ("" when none), e.g. "q32768.k32768.bh16". */
  char last_untuned_bucket[40];
};

FJ_API fj_status fj_kernel_info(fj_kernel kernel, struct fj_kernel_info *info);

typedef struct fj_variant_info {
  size_t struct_size;       /* set by the caller: sizeof(fj_variant_info) */
  /* Strings owned by the kernel, valid until it is released. */
  const char *bucket;       /* "q1024.k1024.bh64": the shape bucket it was tuned for.
                               A decode variant's counts the query rows packed per KV
                               head (seqlen_q x num_heads_q / num_heads_kv), the keys,
                               and batch x num_heads_kv */
  const char *tile;         /* "bm128.bn64.w8.s2" */
  const char *binary_key;   /* the cache's binary key (sha256 hex) */
  const char *binary_key_text;  /* the same, readable: "spec/tile" */
  const char *tuning_key;   /* the cache's tuning key; "" when untuned */
  const char *note;         /* why this variant was chosen, e.g. "heuristic default" */
  int32_t bucket_seqlen_q, bucket_seqlen_k, bucket_batch_heads;
  int32_t origin;           /* an fj_origin */
  int32_t block_m, block_n, warps, stages;
  int32_t registers, shared_bytes;
  double tuned_us;          /* 0 when never timed */
  /* Launches this variant served since fj_kernel_get (fj_forward, fj_backward,
   * fj_decode / fj_kv_append by its kind). (Added in 0.5: a struct_size that ends
   * before it is accepted, and it is not written.) */
  int64_t calls;
  /* A decode variant: the split count tuned with its tile for its bucket; 0: the
   * heuristic decides per call. The calls that leave fj_decode_args.num_splits at 0
   * keep as many CTAs in flight as that tune did: this count at the bucket's size, more
   * splits for fewer (sequence, KV head) pairs, fewer for more, and fewer when a call's
   * keys are too few. 0 for the other variants. (Added in 0.8: a struct_size that ends
   * before it is accepted, and it is not written.) */
  int32_t num_splits;
} fj_variant_info;

/* Variant `index` in [0, num_variants). */
FJ_API fj_status fj_kernel_variant_info(fj_kernel kernel, int32_t index,
                                        fj_variant_info *info);

/* The complete CUDA source of variant `index` (what NVRTC compiled), so a user can see
 * exactly which kernel runs. *source is NUL-terminated and owned by the kernel (valid
 * until it is released); `length` (may be NULL) receives strlen(*source). */
FJ_API fj_status fj_kernel_source(fj_kernel kernel, int32_t index, const char **source,
                                  size_t *length);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHJIT_FLASHJIT_H */
