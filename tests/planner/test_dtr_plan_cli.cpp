// test_dtr_plan_cli.cpp: the dtr-plan tool as a user meets it: plans, compare, bad input.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtr/planner/checkmate.h"
#include "dtr/planner/graph.h"
#include "test_support.h"

using dtr::test::run_command;
using dtr::test::test_data;

namespace {
// dtr-plan is built next to dtr-sim.
std::string plan_bin() {
  std::string sim = DTR_SIM_BIN;
  return sim.substr(0, sim.size() - std::string("dtr-sim").size()) + "dtr-plan";
}
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
  const auto r = run_command(plan_bin() + " --graph " + test_data("planner/small.graph") +
                             " --budget 400 --method chen --out " + out);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("feasible") != std::string::npos);
  const auto j = nlohmann::json::parse(dtr::test::read_file(out));
  CHECK(j["format"] == "dtr-plan");
  CHECK(j["method"] == "chen");
  CHECK(j["trace"]["file"] == "small.graph");
  const auto e = run_command(plan_bin() + " eval --graph " + test_data("planner/small.graph") + " --plan " + out);
  INFO(e.output);
  CHECK(e.exit_code == 0);
  CHECK(e.output.find("fits") != std::string::npos);
  // The same plan against a trace it was not made for.
  const auto other = run_command(plan_bin() + " eval --trace " + test_data("traces/good.log") + " --plan " + out);
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
      {" --graph " + test_data("planner/cycle.graph") + " --budget 4",
       "cycle.graph:3: cycle or undefined node"},
      {" --graph " + test_data("planner/small.graph") + " --budget 100",
       "below the largest single op's need"},
      {" --graph " + test_data("planner/small.graph") + " --budget 400 --method nosuch",
       "valid methods: chen"},
      {" --graph " + test_data("planner/small.graph") + " --budget 1.5", "budget"},
      {" --graph " + test_data("planner/small.graph"), "--budget is required"},
      {" --trace " + test_data("traces/bad_json.log") + " --budget 0.5", "bad_json.log:"},
      {" eval --graph " + test_data("planner/small.graph") + " --plan " +
           test_data("planner/corrupt_plan.json"),
       "corrupt_plan.json: not valid JSON"},
      {" eval --graph " + test_data("planner/small.graph") + " --plan " +
           test_data("planner/wrong_trace_plan.json"),
       "plan for another trace"},
      {" --trace a --graph b --budget 0.5", "exactly one of --trace"},
      // Note [Output files]: refused before the solve; a full disk is not "written".
      {" --graph " + test_data("planner/small.graph") + " --budget 400 --out /tmp",
       "cannot write plan '/tmp': it is a directory"},
      {" --graph " + test_data("planner/small.graph") + " --budget 400 --out /no/such/dir/p.json",
       "the directory '/no/such/dir' does not exist"},
      {" --graph " + test_data("planner/small.graph") + " --budget 400 --out /dev/full",
       "cannot write plan '/dev/full': No space left on device"},
      {" compare --graph " + test_data("planner/small.graph") + " --budgets 0.9 --csv /dev/full",
       "cannot write CSV '/dev/full'"},
      {" eval --graph " + test_data("planner/small.graph") + " --plan /tmp",
       "/tmp: is a directory; give a plan file"},
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
  const auto r = run_command(plan_bin() + " compare --trace " + test_data("golden/small.log") +
                             " --budgets 0.5,0.8 --methods chen,rotor --policies dtr_eq,lru --csv " +
                             csv + " --svg " + svg);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string text = dtr::test::read_file(csv);
  CHECK(text.rfind("trace,budget_ratio,budget_bytes,kind,method,status,overhead", 0) == 0);
  size_t rows = 0;
  for (char ch : text) rows += ch == '\n';
  CHECK(rows == 1 + 2 * 5);  // per budget: the bound, 2 methods, 2 policies
  CHECK(text.find(",static,chen,") != std::string::npos);
  CHECK(text.find(",dynamic,dtr_eq,") != std::string::npos);
  CHECK(text.find(",bound,any schedule,ok,") != std::string::npos);
  // No row that ran does better than the bound at its budget (sim/remat_bound.h).
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);
  std::map<std::string, double> bound;
  std::vector<std::pair<std::string, double>> ok_rows;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    REQUIRE(f.size() >= 7);
    if (f[3] == "bound")
      bound[f[1]] = std::stod(f[6]);
    else if (f[5] == "ok")
      ok_rows.push_back({f[1], std::stod(f[6])});
  }
  REQUIRE(bound.size() == 2);
  for (const auto& [ratio, overhead] : ok_rows) CHECK(overhead >= bound[ratio] - 1e-6);
  CHECK(r.output.find("bound    any schedule") != std::string::npos);
  const std::string plot = dtr::test::read_file(svg);
  CHECK(plot.find("data-label=\"bound (any schedule)\"") != std::string::npos);
  CHECK(plot.find("data-label=\"plan:rotor\"") != std::string::npos);
  CHECK(plot.find("data-label=\"lru\"") != std::string::npos);
  std::remove(csv.c_str());
  std::remove(svg.c_str());
}

TEST_CASE("dtr-plan: checkmate on a graph above its node limit is a clear refusal",
          "[planner][cli][guard]") {
  require_bin();
  // plan: exit 2 with the reason and what to use instead.
  const auto r = run_command(plan_bin() + " --milp-max-nodes 5 --graph " +
                             test_data("planner/small.graph") + " --budget 400 --method checkmate");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("checkmate: too large: 7 nodes > limit 5") != std::string::npos);
  CHECK(r.output.find("use kusumoto-approx") != std::string::npos);

  // compare, default limits, a graph above both: `too-large` rows, promptly, with the
  // brief's command line (before the guard this did not return within 5 minutes).
  const std::string graph = tmp("big.graph"), csv = tmp("big.csv");
  {
    std::ofstream out(graph);
    dtr::write_graph_text(dtr::linear_graph(dtr::kCheckmateLpMaxNodes / 2 + 1), out);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto c = run_command(plan_bin() + " --time-limit 5 compare --graph " + graph +
                             " --budgets 0.5 --methods chen,checkmate,checkmate-lp --csv " + csv);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  CHECK(seconds < 30);
  CHECK(c.output.find("too-large") != std::string::npos);
  CHECK(c.output.find("checkmate-lp: too large: 803 nodes > limit 800") != std::string::npos);
  const std::string text = dtr::test::read_file(csv);
  CHECK(text.find(",static,checkmate,too-large,") != std::string::npos);
  CHECK(text.find(",static,checkmate-lp,too-large,") != std::string::npos);
  CHECK(text.find(",static,chen,ok,") != std::string::npos);
  std::remove(graph.c_str());
  std::remove(csv.c_str());
}

TEST_CASE("dtr-plan says why no plan fits a recorded trace", "[planner][cli][recorded]") {
  require_bin();
  const std::string trace = test_data("planner/two_steps.trace");
  // Below the floor (Note [Plan floor]): INFEASIBLE, and the least any plan needs, and why.
  const auto r = run_command(plan_bin() + " --trace " + trace + " --budget 770 --method chen");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("INFEASIBLE") != std::string::npos);
  CHECK(r.output.find("no plan can fit: every plan holds at least 776 B") != std::string::npos);
  CHECK(r.output.find("'s2gn2'") != std::string::npos);
  CHECK(r.output.find("raise the budget to at least 776 B") != std::string::npos);
  CHECK(r.output.find("2 backward passes") != std::string::npos);
  // Above it, a plan fits (before the backward passes were inferred, none did).
  const auto ok = run_command(plan_bin() + " --trace " + trace + " --budget 884 --method revolve");
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(ok.output.find("feasible") != std::string::npos);
  CHECK(ok.output.find("INFEASIBLE") == std::string::npos);
  // compare marks the budgets below the floor.
  const std::string csv = tmp("floor.csv");
  const auto c =
      run_command(plan_bin() + " compare --trace " + trace +
                  " --budgets 0.65,0.9 --methods chen,revolve --policies dtr_eq --csv " + csv);
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  CHECK(c.output.find("static floor 776 B") != std::string::npos);
  const std::string text = dtr::test::read_file(csv);
  CHECK(text.find("0.6500,") != std::string::npos);
  CHECK(text.find(",static,chen,below-floor,") != std::string::npos);
  CHECK(text.find(",static,revolve,ok,") != std::string::npos);
  // Without --policies: every policy that runs on byte accounting; `coop` needs the
  // allocator's address order and used to end the command with exit 2.
  const auto all = run_command(plan_bin() + " compare --trace " + trace +
                               " --budgets 0.9 --methods chen --csv " + csv);
  INFO(all.output);
  CHECK(all.exit_code == 0);
  const std::string rows = dtr::test::read_file(csv);
  CHECK(rows.find(",dynamic,dtr_eq,") != std::string::npos);
  CHECK(rows.find(",dynamic,coop,") == std::string::npos);
  std::remove(csv.c_str());
}

TEST_CASE("dtr-plan compare replays a named coop on the host's allocator", "[planner][cli]") {
  // Note [Host device] in sim/replay.cpp: coop reads block addresses, so byte accounting
  // cannot run it (this command stopped with exit 2); the host's allocator can, the budget
  // capping allocated bytes as the evaluator's does. A DTR log, whose tensors are far
  // larger than the allocator's 512-byte blocks (the small test traces' are not).
  require_bin();
  const std::string log = dtr::test::log_path("resnet32");
  if (log.empty()) {
    WARN("skipped: the ResNet-32 DTR log is not in " << DTR_LOG_DIR);
    return;
  }
  const std::string csv = tmp("coop.csv");
  const auto r =
      run_command(plan_bin() + " compare --trace " + log +
                  " --budgets 0.5 --methods chen --policies coop,dtr_eq --warm coop --csv " + csv);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string rows = dtr::test::read_file(csv);
  CHECK(rows.find(",dynamic,coop,ok,") != std::string::npos);
  CHECK(rows.find(",dynamic,dtr_eq,ok,") != std::string::npos);
  CHECK(rows.find(",warm,coop+chen,ok,") != std::string::npos);
  std::remove(csv.c_str());
}

TEST_CASE("dtr-plan graph writes a trace's graph, which plans as the trace does",
          "[planner][cli][recorded]") {
  require_bin();
  const std::string trace = test_data("planner/two_steps.trace"), graph = tmp("two_steps.graph");
  const auto w = run_command(plan_bin() + " graph --trace " + trace + " --out " + graph);
  INFO(w.output);
  REQUIRE(w.exit_code == 0);
  const std::string text = dtr::test::read_file(graph);
  CHECK(text.find("node s1x cost=0 size=64 pinned pinned-until=") != std::string::npos);
  CHECK(text.find("node zb1 cost=70 size=64 pinned pinned-from=s2gn1") != std::string::npos);
  // The same plan and peak from the graph as from the trace (a byte budget: ratios refer
  // to different baselines).
  const auto from_trace =
      run_command(plan_bin() + " --trace " + trace + " --budget 876 --method chen");
  const auto from_graph =
      run_command(plan_bin() + " --graph " + graph + " --budget 876 --method chen");
  INFO(from_trace.output << from_graph.output);
  CHECK(from_graph.exit_code == 0);
  CHECK(from_trace.output.find("peak 876 B") != std::string::npos);
  CHECK(from_graph.output.find("peak 876 B") != std::string::npos);
  const auto stdout_graph = run_command(plan_bin() + " graph --trace " + trace);
  CHECK(stdout_graph.output.find("node s2gn1 ") != std::string::npos);
  const auto missing = run_command(plan_bin() + " graph --trace " + tmp("no_such.trace"));
  CHECK(missing.exit_code == 2);
  std::remove(graph.c_str());
}

TEST_CASE("dtr-plan: outputs on inputs, bad time limits, full disks and empty graphs exit 2",
          "[planner][cli]") {
  // A probe of 2026-12-07 (Note [Outputs that are inputs], Note [Output files]).
  require_bin();
  const std::string trace = tmp("in.trace");
  run_command("cp " + test_data("planner/two_steps.trace") + " " + trace);
  const std::string dir = tmp("dir");
  run_command("mkdir -p " + dir + " && : > " + tmp("empty.graph"));
  struct Case {
    std::string command, message;
  };
  const std::vector<Case> cases = {
      {plan_bin() + " --trace " + trace + " --budget 0.8 --out " + trace,
       "cannot write plan '" + trace + "': it is the trace this command reads"},
      {plan_bin() + " graph --trace " + trace + " --out " + trace, "cannot write graph"},
      // In braces: run_command's own 2>&1 then takes the message, not /dev/full.
      {"{ " + plan_bin() + " graph --trace " + trace + " > /dev/full; }",
       "dtr-plan: cannot write standard output"},
      {plan_bin() + " --trace " + trace + " --budget 0.8 --time-limit -1",
       "'-1' is not a number of seconds above 0"},
      {plan_bin() + " --trace " + trace + " --budget 0.8 --time-limit nan", "'nan'"},
      {plan_bin() + " --trace " + trace + " --budget 0.8 --time-limit inf", "'inf'"},
      {plan_bin() + " --graph " + dir + " --budget 300M", "is a directory; give a graph file"},
      {plan_bin() + " --graph " + tmp("empty.graph") + " --budget 300M",
       "no nodes: the graph is empty"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(c.command);
    INFO(c.command << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
  CHECK(run_command("cmp " + trace + " " + test_data("planner/two_steps.trace")).exit_code == 0);
  run_command("rm -rf " + dir + " " + trace + " " + tmp("empty.graph"));
}

TEST_CASE("dtr-plan graph writes names --graph reads: odd characters, taken names",
          "[planner][cli]") {
  // Note [Graph names]: a trace name with a space, and a name like the version suffix the
  // graph gives a storage written in place ("y.v1" beside y's second version), were
  // written as they were, and --graph refused them.
  require_bin();
  const std::string trace = tmp("names.trace");
  {
    std::ofstream out(trace);
    out << R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"})"
        << "\n"
        << R"({"INSTRUCTION":"CONSTANT","NAME":"a b,c=d#e"})"
        << "\n"
        << R"({"INSTRUCTION":"MEMORY","MEMORY":8,"NAME":"a b,c=d#e"})"
        << "\n"
        << R"({"ARGS":["a b,c=d#e"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["y.v1"],"TIME":5})"
        << "\n"
        << R"({"INSTRUCTION":"MEMORY","MEMORY":8,"NAME":"y.v1"})"
        << "\n"
        << R"({"ALIAS":-1,"INSTRUCTION":"ALIAS","NAME":"y.v1"})"
        << "\n"
        << R"({"ARGS":["a b,c=d#e"],"INSTRUCTION":"CALL","NAME":"g","RESULT":["y"],"TIME":5})"
        << "\n"
        << R"({"INSTRUCTION":"MEMORY","MEMORY":8,"NAME":"y"})"
        << "\n"
        << R"({"ALIAS":-1,"INSTRUCTION":"ALIAS","NAME":"y"})"
        << "\n"
        << R"({"ARGS":["y","y.v1"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":3})"
        << "\n";
  }
  const std::string graph = tmp("names.graph");
  const auto written = run_command(plan_bin() + " graph --trace " + trace + " --out " + graph);
  INFO(written.output);
  REQUIRE(written.exit_code == 0);
  const auto text = run_command("cat " + graph).output;
  INFO(text);
  CHECK(text.find("node a_b_c_d_e ") != std::string::npos);
  CHECK(text.find("y.v1~2") != std::string::npos);  // the second "y.v1"
  const auto planned = run_command(plan_bin() + " --graph " + graph + " --budget 1.0");
  INFO(planned.output);
  CHECK(planned.exit_code == 0);
  run_command("rm -f " + trace + " " + graph);
}

TEST_CASE("dtr-plan: a ratio of zero and an empty budget item exit 2 before the input is read",
          "[planner][cli]") {
  // The seventy-sixth session's probe (Note [Budget syntax], Note [Empty items in a budget
  // list]); a trace that does not exist shows the budget is checked first.
  require_bin();
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" --trace /nonexistent/t.log --budget 0x",
       "bad budget '0x': a ratio must be in (0,1]; for no budget write 0 or unlimited"},
      {" --trace /nonexistent/t.log --budget 0.0x", "bad budget '0.0x': a ratio must be in (0,1]"},
      {" --trace /nonexistent/t.log --budget 0", "budget '0' means unlimited"},
      {" compare --trace /nonexistent/t.log --budgets 0.5,,0.3",
       "bad budget list '0.5,,0.3': item 2 is empty; drop the stray comma"},
  };
  for (const Case& c : cases) {
    const auto r = run_command(plan_bin() + c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}
