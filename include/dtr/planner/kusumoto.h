// kusumoto.h: the lower-set dynamic program of Kusumoto et al., "A graph theoretic framework
// of recomputation algorithms for memory-efficient backpropagation" (NeurIPS 2019).
//
// A strategy is an increasing sequence of lower sets of the forward graph (nodes before
// Graph::first_backward and the edges among them), 0 = L_0 < L_1 < ... < L_k = forward; the
// segments V_i = L_i \ L_{i-1} run in order in the forward pass, which keeps only each
// segment's boundary (nodes with a forward user outside L_i) and the whole last segment; the
// backward pass recomputes a segment's other nodes when it reaches them. The DP (planner/
// kusumoto_planner.cpp, Note [Kusumoto DP]) minimises recomputation subject to the paper's
// memory estimate, or (memory-centric) minimises the memory estimate. On a graph of several
// training steps each step's forward part gets its own DP (Note [Kusumoto over several
// steps]); forward_lower_sets() lists the first step's.
//
// Exact: over all lower sets (tractable only for small or narrow forward graphs; past
// KusumotoOptions::max_lower_sets it throws PlanTooLarge, planner.h). Approximate: over the
// lower sets of ancestors {v and its ancestors}, plus the empty and the full set (n + 2 sets).
//
// The chosen strategy becomes a Checkmate stage-form schedule (Note [Lower sets to stages])
// measured by evaluate_stage_schedule, the same accounting as the MILP, so its compute is directly
// comparable to the MILP optimum and can never be below it when it fits the budget.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtr/planner/checkmate.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/planner.h"

namespace dtr {

struct KusumotoOptions {
  uint64_t budget_bytes = 0;
  bool exact = true;            // all lower sets; false: lower sets of ancestors
  bool memory_centric = false;  // least memory (then least time) instead of least time
  size_t max_lower_sets = 4096;  // exact: more lower sets than this is PlanTooLarge
  // Entries kept per lower set's Pareto table (overhead -> least checkpoint memory); 0 keeps
  // them all, 1 keeps 2 (the cheapest and the leanest). Note [Bounded Pareto tables] in
  // planner/kusumoto_planner.cpp.
  size_t pareto_width = kKusumotoParetoWidth;
  // Seconds; 0: none. Past it the DPs stop and the best strategy measured by then is kept
  // (Note [Kusumoto time limit] in planner/kusumoto_planner.cpp).
  double time_limit_s = 0;
};

struct KusumotoResult {
  bool found = false;         // a schedule whose measured peak fits the budget
  StageSchedule schedule;     // the best schedule measured (also when it does not fit)
  ScheduleCost cost;          // evaluate_stage_schedule(graph, schedule)
  std::vector<std::vector<uint32_t>> segments;  // V_1..V_k, forward node ids
  size_t num_lower_sets = 0;  // lower sets the DP ran over
  uint64_t dp_budget_bytes = 0;  // the budget the DP was given for the chosen strategy
  uint64_t dp_overhead_ns = 0;   // the DP's own recomputation estimate for it
  double solve_s = 0;
  bool timed_out = false;  // the time limit stopped the search (detail says when)
  std::string detail;
};

KusumotoResult solve_kusumoto(const Graph& graph, const KusumotoOptions& opts);

// The lower sets of the forward graph, each as a sorted list of node ids, smallest first;
// exact: all of them (PlanTooLarge past `cap`), else the lower sets of ancestors.
std::vector<std::vector<uint32_t>> forward_lower_sets(const Graph& graph, bool exact, size_t cap);

// The DP alone (Note [Kusumoto DP]) on the first training step's forward part: the least
// overhead of a strategy within DP budget `dp_budget`, its tables bounded to `pareto_width`
// entries (0: unbounded), or nothing if no strategy fits. For tests of Note [Bounded Pareto
// tables]; plans come from solve_kusumoto.
std::optional<uint64_t> kusumoto_dp_overhead(const Graph& graph, uint64_t dp_budget, bool exact,
                                             size_t pareto_width);

}  // namespace dtr
