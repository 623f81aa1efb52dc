// test_plan_file.cpp: the versioned plan file and the evaluator's contract.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "dtr/planner/plan.h"
#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"
#include "test_support.h"

using dtr::test::test_data;

TEST_CASE("a plan round-trips through its file", "[planner][plan]") {
  const dtr::Graph g = dtr::read_graph_text(test_data("planner/small.graph"));
  dtr::Plan p = dtr::keep_all_plan(g, "chen");
  dtr::bind_plan(p, g, "small.graph");
  p.budget_bytes = 400;
  p.decisions[2] = dtr::NodeDecision::recompute;
  p.schedule = {{dtr::ScheduleStep::Kind::compute, 0}, {dtr::ScheduleStep::Kind::free, 0}};
  p.predicted_compute_ns = 70;
  std::stringstream ss;
  dtr::write_plan(p, ss);
  const auto j = nlohmann::json::parse(ss.str());
  CHECK(j["format"] == "dtr-plan");
  CHECK(j["version"] == dtr::kPlanFormatVersion);
  CHECK(j["trace"]["nodes"] == 7);
  CHECK(j["decisions"] == "KKRKKKK");
  const dtr::Plan back = dtr::read_plan(ss, "mem");
  CHECK(back.method == "chen");
  CHECK(back.trace == "small.graph");
  CHECK(back.graph_hash == dtr::graph_hash(g));
  CHECK(back.decisions == p.decisions);
  CHECK(back.schedule == p.schedule);
  CHECK(back.budget_bytes == 400);
  CHECK_NOTHROW(dtr::check_plan_matches(back, g, "mem", "small.graph"));
}

TEST_CASE("corrupt plan files are PlanErrors naming the problem", "[planner][plan]") {
  auto error_of = [](const std::string& file) -> std::string {
    try {
      dtr::read_plan(test_data("planner/" + file));
    } catch (const dtr::PlanError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(error_of("corrupt_plan.json"), Catch::Contains("corrupt_plan.json: not valid JSON"));
  CHECK_THAT(error_of("plan_version_too_new.json"), Catch::Contains("version 99 is not supported"));
  CHECK_THAT(error_of("plan_bad_decision.json"), Catch::Contains("decision 2 is 'X'"));
  CHECK_THAT(error_of("no_such_plan.json"), Catch::Contains("cannot open"));
  std::istringstream short_decisions(
      R"({"format":"dtr-plan","version":1,"method":"m","trace":{"file":"f","nodes":3,"hash":"0"},"budget_bytes":1,"decisions":"KK"})");
  CHECK_THROWS_WITH(dtr::read_plan(short_decisions, "s"), Catch::Contains("has 2 entries but the plan has 3 nodes"));
  std::istringstream bad_step(
      R"({"format":"dtr-plan","version":1,"method":"m","trace":{"file":"f","nodes":1,"hash":"0"},"budget_bytes":1,"decisions":"K","schedule":[["run",0]]})");
  CHECK_THROWS_WITH(dtr::read_plan(bad_step, "s"), Catch::Contains("has kind 'run'"));
  // Each field checked for its type and range, and named (a probe, 2026-12-07: -5 bytes read
  // as a budget of 16777216 TiB, 2^32 + 3 nodes as 3, "abc" as nlohmann's type message).
  auto plan_with = [](const std::string& nodes, const std::string& budget) {
    return R"({"format":"dtr-plan","version":1,"method":"m","trace":{"file":"f","nodes":)" + nodes +
           R"(,"hash":"0"},"budget_bytes":)" + budget + R"(,"decisions":"KKK"})";
  };
  struct Case {
    std::string text, words;
  };
  const Case cases[] = {
      {plan_with("3", "-5"), "field \"budget_bytes\" is -5, not a whole number from 0"},
      {plan_with("3", "1.5"), "field \"budget_bytes\" is 1.5"},
      {plan_with("3", "1e300"), "field \"budget_bytes\" is 1e+300"},
      {plan_with("3", "\"abc\""), "field \"budget_bytes\" is \"abc\""},
      {plan_with("4294967299", "1"), "field \"nodes\" of \"trace\" is 4294967299"},
      {plan_with("3", "1e999"), "not valid JSON"},
      {R"({"format":"dtr-plan","version":1,"trace":{}})", "missing field \"method\""},
      {R"({"format":"dtr-plan","version":0})", "make the plan again with this dtr-plan"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    std::istringstream in(c.text);
    CHECK_THROWS_WITH(dtr::read_plan(in, "p.json"),
                      Catch::Contains("p.json: ") && Catch::Contains(c.words));
  }
  std::istringstream good(plan_with("3", "1"));
  CHECK(dtr::read_plan(good, "p.json").node_count == 3);
}

TEST_CASE("a plan for another trace is refused", "[planner][plan]") {
  const dtr::Graph g = dtr::read_graph_text(test_data("planner/small.graph"));
  const dtr::Plan p = dtr::read_plan(test_data("planner/wrong_trace_plan.json"));
  CHECK_THROWS_WITH(dtr::check_plan_matches(p, g, "wrong_trace_plan.json", "small.graph"),
                    Catch::Contains("plan for another trace") && Catch::Contains("other.log"));
  // Same node count, other costs: the hash tells them apart.
  dtr::Graph g2 = g;
  g2.nodes[3].compute_ns += 1;
  dtr::Plan q = dtr::keep_all_plan(g);
  CHECK_THROWS_WITH(dtr::check_plan_matches(q, g2, "q", "g2"), Catch::Contains("plan for another trace"));
}

TEST_CASE("decisions run as Note [Static execution] says", "[planner][eval]") {
  // Unit training chain of 9 steps: a_0..a_8, d_9..d_1; keep a_3 and a_6.
  const size_t L = 9;
  const dtr::ChainSpec spec{std::vector<uint64_t>(L, 1), std::vector<uint64_t>(L, 1),
                            std::vector<uint64_t>(L, 1), std::vector<uint64_t>(L, 0)};
  const dtr::Graph g = dtr::training_chain_graph(spec);
  std::vector<dtr::NodeDecision> d(g.size(), dtr::NodeDecision::keep);
  for (uint32_t k = 1; k < L; ++k)
    if (k != 3 && k != 6) d[k] = dtr::NodeDecision::recompute;
  const dtr::PlanEval e = dtr::evaluate_decisions(g, d);
  CHECK(e.recomputations == 6);  // a_7 a_8, a_4 a_5, a_1 a_2: each segment once
  CHECK(e.compute_ns == g.total_compute_ns() + 6);
  // a_0, a_3, a_6 + a segment of two + the one being computed: 5 at most... the forward
  // sweep holds a_0 a_3 a_6 plus two working states.
  CHECK(e.peak_bytes == 5);
  const dtr::PlanEval all = dtr::evaluate_decisions(g, std::vector<dtr::NodeDecision>(g.size()));
  CHECK(all.recomputations == 0);
  CHECK(all.peak_bytes == L);
}

TEST_CASE("schedules are checked step by step", "[planner][eval]") {
  const dtr::Graph g = dtr::read_graph_text(test_data("planner/small.graph"));
  using K = dtr::ScheduleStep::Kind;
  std::vector<uint32_t> order{0, 1, 2, 3, 4, 5, 6};
  const auto steps = dtr::schedule_with_frees(g, order);
  const dtr::PlanEval e = dtr::evaluate_schedule(g, steps);
  CHECK(e.compute_ns == 60);
  CHECK(e.peak_bytes == dtr::evaluate_decisions(g, std::vector<dtr::NodeDecision>(7)).peak_bytes);
  CHECK_THROWS_WITH(dtr::evaluate_schedule(g, {{K::compute, 0}, {K::compute, 2}}),
                    Catch::Contains("needs node 1 'a', which is not resident"));
  CHECK_THROWS_WITH(dtr::evaluate_schedule(g, {{K::compute, 0}, {K::free, 0}}),
                    Catch::Contains("frees a pinned node"));
  CHECK_THROWS_WITH(dtr::evaluate_schedule(g, {{K::compute, 0}}), Catch::Contains("never computes node 1"));
  // Recomputing b before the backward needs it again: one more compute of a and b.
  const auto again = dtr::schedule_with_frees(g, {0, 1, 2, 3, 4, 1, 5, 6});
  CHECK(dtr::evaluate_schedule(g, again).recomputations == 1);
}

TEST_CASE("a budget below the largest op's need is refused", "[planner][plan]") {
  const dtr::Graph g = dtr::read_graph_text(test_data("planner/small.graph"));
  CHECK(dtr::largest_op_need(g) == 300);
  CHECK_THROWS_WITH(dtr::check_budget(g, 299), Catch::Contains("below the largest single op's need"));
  CHECK_NOTHROW(dtr::check_budget(g, 300));
  for (const dtr::PlannerInfo& info : dtr::planner_registry()) {
    if (info.name.rfind("checkmate", 0) == 0 || info.name.rfind("kusumoto", 0) == 0) continue;  // theirs
    auto planner = info.make();
    CHECK_THROWS_AS(dtr::run_planner(*planner, g, 250, dtr::PlanOptions{}), dtr::PlanError);
  }
}
