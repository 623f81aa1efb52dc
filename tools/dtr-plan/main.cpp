// dtr-plan: static rematerialization plans for a trace (or a hand-made graph).
//
//   dtr-plan --trace F|--graph G --budget 0.4|300M --method NAME [--out plan.json]
//   dtr-plan eval --trace F|--graph G --plan plan.json
//   dtr-plan compare --trace F --budgets 0.2:0.9:0.1 [--warm dtr_eq] [--csv F] [--svg F]
//     (with a trace, each budget's first row is the bound no schedule beats: sim/remat_bound.h)
//   dtr-plan graph --trace F [--out G]
//   dtr-plan methods
//
// A thin main over the planner library (docs/planner.md). A budget ratio refers to the
// trace's baseline peak (as in dtr-sim, so static and dynamic methods get the same bytes),
// or for --graph to the graph's peak without rematerialization. Bad input (a malformed
// trace or graph, a cycle, a budget below the largest op's need or a ratio of zero, a
// corrupt plan, a plan for another trace, an unknown method, a graph too large for the
// method) exits with code 2 and a message naming the problem. An infeasible plan is not an
// error: the result says the least peak any plan can reach (Note [Plan floor] in
// planner/planner.cpp) and why.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtr/core/options.h"
#include "dtr/core/output_file.h"
#include "dtr/core/status.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/heuristic.h"
#include "dtr/eviction/heuristic_registry.h"
#include "dtr/planner/checkmate.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/plan.h"
#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"
#include "dtr/planner/warm_start.h"
#include "dtr/sim/remat_bound.h"
#include "dtr/sim/replay.h"
#include "dtr/sim/svg_plot.h"
#include "dtr/sim/sweep.h"

namespace {

constexpr int kExitBadInput = 2;

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The graph to plan for, and what budget ratios refer to.
struct Input {
  std::string name;  // file name, recorded in plans
  dtr::Graph graph;
  bool have_trace = false;
  dtr::Trace trace;
  dtr::Baseline baseline;  // trace: compute_baseline; graph: the keep-all evaluation
  bool backward_inferred = false;  // Note [Backward passes of a recorded trace]
};

Input load_input(const std::string& trace_path, const std::string& graph_path) {
  if (trace_path.empty() == graph_path.empty())
    throw dtr::PlanError("give exactly one of --trace FILE or --graph FILE");
  Input in;
  if (!trace_path.empty()) {
    in.name = base_name(trace_path);
    in.trace = dtr::read_trace(trace_path);
    in.have_trace = true;
    in.graph = dtr::graph_from_trace(in.trace);
    in.baseline = dtr::compute_baseline(in.trace);
    in.backward_inferred = dtr::backward_inferred(in.trace);
  } else {
    in.name = base_name(graph_path);
    in.graph = dtr::read_graph_text(graph_path);
    const dtr::PlanEval e = dtr::evaluate_plan(in.graph, dtr::keep_all_plan(in.graph));
    in.baseline.peak_bytes = e.peak_bytes;
    in.baseline.compute_ns = e.compute_ns;
  }
  return in;
}

// A plan's budget, checked before the input is read (resolved against its peak after).
dtr::Budget parse_plan_budget(const std::string& text) {
  const dtr::Budget b = dtr::Budget::parse(text);
  if (b.kind == dtr::Budget::Kind::unlimited)
    throw dtr::ConfigError("dtr: budget '" + text + "' means unlimited; give bytes (300M) or a ratio (0.4)");
  return b;
}

// "(0.810 of the baseline peak)", or "" when there is no baseline to refer to.
std::string ratio_text(const Input& in, uint64_t bytes) {
  if (in.baseline.peak_bytes == 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, " (%.3f of the %s peak)",
                double(bytes) / double(in.baseline.peak_bytes),
                in.have_trace ? "baseline" : "keep-all");
  return buf;
}

// What the graph's backward passes are, when the trace did not say (a recorded trace).
void print_backward_passes(const Input& in) {
  if (!in.have_trace || !in.backward_inferred) return;
  size_t passes = 0, nodes = 0;
  for (size_t i = 0; i < in.graph.size(); ++i) {
    if (!in.graph.nodes[i].backward) continue;
    ++nodes;
    passes += i == 0 || !in.graph.nodes[i - 1].backward;
  }
  std::printf(
      "  the trace has no ANNOTATE BACKWARD: %zu backward pass%s of %zu nodes inferred from "
      "the *_backward ops (Note [Backward passes of a recorded trace])\n",
      passes, passes == 1 ? "" : "es", nodes);
}

// Why an infeasible plan is infeasible: the budget is below what every plan needs, or not.
void print_floor(const Input& in, const dtr::PlanFloor& floor, uint64_t budget_bytes) {
  if (budget_bytes < floor.bytes) {
    std::printf("  no plan can fit: %s; raise the budget to at least %s%s\n",
                dtr::describe_plan_floor(in.graph, floor).c_str(),
                dtr::format_bytes(floor.bytes).c_str(), ratio_text(in, floor.bytes).c_str());
  } else {
    std::printf(
        "  every plan needs at least %s%s, within the budget: another method may fit "
        "(dtr-plan compare)\n",
        dtr::format_bytes(floor.bytes).c_str(), ratio_text(in, floor.bytes).c_str());
  }
}

void print_result(const Input& in, const dtr::PlanResult& r) {
  std::printf("%s  method %s  budget %s  %s\n", in.name.c_str(), r.plan.method.c_str(),
              dtr::format_bytes(r.plan.budget_bytes).c_str(), r.feasible ? "feasible" : "INFEASIBLE");
  std::printf("  peak %s;  compute %llu ns of %llu ns: overhead %.4f;  solve %.3f s\n",
              dtr::format_bytes(r.predicted_peak_bytes).c_str(), (unsigned long long)r.predicted_compute_ns,
              (unsigned long long)in.graph.total_compute_ns(),
              in.graph.total_compute_ns() ? double(r.predicted_compute_ns) / double(in.graph.total_compute_ns()) : 1.0,
              r.solve_seconds);
  size_t kept = 0;
  for (dtr::NodeDecision d : r.plan.decisions) kept += d == dtr::NodeDecision::keep;
  std::printf("  %zu nodes: %zu kept, %zu recomputed;  schedule %s%s%s\n", in.graph.size(), kept,
              in.graph.size() - kept, r.plan.has_schedule() ? std::to_string(r.plan.schedule.size()).c_str() : "none",
              r.note.empty() ? "" : ";  ", r.note.c_str());
}

struct Row {
  double ratio;
  uint64_t budget_bytes;
  // kind: static, dynamic, warm (a policy + a plan), bound (sim/remat_bound.h)
  std::string kind, method, status;
  double overhead;
  uint64_t peak_bytes, compute_ns;
  double seconds;  // solve time (static) or replay wall time (dynamic, warm)
  // Dynamic and warm rows: heuristic evictions, eviction searches, candidates scored, and
  // the storages the plan dropped (warm).
  uint64_t evictions = 0, searches = 0, scored = 0, plan_drops = 0;
};

}  // namespace

int run_main(int argc, char** argv) {
  CLI::App app{"dtr-plan: static rematerialization plans (chen, revolve, rotor, ...) for a trace"};
  app.require_subcommand(0, 1);
  std::string trace_path, graph_path, budget_text, method = "rotor", out_path;
  dtr::PlanOptions popts;
  app.add_option("--trace", trace_path, "trace file (DTR log or dtr trace format)");
  app.add_option("--graph", graph_path, "graph in the text format (docs/plan-format.md)");
  app.add_option("--budget", budget_text, "ratio of the baseline peak (0.4) or bytes (300M)");
  app.add_option("--method", method, "planning method (see `dtr-plan methods`)")->capture_default_str();
  app.add_option("--out", out_path, "write the plan here (JSON)");
  app.add_option("--max-stages", popts.max_stages, "chain methods on a DAG: stages at most")->capture_default_str();
  app.add_option("--time-limit", popts.time_limit_s,
                 "time limit of checkmate's solver and kusumoto's DPs, seconds")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            // -1, 0 and nan became 0.01 s without a word, inf no limit at all (a probe).
            char* end = nullptr;
            const double seconds = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0)
              return "'" + text + "' is not a number of seconds above 0 (e.g. 60)";
            return std::string();
          },
          "SECONDS > 0"));
  app.add_option("--milp-max-nodes", popts.milp_max_nodes,
                 "checkmate methods refuse larger graphs (0: checkmate " +
                     std::to_string(dtr::kCheckmateMilpMaxNodes) + ", checkmate-lp " +
                     std::to_string(dtr::kCheckmateLpMaxNodes) +
                     "): building and presolving their formulation is not bounded by --time-limit")
      ->capture_default_str();

  app.add_option("--kusumoto-width", popts.kusumoto_width,
                 "kusumoto methods: entries kept per lower set's Pareto table (0: all, exact but "
                 "unbounded in time on long graphs)")
      ->capture_default_str();

  std::string eval_trace, eval_graph, eval_plan;
  CLI::App* eval = app.add_subcommand("eval", "evaluate a plan file on its trace or graph");
  eval->add_option("--trace", eval_trace, "trace file");
  eval->add_option("--graph", eval_graph, "graph file");
  eval->add_option("--plan", eval_plan, "plan file")->required();

  std::string cmp_trace, cmp_graph, cmp_budgets = "0.2:0.9:0.1", cmp_methods, cmp_policies, cmp_csv, cmp_svg;
  std::string cmp_warm;
  CLI::App* compare = app.add_subcommand("compare", "every method and dynamic policy at each budget");
  compare->add_option("--trace", cmp_trace, "trace file");
  compare->add_option("--graph", cmp_graph, "graph file (static methods only)");
  compare->add_option("--budgets", cmp_budgets, "START:STOP:STEP or a comma list of ratios")->capture_default_str();
  compare->add_option("--methods", cmp_methods, "comma-separated methods (default: all)");
  compare->add_option(
      "--policies", cmp_policies,
      "comma-separated dynamic policies (default: all that run on byte accounting)");
  compare->add_option("--warm", cmp_warm,
                      "comma-separated policies to also run warm-started from each budget's best "
                      "static plan (rows of kind `warm`; needs --trace)");
  compare->add_option("--csv", cmp_csv, "write the rows as CSV here");
  compare->add_option("--svg", cmp_svg, "plot overhead against budget here (SVG)");

  std::string graph_trace, graph_out;
  CLI::App* graph_cmd =
      app.add_subcommand("graph", "write a trace's graph in the text format (docs/plan-format.md)");
  graph_cmd->add_option("--trace", graph_trace, "trace file")->required();
  graph_cmd->add_option("--out", graph_out, "write the graph here (default: standard output)");

  CLI::App* methods = app.add_subcommand("methods", "list the planning methods");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }

  try {
    // Note [Output files]: before any work, and against the files read (Note [Outputs that
    // are inputs]).
    dtr::check_outputs(
        {{out_path, "plan"}, {cmp_csv, "CSV"}, {cmp_svg, "plot"}, {graph_out, "graph"}},
        {{trace_path, "trace"},
         {graph_path, "graph"},
         {eval_trace, "trace"},
         {eval_graph, "graph"},
         {eval_plan, "plan"},
         {cmp_trace, "trace"},
         {cmp_graph, "graph"},
         {graph_trace, "trace"}});
    if (*methods) {
      for (const dtr::PlannerInfo& p : dtr::planner_registry())
        std::printf("%-18s %s\n", p.name.c_str(), p.summary.c_str());
      return 0;
    }
    if (*graph_cmd) {
      const Input in = load_input(graph_trace, "");
      if (graph_out.empty()) {
        dtr::write_graph_text(in.graph, std::cout);
        return 0;
      }
      std::ostringstream out;
      dtr::write_graph_text(in.graph, out);
      dtr::write_file(graph_out, out.str(), "graph");  // Note [Output files]
      return 0;
    }
    if (*eval) {
      const Input in = load_input(eval_trace, eval_graph);
      const dtr::Plan plan = dtr::read_plan(eval_plan);
      dtr::check_plan_matches(plan, in.graph, eval_plan, in.name);
      const dtr::PlanEval e = dtr::evaluate_plan(in.graph, plan);
      std::printf("%s  plan %s (method %s)  budget %s: %s\n", in.name.c_str(), eval_plan.c_str(),
                  plan.method.c_str(), dtr::format_bytes(plan.budget_bytes).c_str(),
                  e.peak_bytes <= plan.budget_bytes ? "fits" : "DOES NOT FIT");
      std::printf("  peak %s;  compute %llu ns: overhead %.4f;  %llu recomputations\n",
                  dtr::format_bytes(e.peak_bytes).c_str(), (unsigned long long)e.compute_ns, e.overhead,
                  (unsigned long long)e.recomputations);
      return 0;
    }
    if (*compare) {
      const std::vector<double> ratios = dtr::parse_ratio_list(cmp_budgets);
      const Input in = load_input(cmp_trace, cmp_graph);
      std::vector<std::string> method_names = dtr::split_list(cmp_methods);
      if (method_names.empty())
        for (const dtr::PlannerInfo& p : dtr::planner_registry()) method_names.push_back(p.name);
      std::vector<std::unique_ptr<dtr::Planner>> planners;
      for (const std::string& m : method_names) planners.push_back(dtr::make_planner(m));
      std::vector<std::string> policies = dtr::split_list(cmp_policies);
      // Default: every policy that runs on byte accounting (allocator none, as the static
      // evaluator counts); `coop` needs the allocator's address order and is left out. Named,
      // it replays on the host's allocator (Note [Host device] in sim/replay.cpp): the
      // budget caps allocated bytes, as here, but in the allocator's 512-byte blocks.
      if (policies.empty() && in.have_trace)
        policies = dtr::builtin_heuristics().names_without(dtr::kFeatureAddressOrder);
      if (!policies.empty() && !in.have_trace)
        throw dtr::PlanError("dynamic policies need --trace, not --graph; drop --policies");
      for (const std::string& p : policies) dtr::builtin_heuristics().make(p, dtr::HeuristicParams{});
      // Byte accounting, like the evaluator; the host's allocator for a policy that reads
      // block addresses (above).
      const auto memory_for = [](const std::string& policy) {
        return dtr::builtin_heuristics().find(policy)->needs & dtr::kFeatureAddressOrder
                   ? dtr::ReplayOptions::Memory::host
                   : dtr::ReplayOptions::Memory::none;
      };
      const std::vector<std::string> warm_policies = dtr::split_list(cmp_warm);
      if (!warm_policies.empty() && !in.have_trace)
        throw dtr::PlanError("--warm replays the trace: give --trace, not --graph");
      if (!warm_policies.empty() && planners.empty())
        throw dtr::PlanError("--warm needs at least one static method (--methods)");
      for (const std::string& p : warm_policies) dtr::builtin_heuristics().make(p, dtr::HeuristicParams{});
      popts.trace_name = in.name;

      // Note [Plan floor]: below it every static row is `below-floor`.
      const dtr::PlanFloor floor = dtr::plan_floor(in.graph);
      std::printf("%s: %zu nodes; static floor %s%s: %s\n", in.name.c_str(), in.graph.size(),
                  dtr::format_bytes(floor.bytes).c_str(), ratio_text(in, floor.bytes).c_str(),
                  dtr::describe_plan_floor(in.graph, floor).c_str());
      print_backward_passes(in);
      std::vector<Row> rows;
      std::vector<std::string> refused;  // methods whose refusal was explained already
      for (double ratio : ratios) {
        const uint64_t budget = static_cast<uint64_t>(std::floor(ratio * double(in.baseline.peak_bytes)));
        std::printf("budget %.2f = %s%s\n  %-8s %-18s %-12s %9s %12s %10s\n", ratio,
                    dtr::format_bytes(budget).c_str(),
                    budget < floor.bytes ? " (below the static floor: no static plan fits)" : "",
                    "kind", "method", "status", "overhead", "peak", "seconds");
        auto print = [](const Row& r) {
          std::printf("  %-8s %-18s %-12s %9.4f %12s %10.3f", r.kind.c_str(), r.method.c_str(),
                      r.status.c_str(), r.overhead, dtr::format_bytes(r.peak_bytes).c_str(), r.seconds);
          if (r.kind != "static")
            std::printf("  searches %llu, drops %llu", (unsigned long long)r.searches,
                        (unsigned long long)r.plan_drops);
          std::printf("\n");
        };
        // The plan warm rows start from: the cheapest feasible one, else the least peak.
        dtr::PlanResult best_plan;
        bool have_plan = false;
        auto better = [](const dtr::PlanResult& a, const dtr::PlanResult& b) {
          if (a.feasible != b.feasible) return a.feasible;
          return a.feasible ? a.predicted_compute_ns < b.predicted_compute_ns
                            : a.predicted_peak_bytes < b.predicted_peak_bytes;
        };
        if (in.have_trace) {
          // The least recomputation of any schedule, static or dynamic (Note [Remat bound] in
          // sim/remat_bound.cpp): no row below can do better.
          const auto start = std::chrono::steady_clock::now();
          const dtr::RematBound b = dtr::remat_bound(in.trace, in.baseline, budget);
          Row row{ratio,
                  budget,
                  "bound",
                  "any schedule",
                  b.feasible ? "ok" : "infeasible",
                  b.feasible ? b.overhead : NAN,
                  0,
                  in.baseline.compute_ns + b.remat_ns,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
          std::printf("  %-8s %-18s %-12s %9.4f %12s %10.3f\n", row.kind.c_str(),
                      row.method.c_str(), row.status.c_str(), row.overhead, "-", row.seconds);
          rows.push_back(row);
        }
        for (auto& planner : planners) {
          Row row{ratio, budget, "static", planner->name(), "", NAN, 0, 0, 0};
          std::string why;  // a refusal's message, printed under the row once per method
          const auto start = std::chrono::steady_clock::now();
          try {
            const dtr::PlanResult r = dtr::run_planner(*planner, in.graph, budget, popts);
            row.status = r.feasible ? "ok" : budget < floor.bytes ? "below-floor" : "infeasible";
            row.peak_bytes = r.predicted_peak_bytes;
            row.compute_ns = r.predicted_compute_ns;
            row.overhead = double(r.predicted_compute_ns) / double(std::max<uint64_t>(1, in.graph.total_compute_ns()));
            row.seconds = r.solve_seconds;
            if (!have_plan || better(r, best_plan)) best_plan = r, have_plan = true;
          } catch (const dtr::BudgetBelowOpNeed&) {
            row.status = "below-op-need";
          } catch (const dtr::PlanTooLarge& e) {
            row.status = "too-large";
            why = e.what();
          } catch (const dtr::PlanError& e) {
            row.status = "error";
            why = e.what();
          }
          if (row.seconds == 0)
            row.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          print(row);
          if (!why.empty() &&
              std::find(refused.begin(), refused.end(), row.method) == refused.end()) {
            std::printf("           %s\n", why.c_str());
            refused.push_back(row.method);
          }
          rows.push_back(row);
        }
        auto dynamic_row = [&](const std::string& kind, const std::string& label,
                               const dtr::ReplayOptions& ro) {
          const dtr::ReplayResult r = dtr::replay(in.trace, in.baseline, ro);
          Row row{ratio, r.budget_bytes, kind, label, r.status_name, r.overhead,
                  r.peak_bytes, r.compute_ns, r.wall_seconds};
          row.evictions = r.stats.num_evictions;
          row.searches = r.stats.eviction_searches;
          row.scored = r.stats.candidates_scored;
          row.plan_drops = r.stats.num_plan_drops;
          print(row);
          rows.push_back(row);
        };
        for (const std::string& policy : policies) {
          dtr::ReplayOptions ro;
          ro.policy = policy;
          ro.budget.kind = dtr::Budget::Kind::ratio;
          ro.budget.ratio = ratio;
          ro.memory = memory_for(policy);
          dynamic_row("dynamic", policy, ro);
        }
        if (!warm_policies.empty() && have_plan) {
          const auto hints = std::make_shared<const dtr::PlanHints>(
              dtr::plan_hints(in.graph, best_plan.plan, best_plan.plan.method));
          for (const std::string& policy : warm_policies) {
            dtr::ReplayOptions ro;
            ro.policy = policy;
            ro.budget.kind = dtr::Budget::Kind::ratio;
            ro.budget.ratio = ratio;
            ro.memory = memory_for(policy);
            ro.plan_hints = hints;
            dynamic_row("warm", policy + "+" + best_plan.plan.method, ro);
          }
        }
      }
      if (!cmp_csv.empty()) {
        std::ostringstream csv;
        csv << "trace,budget_ratio,budget_bytes,kind,method,status,overhead,peak_bytes,compute_ns,seconds,"
               "evictions,eviction_searches,candidates_scored,plan_drops\n";
        for (const Row& r : rows) {
          csv << dtr::csv_field(in.name) << ',';  // a file name may hold a comma
          char buf[512];
          std::snprintf(buf, sizeof buf,
                        "%.4f,%llu,%s,%s,%s,%.6f,%llu,%llu,%.6f,%llu,%llu,%llu,%llu\n", r.ratio,
                        (unsigned long long)r.budget_bytes, r.kind.c_str(), r.method.c_str(),
                        r.status.c_str(), r.overhead, (unsigned long long)r.peak_bytes,
                        (unsigned long long)r.compute_ns, r.seconds,
                        (unsigned long long)r.evictions, (unsigned long long)r.searches,
                        (unsigned long long)r.scored, (unsigned long long)r.plan_drops);
          csv << buf;
        }
        dtr::write_file(cmp_csv, csv.str(), "CSV");  // Note [Output files]
      }
      if (!cmp_svg.empty()) {
        dtr::PlotPanel panel;
        panel.title = in.name;
        panel.x_label = "budget (ratio of baseline peak)";
        panel.y_label = "overhead (compute / baseline)";
        std::vector<std::string> labels;
        for (const Row& r : rows) {
          const std::string label = r.kind == "bound" ? std::string("bound (any schedule)")
                                                      : (r.kind == "static" ? "plan:"
                                                         : r.kind == "warm" ? "warm:"
                                                                            : "") +
                                                            r.method;
          size_t k = 0;
          while (k < labels.size() && labels[k] != label) ++k;
          if (k == labels.size()) {
            labels.push_back(label);
            panel.series.push_back(dtr::PlotSeries{label, {}});
          }
          const bool ok = r.status == "ok";
          panel.series[k].points.push_back({r.ratio, ok ? r.overhead : NAN});
        }
        dtr::PlotOptions po;
        po.title = "static plans vs dynamic policies";
        po.columns = 1;
        po.panel_width = 720;
        po.panel_height = 480;
        dtr::write_svg(cmp_svg, {panel}, po);
      }
      return 0;
    }
    // Plan mode.
    if (budget_text.empty()) throw dtr::PlanError("--budget is required (e.g. --budget 0.4 or 300M)");
    const dtr::Budget budget_spec = parse_plan_budget(budget_text);
    const Input in = load_input(trace_path, graph_path);
    const uint64_t budget = budget_spec.resolve(in.baseline.peak_bytes);
    auto planner = dtr::make_planner(method);
    popts.trace_name = in.name;
    const dtr::PlanResult r = dtr::run_planner(*planner, in.graph, budget, popts);
    print_result(in, r);
    print_backward_passes(in);
    if (!r.feasible) print_floor(in, dtr::plan_floor(in.graph), budget);
    if (!out_path.empty()) {
      dtr::write_plan(r.plan, out_path);
      std::printf("  plan written to %s\n", out_path.c_str());
    }
    return 0;
  } catch (const dtr::PlanError& e) {
    std::fprintf(stderr, "dtr-plan: %s\n", e.what());
    return kExitBadInput;
  } catch (const dtr::TraceError& e) {
    std::fprintf(stderr, "dtr-plan: %s\n", e.what());
    return kExitBadInput;
  } catch (const dtr::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitBadInput;
  } catch (const dtr::OutputError& e) {
    std::fprintf(stderr, "%s\n", e.what());  // already prefixed "dtr: "
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr-plan: %s\n", e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  return dtr::finish_standard_output("dtr-plan", run_main(argc, argv));  // Note [Output files]
}
