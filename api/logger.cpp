#include "api/logger.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace flashjit::api {

void Logger::operator()(fj_log_level level, llvm::StringRef message) const {
  if (callback) {
    std::string text = message.str();  // NUL-terminated for the callback
    callback(level, text.c_str(), userData);
    return;
  }
  if (level == FJ_LOG_INFO)
    return;
  llvm::errs() << "flashjit: " << (level == FJ_LOG_ERROR ? "error: " : "warning: ") << message
               << "\n";
}

} // namespace flashjit::api
