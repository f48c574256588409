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

} // namespace

std::string emitWgmmaWrappers(DType dtype, int nQk, int nPv) {
  const char *type = dtype == DType::BF16 ? "bf16" : "f16";
  const int qkRegs = nQk / 2, pvRegs = nPv / 2;
  std::string out = "// ---- generated: wgmma wrappers ----\nnamespace fj {\n";
  // S = Q K^T: both descriptors K-major (no transpose); scale-d predicate from `accumulate`.
  out += llvm::formatv(
             "__device__ __forceinline__ void wgmma_qk(float (&d)[{0}], u64 a, u64 b, "
             "int accumulate) {{\n"
             "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{1}, 0;\\n\"\n"
             "               \"wgmma.mma_async.sync.aligned.m64n{2}k16.f32.{3}.{3} \"\n"
             "               \"{{{4}}, %{5}, %{6}, p, 1, 1, 0, 0;\\n}\\n\"\n"
             "               : {7}\n"
             "               : \"r\"(accumulate), \"l\"(a), \"l\"(b));\n"
             "}\n",
             qkRegs, qkRegs, nQk, type, operandList(0, qkRegs), qkRegs + 1, qkRegs + 2,
             accumulatorConstraints(qkRegs))
             .str();
  // O += P V: A (P) from four registers, B N-major (transposed, imm-trans-b = 1).
  out += llvm::formatv(
             "__device__ __forceinline__ void wgmma_pv(float (&d)[{0}], const u32 (&a)[4], "
             "u64 b) {{\n"
             "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{7}, 0;\\n\"\n"
             "               \"wgmma.mma_async.sync.aligned.m64n{1}k16.f32.{2}.{2} \"\n"
             "               \"{{{3}}, {{{4}}, %{5}, p, 1, 1, 1;\\n}\\n\"\n"
             "               : {6}\n"
             "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), "
             "\"r\"(1));\n"
             "}\n",
             pvRegs, nPv, type, operandList(0, pvRegs), operandList(pvRegs, 4), pvRegs + 4,
             accumulatorConstraints(pvRegs), pvRegs + 5)
             .str();
  out += "}  // namespace fj\n";
  return out;
}

} // namespace flashjit::generator
