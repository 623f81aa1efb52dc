// svg_plot.cpp: renders PlotPanels as a grid of SVG line plots (see svg_plot.h).
//
// The figure is built as one string in a single pass per panel. Geometry is in SVG
// user units (px). Every cell of the grid has the same size, and every panel reserves
// the same legend height, so plot areas line up across a row and down a column; see
// Note [Legend layout]. Nothing here keeps state between calls.
#include "dtr/sim/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "dtr/core/output_file.h"

namespace dtr {
namespace {

// Layout, in px.
constexpr double kFigureTitleBandPx = 34;  // above the grid when options.title is set
constexpr double kFigureMarginPx = 8;      // above the grid otherwise, and below it
constexpr double kPanelTitleBandPx = 28;   // from the cell's top to the plot area
constexpr double kYLabelBandPx = 20;       // left of the y tick labels (rotated y label)
constexpr double kTickLengthPx = 4;
constexpr double kTickLabelGapPx = 3;
constexpr double kRightMarginPx = 16;
constexpr double kXAxisBandPx = 40;  // below the plot area: ticks, tick labels, x label
constexpr double kLegendRowPx = 15;
constexpr double kLegendPadPx = 4;          // between the x label and the legend
constexpr double kLegendSideMarginPx = 10;  // legend keeps this far from the cell's sides
constexpr double kLegendSwatchPx = 18;      // line sample before each legend label
constexpr double kLegendGapPx = 14;         // between legend columns
constexpr double kMinPlotHeightPx = 80;     // a cell grows rather than squash the plot
constexpr double kMinPlotWidthPx = 60;
constexpr double kMinCellWidthPx = 120;

// Text, in px.
constexpr double kFigureTitleFontPx = 16;
constexpr double kPanelTitleFontPx = 13;
constexpr double kAxisLabelFontPx = 11;
constexpr double kTickFontPx = 10;
constexpr double kLegendFontPx = 11;
constexpr double kCharWidthEm = 0.6;  // average sans-serif advance, a safe over-estimate

// Marks, in px.
constexpr double kPointRadiusPx = 2.5;
constexpr double kCrossHalfPx = 3.5;
constexpr double kLineWidthPx = 1.6;

// Data.
constexpr double kAutoPadFraction = 0.05;  // auto ranges extend 5% past the data
constexpr double kMaxAbsValue = 1e300;     // see Note [Huge values]
constexpr double kMaxAbsPx = 1e5;          // see Note [Huge values]
constexpr int kMaxTicks = 50;

// Note [Series colours]
// ~~~~~~~~~~~~~~~~~~~~~
// A sweep figure has one panel per model, each with one series per policy, and the
// reader matches policies across panels by colour. So a colour belongs to a label:
// labels are numbered in order of first appearance over all panels (panel order,
// then series order), and label i gets kPalette[i % size]. A label missing from one
// panel does not shift the colours of the others. Past the palette's end the colours
// repeat with a dash pattern, so up to 3 * size series stay distinguishable.
//
// The palette is Okabe & Ito's colour-blind-safe set without its yellow (too pale on
// white), followed by three of Paul Tol's "muted" colours.
constexpr const char* kPalette[] = {
    "#0072B2",  // blue
    "#E69F00",  // orange
    "#009E73",  // bluish green
    "#D55E00",  // vermillion
    "#CC79A7",  // reddish purple
    "#56B4E9",  // sky blue
    "#000000",  // black
    "#882255",  // wine
    "#999933",  // olive
    "#332288",  // indigo
};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
constexpr const char* kDashPatterns[] = {"", "6,3", "2,2"};
constexpr size_t kDashPatternCount = sizeof(kDashPatterns) / sizeof(kDashPatterns[0]);

struct SeriesStyle {
  const char* colour;
  const char* dash;  // "" for a solid line
};

SeriesStyle style_for(size_t colour_index) {
  return {kPalette[colour_index % kPaletteSize],
          kDashPatterns[(colour_index / kPaletteSize) % kDashPatternCount]};
}

// Note [Huge values]
// ~~~~~~~~~~~~~~~~~~
// Finite data is clamped to +-1e300 before ranges are computed, so a span (hi - lo)
// stays finite. Pixel coordinates are clamped to +-1e5: a point far outside an explicit
// axis range would otherwise print hundreds of digits. The clip path hides everything
// outside the plot area anyway; only the angle of a line running far off-plot changes.
double clamp_value(double v) { return std::clamp(v, -kMaxAbsValue, kMaxAbsValue); }

bool is_missing(const PlotPoint& p) { return !std::isfinite(p.x) || !std::isfinite(p.y); }

// ---- text ----------------------------------------------------------------------

// Number of code points in a UTF-8 string (invalid bytes count one each).
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

double text_width_px(const std::string& s, double font_px) {
  return static_cast<double>(code_points(s)) * font_px * kCharWidthEm;
}

// Cut `s` at a code-point boundary so it fits in `max_px`, ending it with an ellipsis.
std::string fit_text(const std::string& s, double max_px, double font_px) {
  if (text_width_px(s, font_px) <= max_px) return s;
  double char_px = font_px * kCharWidthEm;
  size_t keep = max_px > 2 * char_px ? static_cast<size_t>(max_px / char_px) - 1 : 1;
  size_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == keep) return s.substr(0, i) + "\xE2\x80\xA6";  // U+2026
      ++seen;
    }
  }
  return s;
}

// Length of the valid UTF-8 sequence at s[i] that encodes a character XML 1.0 allows,
// or 0 if there is none.
size_t valid_utf8_length(const std::string& s, size_t i) {
  auto byte = [&](size_t k) -> unsigned { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](size_t k) { return k < s.size() && (byte(k) & 0xC0) == 0x80; };
  unsigned b0 = byte(i);
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(i + 1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(i + 1) || !cont(i + 2)) return 0;
    unsigned b1 = byte(i + 1);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;   // overlong
    if (b0 == 0xED && b1 >= 0xA0) return 0;  // UTF-16 surrogate
    if (b0 == 0xEF && b1 == 0xBF && byte(i + 2) >= 0xBE) return 0;  // U+FFFE, U+FFFF
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    unsigned b1 = byte(i + 1);
    if (b0 == 0xF0 && b1 < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && b1 >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

// Text made safe for XML character data and attribute values: the five special
// characters become entities, control characters XML forbids become spaces, and
// invalid UTF-8 becomes U+FFFD.
std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default: out += (c < 0x20 && c != '\t' && c != '\n' && c != '\r') ? ' ' : static_cast<char>(c);
      }
      ++i;
      continue;
    }
    size_t n = valid_utf8_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD replacement character
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

// A coordinate with at most two decimals and no trailing zeros.
std::string fmt(double v) {
  v = std::clamp(v, -kMaxAbsPx, kMaxAbsPx);
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

// ---- ranges and ticks ----------------------------------------------------------

struct Range {
  double lo;
  double hi;
  double span() const { return hi - lo; }
};

// Axis range from the finite `values`, overridden by the explicit limits that are
// finite (NaN: unset). Always returns lo < hi with a finite span.
Range axis_range(const std::vector<double>& values, double want_lo, double want_hi) {
  const bool has_lo = std::isfinite(want_lo), has_hi = std::isfinite(want_hi);
  if (has_lo) want_lo = clamp_value(want_lo);
  if (has_hi) want_hi = clamp_value(want_hi);

  double data_lo = 0, data_hi = 1;
  bool any = false;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    v = clamp_value(v);
    data_lo = any ? std::min(data_lo, v) : v;
    data_hi = any ? std::max(data_hi, v) : v;
    any = true;
  }
  if (data_hi - data_lo <= 0) {  // one value, or all equal: centre it
    double d = std::abs(data_lo) * 0.1;
    if (!(d > 0)) d = 1;
    data_lo -= d;
    data_hi += d;
  }
  double pad = (data_hi - data_lo) * kAutoPadFraction;
  Range r{has_lo ? want_lo : data_lo - pad, has_hi ? want_hi : data_hi + pad};

  if (has_lo && has_hi && r.lo > r.hi) std::swap(r.lo, r.hi);
  if (!(r.hi > r.lo)) {  // an explicit limit is at or beyond the data's other end
    double d = std::max(std::abs(r.lo), std::abs(r.hi)) * 0.1;
    if (!(d > 0)) d = 1;
    if (has_lo && !has_hi) {
      r.hi = r.lo + d;
    } else if (has_hi && !has_lo) {
      r.lo = r.hi - d;
    } else {
      r.lo -= d;
      r.hi += d;
    }
  }
  return r;
}

// The 1-2-5 step nearest above `raw`.
double nice_step(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double nice = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  return nice * mag;
}

struct Ticks {
  std::vector<double> values;
  double step = 1;
};

Ticks make_ticks(const Range& r, double target_count) {
  Ticks t;
  t.step = nice_step(r.span() / std::max(1.0, target_count));
  double k = std::ceil(r.lo / t.step - 1e-9);
  for (int i = 0; i < kMaxTicks; ++i, k += 1) {
    double v = k * t.step;
    if (v > r.hi + t.step * 1e-9) break;
    if (std::abs(v) < t.step * 1e-9) v = 0;  // no "-0" from rounding
    if (!t.values.empty() && v <= t.values.back()) break;  // steps below double precision
    t.values.push_back(v);
  }
  return t;
}

// Tick labels: plain decimals for moderate values, SI suffixes (k, M, G, T) from 1e4
// (budgets in bytes read "2G", not "2000000000"), and %g beyond that or for tiny steps.
class TickFormat {
 public:
  explicit TickFormat(const Ticks& t) : step_(t.step) {
    double max_abs = 0;
    for (double v : t.values) max_abs = std::max(max_abs, std::abs(v));
    if (max_abs >= 1e15 || step_ < 1e-3) {
      use_g_ = true;
      double digits = std::floor(std::log10(std::max(max_abs, step_))) -
                      std::floor(std::log10(step_)) + 1;
      g_precision_ = static_cast<int>(std::clamp(digits, 1.0, 15.0));
      return;
    }
    static constexpr struct { double scale; const char* suffix; } kSi[] = {
        {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    if (max_abs >= 1e4) {
      for (const auto& si : kSi) {
        if (max_abs >= si.scale) {
          scale_ = si.scale;
          suffix_ = si.suffix;
          break;
        }
      }
    }
    double scaled_step = step_ / scale_;
    decimals_ = static_cast<int>(std::clamp(-std::floor(std::log10(scaled_step) + 1e-9), 0.0, 6.0));
  }

  std::string operator()(double v) const {
    if (v == 0) return "0";
    char buf[64];
    if (use_g_) {
      std::snprintf(buf, sizeof buf, "%.*g", g_precision_, v);
    } else {
      std::snprintf(buf, sizeof buf, "%.*f%s", decimals_, v / scale_, suffix_);
    }
    return buf;
  }

 private:
  double step_;
  bool use_g_ = false;
  int g_precision_ = 6;
  double scale_ = 1;
  const char* suffix_ = "";
  int decimals_ = 0;
};

// ---- layout --------------------------------------------------------------------

// Note [Legend layout]
// ~~~~~~~~~~~~~~~~~~~~
// The legend sits below the x-axis label, inside the panel's cell, so it can never
// cover data. Entries share one column width (the widest entry) and fill rows left to
// right; the block is centred in the cell. Every panel reserves the height of the
// tallest legend in the figure, so plot areas align across the grid, and a cell grows
// past options.panel_height rather than leave less than kMinPlotHeightPx for the plot.
// Labels wider than the cell are cut with an ellipsis; data-label keeps the full text.
struct LegendLayout {
  double column_px = 0;
  size_t columns = 1;
  size_t rows = 0;
};

LegendLayout legend_layout(const PlotPanel& panel, double cell_width_px) {
  LegendLayout l;
  if (panel.series.empty()) return l;
  double avail = std::max(1.0, cell_width_px - 2 * kLegendSideMarginPx);
  double widest = 0;
  for (const PlotSeries& s : panel.series)
    widest = std::max(widest, text_width_px(s.label, kLegendFontPx));
  l.column_px = std::min(avail, kLegendSwatchPx + 6 + widest + kLegendGapPx);
  l.columns = std::max<size_t>(1, static_cast<size_t>(avail / l.column_px));
  l.columns = std::min(l.columns, panel.series.size());
  l.rows = (panel.series.size() + l.columns - 1) / l.columns;
  return l;
}

double legend_band_px(size_t rows) {
  return rows == 0 ? 0 : kLegendPadPx + static_cast<double>(rows) * kLegendRowPx;
}

// Colour index per label, in order of first appearance (Note [Series colours]).
std::map<std::string, size_t> assign_colours(const std::vector<PlotPanel>& panels) {
  std::map<std::string, size_t> index;
  for (const PlotPanel& p : panels)
    for (const PlotSeries& s : p.series) index.emplace(s.label, index.size());
  return index;
}

// Maps data coordinates to px inside one panel's plot area.
struct Frame {
  double left, right, top, bottom;  // px
  Range x, y;
  double px(double v) const { return left + (v - x.lo) / x.span() * (right - left); }
  double py(double v) const { return bottom - (v - y.lo) / y.span() * (bottom - top); }
};

struct Cell {
  double x, y, width, height;  // px
  double legend_band;          // px reserved for the legend at the bottom of the cell
};

void append_text(std::string& out, double x, double y, double font_px, const char* anchor,
                 const std::string& text, const char* extra = "") {
  out += "<text x=\"" + fmt(x) + "\" y=\"" + fmt(y) + "\" font-size=\"" + fmt(font_px) +
         "\" text-anchor=\"" + anchor + "\"" + extra + ">" + xml_escape(text) + "</text>\n";
}

void render_panel(std::string& out, const PlotPanel& panel, size_t panel_index, const Cell& cell,
                  const std::map<std::string, size_t>& colours) {
  // Ranges from every finite value the panel draws.
  std::vector<double> xs, ys;
  for (const PlotSeries& s : panel.series) {
    for (const auto* pts : {&s.points, &s.marks}) {
      for (const PlotPoint& p : *pts) {
        if (is_missing(p)) continue;
        xs.push_back(p.x);
        ys.push_back(p.y);
      }
    }
  }
  bool has_data = !xs.empty();
  for (double h : panel.hlines)
    if (std::isfinite(h)) ys.push_back(h);

  Frame f;
  constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();
  f.x = axis_range(xs, panel.x_min.value_or(kUnset), panel.x_max.value_or(kUnset));
  f.y = axis_range(ys, panel.y_min.value_or(kUnset), panel.y_max.value_or(kUnset));
  f.top = cell.y + kPanelTitleBandPx;
  f.bottom = cell.y + cell.height - kXAxisBandPx - cell.legend_band;
  Ticks y_ticks = make_ticks(f.y, (f.bottom - f.top) / 45);
  TickFormat y_fmt(y_ticks);
  double y_tick_label_px = 0;
  for (double v : y_ticks.values)
    y_tick_label_px = std::max(y_tick_label_px, text_width_px(y_fmt(v), kTickFontPx));
  f.left = cell.x + kYLabelBandPx + y_tick_label_px + kTickLabelGapPx + kTickLengthPx;
  f.right = std::max(f.left + kMinPlotWidthPx, cell.x + cell.width - kRightMarginPx);
  Ticks x_ticks = make_ticks(f.x, (f.right - f.left) / 75);
  TickFormat x_fmt(x_ticks);

  const std::string clip_id = "dtr-clip-" + std::to_string(panel_index);
  const double plot_w = f.right - f.left, plot_h = f.bottom - f.top;
  out += "<g class=\"panel\" data-title=\"" + xml_escape(panel.title) + "\">\n";
  out += "<defs><clipPath id=\"" + clip_id + "\"><rect x=\"" + fmt(f.left) + "\" y=\"" +
         fmt(f.top) + "\" width=\"" + fmt(plot_w) + "\" height=\"" + fmt(plot_h) +
         "\"/></clipPath></defs>\n";

  // Grid lines at the ticks.
  out += "<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (double v : x_ticks.values)
    out += "<line x1=\"" + fmt(f.px(v)) + "\" y1=\"" + fmt(f.top) + "\" x2=\"" + fmt(f.px(v)) +
           "\" y2=\"" + fmt(f.bottom) + "\"/>\n";
  for (double v : y_ticks.values)
    out += "<line x1=\"" + fmt(f.left) + "\" y1=\"" + fmt(f.py(v)) + "\" x2=\"" + fmt(f.right) +
           "\" y2=\"" + fmt(f.py(v)) + "\"/>\n";
  out += "</g>\n";

  // Reference lines, under the data.
  for (double h : panel.hlines) {
    if (!std::isfinite(h)) continue;
    char value[32];
    std::snprintf(value, sizeof value, "%.6g", h);
    out += "<line class=\"hline\" data-value=\"" + std::string(value) + "\" x1=\"" + fmt(f.left) + "\" y1=\"" + fmt(f.py(h)) + "\" x2=\"" + fmt(f.right) +
           "\" y2=\"" + fmt(f.py(h)) +
           "\" stroke=\"#555555\" stroke-width=\"1.2\" stroke-dasharray=\"6,4\" clip-path=\"url(#" +
           clip_id + ")\"/>\n";
  }

  // Series: one polyline per run of finite points, a circle per point, crosses for marks.
  for (const PlotSeries& s : panel.series) {
    SeriesStyle style = style_for(colours.at(s.label));
    std::string dash = *style.dash ? std::string(" stroke-dasharray=\"") + style.dash + "\"" : "";
    out += "<g class=\"series\" data-label=\"" + xml_escape(s.label) + "\" clip-path=\"url(#" +
           clip_id + ")\">\n";
    std::string run;
    size_t run_points = 0;
    auto flush_run = [&] {
      if (run_points >= 2)
        out += "<polyline class=\"segment\" points=\"" + run + "\" fill=\"none\" stroke=\"" +
               style.colour + "\" stroke-width=\"" + fmt(kLineWidthPx) +
               "\" stroke-linejoin=\"round\"" + dash + "/>\n";
      run.clear();
      run_points = 0;
    };
    for (const PlotPoint& p : s.points) {
      if (is_missing(p)) {
        flush_run();
        continue;
      }
      if (run_points > 0) run += ' ';
      run += fmt(f.px(clamp_value(p.x))) + "," + fmt(f.py(clamp_value(p.y)));
      ++run_points;
    }
    flush_run();

    out += "<g class=\"points\" fill=\"" + std::string(style.colour) + "\">";
    for (const PlotPoint& p : s.points) {
      if (is_missing(p) || !s.dots) continue;
      out += "<circle cx=\"" + fmt(f.px(clamp_value(p.x))) + "\" cy=\"" +
             fmt(f.py(clamp_value(p.y))) + "\" r=\"" + fmt(kPointRadiusPx) + "\"/>";
    }
    out += "</g>\n";

    std::string crosses;
    for (const PlotPoint& m : s.marks) {
      if (is_missing(m)) continue;
      double cx = f.px(clamp_value(m.x)), cy = f.py(clamp_value(m.y));
      crosses += "M" + fmt(cx - kCrossHalfPx) + " " + fmt(cy - kCrossHalfPx) + "L" +
                 fmt(cx + kCrossHalfPx) + " " + fmt(cy + kCrossHalfPx) + "M" +
                 fmt(cx - kCrossHalfPx) + " " + fmt(cy + kCrossHalfPx) + "L" +
                 fmt(cx + kCrossHalfPx) + " " + fmt(cy - kCrossHalfPx);
    }
    if (!crosses.empty())
      out += "<path class=\"marks\" d=\"" + crosses + "\" fill=\"none\" stroke=\"" +
             style.colour + "\" stroke-width=\"1.5\"/>\n";
    out += "</g>\n";
  }
  if (!has_data)
    append_text(out, (f.left + f.right) / 2, (f.top + f.bottom) / 2, kAxisLabelFontPx, "middle",
                "no data", " fill=\"#888888\" font-style=\"italic\"");

  // Axes: frame, ticks, tick labels, axis labels, title.
  out += "<rect class=\"frame\" x=\"" + fmt(f.left) + "\" y=\"" + fmt(f.top) + "\" width=\"" +
         fmt(plot_w) + "\" height=\"" + fmt(plot_h) +
         "\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1\"/>\n";
  out += "<g class=\"ticks\" stroke=\"#333333\" stroke-width=\"1\">\n";
  for (double v : x_ticks.values)
    out += "<line x1=\"" + fmt(f.px(v)) + "\" y1=\"" + fmt(f.bottom) + "\" x2=\"" + fmt(f.px(v)) +
           "\" y2=\"" + fmt(f.bottom + kTickLengthPx) + "\"/>\n";
  for (double v : y_ticks.values)
    out += "<line x1=\"" + fmt(f.left - kTickLengthPx) + "\" y1=\"" + fmt(f.py(v)) + "\" x2=\"" +
           fmt(f.left) + "\" y2=\"" + fmt(f.py(v)) + "\"/>\n";
  out += "</g>\n<g class=\"tick-labels\" fill=\"#333333\">\n";
  for (double v : x_ticks.values)
    append_text(out, f.px(v), f.bottom + kTickLengthPx + kTickFontPx + 1, kTickFontPx, "middle",
                x_fmt(v));
  for (double v : y_ticks.values)
    append_text(out, f.left - kTickLengthPx - kTickLabelGapPx, f.py(v) + kTickFontPx * 0.35,
                kTickFontPx, "end", y_fmt(v));
  out += "</g>\n";
  if (!panel.x_label.empty())
    append_text(out, (f.left + f.right) / 2, f.bottom + kXAxisBandPx - 8, kAxisLabelFontPx,
                "middle", fit_text(panel.x_label, plot_w, kAxisLabelFontPx));
  if (!panel.y_label.empty()) {
    double x = cell.x + kYLabelBandPx - 6, y = (f.top + f.bottom) / 2;
    append_text(out, x, y, kAxisLabelFontPx, "middle",
                fit_text(panel.y_label, plot_h, kAxisLabelFontPx),
                (" transform=\"rotate(-90 " + fmt(x) + " " + fmt(y) + ")\"").c_str());
  }
  if (!panel.title.empty())
    append_text(out, cell.x + cell.width / 2, cell.y + 18, kPanelTitleFontPx, "middle",
                fit_text(panel.title, cell.width - 8, kPanelTitleFontPx), " font-weight=\"bold\"");

  // Legend (Note [Legend layout]).
  LegendLayout legend = legend_layout(panel, cell.width);
  double block_px = legend.column_px * static_cast<double>(legend.columns) - kLegendGapPx;
  double legend_x = cell.x + std::max(kLegendSideMarginPx, (cell.width - block_px) / 2);
  double legend_y = f.bottom + kXAxisBandPx + kLegendPadPx + kLegendRowPx / 2;
  double label_px = legend.column_px - kLegendSwatchPx - 6 - kLegendGapPx;
  for (size_t i = 0; i < panel.series.size(); ++i) {
    const PlotSeries& s = panel.series[i];
    SeriesStyle style = style_for(colours.at(s.label));
    double x = legend_x + static_cast<double>(i % legend.columns) * legend.column_px;
    double y = legend_y + static_cast<double>(i / legend.columns) * kLegendRowPx;
    std::string dash = *style.dash ? std::string(" stroke-dasharray=\"") + style.dash + "\"" : "";
    out += "<g class=\"legend-entry\" data-label=\"" + xml_escape(s.label) + "\">";
    const double mid = x + kLegendSwatchPx / 2;
    if (s.points.empty() && !s.marks.empty()) {  // marks only: a cross, as in the plot
      out += "<path d=\"M" + fmt(mid - kCrossHalfPx) + " " + fmt(y - kCrossHalfPx) + "L" +
             fmt(mid + kCrossHalfPx) + " " + fmt(y + kCrossHalfPx) + "M" + fmt(mid - kCrossHalfPx) +
             " " + fmt(y + kCrossHalfPx) + "L" + fmt(mid + kCrossHalfPx) + " " +
             fmt(y - kCrossHalfPx) + "\" fill=\"none\" stroke=\"" + style.colour +
             "\" stroke-width=\"1.5\"/>";
    } else {
      out += "<line x1=\"" + fmt(x) + "\" y1=\"" + fmt(y) + "\" x2=\"" + fmt(x + kLegendSwatchPx) +
             "\" y2=\"" + fmt(y) + "\" stroke=\"" + style.colour + "\" stroke-width=\"2\"" + dash +
             "/>";
      if (s.dots)
        out += "<circle cx=\"" + fmt(mid) + "\" cy=\"" + fmt(y) + "\" r=\"" +
               fmt(kPointRadiusPx) + "\" fill=\"" + style.colour + "\"/>";
    }
    std::string shown = s.label.empty() ? "(unnamed)" : s.label;
    out += "<text x=\"" + fmt(x + kLegendSwatchPx + 6) + "\" y=\"" +
           fmt(y + kLegendFontPx * 0.35) + "\" font-size=\"" + fmt(kLegendFontPx) + "\">" +
           xml_escape(fit_text(shown, std::max(label_px, kLegendFontPx), kLegendFontPx)) +
           "</text></g>\n";
  }
  out += "</g>\n";
}

}  // namespace

std::string render_svg(const std::vector<PlotPanel>& panels, const PlotOptions& options) {
  const size_t columns =
      std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, options.columns)),
                                           std::max<size_t>(1, panels.size())));
  const size_t rows = (panels.size() + columns - 1) / columns;
  const double cell_w = std::max<double>(kMinCellWidthPx, options.panel_width);

  size_t legend_rows = 0;
  for (const PlotPanel& p : panels) legend_rows = std::max(legend_rows, legend_layout(p, cell_w).rows);
  const double legend_band = legend_band_px(legend_rows);
  const double cell_h = std::max<double>(
      options.panel_height, kPanelTitleBandPx + kMinPlotHeightPx + kXAxisBandPx + legend_band);

  const double top = options.title.empty() ? kFigureMarginPx : kFigureTitleBandPx;
  const double width = cell_w * static_cast<double>(columns);
  const double height = top + cell_h * static_cast<double>(rows) + kFigureMarginPx;

  std::string out;
  out.reserve(4096 + panels.size() * 8192);
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + fmt(width) +
         "\" height=\"" + fmt(height) + "\" viewBox=\"0 0 " + fmt(width) + " " + fmt(height) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  out += "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + fmt(width) + "\" height=\"" +
         fmt(height) + "\" fill=\"#ffffff\"/>\n";
  if (!options.title.empty())
    append_text(out, width / 2, 23, kFigureTitleFontPx, "middle",
                fit_text(options.title, width - 8, kFigureTitleFontPx), " font-weight=\"bold\"");

  const std::map<std::string, size_t> colours = assign_colours(panels);
  for (size_t i = 0; i < panels.size(); ++i) {
    Cell cell{cell_w * static_cast<double>(i % columns), top + cell_h * static_cast<double>(i / columns),
              cell_w, cell_h, legend_band};
    render_panel(out, panels[i], i, cell, colours);
  }
  out += "</svg>\n";
  return out;
}

void write_svg(const std::string& path, const std::vector<PlotPanel>& panels,
               const PlotOptions& options) {
  write_file(path, render_svg(panels, options), "plot");  // Note [Output files]
}

}  // namespace dtr
