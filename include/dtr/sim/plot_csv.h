// plot_csv.h: line plots from a CSV of points, for tools that are not written in C++.
//
// `dtr-sim plot --csv F --svg OUT` draws with the same plotter as the sweep reports
// (sim/svg_plot.h), so the evaluation script (tools/eval.py) and the simulator's figures
// look alike and a policy keeps its colour everywhere. The CSV has a header row naming at
// least the columns `panel`, `series`, `x` and `y` (any order, other columns ignored);
// each row is one point. Panels and series appear in the order of their first row. A `y`
// of `nan` (or empty) is a missing point: it breaks the line (an out-of-memory run).
#pragma once

#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtr/sim/svg_plot.h"

namespace dtr {

// A CSV that cannot be plotted: names the file, the line and what is wrong.
class PlotInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Panels from CSV text; `source` names the input in errors. Every panel gets the labels.
std::vector<PlotPanel> read_plot_csv(std::istream& in, const std::string& source,
                                     const std::string& x_label, const std::string& y_label);
// The same from a file; throws PlotInputError if it cannot be read.
std::vector<PlotPanel> read_plot_csv_file(const std::string& path, const std::string& x_label,
                                          const std::string& y_label);

}  // namespace dtr
