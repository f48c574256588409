/*
 * flashjit example: one causal GQA attention forward pass through the C API.
 *
 *   attention [--source]
 *
 * Creates a context on device 0, gets a kernel for bf16 / head dim 128 / 16 query
 * heads over 4 key-value heads (from the cache when it has one, else tuned or
 * compiled as $FLASHJIT_TUNE says), prints what the kernel is, runs it on random
 * inputs in the FlashAttention layout [batch, seq, heads, dim] and checks a few rows
 * against a plain C reference. --source prints the CUDA source that runs.
 *
 * Memory is handled with the CUDA runtime (cudaMalloc, cudaMemcpy); flashjit only
 * needs device pointers and a stream. Build it with examples/CMakeLists.txt against
 * an installed flashjit (find_package(flashjit)).
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <flashjit/flashjit.h>

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FJ_CHECK(call)                                                                  \
  do {                                                                                  \
    fj_status status_ = (call);                                                         \
    if (status_ != FJ_SUCCESS) {                                                        \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, fj_status_string(status_),       \
              fj_last_error_message());                                                 \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

#define CUDA_CHECK(call)                                                                \
  do {                                                                                  \
    cudaError_t error_ = (call);                                                        \
    if (error_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(error_));           \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

enum { BATCH = 2, SEQ_Q = 1000, SEQ_K = 1000, HEADS_Q = 16, HEADS_KV = 4, DIM = 128 };

/* bf16 <-> float (round to nearest even), so the example needs no CUDA headers
 * beyond the runtime API. */
static uint16_t to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static float from_bf16(uint16_t value) {
  uint32_t bits = (uint32_t)value << 16;
  float result;
  memcpy(&result, &bits, sizeof(result));
  return result;
}

/* Uniform in [-1, 1]. */
static float uniform(void) { return (float)((double)rand() / RAND_MAX * 2 - 1); }

static void log_message(int level, const char *message, void *user_data) {
  (void)user_data;
  fprintf(stderr, "[flashjit %s] %s\n",
          level == FJ_LOG_ERROR ? "error" : level == FJ_LOG_WARNING ? "warning" : "info",
          message);
}

static const char *origin_name(int origin) {
  switch (origin) {
  case FJ_ORIGIN_SHIPPED_CACHE: return "shipped cache";
  case FJ_ORIGIN_USER_CACHE: return "user cache";
  case FJ_ORIGIN_COMPILED_NOW: return "compiled now";
  case FJ_ORIGIN_TUNED_NOW: return "tuned now";
  case FJ_ORIGIN_SYSTEM_CACHE: return "system cache";
  }
  return "?";
}

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Element (b, s, h, d) of a packed [batch, seq, heads, dim] tensor. */
static size_t at(int b, int s, int h, int d, int seq, int heads) {
  return (((size_t)b * seq + s) * heads + h) * DIM + d;
}

/* One output row by the textbook formula (fp32), causal aligned bottom-right. */
static void reference_row(const uint16_t *q, const uint16_t *k, const uint16_t *v, int b,
                          int h, int i, float scale, float *out) {
  int hkv = h / (HEADS_Q / HEADS_KV), last = i + SEQ_K - SEQ_Q, j, d;
  double max = -INFINITY, sum = 0, acc[DIM] = {0};
  double *scores = malloc(sizeof(double) * SEQ_K);
  for (j = 0; j <= last && j < SEQ_K; ++j) {
    double dot = 0;
    for (d = 0; d < DIM; ++d)
      dot += (double)from_bf16(q[at(b, i, h, d, SEQ_Q, HEADS_Q)]) *
             from_bf16(k[at(b, j, hkv, d, SEQ_K, HEADS_KV)]);
    scores[j] = dot * scale;
    if (scores[j] > max)
      max = scores[j];
  }
  for (j = 0; j <= last && j < SEQ_K; ++j) {
    double p = exp(scores[j] - max);
    sum += p;
    for (d = 0; d < DIM; ++d)
      acc[d] += p * from_bf16(v[at(b, j, hkv, d, SEQ_K, HEADS_KV)]);
  }
  for (d = 0; d < DIM; ++d)
    out[d] = sum > 0 ? (float)(acc[d] / sum) : 0.0f;
  free(scores);
}

int main(int argc, char **argv) {
  int print_source = argc > 1 && strcmp(argv[1], "--source") == 0;
  size_t nq = (size_t)BATCH * SEQ_Q * HEADS_Q * DIM, nk = (size_t)BATCH * SEQ_K * HEADS_KV * DIM;
  uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2), *ho = malloc(nq * 2);
  void *dq, *dk, *dv, *dout;
  cudaStream_t stream;
  size_t i;
  int v, row;
  double max_error = 0;

  /* 1. A context: device 0, the default caches, $FLASHJIT_TUNE or tuning on a miss. */
  fj_context_options options;
  fj_context ctx;
  struct fj_context_info ctx_info;
  fj_context_options_init(&options);
  options.log_callback = log_message;
  FJ_CHECK(fj_context_create(&options, &ctx));
  ctx_info.struct_size = sizeof(ctx_info);
  FJ_CHECK(fj_context_info(ctx, &ctx_info));
  printf("flashjit %s on %s (%s), cache %s\n", fj_version(), ctx_info.device_name,
         ctx_info.target, ctx_info.user_cache_path[0] ? ctx_info.user_cache_path : "(memory)");

  /* 2. A kernel for what this model needs; the hints pick the bucket tuned first. */
  fj_attention_desc desc;
  fj_kernel kernel;
  struct fj_kernel_info info;
  double get_start, get_seconds;
  fj_attention_desc_init(&desc);
  desc.dtype = FJ_DTYPE_BF16;
  desc.head_dim = DIM;
  desc.causal = 1;
  desc.num_heads_q = HEADS_Q;
  desc.num_heads_kv = HEADS_KV;
  desc.seqlen_q_hint = SEQ_Q;
  desc.seqlen_k_hint = SEQ_K;
  desc.batch_hint = BATCH;
  get_start = seconds_now();
  FJ_CHECK(fj_kernel_get(ctx, &desc, &kernel));
  get_seconds = seconds_now() - get_start;
  info.struct_size = sizeof(info);
  FJ_CHECK(fj_kernel_info(kernel, &info));
  FJ_CHECK(fj_context_info(ctx, &ctx_info));
  printf("kernel %s: %d variant(s), fj_kernel_get took %.2f ms, %d compiled now, "
         "%d NVRTC compilations in this context\n",
         info.spec_key, info.num_variants, get_seconds * 1e3, info.compiled_now,
         ctx_info.compilations);
  for (v = 0; v < info.num_variants; ++v) {
    fj_variant_info variant;
    variant.struct_size = sizeof(variant);
    FJ_CHECK(fj_kernel_variant_info(kernel, v, &variant));
    printf("  [%d] bucket %-20s tile %-18s %3d regs %6d B smem  %-13s %8.1f us  %s\n", v,
           variant.bucket, variant.tile, variant.registers, variant.shared_bytes,
           origin_name(variant.origin), variant.tuned_us, variant.note);
  }
  if (print_source) {
    const char *source;
    FJ_CHECK(fj_kernel_source(kernel, info.primary_variant, &source, NULL));
    printf("%s\n", source);
  }

  /* 3. Inputs on the device. */
  srand(1);
  for (i = 0; i < nq; ++i)
    hq[i] = to_bf16(uniform());
  for (i = 0; i < nk; ++i) {
    hk[i] = to_bf16(uniform());
    hv[i] = to_bf16(uniform());
  }
  CUDA_CHECK(cudaMalloc(&dq, nq * 2));
  CUDA_CHECK(cudaMalloc(&dk, nk * 2));
  CUDA_CHECK(cudaMalloc(&dv, nk * 2));
  CUDA_CHECK(cudaMalloc(&dout, nq * 2));
  CUDA_CHECK(cudaMemcpy(dq, hq, nq * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dk, hk, nk * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dv, hv, nk * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaStreamCreate(&stream));

  /* 4. The launch: pointers, sizes and strides in elements. */
  fj_forward_args args;
  fj_forward_args_init(&args);
  args.q = dq, args.k = dk, args.v = dv, args.o = dout;
  args.batch = BATCH, args.seqlen_q = SEQ_Q, args.seqlen_k = SEQ_K;
  args.q_head_stride = DIM, args.q_seq_stride = HEADS_Q * DIM;
  args.q_batch_stride = (int64_t)SEQ_Q * HEADS_Q * DIM;
  args.k_head_stride = DIM, args.k_seq_stride = HEADS_KV * DIM;
  args.k_batch_stride = (int64_t)SEQ_K * HEADS_KV * DIM;
  args.v_head_stride = args.k_head_stride, args.v_seq_stride = args.k_seq_stride;
  args.v_batch_stride = args.k_batch_stride;
  args.o_head_stride = args.q_head_stride, args.o_seq_stride = args.q_seq_stride;
  args.o_batch_stride = args.q_batch_stride;
  FJ_CHECK(fj_forward(kernel, &args, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(ho, dout, nq * 2, cudaMemcpyDeviceToHost));

  /* 5. A few rows against the reference. */
  for (row = 0; row < 6; ++row) {
    int b = row % BATCH, h = row * 5 % HEADS_Q, q = row * 397 % SEQ_Q, d;
    float expected[DIM];
    reference_row(hq, hk, hv, b, h, q, 1.0f / sqrtf((float)DIM), expected);
    for (d = 0; d < DIM; ++d) {
      double error = fabs(from_bf16(ho[at(b, q, h, d, SEQ_Q, HEADS_Q)]) - expected[d]);
      if (!(error <= max_error))  /* NaN counts as the largest error */
        max_error = isnan(error) ? INFINITY : error;
    }
  }
  printf("max |error| on 6 rows vs the C reference: %.3g (%s)\n", max_error,
         max_error < 2e-2 ? "ok" : "TOO LARGE");

  FJ_CHECK(fj_kernel_release(kernel));
  FJ_CHECK(fj_context_destroy(ctx));
  cudaStreamDestroy(stream);
  cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
  free(hq), free(hk), free(hv), free(ho);
  return max_error < 2e-2 ? 0 : 1;
}
