#include "generator/wgmma_wrappers.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit::generator {
namespace {

// "%first, %first+1, ..., %first+count-1"
std::string operandList(int first, int count) {
  std::string out;
  for (int i = 0; i < count; ++i)
    out += llvm::formatv("{0}%{1}", i ? ", " : "", first + i).str();
  return out;
}

// "+f"(d[0]), "+f"(d[1]), ...
std::string accumulatorConstraints(int count) {
  std::string out;
  for (int i = 0; i < count; ++i)
    out += llvm::formatv("{0}\"+f\"(d[{1}])", i ? ", " : "", i).str();
  return out;
}

const char *typeName(DType dtype) {
  return dtype == DType::BF16 ? "bf16" : dtype == DType::E4M3 ? "e4m3" : "f16";
}
// K of one wgmma: 32 bytes of each operand row.
int kStep(DType dtype) { return dtype == DType::E4M3 ? 32 : 16; }
// The immediate arguments after scale-d: scale-a, scale-b and, for 16-bit types only,
// the transposes (8-bit operands are K-major only).
std::string immediates(DType dtype, const char *transposes) {
  return dtype == DType::E4M3 ? "1, 1" : llvm::formatv("1, 1, {0}", transposes).str();
}

} // namespace

std::string emitWgmmaSmemSmem(llvm::StringRef name, DType dtype, int n, bool transA,
                              bool transB) {
  const int regs = n / 2;
  // The scale-d predicate comes from `accumulate` (0: d = A B, else d += A B).
  return llvm::formatv(
             "__device__ __forceinline__ void {8}(float (&d)[{0}], u64 a, u64 b, "
             "int accumulate) {{\n"
             "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{1}, 0;\\n\"\n"
             "               \"wgmma.mma_async.sync.aligned.m64n{2}k{10}.f32.{3}.{3} \"\n"
             "               \"{{{4}}, %{5}, %{6}, p, {9};\\n}\\n\"\n"
             "               : {7}\n"
             "               : \"r\"(accumulate), \"l\"(a), \"l\"(b));\n"
             "}\n",
             regs, regs, n, typeName(dtype), operandList(0, regs), regs + 1, regs + 2,
             accumulatorConstraints(regs), name,
             immediates(dtype, transA ? (transB ? "1, 1" : "1, 0") : (transB ? "0, 1" : "0, 0")),
             kStep(dtype))
      .str();
}

std::string emitWgmmaRegSmem(llvm::StringRef name, DType dtype, int n, bool kMajorB) {
  const int regs = n / 2;
  // imm-trans-b = 1: B is N-major (16-bit types only; 8-bit B is K-major).
  return llvm::formatv(
             "__device__ __forceinline__ void {8}(float (&d)[{0}], const u32 (&a)[4], "
             "u64 b) {{\n"
             "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{7}, 0;\\n\"\n"
             "               \"wgmma.mma_async.sync.aligned.m64n{1}k{9}.f32.{2}.{2} \"\n"
             "               \"{{{3}}, {{{4}}, %{5}, p, {10};\\n}\\n\"\n"
             "               : {6}\n"
             "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), "
             "\"r\"(1));\n"
             "}\n",
             regs, n, typeName(dtype), operandList(0, regs), operandList(regs, 4), regs + 4,
             accumulatorConstraints(regs), regs + 5, name, kStep(dtype),
             dtype == DType::E4M3 ? "1, 1" : kMajorB ? "1, 1, 0" : "1, 1, 1")
      .str();
}

std::string emitWgmmaWrappers(DType dtype, int nQk, int nPv, bool alibiBias) {
  std::string out = "// ---- generated: wgmma wrappers ----\nnamespace fj {\n";
  // S = Q K^T: both descriptors K-major.
  out += emitWgmmaSmemSmem("wgmma_qk", dtype, nQk, false, false);
  // O += P V: P from registers, V N-major (FP8: V^T, K-major).
  out += emitWgmmaRegSmem("wgmma_pv", dtype, nPv);
  // S += the slope times the bias panel: emitted only where it is called, so that other
  // kernels' sources (and binary keys) stay as they were.
  if (alibiBias)
    out += emitWgmmaRegSmem("wgmma_qk_bias", DType::BF16, nQk, true);
  out += "}  // namespace fj\n";
  return out;
}

} // namespace flashjit::generator
