// dtr-sim: replay training traces under a memory budget with any eviction policy.
//
// A thin main over the sim library: `run` (one replay), `sweep` (a grid of replays on all
// cores, CSV + SVG), `convert` (a trace to our versioned format), `policies` (the
// heuristic registry), `options` (the options table). `run --plan` (or DTR_PLAN) warm-starts
// the policy from a static plan made by dtr-plan for the same trace (docs/planner.md).
// `run --timeline` (or DTR_TIMELINE) writes a Chrome trace of the replay and `run --svg` a
// picture of allocated memory over time (docs/observability.md).
// `run --snapshot` (or DTR_SNAPSHOT) writes a memory snapshot that PyTorch's memory tools read
// (docs/observability.md).
// Options come from DTR_CONF / DTR_* first, then from the flags. Bad input (a malformed
// trace, an unknown policy or option, a bad budget) exits with code 2 and a message that
// names the file and line or the valid values; it never crashes.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "dtr/core/options.h"
#include "dtr/core/output_file.h"
#include "dtr/core/status.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/heuristic_registry.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/warm_start.h"
#include "dtr/sim/memory_picture.h"
#include "dtr/sim/plot_csv.h"
#include "dtr/sim/remat_bound.h"
#include "dtr/sim/replay.h"
#include "dtr/sim/sweep.h"

namespace {

constexpr int kExitBadInput = 2;

// Flags shared by `run` and `sweep`, stored as text and applied through the options table
// so that the flags, DTR_CONF and DTR_* are parsed by one parser.
struct CommonFlags {
  std::string search, sample, seed, max_overhead, debug, allocator, reserved_limit;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--search", search, "candidate search: full | sample (option `search`)");
    cmd.add_option("--sample", sample, "candidates per eviction when sampling; 0 = sqrt(pool)");
    cmd.add_option("--seed", seed, "seed for sampling and the random policy");
    cmd.add_option("--max-overhead", max_overhead,
                   "status `thrash` past this compute multiple of the baseline (default 2.0; 0 = never)");
    cmd.add_option("--debug", debug, "0..3; 3 checks the engine's invariants after every event");
    cmd.add_option("--allocator", allocator,
                   "memory model: fake (caching allocator on a device of the budget's size; "
                   "default) | host (caching allocator on a device with no size: the budget "
                   "caps allocated bytes only, as the PyTorch CPU host) | none (byte "
                   "accounting, as DTR's simulator)");
    cmd.add_option("--reserved-limit", reserved_limit,
                   "with --allocator fake or host: the device's size, as the PyTorch host's "
                   "reserved limit (option `reserved_limit`; bytes or a ratio of the baseline "
                   "peak); storages move before evictions unless compact:False");
  }
  void apply(dtr::Config& config) const {
    if (!search.empty()) config.set("search", search);
    if (!sample.empty()) config.set("sample", sample);
    if (!seed.empty()) config.set("seed", seed);
    if (!max_overhead.empty()) config.set("max_overhead", max_overhead);
    if (!debug.empty()) config.set("debug", debug);
    if (!allocator.empty()) config.set("allocator", allocator);
    if (!reserved_limit.empty()) config.set("reserved_limit", reserved_limit);
  }
};

std::string format_result(const dtr::ReplayResult& r) {
  char buf[512];
  // No budget (0, unlimited) resolves to UINT64_MAX bytes: say so, not "16777216.00 TiB".
  std::string budget = "unlimited";
  if (r.budget_bytes != UINT64_MAX) {
    std::snprintf(buf, sizeof buf, "%.3f = %s", r.budget_ratio,
                  dtr::format_bytes(r.budget_bytes).c_str());
    budget = buf;
  }
  std::snprintf(
      buf, sizeof buf,
      "%s  policy %s (%s)  budget %s  status %s\n"
      "  peak %s of baseline %s;  compute %.3f ms of baseline %.3f ms: overhead %.4f\n"
      "  evictions %llu (+%llu eager)  remats %llu  remat compute %.3f ms  wall %.3f s\n",
      r.trace.c_str(), r.policy.c_str(), r.search.c_str(), budget.c_str(), r.status_name.c_str(),
      dtr::format_bytes(r.peak_bytes).c_str(), dtr::format_bytes(r.baseline_peak_bytes).c_str(),
      r.compute_ns / 1e6, r.baseline_compute_ns / 1e6, r.overhead,
      (unsigned long long)r.stats.num_evictions, (unsigned long long)r.stats.num_eager_evictions,
      (unsigned long long)r.stats.num_remats, r.stats.remat_compute_ns / 1e6, r.wall_seconds);
  std::string out = buf;
  if (r.allocator != "none") {
    std::snprintf(buf, sizeof buf,
                  "  allocator %s: peak allocated %s, peak reserved %s;  fragmentation %.3f "
                  "over %llu requests;  %llu contiguous failures\n",
                  r.allocator.c_str(), dtr::format_bytes(r.peak_allocated_bytes).c_str(),
                  dtr::format_bytes(r.peak_reserved_bytes).c_str(), r.fragmentation,
                  (unsigned long long)r.stats.allocator_requests,
                  (unsigned long long)r.contiguous_failures);
    out += buf;
    if ((r.reserved_limit_bytes != 0 && r.reserved_limit_bytes != r.budget_bytes) ||
        r.allocator_stats.num_block_moves) {
      std::snprintf(buf, sizeof buf, "  reserved limit %s: %llu blocks moved (%s), %llu packings\n",
                    dtr::format_bytes(r.reserved_limit_bytes).c_str(),
                    (unsigned long long)r.allocator_stats.num_block_moves,
                    dtr::format_bytes(r.allocator_stats.moved_bytes).c_str(),
                    (unsigned long long)r.allocator_stats.num_packings);
      out += buf;
    }
  }
  if (!r.plan.empty()) {
    std::snprintf(buf, sizeof buf,
                  "  warm start from %s: %llu plan drops, %llu eviction searches (%llu candidates "
                  "scored)%s%s\n",
                  r.plan.c_str(), (unsigned long long)r.stats.num_plan_drops,
                  (unsigned long long)r.stats.eviction_searches,
                  (unsigned long long)r.stats.candidates_scored,
                  r.plan_departure.empty() ? "" : "; departed from the plan: ",
                  r.plan_departure.c_str());
    out += buf;
  }
  if (r.status.code == dtr::StatusCode::oom) out += "  " + r.status.message() + "\n";
  return out;
}

}  // namespace

int run_main(int argc, char** argv) {
  CLI::App app{"dtr-sim: replay training traces under a memory budget with any eviction policy"};
  app.require_subcommand(1);

  CommonFlags run_flags;
  std::string run_trace, run_policy, run_budget, run_plan, run_timeline, run_svg;
  std::string run_snapshot, run_snapshot_format;
  bool run_json = false;
  CLI::App* run = app.add_subcommand("run", "replay one trace under one policy and budget");
  run->add_option("--trace", run_trace, "trace file (DTR log or dtr trace format)")->required();
  run->add_option("--policy", run_policy, "eviction policy (see `dtr-sim policies`)");
  run->add_option("--budget", run_budget, "ratio of the baseline peak (0.3) or bytes (300M)");
  run->add_option("--plan", run_plan,
                  "warm start from this plan (dtr-plan --out) made for the same trace (option `plan`)");
  run->add_flag("--json", run_json, "print one JSON object instead of text");
  run->add_option("--timeline", run_timeline,
                  "write a Chrome trace (Perfetto) of the replay here (option `timeline`)");
  run->add_option("--snapshot", run_snapshot,
                  "write a memory snapshot (pickle for PyTorch's memory tools) of the end of the "
                  "replay here (option `snapshot`; needs --allocator host or fake)");
  run->add_option("--snapshot-format", run_snapshot_format,
                  "dict (PyTorch >= 2.0, pytorch.org/memory_viz; default) | list (1.13's "
                  "python -m torch.cuda._memory_viz) (option `snapshot_format`)");
  run->add_option("--svg", run_svg,
                  "draw allocated memory over time, baseline and under the budget, here (SVG)");
  run_flags.add_to(*run);

  CommonFlags sweep_flags;
  std::vector<std::string> sweep_traces;
  // Default: every registered policy; with --allocator none, those that need no addresses.
  auto policy_list = [](uint32_t without) {
    std::string list;
    for (const std::string& name : dtr::builtin_heuristics().names_without(without))
      list += (list.empty() ? "" : ",") + name;
    return list;
  };
  std::string sweep_policies = policy_list(0);
  std::string sweep_budgets = "0.1:0.9:0.1", sweep_csv, sweep_svg;
  unsigned sweep_threads = 0;
  bool sweep_quiet = false;
  CLI::App* sweep = app.add_subcommand("sweep", "replay traces x policies x budgets on all cores");
  sweep->add_option("--trace", sweep_traces, "trace files")->required()->expected(1, -1);
  CLI::Option* policies_flag =
      sweep
          ->add_option("--policies", sweep_policies,
                       "comma-separated policies (default: all; those that read block addresses, "
                       "coop, only with --allocator host or fake)")
          ->capture_default_str();
  sweep->add_option("--budgets", sweep_budgets, "START:STOP:STEP or a comma list of ratios")->capture_default_str();
  sweep->add_option("--csv", sweep_csv, "write the results as CSV here");
  sweep->add_option("--svg", sweep_svg, "plot overhead against budget here (SVG)");
  sweep->add_option("--threads", sweep_threads, "worker threads (0 = all cores)");
  sweep->add_flag("--quiet", sweep_quiet, "no progress bar and no table");
  sweep_flags.add_to(*sweep);

  std::string bound_trace, bound_budgets;
  size_t bound_points = 5, bound_lp_rounds = dtr::kBoundLpRounds;
  bool bound_json = false;
  CLI::App* bound = app.add_subcommand(
      "bound", "the least recomputation any schedule pays under each budget (a lower bound)");
  bound->add_option("--trace", bound_trace, "trace file (DTR log or dtr trace format)")->required();
  bound
      ->add_option("--budget", bound_budgets,
                   "comma list of budgets: ratios of the baseline peak (0.5) or bytes (300M)")
      ->required();
  bound->add_option("--points", bound_points, "ops to show per budget, largest first")
      ->capture_default_str();
  bound->add_flag("--json", bound_json, "print one JSON object per budget instead of text");
  bound
      ->add_option("--lp-rounds", bound_lp_rounds,
                   "sweeps that price the dead args re-making reads (linear programs, Clp); "
                   "0: the knapsack alone, looser and faster")
      ->capture_default_str();

  std::string convert_in, convert_out;
  CLI::App* convert = app.add_subcommand("convert", "rewrite a trace (e.g. a DTR log) in dtr's versioned format");
  convert->add_option("--trace", convert_in, "input trace")->required();
  convert->add_option("--out", convert_out, "output file")->required();

  std::string plot_csv, plot_svg, plot_title, plot_x_label = "x", plot_y_label = "y";
  int plot_columns = 3;
  CLI::App* plot = app.add_subcommand(
      "plot", "draw line plots from a CSV of points (columns panel,series,x,y) as SVG");
  plot->add_option("--csv", plot_csv, "input CSV (include/dtr/sim/plot_csv.h; docs/simulator.md)")
      ->required();
  plot->add_option("--svg", plot_svg, "output SVG")->required();
  plot->add_option("--title", plot_title, "figure title");
  plot->add_option("--x-label", plot_x_label, "x axis label")->capture_default_str();
  plot->add_option("--y-label", plot_y_label, "y axis label")->capture_default_str();
  plot->add_option("--columns", plot_columns, "panels per row")->capture_default_str();

  CLI::App* policies = app.add_subcommand("policies", "list the eviction policies");
  bool options_markdown = false;
  CLI::App* options = app.add_subcommand("options", "list the runtime options (DTR_CONF keys)");
  options->add_flag("--markdown", options_markdown, "print docs/config.md");

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
    dtr::Config config;
    config.apply_environment();
    // Note [Output files]: every output path is checked before the work that fills it, and
    // against the files read (Note [Outputs that are inputs]); one subcommand's are set.
    // `run`'s are checked in its branch, with the environment's (DTR_TIMELINE, ...).
    std::vector<dtr::NamedPath> inputs = {
        {bound_trace, "trace"}, {convert_in, "trace"}, {plot_csv, "CSV"}};
    for (const std::string& path : sweep_traces) inputs.push_back({path, "trace"});
    dtr::check_outputs(
        {{sweep_csv, "CSV"}, {sweep_svg, "plot"}, {convert_out, "trace"}, {plot_svg, "plot"}},
        inputs);

    if (*policies) {
      for (const dtr::HeuristicInfo& h : dtr::builtin_heuristics().entries())
        std::printf("%-13s %s  [needs: %s]\n", h.name.c_str(), h.summary.c_str(),
                    dtr::feature_names(h.needs).c_str());
      return 0;
    }
    if (*options) {
      if (options_markdown) {
        std::cout << dtr::config_markdown();
      } else {
        for (const dtr::OptionInfo& o : dtr::option_table()) {
          const std::string host =
              o.pytorch_default ? std::string(" (PyTorch: ") + o.pytorch_default + ")" : "";
          std::printf("%-13s %-17s default %-7s %s%s\n", o.key, o.env, o.default_value, o.doc,
                      host.c_str());
        }
      }
      return 0;
    }
    if (*plot) {
      dtr::PlotOptions po;
      po.title = plot_title;
      po.columns = plot_columns;
      dtr::write_svg(plot_svg, dtr::read_plot_csv_file(plot_csv, plot_x_label, plot_y_label), po);
      return 0;
    }
    if (*bound) {
      // All budgets checked before the trace is read or any is bounded; an empty item is
      // refused as `sweep --budgets` refuses it (Note [Empty items in a budget list]).
      std::vector<dtr::Budget> budgets;
      for (const std::string& text : dtr::split_budget_list(bound_budgets))
        budgets.push_back(dtr::Budget::parse(text));
      if (budgets.empty())
        throw dtr::ConfigError(
            "dtr: --budget names no budget; give a comma list of ratios "
            "(0.5,0.6) or bytes (300M)");
      for (const dtr::Budget& b : budgets)
        if (b.kind == dtr::Budget::Kind::unlimited)
          throw dtr::ConfigError(
              "dtr: budget 0 (unlimited) has nothing to bound; give a ratio "
              "(0.5) or bytes (300M)");
      const dtr::Trace trace = dtr::read_trace(bound_trace);
      const dtr::Baseline baseline = dtr::compute_baseline(trace);
      for (const dtr::Budget& b : budgets) {
        const dtr::RematBound r =
            dtr::remat_bound(trace, baseline, b.resolve(baseline.peak_bytes), bound_lp_rounds);
        if (bound_json) {
          nlohmann::json j = {{"trace", trace.path},
                              {"budget", b.to_string()},
                              {"budget_bytes", r.budget_bytes},
                              {"baseline_peak_bytes", baseline.peak_bytes},
                              {"baseline_compute_ns", r.baseline_compute_ns},
                              {"feasible", r.feasible},
                              {"remat_ns", r.remat_ns},
                              {"overhead", r.overhead},
                              {"points_dead_args_unpriced", r.points_dead_args_unpriced}};
          nlohmann::json points = nlohmann::json::array();
          for (const dtr::BoundPoint& p : r.points)
            points.push_back({{"event", p.event},
                              {"line", p.line},
                              {"op", p.op},
                              {"resident_bytes", p.resident_bytes},
                              {"needed_bytes", p.needed_bytes},
                              {"drop_bytes", p.drop_bytes},
                              {"remat_ns", p.remat_ns},
                              {"dead_args_unpriced", p.dead_args_unpriced}});
          j["points"] = points;
          std::cout << j.dump() << "\n";
        } else {
          std::printf("%s  budget %s of baseline %s:\n", trace.path.c_str(), b.to_string().c_str(),
                      dtr::format_bytes(baseline.peak_bytes).c_str());
          std::cout << dtr::format_remat_bound(r, bound_points);
        }
      }
      return 0;
    }
    if (*convert) {
      const dtr::Trace trace = dtr::read_trace(convert_in);
      dtr::write_trace(trace, convert_out);
      std::printf("%s: %zu events, %zu names -> %s (format version %u)\n", convert_in.c_str(),
                  trace.events.size(), trace.names.size(), convert_out.c_str(), dtr::kTraceFormatVersion);
      return 0;
    }
    if (*run) {
      if (!run_policy.empty()) config.set("policy", run_policy);
      if (!run_budget.empty()) config.set("budget", run_budget);
      if (!run_plan.empty()) config.set("plan", run_plan);
      if (!run_timeline.empty()) config.set("timeline", run_timeline);
      if (!run_snapshot.empty()) config.set("snapshot", run_snapshot);
      if (!run_snapshot_format.empty()) config.set("snapshot_format", run_snapshot_format);
      run_flags.apply(config);
      // The flags' paths and the environment's (DTR_TIMELINE, DTR_SNAPSHOT, DTR_PLAN).
      dtr::check_outputs({{config.timeline, "timeline"},
                          {config.snapshot, "snapshot"},
                          {run_svg, "memory picture"}},
                         {{run_trace, "trace"}, {config.plan, "plan"}});
      const dtr::Trace trace = dtr::read_trace(run_trace);
      // --svg: the baseline pass and the replay each record a timeline for the picture.
      dtr::Timeline baseline_timeline, run_timeline_data;
      const dtr::Baseline baseline =
          dtr::compute_baseline(trace, run_svg.empty() ? nullptr : &baseline_timeline);
      dtr::ReplayOptions ro = dtr::ReplayOptions::from_config(config);
      if (!ro.plan_path.empty()) ro.plan_hints = dtr::load_warm_start(trace, ro.plan_path);
      if (!run_svg.empty()) ro.timeline = &run_timeline_data;
      const dtr::ReplayResult result = dtr::replay(trace, baseline, ro);
      if (!run_svg.empty()) {
        dtr::MemoryPictureOptions mp;
        char ratio[32];
        std::snprintf(ratio, sizeof ratio, "%.3g", result.budget_ratio);
        mp.title = result.trace + ": allocated memory (status " + result.status_name + ")";
        mp.run_label = result.policy + " @ " + ratio;
        dtr::write_memory_picture(run_svg, &baseline_timeline, run_timeline_data, mp);
      }
      if (run_json)
        std::cout << dtr::to_json(result).dump() << "\n";
      else
        std::cout << format_result(result);
      return 0;
    }
    if (*sweep) {
      sweep_flags.apply(config);
      if (!config.timeline.empty())
        throw dtr::ConfigError("dtr: timeline '" + config.timeline +
                               "' (DTR_TIMELINE or DTR_CONF): a timeline is of one replay; "
                               "record one with `dtr-sim run --timeline`");
      if (!config.snapshot.empty())
        throw dtr::ConfigError("dtr: snapshot '" + config.snapshot +
                               "' (DTR_SNAPSHOT or DTR_CONF): a snapshot is of one replay; "
                               "write one with `dtr-sim run --snapshot`");
      if (!config.plan.empty())
        throw dtr::ConfigError("dtr: plan '" + config.plan +
                               "' (DTR_PLAN or DTR_CONF): a plan is made for one trace and one "
                               "budget; warm-start with `dtr-sim run --plan`, or compare cold and "
                               "warm with `dtr-plan compare --warm`");
      dtr::SweepSpec spec;
      spec.trace_paths = sweep_traces;
      spec.base = dtr::ReplayOptions::from_config(config);
      spec.ratios = dtr::parse_ratio_list(sweep_budgets);
      spec.threads = sweep_threads;
      spec.progress = !sweep_quiet;
      // The default list drops coop when there is no allocator to give it addresses.
      if (policies_flag->count() == 0 && config.allocator == "none")
        sweep_policies = policy_list(dtr::kFeatureAddressOrder);
      spec.policies = dtr::split_list(sweep_policies);
      if (spec.policies.empty())
        throw dtr::ConfigError(
            "dtr: --policies names no policy; give a comma list such as "
            "dtr_eq,msps, or leave it out for all (see `dtr-sim policies`)");
      const std::vector<dtr::ReplayResult> results = dtr::run_sweep(spec);
      if (!sweep_quiet) std::cout << dtr::format_sweep_table(results);
      double wall = 0;
      for (const auto& r : results) wall += r.wall_seconds;
      if (!sweep_quiet)
        std::printf("%zu replays, %.2f s of replay time in total\n", results.size(), wall);
      if (!sweep_csv.empty()) dtr::write_sweep_csv(sweep_csv, results);
      if (!sweep_svg.empty()) dtr::write_sweep_svg(sweep_svg, results);
      return 0;
    }
  } catch (const dtr::TraceError& e) {
    std::fprintf(stderr, "dtr-sim: %s\n", e.what());
    return kExitBadInput;
  } catch (const dtr::PlotInputError& e) {
    std::fprintf(stderr, "dtr-sim: %s\n", e.what());
    return kExitBadInput;
  } catch (const dtr::PlanError& e) {
    std::fprintf(stderr, "dtr-sim: %s\n", e.what());
    return kExitBadInput;
  } catch (const dtr::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());  // already prefixed "dtr: "
    return kExitBadInput;
  } catch (const dtr::OutputError& e) {
    std::fprintf(stderr, "%s\n", e.what());  // already prefixed "dtr: "
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr-sim: %s\n", e.what());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return dtr::finish_standard_output("dtr-sim", run_main(argc, argv));  // Note [Output files]
}
