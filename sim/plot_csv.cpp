// plot_csv.cpp: CSV rows -> plot panels (include/dtr/sim/plot_csv.h).
//
// The CSV dialect is what Python's csv module writes: comma-separated, a field that holds
// a comma, a quote or a line break is quoted, and a quote inside it is doubled. Line
// breaks inside quoted fields are not supported (no plot label needs one): such a row
// fails with the line number.
#include "dtr/sim/plot_csv.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

namespace dtr {
namespace {

// Splits one CSV line; false if a quoted field is not closed on this line.
bool split_csv_line(const std::string& line, std::vector<std::string>& fields) {
  fields.assign(1, "");
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return !quoted;
}

double parse_number(const std::string& text, bool allow_missing, const std::string& where) {
  if (allow_missing && (text.empty() || text == "nan" || text == "NaN" || text == "None"))
    return std::nan("");
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || (!allow_missing && !std::isfinite(value)))
    throw PlotInputError(where + ": '" + text + "' is not a number");
  return value;
}

}  // namespace

std::vector<PlotPanel> read_plot_csv(std::istream& in, const std::string& source,
                                     const std::string& x_label, const std::string& y_label) {
  std::string line;
  std::vector<std::string> fields;
  if (!std::getline(in, line) || !split_csv_line(line, fields))
    throw PlotInputError(source + ": empty, or no header row (panel,series,x,y)");
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < fields.size(); ++i) column[fields[i]] = i;
  for (const char* name : {"panel", "series", "x", "y"})
    if (!column.count(name))
      throw PlotInputError(source + ": the header has no column '" + name +
                           "' (needs panel, series, x, y)");
  const size_t needed = std::max({column["panel"], column["series"], column["x"], column["y"]});

  std::vector<PlotPanel> panels;
  std::map<std::string, size_t> panel_index;
  std::map<std::pair<size_t, std::string>, size_t> series_index;
  for (size_t number = 2; std::getline(in, line); ++number) {
    if (line.empty() || line == "\r") continue;
    const std::string where = source + ":" + std::to_string(number);
    if (!split_csv_line(line, fields)) throw PlotInputError(where + ": unclosed quote");
    if (fields.size() <= needed)
      throw PlotInputError(where + ": " + std::to_string(fields.size()) + " fields, the header has " +
                           std::to_string(column.size()));
    const std::string& title = fields[column["panel"]];
    auto [p, new_panel] = panel_index.emplace(title, panels.size());
    if (new_panel) panels.push_back(PlotPanel{title, x_label, y_label, {}});
    PlotPanel& panel = panels[p->second];
    const std::string& label = fields[column["series"]];
    auto [s, new_series] = series_index.emplace(std::make_pair(p->second, label), panel.series.size());
    if (new_series) panel.series.push_back(PlotSeries{label, {}});
    panel.series[s->second].points.push_back(
        PlotPoint{parse_number(fields[column["x"]], false, where + " x"),
                  parse_number(fields[column["y"]], true, where + " y")});
  }
  if (panels.empty()) throw PlotInputError(source + ": no points after the header");
  return panels;
}

std::vector<PlotPanel> read_plot_csv_file(const std::string& path, const std::string& x_label,
                                          const std::string& y_label) {
  std::ifstream in(path);
  if (!in) throw PlotInputError(path + ": cannot open for reading");
  return read_plot_csv(in, path, x_label, y_label);
}

}  // namespace dtr
