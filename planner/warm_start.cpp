// warm_start.cpp: plan + graph -> the hints the engine's PlanGuide follows (warm_start.h).
//
// The rules mirror Note [Static execution] in plan_eval.cpp, node by node:
//  - last_use: the node's last user, or the node itself when nothing reads it; pinned
//    nodes are never dropped (kNever), late pins included (Note [Late pins] in graph.cpp:
//    the guide does not drop a zeroed gradient before the backward writes it, the
//    engine's heuristic may);
//  - forward_drop: for a `recompute` forward node, not pinned, that some backward node
//    reads: its last user before the first backward user (its last forward use), or
//    itself when only the backward reads it. A node the backward does not read just dies
//    after its last use. The guide drops on forward_drop only while its stage is before
//    first_backward (eviction/plan_guide.cpp): it knows one backward pass. On a graph of
//    several training steps the drops of the later steps' forward values are therefore
//    not hinted (forward_drop stays kNever for them); a warm run follows the plan's drops
//    in the first step and leaves the later steps to its heuristic (docs/planner.md).
// The dep fingerprint (count and sum of the distinct dep indices) lets the guide notice a
// run that is not the plan's program (Note [Warm start] in eviction/plan_guide.cpp).
#include "dtr/planner/warm_start.h"

#include <algorithm>

namespace dtr {

namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

PlanHints plan_hints(const Graph& graph, const Plan& plan, const std::string& source) {
  if (plan.decisions.size() != graph.size())
    throw PlanError("plan has " + std::to_string(plan.decisions.size()) +
                    " decisions for a graph of " + std::to_string(graph.size()) +
                    " nodes; hint: make the plan for this trace with `dtr-plan`");
  PlanHints hints;
  hints.source = source;
  hints.first_backward = graph.first_backward;
  hints.nodes.resize(graph.size());
  const auto users = graph.users();  // ascending per node
  hints.user_begin.reserve(graph.size() + 1);
  for (uint32_t j = 0; j < graph.size(); ++j) {
    hints.user_begin.push_back(static_cast<uint32_t>(hints.users.size()));
    hints.users.insert(hints.users.end(), users[j].begin(), users[j].end());
  }
  hints.user_begin.push_back(static_cast<uint32_t>(hints.users.size()));
  for (uint32_t j = 0; j < graph.size(); ++j) {
    const GraphNode& g = graph.nodes[j];
    PlanHints::Node& h = hints.nodes[j];
    h.size_bytes = g.size_bytes;
    h.dep_count = static_cast<uint32_t>(g.deps.size());
    for (uint32_t d : g.deps) h.dep_sum += d;
    if (g.pinned) continue;
    h.last_use = users[j].empty() ? j : std::max(j, users[j].back());
    if (plan.decisions[j] != NodeDecision::recompute || g.backward) continue;
    uint32_t last_forward = j;
    bool backward_user = false;
    for (uint32_t u : users[j]) {
      if (graph.nodes[u].backward) {
        backward_user = true;
        break;
      }
      last_forward = std::max(last_forward, u);
    }
    if (backward_user && last_forward < graph.first_backward) h.forward_drop = last_forward;
  }
  return hints;
}

std::shared_ptr<const PlanHints> load_warm_start(const Trace& trace, const std::string& plan_path) {
  const Plan plan = read_plan(plan_path);
  const Graph graph = graph_from_trace(trace);
  check_plan_matches(plan, graph, plan_path, base_name(trace.path));
  return std::make_shared<const PlanHints>(
      plan_hints(graph, plan, base_name(plan_path) + " (" + plan.method + ")"));
}

}  // namespace dtr
