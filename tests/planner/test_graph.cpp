// test_graph.cpp: the planners' graph: from traces, the text format, generators.
#include <catch2/catch.hpp>

#include <sstream>

#include "dtr/core/trace.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"
#include "dtr/sim/replay.h"
#include "test_support.h"

using dtr::test::test_data;

TEST_CASE("graph_from_trace follows Note [Trace to graph] on the small trace", "[planner][graph]") {
  const dtr::Trace trace = dtr::read_trace(test_data("traces/good.log"));
  const dtr::Graph g = dtr::graph_from_trace(trace);
  REQUIRE(g.size() == 5);
  // w (constant), x (constant), y (CALL; yv folds into x), y.v1 (MUTATE), g (backward CALL).
  CHECK(g.nodes[0].name == "w");
  CHECK(g.nodes[0].pinned);
  CHECK(g.nodes[1].name == "x");
  CHECK(g.nodes[1].pinned);
  CHECK(g.nodes[2].name == "y");
  CHECK(g.nodes[2].deps == std::vector<uint32_t>{0, 1});
  CHECK(g.nodes[2].size_bytes == 2048);
  CHECK_FALSE(g.nodes[2].pinned);  // its name moved to the mutated copy
  CHECK(g.nodes[3].name == "y.v1");
  CHECK(g.nodes[3].size_bytes == 2048);
  CHECK(g.nodes[3].deps == std::vector<uint32_t>{1, 2});
  CHECK(g.nodes[3].compute_ns == 250);
  CHECK(g.first_backward == 4);
  CHECK(g.nodes[4].backward);
  CHECK(g.nodes[4].deps == std::vector<uint32_t>{3});
  CHECK_FALSE(g.nodes[4].pinned);  // `g` was re-pointed at yv by COPY_FROM
  CHECK(g.total_compute_ns() == dtr::compute_baseline(trace).compute_ns);
}

TEST_CASE("graphs of the DTR logs keep the trace's compute and fit under its peak", "[planner][graph][logs]") {
  for (const char* prefix : {"resnet32", "transformer", "lstm"}) {
    const std::string path = dtr::test::log_path(prefix);
    if (path.empty()) {
      WARN("skipping " << prefix << ": log not found in " << DTR_LOG_DIR);
      continue;
    }
    const dtr::Trace trace = dtr::read_trace(path);
    const dtr::Graph g = dtr::graph_from_trace(trace);
    const dtr::Baseline b = dtr::compute_baseline(trace);
    INFO(prefix << ": " << g.size() << " nodes");
    CHECK_NOTHROW(g.validate());
    CHECK(g.total_compute_ns() == b.compute_ns);
    CHECK(g.first_backward > 0);
    CHECK(g.first_backward < g.size());
    const dtr::PlanEval e = dtr::evaluate_plan(g, dtr::keep_all_plan(g));
    CHECK(e.compute_ns == b.compute_ns);
    CHECK(e.peak_bytes <= b.peak_bytes);
    CHECK(e.peak_bytes > b.peak_bytes / 4);
  }
}

// Note [Plans number constants at first read] in core/constant_placement.cpp
TEST_CASE("no graph is made from a trace that declares constants where they were allocated",
          "[planner][graph]") {
  std::istringstream in(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":4}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\",\"EARLY\":true}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"w\",\"MEMORY\":\"64\"}\n"
      "{\"INSTRUCTION\":\"CALL\",\"NAME\":\"f\",\"ARGS\":[\"w\"],\"RESULT\":[\"y\"],"
      "\"TIME\":5}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"NAME\":\"y\",\"MEMORY\":\"64\"}\n"
      "{\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\",\"ALIAS\":-1}\n");
  dtr::Trace trace = dtr::read_trace(in, "early.trace");
  CHECK_THROWS_WITH(dtr::graph_from_trace(trace), Catch::Contains("trace_constants:read"));
  trace.events[0].early = false;
  CHECK(dtr::graph_from_trace(trace).nodes.size() == 2);
}

TEST_CASE("the text graph format round-trips", "[planner][graph]") {
  const dtr::Graph g = dtr::read_graph_text(test_data("planner/small.graph"));
  REQUIRE(g.size() == 7);
  CHECK(g.first_backward == 4);
  CHECK(g.nodes[4].deps == std::vector<uint32_t>{2, 3});
  CHECK(g.nodes[6].pinned);
  std::stringstream ss;
  dtr::write_graph_text(g, ss);
  const dtr::Graph back = dtr::read_graph_text(ss, "roundtrip");
  CHECK(dtr::graph_hash(back) == dtr::graph_hash(g));

  const dtr::Trace trace = dtr::read_trace(test_data("traces/good.log"));
  const dtr::Graph tg = dtr::graph_from_trace(trace);
  std::stringstream ts;
  dtr::write_graph_text(tg, ts);
  CHECK(dtr::graph_hash(dtr::read_graph_text(ts, "t")) == dtr::graph_hash(tg));
}

TEST_CASE("bad graph text is a PlanError naming file, line and problem", "[planner][graph]") {
  auto error_of = [](const std::string& file) -> std::string {
    try {
      dtr::read_graph_text(test_data("planner/" + file));
    } catch (const dtr::PlanError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string cycle = error_of("cycle.graph");
  CHECK_THAT(cycle, Catch::Contains("cycle.graph:3:") && Catch::Contains("cycle or undefined node"));
  CHECK_THAT(error_of("undefined_dep.graph"),
             Catch::Contains("undefined_dep.graph:2:") && Catch::Contains("'nosuch' is not defined"));
  CHECK_THAT(error_of("bad_size.graph"), Catch::Contains("bad_size.graph:1: bad size 'lots'"));
  // Costs and sizes over 2^50, and sums over 2^60, as in a trace (Note [Quantities that
  // sum]): two costs of 2^63 summed to 0, "feasible" (a probe, 2026-12-07).
  std::istringstream huge_cost("node a cost=9223372036854775808 size=1\n");
  CHECK_THROWS_WITH(dtr::read_graph_text(huge_cost, "h"), Catch::Contains("h:1: bad cost"));
  std::istringstream huge_size("node a cost=1 size=9000000T\n");
  CHECK_THROWS_WITH(dtr::read_graph_text(huge_size, "h"),
                    Catch::Contains("h:1: size '9000000T' is above 2^50 bytes"));
  std::string many;
  for (int i = 0; i < 1030; ++i)
    many += "node n" + std::to_string(i) + " cost=1125899906842624 size=1\n";
  std::istringstream sums(many);
  CHECK_THROWS_WITH(dtr::read_graph_text(sums, "h"),
                    Catch::Contains("h:1025: the graph's costs or sizes add up to more than 2^60"));
  std::istringstream empty("# nothing\n\n");
  CHECK_THROWS_WITH(dtr::read_graph_text(empty, "e"), Catch::Contains("e: no nodes"));
  CHECK_THROWS_WITH(dtr::read_graph_text(std::string("/tmp")),
                    Catch::Contains("/tmp: is a directory"));
  std::istringstream dup("node a cost=1 size=1\nnode a cost=1 size=1\n");
  CHECK_THROWS_WITH(dtr::read_graph_text(dup, "dup"), Catch::Contains("dup:2: node 'a' defined twice"));
  // A forward node after a backward one is the next training step, not an error (Note
  // [Backward passes of a recorded trace]); first_backward is the first backward node.
  std::istringstream steps(
      "node a cost=1 size=1\nnode ga cost=1 size=1 deps=a backward\n"
      "node b cost=1 size=1 deps=a\nnode gb cost=1 size=1 deps=b backward\n");
  const dtr::Graph two = dtr::read_graph_text(steps, "steps");
  CHECK(two.first_backward == 1);
  CHECK_FALSE(two.nodes[2].backward);
  CHECK(two.has_several_backward_passes());
  dtr::Graph broken = two;
  broken.first_backward = 3;
  CHECK_THROWS_WITH(broken.validate(), Catch::Contains("the first backward node is 1"));
}

TEST_CASE("linear_graph is Checkmate's gen_linear_graph", "[planner][graph]") {
  const dtr::Graph g = dtr::linear_graph(8);
  REQUIRE(g.size() == 17);
  CHECK(g.first_backward == 9);
  CHECK(g.nodes[9].deps == std::vector<uint32_t>{7, 8});
  CHECK(g.nodes[16].deps == std::vector<uint32_t>{0, 15});
  CHECK(g.nodes[8].deps == std::vector<uint32_t>{7});
  for (const auto& n : g.nodes) CHECK((n.compute_ns == 1 && n.size_bytes == 1));
}

TEST_CASE("training chains are recognised and round-trip through ChainSpec", "[planner][graph]") {
  const dtr::ChainSpec spec{{0, 3, 4, 5}, {8, 1, 2, 3}, {7, 6, 5, 4}, {1, 1, 2, 2}};
  const dtr::Graph g = dtr::training_chain_graph(spec);
  REQUIRE(g.size() == 8);
  dtr::ChainSpec back;
  REQUIRE(dtr::as_training_chain(g, &back));
  CHECK(back.fwd_ns == spec.fwd_ns);
  CHECK(back.bwd_bytes == spec.bwd_bytes);
  CHECK_FALSE(dtr::as_training_chain(dtr::linear_graph(3), nullptr));
  CHECK(dtr::chain_graph({1, 2, 3}, {4, 5, 6}).nodes[2].deps == std::vector<uint32_t>{1});
}

TEST_CASE("remat costs: from REMAT_TIME, in the text format, charged for recomputations",
          "[planner][graph]") {
  // Note [Remat cost in plans]: m (a mask: 600 ns to make, 90 to make again) is read by
  // the backward node gm (the step's output); a and b are ordinary.
  std::istringstream text(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":2}\n"
      "{\"ARGS\":[],\"INSTRUCTION\":\"CALL\",\"NAME\":\"aten::bernoulli_\",\"RESULT\":[\"m\"],"
      "\"REMAT_TIME\":90,\"TIME\":600}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"m\"}\n"
      "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"m\"}\n"
      "{\"ARGS\":[\"m\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"aten::t\",\"RESULT\":[\"mt\"],"
      "\"REMAT_TIME\":3,\"TIME\":5}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"0\",\"NAME\":\"mt\"}\n"
      "{\"ALIAS\":0,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"mt\"}\n"
      "{\"ARGS\":[\"mt\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"a\",\"RESULT\":[\"a\"],\"TIME\":10}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"a\"}\n"
      "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\"}\n"
      "{\"ARGS\":[\"a\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"b\",\"RESULT\":[\"b\"],\"TIME\":20}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"b\"}\n"
      "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"b\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"a\"}\n"
      "{\"ANNOTATION\":\"BACKWARD\",\"INSTRUCTION\":\"ANNOTATE\"}\n"
      "{\"ARGS\":[\"b\",\"mt\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"gm\",\"RESULT\":[\"gm\"],"
      "\"TIME\":30}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"gm\"}\n"
      "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"gm\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"mt\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"m\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"b\"}\n");
  const dtr::Trace trace = dtr::read_trace(text, "mask.trace");
  const dtr::Graph g = dtr::graph_from_trace(trace);
  REQUIRE(g.size() == 4);  // m (with its view mt folded in), a, b, gm
  CHECK(g.nodes[0].name == "m");
  CHECK(g.nodes[0].compute_ns == 605);   // TIME of the op and of the view
  CHECK(g.nodes[0].remat_cost() == 93);  // REMAT_TIME of both
  CHECK(g.nodes[1].remat_ns == dtr::GraphNode::kSameCost);
  CHECK(g.nodes[1].remat_cost() == 10);
  CHECK(g.total_compute_ns() == dtr::compute_baseline(trace).compute_ns);

  // The text format carries it; only graphs with remat costs change their hash.
  std::stringstream ss;
  dtr::write_graph_text(g, ss);
  CHECK_THAT(ss.str(), Catch::Contains("node m cost=605 remat-cost=93 size=1000\n"));
  CHECK_THAT(ss.str(), Catch::Contains("node a cost=10 size=1000 deps=m\n"));
  const dtr::Graph back = dtr::read_graph_text(ss, "roundtrip");
  CHECK(back.nodes[0].remat_ns == 93);
  CHECK(dtr::graph_hash(back) == dtr::graph_hash(g));
  dtr::Graph same = g;
  same.nodes[0].remat_ns = dtr::GraphNode::kSameCost;
  CHECK(dtr::graph_hash(same) != dtr::graph_hash(g));
  std::istringstream bad("node a cost=1 remat-cost=x size=1\n");
  CHECK_THROWS_WITH(dtr::read_graph_text(bad, "bad"), Catch::Contains("bad:1: bad remat-cost 'x'"));

  // Recomputing m costs 93, not 605, in both modes of the evaluator; the first run 605.
  std::vector<dtr::NodeDecision> decisions(4, dtr::NodeDecision::keep);
  decisions[0] = dtr::NodeDecision::recompute;
  const dtr::PlanEval d = dtr::evaluate_decisions(g, decisions);
  CHECK(d.recomputations == 1);
  CHECK(d.recompute_ns == 93);
  CHECK(d.compute_ns == 665 + 93);
  using Step = dtr::ScheduleStep;
  dtr::Plan plan;
  plan.decisions = decisions;
  plan.schedule = {{Step::Kind::compute, 0}, {Step::Kind::compute, 1}, {Step::Kind::free, 0},
                   {Step::Kind::compute, 2}, {Step::Kind::free, 1},    {Step::Kind::compute, 0},
                   {Step::Kind::compute, 3}};
  const dtr::PlanEval s = dtr::evaluate_plan(g, plan);
  CHECK(s.recompute_ns == 93);
  CHECK(s.compute_ns == 665 + 93);
  CHECK(s.peak_bytes == 3000);
}

TEST_CASE("op scratch: from WORKSPACE, in the text format, held by every computation",
          "[planner][graph]") {
  // Note [Op workspace in plans]: conv holds 500 B of scratch while it runs and its view t
  // (folded into c's node) 800 B; gc, the backward, 700 B. x is the input.
  std::istringstream text(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":2}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"x\"}\n"
      "{\"ARGS\":[\"x\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"conv\",\"RESULT\":[\"c\"],"
      "\"TIME\":10,\"WORKSPACE\":500}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"c\"}\n"
      "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"c\"}\n"
      "{\"ARGS\":[\"c\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"aten::t\",\"RESULT\":[\"ct\"],"
      "\"TIME\":1,\"WORKSPACE\":800}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"0\",\"NAME\":\"ct\"}\n"
      "{\"ALIAS\":0,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"ct\"}\n"
      "{\"ARGS\":[\"ct\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"relu\",\"RESULT\":[\"r\"],"
      "\"TIME\":20}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"r\"}\n"
      "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"r\"}\n"
      "{\"ANNOTATION\":\"BACKWARD\",\"INSTRUCTION\":\"ANNOTATE\"}\n"
      "{\"ARGS\":[\"r\",\"ct\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"gc\",\"RESULT\":[\"gc\"],"
      "\"TIME\":30,\"WORKSPACE\":700}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"gc\"}\n"
      "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"gc\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"ct\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"c\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"r\"}\n");
  const dtr::Trace trace = dtr::read_trace(text, "scratch.trace");
  const dtr::Graph g = dtr::graph_from_trace(trace);
  REQUIRE(g.size() == 4);  // x, c (its view folded in), r, gc
  CHECK(g.nodes[0].workspace_bytes == 0);
  CHECK(g.nodes[1].workspace_bytes == 800);  // the larger of conv's and its view's
  CHECK(g.nodes[2].workspace_bytes == 0);
  CHECK(g.nodes[3].workspace_bytes == 700);

  // Keep-all: gc runs with x, c, r and itself resident and its 700 B: 4700 B, as the
  // replay's baseline holds it.
  const std::vector<dtr::NodeDecision> keep(4, dtr::NodeDecision::keep);
  CHECK(dtr::evaluate_decisions(g, keep).peak_bytes == 4700);
  CHECK(dtr::compute_baseline(trace).peak_bytes == 4700);
  // Dropping c after relu and making it again for gc: c's rerun (x, r, c) holds 800 B.
  std::vector<dtr::NodeDecision> drop = keep;
  drop[1] = dtr::NodeDecision::recompute;
  const dtr::PlanEval d = dtr::evaluate_decisions(g, drop);
  CHECK(d.recomputations == 1);
  CHECK(d.peak_bytes == 4700);
  using Step = dtr::ScheduleStep;
  const std::vector<Step> steps = {{Step::Kind::compute, 0}, {Step::Kind::compute, 1},
                                   {Step::Kind::compute, 2}, {Step::Kind::free, 1},
                                   {Step::Kind::compute, 1}, {Step::Kind::compute, 3}};
  CHECK(dtr::evaluate_schedule(g, steps).peak_bytes == 4700);
  // With more scratch for c (2000 B) and none for gc, c's rerun is the peak: x, r and c
  // resident (3000) and its scratch; c's first run holds 2000 + 2000, gc 4000.
  dtr::Graph lean = g;
  lean.nodes[1].workspace_bytes = 2000;
  lean.nodes[3].workspace_bytes = 0;
  CHECK(dtr::evaluate_schedule(lean, steps).peak_bytes == 5000);
  CHECK(dtr::evaluate_decisions(lean, drop).peak_bytes == 5000);
  CHECK(dtr::evaluate_decisions(lean, keep).peak_bytes == 4000);
  // The largest op's need counts it: gc (1000) with r and c (2000) and 700 B of scratch.
  CHECK(dtr::largest_op_need(g) == 3700);

  // The text format carries it; only graphs with scratch change their hash.
  std::stringstream ss;
  dtr::write_graph_text(g, ss);
  CHECK_THAT(ss.str(), Catch::Contains("node c cost=11 size=1000 deps=x workspace=800\n"));
  const dtr::Graph back = dtr::read_graph_text(ss, "roundtrip");
  CHECK(back.nodes[1].workspace_bytes == 800);
  CHECK(back.nodes[3].workspace_bytes == 700);
  CHECK(dtr::graph_hash(back) == dtr::graph_hash(g));
  CHECK(dtr::graph_hash(lean) != dtr::graph_hash(g));
  std::istringstream k("node a cost=1 size=1 workspace=4K\n");
  CHECK(dtr::read_graph_text(k, "k").nodes[0].workspace_bytes == 4096);
  std::istringstream bad("node a cost=1 size=1 workspace=-3\n");
  CHECK_THROWS_WITH(dtr::read_graph_text(bad, "bad"), Catch::Contains("bad:1: bad workspace '-3'"));
}
