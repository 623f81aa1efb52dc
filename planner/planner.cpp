// planner.cpp: what every method shares: the budget check, the plan floor and run_planner().
//
// Note [Plan floor]
// ~~~~~~~~~~~~~~~~~
// A pinned node is never freed once computed until its pin ends (Note [Pin ends] in
// graph.cpp), and the first computation of node i needs node i, its deps and its op's
// scratch (Note [Op workspace in plans] in plan_eval.cpp): so while node i is first
// computed, every plan holds those and all pinned nodes made before i whose pins still hold. The most of this over i is a floor
// no plan can go under, whatever the method (decisions or schedules, chain or MILP): when
// the budget is below it, every method returns INFEASIBLE, and dtr-plan says why instead
// of showing a bare status. On a training trace the floor is set by what a step keeps
// for good: parameters, and the gradients and optimizer state the next optimizer step
// reads. On the 2-step ResNet-18 trace of docs/planner.md it is 98.85 MiB (0.809 of the
// baseline peak) at the stem's batch-norm backward near the end of the second step:
// 44.16 MiB of CONSTANTs (parameters, both input batches), 42.69 MiB of gradients already
// accumulated (written in place by the backward pass into the buffers zero_grad made,
// pinned by the optimizer step) and 12 MiB for the op. The dynamic runtime goes lower
// (dtr_eq fits 0.79): it may evict an accumulated
// gradient before the optimizer pins it and recompute it through its in-place lineage,
// which the graph cannot express (an in-place write's inputs are newer than the storage
// it writes, so they cannot be its deps; Note [Trace to graph] folds the write into the
// storage's node).
#include "dtr/planner/planner.h"

#include <chrono>

#include "dtr/core/status.h"

namespace dtr {

uint64_t largest_op_need(const Graph& graph, uint32_t* node) {
  uint64_t best = 0;
  uint32_t arg = 0;
  for (uint32_t i = 0; i < graph.size(); ++i) {
    uint64_t need = graph.nodes[i].size_bytes + graph.nodes[i].workspace_bytes;
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
  throw BudgetBelowOpNeed(
      "budget " + format_bytes(budget_bytes) + " (" + std::to_string(budget_bytes) +
      " B) is below the largest single op's need " + format_bytes(need) + " (" +
      std::to_string(need) + " B: node " + std::to_string(node) + " '" + n.name + "' of " +
      std::to_string(n.size_bytes) + " B, its " + std::to_string(n.deps.size()) + " inputs and " +
      std::to_string(n.workspace_bytes) +
      " B of scratch while it runs); hint: no schedule fits, raise the budget to at least " +
      std::to_string(need) + " B");
}

PlanFloor plan_floor(const Graph& graph) {
  PlanFloor best;
  const uint32_t n = static_cast<uint32_t>(graph.size());
  // Pinned node j counts from the stage after its computation, or from its late pin's
  // stage on (Note [Late pins] in graph.cpp), where it is needed as much as a dep, to its
  // pin's end.
  std::vector<std::vector<uint32_t>> starts(n + 1), ends(n + 1);
  for (uint32_t j = 0; j < n; ++j) {
    if (!graph.nodes[j].pinned) continue;
    const uint32_t start = graph.pinned_late(j) ? graph.pin_stage(j) : j + 1;
    if (graph.pin_ends(j) && graph.nodes[j].pinned_until < start) continue;
    starts[start].push_back(j);
    if (graph.pin_ends(j)) ends[graph.nodes[j].pinned_until + 1].push_back(j);
  }
  uint64_t pinned = 0;  // pinned nodes made before the current one, their pin holding
  uint32_t pinned_count = 0;
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j : starts[i]) {
      pinned += graph.nodes[j].size_bytes;
      ++pinned_count;
    }
    for (uint32_t j : ends[i]) {
      pinned -= graph.nodes[j].size_bytes;
      --pinned_count;
    }
    const GraphNode& node = graph.nodes[i];
    // The node, its scratch (Note [Op workspace in plans] in plan_eval.cpp) and its deps
    // not counted as pinned.
    uint64_t op = node.size_bytes + node.workspace_bytes;
    for (uint32_t d : node.deps)
      if (!graph.pinned_at(d, i)) op += graph.nodes[d].size_bytes;
    if (pinned + op > best.bytes || i == 0) {
      best.bytes = pinned + op;
      best.node = i;
      best.op_bytes = op;
      best.pinned_bytes = pinned;
      best.pinned_count = pinned_count;
    }
  }
  return best;
}

std::string describe_plan_floor(const Graph& graph, const PlanFloor& floor) {
  if (graph.size() == 0) return "the graph is empty";
  const GraphNode& n = graph.nodes[floor.node];
  return "every plan holds at least " + format_bytes(floor.bytes) + " (" +
         std::to_string(floor.bytes) + " B) while node " + std::to_string(floor.node) + " '" +
         n.name + "' is computed: " + format_bytes(floor.pinned_bytes) + " in " +
         std::to_string(floor.pinned_count) +
         " pinned nodes made before it, not freed before it (parameters and inputs, and what "
         "the trace pins or keeps to its end: gradients for the optimizer step, optimizer "
         "state, the step's outputs), and " +
         format_bytes(floor.op_bytes) + " for the node, its other inputs and its scratch";
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
