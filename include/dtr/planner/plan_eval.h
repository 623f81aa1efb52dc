// plan_eval.h: the common evaluator: run a plan on a graph statically and measure it.
//
// Every planner's result goes through evaluate_plan(), so methods are compared by one
// memory and compute model (Note [Static execution] in planner/plan_eval.cpp):
//  - memory: the bytes of resident nodes; computing a node needs its deps resident and
//    adds its size; the peak is the maximum over all computations, each with the node's
//    op scratch held while it runs (Note [Op workspace in plans]).
//  - compute: every (re)computation costs the node's compute_ns, except that an op with
//    several outputs is charged once per run of it (Note [One run of a multi-output op]).
// With an explicit schedule the steps are executed as written (and checked); without one
// the per-node decisions drive a demand-driven execution in node order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtr/planner/graph.h"
#include "dtr/planner/plan.h"

namespace dtr {

struct PlanEval {
  uint64_t peak_bytes = 0;
  uint64_t compute_ns = 0;           // forward + backward + recomputation
  uint64_t baseline_compute_ns = 0;  // graph.total_compute_ns()
  uint64_t recompute_ns = 0;
  uint64_t recomputations = 0;       // node computations beyond the first
  double overhead = 1.0;             // compute_ns / baseline_compute_ns
};

// Runs `plan` (schedule if it has one, else decisions). Throws PlanError for a plan that
// does not fit the graph or a schedule that is not executable (a dependency not resident,
// a node never computed, a pinned node freed).
PlanEval evaluate_plan(const Graph& graph, const Plan& plan);
// The decisions-only execution, for planners that search over decisions.
PlanEval evaluate_decisions(const Graph& graph, const std::vector<NodeDecision>& decisions);
PlanEval evaluate_schedule(const Graph& graph, const std::vector<ScheduleStep>& schedule);

// The schedule that frees every node right after its last use before its next
// recomputation (pinned nodes are never freed), for a sequence of computations.
std::vector<ScheduleStep> schedule_with_frees(const Graph& graph,
                                              const std::vector<uint32_t>& compute_order);

}  // namespace dtr
