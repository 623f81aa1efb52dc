// test_output_file.cpp: Note [Output files]: paths checked before the work, writes checked
// to the close.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
// The files in `dir` whose names start with `prefix`.
std::vector<std::string> files_starting(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path());
  return found;
}
}  // namespace

TEST_CASE("ReplacingFile leaves the old file or the whole new one, never a short one",
          "[core][output]") {
  // Note [Whole or absent]
  const std::string dir = "/tmp/dtr_replacing_test_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/out.trace";
  const std::string beside = "out.trace.dtr-" + std::to_string(getpid()) + "-";
  dtr::write_file(path, "old\n", "trace");
  {
    dtr::ReplacingFile file(path);
    REQUIRE(file);
    file.out() << "new, ";
    CHECK(read_all(path) == "old\n");  // not yet
    CHECK(files_starting(dir, beside).size() == 1);
    file.out() << "whole\n";
    REQUIRE(file.commit());
  }
  CHECK(read_all(path) == "new, whole\n");
  CHECK(files_starting(dir, beside).empty());
  {
    dtr::ReplacingFile file(path);  // dropped unfinished, as by an exception
    file.out() << "half";
  }
  CHECK(read_all(path) == "new, whole\n");
  CHECK(files_starting(dir, beside).empty());

  // Two writers of one path in one process: each writes its own file, the last in wins.
  {
    dtr::ReplacingFile first(path), second(path);
    first.out() << "first\n";
    second.out() << "second\n";
    CHECK(files_starting(dir, beside).size() == 2);
    CHECK(first.commit());
    CHECK(second.commit());
  }
  CHECK(read_all(path) == "second\n");

  // A process killed while it writes leaves the old file, and its own file beside it.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dtr::ReplacingFile file(path);
    file.out() << std::string(1 << 20, 'x');
    file.out().flush();
    raise(SIGKILL);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  CHECK(read_all(path) == "second\n");
  const std::vector<std::string> left =
      files_starting(dir, "out.trace.dtr-" + std::to_string(child) + "-");
  REQUIRE(left.size() == 1);
  CHECK(read_all(left[0]).size() == 1 << 20);
  unlink(left[0].c_str());

  // The file a link names is replaced, and the link stays; permission bits are kept.
  const std::string link = dir + "/link.trace";
  REQUIRE(symlink(path.c_str(), link.c_str()) == 0);
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  dtr::write_file(link, "through the link\n", "trace");
  struct stat st;
  REQUIRE(lstat(link.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(read_all(path) == "through the link\n");
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // A link to nothing: the file it names is made, as before, and the link stays.
  const std::string dangling = dir + "/dangling.trace", named = dir + "/named.trace";
  REQUIRE(symlink(named.c_str(), dangling.c_str()) == 0);
  dtr::write_file(dangling, "made\n", "trace");
  REQUIRE(lstat(dangling.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  CHECK(read_all(named) == "made\n");

  // /dev/fd/N (as /dev/stdout redirected to a file) is written in place: the same inode,
  // so what else goes to that descriptor's file is not lost with a replaced inode.
  const std::string redirected = dir + "/redirected.txt";
  dtr::write_file(redirected, "before\n", "trace");
  REQUIRE(stat(redirected.c_str(), &st) == 0);
  const ino_t inode = st.st_ino;
  const int fd = open(redirected.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  dtr::write_file("/dev/fd/" + std::to_string(fd), "in place\n", "timeline");
  close(fd);
  REQUIRE(stat(redirected.c_str(), &st) == 0);
  CHECK(st.st_ino == inode);
  CHECK(read_all(redirected) == "in place\n");

  // Standard output redirected to a file, spelt otherwise or through a link, is that file:
  // written in place, in a child whose standard output is the file.
  const std::string log = dir + "/stdout.log", to_stdout = dir + "/to_stdout";
  REQUIRE(symlink("/dev/stdout", to_stdout.c_str()) == 0);
  const pid_t redirected_child = fork();
  REQUIRE(redirected_child >= 0);
  if (redirected_child == 0) {
    const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    struct stat before, after;
    if (out < 0 || dup2(out, 1) < 0 || fstat(1, &before) != 0) _exit(2);
    for (const std::string& spelling : {std::string("//dev/stdout"), to_stdout}) {
      dtr::ReplacingFile file(spelling);
      file.out() << "through " << spelling << "\n";
      if (!file.commit() || stat(log.c_str(), &after) != 0 || after.st_ino != before.st_ino)
        _exit(1);
    }
    _exit(0);
  }
  REQUIRE(waitpid(redirected_child, &status, 0) == redirected_child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  unlink(to_stdout.c_str());
  unlink(log.c_str());

  // A rename that fails for want of the new file (removed meanwhile, or renamed by a
  // forked child writing through the same object) fails the commit and keeps the old file.
  {
    dtr::ReplacingFile file(redirected);
    file.out() << "lost\n";
    for (const std::string& f : files_starting(dir, "redirected.txt.dtr-")) unlink(f.c_str());
    CHECK_FALSE(file.commit());
  }
  CHECK(read_all(redirected) == "in place\n");

  // A device is written in place (a rename would replace it), and a full one says so.
  {
    dtr::ReplacingFile file("/dev/null");
    REQUIRE(file);
    file.out() << "gone";
    CHECK(file.commit());
  }
  REQUIRE(stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  {
    dtr::ReplacingFile file("/dev/full");
    file.out() << std::string(1 << 16, 'x');
    CHECK_FALSE(file.commit());
  }
  CHECK(files_starting(dir, "").size() == 5);  // out, link, dangling, named, redirected
  std::filesystem::remove_all(dir);
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
