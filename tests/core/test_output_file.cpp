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
