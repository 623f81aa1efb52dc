// candidate_search.cpp: full scan and sqrt(n) sampling over the eviction pool.
#include "eviction/candidate_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// The cutoff a candidate's score is searched up to: the best cost so far, or none yet.
double CandidateSearch::Best::cutoff() const {
  return id == kNoId ? std::numeric_limits<double>::infinity() : cost;
}

// Note [Cutoff scores]
// ~~~~~~~~~~~~~~~~~~~~
// dtr, dtr_ancestors and msps sum the compute of a candidate's evicted neighbourhood by a
// graph search per score. Once a run thrashes, long chains are evicted and most candidates
// reach thousands of evicted storages: the packed GRU under auto at 0.75 of its peak spent
// 71% of its time in that search (perf, 2026-11-30), and msps at 0.75 28%. A candidate
// whose score passes the best cost so far cannot win, not even a tie (Note [Tie-breaking]
// in engine.cpp), so each score is searched only up to that cost (Heuristic::score_up_to):
// the search stops once its sum puts the score above it, and the value returned is above
// it. The partial sum only grows, so a stopped score is a lower bound of the full one and
// loses as the full one would; where rounding leaves the stopped score at the cutoff, the
// score is searched in full. The winner's score is always a full one (chosen_cost), and
// the choice is the one of the plain scan. tests/eviction/test_cutoff_scores.cpp.
// dtr_eq sums its classes without a search, but finding them walks each candidate's
// neighbours (Engine::eq_class_cost), and a full scan of a deep residual MLP's pool spent
// 44% of its run there (2026-12-04): its score stops at the candidate's own compute where
// that alone puts it above the cutoff (the classes only add).
//
// Note [Bounded full scan]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// h_DTR and MSPS walk the evicted neighbourhood of every candidate, which dominates a
// full scan once long chains are evicted (LSTM at low budgets). Their local ratio is a
// lower bound of the score, so we compute every bound (cheap), visit candidates in order
// of bound, and stop at the first bound strictly above the best cost so far: a candidate
// with bound > best has cost > best and cannot win, not even a tie. Candidates whose bound
// equals the best are still scored, so ties and zero costs resolve exactly as in the
// plain scan (Note [Tie-breaking] in engine.cpp), and the choice is identical.
//
// Note [Bound order by heap]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The scan stops after a few of the pool's candidates: on a 2000-layer residual MLP's trace
// at 0.6 of its peak, dtr_ancestors scored 67 a search from a pool of thousands. Sorting
// every bound first cost more than the scoring (10% of a live run under `auto`, perf
// 2026-12-04), so the bounds go into a heap, O(n), and come out in order one at a time,
// O(log n) each, only as far as the scan goes. Bounds that tie come out in another order
// than a sort's, which changes nothing: the choice does not depend on the order (Note
// [Tie-breaking] in engine.cpp), and a tie scored after the best cost fell below it could
// not have won.
StorageId CandidateSearch::full_scan(const std::vector<StorageId>& pool, uint64_t& scored) {
  DTR_CHECK(!pool.empty(), "eviction search on an empty pool");
  Best best;
  if (!heuristic_.has_lower_bound()) {
    for (StorageId s : pool)
      best.offer(s, heuristic_.score_up_to(engine_, s, best.cutoff()), engine_.pool_seq(s));
    scored += pool.size();
    chosen_cost_ = best.cost;
    return best.id;
  }
  // Note [Bound order by heap]
  bounded_.clear();
  for (StorageId s : pool) bounded_.push_back({heuristic_.lower_bound(engine_, s), s});
  const auto later = [](const auto& a, const auto& b) { return a.first > b.first; };
  std::make_heap(bounded_.begin(), bounded_.end(), later);
  for (auto end = bounded_.end(); end != bounded_.begin(); --end) {
    const auto [bound, s] = bounded_.front();
    if (best.id != kNoId && bound > best.cost) break;
    std::pop_heap(bounded_.begin(), end, later);
    best.offer(s, heuristic_.score_up_to(engine_, s, best.cutoff()), engine_.pool_seq(s));
    ++scored;
  }
  chosen_cost_ = best.cost;
  return best.id;
}

StorageId CandidateSearch::sample(uint32_t sample_size, uint64_t& scored) {
  const std::vector<StorageId>& pool = engine_.pool();
  DTR_CHECK(!pool.empty(), "eviction search on an empty pool");
  const size_t n = pool.size();
  size_t k = sample_size ? sample_size : static_cast<size_t>(std::ceil(std::sqrt(double(n))));
  if (k >= n) return full_scan(pool, scored);
  Best best;
  for (size_t i = 0; i < k; ++i) {
    // Uniform index by multiply-shift (Lemire): no division on the hot path; the bias is
    // below n / 2^64.
    const size_t index = static_cast<size_t>((static_cast<unsigned __int128>(rng_()) * n) >> 64);
    const StorageId s = pool[index];
    best.offer(s, heuristic_.score_up_to(engine_, s, best.cutoff()), engine_.pool_seq(s));
  }
  scored += k;
  chosen_cost_ = best.cost;
  return best.id;
}

// The storage owning allocated block `b` if it is evictable now; kNoId for a pinned or
// locked storage, or a block the engine does not own.
StorageId CandidateSearch::evictable_owner(const BlockView& b) const {
  const StorageId s = b.owner ? Engine::storage_of_owner(b.owner) : kNoId;
  return s != kNoId && s < engine_.num_storages() && engine_.is_evictable(s) ? s : kNoId;
}

// A storage's score inside a window, clamped so that sums and differences of costs stay
// finite.
double CandidateSearch::window_score(StorageId s, uint64_t& scored) {
  ++scored;
  return std::min(heuristic_.score(engine_, s), 1e300);
}

// Note [Window search]
// ~~~~~~~~~~~~~~~~~~~~
// Coop (Zhang et al., NeurIPS 2023) evicts runs of adjacent blocks, so that what it frees
// coalesces into one block. Walk the blocks in address order; a window is a run of blocks
// of one segment holding only free blocks and evictable ones (a pinned, locked or foreign
// allocated block breaks it); for a contiguous request, only segments of the request's
// pool (small <= 1 MiB, or large) count, since the other pool's blocks cannot serve it. Its cost is the sum of the scores of its evictable blocks;
// its weight is what evicting it achieves: the block-rounded bytes of its evictable blocks
// (budget request) or its span including free blocks (contiguous request). We want the
// least-cost window of weight >= bytes_needed. Costs are >= 0, so for each right end the
// best window is the shortest that still qualifies: advance the left end while the window
// without its leftmost block still weighs enough and still holds an evictable block (both
// bounds only move right as the right end does: two pointers, O(n) blocks, each evictable
// block scored once). Ties go to the lower address.
std::vector<StorageId> CandidateSearch::window(const std::vector<BlockView>& blocks,
                                               uint64_t bytes_needed, bool contiguous,
                                               uint64_t& scored) {
  struct Item {
    double cost;
    uint64_t weight;
    StorageId storage;  // kNoId for a free block
  };
  std::vector<Item> items;  // the current run of non-breaking blocks
  items.reserve(blocks.size());
  std::vector<StorageId> result;
  double best_cost = 0;
  bool found = false;
  // Sweeps the current run; a window beats the best so far only if strictly cheaper.
  auto flush = [&]() {
    size_t l = 0, run_l = 0, run_r = 0;
    uint64_t weight = 0;
    double cost = 0;
    uint32_t evictable = 0;
    bool run_found = false;
    for (size_t r = 0; r < items.size(); ++r) {
      weight += items[r].weight;
      cost += items[r].cost;
      evictable += items[r].storage != kNoId;
      while (l < r && weight - items[l].weight >= bytes_needed &&
             evictable - (items[l].storage != kNoId) > 0) {
        weight -= items[l].weight;
        cost -= items[l].cost;
        evictable -= items[l].storage != kNoId;
        ++l;
      }
      if (weight >= bytes_needed && evictable > 0 && (!found || cost < best_cost)) {
        found = run_found = true;
        best_cost = cost;
        run_l = l;
        run_r = r + 1;
      }
    }
    if (run_found) {
      result.clear();
      for (size_t i = run_l; i < run_r; ++i)
        if (items[i].storage != kNoId) result.push_back(items[i].storage);
    }
    items.clear();
  };
  // A contiguous request is served from one pool only, so only that pool's windows help.
  const bool small_request = is_small_request(bytes_needed);
  uint64_t segment = blocks.empty() ? 0 : blocks.front().segment_id;
  for (const BlockView& b : blocks) {
    if (contiguous && b.small_pool != small_request) continue;
    if (b.segment_id != segment) {
      flush();
      segment = b.segment_id;
    }
    if (!b.allocated) {
      items.push_back(Item{0.0, contiguous ? b.size : 0, kNoId});
      continue;
    }
    const StorageId s = evictable_owner(b);
    if (s == kNoId) {
      flush();
      continue;
    }
    items.push_back(Item{window_score(s, scored),
                         contiguous ? b.size : round_block_size(engine_.storage_size(s)), s});
  }
  flush();
  if (contiguous && result.empty()) result = clear_segment(blocks, bytes_needed, scored);
  return result;
}

// Note [Segment fallback]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A contiguous request may fit no window: a request of 10 MiB or more needs a segment of
// its own, and no segment of its pool may be that large. What helps then is giving a whole
// segment back (the allocator releases fully free segments before it asks again), so pick
// the cheapest segment, of either pool, whose blocks are all free or evictable: among those
// spanning the request, the least cost; otherwise the least cost per byte spanned.
std::vector<StorageId> CandidateSearch::clear_segment(const std::vector<BlockView>& blocks,
                                                      uint64_t bytes_needed, uint64_t& scored) {
  std::vector<StorageId> best, current;
  bool best_spans = false;
  double best_key = 0;
  size_t i = 0;
  while (i < blocks.size()) {
    const uint64_t segment = blocks[i].segment_id;
    bool clearable = true;
    double cost = 0;
    uint64_t span = 0;
    current.clear();
    for (; i < blocks.size() && blocks[i].segment_id == segment; ++i) {
      const BlockView& b = blocks[i];
      span += b.size;
      if (!b.allocated || !clearable) continue;
      const StorageId s = evictable_owner(b);
      if (s == kNoId) {
        clearable = false;
        continue;
      }
      cost += window_score(s, scored);
      current.push_back(s);
    }
    if (!clearable || current.empty()) continue;
    const bool spans = span >= bytes_needed;
    const double key = spans ? cost : cost / double(span);
    if (best.empty() || (spans && !best_spans) || (spans == best_spans && key < best_key)) {
      best = current;
      best_spans = spans;
      best_key = key;
    }
  }
  return best;
}

}  // namespace dtr
