// test_kusumoto.cpp: the lower-set DP of Kusumoto et al. (NeurIPS 2019): lower-set
// enumeration (exact and of ancestors, and the cap), its plans on Checkmate's linear graph
// against the MILP optima, and the planners through the registry. The property test against
// the MILP on random DAGs is in test_checkmate.cpp.
#include <catch2/catch.hpp>

#include <random>

#include "dtr/planner/checkmate.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/kusumoto.h"
#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"

using namespace dtr;

namespace {

// Forward nodes given by their deps, then one backward node reading all of them.
Graph forward_graph(const std::vector<std::vector<uint32_t>>& deps) {
  Graph g;
  for (size_t i = 0; i < deps.size(); ++i) {
    GraphNode node;
    node.name = "f" + std::to_string(i);
    node.compute_ns = 1;
    node.size_bytes = 1;
    node.deps = deps[i];
    g.nodes.push_back(node);
  }
  GraphNode grad;
  grad.name = "grad";
  grad.compute_ns = 1;
  grad.size_bytes = 1;
  grad.backward = true;
  for (uint32_t i = 0; i < deps.size(); ++i) grad.deps.push_back(i);
  g.first_backward = static_cast<uint32_t>(deps.size());
  g.nodes.push_back(grad);
  g.validate();
  return g;
}

KusumotoResult run(const Graph& g, uint64_t budget, bool exact, bool memory_centric) {
  KusumotoOptions o;
  o.budget_bytes = budget;
  o.exact = exact;
  o.memory_centric = memory_centric;
  return solve_kusumoto(g, o);
}

}  // namespace

TEST_CASE("kusumoto lower sets: exact, of ancestors, and the cap", "[planner][kusumoto]") {
  // A chain of 4: 5 lower sets either way.
  const Graph chain = forward_graph({{}, {0}, {1}, {2}});
  CHECK(forward_lower_sets(chain, true, 100).size() == 5);
  CHECK(forward_lower_sets(chain, false, 100).size() == 5);

  // Two independent chains of 2: 3 x 3 = 9 lower sets; ancestors give {}, a0, a0a1, b0,
  // b0b1 and the full set: 6.
  const Graph two = forward_graph({{}, {0}, {}, {2}});
  const auto exact = forward_lower_sets(two, true, 100);
  CHECK(exact.size() == 9);
  CHECK(exact.front().empty());
  CHECK(exact.back().size() == 4);
  for (size_t i = 1; i < exact.size(); ++i) CHECK(exact[i - 1].size() <= exact[i].size());
  CHECK(forward_lower_sets(two, false, 100).size() == 6);

  // Every exact lower set is closed under inputs.
  for (const auto& set : exact) {
    for (uint32_t v : set) {
      for (uint32_t d : two.nodes[v].deps) {
        CHECK(std::find(set.begin(), set.end(), d) != set.end());
      }
    }
  }

  // 14 independent forward nodes: 2^14 lower sets, past a cap of 4096. Under keep-all's
  // peak (15: the backward node reads all 14) the DPs run, and nothing fits.
  const Graph wide = forward_graph(std::vector<std::vector<uint32_t>>(14));
  CHECK_THROWS_WITH(
      solve_kusumoto(wide, KusumotoOptions{14, true, false, 4096}),
      Catch::Contains("more than 4096 lower sets") && Catch::Contains("kusumoto-approx"));
  const KusumotoResult approx = run(wide, 14, false, false);
  CHECK(approx.num_lower_sets == 16);
  CHECK_FALSE(approx.found);
  // Where keeping every node fits, that is the plan, with no lower set enumerated.
  for (const bool exact : {true, false}) {
    const KusumotoResult whole = run(wide, 15, exact, false);
    CHECK(whole.found);
    CHECK(whole.num_lower_sets == 0);
    CHECK(whole.cost.peak_bytes == 15);
    CHECK(whole.cost.compute_ns == 15);
  }
}

TEST_CASE("kusumoto on linear_graph(8) against the MILP optima", "[planner][kusumoto]") {
  const Graph g = linear_graph(8);
  const std::vector<uint64_t> milp = {0, 45, 26, 22, 21, 20, 19, 18, 17};  // budgets 2..10
  for (int variant = 0; variant < 4; ++variant) {
    const bool exact = variant & 1, memory_centric = variant & 2;
    for (uint64_t budget = 3; budget <= 10; ++budget) {
      CAPTURE(exact, memory_centric, budget);
      const KusumotoResult r = run(g, budget, exact, memory_centric);
      REQUIRE(r.cost.valid);
      CHECK(r.found == (r.cost.peak_bytes <= budget));
      // A lower-set strategy recomputes each forward node at most once: at most 9 + 17
      // computations, so it can never fit the budgets where the optimum needs more.
      CHECK(r.cost.num_computes <= 9 + 17);
      if (milp[budget - 2] > 26) CHECK_FALSE(r.found);
      if (r.found) CHECK(r.cost.compute_ns >= milp[budget - 2]);
      // The plan runs the same under the common evaluator.
      const PlanEval e = evaluate_plan(g, plan_from_stage_schedule(g, r.schedule, "kusumoto"));
      CHECK(e.compute_ns == r.cost.compute_ns);
      CHECK(e.peak_bytes == r.cost.peak_bytes);
    }
  }
  // With room for everything the time-centric DP keeps everything.
  const KusumotoResult all = run(g, 10, true, false);
  CHECK(all.found);
  CHECK(all.cost.compute_ns == 17);
  // Memory-centric: the least peak it can reach, whatever the budget.
  const KusumotoResult lo = run(g, 100, true, true);
  const KusumotoResult lo2 = run(g, 10, true, true);
  CHECK(lo.cost.peak_bytes == lo2.cost.peak_bytes);
  CHECK(lo.cost.peak_bytes < all.cost.peak_bytes);
}

TEST_CASE("kusumoto without a backward part computes every node once", "[planner][kusumoto]") {
  Graph g = chain_graph({1, 2, 3}, {4, 4, 4});
  g.first_backward = static_cast<uint32_t>(g.size());
  const KusumotoResult r = run(g, 8, true, false);
  CHECK(r.found);
  CHECK(r.cost.compute_ns == 6);
  CHECK(r.cost.peak_bytes == 8);
  CHECK_FALSE(run(g, 7, true, false).found);
}

TEST_CASE("kusumoto planners through the registry", "[planner][kusumoto]") {
  const Graph g = linear_graph(8);
  PlanOptions options;
  for (const char* name : {"kusumoto", "kusumoto-approx", "kusumoto-mem", "kusumoto-approx-mem"}) {
    CAPTURE(name);
    auto planner = make_planner(name);
    CHECK(planner->name() == name);
    const PlanResult r = run_planner(*planner, g, 9, options);
    CHECK(r.feasible);
    CHECK(r.predicted_peak_bytes <= 9);
    CHECK(r.predicted_compute_ns >= 18);  // the MILP optimum at budget 9
    CHECK(r.plan.method == name);
  }
}

TEST_CASE("kusumoto's bounded Pareto tables: exact below the width, never cheaper above it",
          "[planner][kusumoto]") {
  // Note [Bounded Pareto tables]. Heterogeneous training chains, whose exact lower sets are
  // the prefixes: every prefix is a subset of every longer one, and fronts grow long.
  std::mt19937 rng(20261124);
  std::uniform_int_distribution<uint64_t> ns(1, 1000), bytes(1, 100);
  size_t thinned_dearer = 0, compared = 0;
  for (int trial = 0; trial < 20; ++trial) {
    ChainSpec spec;
    for (int i = 0; i < 40; ++i) {
      spec.fwd_ns.push_back(ns(rng));
      spec.fwd_bytes.push_back(bytes(rng));
      spec.bwd_ns.push_back(ns(rng));
      spec.bwd_bytes.push_back(bytes(rng));
    }
    const Graph g = training_chain_graph(spec);
    uint64_t all = 0;
    for (uint64_t b : spec.fwd_bytes) all += b;
    for (uint64_t dp_budget = all / 8; dp_budget <= 2 * all; dp_budget += all / 8) {
      CAPTURE(trial, dp_budget);
      const auto exact = kusumoto_dp_overhead(g, dp_budget, true, 0);
      const auto wide = kusumoto_dp_overhead(g, dp_budget, true, size_t{1} << 20);
      const auto narrow = kusumoto_dp_overhead(g, dp_budget, true, 4);
      // Approximate = exact here: the lower sets of ancestors of a chain are its prefixes.
      CHECK(kusumoto_dp_overhead(g, dp_budget, false, 0) == exact);
      CHECK(wide == exact);
      // Thinning keeps each front's leanest entry, so a strategy exists exactly when one did.
      REQUIRE(narrow.has_value() == exact.has_value());
      if (!exact) continue;
      ++compared;
      CHECK(*narrow >= *exact);
      if (*narrow > *exact) ++thinned_dearer;
    }
  }
  // The narrow tables did lose strategies (else this test would show nothing), and most
  // budgets had one.
  CHECK(compared > 200);
  CHECK(thinned_dearer > 0);
}

TEST_CASE("kusumoto stops at its time limit and keeps what it measured", "[planner][kusumoto]") {
  // Note [Kusumoto time limit]. A 1500-stage chain: one DP takes tens of seconds
  // (bench_planner: 13.7 s at 1000 nodes, 57 s at 2000).
  ChainSpec spec;
  for (int i = 0; i < 1500; ++i) {
    spec.fwd_ns.push_back(100 + i % 7);
    spec.fwd_bytes.push_back(10 + i % 5);
    spec.bwd_ns.push_back(200);
    spec.bwd_bytes.push_back(10);
  }
  const Graph g = training_chain_graph(spec);
  KusumotoOptions o;
  o.budget_bytes = evaluate_stage_schedule(g, StageSchedule::no_remat(g)).peak_bytes / 2;
  o.exact = false;
  o.time_limit_s = 0.5;
  const KusumotoResult r = solve_kusumoto(g, o);
  CHECK(r.timed_out);
  CHECK(r.solve_s < 10);  // the limit, plus building the DP (a second or two)
  CHECK(r.cost.valid);    // keep-all, or the best strategy measured in time
  CHECK(r.detail.find("time limit of 0.5 s reached after") != std::string::npos);

  // Through the registry: the note says why.
  PlanOptions po;
  po.time_limit_s = 0.5;
  auto planner = make_planner("kusumoto-approx");
  const PlanResult pr = run_planner(*planner, g, o.budget_bytes, po);
  CHECK(pr.solve_seconds < 10);
  CHECK(pr.note.find("time limit") != std::string::npos);

  // A small graph under a generous limit: not timed out, and the same result as none.
  const Graph small = forward_graph({{}, {0}, {1}, {2}, {3}});
  KusumotoOptions a;
  a.budget_bytes = 4;
  KusumotoOptions b = a;
  b.time_limit_s = 60;
  const KusumotoResult ra = solve_kusumoto(small, a), rb = solve_kusumoto(small, b);
  CHECK_FALSE(rb.timed_out);
  CHECK(ra.found == rb.found);
  CHECK(ra.cost.compute_ns == rb.cost.compute_ns);
  CHECK(ra.cost.peak_bytes == rb.cost.peak_bytes);
}
