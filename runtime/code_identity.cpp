#include "runtime/code_identity.h"

#include "support/error.h"
#include "support/hash.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

namespace flashjit::runtime {
namespace {

bool isIdentifierChar(char c) { return llvm::isAlnum(c) || c == '_' || c == '$' || c == '.'; }

// The name a module-scope data declaration declares, "" for any other line:
//   .global .align 4 .b8 _ZN5probe6kTableE[16] = {...};
//   .const .align 1 .u8 _ZN...kStageOE;
llvm::StringRef declaredData(llvm::StringRef line) {
  if (!line.startswith(".global ") && !line.startswith(".const "))
    return "";
  llvm::StringRef head = line.split('=').first.rtrim().rtrim(';').rtrim();
  if (head.endswith("]"))
    head = head.take_front(head.rfind('[')).rtrim();
  return head.rsplit(' ').second;
}

// Whether `name` occurs in `text` as a whole identifier.
bool mentions(llvm::StringRef text, llvm::StringRef name) {
  for (size_t at = text.find(name); at != llvm::StringRef::npos;
       at = text.find(name, at + 1)) {
    const bool startsWord = at == 0 || !isIdentifierChar(text[at - 1]);
    const size_t end = at + name.size();
    const bool endsWord = end == text.size() || !isIdentifierChar(text[end]);
    if (startsWord && endsWord)
      return true;
  }
  return false;
}

} // namespace

llvm::Expected<std::string> ptxCodeHash(llvm::StringRef ptx) {
  if (!ptx.contains(".entry "))
    return makeError(ErrorCode::InvalidValue, "not the PTX of a kernel (no .entry)");
  llvm::SmallVector<llvm::StringRef, 0> lines;
  ptx.split(lines, '\n');
  // The text without the declarations: a name used only where it is declared is unused.
  std::string rest;
  for (llvm::StringRef line : lines)
    if (declaredData(line).empty())
      rest += line.str() + '\n';
  std::string kept;
  for (llvm::StringRef line : lines) {
    llvm::StringRef name = declaredData(line);
    if (name.empty() || mentions(rest, name))
      kept += line.str() + '\n';
  }
  return sha256Hex(kept);
}

} // namespace flashjit::runtime
