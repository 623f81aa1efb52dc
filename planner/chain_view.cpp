// chain_view.cpp: chain methods on a general DAG.
//
// Note [Chains from DAGs]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Chain methods (revolve, rotor, checkpoint-subset) are exact only for chains. A trace's
// graph is a DAG (residual connections, multi-output ops, weights used by many ops), so they
// work on its linearisation:
//  - the chain is the execution order of the forward nodes that are neither pinned nor
//    backward (parameters and outputs are resident anyway); on a graph of several
//    training steps, the forward passes of all steps one after the other (each step's
//    backward nodes are charged to the stages their forward inputs lie in, below);
//  - it is cut into at most `max_stages` contiguous stages of about equal compute; stage k's
//    state a_k is its last node, of that node's size (a cut of a DAG may hold more: a
//    residual input, say; the evaluator charges what really stays resident);
//  - the reversal of stage k costs the stage's forward compute (it is re-run) plus the
//    compute of the backward nodes whose latest forward dependency lies in stage k, and holds
//    the stage's nodes (their total size stands in for its working memory);
//  - the method's plan on that chain is reduced to the states it stores during its first
//    forward sweep: those stage boundaries are kept, every other forward node is recomputed,
//    and evaluate_decisions() (Note [Static execution]) measures the real peak and compute.
// The model is approximate, so planners try several model budgets (best_of_attempts) and
// keep the cheapest plan whose *evaluated* peak fits.
#include "planner/chain_view.h"

#include <algorithm>

namespace dtr {

uint64_t ChainView::model_budget(uint64_t budget_bytes, const Graph& graph) const {
  // Forward pinned nodes (parameters, inputs, dropout masks) are resident while their pins
  // hold, and the most of them resident at once is taken from the budget; backward pinned
  // nodes (gradients) accumulate during the backward, which the chain model does not see,
  // so they are left to the evaluator (attempts at smaller model budgets absorb them).
  const size_t n = graph.size();
  std::vector<int64_t> delta(n + 1, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const GraphNode& node = graph.nodes[i];
    if (!node.pinned || node.backward) continue;
    delta[graph.pin_stage(i)] += static_cast<int64_t>(node.size_bytes);
    if (graph.pin_ends(i)) delta[node.pinned_until + 1] -= static_cast<int64_t>(node.size_bytes);
  }
  int64_t now = 0, most = 0;
  for (size_t t = 0; t <= n; ++t) most = std::max(most, now += delta[t]);
  const auto pinned = static_cast<uint64_t>(most);
  return budget_bytes > pinned ? budget_bytes - pinned : 0;
}

ChainView make_chain_view(const Graph& graph, uint32_t max_stages) {
  std::vector<uint32_t> candidates;
  uint64_t total = 0;
  for (uint32_t i = 0; i < graph.size(); ++i)
    if (!graph.nodes[i].pinned && !graph.nodes[i].backward) {
      candidates.push_back(i);
      total += graph.nodes[i].compute_ns + 1;  // +1: zero-cost nodes still spread out
    }
  ChainView v;
  const uint32_t L = std::max<uint32_t>(
      1, std::min<uint32_t>(std::max<uint32_t>(max_stages, 2), static_cast<uint32_t>(candidates.size())));
  if (candidates.empty()) {
    v.spec = ChainSpec{{0}, {0}, {0}, {0}};
    v.stage_nodes.assign(1, {});
    return v;
  }
  // Equal-compute cut: stage k ends once the running total passes k/L of the whole.
  v.stage_nodes.assign(L, {});
  uint64_t running = 0;
  uint32_t k = 0;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const uint32_t x = candidates[c];
    v.stage_nodes[k].push_back(x);
    running += graph.nodes[x].compute_ns + 1;
    const size_t left = candidates.size() - c - 1;
    const uint32_t stages_left = L - k - 1;
    if (stages_left > 0 && (left == stages_left || running * L >= total * (k + 1))) ++k;
  }
  v.stage_nodes.resize(k + 1);
  const size_t stages = v.stage_nodes.size();
  std::vector<uint32_t> stage_of(graph.size(), UINT32_MAX);
  for (size_t s = 0; s < stages; ++s)
    for (uint32_t x : v.stage_nodes[s]) stage_of[x] = static_cast<uint32_t>(s);
  v.spec.fwd_ns.assign(stages, 0);
  v.spec.fwd_bytes.assign(stages, 0);
  v.spec.bwd_ns.assign(stages, 0);
  v.spec.bwd_bytes.assign(stages, 0);
  for (size_t s = 0; s < stages; ++s) {
    uint64_t cost = 0, bytes = 0;
    for (uint32_t x : v.stage_nodes[s]) {
      if (!graph.nodes[x].same_op_as_prev) cost += graph.nodes[x].compute_ns;
      bytes += graph.nodes[x].size_bytes;
    }
    // a_s for s >= 1 is the end of G_s (stage index s-1 here is G_s when s >= 1).
    if (s + 1 < stages) {
      v.spec.fwd_ns[s + 1] = cost;
      v.spec.fwd_bytes[s + 1] = graph.nodes[v.stage_nodes[s].back()].size_bytes;
    }
    v.spec.bwd_ns[s] = cost;
    v.spec.bwd_bytes[s] = bytes;
  }
  uint32_t last_stage = static_cast<uint32_t>(stages - 1);
  for (uint32_t i = graph.first_backward; i < graph.size(); ++i) {
    if (!graph.nodes[i].backward) continue;  // a later step's forward pass
    uint32_t st = UINT32_MAX;
    for (uint32_t d : graph.nodes[i].deps)
      if (stage_of[d] != UINT32_MAX) st = st == UINT32_MAX ? stage_of[d] : std::max(st, stage_of[d]);
    if (st == UINT32_MAX) st = last_stage;
    last_stage = st;
    if (!graph.nodes[i].same_op_as_prev) v.spec.bwd_ns[st] += graph.nodes[i].compute_ns;
  }
  return v;
}

std::vector<NodeDecision> decisions_keeping(const Graph& graph, const ChainView& view,
                                            const std::vector<uint32_t>& states) {
  std::vector<NodeDecision> d(graph.size(), NodeDecision::keep);
  for (const auto& stage : view.stage_nodes)
    for (uint32_t x : stage) d[x] = NodeDecision::recompute;
  for (uint32_t i = 0; i < graph.size(); ++i)  // Note [Late pins] in graph.cpp
    if (graph.pinned_late(i)) d[i] = NodeDecision::recompute;
  for (uint32_t k : states)
    if (k >= 1 && k <= view.stage_nodes.size() && !view.stage_nodes[k - 1].empty())
      d[view.stage_nodes[k - 1].back()] = NodeDecision::keep;
  return d;
}

std::vector<uint32_t> first_sweep_states(const ChainSpec& spec,
                                         const std::vector<uint32_t>& compute_order) {
  const Graph g = training_chain_graph(spec);
  const std::vector<ScheduleStep> steps = schedule_with_frees(g, compute_order);
  std::vector<char> resident(g.size(), 0);
  for (const ScheduleStep& s : steps) {
    if (s.kind == ScheduleStep::Kind::compute && s.node >= g.first_backward) break;
    resident[s.node] = s.kind == ScheduleStep::Kind::compute;
  }
  std::vector<uint32_t> states;
  for (uint32_t k = 1; k < g.first_backward; ++k)
    if (resident[k]) states.push_back(k);
  return states;
}

PlanResult best_of_attempts(const Graph& graph, uint64_t budget_bytes, size_t count,
                            const std::function<std::vector<NodeDecision>(size_t)>& attempt,
                            bool stop_at_first_feasible) {
  PlanResult best;
  bool have = false;
  // Keeping everything has the least possible compute: when it fits, it is the answer.
  {
    std::vector<NodeDecision> all(graph.size(), NodeDecision::keep);
    const PlanEval e = evaluate_decisions(graph, all);
    if (e.peak_bytes <= budget_bytes) {
      best.plan.decisions = std::move(all);
      best.feasible = true;
      best.predicted_compute_ns = e.compute_ns;
      best.predicted_peak_bytes = e.peak_bytes;
      return best;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    std::vector<NodeDecision> d = attempt(i);
    if (d.empty()) continue;
    const PlanEval e = evaluate_decisions(graph, d);
    const bool fits = e.peak_bytes <= budget_bytes;
    const bool better = !have || (fits && !best.feasible) ||
                        (fits && best.feasible && e.compute_ns < best.predicted_compute_ns) ||
                        (!fits && !best.feasible && e.peak_bytes < best.predicted_peak_bytes);
    if (better) {
      best.plan.decisions = std::move(d);
      best.feasible = fits;
      best.predicted_compute_ns = e.compute_ns;
      best.predicted_peak_bytes = e.peak_bytes;
      have = true;
    }
    if (fits && stop_at_first_feasible) break;
  }
  if (!have) best.plan.decisions.assign(graph.size(), NodeDecision::keep);
  return best;
}

}  // namespace dtr
