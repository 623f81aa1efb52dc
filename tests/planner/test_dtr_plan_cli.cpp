// test_dtr_plan_cli.cpp: the dtr-plan tool as a user meets it: plans, compare, bad input.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

using dtr::test::run_command;

namespace {
// dtr-plan is built next to dtr-sim.
std::string plan_bin() {
  std::string sim = DTR_SIM_BIN;
  return sim.substr(0, sim.size() - std::string("dtr-sim").size()) + "dtr-plan";
}
std::string data(const std::string& rel) { return std::string(DTR_TEST_DATA_DIR) + "/" + rel; }
std::string tmp(const std::string& name) {
  return "/tmp/dtr_plan_test_" + std::to_string(getpid()) + "_" + name;
}
void require_bin() {
  INFO("dtr-plan not built at " << plan_bin() << "; build the dtr-plan target");
  REQUIRE(access(plan_bin().c_str(), X_OK) == 0);
}
}  // namespace

TEST_CASE("every dtr-plan command has --help and `methods` lists the registry", "[planner][cli]") {
  require_bin();
  for (const char* cmd : {"", " eval", " compare", " methods"}) {
    const auto r = run_command(plan_bin() + cmd + " --help");
    INFO(cmd << ": " << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("Usage") != std::string::npos);
  }
  const auto r = run_command(plan_bin() + " methods");
  REQUIRE(r.exit_code == 0);
  for (const char* m : {"chen ", "revolve ", "rotor ", "checkpoint-subset "})
    CHECK(r.output.find(m) != std::string::npos);
}

TEST_CASE("dtr-plan writes a plan that eval accepts", "[planner][cli]") {
  require_bin();
  const std::string out = tmp("small.json");
  const auto r = run_command(plan_bin() + " --graph " + data("planner/small.graph") +
                             " --budget 400 --method chen --out " + out);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("feasible") != std::string::npos);
  const auto j = nlohmann::json::parse(dtr::test::read_file(out));
  CHECK(j["format"] == "dtr-plan");
  CHECK(j["method"] == "chen");
  CHECK(j["trace"]["file"] == "small.graph");
  const auto e = run_command(plan_bin() + " eval --graph " + data("planner/small.graph") + " --plan " + out);
  INFO(e.output);
  CHECK(e.exit_code == 0);
  CHECK(e.output.find("fits") != std::string::npos);
  // The same plan against a trace it was not made for.
  const auto other = run_command(plan_bin() + " eval --trace " + data("traces/good.log") + " --plan " + out);
  CHECK(other.exit_code == 2);
  CHECK(other.output.find("plan for another trace") != std::string::npos);
  std::remove(out.c_str());
}

TEST_CASE("dtr-plan: bad input exits 2 with a clear message", "[planner][cli]") {
  require_bin();
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" --graph " + data("planner/cycle.graph") + " --budget 4", "cycle.graph:3: cycle or undefined node"},
      {" --graph " + data("planner/small.graph") + " --budget 100", "below the largest single op's need"},
      {" --graph " + data("planner/small.graph") + " --budget 400 --method nosuch", "valid methods: chen"},
      {" --graph " + data("planner/small.graph") + " --budget 1.5", "budget"},
      {" --graph " + data("planner/small.graph"), "--budget is required"},
      {" --trace " + data("traces/bad_json.log") + " --budget 0.5", "bad_json.log:"},
      {" eval --graph " + data("planner/small.graph") + " --plan " + data("planner/corrupt_plan.json"),
       "corrupt_plan.json: not valid JSON"},
      {" eval --graph " + data("planner/small.graph") + " --plan " + data("planner/wrong_trace_plan.json"),
       "plan for another trace"},
      {" --trace a --graph b --budget 0.5", "exactly one of --trace"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(plan_bin() + c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}

TEST_CASE("dtr-plan compare prints static and dynamic rows, CSV and SVG", "[planner][cli]") {
  require_bin();
  const std::string csv = tmp("cmp.csv"), svg = tmp("cmp.svg");
  const auto r = run_command(plan_bin() + " compare --trace " + data("golden/small.log") +
                             " --budgets 0.5,0.8 --methods chen,rotor --policies dtr_eq,lru --csv " +
                             csv + " --svg " + svg);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string text = dtr::test::read_file(csv);
  CHECK(text.rfind("trace,budget_ratio,budget_bytes,kind,method,status,overhead", 0) == 0);
  size_t rows = 0;
  for (char ch : text) rows += ch == '\n';
  CHECK(rows == 1 + 2 * 4);
  CHECK(text.find(",static,chen,") != std::string::npos);
  CHECK(text.find(",dynamic,dtr_eq,") != std::string::npos);
  const std::string plot = dtr::test::read_file(svg);
  CHECK(plot.find("data-label=\"plan:rotor\"") != std::string::npos);
  CHECK(plot.find("data-label=\"lru\"") != std::string::npos);
  std::remove(csv.c_str());
  std::remove(svg.c_str());
}
