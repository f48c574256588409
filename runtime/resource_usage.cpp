#include "runtime/resource_usage.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <optional>

namespace flashjit::runtime {
namespace {

// For a clause such as "Used 40 registers" and the unit "registers": 40. Nothing
// when the clause does not end with the unit or no number precedes it.
std::optional<int> countBefore(llvm::StringRef clause, llvm::StringRef unit) {
  clause = clause.trim();
  if (!clause.consume_back(unit))
    return std::nullopt;
  llvm::StringRef number = clause.rtrim().rsplit(' ').second;
  if (number.empty())
    number = clause.trim();
  int value = 0;
  if (number.getAsInteger(10, value))
    return std::nullopt;
  return value;
}

void raiseTo(int &field, std::optional<int> value) {
  if (value)
    field = std::max(field, *value);
}

} // namespace

ResourceUsage parsePtxasLog(llvm::StringRef log) {
  ResourceUsage usage;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  log.split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    if (!line.startswith("ptxas"))
      continue;
    llvm::SmallVector<llvm::StringRef, 8> clauses;
    line.split(clauses, ',');
    for (llvm::StringRef clause : clauses) {
      raiseTo(usage.registers, countBefore(clause, " registers"));
      raiseTo(usage.stackFrameBytes, countBefore(clause, " bytes stack frame"));
      raiseTo(usage.spillStoreBytes, countBefore(clause, " bytes spill stores"));
      raiseTo(usage.spillLoadBytes, countBefore(clause, " bytes spill loads"));
      raiseTo(usage.staticSharedBytes, countBefore(clause, " bytes smem"));
    }
  }
  return usage;
}

std::vector<std::string> spillingFunctions(llvm::StringRef log) {
  std::vector<std::string> spilling;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  log.split(lines, '\n', -1, false);
  llvm::StringRef function = "?";
  for (llvm::StringRef line : lines) {
    if (!line.startswith("ptxas"))
      continue;
    if (size_t at = line.find("function '"); at != llvm::StringRef::npos) {
      function = line.substr(at + 10).split('\'').first;
      continue;
    }
    int stored = 0, loaded = 0;
    llvm::SmallVector<llvm::StringRef, 8> clauses;
    line.split(clauses, ',');
    for (llvm::StringRef clause : clauses) {
      raiseTo(stored, countBefore(clause, " bytes spill stores"));
      raiseTo(loaded, countBefore(clause, " bytes spill loads"));
    }
    if (stored + loaded > 0)
      spilling.push_back(
          (function + ": " + llvm::Twine(stored) + " bytes stored, " + llvm::Twine(loaded) +
           " loaded")
              .str());
  }
  return spilling;
}

std::vector<std::string> ptxasNotes(llvm::StringRef log) {
  std::vector<std::string> notes;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  log.split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    if (!line.consume_front("ptxas"))
      continue;
    auto [kind, message] = line.split(':');
    kind = kind.trim();
    message = message.trim();
    // "(C7519) ...": a code in parentheses opens every advisory.
    bool coded = message.startswith("(C") && message.contains(')');
    if (kind == "warning" || (kind == "info" && coded))
      notes.push_back(message.str());
  }
  return notes;
}

} // namespace flashjit::runtime
