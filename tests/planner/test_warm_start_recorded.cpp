// test_warm_start_recorded.cpp: warm start on traces recorded from PyTorch (Note [Warm
// start] in eviction/plan_guide.cpp): in-place writes recorded as alias CALLs, pins of
// gradients, several training steps. tests/data/planner/residual_steps.trace is a hand-made
// trace of that shape: a residual block whose downsample branch is computed after the main
// branch (`out += identity` writes an older storage with a newer one), in-place relu_,
// gradients pinned for the optimizer, zero_grad buffers accumulated into in the second step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include "dtr/core/trace.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/plan.h"
#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"
#include "dtr/planner/warm_start.h"
#include "dtr/sim/replay.h"
#include "dtr/sim/synthetic_trace.h"
#include "test_support.h"

using namespace dtr;
using dtr::test::test_data;
using dtr::test::node_named;

namespace {

ReplayResult warm_run(const Trace& trace, uint64_t budget_bytes, const PlanHints& hints) {
  ReplayOptions o;
  o.policy = "dtr_eq";
  o.budget.kind = Budget::Kind::bytes;
  o.budget.bytes = budget_bytes;
  o.memory = ReplayOptions::Memory::none;
  o.debug = 3;
  o.max_overhead = 0;
  o.plan_hints = std::make_shared<const PlanHints>(hints);
  return replay(trace, compute_baseline(trace), o);
}

}  // namespace

TEST_CASE("an in-place write's reads are uses in the graph", "[planner][warm][recorded]") {
  const Graph g = graph_from_trace(read_trace(test_data("planner/residual_steps.trace")));
  // relu(out += identity) reads the identity through the write: recomputing it needs both.
  CHECK(g.nodes[node_named(g, "s1r")].deps ==
        std::vector<uint32_t>{node_named(g, "s1b"), node_named(g, "s1d")});
  // The write itself reads the identity right after making it (its own stage).
  CHECK(g.nodes[node_named(g, "s1d")].reads == std::vector<uint32_t>{node_named(g, "s1d")});
  // A gradient is read by its PIN (right after it is made) and by the optimizer's in-place
  // update of its parameter, after the last gradient of the step.
  CHECK(g.nodes[node_named(g, "s1gwd")].reads ==
        std::vector<uint32_t>{node_named(g, "s1gwd"), node_named(g, "s1gw1")});
  CHECK(!g.nodes[node_named(g, "s1gwd")].pinned);  // discarded after the step
  // Round trip through the text format keeps the reads (and so the hash).
  std::ostringstream text;
  write_graph_text(g, text);
  std::istringstream in(text.str());
  const Graph back = read_graph_text(in, "round trip");
  CHECK(back.nodes[node_named(back, "s1gwd")].reads == g.nodes[node_named(g, "s1gwd")].reads);
  CHECK(graph_hash(back) == graph_hash(g));
  std::istringstream earlier("node a cost=1 size=1\nnode b cost=1 size=1 reads=a\n");
  CHECK_THROWS_WITH(read_graph_text(earlier, "reads"), Catch::Contains("reads:2: bad reads="));
}

TEST_CASE("warm-start hints follow every step's backward pass and the reads after a stage",
          "[planner][warm][recorded]") {
  const Graph g = graph_from_trace(read_trace(test_data("planner/residual_steps.trace")));
  Plan plan = keep_all_plan(g, "test");
  for (const char* n : {"s1a", "s1b", "s1d", "s2a", "s2b", "s2d"})
    plan.decisions[node_named(g, n)] = NodeDecision::recompute;
  const PlanHints h = plan_hints(g, plan, "test");
  // Both steps' forward values are dropped after their last forward use, until the first
  // backward use of their own step.
  for (const char* step : {"s1", "s2"}) {
    const std::string s = step;
    INFO(s);
    const PlanHints::Node& a = h.nodes[node_named(g, s + "a")];
    CHECK(a.forward_drop == node_named(g, s + "b"));
    CHECK(a.backward_use == node_named(g, s + "ga"));
    // The identity is read by nothing in the backward (relu's output is): it dies after
    // its last use, the relu that reads it through the write.
    const PlanHints::Node& d = h.nodes[node_named(g, s + "d")];
    CHECK(d.forward_drop == PlanHints::kNever);
    CHECK(d.last_use == node_named(g, s + "r"));
    CHECK_FALSE(d.last_use_read);
  }
  // The pinned gradient's last use is the optimizer's read, after its stage's op.
  const PlanHints::Node& gwd = h.nodes[node_named(g, "s1gwd")];
  CHECK(gwd.last_use == node_named(g, "s1gw1"));
  CHECK(gwd.last_use_read);
  // A late-pinned zero_grad buffer is never dropped by last use.
  CHECK(h.nodes[node_named(g, "zbw1")].last_use == PlanHints::kNever);
}

TEST_CASE("warm start on a recorded-style trace runs as the plan's evaluation",
          "[planner][warm][recorded]") {
  const Trace trace = read_trace(test_data("planner/residual_steps.trace"));
  const Graph g = graph_from_trace(trace);
  const Baseline b = compute_baseline(trace);
  int runs = 0;
  for (const char* method : {"chen", "rotor", "checkpoint-subset"}) {
    for (double ratio : {0.7, 0.8}) {
      auto planner = make_planner(method);
      const PlanResult p = run_planner(*planner, g, uint64_t(ratio * double(b.peak_bytes)), {});
      if (!p.feasible || p.plan.has_schedule()) continue;
      const PlanEval e = evaluate_plan(g, p.plan);
      if (e.recomputations == 0) continue;
      INFO(method << " at " << ratio << ": plan peak " << e.peak_bytes << ", recompute "
                  << e.recompute_ns);
      const ReplayResult r = warm_run(trace, e.peak_bytes, plan_hints(g, p.plan, method));
      INFO(r.status_name << ", remat " << r.stats.remat_compute_ns << ", evictions "
                         << r.stats.num_evictions);
      ++runs;
      REQUIRE(r.status.ok());
      // No multi-output op here, so the run is the evaluation: the same compute, and all
      // of it the plan's (the heuristic was never asked). One exception: a late-pinned
      // zero_grad buffer the plan recomputes is charged by the evaluator its whole node,
      // the in-place accumulation folded into it included, where the run reruns only the
      // zero_ and then runs the accumulation once, as a forward op (docs/planner.md).
      uint64_t late_recomputed_ns = 0;
      for (uint32_t j = 0; j < g.size(); ++j)
        if (g.pinned_late(j) && p.plan.decisions[j] == NodeDecision::recompute)
          late_recomputed_ns += g.nodes[j].compute_ns;
      CHECK(r.stats.remat_compute_ns <= e.recompute_ns);
      CHECK(r.stats.remat_compute_ns + late_recomputed_ns >= e.recompute_ns);
      if (late_recomputed_ns == 0) CHECK(r.compute_ns == e.compute_ns);
      CHECK(r.peak_bytes <= e.peak_bytes);
      CHECK(r.stats.num_evictions == 0);
      CHECK(r.stats.eviction_searches == 0);
      CHECK(r.stats.plan_departures == 0);
      CHECK(r.stats.num_plan_drops > 0);
    }
  }
  CHECK(runs > 0);
}

TEST_CASE("a recomputed multi-output op costs one run in the evaluation, as in the run",
          "[planner][warm]") {
  // Note [One run of a multi-output op]: random training steps where a third of the
  // forward ops have saved outputs (make_random_training_trace), planned by the
  // decisions-based methods; warm-started with no memory pressure (twice the baseline peak:
  // a rerun makes all its op's outputs, so at the baseline peak the heuristic evicted once,
  // seed 40), the run drops what the plan recomputes and reruns each op once for all
  // its outputs, so its remat compute is the evaluation's to the nanosecond. Before the
  // rule the evaluation charged a run per output node it made again.
  int runs = 0, shared = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Trace trace = make_random_training_trace(seed, 4 + seed % 5);
    const Graph g = graph_from_trace(trace);
    const Baseline b = compute_baseline(trace);
    for (const char* method : {"chen", "rotor", "checkpoint-subset"}) {
      auto planner = make_planner(method);
      const uint64_t budget = std::max(uint64_t(0.7 * double(b.peak_bytes)), plan_floor(g).bytes);
      const PlanResult p = run_planner(*planner, g, budget, {});
      if (p.plan.has_schedule()) continue;
      const PlanEval e = evaluate_plan(g, p.plan);
      if (e.recomputations == 0) continue;
      CAPTURE(seed, method, e.recompute_ns, e.recomputations);
      // Runs where two saved outputs of one op (read by the same backward op) are both
      // recomputed: one rerun makes both.
      bool both = false;
      for (uint32_t j = 1; j < g.size(); ++j)
        both = both || (g.nodes[j].same_op_as_prev && g.nodes[j - 1].same_op_as_prev &&
                        p.plan.decisions[j] == NodeDecision::recompute &&
                        p.plan.decisions[j - 1] == NodeDecision::recompute);
      shared += both;
      const ReplayResult r = warm_run(trace, 2 * b.peak_bytes, plan_hints(g, p.plan, method));
      REQUIRE(r.status.ok());
      ++runs;
      CHECK(r.stats.remat_compute_ns == e.recompute_ns);
      CHECK(r.compute_ns == e.compute_ns);
      CHECK(r.stats.num_evictions == 0);
    }
  }
  INFO(runs << " runs, " << shared << " with two saved outputs of an op recomputed");
  CHECK(runs >= 20);
  CHECK(shared >= 5);
}

TEST_CASE("without the reads after a stage, the guide drops what the run still reads",
          "[planner][warm][recorded]") {
  // The control for the case above: the hints of a graph that forgets the reads of pins
  // and in-place writes (as the graph did before Note [In-place writes]) drop each pinned
  // gradient right after it is made; the pin then recomputes it, and its ancestors.
  const Trace trace = read_trace(test_data("planner/residual_steps.trace"));
  const Graph g = graph_from_trace(trace);
  Plan plan = keep_all_plan(g, "test");
  for (const char* n : {"s1a", "s1b", "s1d", "s2a", "s2b", "s2d"})
    plan.decisions[node_named(g, n)] = NodeDecision::recompute;
  const PlanEval e = evaluate_plan(g, plan);
  const ReplayResult good = warm_run(trace, e.peak_bytes, plan_hints(g, plan, "test"));
  REQUIRE(good.status.ok());
  CHECK(good.stats.remat_compute_ns == e.recompute_ns);
  Graph blind = g;
  for (GraphNode& n : blind.nodes) n.reads.clear();
  const ReplayResult bad = warm_run(trace, e.peak_bytes, plan_hints(blind, plan, "test"));
  CHECK(bad.stats.remat_compute_ns > e.recompute_ns);
}
