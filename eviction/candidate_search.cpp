// candidate_search.cpp: full scan and sqrt(n) sampling over the eviction pool.
#include "eviction/candidate_search.h"

#include <algorithm>
#include <cmath>

#include "dtr/core/check.h"

namespace dtr {

// Note [Tie-breaking] in engine.cpp: zero beats everything and the earliest zero wins;
// otherwise the least cost wins and, among equal costs, the latest to enter the pool.
void CandidateSearch::Best::offer(StorageId s, double c, uint64_t q) {
  if (id == kNoId) {
    id = s, cost = c, seq = q;
    return;
  }
  bool better;
  if (c == 0.0 || cost == 0.0)
    better = (c == 0.0 && cost == 0.0) ? q < seq : c == 0.0;
  else
    better = c < cost || (c == cost && q > seq);
  if (better) id = s, cost = c, seq = q;
}

// Note [Bounded full scan]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// h_DTR and MSPS walk the evicted neighbourhood of every candidate, which dominates a
// full scan once long chains are evicted (LSTM at low budgets). Their local ratio is a
// lower bound of the score, so we compute every bound (cheap), visit candidates in order
// of bound, and stop at the first bound strictly above the best cost so far: a candidate
// with bound > best has cost > best and cannot win, not even a tie. Candidates whose bound
// equals the best are still scored, so ties and zero costs resolve exactly as in the
// plain scan (Note [Tie-breaking] in engine.cpp), and the choice is identical.
StorageId CandidateSearch::full_scan(uint64_t& scored) {
  const std::vector<StorageId>& pool = engine_.pool();
  DTR_CHECK(!pool.empty(), "eviction search on an empty pool");
  Best best;
  if (!heuristic_.has_lower_bound()) {
    for (StorageId s : pool) best.offer(s, heuristic_.score(engine_, s), engine_.pool_seq(s));
    scored += pool.size();
    return best.id;
  }
  bounded_.clear();
  for (StorageId s : pool) bounded_.push_back({heuristic_.lower_bound(engine_, s), s});
  std::sort(bounded_.begin(), bounded_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [bound, s] : bounded_) {
    if (best.id != kNoId && bound > best.cost) break;
    best.offer(s, heuristic_.score(engine_, s), engine_.pool_seq(s));
    ++scored;
  }
  return best.id;
}

StorageId CandidateSearch::sample(uint32_t sample_size, uint64_t& scored) {
  const std::vector<StorageId>& pool = engine_.pool();
  DTR_CHECK(!pool.empty(), "eviction search on an empty pool");
  const size_t n = pool.size();
  size_t k = sample_size ? sample_size : static_cast<size_t>(std::ceil(std::sqrt(double(n))));
  if (k >= n) return full_scan(scored);
  Best best;
  for (size_t i = 0; i < k; ++i) {
    // Uniform index by multiply-shift (Lemire): no division on the hot path; the bias is
    // below n / 2^64.
    const size_t index = static_cast<size_t>((static_cast<unsigned __int128>(rng_()) * n) >> 64);
    const StorageId s = pool[index];
    best.offer(s, heuristic_.score(engine_, s), engine_.pool_seq(s));
  }
  scored += k;
  return best.id;
}

}  // namespace dtr
