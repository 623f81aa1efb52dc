// planner.cpp: what every method shares: the budget check and run_planner().
#include "dtr/planner/planner.h"

#include <chrono>

#include "dtr/core/status.h"

namespace dtr {

uint64_t largest_op_need(const Graph& graph, uint32_t* node) {
  uint64_t best = 0;
  uint32_t arg = 0;
  for (uint32_t i = 0; i < graph.size(); ++i) {
    uint64_t need = graph.nodes[i].size_bytes;
    for (uint32_t d : graph.nodes[i].deps) need += graph.nodes[d].size_bytes;
    if (need > best) best = need, arg = i;
  }
  if (node) *node = arg;
  return best;
}

void check_budget(const Graph& graph, uint64_t budget_bytes) {
  uint32_t node = 0;
  const uint64_t need = largest_op_need(graph, &node);
  if (budget_bytes >= need) return;
  const GraphNode& n = graph.nodes[node];
  throw PlanError("budget " + format_bytes(budget_bytes) + " (" + std::to_string(budget_bytes) +
                  " B) is below the largest single op's need " + format_bytes(need) + " (" +
                  std::to_string(need) + " B: node " + std::to_string(node) + " '" + n.name +
                  "' of " + std::to_string(n.size_bytes) + " B and its " +
                  std::to_string(n.deps.size()) + " inputs); hint: no schedule fits, raise the " +
                  "budget to at least " + std::to_string(need) + " B");
}

PlanResult run_planner(Planner& planner, const Graph& graph, uint64_t budget_bytes,
                       const PlanOptions& options) {
  check_budget(graph, budget_bytes);
  const auto start = std::chrono::steady_clock::now();
  PlanResult r = planner.plan(graph, budget_bytes, options);
  r.solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.plan.method = planner.name();
  r.plan.budget_bytes = budget_bytes;
  bind_plan(r.plan, graph, options.trace_name);
  if (r.plan.decisions.size() != graph.size()) r.plan.decisions.assign(graph.size(), NodeDecision::keep);
  const PlanEval e = evaluate_plan(graph, r.plan);
  r.predicted_compute_ns = e.compute_ns;
  r.predicted_peak_bytes = e.peak_bytes;
  r.plan.predicted_compute_ns = e.compute_ns;
  r.plan.predicted_peak_bytes = e.peak_bytes;
  r.feasible = e.peak_bytes <= budget_bytes;
  return r;
}

}  // namespace dtr
