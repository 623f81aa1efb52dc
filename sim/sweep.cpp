// sweep.cpp: the replay grid, its CSV, SVG and terminal table.
#include "dtr/sim/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "dtr/core/output_file.h"
#include "dtr/sim/progress_bar.h"
#include "dtr/sim/svg_plot.h"
#include "dtr/sim/worker_pool.h"

namespace dtr {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// Note [Empty items in a budget list]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `sweep --budgets 0.5,,0.3` refused the empty item ("'' is not a number") while `bound
// --budget 0.5,,0.3` dropped it through split_list and bounded two budgets (the
// seventy-sixth session's probe). A doubled comma is a budget lost in typing, so both go
// through split_budget_list, which refuses it (and a leading or trailing comma) and names
// the item; a list with no item at all is left to the caller, which says the flag names no
// budget.
std::vector<std::string> split_budget_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    items.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto blank = [](const std::string& item) {
    return item.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
  };
  if (std::all_of(items.begin(), items.end(), blank)) return {};
  std::string kept;
  for (const std::string& item : items)
    if (!blank(item)) kept += (kept.empty() ? "" : ",") + item;
  for (size_t i = 0; i < items.size(); ++i)
    if (blank(items[i]))
      throw ConfigError("dtr: bad budget list '" + text + "': item " + std::to_string(i + 1) +
                        " is empty; drop the stray comma: " + kept);
  return items;
}

std::vector<double> parse_ratio_list(const std::string& text) {
  auto number = [&](const std::string& s) {
    try {
      size_t used = 0;
      const double v = std::stod(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      return v;
    } catch (const std::exception&) {
      throw ConfigError("dtr: bad budget list '" + text + "': '" + s +
                        "' is not a number; expected e.g. 0.1:0.9:0.1 or 0.2,0.5");
    }
  };
  std::vector<double> out;
  if (text.find(':') != std::string::npos) {
    std::vector<std::string> parts;
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ':')) parts.push_back(part);
    if (parts.size() != 3)
      throw ConfigError("dtr: bad budget range '" + text + "'; expected START:STOP:STEP, e.g. 0.1:0.9:0.1");
    const double start = number(parts[0]), stop = number(parts[1]), step = number(parts[2]);
    if (!std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
      throw ConfigError("dtr: bad budget range '" + text +
                        "'; START, STOP and STEP are finite "
                        "numbers, e.g. 0.1:0.9:0.1");
    if (step <= 0 || stop < start)
      throw ConfigError("dtr: bad budget range '" + text + "'; need START <= STOP and STEP > 0");
    // A range of more budgets than anyone plots is a typo for a larger step: 0.1:0.9:1e-7
    // took 13 GB before it was stopped.
    const double count = std::floor((stop - start) / step + 1e-9) + 1;
    if (!(count <= kMaxSweepBudgets))
      throw ConfigError(
          "dtr: budget range '" + text + "' makes " +
          (count < 1e15
               ? std::to_string(static_cast<uint64_t>(count))
               : std::string("about 1e") + std::to_string(static_cast<int>(std::log10(count)))) +
          " budgets, more than " + std::to_string(kMaxSweepBudgets) + "; give a larger STEP");
    const int n = static_cast<int>(count);
    for (int i = 0; i < n; ++i) out.push_back(std::round((start + i * step) * 1e6) / 1e6);
  } else {
    for (const std::string& part : split_budget_list(text)) out.push_back(number(part));
  }
  if (out.empty())
    throw ConfigError("dtr: the budget list '" + text +
                      "' names no budget; give a range such as 0.1:0.9:0.1 or a comma list "
                      "such as 0.2,0.5");
  for (double r : out)
    if (!(r > 0 && r <= 1.0))
      throw ConfigError("dtr: budget ratio " + std::to_string(r) + " is outside (0, 1]");
  return out;
}

namespace {

// Note [A trace named twice]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Results name a trace by its file's base name, or by its path where two traces share a
// base name; a trace given twice (`--trace a.log a.log`, or `a.log ./a.log`) had both its
// rows under one label, each cell twice, and the table and plot merged them with nothing
// said. It is refused before any trace is read, comparing paths as the tools compare an
// output with an input (same_file: one inode, or the same normal path where none exists).
void check_traces_named_once(const std::vector<std::string>& paths) {
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (same_file(paths[i], paths[j]))
        throw ConfigError("dtr: trace '" + paths[i] + "' is named twice in the sweep" +
                          (paths[i] == paths[j] ? std::string() : " (also as '" + paths[j] + "')") +
                          "; its results would merge under one label: give each trace once");
}

}  // namespace

std::vector<ReplayResult> run_sweep(const SweepSpec& spec) {
  check_traces_named_once(spec.trace_paths);  // Note [A trace named twice]
  // Read every trace and check every policy name before any work starts.
  std::vector<Trace> traces;
  std::vector<Baseline> baselines;
  for (const std::string& path : spec.trace_paths) {
    traces.push_back(read_trace(path));
    baselines.push_back(compute_baseline(traces.back()));
  }
  for (const std::string& policy : spec.policies) {
    builtin_heuristics().make(policy, {});
    if (spec.base.memory == ReplayOptions::Memory::none &&
        (builtin_heuristics().find(policy)->needs & kFeatureAddressOrder))
      throw ConfigError("dtr: policy '" + policy +
                        "' reads block addresses and needs the caching allocator; drop it or "
                        "use --allocator host or fake");
  }

  struct Cell {
    size_t trace;
    std::string policy;
    double ratio;
  };
  std::vector<Cell> cells;
  for (size_t t = 0; t < traces.size(); ++t)
    for (const std::string& p : spec.policies)
      for (double r : spec.ratios) cells.push_back({t, p, r});

  // Traces are named in the results by their file's base name; where two share one
  // (a/m.log, b/m.log), by the path as given, or the table and the plot merged them.
  std::vector<std::string> names, labels;
  for (const Trace& trace : traces)
    names.push_back(std::filesystem::path(trace.path).filename().string());
  for (size_t t = 0; t < traces.size(); ++t)
    labels.push_back(std::count(names.begin(), names.end(), names[t]) > 1 ? traces[t].path
                                                                          : names[t]);

  std::vector<ReplayResult> results(cells.size());
  ProgressBar bar(cells.size(), "sweep");
  if (!spec.progress) bar.finish();
  run_on_workers(cells.size(), spec.threads, [&](size_t i) {
    ReplayOptions o = spec.base;
    o.policy = cells[i].policy;
    o.budget.kind = Budget::Kind::ratio;
    o.budget.ratio = cells[i].ratio;
    results[i] = replay(traces[cells[i].trace], baselines[cells[i].trace], o);
    results[i].trace = labels[cells[i].trace];
    if (spec.progress) bar.tick();
  });
  bar.finish();
  return results;
}

void write_sweep_csv(const std::string& path, const std::vector<ReplayResult>& results) {
  std::ostringstream out;
  out << "trace,policy,search,budget_ratio,budget_bytes,baseline_peak_bytes,peak_bytes,"
         "baseline_compute_ns,compute_ns,overhead,evictions,remats,status,wall_seconds,"
         "allocator,peak_reserved_bytes,fragmentation,contiguous_failures,"
         "reserved_limit_bytes,block_moves,moved_bytes\n";
  for (const ReplayResult& r : results) {
    // The names first, quoted where they must be (csv_field) and not cut by the buffer.
    out << csv_field(r.trace) << ',' << csv_field(r.policy) << ',';
    char line[1024];
    std::snprintf(line, sizeof line,
                  "%s,%.4f,%llu,%llu,%llu,%llu,%llu,%.6f,%llu,%llu,%s,%.6f,%s,%llu,%.6f,%llu,"
                  "%llu,%llu,%llu\n",
                  r.search.c_str(), r.budget_ratio, (unsigned long long)r.budget_bytes,
                  (unsigned long long)r.baseline_peak_bytes, (unsigned long long)r.peak_bytes,
                  (unsigned long long)r.baseline_compute_ns, (unsigned long long)r.compute_ns,
                  r.overhead, (unsigned long long)r.stats.num_evictions,
                  (unsigned long long)r.stats.num_remats, r.status_name.c_str(), r.wall_seconds,
                  r.allocator.c_str(), (unsigned long long)r.peak_reserved_bytes, r.fragmentation,
                  (unsigned long long)r.contiguous_failures,
                  (unsigned long long)r.reserved_limit_bytes,
                  (unsigned long long)r.allocator_stats.num_block_moves,
                  (unsigned long long)r.allocator_stats.moved_bytes);
    out << line;
  }
  write_file(path, out.str(), "CSV");  // Note [Output files]
}

namespace {
// Traces and policies in first-seen order.
template <typename Key>
std::vector<std::string> distinct(const std::vector<ReplayResult>& results, Key key) {
  std::vector<std::string> out;
  for (const ReplayResult& r : results)
    if (std::find(out.begin(), out.end(), key(r)) == out.end()) out.push_back(key(r));
  return out;
}
}  // namespace

void write_sweep_svg(const std::string& path, const std::vector<ReplayResult>& results) {
  const auto traces = distinct(results, [](const ReplayResult& r) { return r.trace; });
  const auto policies = distinct(results, [](const ReplayResult& r) { return r.policy; });
  std::vector<PlotPanel> panels;
  for (const std::string& trace : traces) {
    PlotPanel panel;
    panel.title = trace.substr(0, trace.find('-'));
    panel.x_label = "budget (fraction of baseline peak)";
    panel.y_label = "compute overhead (x)";
    panel.x_min = 0.0;
    panel.x_max = 1.0;
    panel.y_min = 1.0;
    for (const std::string& policy : policies) {
      PlotSeries series;
      series.label = policy;
      for (const ReplayResult& r : results) {
        if (r.trace != trace || r.policy != policy) continue;
        series.points.push_back({r.budget_ratio, r.status.ok() ? r.overhead : std::nan("")});
      }
      panel.series.push_back(std::move(series));
    }
    panels.push_back(std::move(panel));
  }
  PlotOptions options;
  options.title = "Compute overhead against memory budget (gaps: out of memory or thrashing)";
  options.columns = static_cast<int>(std::min<size_t>(3, std::max<size_t>(1, panels.size())));
  write_svg(path, panels, options);
}

std::string format_sweep_table(const std::vector<ReplayResult>& results) {
  const auto traces = distinct(results, [](const ReplayResult& r) { return r.trace; });
  const auto policies = distinct(results, [](const ReplayResult& r) { return r.policy; });
  std::vector<double> ratios;
  for (const ReplayResult& r : results)
    if (std::find(ratios.begin(), ratios.end(), r.budget_ratio) == ratios.end()) ratios.push_back(r.budget_ratio);
  std::sort(ratios.begin(), ratios.end());
  int width = 10;  // the policy column: as wide as the longest name
  for (const std::string& policy : policies) width = std::max(width, int(policy.size()));
  std::ostringstream out;
  char cell[128];
  for (const std::string& trace : traces) {
    out << trace << "\n";
    std::snprintf(cell, sizeof cell, "  %-*s", width, "policy");
    out << cell;
    for (double ratio : ratios) {
      std::snprintf(cell, sizeof cell, " %7.2f", ratio);
      out << cell;
    }
    out << "\n";
    for (const std::string& policy : policies) {
      std::snprintf(cell, sizeof cell, "  %-*s", width, policy.substr(0, 100).c_str());
      out << cell;
      for (double ratio : ratios) {
        std::string text = "-";
        for (const ReplayResult& r : results) {
          if (r.trace != trace || r.policy != policy || r.budget_ratio != ratio) continue;
          if (r.status.ok()) {
            std::snprintf(cell, sizeof cell, "%.3f", r.overhead);
            text = cell;
          } else {
            text = r.status.code == StatusCode::oom ? "oom" : "thrash";
          }
        }
        std::snprintf(cell, sizeof cell, " %7s", text.c_str());
        out << cell;
      }
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace dtr
