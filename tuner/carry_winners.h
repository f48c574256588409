// Tuning winners across a generator change. A row is keyed by the fingerprint of its
// family's templates, so any edit of them (a comment, a path only one feature compiles)
// leaves every row of the family stale, and shipped winners would have to be measured
// again on each GPU they were measured on. A row whose machine code did not change keeps
// its measurement instead: it is stamped with the hash of the code it covers (the
// winner's and every tile the tuner screened or timed against it: their PTX,
// runtime::ptxCodeHash, and how they are launched), and a later generator that makes the
// same code for all of them carries the row over.
// A tile that compiles differently, or a row with no stamp, is measured again.
#pragma once

#include "cache/cache.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace flashjit::tuner {

struct CodeStamp {
  std::string sha256;          // over every tile of the row, "" when one did not compile
  std::string winnerBinaryKey; // this build's binary key for the winner, as the row's
                               // flashjit version (in the source's header) gave it
  std::string error;           // why there is no hash
};

// The code a row covers, compiled to PTX with this build's generator and NVRTC (no GPU,
// no ptxas): per tile, runtime::ptxCodeHash, the NVRTC options and the launch geometry
// the generator gives. Each (spec, tile) is compiled once per CodeStamper.
class CodeStamper {
public:
  explicit CodeStamper(unsigned threads = 0) : threads_(threads) {} // 0: one per core
  llvm::Expected<CodeStamp> stamp(const cache::TuningRow &row);

private:
  struct TileCode {
    std::string line;  // "tile ptx-hash options geometry"
    std::string error; // emitting or compiling failed
    std::string source;
    std::vector<std::string> options;
  };
  unsigned threads_;
  std::map<std::string, TileCode> tiles_; // "spec/tile" -> its code
};

struct CarryReport {
  int stamped = 0;                  // current rows given a stamp
  std::map<std::string, int> carried;  // family -> rows carried to this generator
  std::map<std::string, int> stale;    // family -> rows left out (to be measured again)
  std::vector<std::string> notes;      // one line per row not stamped or not carried
};

// `rows` brought to this build: current rows kept (stamped when they have no stamp and
// this build compiles the very binary they measured), rows of another generator carried
// when their stamp matches this build's code, the rest (another measurement protocol, no
// stamp, changed code, unparsable) left out and counted as stale. `progress` gets one
// line per row compiled.
llvm::Expected<std::vector<cache::TuningRow>>
carryWinners(std::vector<cache::TuningRow> rows, unsigned threads, CarryReport &report,
             llvm::raw_ostream *progress = nullptr);

} // namespace flashjit::tuner
