// test_graph.cpp: the planners' graph: from traces, the text format, generators.
#include <catch2/catch.hpp>

#include <sstream>

#include "dtr/core/trace.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/plan_eval.h"
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
