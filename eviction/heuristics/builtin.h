// builtin.h: the built-in heuristics, one file each under eviction/heuristics/.
// Adding a policy: write its file with a `*_info()` function, add one line here and one
// in heuristic_registry.cpp's table.
#pragma once

#include "dtr/eviction/heuristic_registry.h"

namespace dtr {
HeuristicInfo dtr_heuristic_info();
HeuristicInfo dtr_eq_heuristic_info();
HeuristicInfo dtr_ancestors_heuristic_info();
HeuristicInfo dtr_local_heuristic_info();
HeuristicInfo lru_heuristic_info();
HeuristicInfo size_heuristic_info();
HeuristicInfo msps_heuristic_info();
HeuristicInfo random_heuristic_info();
HeuristicInfo coop_heuristic_info();
HeuristicInfo auto_heuristic_info();

// size * staleness, the denominator of the DTR family; cost/0 is +inf (a storage touched
// this very tick is never the best victim).
double dtr_ratio(double cost, double size_bytes, double staleness_ticks);
}  // namespace dtr
