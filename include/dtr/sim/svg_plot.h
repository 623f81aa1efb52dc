// svg_plot.h: small standalone SVG line plots for the simulator's sweep reports.
//
// A figure is a grid of panels (`PlotOptions::columns` per row). Each panel has axes
// with ticks at round 1-2-5 steps, axis labels, a title, a legend below the plot
// area, one polyline per contiguous run of a series' points, a circle per point,
// optional crosses (`marks`), and dashed horizontal reference lines (`hlines`).
//
// Invariants of the output: it is a well-formed, self-contained XML document (all
// text escaped, invalid UTF-8 replaced) whose root is
// `<svg xmlns="http://www.w3.org/2000/svg" ... viewBox=...>`. Each series is drawn as
// `<g class="series" data-label="LABEL">` holding one `<polyline class="segment">`
// per run of two or more consecutive finite points, a `<g class="points">` (empty when
// `dots` is off) and, if it has marks, one `<path class="marks">`; each legend entry is a
// `<g class="legend-entry" data-label="LABEL">` (a cross for a series of marks only).
// Tests and tools may rely on these names.
//
// Missing values: a point whose x or y is NaN or infinite is "missing" (an OOM run in
// a sweep, say). It is not drawn and it breaks the line: the points before and after
// it land in separate segments. Points are drawn in the order given, not sorted.
//
// Colours: a series' colour depends on its label, not its index in a panel (see
// Note [Series colours] in svg_plot.cpp), so a policy keeps one colour in every panel.
//
// Pure functions with no shared state: safe to call from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtr {

struct PlotPoint {
  double x;
  double y;  // NaN or +-inf: missing, breaks the line
};

struct PlotSeries {
  std::string label;
  std::vector<PlotPoint> points;
  std::vector<PlotPoint> marks = {};  // drawn as small crosses, not joined (e.g. evictions)
  bool dots = true;  // a circle per point; false for long lines (memory over time)
};

struct PlotPanel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  // Axis limits; an unset one comes from the data (points, marks, hlines) padded by 5%.
  // (Each has an initializer so aggregate initialization may stop early under
  // -Wmissing-field-initializers.)
  std::optional<double> y_min = std::nullopt, y_max = std::nullopt;
  std::optional<double> x_min = std::nullopt, x_max = std::nullopt;
  std::vector<double> hlines = {};  // dashed horizontal reference lines (e.g. a budget)
};

struct PlotOptions {
  std::string title;       // figure title above the grid; empty for none
  int panel_width = 420;   // px per grid cell
  int panel_height = 320;  // px per grid cell; grows if a legend needs more room
  int columns = 3;         // panels per row (values < 1 mean 1)
};

// The figure as a standalone SVG document.
std::string render_svg(const std::vector<PlotPanel>& panels, const PlotOptions& options);

// render_svg() written to `path`; throws std::runtime_error naming `path` if the file
// cannot be opened or written.
void write_svg(const std::string& path, const std::vector<PlotPanel>& panels,
               const PlotOptions& options);

}  // namespace dtr
