// test_checkmate.cpp: the Checkmate MILP against the paper's known optima, its formulation
// size, the LP rounding, the stage-schedule evaluator, and a property test: on random small
// DAGs where CBC proves optimality, no other planner (LP rounding, Kusumoto in all four
// variants, keep-everything) ever finds a cheaper schedule within the budget.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>

#include "dtr/planner/checkmate.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/kusumoto.h"
#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"
#include "dtr/sim/replay.h"
#include "dtr/sim/synthetic_trace.h"

using namespace dtr;

namespace {

CheckmateOptions milp_opts(uint64_t budget, double limit_s = 10) {
  CheckmateOptions o;
  o.budget_bytes = budget;
  o.time_limit_s = limit_s;
  return o;
}

// The least budget any schedule needs: a node's output, its scratch and its inputs.
uint64_t op_need(const Graph& g) { return largest_op_need(g); }

// A random training-like DAG: a forward part where each node reads its predecessor and
// maybe one earlier node, and a backward part where backward node j reads the previous
// backward node and a forward node (mirrored, like Checkmate's linear graph) and sometimes
// another one. Sizes 1..4 units of 8 bytes (so the gcd scaling is exercised), costs 1..5.
// With `multi_output`, a forward node may be a second output of its predecessor's op
// (same_op_as_prev: the same inputs and cost). With `remat_costs`, a third of the nodes
// cost 0..5 to recompute instead of their cost (Note [Remat cost in plans]). With
// `workspaces`, a third of the ops hold 1..4 units of scratch while they run (Note [Op
// workspace in plans]).
Graph random_training_graph(std::mt19937& rng, uint32_t forward, bool multi_output = false,
                            bool remat_costs = false, bool workspaces = false) {
  Graph g;
  auto pick = [&](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  const uint32_t n = 2 * forward;
  for (uint32_t i = 0; i < n; ++i) {
    GraphNode node;
    node.name = "v" + std::to_string(i);
    node.compute_ns = pick(1, 5);
    if (remat_costs && pick(0, 2) == 0) node.remat_ns = pick(0, 5);
    node.size_bytes = 8 * pick(1, 4);
    if (workspaces && pick(0, 2) == 0) node.workspace_bytes = 8 * pick(1, 4);
    if (i > 0) node.deps.push_back(i - 1);
    if (i < forward) {
      if (i >= 2 && pick(0, 2) == 0) node.deps.push_back(pick(0, i - 2));
      if (multi_output && i >= 2 && !g.nodes[i - 1].same_op_as_prev && pick(0, 2) == 0) {
        node.deps = g.nodes[i - 1].deps;
        node.compute_ns = g.nodes[i - 1].compute_ns;
        node.remat_ns = g.nodes[i - 1].remat_ns;
        node.workspace_bytes = g.nodes[i - 1].workspace_bytes;
        node.same_op_as_prev = true;
      }
    } else {
      node.backward = true;
      const uint32_t mirror = n - 1 - i;  // forward node mirrored
      if (mirror + 1 != i) node.deps.push_back(mirror);
      if (pick(0, 3) == 0) node.deps.push_back(pick(0, forward - 1));
    }
    std::sort(node.deps.begin(), node.deps.end());
    node.deps.erase(std::unique(node.deps.begin(), node.deps.end()), node.deps.end());
    g.nodes.push_back(std::move(node));
  }
  g.first_backward = forward;
  g.validate();
  return g;
}

}  // namespace

TEST_CASE("checkmate MILP reproduces the paper's optima on linear_graph(8)", "[planner][checkmate]") {
  const Graph g = linear_graph(8);
  REQUIRE(g.size() == 17);
  // Jain et al. 2020: budgets 2..10 (unit sizes) -> infeasible, then total compute.
  const std::vector<int64_t> expected = {-1, 45, 26, 22, 21, 20, 19, 18, 17};
  for (uint64_t budget = 2; budget <= 10; ++budget) {
    CAPTURE(budget);
    const CheckmateResult r = solve_checkmate_milp(g, milp_opts(budget));
    const int64_t want = expected[budget - 2];
    if (want < 0) {
      CHECK(r.status == MilpStatus::kInfeasible);
      CHECK_FALSE(r.has_plan());
      continue;
    }
    REQUIRE(r.status == MilpStatus::kOptimal);
    CHECK(r.cost.valid);
    CHECK(r.cost.compute_ns == static_cast<uint64_t>(want));
    CHECK(r.cost.peak_bytes <= budget);
    // The common evaluator (plan_eval) measures the same schedule the same way.
    const Plan plan = plan_from_stage_schedule(g, r.schedule, "checkmate");
    const PlanEval e = evaluate_plan(g, plan);
    CHECK(e.compute_ns == r.cost.compute_ns);
    CHECK(e.peak_bytes == r.cost.peak_bytes);
  }
}

TEST_CASE("checkmate formulation has the documented size", "[planner][checkmate]") {
  const Graph g = linear_graph(8);
  const CheckmateFormulation f = build_checkmate_formulation(g, 5);
  const size_t n = g.size();
  CHECK(f.num_r == n * (n + 1) / 2);
  CHECK(f.num_s == n * (n - 1) / 2);
  CHECK(f.num_u == n * (n + 1) / 2);
  // FREE: one per stage t and edge (i, k) with k < t (freeing after the stage's last
  // computation, node t, cannot lower the stage's peak, so those columns are left out).
  size_t free_cols = 0;
  for (size_t t = 0; t < n; ++t) {
    for (size_t k = 0; k < t; ++k) free_cols += g.nodes[k].deps.size();
  }
  CHECK(f.num_free == free_cols);
  CHECK(f.op_runs.empty());  // no multi-output op
  CHECK(f.num_cols() == f.num_r + f.num_s + f.num_u + f.num_free);
  CHECK(f.num_cols() == 153 + 136 + 153 + 148);

  // Sizes and costs are scaled by their gcd; the budget is floored to whole units.
  Graph scaled = g;
  for (auto& node : scaled.nodes) {
    node.size_bytes = 4096;
    node.compute_ns = 1000;
  }
  const CheckmateFormulation fs = build_checkmate_formulation(scaled, 5 * 4096 + 100);
  CHECK(fs.memory_unit_bytes == 4096);
  CHECK(fs.cost_unit_ns == 1000);
  CHECK(fs.budget_units == 5);
  const CheckmateResult r = solve_checkmate_milp(scaled, milp_opts(5 * 4096 + 100));
  REQUIRE(r.status == MilpStatus::kOptimal);
  CHECK(r.cost.compute_ns == 22 * 1000);
}

TEST_CASE("checkmate LP rounding never beats the MILP and stays within budget", "[planner][checkmate]") {
  const Graph g = linear_graph(8);
  const std::vector<uint64_t> optimum = {0, 45, 26, 22, 21, 20, 19, 18, 17};
  size_t plans = 0;
  for (uint64_t budget = 2; budget <= 10; ++budget) {
    CAPTURE(budget);
    const CheckmateResult r = solve_checkmate_lp_rounding(g, milp_opts(budget));
    if (budget >= 3) CHECK(r.lower_bound_ns <= static_cast<double>(optimum[budget - 2]) + 1e-6);
    if (!r.has_plan()) continue;
    ++plans;
    CHECK(r.status == MilpStatus::kFeasible);
    CHECK(r.cost.peak_bytes <= budget);
    CHECK(r.cost.compute_ns >= optimum[budget - 2]);
  }
  CHECK(plans >= 6);  // budgets 4..10 round to a fitting plan today (see docs/planner-milp.md)
}

TEST_CASE("stage schedules: evaluator and phase-two completion and bad schedules", "[planner][checkmate]") {
  const Graph g = linear_graph(3);  // 7 nodes
  StageSchedule s = StageSchedule::no_remat(g);
  ScheduleCost c = evaluate_stage_schedule(g, s);
  REQUIRE(c.valid);
  CHECK(c.compute_ns == 7);
  CHECK(c.num_computes == 7);
  CHECK(c.peak_bytes == 5);  // nodes 0..3 kept for the backward plus node 4

  // Keep nothing: phase two recomputes nodes 0..t-1 in every stage t (28 computations).
  // That does not save memory: in stage 6 node 0 (read by 6) and in stage 5 node 1 (read
  // by 5) stay resident through the whole recomputation, so computing node 4 in stage 6
  // holds 0, 1, 2, 3 and 4.
  for (auto& row : s.keep) std::fill(row.begin(), row.end(), 0);
  complete_compute_from_keep(g, s);
  c = evaluate_stage_schedule(g, s);
  REQUIRE(c.valid);
  CHECK(c.num_computes == 28);
  CHECK(c.compute_ns == 28);
  CHECK(c.peak_bytes == 5);

  StageSchedule bad = StageSchedule::no_remat(g);
  bad.keep[5][1] = 0;  // node 5 reads node 1 (skip edge 1 -> 5)
  c = evaluate_stage_schedule(g, bad);
  CHECK_FALSE(c.valid);
  CHECK(c.error.find("input 1") != std::string::npos);

  bad = StageSchedule::no_remat(g);
  bad.keep[2][0] = 0;  // dropped in stage 1, then kept into stage 3 without recomputation
  c = evaluate_stage_schedule(g, bad);
  CHECK_FALSE(c.valid);

  bad.compute.pop_back();
  c = evaluate_stage_schedule(g, bad);
  CHECK_FALSE(c.valid);
}

TEST_CASE("checkmate reports a time limit instead of hiding it", "[planner][checkmate]") {
  const Graph g = linear_graph(20);  // 41 nodes, ~17k columns: not solved in 0.3 s
  const CheckmateResult r = solve_checkmate_milp(g, milp_opts(5, 0.3));
  CHECK(r.solve_s < 10.0);
  if (r.status == MilpStatus::kOptimal) {
    WARN("CBC proved optimality within 0.3 s; the time-limit path was not exercised");
  } else {
    CHECK((r.status == MilpStatus::kFeasible || r.status == MilpStatus::kTimeLimit));
    CHECK(r.detail.find("s") != std::string::npos);
    if (r.has_plan()) {
      CHECK(r.cost.peak_bytes <= 5);
      CHECK(static_cast<double>(r.cost.compute_ns) >= r.lower_bound_ns - 1e-6);
    }
  }
}

TEST_CASE("checkmate-lp honours the time limit: the LP solve is bounded too", "[planner][checkmate]") {
  // 201 nodes, ~80k columns: before the LP had a limit, this solve ran for minutes whatever
  // --time-limit said. With the limit spent on building the formulation, Clp stops at once.
  const Graph g = linear_graph(100);
  const CheckmateResult r = solve_checkmate_lp_rounding(g, milp_opts(20, 0.01));
  CHECK(r.status == MilpStatus::kTimeLimit);
  CHECK_FALSE(r.has_plan());
  CHECK(r.detail.find("not solved within") != std::string::npos);
  CHECK(r.detail.find("--time-limit") != std::string::npos);
}

namespace {

// The property test's body: on random small DAGs where CBC proves the MILP optimal, no
// other planner (LP rounding, Kusumoto in all four variants, keep-everything) finds a
// cheaper schedule within the budget; where it proves none fits, none of them finds one.
// The optimal schedule, run as compute/free steps by plan_eval, costs what the MILP says.
void check_no_planner_beats_milp(uint32_t seed, bool multi_output, bool remat_costs = false,
                                 bool workspaces = false) {
  std::mt19937 rng(seed);
  size_t proven = 0, infeasible = 0, compared = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const uint32_t forward = std::uniform_int_distribution<uint32_t>(3, 5)(rng);
    const Graph g = random_training_graph(rng, forward, multi_output, remat_costs, workspaces);
    const uint64_t need = op_need(g);
    const uint64_t all = evaluate_stage_schedule(g, StageSchedule::no_remat(g)).peak_bytes;
    const uint64_t budget =
        std::uniform_int_distribution<uint64_t>(need > 8 ? need - 8 : 0, all)(rng);
    CAPTURE(trial, g.size(), budget, need, all);
    const CheckmateResult opt = solve_checkmate_milp(g, milp_opts(budget, 5));
    if (opt.status == MilpStatus::kInfeasible) {
      ++infeasible;
      // Nothing may fit a budget the MILP proves infeasible.
      CHECK_FALSE(solve_checkmate_lp_rounding(g, milp_opts(budget)).has_plan());
      for (int v = 0; v < 4; ++v) {
        KusumotoOptions ko;
        ko.budget_bytes = budget;
        ko.exact = v & 1;
        ko.memory_centric = v & 2;
        CHECK_FALSE(solve_kusumoto(g, ko).found);
      }
      continue;
    }
    if (opt.status != MilpStatus::kOptimal) continue;
    ++proven;
    const uint64_t best = opt.cost.compute_ns;
    CHECK(opt.cost.peak_bytes <= budget);
    CHECK(best >= g.total_compute_ns());
    const PlanEval steps = evaluate_plan(g, plan_from_stage_schedule(g, opt.schedule, "checkmate"));
    CHECK(steps.compute_ns == best);
    CHECK(steps.peak_bytes == opt.cost.peak_bytes);
    const CheckmateResult lp = solve_checkmate_lp_rounding(g, milp_opts(budget));
    CHECK(lp.lower_bound_ns <= static_cast<double>(best) + 1e-6);
    if (lp.has_plan()) {
      ++compared;
      CHECK(lp.cost.peak_bytes <= budget);
      CHECK(lp.cost.compute_ns >= best);
    }
    bool found[4] = {};
    for (int v = 0; v < 4; ++v) {
      KusumotoOptions ko;
      ko.budget_bytes = budget;
      ko.exact = v & 1;
      ko.memory_centric = v & 2;
      const KusumotoResult k = solve_kusumoto(g, ko);
      REQUIRE(k.cost.valid);
      found[v] = k.found;
      // Note [DP budget search]: the time-centric search fits wherever the memory-centric one does.
      if (v & 2) CHECK((!k.found || found[v & 1]));
      if (!k.found) continue;
      ++compared;
      CHECK(k.cost.peak_bytes <= budget);
      CHECK(k.cost.compute_ns >= best);
    }
    if (all <= budget) CHECK(g.total_compute_ns() >= best);
  }
  INFO("proven optimal " << proven << ", infeasible " << infeasible << ", compared " << compared);
  CHECK(proven >= 12);
  CHECK(compared >= 12);
}

}  // namespace

TEST_CASE("no planner beats the MILP where CBC proves it optimal (random small DAGs)",
          "[planner][checkmate][kusumoto][stress]") {
  check_no_planner_beats_milp(20240605, false);
}

TEST_CASE("no planner beats the MILP on random DAGs with multi-output ops",
          "[planner][checkmate][kusumoto][stress]") {
  // Note [Shared runs in stage form]: the MILP charges one run per op and stage, as the
  // evaluator does; a MILP that charged each output would be beaten here.
  check_no_planner_beats_milp(20261124, true);
}

TEST_CASE("no planner beats the MILP on random DAGs with remat costs",
          "[planner][checkmate][kusumoto][stress]") {
  // Note [Remat cost in plans]: the MILP and the evaluator charge a recomputation the
  // node's remat cost; a MILP that charged its cost would be beaten where remats are cheap.
  check_no_planner_beats_milp(20261126, true, true);
}

TEST_CASE("no planner beats the MILP on random DAGs whose ops hold scratch",
          "[planner][checkmate][kusumoto][stress]") {
  // Note [Op workspace in plans]: the MILP's memory rows hold an op's scratch while it
  // runs, as the evaluators do; a MILP without them returns schedules whose measured peak
  // is over the budget.
  check_no_planner_beats_milp(20261205, true, true, true);
}

namespace {

// The body of the dynamic-policy property tests below. With `remat_times`, a third of the
// CALLs get a REMAT_TIME of 0..2x their TIME, which the replay charges for each remat and
// the graph carries as the node's remat cost (Note [Remat cost in plans]). With
// `workspaces`, a third of the CALLs hold 8..32 B of scratch while they run (WORKSPACE),
// which the engine holds beside the op's outputs and the graph as the node's scratch (Note
// [Op workspace in plans]).
void check_no_policy_beats_milp(uint32_t seed, bool remat_times, bool workspaces = false) {
  // Random training steps (make_random_training_trace: skip reads, multi-output ops, each
  // value released after its last read, so the graph's frees are the program's) replayed
  // under every policy with byte accounting at budgets where CBC proves the optimum: a
  // policy's run is a schedule too, so it costs at least the optimum, and where CBC proves
  // no schedule fits, every policy runs out of memory.
  const std::vector<std::string> policies = {"dtr_eq", "dtr",  "dtr_local", "msps",
                                             "lru",    "size", "random"};
  std::mt19937 rng(seed);
  size_t proven = 0, infeasible = 0, compared = 0, above = 0, cheap = 0;
  for (uint64_t trial = 1; trial <= 30; ++trial) {
    const uint32_t forward = std::uniform_int_distribution<uint32_t>(3, 6)(rng);
    Trace trace = make_random_training_trace(trial, forward);
    for (TraceEvent& ev : trace.events) {
      if (ev.kind != TraceEventKind::call) continue;
      if (workspaces && rng() % 3 == 0)
        ev.workspace_bytes = 8 * std::uniform_int_distribution<uint64_t>(1, 4)(rng);
      if (!remat_times || rng() % 3 != 0) continue;
      ev.remat_time_ns = std::uniform_int_distribution<uint64_t>(0, 2 * ev.time_ns)(rng);
      cheap += ev.remat_time_ns < ev.time_ns;
    }
    const Graph g = graph_from_trace(trace);
    const Baseline base = compute_baseline(trace);
    REQUIRE(g.total_compute_ns() == base.compute_ns);
    const uint64_t need = op_need(g);
    const uint64_t budget = std::uniform_int_distribution<uint64_t>(need, base.peak_bytes)(rng);
    CAPTURE(trial, forward, g.size(), budget, need, base.peak_bytes);
    const CheckmateResult opt = solve_checkmate_milp(g, milp_opts(budget, 5));
    if (opt.status != MilpStatus::kOptimal && opt.status != MilpStatus::kInfeasible) continue;
    (opt.status == MilpStatus::kOptimal ? proven : infeasible)++;
    for (const std::string& policy : policies) {
      ReplayOptions o;
      o.budget.kind = Budget::Kind::bytes;
      o.budget.bytes = budget;
      o.policy = policy;
      o.memory = ReplayOptions::Memory::none;
      o.max_overhead = 0;
      const ReplayResult r = replay(trace, base, o);
      CAPTURE(policy, r.status_name, r.compute_ns, r.peak_bytes);
      if (opt.status == MilpStatus::kInfeasible) {
        CHECK_FALSE(r.status.ok());
        continue;
      }
      if (!r.status.ok()) continue;
      ++compared;
      CHECK(r.peak_bytes <= budget);
      CHECK(r.compute_ns >= opt.cost.compute_ns);
      above += r.compute_ns == opt.cost.compute_ns ? 0 : 1;
    }
  }
  INFO("proven optimal " << proven << ", infeasible " << infeasible << ", policy runs compared "
                         << compared << " (" << above << " above the optimum), cheaper remats "
                         << cheap);
  CHECK(proven >= 12);
  CHECK(compared >= 40);
  CHECK(above > 0);  // budgets tight enough that some policy pays more than the optimum
  CHECK((cheap > 0) == remat_times);
}

}  // namespace

TEST_CASE("no dynamic policy beats the MILP where CBC proves it optimal (random traces)",
          "[planner][checkmate][sim][stress]") {
  check_no_policy_beats_milp(20261124, false);
}

TEST_CASE("no dynamic policy beats the MILP on random traces with REMAT_TIME",
          "[planner][checkmate][sim][stress]") {
  // The replay charges REMAT_TIME for a remat (Note [Remat cost] in eviction/engine.cpp);
  // so must the MILP, or its "optimum" would cost more than some policy's run.
  check_no_policy_beats_milp(20261126, true);
}

TEST_CASE("no dynamic policy beats the MILP on random traces with WORKSPACE",
          "[planner][checkmate][sim][stress]") {
  // The engine holds an op's scratch beside its outputs (Note [Op workspace] in
  // eviction/engine.cpp); where the MILP proves no schedule fits, none of the policies may
  // fit either, so a MILP that counted the scratch where the engine does not is caught.
  check_no_policy_beats_milp(20261205, false, true);
}

TEST_CASE("checkmate planners through the registry", "[planner][checkmate]") {
  const Graph g = linear_graph(8);
  PlanOptions options;
  options.time_limit_s = 10;
  auto exact = make_planner("checkmate");
  const PlanResult r = run_planner(*exact, g, 4, options);
  CHECK(r.feasible);
  CHECK(r.predicted_compute_ns == 26);
  CHECK(r.predicted_peak_bytes <= 4);
  CHECK(r.plan.method == "checkmate");
  CHECK(r.plan.has_schedule());

  auto relaxed = make_planner("checkmate-lp");
  const PlanResult lp = run_planner(*relaxed, g, 6, options);
  CHECK(lp.feasible);
  CHECK(lp.predicted_compute_ns >= 21);
  CHECK(lp.predicted_peak_bytes <= 6);

  // Budget 2 is below node 9's need (nodes 7, 8 and 9): refused before solving.
  CHECK_THROWS_AS(run_planner(*exact, g, 2, options), PlanError);
}

TEST_CASE("checkmate methods refuse a graph above their node limit at once",
          "[planner][checkmate][guard]") {
  // Note [Formulation size guard]: above the limit nothing is built or solved, whatever
  // the time limit; the result says the size, the limit and what to use instead.
  const Graph big = linear_graph(kCheckmateLpMaxNodes / 2 + 1);  // 2n+1 > both limits
  REQUIRE(big.size() > kCheckmateLpMaxNodes);
  for (const bool relaxed : {false, true}) {
    INFO((relaxed ? "checkmate-lp" : "checkmate"));
    const auto start = std::chrono::steady_clock::now();
    const CheckmateResult r = relaxed ? solve_checkmate_lp_rounding(big, milp_opts(20, 3600))
                                      : solve_checkmate_milp(big, milp_opts(20, 3600));
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 1.0);
    CHECK(r.status == MilpStatus::kTooLarge);
    CHECK_FALSE(r.has_plan());
    CHECK(r.num_cols == 0);
    CHECK_THAT(
        r.detail,
        Catch::Contains("too large: " + std::to_string(big.size()) + " nodes > limit " +
                        std::to_string(relaxed ? kCheckmateLpMaxNodes : kCheckmateMilpMaxNodes)) &&
            Catch::Contains("kusumoto-approx") && Catch::Contains("coarsen"));
  }
  CHECK(std::string(milp_status_name(MilpStatus::kTooLarge)) == "too-large");

  // The MILP's limit is the lower one: a graph between the two goes to checkmate-lp only.
  const Graph mid = linear_graph(kCheckmateMilpMaxNodes / 2 + 1);
  REQUIRE(mid.size() > kCheckmateMilpMaxNodes);
  REQUIRE(mid.size() <= kCheckmateLpMaxNodes);
  CHECK(solve_checkmate_milp(mid, milp_opts(20, 0.01)).status == MilpStatus::kTooLarge);
  CHECK(solve_checkmate_lp_rounding(mid, milp_opts(20, 0.01)).status != MilpStatus::kTooLarge);

  // The limit is an option: a graph of exactly the limit is solved, one more node is not.
  const Graph g = linear_graph(8);  // 17 nodes
  CheckmateOptions at = milp_opts(4);
  at.max_nodes = 17;
  CHECK(solve_checkmate_milp(g, at).status == MilpStatus::kOptimal);
  at.max_nodes = 16;
  CHECK(solve_checkmate_milp(g, at).status == MilpStatus::kTooLarge);
  CHECK(solve_checkmate_lp_rounding(g, at).status == MilpStatus::kTooLarge);
  CHECK(checkmate_max_nodes(CheckmateOptions{}, false) == kCheckmateMilpMaxNodes);
  CHECK(checkmate_max_nodes(CheckmateOptions{}, true) == kCheckmateLpMaxNodes);

  // Through the planner interface the refusal is a PlanTooLarge (a PlanError): dtr-plan
  // exits 2 on it, and compare shows a `too-large` row.
  PlanOptions options;
  options.milp_max_nodes = 16;
  for (const char* method : {"checkmate", "checkmate-lp"}) {
    auto planner = make_planner(method);
    CHECK_THROWS_AS(run_planner(*planner, g, 4, options), PlanTooLarge);
    CHECK_THROWS_WITH(run_planner(*planner, g, 4, options),
                      Catch::StartsWith(std::string(method) + ": too large: 17 nodes > limit 16"));
  }
}

TEST_CASE("checkmate never recomputes a pinned node", "[planner][checkmate]") {
  // A trace's CONSTANT is a pinned node of cost 0: left free, R for it cost nothing, and
  // CBC could return a schedule that "recomputes" the resident constant (seen on
  // tests/data/planner/two_steps.trace at budget 0.95: plan_eval refused the plan with
  // "computes a node that is resident"). R[t][i] is fixed to 0 for pinned i < t.
  std::istringstream in(
      "node x cost=0 size=8 pinned\nnode a cost=3 size=8 deps=x\nnode b cost=3 size=8 deps=a\n"
      "node gb cost=1 size=8 deps=a,b backward\nnode ga cost=1 size=8 deps=x,gb backward pinned\n");
  const Graph g = read_graph_text(in, "pinned");
  const CheckmateFormulation f = build_checkmate_formulation(g, 64);
  for (size_t t = 1; t < g.size(); ++t) CHECK(f.col_ub[f.r_col[t][0]] == 0);
  CHECK(f.col_ub[f.r_col[3][1]] == 1);  // a is not pinned: it may be recomputed
  const CheckmateResult r = solve_checkmate_milp(g, milp_opts(32));  // keep-all fits: x a b gb
  REQUIRE(r.has_plan());
  for (size_t t = 1; t < g.size(); ++t) CHECK(r.schedule.compute[t][0] == 0);
  CHECK_NOTHROW(evaluate_plan(g, plan_from_stage_schedule(g, r.schedule, "checkmate")));
}
