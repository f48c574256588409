// fj_decode's and fj_kv_append's arguments: the KV cache (contiguous, or paged through a
// block table), the queries and the new rows, checked field by field before anything is
// launched, and the kernels' FjDecodeParams filled from them.
#include "api/validate.h"
#include "api/validate_tensor.h"

#include "support/error.h"

#include <cstdint>
#include <cstring>

namespace flashjit::api {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The cache fields fj_decode_args and fj_kv_append_args share.
struct CacheFields {
  const void *k, *v;
  const int32_t *blockTable, *cacheSeqlens;
  int32_t batch, seqlenK, pageSize, numPages, tableStride;
  int64_t kPageStride, kRowStride, kHeadStride;
  int64_t vPageStride, vRowStride, vHeadStride;
  const float *kDescale, *vDescale;  // an FP8 cache's factors
  int64_t descaleBatchStride, descaleHeadStride;
};

template <typename Args> CacheFields cacheFields(const Args &a) {
  return {a.k_cache,       a.v_cache,       a.block_table,   a.cache_seqlens,
          a.batch,         a.seqlen_k,      a.page_size,     a.num_pages,
          a.table_stride,  a.k_page_stride, a.k_row_stride,  a.k_head_stride,
          a.v_page_stride, a.v_row_stride,  a.v_head_stride, a.k_descale,
          a.v_descale,     a.descale_batch_stride,           a.descale_head_stride};
}

// The block table's shape and the pointers' alignment: scalars and host-side facts,
// checked even for a call with nothing to do. With a contiguous cache (no block table)
// page_size, num_pages and table_stride are ignored.
llvm::Error checkCacheLayout(const CacheFields &c) {
  if (llvm::Error error = checkAligned("cache_seqlens", c.cacheSeqlens, 4))
    return error;
  if (!c.blockTable)
    return llvm::Error::success();
  if (llvm::Error error = checkAligned("block_table", c.blockTable, 4))
    return error;
  if (c.pageSize < 1)
    return makeError(ErrorCode::InvalidValue,
                     "args->page_size is {0}: a paged cache (block_table set) needs pages "
                     "of >= 1 tokens (any size; multiples of 16 are the usual ones)",
                     c.pageSize);
  if (c.numPages < 1)
    return makeError(ErrorCode::InvalidValue,
                     "args->num_pages is {0}: a paged cache (block_table set) needs a pool "
                     "of >= 1 pages",
                     c.numPages);
  const int64_t pagesPerSequence = ceilDiv(c.seqlenK, c.pageSize);
  if (c.tableStride < pagesPerSequence)
    return makeError(ErrorCode::InvalidValue,
                     "args->table_stride is {0}: each block_table row must hold the pages of "
                     "the longest sequence, ceil(seqlen_k / page_size) = ceil({1} / {2}) = "
                     "{3} entries",
                     c.tableStride, c.seqlenK, c.pageSize, pagesPerSequence);
  return llvm::Error::success();
}

// An FP8 cache: strides of whole 16-byte chunks (its elements are bytes, and the kernels
// copy 16 bytes at a time), and its factors' pointers and strides.
llvm::Error checkFp8Cache(const CacheFields &c) {
  for (auto [field, stride] :
       {std::pair{"k_page_stride", c.kPageStride}, std::pair{"k_row_stride", c.kRowStride},
        std::pair{"k_head_stride", c.kHeadStride}, std::pair{"v_page_stride", c.vPageStride},
        std::pair{"v_row_stride", c.vRowStride}, std::pair{"v_head_stride", c.vHeadStride}})
    if (stride % 16 != 0)
      return makeError(ErrorCode::InvalidValue,
                       "args->{0} is {1}: an FP8 cache (desc->kv_cache_dtype FJ_DTYPE_E4M3) "
                       "needs strides that are multiples of 16 elements (16 bytes)",
                       field, stride);
  return checkDescaleFactors({{"k_descale", c.kDescale}, {"v_descale", c.vDescale}},
                             c.descaleBatchStride, c.descaleHeadStride);
}

// The caches as the kernels walk them: [pages, page_size] rows when paged, [batch,
// seqlen_k] when contiguous (the page stride then steps over sequences).
llvm::Error checkCacheTensors(const AttentionDesc &desc, const CacheFields &c) {
  const int64_t pages = c.blockTable ? c.numPages : c.batch;
  const int64_t rows = c.blockTable ? c.pageSize : c.seqlenK;
  const Tensor k{"k_cache", c.k,
                 {{"k_page_stride", c.kPageStride, pages},
                  {"k_row_stride", c.kRowStride, rows},
                  {"k_head_stride", c.kHeadStride, desc.headsKV}},
                 desc.headDim};
  const Tensor v{"v_cache", c.v,
                 {{"v_page_stride", c.vPageStride, pages},
                  {"v_row_stride", c.vRowStride, rows},
                  {"v_head_stride", c.vHeadStride, desc.headsKV}},
                 desc.headDimV};
  if (llvm::Error error = checkTensor(k))
    return error;
  if (llvm::Error error = checkTensor(v))
    return error;
  if (desc.fp8Cache())
    return checkFp8Cache(c);
  return llvm::Error::success();
}

void fillCache(FjDecodeParams &p, const CacheFields &c) {
  p.k = c.k;
  p.v = c.v;
  p.block_table = c.blockTable;
  p.cache_seqlens = c.cacheSeqlens;
  p.k_page_stride = c.kPageStride, p.k_row_stride = c.kRowStride;
  p.k_head_stride = c.kHeadStride;
  p.v_page_stride = c.vPageStride, p.v_row_stride = c.vRowStride;
  p.v_head_stride = c.vHeadStride;
  p.page_size = c.blockTable ? c.pageSize : 0;
  p.table_stride = c.blockTable ? c.tableStride : 0;
  p.k_descale = c.kDescale;
  p.v_descale = c.vDescale;
  p.descale_batch_stride = c.descaleBatchStride;
  p.descale_head_stride = c.descaleHeadStride;
}

} // namespace

llvm::Error checkDecodeSizes(const AttentionDesc &desc, const fj_decode_args &a) {
  if (llvm::Error error = checkSize("batch", a.batch, kMaxGridYZ, "a CUDA grid dimension"))
    return error;
  if (llvm::Error error = checkSize("seqlen_q", a.seqlen_q, kMaxSeqlen, "2^30"))
    return error;
  if (llvm::Error error = checkSize("seqlen_k", a.seqlen_k, kMaxSeqlen, "2^30"))
    return error;
  if (a.num_splits < 0 || a.num_splits > kMaxDecodeSplits)
    return makeError(ErrorCode::InvalidValue,
                     "args->num_splits is {0}: expected 0 (automatic) or 1 to {1}",
                     a.num_splits, kMaxDecodeSplits);
  // The split kernel's grid: (splits, row tiles, batch * num_heads_kv).
  const int64_t sequenceHeads = (int64_t)a.batch * desc.headsKV;
  if (sequenceHeads > kMaxGridYZ)
    return makeError(ErrorCode::NotSupported,
                     "args->batch is {0}: batch * num_heads_kv = {1} is more than {2} (a CUDA "
                     "grid dimension)",
                     a.batch, sequenceHeads, kMaxGridYZ);
  const int64_t packedRows = (int64_t)a.seqlen_q * (desc.headsQ / desc.headsKV);
  if (ceilDiv(packedRows, kMinDecodeRowTile) > kMaxGridYZ)
    return makeError(ErrorCode::NotSupported,
                     "args->seqlen_q is {0}: seqlen_q * num_heads_q / num_heads_kv = {1} "
                     "query rows per KV head, at most {2} ({3} row tiles of {4}, a CUDA grid "
                     "dimension)",
                     a.seqlen_q, packedRows, (int64_t)kMaxGridYZ * kMinDecodeRowTile,
                     kMaxGridYZ, kMinDecodeRowTile);
  return llvm::Error::success();
}

llvm::Error checkDecodeArgs(const AttentionDesc &desc, const fj_decode_args *in,
                            FjDecodeParams &params, bool &noWork) {
  fj_decode_args a;
  if (llvm::Error error = copyInStruct(in, "args", "fj_decode_args", a))
    return error;
  if (llvm::Error error = checkDecodeSizes(desc, a))
    return error;
  const CacheFields cache = cacheFields(a);
  if (llvm::Error error = checkCacheLayout(cache))
    return error;

  noWork = a.batch == 0 || a.seqlen_q == 0;
  params = FjDecodeParams{};
  params.batch = a.batch;
  params.heads_q = desc.headsQ;
  params.heads_kv = desc.headsKV;
  params.seqlen_q = a.seqlen_q;
  params.seqlen_k = a.seqlen_k;
  params.scale_log2 = desc.scale * kLog2e;
  params.num_splits = a.num_splits;  // the request, until planned
  if (noWork)
    return llvm::Error::success();  // nothing is read or written: pointers may be NULL

  const Tensor q{"q", a.q,
                 {{"q_batch_stride", a.q_batch_stride, a.batch},
                  {"q_seq_stride", a.q_seq_stride, a.seqlen_q},
                  {"q_head_stride", a.q_head_stride, desc.headsQ}},
                 desc.headDim};
  const Tensor o{"o", a.o,
                 {{"o_batch_stride", a.o_batch_stride, a.batch},
                  {"o_seq_stride", a.o_seq_stride, a.seqlen_q},
                  {"o_head_stride", a.o_head_stride, desc.headsQ}},
                 desc.headDimV};
  if (llvm::Error error = checkTensor(q))
    return error;
  if (llvm::Error error = checkTensor(o))
    return error;
  if (a.seqlen_k > 0)  // no keys: the caches are never read
    if (llvm::Error error = checkCacheTensors(desc, cache))
      return error;
  if (llvm::Error error = checkAligned("lse", a.lse, 4))
    return error;
  if (a.workspace && reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
    return makeError(ErrorCode::InvalidValue, "args->workspace is {0}: not 16-byte aligned",
                     a.workspace);

  if (desc.features.alibi) {  // else the slopes are ignored
    if (llvm::Error error =
            checkAlibiSlopes(a.alibi_slopes, a.alibi_batch_stride, a.batch, desc))
      return error;
    params.alibi_slopes = a.alibi_slopes;
    params.alibi_batch_stride = a.alibi_batch_stride;
  }
  static_assert(sizeof(a.mod_args) == sizeof(params.mod_args), "fj_mod_args is FjModArgs");
  std::memcpy(&params.mod_args, &a.mod_args, sizeof(params.mod_args));  // passed as given

  params.q = a.q;
  params.o = a.o;
  params.lse = a.lse;
  fillCache(params, cache);
  params.q_batch_stride = a.q_batch_stride, params.q_row_stride = a.q_seq_stride;
  params.q_head_stride = a.q_head_stride;
  params.o_batch_stride = a.o_batch_stride, params.o_row_stride = a.o_seq_stride;
  params.o_head_stride = a.o_head_stride;
  // LSE: [batch, heads_q, seqlen_q], contiguous.
  params.lse_batch_stride = (long long)desc.headsQ * a.seqlen_q;
  params.lse_head_stride = a.seqlen_q;
  return llvm::Error::success();
}

llvm::Error checkKvAppendArgs(const AttentionDesc &desc, const fj_kv_append_args *in,
                              FjDecodeParams &params, bool &noWork) {
  fj_kv_append_args a;
  if (llvm::Error error = copyInStruct(in, "args", "fj_kv_append_args", a))
    return error;
  // The append kernel's grid: (new rows, batch).
  if (llvm::Error error = checkSize("batch", a.batch, kMaxGridYZ, "a CUDA grid dimension"))
    return error;
  if (llvm::Error error = checkSize("seqlen_k", a.seqlen_k, kMaxSeqlen, "2^30"))
    return error;
  if (a.new_len < 0)
    return makeError(ErrorCode::InvalidValue, "args->new_len is {0}: must be >= 0",
                     a.new_len);
  if (a.new_len > a.seqlen_k)
    return makeError(ErrorCode::InvalidValue,
                     "args->new_len is {0}, more than args->seqlen_k ({1}): seqlen_k is the "
                     "longest cache length, which counts the new rows already",
                     a.new_len, a.seqlen_k);
  const CacheFields cache = cacheFields(a);
  if (llvm::Error error = checkCacheLayout(cache))
    return error;

  noWork = a.batch == 0 || a.new_len == 0;
  params = FjDecodeParams{};
  params.batch = a.batch;
  params.heads_q = desc.headsQ;
  params.heads_kv = desc.headsKV;
  params.seqlen_k = a.seqlen_k;
  params.scale_log2 = desc.scale * kLog2e;
  params.new_len = a.new_len;
  if (noWork)
    return llvm::Error::success();

  const Tensor kNew{"k_new", a.k_new,
                    {{"k_new_batch_stride", a.k_new_batch_stride, a.batch},
                     {"k_new_seq_stride", a.k_new_seq_stride, a.new_len},
                     {"k_new_head_stride", a.k_new_head_stride, desc.headsKV}},
                    desc.headDim};
  const Tensor vNew{"v_new", a.v_new,
                    {{"v_new_batch_stride", a.v_new_batch_stride, a.batch},
                     {"v_new_seq_stride", a.v_new_seq_stride, a.new_len},
                     {"v_new_head_stride", a.v_new_head_stride, desc.headsKV}},
                    desc.headDimV};
  if (llvm::Error error = checkTensor(kNew))
    return error;
  if (llvm::Error error = checkTensor(vNew))
    return error;
  if (llvm::Error error = checkCacheTensors(desc, cache))  // seqlen_k >= new_len >= 1
    return error;

  fillCache(params, cache);
  params.k_new = a.k_new;
  params.v_new = a.v_new;
  params.k_new_batch_stride = a.k_new_batch_stride, params.k_new_row_stride = a.k_new_seq_stride;
  params.k_new_head_stride = a.k_new_head_stride;
  params.v_new_batch_stride = a.v_new_batch_stride, params.v_new_row_stride = a.v_new_seq_stride;
  params.v_new_head_stride = a.v_new_head_stride;
  return llvm::Error::success();
}

} // namespace flashjit::api
