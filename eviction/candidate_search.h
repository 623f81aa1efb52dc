// candidate_search.h: how the engine picks the storage to evict.
//
// The heuristic scores; this chooses. `full_scan` scores every storage in the pool (or in a part of
// it) and reproduces DTR's simulator's choice exactly (Note [Tie-breaking] in engine.cpp): the
// least cost wins; among equal costs, the storage that entered the pool last; a zero cost wins at
// once, the earliest such. `sample` scores k storages drawn uniformly with replacement (k =
// ceil(sqrt(pool size)) unless configured), as DTR's prototype does, and picks the best of them by
// the same rule. `window` serves policies that read address order (coop): the cheapest run of
// adjacent blocks whose eviction frees enough (Note [Window search] in candidate_search.cpp), or
// else a whole segment to give back (Note [Segment fallback]). Private to the eviction layer.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "dtr/eviction/engine.h"

namespace dtr {

class CandidateSearch {
 public:
  CandidateSearch(const Engine& engine, Heuristic& heuristic, std::mt19937_64& rng,
                  std::vector<std::pair<double, StorageId>>& scratch)
      : engine_(engine), heuristic_(heuristic), rng_(rng), bounded_(scratch) {}

  // Scores every storage of `candidates` (the pool, or a part of it: Note [Dead storages
  // first] in engine.cpp), which must not be empty.
  StorageId full_scan(const std::vector<StorageId>& candidates, uint64_t& scored);
  StorageId sample(uint32_t sample_size, uint64_t& scored);
  // The score of the storage the last full_scan or sample returned.
  double chosen_cost() const { return chosen_cost_; }
  // The evictable storages of the cheapest window over `blocks` (address order) that frees
  // `bytes_needed` budget bytes, or, when `contiguous`, spans `bytes_needed` bytes of one
  // segment; empty if no window qualifies.
  std::vector<StorageId> window(const std::vector<BlockView>& blocks, uint64_t bytes_needed,
                                bool contiguous, uint64_t& scored);
  // The storages of the cheapest segment that could be emptied: Note [Segment fallback].
  std::vector<StorageId> clear_segment(const std::vector<BlockView>& blocks,
                                       uint64_t bytes_needed, uint64_t& scored);

 private:
  StorageId evictable_owner(const BlockView& b) const;
  double window_score(StorageId s, uint64_t& scored);

  struct Best {
    StorageId id = kNoId;
    double cost = 0;
    uint64_t seq = 0;
    void offer(StorageId s, double c, uint64_t q);
    double cutoff() const;  // Note [Cutoff scores] in candidate_search.cpp
  };

  const Engine& engine_;
  Heuristic& heuristic_;
  std::mt19937_64& rng_;
  std::vector<std::pair<double, StorageId>>& bounded_;  // reused between searches
  double chosen_cost_ = 0;
};

}  // namespace dtr
