// test_plot_csv.cpp: `dtr-sim plot`'s CSV input (sim/plot_csv.h): panels and series in
// first-seen order, quoted fields, missing points, and errors that name file and line.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "dtr/sim/plot_csv.h"

namespace dtr {
namespace {

std::vector<PlotPanel> parse(const std::string& text) {
  std::istringstream in(text);
  return read_plot_csv(in, "points.csv", "budget", "overhead");
}

TEST_CASE("plot CSV: panels and series in first-seen order, columns by header", "[sim][plot]") {
  const auto panels = parse(
      "y,x,series,panel,extra\n"
      "1.5,0.9,dtr_eq,\"resnet18: live, step\",a\n"
      "1.2,0.9,lru,\"resnet18: live, step\",b\n"
      "nan,0.5,dtr_eq,\"resnet18: live, step\",c\n"
      "2,0.9,dtr_eq,\"say \"\"hi\"\"\",d\n"
      ",0.4,lru,\"resnet18: live, step\",e\n");
  REQUIRE(panels.size() == 2);
  CHECK(panels[0].title == "resnet18: live, step");
  CHECK(panels[0].x_label == "budget");
  CHECK(panels[0].y_label == "overhead");
  CHECK(panels[1].title == "say \"hi\"");
  REQUIRE(panels[0].series.size() == 2);
  CHECK(panels[0].series[0].label == "dtr_eq");
  REQUIRE(panels[0].series[0].points.size() == 2);
  CHECK(panels[0].series[0].points[0].x == 0.9);
  CHECK(panels[0].series[0].points[0].y == 1.5);
  CHECK(std::isnan(panels[0].series[0].points[1].y));
  REQUIRE(panels[0].series[1].points.size() == 2);
  CHECK(std::isnan(panels[0].series[1].points[1].y));
}

TEST_CASE("plot CSV: bad input names the file, the line and the problem", "[sim][plot]") {
  CHECK_THROWS_WITH(parse(""), Catch::Contains("points.csv: empty"));
  CHECK_THROWS_WITH(parse("panel,series,x\n"), Catch::Contains("no column 'y'"));
  CHECK_THROWS_WITH(parse("panel,series,x,y\n"), Catch::Contains("no points"));
  CHECK_THROWS_WITH(parse("panel,series,x,y\na,b,0.5,1\na,b,zero,1\n"),
                    Catch::Contains("points.csv:3 x: 'zero' is not a number"));
  CHECK_THROWS_WITH(parse("panel,series,x,y\na,b,nan,1\n"), Catch::Contains("'nan' is not a number"));
  CHECK_THROWS_WITH(parse("panel,series,x,y\na,b,0.5\n"), Catch::Contains("points.csv:2: 3 fields"));
  CHECK_THROWS_WITH(parse("panel,series,x,y\n\"a,b,0.5,1\n"), Catch::Contains("unclosed quote"));
  CHECK_THROWS_AS(read_plot_csv_file("/nonexistent/points.csv", "x", "y"), PlotInputError);
}

}  // namespace
}  // namespace dtr
