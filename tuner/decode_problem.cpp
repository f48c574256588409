#include "tuner/decode_problem.h"

#include "support/error.h"
#include "tuner/check_support.h"
#include "tuner/decode_kernel.h"
#include "tuner/half_precision.h"
#include "tuner/measure.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <random>

namespace flashjit::tuner {

int decodeCacheLength(const ForwardShape &shape, int b) {
  return shape.seqlensK.empty() ? shape.seqK : shape.seqlensK[b];
}

float decodeCacheFactor(bool ofV, int b, int h) {
  const int e = ((ofV ? 2 * b + h : b + 2 * h) % 5) - 2;
  return std::ldexp(1.f, e);
}

void quantizeDecodeRows(const ForwardShape &s, generator::DType outDtype, bool ofV, int dim,
                        std::vector<uint16_t> &rows) {
  const size_t rowValues = (size_t)s.headsKV * dim;
  size_t row = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int j = 0; j < decodeCacheLength(s, b); ++j, ++row)
      for (int h = 0; h < s.headsKV; ++h) {
        const float f = decodeCacheFactor(ofV, b, h);
        for (int c = 0; c < dim; ++c) {
          uint16_t &x = rows[row * rowValues + (size_t)h * dim + c];
          x = floatToHalf(outDtype, e4m3ToFloat(floatToE4m3(halfToFloat(outDtype, x) / f)) * f);
        }
      }
}

ForwardShape decodeAsForward(const ForwardShape &shape) {
  ForwardShape f = shape;
  f.layout = Layout::BSHD;
  f.rowPadding = 0;
  f.seqlensQ.assign(shape.batch, shape.seqQ);
  f.seqlensK.clear();
  for (int b = 0; b < shape.batch; ++b)
    f.seqlensK.push_back(decodeCacheLength(shape, b));
  f.seqK = std::max(1, *std::max_element(f.seqlensK.begin(), f.seqlensK.end()));
  f.pageSize = 0;
  f.decodeSplits = 0;
  return f;
}

llvm::Expected<DecodeBuffers> allocateDecodeBuffers(generator::DType dtype,
                                                    const ForwardShape &s,
                                                    const std::vector<uint16_t> &kRows,
                                                    const std::vector<uint16_t> &vRows,
                                                    uint64_t seed, generator::DType outDtype) {
  DecodeBuffers out;
  const bool fp8 = dtype == generator::DType::E4M3;
  const generator::DType qDtype = fp8 ? outDtype : dtype;  // q and o
  const size_t cacheBytes = fp8 ? 1 : 2;
  out.fp8 = fp8;
  const bool paged = s.pageSize > 0;
  const int tokensPerPage = paged ? s.pageSize : std::max(1, s.seqK);
  // Pages: each sequence owns ceil(len / page) of them; a few more nobody owns.
  std::vector<int> owned(s.batch);
  int used = 0;
  for (int b = 0; b < s.batch; ++b) {
    owned[b] = paged ? (decodeCacheLength(s, b) + tokensPerPage - 1) / tokensPerPage : 1;
    used += owned[b];
  }
  out.tableStride = paged ? std::max(1, (s.seqK + tokensPerPage - 1) / tokensPerPage) : 0;
  out.pages = paged ? used + 3 : s.batch;
  std::vector<int> order(out.pages);
  std::iota(order.begin(), order.end(), 0);
  if (paged)
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  // The spare pages are real pages full of NaN; table entries past a sequence's pages
  // point at one of them, so an unmasked read shows.
  if (paged) {
    out.table.assign((size_t)s.batch * out.tableStride, order[used]);
    int next = 0;
    for (int b = 0; b < s.batch; ++b)
      for (int i = 0; i < owned[b]; ++i)
        out.table[(size_t)b * out.tableStride + i] = order[next++];
  }

  const long long kRow = (long long)s.headsKV * s.headDim, vRow = (long long)s.headsKV * s.headDimV;
  const long long tokens = (long long)out.pages * tokensPerPage;
  auto alloc = [](runtime::DeviceBuffer &buffer, size_t bytes) -> llvm::Error {
    auto b = runtime::DeviceBuffer::allocate(std::max<size_t>(bytes, 256));
    if (!b)
      return b.takeError();
    buffer = std::move(*b);
    return llvm::Error::success();
  };
  const long long qElems = (long long)s.batch * s.seqQ * s.headsQ * s.headDim;
  const long long oElems = (long long)s.batch * s.seqQ * s.headsQ * s.headDimV;
  for (auto [buffer, bytes] :
       {std::pair{&out.q, (size_t)qElems * 2}, std::pair{&out.o, (size_t)oElems * 2},
        std::pair{&out.k, (size_t)(tokens * kRow) * cacheBytes},
        std::pair{&out.v, (size_t)(tokens * vRow) * cacheBytes},
        std::pair{&out.lse, (size_t)s.batch * s.headsQ * s.seqQ * 4},
        std::pair{&out.blockTable, out.table.size() * 4},
        std::pair{&out.cacheSeqlens, (size_t)s.batch * 4},
        std::pair{&out.workspace,
                  decodeWorkspaceBytes(s.batch, s.headsQ, s.seqQ, s.headDimV, kMaxDecodeSplits)}})
    if (llvm::Error err = alloc(*buffer, bytes))
      return std::move(err);

  std::vector<int> lengths(s.batch);
  for (int b = 0; b < s.batch; ++b)
    lengths[b] = decodeCacheLength(s, b);
  if (llvm::Error err = out.cacheSeqlens.upload(lengths.data(), lengths.size() * 4))
    return std::move(err);
  if (paged)
    if (llvm::Error err = out.blockTable.upload(out.table.data(), out.table.size() * 4))
      return std::move(err);
  if (fp8) {
    for (auto [buffer, ofV] : {std::pair{&out.kDescale, false}, std::pair{&out.vDescale, true}}) {
      std::vector<float> factors((size_t)s.batch * s.headsKV);
      for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.headsKV; ++h)
          factors[(size_t)b * s.headsKV + h] = decodeCacheFactor(ofV, b, h);
      if (llvm::Error err = alloc(*buffer, factors.size() * 4))
        return std::move(err);
      if (llvm::Error err = buffer->upload(factors.data(), factors.size() * 4))
        return std::move(err);
    }
  }
  if (s.alibi) {
    const std::vector<float> slopes = testAlibiSlopes(s.batch, s.headsQ);
    if (llvm::Error err = alloc(out.alibiSlopes, slopes.size() * 4))
      return std::move(err);
    if (llvm::Error err = out.alibiSlopes.upload(slopes.data(), slopes.size() * 4))
      return std::move(err);
  }

  if (kRows.empty()) {
    // Timing: random values everywhere. Caches of many GB take one block of random
    // values repeated (the kernel's speed does not depend on them, only on their not
    // being zeros), made quickly.
    constexpr size_t kBlockValues = 8u << 20;
    for (runtime::DeviceBuffer *buffer : {&out.q, &out.k, &out.v}) {
      const size_t bytesPerValue = fp8 && buffer != &out.q ? 1 : 2;
      const size_t values = buffer->size() / bytesPerValue;
      const size_t count = std::min(values, kBlockValues);
      std::vector<uint16_t> halves;
      std::vector<uint8_t> bytes;
      if (bytesPerValue == 1)
        bytes = randomE4m3(count, seed++);
      else
        halves = randomHalves(count, qDtype, seed++);
      const void *block = bytesPerValue == 1 ? (const void *)bytes.data() : halves.data();
      for (size_t at = 0; at < values; at += count)
        if (llvm::Error err = buffer->upload(block, std::min(count, values - at) * bytesPerValue,
                                             at * bytesPerValue))
          return std::move(err);
    }
    return std::move(out);
  }
  // The cache: NaN (e4m3's 0xff reads as -480, far off any value the check expects), then
  // each sequence's tokens where its table puts them: `store(b, packed row, token)`.
  auto place = [&](auto &&store) {
    long long packed = 0;
    for (int b = 0; b < s.batch; ++b) {
      for (int j = 0; j < lengths[b]; ++j) {
        const int page = paged ? out.table[(size_t)b * out.tableStride + j / tokensPerPage] : b;
        store(b, packed + j, (long long)page * tokensPerPage + j % tokensPerPage);
      }
      packed += lengths[b];
    }
  };
  auto upload = [&](const auto &k, const auto &v) -> llvm::Error {
    if (llvm::Error err = out.k.upload(k.data(), k.size() * sizeof(k[0])))
      return err;
    return out.v.upload(v.data(), v.size() * sizeof(v[0]));
  };
  if (fp8) {
    // Each value divided by its factor: exact on the e4m3 grid.
    std::vector<uint8_t> k((size_t)(tokens * kRow), 0xFF), v((size_t)(tokens * vRow), 0xFF);
    place([&](int b, long long row, long long token) {
      for (auto [rows, cache, dim, ofV] :
           {std::tuple{&kRows, &k, s.headDim, false}, std::tuple{&vRows, &v, s.headDimV, true}})
        for (int h = 0; h < s.headsKV; ++h) {
          const float f = decodeCacheFactor(ofV, b, h);
          const long long at = (long long)s.headsKV * dim, col = (long long)h * dim;
          for (int c = 0; c < dim; ++c)
            (*cache)[token * at + col + c] =
                floatToE4m3(halfToFloat(qDtype, (*rows)[row * at + col + c]) / f);
        }
    });
    if (llvm::Error err = upload(k, v))
      return std::move(err);
    return std::move(out);
  }
  std::vector<uint16_t> k((size_t)(tokens * kRow), 0xFFFF), v((size_t)(tokens * vRow), 0xFFFF);
  place([&](int, long long row, long long token) {
    std::copy_n(kRows.begin() + row * kRow, kRow, k.begin() + token * kRow);
    std::copy_n(vRows.begin() + row * vRow, vRow, v.begin() + token * vRow);
  });
  if (llvm::Error err = upload(k, v))
    return std::move(err);
  return std::move(out);
}

FjDecodeParams decodeSizes(const ForwardShape &shape) {
  return makeDecodeParams(shape, DecodeBuffers{});
}

FjDecodeParams makeDecodeParams(const ForwardShape &s, const DecodeBuffers &b) {
  FjDecodeParams p = {};
  const bool paged = s.pageSize > 0;
  const int tokensPerPage = paged ? s.pageSize : std::max(1, s.seqK);
  p.q = (const void *)b.q.ptr();
  p.k = (const void *)b.k.ptr();
  p.v = (const void *)b.v.ptr();
  p.o = (void *)b.o.ptr();
  p.lse = s.withLse ? (float *)b.lse.ptr() : nullptr;
  p.block_table = paged ? (const int *)b.blockTable.ptr() : nullptr;
  p.cache_seqlens = s.seqlensK.empty() ? nullptr : (const int *)b.cacheSeqlens.ptr();
  p.q_head_stride = s.headDim;
  p.q_row_stride = (long long)s.headsQ * s.headDim;
  p.q_batch_stride = p.q_row_stride * s.seqQ;
  p.o_head_stride = s.headDimV;
  p.o_row_stride = (long long)s.headsQ * s.headDimV;
  p.o_batch_stride = p.o_row_stride * s.seqQ;
  p.k_head_stride = s.headDim;
  p.k_row_stride = (long long)s.headsKV * s.headDim;
  p.k_page_stride = p.k_row_stride * tokensPerPage;
  p.v_head_stride = s.headDimV;
  p.v_row_stride = (long long)s.headsKV * s.headDimV;
  p.v_page_stride = p.v_row_stride * tokensPerPage;
  p.lse_head_stride = s.seqQ;
  p.lse_batch_stride = (long long)s.headsQ * s.seqQ;
  p.batch = s.batch;
  p.heads_q = s.headsQ;
  p.heads_kv = s.headsKV;
  p.seqlen_q = s.seqQ;
  p.seqlen_k = s.seqK;
  p.page_size = paged ? s.pageSize : 0;
  p.table_stride = b.tableStride;
  p.scale_log2 = s.scale() * 1.4426950408889634f;
  if (b.fp8) {  // factors [batch, heads_kv]
    p.k_descale = (const float *)b.kDescale.ptr();
    p.v_descale = (const float *)b.vDescale.ptr();
    p.descale_batch_stride = s.headsKV;
    p.descale_head_stride = 1;
  }
  if (s.alibi) {  // slopes [batch, heads_q]
    p.alibi_slopes = (const float *)b.alibiSlopes.ptr();
    p.alibi_batch_stride = s.headsQ;
  }
  p.mod_args = s.modArgs;  // the user code's args (the tuning args, or zeros)
  p.num_splits = 1;
  p.tiles_per_split = 1 << 30;
  return p;
}

} // namespace flashjit::tuner
