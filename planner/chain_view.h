// chain_view.h: how chain methods see a general graph (Note [Chains from DAGs]).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dtr/planner/planner.h"

namespace dtr {

struct ChainView {
  // Forward nodes that are neither pinned nor backward, in execution order, grouped into
  // contiguous stages G_1..G_L (stage_nodes[k-1] is G_k).
  std::vector<std::vector<uint32_t>> stage_nodes;
  // The chain model (Griewank's, graph.h ChainSpec) of those stages: a_0 is the input (size 0,
  // pinned bytes are outside the model), a_k (k < L) is the last node of G_k; the reversal of
  // step k re-runs G_k and then its backward nodes.
  ChainSpec spec;
  uint64_t model_budget(uint64_t budget_bytes, const Graph& graph) const;
};

ChainView make_chain_view(const Graph& graph, uint32_t max_stages);

// Decisions that keep the boundary node of every stage k in `states` (1 <= k < L) and
// recompute every other forward candidate and every node with a late pin (made again at
// its pin); backward and other pinned nodes are kept.
std::vector<NodeDecision> decisions_keeping(const Graph& graph, const ChainView& view,
                                            const std::vector<uint32_t>& states);

// The chain states a_k (k >= 1) resident when the first reversal runs, for a compute order
// over training_chain_graph(spec): the checkpoints a schedule stores in its first sweep.
std::vector<uint32_t> first_sweep_states(const ChainSpec& spec,
                                         const std::vector<uint32_t>& compute_order);

// Returns the keep-everything plan if it fits. Else calls `attempt(i)` for i = 0..count-1 (each returns decisions or an empty vector when the
// attempt has no plan), evaluates each, and returns the feasible one with the least compute,
// else the one with the least peak (feasible = false). Stops at the first feasible attempt
// when `stop_at_first_feasible`.
PlanResult best_of_attempts(const Graph& graph, uint64_t budget_bytes, size_t count,
                            const std::function<std::vector<NodeDecision>(size_t)>& attempt,
                            bool stop_at_first_feasible = false);

}  // namespace dtr
