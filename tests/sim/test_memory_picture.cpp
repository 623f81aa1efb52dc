// test_memory_picture.cpp: the memory picture (sim/memory_picture.h) and `dtr-sim run
// --svg`: well-formed XML (Debian's Python ElementTree parses it and lists its series and
// budget line; skipped with a WARN where /usr/bin/python3 is missing), the documented
// series, and a thinned long run that keeps its peak.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "dtr/sim/memory_picture.h"
#include "test_support.h"

using namespace dtr;
using dtr::test::run_command;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::string temp_path(const std::string& stem, const char* ext) {
  return "/tmp/dtr_memory_picture_" + stem + "_" + std::to_string(getpid()) + ext;
}

// What ElementTree sees in an SVG file: "series LABEL" per series group and "hline VALUE"
// per reference line, one per line; nullopt (and a WARN) without Python.
std::optional<std::set<std::string>> parse_svg(const std::string& svg_path) {
  if (access(kPython, X_OK) != 0) {
    WARN("skipping the Python XML parse: " << kPython << " not found");
    return std::nullopt;
  }
  const std::string script = temp_path("parse", ".py");
  {
    std::ofstream out(script);
    out << "import sys, xml.etree.ElementTree as E\n"
           "root = E.parse(sys.argv[1]).getroot()\n"
           "ns = '{http://www.w3.org/2000/svg}'\n"
           "for g in root.iter(ns + 'g'):\n"
           "    if g.get('class') == 'series': print('series ' + g.get('data-label'))\n"
           "for l in root.iter(ns + 'line'):\n"
           "    if l.get('class') == 'hline': print('hline ' + l.get('data-value'))\n";
  }
  const auto r = run_command(std::string(kPython) + " " + script + " " + svg_path);
  std::remove(script.c_str());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::set<std::string> found;
  size_t start = 0;
  while (start < r.output.size()) {
    size_t nl = r.output.find('\n', start);
    if (nl == std::string::npos) nl = r.output.size();
    found.insert(r.output.substr(start, nl - start));
    start = nl + 1;
  }
  return found;
}

const PlotSeries* find_series(const PlotPanel& p, const std::string& label) {
  for (const PlotSeries& s : p.series)
    if (s.label == label) return &s;
  return nullptr;
}

constexpr uint64_t kMiB = 1024 * 1024;

}  // namespace

TEST_CASE("memory picture: documented series, budget line, step lines in ms and MiB",
          "[sim][memory_picture]") {
  Timeline base, run;
  base.allocated(0, 4 * kMiB);
  base.allocated(2'000'000, 8 * kMiB);
  base.span("op", 0, 4'000'000, false);
  run.budget(0, 6 * kMiB);
  run.allocated(0, 4 * kMiB);
  run.eviction(2'000'000, 2 * kMiB);
  run.allocated(2'000'000, 6 * kMiB);
  run.span("op", 3'000'000, 1'000'000, true);
  run.span("op", 0, 5'000'000, false);

  MemoryPictureOptions o;
  o.run_label = "dtr_eq @ 0.75";
  const PlotPanel p = memory_panel(&base, run, o);
  REQUIRE(find_series(p, "baseline"));
  REQUIRE(find_series(p, "dtr_eq @ 0.75"));
  REQUIRE(find_series(p, "evictions"));
  REQUIRE(find_series(p, "remats"));
  REQUIRE(p.hlines.size() == 1);
  CHECK(p.hlines[0] == Approx(6.0));
  // The baseline steps from 4 to 8 MiB at 2 ms and holds until its end at 4 ms.
  const auto& bp = find_series(p, "baseline")->points;
  REQUIRE(bp.size() == 4);
  CHECK(bp[1].x == Approx(2.0));
  CHECK(bp[1].y == Approx(4.0));
  CHECK(bp[2].y == Approx(8.0));
  CHECK(bp[3].x == Approx(4.0));
  // The run ends at 5 ms: its remat made it longer.
  CHECK(find_series(p, "dtr_eq @ 0.75")->points.back().x == Approx(5.0));
  const auto& ev = find_series(p, "evictions")->marks;
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].x == Approx(2.0));
  CHECK(ev[0].y == Approx(6.0));
  const auto& rm = find_series(p, "remats")->marks;
  REQUIRE(rm.size() == 1);
  CHECK(rm[0].x == Approx(3.0));

  const std::string path = temp_path("unit", ".svg");
  write_memory_picture(path, &base, run, o);
  const std::string svg = test::read_file(path);
  CHECK(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
  CHECK(svg.find("nan") == std::string::npos);
  if (const auto found = parse_svg(path)) {
    for (const char* want : {"series baseline", "series dtr_eq @ 0.75", "series evictions",
                             "series remats", "hline 6"})
      CHECK(found->count(want) == 1);
  }
  std::remove(path.c_str());
  CHECK_THROWS_WITH(write_memory_picture("/nonexistent-dir/m.svg", &base, run, o),
                    Catch::Contains("/nonexistent-dir/m.svg"));
}

TEST_CASE("memory picture: a long run is thinned and keeps its peak", "[sim][memory_picture]") {
  Timeline run(1 << 22);
  uint64_t peak = 0;
  for (uint64_t i = 0; i < 200000; ++i) {
    const uint64_t bytes = (i % 97) * kMiB + (i == 123457 ? 500 * kMiB : 0);
    peak = std::max(peak, bytes);
    run.allocated(i * 1000, bytes);
  }
  MemoryPictureOptions o;
  o.max_points = 1000;
  const PlotPanel p = memory_panel(nullptr, run, o);
  CHECK_FALSE(find_series(p, "baseline"));
  const auto& pts = find_series(p, "under budget")->points;
  CHECK(pts.size() <= 1000);
  double top = 0;
  for (const PlotPoint& q : pts) top = std::max(top, q.y);
  CHECK(top == Approx(double(peak) / kMiB));
  CHECK(p.hlines.empty());  // no budget recorded
  CHECK(render_memory_picture(nullptr, run, o).size() < 200000);
}

TEST_CASE("dtr-sim run --svg draws baseline, run, marks and the budget", "[sim][memory_picture]") {
  const std::string log = test::log_path("resnet32");
  if (log.empty()) {
    WARN("skipping: no resnet32 log in " << DTR_LOG_DIR);
    return;
  }
  const std::string path = temp_path("resnet32", ".svg");
  const auto r = run_command(std::string(DTR_SIM_BIN) + " run --trace " + log +
                             " --budget 0.5 --policy dtr_eq --svg " + path);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string svg = test::read_file(path);
  CHECK(svg.find("<g class=\"series\" data-label=\"baseline\"") != std::string::npos);
  CHECK(svg.find("<g class=\"series\" data-label=\"dtr_eq @ 0.5\"") != std::string::npos);
  CHECK(svg.find("class=\"marks\"") != std::string::npos);  // evictions and remats drawn
  CHECK(svg.find("class=\"hline\"") != std::string::npos);
  CHECK(svg.size() < 2'000'000);
  if (const auto found = parse_svg(path)) {
    for (const char* want :
         {"series baseline", "series dtr_eq @ 0.5", "series evictions", "series remats"})
      CHECK(found->count(want) == 1);
    CHECK(std::any_of(found->begin(), found->end(),
                      [](const std::string& s) { return s.rfind("hline ", 0) == 0; }));
  }
  std::remove(path.c_str());
}
