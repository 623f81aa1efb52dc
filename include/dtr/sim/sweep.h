// sweep.h: a grid of replays (traces x policies x budgets) on all cores.
//
// Each trace is read and its baseline computed once; the grid's cells are independent
// replays handed to a pool of worker threads (each builds its own Engine: no shared
// mutable state but the result slots and the progress bar). Results come back in grid
// order whatever the thread timing, so a sweep's CSV is reproducible.
#pragma once

#include <string>
#include <vector>

#include "dtr/sim/replay.h"

namespace dtr {

struct SweepSpec {
  std::vector<std::string> trace_paths;
  std::vector<std::string> policies;
  std::vector<double> ratios;
  ReplayOptions base;    // search, sample, seed, max_overhead, debug (budget/policy overridden)
  unsigned threads = 0;  // 0: std::thread::hardware_concurrency()
  bool progress = true;  // a progress bar on stderr when it is a terminal
};

// Throws TraceError for a bad trace, ConfigError for an unknown policy or a trace named
// twice (Note [A trace named twice] in sim/sweep.cpp), before running.
std::vector<ReplayResult> run_sweep(const SweepSpec& spec);

// "0.1:0.9:0.1" -> {0.1, 0.2, ..., 0.9}; "0.3" -> {0.3}; "0.2,0.5" -> {0.2, 0.5}.
// Throws ConfigError on bad text, an empty item (split_budget_list), ratios outside (0, 1],
// or a range of more than kMaxSweepBudgets budgets.
constexpr size_t kMaxSweepBudgets = 10000;
std::vector<double> parse_ratio_list(const std::string& text);

// "dtr_eq,,msps" -> {"dtr_eq", "msps"}: a comma list of the tools' options, empty items
// dropped.
std::vector<std::string> split_list(const std::string& text);

// "0.5,300M" -> {"0.5", "300M"}: a comma list of budgets, its items as written. Throws
// ConfigError naming an empty item ("0.5,,0.3", a leading or trailing comma); a list with
// no item at all ("", ",") gives {} (Note [Empty items in a budget list] in sim/sweep.cpp).
std::vector<std::string> split_budget_list(const std::string& text);

void write_sweep_csv(const std::string& path, const std::vector<ReplayResult>& results);
// One panel per trace, one line per policy: overhead against budget ratio; failed runs
// (oom, thrash) break the line.
void write_sweep_svg(const std::string& path, const std::vector<ReplayResult>& results);
// A fixed-width table for terminals: one row per trace and policy, one column per budget.
std::string format_sweep_table(const std::vector<ReplayResult>& results);

}  // namespace dtr
