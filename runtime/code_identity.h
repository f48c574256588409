// What a kernel makes the GPU do, as a hash of its PTX: two programs with the same hash
// compile (with one ptxas, one set of options) to the same instructions. Used to tell
// whether a generator change left a kernel as it was, so that a tuning row measured on
// it still holds (tuner/carry_winners.h).
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace flashjit::runtime {

// SHA-256 (lower-case hex) of the PTX without the declarations of module-scope data that
// nothing in it refers to. NVRTC declares every constexpr member of the instantiated
// templates, used or not, so a template that only gained one declares one more global;
// a kernel that reads a constant table refers to it by name and keeps it, initialiser
// and all. The rest (the compiler's version line in the header included) counts byte for
// byte. Text with no kernel entry in it is an error.
llvm::Expected<std::string> ptxCodeHash(llvm::StringRef ptx);

} // namespace flashjit::runtime
