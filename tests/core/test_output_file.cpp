// test_output_file.cpp: Note [Output files]: paths checked before the work, writes checked
// to the close.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "dtr/core/output_file.h"

using Catch::Contains;

TEST_CASE("check_writable refuses directories and missing directories, creates nothing",
          "[core][output]") {
  CHECK_THROWS_WITH(dtr::check_writable("/tmp", "CSV"),
                    Contains("dtr: cannot write CSV '/tmp': it is a directory"));
  CHECK_THROWS_WITH(dtr::check_writable("/no/such/dir/x.csv", "plan"),
                    Contains("the directory '/no/such/dir' does not exist"));
  CHECK_THROWS_AS(dtr::check_writable("", "plan"), dtr::OutputError);
  const std::string fresh = "/tmp/dtr_output_test_" + std::to_string(getpid()) + ".csv";
  CHECK_NOTHROW(dtr::check_writable(fresh, "CSV"));
  struct stat st;
  CHECK(stat(fresh.c_str(), &st) != 0);                            // not created
  CHECK_NOTHROW(dtr::check_writable("relative_name.csv", "CSV"));  // in "."
}

TEST_CASE("write_file writes the text whole, or says why not", "[core][output]") {
  const std::string path = "/tmp/dtr_output_test_" + std::to_string(getpid()) + ".txt";
  dtr::write_file(path, "a,b\n1,2\n", "CSV");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "a,b\n1,2\n");
  dtr::write_file(path, "x\n", "CSV");  // replaces
  std::ifstream again(path);
  std::stringstream replaced;
  replaced << again.rdbuf();
  CHECK(replaced.str() == "x\n");
  unlink(path.c_str());
  // A full disk shows at the close: the result is not reported as written.
  CHECK_THROWS_WITH(dtr::write_file("/dev/full", std::string(1 << 16, 'x'), "plan"),
                    Contains("dtr: cannot write plan '/dev/full': No space left on device"));
  CHECK_THROWS_WITH(dtr::write_file("/tmp", "x", "graph"), Contains("'/tmp'"));
}

TEST_CASE("check_outputs refuses an output that is an input or another output", "[core][output]") {
  // Note [Outputs that are inputs]: `--timeline in.log` replaced the trace it replayed.
  const std::string dir = "/tmp/dtr_outputs_test_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  const std::string in = dir + "/in.log";
  dtr::write_file(in, "trace\n", "trace");
  CHECK_THROWS_WITH(dtr::check_outputs({{in, "timeline"}}, {{in, "trace"}}),
                    Contains("cannot write timeline '" + in +
                             "': it is the trace this command "
                             "reads"));
  // The same file by another spelling, and through a link.
  CHECK_THROWS_AS(dtr::check_outputs({{dir + "/./in.log", "plan"}}, {{in, "trace"}}),
                  dtr::OutputError);
  const std::string link = dir + "/link.log";
  REQUIRE(symlink(in.c_str(), link.c_str()) == 0);
  CHECK_THROWS_AS(dtr::check_outputs({{link, "CSV"}}, {{in, "trace"}}), dtr::OutputError);
  // Two outputs on one file that does not exist yet: the second would replace the first.
  CHECK_THROWS_WITH(
      dtr::check_outputs({{dir + "/f", "CSV"}, {dir + "/../" + dir.substr(5) + "/f", "plot"}}, {}),
      Contains("cannot write plot") && Contains("the CSV is written there too"));
  // Distinct files, empty paths, and a device named twice are fine.
  CHECK_NOTHROW(dtr::check_outputs({{dir + "/a", "CSV"}, {dir + "/b", "plot"}, {"", "graph"}},
                                   {{in, "trace"}, {"", "plan"}}));
  CHECK_NOTHROW(dtr::check_outputs({{"/dev/null", "CSV"}, {"/dev/null", "plot"}}, {}));
  // The writability checks still come first.
  CHECK_THROWS_WITH(dtr::check_outputs({{"/tmp", "CSV"}}, {}), Contains("it is a directory"));
  unlink(link.c_str());
  unlink(in.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("csv_field quotes what RFC 4180 says to", "[core][output]") {
  CHECK(dtr::csv_field("resnet32.log") == "resnet32.log");
  CHECK(dtr::csv_field("a,b\"c.trace") == "\"a,b\"\"c.trace\"");
  CHECK(dtr::csv_field("two\nlines") == "\"two\nlines\"");
  CHECK(dtr::csv_field("") == "");
}
