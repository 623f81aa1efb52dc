// builtin.h: the built-in heuristics, one file each under eviction/heuristics/.
// Adding a policy: write its file with a `*_info()` function, add one line here and one
// in heuristic_registry.cpp's table.
#pragma once

#include "dtr/eviction/heuristic_registry.h"

namespace dtr {
HeuristicInfo dtr_heuristic_info();
HeuristicInfo dtr_eq_heuristic_info();
HeuristicInfo dtr_eq_keep_heuristic_info();
HeuristicInfo dtr_ancestors_heuristic_info();
HeuristicInfo dtr_local_heuristic_info();
HeuristicInfo lru_heuristic_info();
HeuristicInfo size_heuristic_info();
HeuristicInfo msps_heuristic_info();
HeuristicInfo random_heuristic_info();
HeuristicInfo coop_heuristic_info();
HeuristicInfo auto_heuristic_info();

// dtr_eq's scores; with keep_ratio > 0, policy dtr_eq_keep, which keeps by that ratio
// (Heuristic::keep_near_large; Note [Keeping as a candidate] in dtr_eq_keep_heuristic.cpp).
std::unique_ptr<Heuristic> make_dtr_eq(const HeuristicParams& params, double keep_ratio);

// size * staleness, the denominator of the DTR family; cost/0 is +inf (a storage touched
// this very tick is never the best victim).
double dtr_ratio(double cost, double size_bytes, double staleness_ticks);

// (compute(s) + compute of s's evicted descendants if `descendants` + of its evicted
// ancestors) / denom, +inf where denom is not above 0: the score of dtr, dtr_ancestors and
// msps. Its graph searches stop once the score is known to pass `cutoff` (+inf: never),
// and it then returns a value above cutoff (Note [Cutoff scores] in candidate_search.cpp).
double neighborhood_ratio(const Engine& e, StorageId s, double denom, bool descendants,
                          double cutoff);
}  // namespace dtr
