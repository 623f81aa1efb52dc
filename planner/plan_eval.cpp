// plan_eval.cpp: static execution of a plan on a graph (plan_eval.h).
//
// Note [Static execution]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Decisions mode runs one *stage* per node, in node order. Stage i computes node i after
// making its deps resident: a dep that is not resident is recomputed, together with every
// missing ancestor down to resident nodes, in node order (a demand-driven rematerialization
// with no memory limit: the evaluator measures, it does not enforce a budget).
// After each computation a node is freed as soon as nothing in the stage still needs it and
//  - it has no user after the current stage (its last use has passed), or
//  - it is a `recompute` forward node computed in the forward pass (not a recomputation),
//    the current stage is a forward node, and its next user is a backward node: this is
//    the drop that a checkpointing plan saves. "Forward" and "backward" are the nodes'
//    flags, not one cut: a graph of several training steps has a backward pass per step
//    (Note [Backward passes of a recorded trace] in graph.cpp), and each step's forward
//    values are dropped before its own backward pass. On a graph with one backward pass
//    this is the cut at first_backward.
// A node recomputed in the backward stays until its last use, so a segment between two
// checkpoints is recomputed once and then consumed, as in Chen et al.'s scheme; `keep`
// nodes stay from their computation to their last use; pinned nodes are never freed, or
// freed at the end of their pin (Note [Pin ends] in graph.cpp) and never made again.
// A late pin (Note [Late pins] in graph.cpp) starts at stage q = pinned_from: stage q
// needs the node resident (recomputing it if it was dropped), and for the rules above q
// is one more use of it; before q the node is an ordinary one. A node's `reads` (Note
// [In-place writes] in graph.cpp) are such uses too. Schedule mode does not check reads:
// a schedule's planner (revolve, rotor, checkmate) sees deps only.
// Schedule mode executes compute/free steps verbatim and checks them: deps resident at
// each compute, no compute of a resident node, no free of a pinned or absent node (a late
// pinned node may be freed before its pin's node is first computed, and must be resident
// then; a node whose pin ends may be freed once its end's node is computed, and is never
// computed again), every node computed at least once, every pinned node whose pin does not
// end resident at the end.
//
// Note [One run of a multi-output op]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A multi-output op (batch norm: its output and saved statistics) is one node per output,
// each carrying the op's cost (`same_op_as_prev` marks the later ones). Running the op
// makes all of them, and the runtime reruns it once for all its outputs
// (eviction/engine.cpp), so the evaluator charges one run, not one per output node:
//  - the first computation of a later output is free (the forward run made it with the
//    first; that one was computed before);
//  - a recomputation of node x is free when the computation just before it (frees in
//    between do not count) was of an earlier output of x's op (Graph::same_run): both come
//    out of one rerun.
// `recomputations` still counts every node made again; `recompute_ns` counts what is
// charged. Outputs share a rerun only in ascending order: decisions mode and stage form
// (checkmate_milp.cpp, which charges the same) compute in node order; a written schedule
// that makes them in another order pays a run for each. Before this rule a recomputed
// segment paid a batch norm once per output it reran, three times where the engine reruns
// it once: on a ResNet-18 trace recorded from PyTorch, rotor's plan at 0.9 was evaluated at
// 1.1845 and is now at 1.1560 (its warm run: 1.0904; docs/planner.md, "Warm start").
// Not modelled: a rerun makes every output, also those the stage does not need (the
// runtime holds them until they are evicted; the evaluator does not count them).
//
// Note [Remat cost in plans]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A node's first computation costs compute_ns and each recomputation remat_cost(), which
// differs where the trace gave REMAT_TIME (a dropout mask the torch host keeps packed and
// unpacks, about ten times cheaper than drawing it again; Note [Remat cost] in
// eviction/engine.cpp). The engine charges the same, so a plan and a dynamic policy are
// priced alike in `dtr-plan compare`. Both modes here and Checkmate's stage form
// (checkmate_milp.cpp: R[t][i] with i < t) charge it, and Kusumoto's DP scores
// recomputations with it. The chain methods (chen, revolve, rotor, checkpoint-subset) plan
// on stage costs made of compute_ns (chain_view.cpp): they may miss a plan that is only
// better through cheap remats, but the cost they report is this evaluation's.
//
// Note [Op workspace in plans]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An op may hold scratch while it runs and free it before it returns (a trace's WORKSPACE,
// GraphNode::workspace_bytes: a convolution's columns, a backward convolution's copy of its
// gradient). The engine makes room for the outputs and the scratch together, at the first
// run and at every remat, and counts both in its peak (Note [Op workspace] in
// eviction/engine.cpp). So a computation of node x here peaks at the resident bytes, x
// included, plus x's scratch; the scratch is gone before anything else is computed or
// freed. Every output of a multi-output op carries the op's scratch, so a run that makes
// several outputs peaks with all of them and the scratch, as the engine's does. The same
// charge is made by both modes here, by the stage form (evaluate_stage_schedule and the
// MILP's memory rows, Note [Checkmate memory accounting] in checkmate_milp.cpp) and by the
// plan floor (Note [Plan floor] in planner.cpp). Before it, a plan for a trace with
// scratch could fit its budget on paper and not in the engine: on a 2-step ResNet-18
// trace, 19 of the 29 plans that fit budgets of 100-116 MiB were over with their scratch
// (docs/planner.md, "Op scratch in plans"). The other methods' own search models (chain
// stage sizes, Kusumoto's DP terms) do not see it; their plans are measured here, and a
// method keeps only a measured fit (chain_view.cpp, Note [DP budget search]).
#include "dtr/planner/plan_eval.h"

#include <algorithm>

namespace dtr {

namespace {

void finish(const Graph& graph, PlanEval& e) {
  e.baseline_compute_ns = graph.total_compute_ns();
  e.overhead = e.baseline_compute_ns ? double(e.compute_ns) / double(e.baseline_compute_ns) : 1.0;
}

}  // namespace

PlanEval evaluate_decisions(const Graph& graph, const std::vector<NodeDecision>& decisions) {
  const size_t n = graph.size();
  if (decisions.size() != n)
    throw PlanError("plan has " + std::to_string(decisions.size()) + " decisions for a graph of " +
                    std::to_string(n) + " nodes");
  // Uses of each node, ascending (its users and reads), with a late pin's stage as one
  // more use; the nodes each stage must find resident because their pin starts there or
  // something that makes no node reads them there.
  auto users = graph.uses();
  std::vector<std::vector<uint32_t>> pins_at(n), ends_at(n);
  for (uint32_t j = 0; j < n; ++j) {
    if (graph.pin_ends(j)) ends_at[graph.nodes[j].pinned_until].push_back(j);
    for (uint32_t q : graph.nodes[j].reads)
      if (q > j) pins_at[q].push_back(j);  // a read at its own stage: it was just made
    if (!graph.pinned_late(j)) continue;
    const uint32_t q = graph.nodes[j].pinned_from;
    pins_at[q].push_back(j);
    auto at = std::lower_bound(users[j].begin(), users[j].end(), q);
    if (at == users[j].end() || *at != q) users[j].insert(at, q);
  }
  std::vector<uint32_t> next_user_pos(n, 0);  // index into users[j] of the first user > stage
  std::vector<char> resident(n, 0), remat(n, 0), computed(n, 0);
  std::vector<uint32_t> pending(n, 0);
  PlanEval e;
  uint64_t live = 0;
  std::vector<uint32_t> todo, stack;
  uint32_t prev = UINT32_MAX;  // the last node computed (Note [One run of a multi-output op])

  auto next_use_after = [&](uint32_t j, uint32_t stage) -> uint32_t {
    uint32_t& p = next_user_pos[j];
    while (p < users[j].size() && users[j][p] <= stage) ++p;
    return p < users[j].size() ? users[j][p] : UINT32_MAX;
  };
  auto maybe_free = [&](uint32_t j, uint32_t stage) {
    if (!resident[j] || pending[j] > 0) return;
    if (graph.never_freed(j, stage)) return;
    const uint32_t next = next_use_after(j, stage);
    bool drop = next == UINT32_MAX;
    if (!drop && decisions[j] == NodeDecision::recompute && !graph.nodes[j].backward && !remat[j] &&
        !graph.nodes[stage].backward && graph.nodes[next].backward)
      drop = true;
    if (drop) {
      resident[j] = 0;
      live -= graph.nodes[j].size_bytes;
    }
  };

  for (uint32_t i = 0; i < n; ++i) {
    // The missing ancestors of node i, collected by a search that stops at resident nodes.
    todo.clear();
    stack.assign(graph.nodes[i].deps.begin(), graph.nodes[i].deps.end());
    stack.insert(stack.end(), pins_at[i].begin(), pins_at[i].end());
    std::vector<uint32_t>& seen = todo;  // todo doubles as the visited list
    while (!stack.empty()) {
      const uint32_t d = stack.back();
      stack.pop_back();
      if (resident[d] || pending[d] == UINT32_MAX) continue;
      pending[d] = UINT32_MAX;  // mark visited
      seen.push_back(d);
      for (uint32_t dd : graph.nodes[d].deps) stack.push_back(dd);
    }
    std::sort(todo.begin(), todo.end());
    todo.push_back(i);
    for (uint32_t x : todo) pending[x] = 0;
    for (uint32_t x : todo)
      for (uint32_t d : graph.nodes[x].deps) ++pending[d];
    for (uint32_t x : todo) {
      const GraphNode& node = graph.nodes[x];
      live += node.size_bytes;
      e.peak_bytes =
          std::max(e.peak_bytes, live + node.workspace_bytes);  // Note [Op workspace in plans]
      resident[x] = 1;
      if (computed[x]) {
        remat[x] = 1;
        ++e.recomputations;
        if (!graph.same_run(prev, x)) {
          e.recompute_ns += node.remat_cost();  // Note [Remat cost in plans]
          e.compute_ns += node.remat_cost();
        }
      } else {
        computed[x] = 1;
        if (!(node.same_op_as_prev && computed[x - 1])) e.compute_ns += node.compute_ns;
      }
      prev = x;
      for (uint32_t d : node.deps) {
        --pending[d];
        maybe_free(d, i);
      }
    }
    maybe_free(i, i);
    for (uint32_t j : pins_at[i]) maybe_free(j, i);  // a read may have been its last use
    for (uint32_t j : ends_at[i]) maybe_free(j, i);  // its pin ends here
  }
  finish(graph, e);
  return e;
}

PlanEval evaluate_schedule(const Graph& graph, const std::vector<ScheduleStep>& schedule) {
  const size_t n = graph.size();
  std::vector<char> resident(n, 0), computed(n, 0);
  std::vector<std::vector<uint32_t>> pins_at(n);  // late pins, by the node they start at
  for (uint32_t j = 0; j < n; ++j)
    if (graph.pinned_late(j)) pins_at[graph.nodes[j].pinned_from].push_back(j);
  PlanEval e;
  uint64_t live = 0;
  uint32_t prev = UINT32_MAX;  // the last node computed (Note [One run of a multi-output op])
  auto where = [&](size_t k, uint32_t x) {
    return "schedule step " + std::to_string(k) + " (node " + std::to_string(x) + " '" +
           graph.nodes[x].name + "')";
  };
  for (size_t k = 0; k < schedule.size(); ++k) {
    const ScheduleStep& s = schedule[k];
    if (s.node >= n) throw PlanError("schedule step " + std::to_string(k) + " names a node out of range");
    const GraphNode& node = graph.nodes[s.node];
    if (s.kind == ScheduleStep::Kind::free) {
      if (!resident[s.node]) throw PlanError(where(k, s.node) + " frees a node that is not resident");
      if (node.pinned && computed[graph.pin_stage(s.node)] &&
          !(graph.pin_ends(s.node) && computed[node.pinned_until]))
        throw PlanError(where(k, s.node) + " frees a pinned node");
      resident[s.node] = 0;
      live -= node.size_bytes;
      continue;
    }
    if (resident[s.node]) throw PlanError(where(k, s.node) + " computes a node that is resident");
    if (computed[s.node] && graph.pin_ends(s.node) && computed[node.pinned_until])
      throw PlanError(where(k, s.node) + " computes a node again after its pin ended");
    for (uint32_t d : node.deps)
      if (!resident[d])
        throw PlanError(where(k, s.node) + " needs node " + std::to_string(d) + " '" +
                        graph.nodes[d].name + "', which is not resident");
    if (!computed[s.node])
      for (uint32_t p : pins_at[s.node])
        if (!resident[p])
          throw PlanError(where(k, s.node) + " starts the pin of node " + std::to_string(p) + " '" +
                          graph.nodes[p].name + "', which is not resident");
    live += node.size_bytes;
    e.peak_bytes =
        std::max(e.peak_bytes, live + node.workspace_bytes);  // Note [Op workspace in plans]
    resident[s.node] = 1;
    const bool again = computed[s.node];
    const bool shared =
        again ? graph.same_run(prev, s.node) : node.same_op_as_prev && computed[s.node - 1];
    const uint64_t cost =
        again ? node.remat_cost() : node.compute_ns;  // Note [Remat cost in plans]
    if (again) {
      ++e.recomputations;
      if (!shared) e.recompute_ns += cost;
    }
    computed[s.node] = 1;
    if (!shared) e.compute_ns += cost;
    prev = s.node;
  }
  for (uint32_t x = 0; x < n; ++x) {
    if (!computed[x])
      throw PlanError("schedule never computes node " + std::to_string(x) + " '" +
                      graph.nodes[x].name + "'");
    if (graph.nodes[x].pinned && !graph.pin_ends(x) && !resident[x])
      throw PlanError("schedule ends without pinned node " + std::to_string(x) + " '" +
                      graph.nodes[x].name + "' resident");
  }
  finish(graph, e);
  return e;
}

PlanEval evaluate_plan(const Graph& graph, const Plan& plan) {
  if (plan.has_schedule()) return evaluate_schedule(graph, plan.schedule);
  return evaluate_decisions(graph, plan.decisions);
}

std::vector<ScheduleStep> schedule_with_frees(const Graph& graph,
                                              const std::vector<uint32_t>& compute_order) {
  // Backward pass: `needed[x]` = the current instance of x is used by a later step.
  const size_t m = compute_order.size();
  std::vector<char> needed(graph.size(), 0);
  std::vector<std::vector<uint32_t>> frees_after(m);
  // A node whose pin ends (Note [Pin ends] in graph.cpp) is freed after its last use or
  // the first computation of its end's node, whichever is later.
  std::vector<size_t> first_at(graph.size(), m), last_at(graph.size(), 0);
  for (size_t p = 0; p < m; ++p) {
    const uint32_t x = compute_order[p];
    first_at[x] = std::min(first_at[x], p);
    last_at[x] = p;
    for (uint32_t d : graph.nodes[x].deps) last_at[d] = p;
  }
  for (uint32_t x = 0; x < graph.size(); ++x)
    if (graph.pin_ends(x) && first_at[x] < m)
      frees_after[std::max(last_at[x], std::min(first_at[graph.nodes[x].pinned_until], m - 1))]
          .push_back(x);
  for (size_t p = m; p-- > 0;) {
    const uint32_t x = compute_order[p];
    if (!needed[x] && !graph.nodes[x].pinned) frees_after[p].push_back(x);
    needed[x] = 0;  // uses before p belong to an earlier instance
    for (uint32_t d : graph.nodes[x].deps) {
      if (!needed[d] && !graph.nodes[d].pinned) frees_after[p].push_back(d);
      needed[d] = 1;
    }
  }
  std::vector<ScheduleStep> out;
  out.reserve(3 * m);
  for (size_t p = 0; p < m; ++p) {
    out.push_back({ScheduleStep::Kind::compute, compute_order[p]});
    for (uint32_t f : frees_after[p]) out.push_back({ScheduleStep::Kind::free, f});
  }
  return out;
}

}  // namespace dtr
