// test_svg_plot.cpp: the SVG plots are well-formed and carry what sweep reports need.
//
// Well-formedness is checked twice: by a small stack-based checker below (always), and
// by Debian's Python XML parser where /usr/bin/python3 exists (skipped with a WARN
// otherwise). Series and legend entries are found through the attributes svg_plot.h
// promises: class="series" / class="legend-entry" with data-label.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtr/sim/svg_plot.h"
#include "test_support.h"

namespace dtr {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- a minimal XML well-formedness checker --------------------------------------

// Returns "" if `doc` is well-formed, else a description of the first problem.
// Handles the XML declaration and processing instructions, comments, CDATA, a
// DOCTYPE without internal subset, elements with quoted attributes, self-closing
// tags, and character/entity references; rejects a raw '<' or a bare '&' in text or
// attribute values, duplicate attributes, mismatched tags and text outside the root.
std::string xml_problem(const std::string& doc) {
  auto is_name_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; };
  auto is_name_char = [&](char c) {
    return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  };
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  auto at = [&](size_t i, const char* s) { return doc.compare(i, std::strlen(s), s) == 0; };
  auto where = [&](size_t i) { return " at offset " + std::to_string(i); };

  // An entity or character reference starting at doc[i] == '&'; returns its length or 0.
  auto reference_length = [&](size_t i) -> size_t {
    size_t semi = doc.find(';', i);
    if (semi == std::string::npos || semi - i > 12) return 0;
    std::string body = doc.substr(i + 1, semi - i - 1);
    static const char* kNamed[] = {"amp", "lt", "gt", "quot", "apos"};
    for (const char* n : kNamed)
      if (body == n) return semi - i + 1;
    if (body.size() >= 2 && body[0] == '#') {
      bool hex = body[1] == 'x';
      std::string digits = body.substr(hex ? 2 : 1);
      if (digits.empty()) return 0;
      for (char c : digits)
        if (!(hex ? std::isxdigit(static_cast<unsigned char>(c)) : std::isdigit(static_cast<unsigned char>(c))))
          return 0;
      return semi - i + 1;
    }
    return 0;
  };

  std::vector<std::string> open;
  bool seen_root = false;
  size_t i = 0;
  while (i < doc.size()) {
    char c = doc[i];
    if (c != '<') {
      if (c == '&') {
        size_t n = reference_length(i);
        if (n == 0) return "bare '&'" + where(i);
        i += n;
        continue;
      }
      if (open.empty() && !is_space(c)) return "text outside the root element" + where(i);
      ++i;
      continue;
    }
    if (at(i, "<?")) {
      size_t end = doc.find("?>", i);
      if (end == std::string::npos) return "unterminated <?" + where(i);
      i = end + 2;
    } else if (at(i, "<!--")) {
      size_t end = doc.find("-->", i + 4);
      if (end == std::string::npos) return "unterminated comment" + where(i);
      i = end + 3;
    } else if (at(i, "<![CDATA[")) {
      if (open.empty()) return "CDATA outside the root" + where(i);
      size_t end = doc.find("]]>", i);
      if (end == std::string::npos) return "unterminated CDATA" + where(i);
      i = end + 3;
    } else if (at(i, "<!DOCTYPE")) {
      size_t end = doc.find('>', i);
      if (end == std::string::npos) return "unterminated DOCTYPE" + where(i);
      i = end + 1;
    } else if (at(i, "</")) {
      size_t j = i + 2;
      while (j < doc.size() && is_name_char(doc[j])) ++j;
      std::string name = doc.substr(i + 2, j - i - 2);
      while (j < doc.size() && is_space(doc[j])) ++j;
      if (j >= doc.size() || doc[j] != '>') return "malformed end tag" + where(i);
      if (open.empty() || open.back() != name)
        return "end tag </" + name + "> does not match <" + (open.empty() ? "" : open.back()) + ">" + where(i);
      open.pop_back();
      i = j + 1;
    } else {
      size_t j = i + 1;
      if (j >= doc.size() || !is_name_start(doc[j])) return "raw '<' in text" + where(i);
      while (j < doc.size() && is_name_char(doc[j])) ++j;
      std::string name = doc.substr(i + 1, j - i - 1);
      if (open.empty()) {
        if (seen_root) return "second root element" + where(i);
        seen_root = true;
      }
      std::vector<std::string> attributes;
      bool self_closing = false;
      for (;;) {
        size_t before = j;
        while (j < doc.size() && is_space(doc[j])) ++j;
        if (j >= doc.size()) return "unterminated tag <" + name + ">" + where(i);
        if (doc[j] == '>') { ++j; break; }
        if (at(j, "/>")) { j += 2; self_closing = true; break; }
        if (j == before) return "attributes not separated by space" + where(j);
        size_t a = j;
        if (!is_name_start(doc[j])) return "bad attribute name" + where(j);
        while (j < doc.size() && is_name_char(doc[j])) ++j;
        std::string attr = doc.substr(a, j - a);
        for (const std::string& seen : attributes)
          if (seen == attr) return "duplicate attribute " + attr + where(a);
        attributes.push_back(attr);
        while (j < doc.size() && is_space(doc[j])) ++j;
        if (j >= doc.size() || doc[j] != '=') return "attribute without '='" + where(j);
        ++j;
        while (j < doc.size() && is_space(doc[j])) ++j;
        if (j >= doc.size() || (doc[j] != '"' && doc[j] != '\'')) return "unquoted attribute value" + where(j);
        char quote = doc[j++];
        while (j < doc.size() && doc[j] != quote) {
          if (doc[j] == '<') return "'<' in attribute value" + where(j);
          if (doc[j] == '&') {
            size_t n = reference_length(j);
            if (n == 0) return "bare '&' in attribute value" + where(j);
            j += n;
          } else {
            ++j;
          }
        }
        if (j >= doc.size()) return "unterminated attribute value" + where(a);
        ++j;
      }
      if (!self_closing) open.push_back(name);
      i = j;
    }
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (!seen_root) return "no root element";
  return "";
}

// ---- helpers ---------------------------------------------------------------------

// Callers use the file before the next call, so one name per stem and process is enough.
std::string temp_svg_path(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          ("dtr_test_" + stem + "_" + std::to_string(getpid()) + ".svg"))
      .string();
}

// Parses `svg` with Debian's Python ElementTree; WARNs and passes where it is missing.
void check_with_python(const std::string& svg, const std::string& stem) {
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0) {
    WARN("skipping the Python XML parse: " << python << " not found");
    return;
  }
  std::string path = temp_svg_path(stem);
  {
    std::ofstream out(path, std::ios::binary);
    out << svg;
  }
  test::CommandResult r = test::run_command(
      std::string(python) + " -c \"import sys,xml.etree.ElementTree as E; E.parse(sys.argv[1])\" '" + path + "'");
  INFO("python3 ElementTree on " << path << ": " << r.output);
  CHECK(r.exit_code == 0);
  if (r.exit_code == 0) std::filesystem::remove(path);
}

void check_well_formed(const std::string& svg, const std::string& stem) {
  INFO(svg.substr(0, 2000));
  CHECK(xml_problem(svg) == "");
  CHECK(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
  CHECK(svg.find("viewBox=\"0 0 ") != std::string::npos);
  // A number that went wrong shows up as nan or inf in an attribute.
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf\"") == std::string::npos);
  check_with_python(svg, stem);
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + needle.size())) ++n;
  return n;
}

// The drawing of series `label_attr` (already escaped) in the first panel that has
// it: from its group's start up to its point markers.
std::string series_lines(const std::string& svg, const std::string& label_attr) {
  size_t start = svg.find("<g class=\"series\" data-label=\"" + label_attr + "\"");
  if (start == std::string::npos) return "";
  size_t end = svg.find("class=\"points\"", start);
  return svg.substr(start, end - start);
}

std::string series_points(const std::string& svg, const std::string& label_attr) {
  size_t start = svg.find("<g class=\"series\" data-label=\"" + label_attr + "\"");
  if (start == std::string::npos) return "";
  start = svg.find("class=\"points\"", start);
  size_t end = svg.find("</g>", start);
  return svg.substr(start, end - start);
}

// The stroke colour of the legend swatch of `label`.
std::string legend_colour(const std::string& svg, const std::string& label) {
  size_t start = svg.find("<g class=\"legend-entry\" data-label=\"" + label + "\"");
  if (start == std::string::npos) return "";
  size_t s = svg.find("stroke=\"", start) + 8;
  return svg.substr(s, svg.find('"', s) - s);
}

PlotSeries line(const std::string& label, std::vector<double> ys, double x0 = 1) {
  PlotSeries s{label, {}};
  for (size_t i = 0; i < ys.size(); ++i) s.points.push_back({x0 + static_cast<double>(i), ys[i]});
  return s;
}

}  // namespace

TEST_CASE("checker rejects malformed XML", "[sim][svg]") {
  CHECK(xml_problem("<?xml version=\"1.0\"?><!-- c --><a x=\"1\" y='2'><b/>t &amp; &#60;</a>") == "");
  CHECK(xml_problem("<a>x < y</a>") != "");
  CHECK(xml_problem("<a>x & y</a>") != "");
  CHECK(xml_problem("<a><b></a></b>") != "");
  CHECK(xml_problem("<a x=\"1\" x=\"2\"/>") != "");
  CHECK(xml_problem("<a x=1/>") != "");
  CHECK(xml_problem("<a x=\"<\"/>") != "");
  CHECK(xml_problem("<a/><b/>") != "");
  CHECK(xml_problem("<a>") != "");
}

TEST_CASE("each series is a labelled group with one legend entry per panel", "[sim][svg]") {
  const std::vector<std::string> labels = {"dtr_eq", "lru", "largest_first"};
  std::vector<PlotPanel> panels;
  for (const char* model : {"resnet", "transformer"}) {
    PlotPanel p{model, "budget (bytes)", "overhead", {}};
    for (size_t i = 0; i < labels.size(); ++i)
      p.series.push_back(line(labels[i], {1.0 + 0.1 * static_cast<double>(i), 1.2, 1.5, 2.0}));
    panels.push_back(p);
  }
  std::string svg = render_svg(panels, PlotOptions{"sweep", 420, 320, 3});
  check_well_formed(svg, "labels");
  CHECK(count(svg, "class=\"series\"") == 6);
  CHECK(count(svg, "class=\"legend-entry\"") == 6);
  CHECK(count(svg, "class=\"panel\"") == 2);
  for (const std::string& label : labels) {
    CHECK(count(svg, "<g class=\"series\" data-label=\"" + label + "\"") == 2);
    CHECK(count(svg, "<g class=\"legend-entry\" data-label=\"" + label + "\"") == 2);
  }
  CHECK(svg.find(">resnet</text>") != std::string::npos);
  CHECK(svg.find(">budget (bytes)</text>") != std::string::npos);
  CHECK(svg.find(">overhead</text>") != std::string::npos);
  CHECK(svg.find(">sweep</text>") != std::string::npos);
  // Four points each: one polyline and four circles.
  CHECK(count(series_lines(svg, "lru"), "<polyline") == 1);
  CHECK(count(series_points(svg, "lru"), "<circle") == 4);
}

TEST_CASE("a label keeps its colour across panels", "[sim][svg]") {
  PlotPanel a{"a", "x", "y", {line("lru", {1, 2}), line("dtr", {2, 3})}};
  PlotPanel b{"b", "x", "y", {line("dtr", {1, 2}), line("random", {2, 3}), line("lru", {3, 1})}};
  std::string svg = render_svg({a, b}, PlotOptions{});
  check_well_formed(svg, "colours");
  // Legend order within b is dtr, random, lru; find b's entries after b's panel start.
  std::string first = svg.substr(0, svg.find("data-title=\"b\""));
  std::string second = svg.substr(svg.find("data-title=\"b\""));
  CHECK(legend_colour(first, "lru") == legend_colour(second, "lru"));
  CHECK(legend_colour(first, "dtr") == legend_colour(second, "dtr"));
  CHECK(legend_colour(second, "random") != legend_colour(second, "lru"));
  CHECK(legend_colour(second, "random") != legend_colour(second, "dtr"));
  CHECK(legend_colour(first, "lru") != legend_colour(first, "dtr"));
}

TEST_CASE("missing values break a line into segments", "[sim][svg]") {
  PlotPanel p{"oom", "budget", "overhead", {}};
  p.series.push_back(line("gap_mid", {1, 2, kNaN, 4, 5}));
  p.series.push_back(line("inf_mid", {1, kInf, 3, 4}));
  p.series.push_back(line("gap_edges", {kNaN, 2, 3, kNaN}));
  p.series.push_back(line("isolated", {1, kNaN, 3, kNaN, 5, 6}));
  PlotSeries bad_x{"gap_x", {{1, 1}, {kNaN, 2}, {3, 3}, {4, 4}}};
  p.series.push_back(bad_x);
  std::string svg = render_svg({p}, PlotOptions{});
  check_well_formed(svg, "nan");
  CHECK(count(series_lines(svg, "gap_mid"), "<polyline") == 2);
  CHECK(count(series_points(svg, "gap_mid"), "<circle") == 4);
  CHECK(count(series_lines(svg, "inf_mid"), "<polyline") == 1);  // {1} alone has no line
  CHECK(count(series_points(svg, "inf_mid"), "<circle") == 3);
  CHECK(count(series_lines(svg, "gap_edges"), "<polyline") == 1);
  CHECK(count(series_lines(svg, "isolated"), "<polyline") == 1);  // only 5-6 is a run
  CHECK(count(series_points(svg, "isolated"), "<circle") == 4);
  CHECK(count(series_lines(svg, "gap_x"), "<polyline") == 1);
}

TEST_CASE("text is XML-escaped", "[sim][svg]") {
  const std::string nasty = "a<b & \"c\" 'd' >e";
  const std::string escaped = "a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt;e";
  PlotPanel p{nasty, nasty, nasty, {line(nasty, {1, 2, 3})}};
  std::string svg = render_svg({p}, PlotOptions{nasty});
  check_well_formed(svg, "escape");
  CHECK(svg.find("a<b") == std::string::npos);
  CHECK(count(svg, "<g class=\"series\" data-label=\"" + escaped + "\"") == 1);
  CHECK(count(svg, "<g class=\"legend-entry\" data-label=\"" + escaped + "\"") == 1);
  CHECK(count(svg, ">" + escaped + "</text>") >= 4);  // figure, panel, x and y labels

  // Control characters and invalid UTF-8 are replaced, valid UTF-8 is kept.
  PlotPanel q{"t\x01\x1f", "\xff\xfe bytes", "caf\xC3\xA9 \xE2\x88\x9E", {line("\xC3\x28", {1, 2})}};
  std::string svg2 = render_svg({q}, PlotOptions{});
  check_well_formed(svg2, "utf8");
  CHECK(svg2.find("caf\xC3\xA9 \xE2\x88\x9E") != std::string::npos);
  CHECK(svg2.find('\x01') == std::string::npos);
}

TEST_CASE("degenerate inputs still give well-formed SVG", "[sim][svg]") {
  std::vector<std::pair<std::string, std::vector<PlotPanel>>> cases;
  cases.push_back({"no_panels", {}});
  cases.push_back({"empty_panel", {PlotPanel{}}});
  cases.push_back({"one_point", {PlotPanel{"one", "x", "y", {line("p", {3})}}}});
  cases.push_back({"all_nan", {PlotPanel{"missing", "x", "y", {line("n", {kNaN, kNaN}), PlotSeries{"empty", {}}}}}});
  cases.push_back({"flat", {PlotPanel{"flat", "x", "y", {line("f", {2, 2, 2, 2})}}}});
  cases.push_back({"zero_flat", {PlotPanel{"zero", "x", "y", {line("z", {0, 0})}}}});
  cases.push_back({"all_inf", {PlotPanel{"infinite", "x", "y", {line("i", {kInf, -kInf})}}}});
  cases.push_back({"huge", {PlotPanel{"huge", "x", "y", {line("h", {-1e308, 1e308, 1.7e308}, 1e307)}}}});
  cases.push_back({"tiny", {PlotPanel{"tiny", "x", "y", {line("t", {1e-12, 3e-12, 2e-12})}}}});
  cases.push_back({"close", {PlotPanel{"close", "x", "y", {line("c", {1e17, 1e17 + 16, 1e17 + 32})}}}});
  PlotPanel inverted{"inverted", "x", "y", {line("v", {1, 2, 3})}};
  inverted.y_min = 5;
  inverted.y_max = 1;
  inverted.x_min = kNaN;
  cases.push_back({"inverted", {inverted}});
  PlotPanel above{"above", "x", "y", {line("a", {1, 2, 3})}};
  above.y_min = 10;  // every point is below the explicit minimum
  cases.push_back({"above", {above}});
  PlotPanel equal{"equal", "x", "y", {line("e", {1, 2, 3})}};
  equal.x_min = 4;
  equal.x_max = 4;
  cases.push_back({"equal_limits", {equal}});
  PlotPanel long_labels{std::string(300, 'T'), std::string(300, 'X'), std::string(300, 'Y'),
                        {line(std::string(200, 'L'), {1, 2}), line("", {2, 1})}};
  cases.push_back({"long_labels", {long_labels}});
  for (const auto& [name, panels] : cases) {
    SECTION(name) {
      for (int columns : {0, 1, 3}) {
        std::string svg;
        REQUIRE_NOTHROW(svg = render_svg(panels, PlotOptions{"", 420, 320, columns}));
        check_well_formed(svg, name);
      }
    }
  }
  // Tiny cells are clamped, not inverted.
  std::string svg = render_svg({PlotPanel{"t", "x", "y", {line("a", {1, 2})}}}, PlotOptions{"", -5, 0, 2});
  check_well_formed(svg, "tiny_cells");
  CHECK(svg.find("width=\"-") == std::string::npos);
  CHECK(svg.find("height=\"-") == std::string::npos);
}

TEST_CASE("reference lines and marks are drawn", "[sim][svg]") {
  PlotPanel p{"memory", "tick", "bytes", {line("used", {1e9, 3e9, 2e9})}, {}, {}, {}, {}, {4e9, kNaN}};
  p.series[0].marks = {{2, 3e9}, {3, 2e9}};
  std::string svg = render_svg({p}, PlotOptions{});
  check_well_formed(svg, "hlines");
  REQUIRE(count(svg, "class=\"hline\"") == 1);
  size_t h = svg.find("class=\"hline\"");
  std::string hline = svg.substr(h, svg.find("/>", h) - h);
  CHECK(hline.find("stroke-dasharray") != std::string::npos);
  CHECK(hline.find("data-value=\"4e+09\"") != std::string::npos);
  CHECK(count(svg, "class=\"marks\"") == 1);
  // The hline is inside the auto range, and byte-sized ticks read with SI suffixes.
  CHECK(svg.find(">4.0G</text>") != std::string::npos);
}

TEST_CASE("ticks fall on 1-2-5 steps", "[sim][svg]") {
  PlotPanel p{"ticks", "x", "y", {line("s", {0, 10}, 0)}};
  p.x_min = 0;
  p.x_max = 1;
  p.y_min = 0;
  p.y_max = 10;
  std::string svg = render_svg({p}, PlotOptions{"", 420, 320, 1});
  check_well_formed(svg, "ticks");
  size_t start = svg.find("class=\"tick-labels\"");
  std::string labels = svg.substr(start, svg.find("</g>", start) - start);
  for (const char* t : {">0</text>", ">0.2</text>", ">0.4</text>", ">1.0</text>", ">2</text>", ">10</text>"})
    CHECK(labels.find(t) != std::string::npos);
  CHECK(labels.find(">0.25</text>") == std::string::npos);
  CHECK(labels.find(">3</text>") == std::string::npos);
}

TEST_CASE("write_svg writes the rendered document and names the path on failure", "[sim][svg]") {
  std::vector<PlotPanel> panels = {PlotPanel{"p", "x", "y", {line("a", {1, 2})}}};
  std::string path = temp_svg_path("write");
  write_svg(path, panels, PlotOptions{});
  CHECK(test::read_file(path) == render_svg(panels, PlotOptions{}));
  std::filesystem::remove(path);

  const std::string bad = "/nonexistent-dtr-dir/sub/plot.svg";
  try {
    write_svg(bad, panels, PlotOptions{});
    FAIL("write_svg did not throw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(bad) != std::string::npos);
  }
}

}  // namespace dtr
