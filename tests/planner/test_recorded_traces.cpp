// test_recorded_traces.cpp: planning traces recorded from PyTorch, which have no ANNOTATE
// BACKWARD and hold several training steps (Note [Backward passes of a recorded trace] in
// planner/graph.cpp), late pins (Note [Late pins], same file), and the floor no plan can
// go under (Note [Plan floor] in planner/planner.cpp).
//
// tests/data/planner/two_steps.trace is such a trace, by hand, with the torch host's event
// shapes (in-place ops as alias CALLs, PIN, DISCARD): two training steps of a 4-layer
// chain. Parameters w1..w4 of 64 B; per step an input x of 64 B (a CONSTANT, discarded after
// the step), activations a1..a4 and gradients g4..g0 of 100 B, loss and seed of 4 B. Step 1
// makes the weight gradients gw_k (64 B) with convolution_backward; after its optimizer
// step (PIN, then add_ into w_k) zero_grad leaves a zeroed buffer zb_k per gradient (zero_
// without args, 64 B) and discards gw_k; step 2 accumulates its gradients gn_k into zb_k
// (add_), pins them at its optimizer step and keeps them to the end.
//
// tests/data/planner/resnet18_scratch.trace was recorded from PyTorch (2026-12-05,
// `DTR_CONF=trace:F tests/torch/scripts/vision.py --steps 2 --batch 16 --size 64`, no
// budget): torchvision's ResNet-18, 770 graph nodes, 124 CALLs with WORKSPACE (Note [Op
// workspace in plans] in planner/plan_eval.cpp; docs/planner.md, "Op scratch in plans").
//
// tests/data/planner/mlp_steps.trace was recorded from PyTorch (2026-12-07,
// `DTR_CONF=trace:F tests/torch/scripts/mlp.py --steps 2`, no budget): its bias gradients'
// sums are pinned (under `min_evictable`) and released without a DISCARD (Note [Pin ends]
// in planner/graph.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <sstream>

#include "dtr/core/trace.h"
#include "dtr/planner/checkmate.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/kusumoto.h"
#include "dtr/planner/plan.h"
#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"
#include "dtr/planner/warm_start.h"
#include "dtr/sim/replay.h"
#include "test_support.h"

using namespace dtr;
using dtr::test::test_data;
using dtr::test::node_named;

namespace {

// Chen's scheme on the chain, in both steps: keep a2 (the checkpoint), recompute a1 and a3;
// with `buffers`, also recompute the zeroed gradient buffers (made again at their pin).
std::vector<NodeDecision> checkpoint_a2(const Graph& g, bool buffers) {
  std::vector<NodeDecision> d(g.size(), NodeDecision::keep);
  for (const char* name : {"s1a1", "s1a3", "s2a1", "s2a3"})
    d[node_named(g, name)] = NodeDecision::recompute;
  if (buffers)
    for (const char* name : {"zb1", "zb2", "zb3", "zb4"})
      d[node_named(g, name)] = NodeDecision::recompute;
  return d;
}

std::vector<NodeDecision> keep_all(const Graph& g) {
  return std::vector<NodeDecision>(g.size(), NodeDecision::keep);
}

}  // namespace

TEST_CASE("a trace without ANNOTATE BACKWARD gets one backward pass per step",
          "[planner][graph][recorded]") {
  const Trace trace = read_trace(test_data("planner/two_steps.trace"));
  REQUIRE(backward_inferred(trace));
  const Graph g = graph_from_trace(trace);
  // 4 parameters; per step: x, a1..a4, loss, seed, g4, and (g_{k-1}, gw_k or gn_k) for
  // k = 4..1; between the steps the 4 zeroed buffers.
  REQUIRE(g.size() == 4 + 16 + 4 + 16);
  for (const char* step : {"s1", "s2"}) {
    const std::string s = step;
    INFO(s);
    for (const char* fwd : {"x", "a1", "a2", "a3", "a4", "loss", "seed"})
      CHECK_FALSE(g.nodes[node_named(g, s + fwd)].backward);
    // Made by sum_backward and convolution_backward.
    for (const char* bwd : {"g4", "g3", "g2", "g1", "g0"})
      CHECK(g.nodes[node_named(g, s + bwd)].backward);
  }
  CHECK(g.nodes[node_named(g, "s1gw1")].backward);
  CHECK(g.nodes[node_named(g, "s2gn1")].backward);
  CHECK_FALSE(g.nodes[node_named(g, "zb1")].backward);
  // The second step's forward pass follows the first step's backward pass.
  CHECK(g.first_backward == node_named(g, "s1g4"));
  CHECK(g.has_several_backward_passes());
  CHECK_NOTHROW(g.validate());
  CHECK(g.total_compute_ns() == compute_baseline(trace).compute_ns);

  CHECK(is_backward_op_name("aten::convolution_backward"));
  CHECK(is_backward_op_name("aten::_log_softmax_backward_data"));
  CHECK_FALSE(is_backward_op_name("aten::convolution"));
  // An annotated trace keeps its annotation, and one backward pass.
  const Trace annotated = read_trace(test_data("traces/good.log"));
  CHECK_FALSE(backward_inferred(annotated));
  CHECK_FALSE(graph_from_trace(annotated).has_several_backward_passes());

  // A graph of several steps is valid text: written and read back, the same graph.
  std::stringstream text;
  write_graph_text(g, text);
  const Graph back = read_graph_text(text, "two_steps.graph");
  CHECK(graph_hash(back) == graph_hash(g));
  CHECK(back.first_backward == g.first_backward);
  CHECK(back.nodes[node_named(g, "zb1")].pinned_from == node_named(g, "s2gn1"));
}

TEST_CASE("recompute decisions save memory in every step of a recorded trace",
          "[planner][eval][recorded]") {
  // Before the backward passes were inferred no node was backward, no `recompute` node was
  // ever dropped, and every plan evaluated to the keep-all peak: the ResNet-18 symptom
  // (dtr-plan at 630486b: chen at 940 B is INFEASIBLE, peak 1204 B, overhead 1.0000).
  const Graph g = graph_from_trace(read_trace(test_data("planner/two_steps.trace")));
  const PlanEval all = evaluate_decisions(g, keep_all(g));
  CHECK(all.recomputations == 0);
  CHECK(all.compute_ns == g.total_compute_ns());
  // Keep-all peak, at the second step's convolution_backward of layer 4 (its second output,
  // gn4): parameters 256, the second input 64 (the first one's pin ended at its DISCARD:
  // Note [Pin ends]), the zeroed buffers 256, a1 a2 a3 300 (read again by the backward), g4
  // 100, g3 100, gn4 64.
  CHECK(all.peak_bytes == 256 + 64 + 256 + 300 + 100 + 100 + 64);
  const PlanEval e = evaluate_decisions(g, checkpoint_a2(g, false));
  // Each step drops a1 and a3 after their forward use and recomputes a3 (from a2) for layer
  // 4's gradient and a1 (from x) for layer 2's: 100 B less at the peak, 2 recomputations.
  CHECK(e.recomputations == 2 * 2);
  CHECK(e.peak_bytes == all.peak_bytes - 100);
  CHECK(e.compute_ns == g.total_compute_ns() + 4 * 1000);

  // Every chain method finds a plan below the keep-all peak; chen one that fits 876 B (the
  // checkpoint at a2, and the buffers made at their pins), revolve one of 884 B.
  PlanOptions o;
  o.trace_name = "two_steps.trace";
  for (const char* method : {"chen", "revolve", "rotor", "checkpoint-subset"}) {
    const PlanResult r = run_planner(*make_planner(method), g, all.peak_bytes - 1, o);
    INFO(method << ": " << r.note);
    CHECK(r.feasible);
    CHECK(r.predicted_compute_ns > g.total_compute_ns());
  }
  for (const auto& [method, peak] :
       {std::pair<const char*, uint64_t>{"chen", 876}, {"revolve", 884}}) {
    const PlanResult r = run_planner(*make_planner(method), g, peak, o);
    INFO(method << ": " << r.note);
    CHECK(r.feasible);
    CHECK(r.predicted_peak_bytes == peak);
  }
}

TEST_CASE("a zeroed gradient buffer is pinned from the write that fills it",
          "[planner][eval][recorded]") {
  const Graph g = graph_from_trace(read_trace(test_data("planner/two_steps.trace")));
  // Note [Late pins]: zb_k is pinned (PIN at step 2's optimizer, kept to the end) from the
  // last node made before its first in-place write: gn_k, the gradient accumulated into it.
  for (const char* k : {"1", "2", "3", "4"}) {
    const uint32_t zb = node_named(g, std::string("zb") + k);
    INFO("zb" << k);
    CHECK(g.nodes[zb].pinned);
    CHECK(g.nodes[zb].deps.empty());
    CHECK(g.nodes[zb].pinned_from == node_named(g, std::string("s2gn") + k));
    CHECK(g.pinned_late(zb));
  }
  // Parameters (CONSTANTs) are pinned from the start; step 1's gradients were discarded.
  CHECK_FALSE(g.pinned_late(node_named(g, "w1")));
  CHECK_FALSE(g.nodes[node_named(g, "s1gw1")].pinned);

  // Kept, the buffers are resident from zero_grad on (the keep-all peak holds all four);
  // recomputed, they are made again for their write: at layer 4's gradient only zb4 is
  // there, 192 B less, for 4 recomputations of zero_ and the folded add_ (20 + 50 ns each).
  const uint64_t all = evaluate_decisions(g, keep_all(g)).peak_bytes;
  std::vector<NodeDecision> buffers = keep_all(g);
  for (const char* name : {"zb1", "zb2", "zb3", "zb4"})
    buffers[node_named(g, name)] = NodeDecision::recompute;
  const PlanEval late = evaluate_decisions(g, buffers);
  CHECK(late.peak_bytes == all - 3 * 64);
  CHECK(late.recomputations == 4);
  CHECK(late.compute_ns == g.total_compute_ns() + 4 * (20 + 50));
  // Both: the checkpoint and the buffers.
  const PlanEval both = evaluate_decisions(g, checkpoint_a2(g, true));
  CHECK(both.peak_bytes == 876);
  CHECK(both.recomputations == 8);

  // Schedules: zb1 may be freed before gn1 is first computed and must be resident then.
  const uint32_t zb1 = node_named(g, "zb1"), gn1 = node_named(g, "s2gn1");
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < g.size(); ++i) order.push_back(i);
  std::vector<ScheduleStep> steps = schedule_with_frees(g, order);  // never frees a pinned node
  CHECK_NOTHROW(evaluate_schedule(g, steps));
  using K = ScheduleStep::Kind;
  std::vector<ScheduleStep> early = steps;  // free zb1 right after it is made, remake it before gn1
  early.insert(std::find(early.begin(), early.end(), ScheduleStep{K::compute, zb1}) + 1,
               {K::free, zb1});
  early.insert(std::find(early.begin(), early.end(), ScheduleStep{K::compute, gn1}),
               {K::compute, zb1});
  const PlanEval e = evaluate_schedule(g, early);
  CHECK(e.recomputations == 1);
  std::vector<ScheduleStep> missing = steps;  // freed and never made again
  missing.insert(std::find(missing.begin(), missing.end(), ScheduleStep{K::compute, zb1}) + 1,
                 {K::free, zb1});
  CHECK_THROWS_WITH(evaluate_schedule(g, missing),
                    Catch::Contains("starts the pin of node") && Catch::Contains("'zb1'"));
  std::vector<ScheduleStep> late_free = steps;  // freed after its pin started
  late_free.push_back({K::free, zb1});
  CHECK_THROWS_WITH(evaluate_schedule(g, late_free), Catch::Contains("frees a pinned node"));

  // The text format: pinned-from= names a later node of a pinned one.
  std::istringstream ok(
      "node z cost=1 size=8 pinned pinned-from=b\nnode a cost=1 size=1\nnode b cost=1 size=1 "
      "deps=a\n");
  const Graph t = read_graph_text(ok, "late");
  CHECK(t.nodes[0].pinned_from == 2);
  std::istringstream earlier("node a cost=1 size=1\nnode z cost=1 size=8 pinned pinned-from=a\n");
  CHECK_THROWS_WITH(read_graph_text(earlier, "late"),
                    Catch::Contains("late:2: bad pinned-from='a'"));
  std::istringstream unpinned("node z cost=1 size=8 pinned-from=a\nnode a cost=1 size=1\n");
  CHECK_THROWS_WITH(read_graph_text(unpinned, "late"),
                    Catch::Contains("late:1: bad pinned-from='a'"));
}

TEST_CASE("the plan floor is what no plan goes under, and why", "[planner][recorded]") {
  const Graph g = graph_from_trace(read_trace(test_data("planner/two_steps.trace")));
  const PlanFloor floor = plan_floor(g);
  // At the second step's layer-2 weight gradient (gn2): pinned, not freed: parameters 256,
  // the second input 64 (the first one's pin ended at its DISCARD: Note [Pin ends]), zb4
  // and zb3 (already written) and zb2 (its pin starts here) 192, 8 nodes; the op: gn2 64
  // and its inputs g2 and a1 200 (w2 is pinned, counted above).
  CHECK(floor.node == node_named(g, "s2gn2"));
  CHECK(floor.pinned_bytes == 256 + 64 + 192);
  CHECK(floor.pinned_count == 8);
  CHECK(floor.op_bytes == 264);
  CHECK(floor.bytes == 776);
  CHECK(floor.bytes >= largest_op_need(g));
  CHECK_THAT(describe_plan_floor(g, floor), Catch::Contains("at least 776 B") &&
                                                Catch::Contains("'s2gn2'") &&
                                                Catch::Contains("8 pinned nodes"));
  PlanOptions o;
  o.time_limit_s = 1;
  for (const PlannerInfo& p : planner_registry()) {
    INFO(p.name);
    const PlanResult r = run_planner(*p.make(), g, floor.bytes - 1, o);
    CHECK_FALSE(r.feasible);
    CHECK(r.predicted_peak_bytes >= floor.bytes);
  }
  // An op's scratch is held beside them (Note [Op workspace in plans] in plan_eval.cpp):
  // 100 B for gn2's op raise the floor by 100 B, and no method fits a byte under it.
  Graph scratch = g;
  scratch.nodes[floor.node].workspace_bytes = 100;
  const PlanFloor raised = plan_floor(scratch);
  CHECK(raised.node == floor.node);
  CHECK(raised.op_bytes == 364);
  CHECK(raised.bytes == 876);
  for (const PlannerInfo& p : planner_registry()) {
    INFO(p.name);
    const PlanResult r = run_planner(*p.make(), scratch, raised.bytes - 1, o);
    CHECK_FALSE(r.feasible);
    CHECK(r.predicted_peak_bytes >= raised.bytes);
  }
  // On a training chain the pinned input a_0 (7 B) stays while d_2 is computed from a_1 and
  // d_3 (1 B each): 10, above the largest op's need (d_1 from a_0 and d_2: 9).
  const Graph chain =
      training_chain_graph({{5, 1, 1, 1}, {7, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}});
  CHECK(largest_op_need(chain) == 9);
  CHECK(plan_floor(chain).bytes == 10);
}

TEST_CASE("warm start on a trace of several steps follows every step's drops",
          "[planner][warm][recorded]") {
  const Trace trace = read_trace(test_data("planner/two_steps.trace"));
  const Graph g = graph_from_trace(trace);
  Plan plan = keep_all_plan(g, "test");
  plan.decisions = checkpoint_a2(g, true);
  const PlanHints hints = plan_hints(g, plan, "test");
  // Each step's backward pass bounds its own forward drops (Note [Warm start] in
  // eviction/plan_guide.cpp): a1 and a3 of both steps are dropped after their last forward
  // use; the late-pinned buffers are never dropped by last use.
  CHECK(hints.nodes[node_named(g, "s1a1")].forward_drop == node_named(g, "s1a2"));
  CHECK(hints.nodes[node_named(g, "s1a3")].forward_drop == node_named(g, "s1a4"));
  CHECK(hints.nodes[node_named(g, "s2a1")].forward_drop == node_named(g, "s2a2"));
  CHECK(hints.nodes[node_named(g, "s2a3")].forward_drop == node_named(g, "s2a4"));
  CHECK(hints.nodes[node_named(g, "s2a1")].backward_use > node_named(g, "s2a4"));
  CHECK(hints.nodes[node_named(g, "zb1")].last_use == PlanHints::kNever);
  // Replayed at the plan's evaluated peak, the warm run fits and is the plan: the second
  // step follows it too, so the heuristic is never asked.
  ReplayOptions ro;
  ro.policy = "dtr_eq";
  ro.budget.kind = Budget::Kind::bytes;
  ro.budget.bytes = evaluate_plan(g, plan).peak_bytes;
  ro.memory = ReplayOptions::Memory::none;
  ro.debug = 3;
  ro.max_overhead = 0;
  ro.plan_hints = std::make_shared<const PlanHints>(hints);
  const ReplayResult r = replay(trace, compute_baseline(trace), ro);
  INFO(r.status_name);
  CHECK(r.status.ok());
  CHECK(r.peak_bytes <= ro.budget.bytes);
  CHECK(r.stats.num_plan_drops > 0);
  CHECK(r.stats.plan_departures == 0);
  CHECK(r.stats.num_evictions == 0);
  // The run's remats are the evaluator's, but for the late-pinned buffers the plan
  // recomputes: the evaluator charges each its whole node (the in-place accumulation folded
  // in), the run only its zero_ (tests/planner/test_warm_start_recorded.cpp).
  uint64_t late_recomputed_ns = 0;
  for (uint32_t j = 0; j < g.size(); ++j)
    if (g.pinned_late(j) && plan.decisions[j] == NodeDecision::recompute)
      late_recomputed_ns += g.nodes[j].compute_ns;
  const uint64_t planned_ns = evaluate_plan(g, plan).recompute_ns;
  CHECK(r.stats.remat_compute_ns <= planned_ns);
  CHECK(r.stats.remat_compute_ns + late_recomputed_ns >= planned_ns);
}

TEST_CASE("stage-form plans drop a zeroed buffer until its pin, and plan every step",
          "[planner][checkmate][kusumoto][recorded]") {
  // Note [Late pins in stage form] (planner/checkmate_milp.cpp) and Note [Kusumoto over
  // several steps] (planner/kusumoto_planner.cpp).
  const Graph g = graph_from_trace(read_trace(test_data("planner/two_steps.trace")));
  Graph early = g;  // the old rule: every pin starts at the node's computation
  for (GraphNode& n : early.nodes) n.pinned_from = 0;
  const uint32_t zb1 = node_named(g, "zb4"), gn1 = node_named(g, "s2gn4");
  REQUIRE(g.pinned_late(zb1));
  REQUIRE(gn1 + 1 < g.size());
  CHECK_FALSE(g.kept_pinned(zb1, zb1 + 1));
  CHECK(g.kept_pinned(zb1, gn1 + 1));
  CHECK_FALSE(g.never_freed(zb1, gn1 - 1));
  CHECK(g.never_freed(zb1, gn1));
  CHECK(early.kept_pinned(zb1, zb1 + 1));

  // The formulation fixes S to 1 only after the pin.
  const CheckmateFormulation f = build_checkmate_formulation(g, 4096);
  CHECK(f.col_lb[f.s_col[zb1 + 1][zb1]] == 0);
  CHECK(f.col_lb[f.s_col[gn1 + 1][zb1]] == 1);
  CHECK(f.col_ub[f.r_col[gn1][zb1]] == 1);      // may be made again for its write
  CHECK(f.col_ub[f.r_col[gn1 + 1][zb1]] == 0);  // never after

  // Late pins let stage-form plans go where pins from the computation cannot: the MILP finds
  // a plan at 820 B with late pins, while with early pins every plan holds at least 876 B
  // (the plan floor: a proof, not a solve that ran out of time), and CBC finds one at
  // 940 B. Only proven claims are checked: a solve that runs out of time finds no plan,
  // so "none a byte below" is not a solve's to say (this test once checked that none fits
  // 819 B in 5 s; with the tie-break of Note [Shared runs in stage form] CBC finds one at
  // 816 B). (A bisection over the budget with 20 s per solve took 3-4 minutes under load.)
  auto solve = [](const Graph& graph, uint64_t budget, double seconds) {
    CheckmateOptions o;
    o.budget_bytes = budget;
    o.time_limit_s = seconds;
    return solve_checkmate_milp(graph, o);
  };
  const uint64_t late_peak = 820, early_peak = 940;
  const CheckmateResult late = solve(g, late_peak, 40);
  REQUIRE(late.has_plan());
  CHECK(late.cost.peak_bytes <= late_peak);
  CHECK(plan_floor(early).bytes == 876);
  const CheckmateResult early_plan = solve(early, early_peak, 40);
  REQUIRE(early_plan.has_plan());
  CHECK(early_plan.cost.peak_bytes <= early_peak);
  CHECK(late_peak >= plan_floor(g).bytes);
  {  // its plan runs as compute/free steps with the same peak and compute (plan_eval's
     // schedule mode; the conv backwards' two outputs share a run in both, Note [Shared
     // runs in stage form])
    const PlanEval e = evaluate_plan(g, plan_from_stage_schedule(g, late.schedule, "checkmate"));
    CHECK(e.peak_bytes == late.cost.peak_bytes);
    CHECK(e.compute_ns == late.cost.compute_ns);
  }

  // Kusumoto has segments in the second step's forward part (it planned only the first
  // step before) and makes the buffers again for their writes: 948 B against 1140 B with
  // pins from the computation.
  KusumotoOptions ko;
  ko.exact = false;
  ko.memory_centric = true;
  ko.budget_bytes = late_peak;
  const KusumotoResult k = solve_kusumoto(g, ko);
  const uint32_t s2a1 = node_named(g, "s2a1");
  bool second = false;
  for (const auto& seg : k.segments)
    for (uint32_t v : seg) second = second || v == s2a1;
  CHECK(second);
  CHECK_THAT(k.detail, Catch::Contains("over 2 training steps"));
  CHECK(k.cost.valid);
  CHECK(k.cost.peak_bytes == 948);
  CHECK(solve_kusumoto(early, ko).cost.peak_bytes == 1140);
  CHECK_NOTHROW(evaluate_plan(g, plan_from_stage_schedule(g, k.schedule, "kusumoto")));
}

TEST_CASE("plans of a recorded ResNet-18 hold its ops' scratch", "[planner][recorded]") {
  const Graph g = graph_from_trace(read_trace(test_data("planner/resnet18_scratch.trace")));
  REQUIRE(g.size() == 770);
  size_t with_scratch = 0;
  for (const GraphNode& n : g.nodes) with_scratch += n.workspace_bytes > 0;
  CHECK(with_scratch >= 124);  // every output of a multi-output op carries its op's
  Graph bare = g;
  for (GraphNode& n : bare.nodes) n.workspace_bytes = 0;
  PlanOptions o;
  o.time_limit_s = 5;
  const uint64_t mib = 1 << 20;
  // Chen at 108 MiB planned as before, blind to the scratch: it fits on paper and not
  // with the scratch; planned with it, it fits with it.
  const PlanResult blind = run_planner(*make_planner("chen"), bare, 108 * mib, o);
  REQUIRE(blind.feasible);
  CHECK(evaluate_plan(g, blind.plan).peak_bytes > 108 * mib);
  const PlanResult seeing = run_planner(*make_planner("chen"), g, 108 * mib, o);
  REQUIRE(seeing.feasible);
  CHECK(evaluate_plan(g, seeing.plan).peak_bytes <= 108 * mib);
  // Note [DP budget search]: at 116 MiB none of the time-centric DP budgets gives a
  // schedule that fits with the scratch; the memory-centric ones do, and both searches
  // find it.
  for (const char* method : {"kusumoto-approx", "kusumoto-approx-mem"}) {
    INFO(method);
    const PlanResult r = run_planner(*make_planner(method), g, 116 * mib, o);
    CHECK(r.feasible);
    CHECK(r.predicted_peak_bytes <= 116 * mib);
  }
}

TEST_CASE("where keeping everything fits, every plan keeps everything",
          "[planner][recorded][pins]") {
  // Note [Pin ends]: a pinned node ends its pin at the RELEASE of its last name. Pinned to
  // the end, mlp_steps' 40-byte bias gradient sum held the graph's keep-all peak 36 B above
  // the trace's baseline peak (6937212 against 6937176 B), and every chain method
  // recomputed at --budget 1.0 (checkpoint-subset: overhead 1.28). kusumoto-approx (whose
  // lower-set DP missed keep-all: 1.02 at the same budget) and checkmate-lp (whose rounding
  // missed it: 1.008 on residual_steps) now take keep-all where it fits, as the chain
  // methods do. resnet18_scratch's keep-all stays 917500 B above its baseline: a storage
  // written in place holds what the write read for every later reader (Note [In-place
  // writes] in planner/graph.cpp; docs/open-items.md).
  PlanOptions o;
  o.time_limit_s = 20;
  for (const char* file :
       {"planner/mlp_steps.trace", "planner/two_steps.trace", "planner/residual_steps.trace",
        "planner/resnet18_scratch.trace", "replay/two_losses.trace"}) {
    const Trace trace = read_trace(test_data(file));
    const Baseline baseline = compute_baseline(trace);
    const Graph g = graph_from_trace(trace);
    const PlanEval all = evaluate_decisions(g, keep_all(g));
    INFO(file << ": baseline peak " << baseline.peak_bytes << ", keep-all " << all.peak_bytes);
    if (std::string(file) == "planner/resnet18_scratch.trace")
      CHECK(all.peak_bytes == baseline.peak_bytes + 917500);
    else
      CHECK(all.peak_bytes <= baseline.peak_bytes);
    const uint64_t budget = std::max(all.peak_bytes, baseline.peak_bytes);
    for (const PlannerInfo& method : planner_registry()) {
      if (method.name.find("-mem") != std::string::npos) continue;  // least peak, not compute
      INFO(method.name);
      const PlanResult r = run_planner(*make_planner(method.name), g, budget, o);
      CHECK(r.feasible);
      CHECK(r.predicted_compute_ns == g.total_compute_ns());
    }
  }
  const Graph mlp = graph_from_trace(read_trace(test_data("planner/mlp_steps.trace")));
  CHECK(mlp.pin_ends(node_named(mlp, "t65")));
  CHECK(mlp.nodes[node_named(mlp, "t65")].pinned_until == node_named(mlp, "t65"));
}
