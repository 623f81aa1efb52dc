// warm_start.cpp: plan + graph -> the hints the engine's PlanGuide follows (warm_start.h).
//
// The rules mirror Note [Static execution] in plan_eval.cpp, node by node, with a node's
// uses being its users and its reads (Note [In-place writes] in graph.cpp):
//  - last_use: the node's last use, or the node itself when nothing uses it; pinned nodes
//    are never dropped (kNever);
//  - forward_drop / backward_use: for a `recompute` forward node, not pinned, that some
//    backward node uses: its last use before its first backward use (its last forward use
//    in its own step, or itself) and that first backward use. The guide drops it at a
//    forward stage between the two (eviction/plan_guide.cpp): each step of a trace of
//    several training steps has its own backward pass, so each node's own step decides;
//  - a late-pinned node (Note [Late pins] in graph.cpp) is ordinary before its pin, whose
//    stage counts as one more use: marked `recompute`, it gets a forward_drop too (the
//    next step's zeroed gradient buffers are dropped in its forward pass and made again
//    when the backward writes them), and is never dropped by last_use;
//  - last_use_read / forward_drop_read: that use is a read after its stage's op (Note
//    [Reads after a stage] in eviction/plan_guide.cpp).
// The dep fingerprint (count and sum of the distinct dep indices) lets the guide notice a
// run that is not the plan's program (Note [Warm start] in eviction/plan_guide.cpp).
#include "dtr/planner/warm_start.h"

#include <algorithm>
#include <fstream>

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
  hints.nodes.resize(graph.size());
  const auto users = graph.users();  // ascending per node
  const auto uses = graph.uses();    // users and reads (Note [In-place writes])
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
    h.backward = g.backward;
    h.dep_count = static_cast<uint32_t>(g.deps.size());
    for (uint32_t d : g.deps) h.dep_sum += d;
    // A pinned node is never dropped, but a late pin starts later: before it the node is
    // an ordinary one, and a `recompute` one is dropped in the forward pass (Note [Late
    // pins] in graph.cpp: the zeroed gradient buffers of the next step).
    const bool late = graph.pinned_late(j);
    if (g.pinned && !late) continue;
    // A read at stage q comes after the op that made node q (Note [In-place writes]).
    auto is_read = [&](uint32_t q) {
      return std::binary_search(g.reads.begin(), g.reads.end(), q);
    };
    std::vector<uint32_t> node_uses = uses[j];
    if (late) {
      const uint32_t q = graph.pin_stage(j);
      node_uses.erase(std::upper_bound(node_uses.begin(), node_uses.end(), q), node_uses.end());
      if (node_uses.empty() || node_uses.back() != q) node_uses.push_back(q);
    } else {
      h.last_use = node_uses.empty() ? j : std::max(j, node_uses.back());
      h.last_use_read = is_read(h.last_use);
    }
    if (plan.decisions[j] != NodeDecision::recompute || g.backward) continue;
    // Its own step's forward uses, up to the first backward use (Note [Static execution]
    // in plan_eval.cpp: a node is dropped at a forward stage whose next use is backward).
    uint32_t last_forward = j;
    for (uint32_t u : node_uses) {
      if (graph.nodes[u].backward) {
        h.forward_drop = last_forward;
        h.forward_drop_read = is_read(last_forward);
        h.backward_use = u;
        break;
      }
      last_forward = std::max(last_forward, u);
    }
  }
  return hints;
}

namespace {

std::shared_ptr<const PlanHints> hints_for(const Trace& trace, const Plan& plan,
                                           const std::string& plan_path) {
  const Graph graph = graph_from_trace(trace);
  check_plan_matches(plan, graph, plan_path, base_name(trace.path));
  return std::make_shared<const PlanHints>(
      plan_hints(graph, plan, base_name(plan_path) + " (" + plan.method + ")"));
}

}  // namespace

std::shared_ptr<const PlanHints> load_warm_start(const Trace& trace, const std::string& plan_path) {
  return hints_for(trace, read_plan(plan_path), plan_path);
}

std::shared_ptr<const PlanHints> load_warm_start(const std::string& plan_path,
                                                 const std::string& trace_path) {
  const Plan plan = read_plan(plan_path);  // read once: it names its trace
  std::string path = trace_path;
  if (path.empty()) {
    if (plan.trace.empty())
      throw PlanError("plan '" + plan_path + "' names no trace file; give the trace it was "
                      "made for with option plan_trace (DTR_PLAN_TRACE)");
    const size_t slash = plan_path.find_last_of('/');
    path = (slash == std::string::npos ? std::string() : plan_path.substr(0, slash + 1)) +
           base_name(plan.trace);
    if (!std::ifstream(path))
      throw PlanError("plan '" + plan_path + "' was made for trace '" + plan.trace +
                      "', which is not at " + path + "; give its path with option plan_trace "
                      "(DTR_PLAN_TRACE)");
  }
  return hints_for(read_trace(path), plan, plan_path);
}

}  // namespace dtr
