// test_progress_bar.cpp: the progress bar draws counts and an ETA when forced, stays
// silent on a non-terminal, and counts ticks from several threads exactly.
#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtr/sim/progress_bar.h"

namespace dtr {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using TempFile = std::unique_ptr<std::FILE, FileCloser>;

TempFile make_temp_file() {
  TempFile f(std::tmpfile());
  REQUIRE(f != nullptr);
  return f;
}

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

size_t count(const std::string& hay, char c) {
  size_t n = 0;
  for (char h : hay) n += h == c;
  return n;
}

}  // namespace

TEST_CASE("a forced bar draws counts, percent and ETA", "[sim][progress]") {
  TempFile file = make_temp_file();
  {
    ProgressBar bar = ProgressBar::forced(189, "sweep", file.get());
    CHECK(bar.enabled());
    bar.tick(37);  // the first tick always draws
    std::string text = contents(file.get());
    CHECK(text.find("sweep [") != std::string::npos);
    CHECK(text.find("37/189") != std::string::npos);
    CHECK(text.find("20%") != std::string::npos);
    CHECK(text.find("ETA") != std::string::npos);
    CHECK(text.find('\r') != std::string::npos);
    CHECK(text.find('\n') == std::string::npos);
    bar.tick(189 - 37);  // reaching the total always draws
    CHECK(contents(file.get()).find("189/189") != std::string::npos);
  }  // the destructor finishes the line
  std::string text = contents(file.get());
  CHECK(text.find("100%") != std::string::npos);
  CHECK(count(text, '\n') == 1);
  CHECK(text.back() == '\n');
}

TEST_CASE("finish is idempotent and ticks after it draw nothing", "[sim][progress]") {
  TempFile file = make_temp_file();
  ProgressBar bar = ProgressBar::forced(10, "", file.get());
  bar.tick(3);
  bar.finish();
  std::string after_finish = contents(file.get());
  CHECK(after_finish.find("3/10") != std::string::npos);
  CHECK(after_finish.rfind("\r[", 0) == 0);  // no label, no leading space
  bar.finish();
  bar.tick(2);
  CHECK(contents(file.get()) == after_finish);
  CHECK(count(after_finish, '\n') == 1);
  CHECK(bar.done() == 5);
}

TEST_CASE("a bar on a non-terminal writes nothing", "[sim][progress]") {
  TempFile file = make_temp_file();
  {
    ProgressBar bar(100, "quiet", file.get());
    CHECK_FALSE(bar.enabled());
    bar.tick(50);
    bar.tick(50);
    bar.finish();
    CHECK(bar.done() == 100);
  }
  CHECK(contents(file.get()).empty());

  ProgressBar no_stream(5, "null", nullptr);
  CHECK_FALSE(no_stream.enabled());
  no_stream.tick();
}

TEST_CASE("a zero total does not divide by zero", "[sim][progress]") {
  TempFile file = make_temp_file();
  ProgressBar bar = ProgressBar::forced(0, "empty", file.get());
  bar.finish();
  std::string text = contents(file.get());
  CHECK(text.find("0/0") != std::string::npos);
  CHECK(text.find("100%") != std::string::npos);
}

TEST_CASE("ticks from two threads add up", "[sim][progress]") {
  constexpr size_t kTicksPerThread = 5000;
  TempFile file = make_temp_file();
  ProgressBar bar = ProgressBar::forced(2 * kTicksPerThread, "threads", file.get());
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t)
    workers.emplace_back([&] {
      for (size_t i = 0; i < kTicksPerThread; ++i) bar.tick();
    });
  for (std::thread& w : workers) w.join();
  bar.finish();
  CHECK(bar.done() == 2 * kTicksPerThread);
  std::string text = contents(file.get());
  CHECK(text.find("10000/10000") != std::string::npos);
  CHECK(count(text, '\n') == 1);
  // Rate limiting: far fewer redraws than ticks.
  CHECK(count(text, '\r') < 100);
}

}  // namespace dtr
