#include "support/error.h"

namespace flashjit {
namespace {
class Category final : public std::error_category {
public:
  const char *name() const noexcept override { return "flashjit"; }
  std::string message(int value) const override {
    switch (static_cast<ErrorCode>(value)) {
    case ErrorCode::InvalidValue: return "invalid value";
    case ErrorCode::NotSupported: return "not supported";
    case ErrorCode::NoDevice: return "no CUDA device";
    case ErrorCode::Compile: return "compilation failed";
    case ErrorCode::Cuda: return "CUDA driver error";
    case ErrorCode::Cache: return "cache error";
    case ErrorCode::NotFound: return "not found";
    case ErrorCode::OutOfMemory: return "out of memory";
    case ErrorCode::Internal: return "internal error";
    }
    return "unknown error";
  }
};
} // namespace

const std::error_category &flashjitCategory() {
  static Category category;
  return category;
}

ErrorReport takeErrorReport(llvm::Error error) {
  ErrorReport report;
  bool found = false;
  std::string joined;
  llvm::handleAllErrors(std::move(error), [&](const llvm::ErrorInfoBase &info) {
    std::error_code ec = info.convertToErrorCode();
    if (!found && ec.category() == flashjitCategory()) {
      report.code = static_cast<ErrorCode>(ec.value());
      found = true;
    }
    if (!joined.empty())
      joined += "; ";
    joined += info.message();
  });
  report.message = std::move(joined);
  return report;
}

} // namespace flashjit
