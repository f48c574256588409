#include "tuner/check_support.h"

#include "tuner/half_precision.h"

namespace flashjit::tuner {

float halfToFloat(generator::DType dtype, uint16_t bits) {
  return dtype == generator::DType::BF16 ? bf16ToFloat(bits) : fp16ToFloat(bits);
}

uint16_t floatToHalf(generator::DType dtype, float value) {
  return dtype == generator::DType::BF16 ? floatToBf16(value) : floatToFp16(value);
}

llvm::Error fillNormal(runtime::DeviceBuffer &buffer, generator::DType dtype,
                       std::mt19937_64 &rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  if (dtype == generator::DType::E4M3) {
    std::vector<uint8_t> host(buffer.size());
    for (auto &x : host)
      x = floatToE4m3(normal(rng));
    return buffer.upload(host.data(), host.size());
  }
  std::vector<uint16_t> host(buffer.size() / 2);
  for (auto &x : host)
    x = floatToHalf(dtype, normal(rng));
  return buffer.upload(host.data(), host.size() * 2);
}

std::vector<long long> tensorIndices(const ForwardShape &shape, bool keyRows, int heads,
                                     int dim, long long batchStride, long long rowStride,
                                     long long headStride) {
  std::vector<long long> out;
  long long packedRow = 0;
  for (int b = 0; b < shape.batch; ++b) {
    const std::vector<int> &lengths = keyRows ? shape.seqlensK : shape.seqlensQ;
    const int rows = shape.varlen() ? lengths[b] : (keyRows ? shape.seqK : shape.seqQ);
    for (int i = 0; i < rows; ++i)
      for (int h = 0; h < heads; ++h) {
        long long base = shape.varlen() ? (packedRow + i) * rowStride
                                        : b * batchStride + i * rowStride;
        base += h * headStride;
        for (int c = 0; c < dim; ++c)
          out.push_back(base + c);
      }
    packedRow += rows;
  }
  return out;
}

} // namespace flashjit::tuner
