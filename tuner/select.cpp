#include "tuner/select.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace flashjit::tuner {

double tieTolerance(double bestSpread) {
  if (!std::isfinite(bestSpread))
    bestSpread = 0;
  return std::clamp(bestSpread, 0.01, 0.02);
}

bool smallerFootprint(const RankedCandidate &a, const RankedCandidate &b) {
  return std::make_tuple(a.sharedBytes, a.registers, a.tile.key(), a.splits) <
         std::make_tuple(b.sharedBytes, b.registers, b.tile.key(), b.splits);
}

namespace {
bool usable(const RankedCandidate &c) { return std::isfinite(c.medianUs) && c.medianUs > 0; }
} // namespace

std::vector<int> tiedWithFastest(llvm::ArrayRef<RankedCandidate> candidates) {
  int fastest = -1;
  for (int i = 0; i < (int)candidates.size(); ++i)
    if (usable(candidates[i]) &&
        (fastest < 0 || candidates[i].medianUs < candidates[fastest].medianUs))
      fastest = i;
  std::vector<int> ties;
  if (fastest < 0)
    return ties;
  double limit = candidates[fastest].medianUs * (1 + tieTolerance(candidates[fastest].spread));
  for (int i = 0; i < (int)candidates.size(); ++i)
    if (usable(candidates[i]) && candidates[i].medianUs <= limit)
      ties.push_back(i);
  return ties;
}

std::vector<int> finalists(llvm::ArrayRef<RankedCandidate> screened, double band, int limit) {
  std::vector<int> order;
  for (int i = 0; i < (int)screened.size(); ++i)
    if (usable(screened[i]))
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return screened[a].medianUs < screened[b].medianUs;
  });
  std::vector<int> out;
  for (int i : order)
    if ((int)out.size() < std::max(limit, 1) &&
        screened[i].medianUs <= screened[order.front()].medianUs * (1 + band))
      out.push_back(i);
  return out;
}

int pickWinner(llvm::ArrayRef<RankedCandidate> candidates) {
  std::vector<int> ties = tiedWithFastest(candidates);
  if (ties.empty())
    return -1;
  return *std::min_element(ties.begin(), ties.end(), [&](int a, int b) {
    return smallerFootprint(candidates[a], candidates[b]);
  });
}

} // namespace flashjit::tuner
