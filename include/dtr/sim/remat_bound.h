// remat_bound.h: the least recomputation any schedule pays to run a trace under a budget.
//
// A policy's overhead alone does not say whether a better schedule exists. This bound holds
// for every schedule the engine can run (every policy, static plan or warm start, under
// either memory model): it looks at the moments where the program itself forces memory to
// be given up, and charges each storage that must go the least its re-making can cost
// (Note [Remat bound] in sim/remat_bound.cpp). It is a bound, not a schedule: a policy at the
// bound is optimal, a policy above it may or may not be.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtr/core/trace.h"
#include "dtr/sim/replay.h"

namespace dtr {

// One op run of the trace where the budget forces storages out.
struct BoundPoint {
  size_t event = 0;   // index into Trace::events
  uint32_t line = 0;  // its line in the trace file (0 for a trace built in memory)
  std::string op;
  // What must be resident while it runs: its args' storages, its outputs, and every live
  // constant and pinned storage.
  uint64_t resident_bytes = 0;
  // Other storages made before it and used after it (by the program: an arg, a PIN, or
  // still referenced at the end): each resident then, or made again after it.
  uint64_t needed_bytes = 0;
  uint64_t drop_bytes = 0;  // resident + needed - budget: what cannot stay
  uint64_t remat_ns = 0;    // the least re-making dropping that much can cost
  // True where the dead args of its re-makings were not priced (Note [Dead args] in
  // sim/remat_bound.cpp): Clp proved no optimum, or the rounds of Note [Points worth a linear
  // program] ran out before the point was solved. remat_ns is then the knapsack's: still a
  // bound, perhaps a looser one.
  bool dead_args_unpriced = false;
};

struct RematBound {
  uint64_t budget_bytes = 0;
  uint64_t baseline_compute_ns = 0;
  // False when some op's resident bytes alone exceed the budget: no schedule runs the trace.
  bool feasible = true;
  uint64_t remat_ns = 0;  // the bound: sum of `points`' remat_ns
  double overhead = 1.0;  // 1 + remat_ns / baseline_compute_ns (as ReplayResult::overhead)
  // The points summed: op runs whose forced re-makings are disjoint, in trace order.
  std::vector<BoundPoint> points;
  size_t points_dead_args_unpriced = 0;  // of `points`, those with dead_args_unpriced
  // The op run that needs the most resident bytes (why the bound is infeasible, if it is).
  BoundPoint most_resident;
};

// Sweeps that solve points with their dead args (Note [Points worth a linear program] in
// sim/remat_bound.cpp); 0 prices every point by the knapsack alone, a looser bound, fast.
inline constexpr size_t kBoundLpRounds = 8;

// The bound for `trace` at `budget_bytes`; `baseline` is compute_baseline(trace).
RematBound remat_bound(const Trace& trace, const Baseline& baseline, uint64_t budget_bytes,
                       size_t lp_rounds = kBoundLpRounds);

// A few lines for a terminal: the bound, then up to `max_points` points, largest first.
std::string format_remat_bound(const RematBound& bound, size_t max_points = 5);

}  // namespace dtr
