// test_warm_start.cpp: the dynamic runtime warm-started from a static plan (Note [Warm
// start] in eviction/plan_guide.cpp): it never exceeds the budget, it runs exactly as the
// plan's static evaluation when reality is the plan, and it falls back to its heuristic
// when reality departs from the plan.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>

#include <unistd.h>

#include <nlohmann/json.hpp>

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

namespace {

ReplayResult run(const Trace& trace, const std::string& policy, uint64_t budget_bytes,
                 std::shared_ptr<const PlanHints> hints,
                 ReplayOptions::Memory memory = ReplayOptions::Memory::none, uint32_t debug = 3) {
  ReplayOptions o;
  o.policy = policy;
  o.budget.kind = Budget::Kind::bytes;
  o.budget.bytes = budget_bytes;
  o.memory = memory;
  o.debug = debug;
  o.max_overhead = 0;
  o.plan_hints = std::move(hints);
  return replay(trace, compute_baseline(trace), o);
}

std::shared_ptr<const PlanHints> hints_for(const Graph& graph, const Plan& plan) {
  return std::make_shared<const PlanHints>(plan_hints(graph, plan, plan.method));
}

Plan plan_with(const Graph& graph, std::vector<NodeDecision> decisions) {
  Plan plan = keep_all_plan(graph, "test");
  plan.decisions = std::move(decisions);
  return plan;
}

// Every `period`-th forward node kept, the other forward nodes recomputed.
Plan periodic_plan(const Graph& graph, uint32_t period) {
  std::vector<NodeDecision> d(graph.size(), NodeDecision::keep);
  for (uint32_t i = 0; i < graph.first_backward; ++i)
    if (i % period != 0) d[i] = NodeDecision::recompute;
  return plan_with(graph, d);
}

}  // namespace

TEST_CASE("warm start: reality equals the plan, the run is the plan's static evaluation",
          "[planner][warm]") {
  const Trace trace = make_linear_chain_trace(64, 1024, 1000);
  const Graph graph = graph_from_trace(trace);
  for (uint32_t period : {2u, 4u, 8u, 16u}) {
    const Plan plan = periodic_plan(graph, period);
    const PlanEval e = evaluate_plan(graph, plan);
    REQUIRE(e.recomputations > 0);
    for (const char* policy : {"dtr_eq", "lru", "msps"}) {
      INFO("period " << period << ", policy " << policy);
      const ReplayResult r = run(trace, policy, e.peak_bytes, hints_for(graph, plan));
      REQUIRE(r.status.ok());
      CHECK(r.compute_ns == e.compute_ns);
      CHECK(r.stats.remat_compute_ns == e.recompute_ns);
      CHECK(r.peak_bytes == e.peak_bytes);
      // The plan did all the work: no eviction search, no heuristic eviction.
      CHECK(r.stats.eviction_searches == 0);
      CHECK(r.stats.num_evictions == 0);
      CHECK(r.stats.num_plan_drops > 0);
      CHECK(r.stats.plan_departures == 0);
      CHECK(r.plan_departure.empty());
    }
  }
}

TEST_CASE("warm start from the planners' own plans matches their evaluation",
          "[planner][warm]") {
  const Trace trace = make_linear_chain_trace(100, 4096, 500);
  const Graph graph = graph_from_trace(trace);
  const Baseline b = compute_baseline(trace);
  for (const char* method : {"chen", "checkpoint-subset", "revolve", "rotor"}) {
    for (double ratio : {0.3, 0.5}) {
      auto planner = make_planner(method);
      const PlanResult p = run_planner(*planner, graph, uint64_t(ratio * double(b.peak_bytes)), {});
      if (!p.feasible || p.plan.has_schedule()) continue;  // schedules: decisions only
      INFO(method << " at " << ratio);
      const PlanEval e = evaluate_plan(graph, p.plan);
      const ReplayResult r = run(trace, "dtr_eq", p.plan.budget_bytes, hints_for(graph, p.plan));
      REQUIRE(r.status.ok());
      CHECK(r.compute_ns == e.compute_ns);
      CHECK(r.peak_bytes <= p.plan.budget_bytes);
      CHECK(r.stats.num_evictions == 0);
    }
  }
}

TEST_CASE("warm start never exceeds the budget", "[planner][warm]") {
  // Random programs (views, multi-output ops, mutation, copies) and any decisions, at
  // budgets below and above what the plan needs, byte accounting and the fake allocator.
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const Trace trace = make_random_trace(seed, 400);
    const Graph graph = graph_from_trace(trace);
    const Baseline b = compute_baseline(trace);
    std::mt19937_64 rng(seed);
    std::vector<NodeDecision> d(graph.size());
    for (auto& x : d) x = rng() % 3 == 0 ? NodeDecision::keep : NodeDecision::recompute;
    const auto hints = hints_for(graph, plan_with(graph, d));
    for (double ratio : {0.4, 0.6, 0.9}) {
      for (auto memory : {ReplayOptions::Memory::none, ReplayOptions::Memory::fake}) {
        const uint64_t budget = uint64_t(ratio * double(b.peak_bytes));
        INFO("seed " << seed << ", ratio " << ratio << ", memory " << int(memory));
        const ReplayResult cold = run(trace, "dtr_eq", budget, nullptr, memory);
        const ReplayResult warm = run(trace, "dtr_eq", budget, hints, memory);
        CHECK(warm.peak_bytes <= budget);
        if (memory == ReplayOptions::Memory::fake) CHECK(warm.peak_reserved_bytes <= budget);
        // Drops never make a feasible run infeasible: everything dropped is recomputable.
        if (cold.status.ok()) CHECK(warm.status.ok());
        CHECK(warm.stats.plan_departures == 0);
      }
    }
  }
}

TEST_CASE("warm start falls back to the heuristic where memory departs from the plan",
          "[planner][warm]") {
  // A plan made for a larger budget: its drops are not enough, the heuristic evicts the rest.
  const Trace trace = make_linear_chain_trace(64, 1024, 1000);
  const Graph graph = graph_from_trace(trace);
  const Plan plan = periodic_plan(graph, 4);
  const PlanEval e = evaluate_plan(graph, plan);
  const uint64_t budget = e.peak_bytes * 6 / 10;
  const ReplayResult warm = run(trace, "dtr_eq", budget, hints_for(graph, plan));
  REQUIRE(warm.status.ok());
  CHECK(warm.peak_bytes <= budget);
  CHECK(warm.stats.num_evictions > 0);  // the heuristic's choices
  CHECK(warm.stats.num_plan_drops > 0);  // and the plan's, still followed
  CHECK(warm.stats.plan_departures == 0);
}

TEST_CASE("warm start stops following a plan the program departs from", "[planner][warm]") {
  const Trace trace = make_linear_chain_trace(64, 1024, 1000);
  const Graph graph = graph_from_trace(trace);
  const Plan plan = periodic_plan(graph, 4);
  const auto hints = hints_for(graph, plan);
  const uint64_t budget = evaluate_plan(graph, plan).peak_bytes;

  SECTION("from the first op on: exactly the cold run") {
    Trace other = trace;
    for (TraceEvent& ev : other.events)
      if (ev.kind == TraceEventKind::constant) ev.results[0].size_bytes *= 2;  // a bigger input
    const ReplayResult cold = run(other, "dtr_eq", budget, nullptr);
    const ReplayResult warm = run(other, "dtr_eq", budget, hints);
    CHECK(warm.stats.plan_departures == 1);
    CHECK(warm.stats.num_plan_drops == 0);
    CHECK_THAT(warm.plan_departure, Catch::Contains("storage 0 has 2048 bytes"));
    CHECK(warm.status_name == cold.status_name);
    CHECK(warm.compute_ns == cold.compute_ns);
    CHECK(warm.peak_bytes == cold.peak_bytes);
    CHECK(warm.stats.num_evictions == cold.stats.num_evictions);
    CHECK(warm.stats.eviction_searches == cold.stats.eviction_searches);
  }
  SECTION("midway: the plan is followed up to there, then the heuristic alone") {
    Trace other = trace;
    uint32_t calls = 0;
    for (TraceEvent& ev : other.events)
      if (ev.kind == TraceEventKind::call && ++calls == 40) ev.results[0].size_bytes = 512;
    const ReplayResult warm = run(other, "dtr_eq", budget, hints);
    REQUIRE(warm.status.ok());
    CHECK(warm.stats.plan_departures == 1);
    CHECK_THAT(warm.plan_departure, Catch::Contains("storage 40 has 512 bytes"));
    CHECK(warm.stats.num_plan_drops > 0);
    CHECK(warm.stats.num_evictions > 0);
    CHECK(warm.peak_bytes <= budget);
  }
  SECTION("a longer program than the plan's graph") {
    const Trace longer = make_linear_chain_trace(80, 1024, 1000);
    const ReplayResult warm = run(longer, "dtr_eq", budget, hints);
    CHECK(warm.stats.plan_departures == 1);
    CHECK(!warm.plan_departure.empty());
    CHECK(warm.peak_bytes <= budget);
  }
}

TEST_CASE("a plan for another trace is refused when it is loaded", "[planner][warm]") {
  const Trace a = make_linear_chain_trace(16);
  const Trace b = make_linear_chain_trace(17);
  const Graph ga = graph_from_trace(a);
  Plan plan = periodic_plan(ga, 4);
  bind_plan(plan, ga, a.path);
  const std::string path = "/tmp/dtr_warm_test_" + std::to_string(getpid()) + ".json";
  write_plan(plan, path);
  CHECK(load_warm_start(a, path)->nodes.size() == ga.size());
  CHECK_THROWS_WITH(load_warm_start(b, path), Catch::Contains("plan for another trace"));
  std::remove(path.c_str());
  // The simulator never reads a plan file itself.
  ReplayOptions o;
  o.plan_path = path;
  CHECK_THROWS_AS(replay(a, compute_baseline(a), o), ConfigError);
}

TEST_CASE("a live host loads a plan with the trace it names, beside it or given",
          "[planner][warm]") {
  // load_warm_start(plan, trace path): DTR_PLAN and DTR_PLAN_TRACE of the torch host.
  const std::string dir = "/tmp/dtr_warm_files_" + std::to_string(getpid());
  REQUIRE(system(("mkdir -p " + dir + "/elsewhere").c_str()) == 0);
  Trace a = make_linear_chain_trace(16);
  a.path = dir + "/chain.trace";
  write_trace(a, a.path);
  const Graph ga = graph_from_trace(a);
  Plan plan = periodic_plan(ga, 4);
  bind_plan(plan, ga, a.path);  // names "chain.trace", no directory
  const std::string beside = dir + "/plan.json", away = dir + "/elsewhere/plan.json";
  write_plan(plan, beside);
  write_plan(plan, away);
  CHECK(load_warm_start(beside, "")->nodes.size() == ga.size());
  CHECK(load_warm_start(away, a.path)->nodes.size() == ga.size());
  CHECK_THROWS_WITH(load_warm_start(away, ""),
                    Catch::Contains("chain.trace") && Catch::Contains("plan_trace"));
  // Another trace given: refused as for the simulator.
  Trace b = make_linear_chain_trace(17);
  b.path = dir + "/other.trace";
  write_trace(b, b.path);
  CHECK_THROWS_WITH(load_warm_start(beside, b.path), Catch::Contains("plan for another trace"));
  CHECK_THROWS(load_warm_start(dir + "/missing.json", ""));
  REQUIRE(system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("dtr-sim run --plan and DTR_PLAN warm-start; another trace's plan exits 2",
          "[planner][warm][cli]") {
  using dtr::test::run_command;
  const std::string sim = DTR_SIM_BIN;
  const std::string plan_bin = sim.substr(0, sim.size() - std::string("dtr-sim").size()) + "dtr-plan";
  const std::string small = std::string(DTR_TEST_DATA_DIR) + "/golden/small.log";
  const std::string plan = "/tmp/dtr_warm_cli_" + std::to_string(getpid()) + ".json";
  const auto made = run_command(plan_bin + " --trace " + small + " --budget 0.8 --method chen --out " + plan);
  INFO(made.output);
  REQUIRE(made.exit_code == 0);

  const auto r = run_command(sim + " run --trace " + small + " --budget 0.8 --allocator none --plan " + plan);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warm start from"));
  const auto j = run_command("DTR_PLAN=" + plan + " " + sim + " run --trace " + small +
                             " --budget 0.8 --allocator none --json");
  INFO(j.output);
  REQUIRE(j.exit_code == 0);
  const auto json = nlohmann::json::parse(j.output);
  CHECK(json["plan"] != "");
  CHECK(json["status"] == "ok");
  CHECK(json["plan_departure"] == "");

  const std::string other = std::string(DTR_TEST_DATA_DIR) + "/traces/good.log";
  const auto bad = run_command(sim + " run --trace " + other + " --plan " + plan);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("plan for another trace"));
  const auto sweep = run_command("DTR_PLAN=" + plan + " " + sim + " sweep --quiet --trace " + small);
  CHECK(sweep.exit_code == 2);
  CHECK_THAT(sweep.output, Catch::Contains("dtr-sim run --plan"));

  const std::string csv = plan + ".csv";
  const auto cmp = run_command(plan_bin + " compare --trace " + small +
                               " --budgets 0.8 --methods chen --policies dtr_eq --warm dtr_eq --csv " + csv);
  INFO(cmp.output);
  CHECK(cmp.exit_code == 0);
  CHECK_THAT(dtr::test::read_file(csv), Catch::Contains(",warm,dtr_eq+chen,ok,"));
  std::remove(csv.c_str());
  std::remove(plan.c_str());
}
