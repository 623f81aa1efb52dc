// test_timeline.cpp: the Timeline recorder and its Chrome trace writer and reader.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "dtr/core/chrome_trace.h"
#include "dtr/core/timeline.h"
#include "test_support.h"

using namespace dtr;

namespace {

std::string temp_path(const std::string& stem) {
  return "/tmp/dtr_timeline_" + stem + "_" + std::to_string(getpid()) + ".json";
}

Timeline sample_timeline() {
  Timeline t;
  t.budget(1000, 4096);
  t.span("addmm", 1000, 500, false, 0);
  t.allocated(1000, 2048);
  t.eviction(1500, 1024, 7, 0);  // storage 7, made by op 0
  t.allocated(1500, 1024);
  t.span("relu", 1500, 250, false, 1);
  t.span("addmm", 1750, 500, true, 0);  // a remat
  t.allocated(1750, 3072);
  // Recorded out of order, as a host that records an op after the remats it caused does.
  t.span("mul", 1200, 100, false, 2);
  t.compaction(1600, 2, 4096, 20 << 20);
  return t;
}

}  // namespace

TEST_CASE("timeline samples coalesce at one timestamp and drop repeats", "[core][timeline]") {
  Timeline t;
  t.allocated(10, 100);
  t.allocated(20, 100);  // repeat: dropped
  t.allocated(30, 200);
  t.allocated(30, 50);  // same ts: replaces
  REQUIRE(t.allocated_samples().size() == 2);
  CHECK(t.allocated_samples()[1].ts_ns == 30);
  CHECK(t.allocated_samples()[1].bytes == 50);
  t.allocated(30, 100);  // back to the value before: the step at 30 vanishes
  REQUIRE(t.allocated_samples().size() == 1);
  CHECK(t.allocated_samples()[0].bytes == 100);
  CHECK(t.origin_ns() == 10);
}

TEST_CASE("timeline keeps its first max_records records and says it was truncated",
          "[core][timeline]") {
  Timeline t(3);
  t.span("a", 0, 10, false);
  t.allocated(0, 1);
  t.eviction(5, 8);
  t.span("b", 10, 10, false);  // over the cap
  t.allocated(20, 2);          // over the cap
  CHECK(t.num_records() == 3);
  CHECK(t.truncated());
  CHECK(t.dropped_records() == 2);
  const auto doc = to_chrome_trace(t);
  CHECK(doc["otherData"]["truncated"] == true);
  CHECK(doc["otherData"]["dropped_records"] == 2);
  bool marked = false;
  for (const auto& e : doc["traceEvents"])
    if (e["name"] == "timeline truncated") marked = e["ph"] == "i" && e["s"] == "g";
  CHECK(marked);
  CHECK(parse_chrome_trace(nlohmann::json::parse(doc.dump()), "mem").dropped_records() == 2);
}

TEST_CASE("chrome trace: tracks, sorted events and microseconds", "[core][timeline]") {
  ChromeTraceInfo info;
  info.process_name = "test";
  info.host = "unit";
  info.extra["model"] = "mlp";
  const auto doc = to_chrome_trace(sample_timeline(), info);
  CHECK(doc["displayTimeUnit"] == "ms");
  CHECK(doc["otherData"]["format"] == "dtr-timeline");
  CHECK(doc["otherData"]["version"] == kChromeTraceVersion);
  CHECK(doc["otherData"]["origin_ns"] == 1000);
  CHECK(doc["otherData"]["budget_bytes"] == 4096);
  CHECK(doc["otherData"]["ops"] == 3);
  CHECK(doc["otherData"]["remats"] == 1);
  CHECK(doc["otherData"]["model"] == "mlp");
  const auto& ev = doc["traceEvents"];
  // metadata, budget, eviction, spans, samples, compaction
  REQUIRE(ev.size() == 4 + 1 + 1 + 4 + 3 + 1);
  CHECK(doc["otherData"]["compactions"] == 1);
  CHECK(ev[0]["name"] == "process_name");
  CHECK(ev[0]["args"]["name"] == "test");
  double last = -1;
  for (size_t i = 4; i < ev.size(); ++i) {
    CHECK(ev[i]["ts"].get<double>() >= last);
    last = ev[i]["ts"].get<double>();
  }
  for (const auto& e : ev) {
    if (e.value("cat", "") == "compaction") {  // on the evictions track, at 0.6 us
      CHECK(e["tid"] == 3);
      CHECK(e["ts"].get<double>() == Approx(0.6));
      CHECK(e["args"]["released_bytes"] == 20u << 20);
    }
    if (e["ph"] != "X") continue;
    if (e["name"] == "mul") {
      CHECK(e["ts"].get<double>() == Approx(0.2));  // (1200 - 1000) ns in microseconds
      CHECK(e["dur"].get<double>() == Approx(0.1));
    }
    CHECK(e["tid"] == (e["cat"] == "remat" ? 2 : 1));
  }
}

TEST_CASE("chrome trace round trip: load(write(t)) == t", "[core][timeline]") {
  const Timeline t = sample_timeline();
  const std::string path = temp_path("roundtrip");
  write_chrome_trace(path, t);
  // The streamed file is the same document as to_chrome_trace's.
  CHECK(nlohmann::json::parse(test::read_file(path)) ==
        nlohmann::json::parse(to_chrome_trace(t).dump()));
  const Timeline back = load_chrome_trace(path);
  std::remove(path.c_str());
  REQUIRE(back.spans().size() == t.spans().size());
  for (const TimelineSpan& s : t.spans()) {
    bool found = false;
    for (const TimelineSpan& b : back.spans())
      found = found || (b.start_ns == s.start_ns && b.dur_ns == s.dur_ns && b.remat == s.remat &&
                        b.op == s.op && back.name(b.name) == t.name(s.name));
    CHECK(found);
  }
  REQUIRE(back.evictions().size() == 1);
  CHECK(back.evictions()[0].ts_ns == 1500);
  CHECK(back.evictions()[0].bytes == 1024);
  CHECK(back.evictions()[0].storage == 7);
  CHECK(back.evictions()[0].op == 0);
  REQUIRE(back.compactions().size() == 1);
  CHECK(back.compactions()[0].ts_ns == 1600);
  CHECK(back.compactions()[0].blocks == 2);
  CHECK(back.compactions()[0].moved_bytes == 4096);
  CHECK(back.compactions()[0].released_bytes == 20u << 20);
  REQUIRE(back.allocated_samples().size() == t.allocated_samples().size());
  for (size_t i = 0; i < t.allocated_samples().size(); ++i) {
    CHECK(back.allocated_samples()[i].ts_ns == t.allocated_samples()[i].ts_ns);
    CHECK(back.allocated_samples()[i].bytes == t.allocated_samples()[i].bytes);
  }
  CHECK(back.last_budget() == std::optional<uint64_t>(4096));
  CHECK(back.origin_ns() == 1000);
  CHECK_FALSE(back.truncated());
}

TEST_CASE("chrome trace errors name the file", "[core][timeline]") {
  const Timeline t = sample_timeline();
  CHECK_THROWS_WITH(write_chrome_trace("/nonexistent-dir/x.json", t),
                    Catch::Contains("/nonexistent-dir/x.json"));
  CHECK_THROWS_WITH(load_chrome_trace("/nonexistent-dir/x.json"),
                    Catch::Contains("/nonexistent-dir/x.json"));
  const std::string path = temp_path("bad");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs("{\"traceEvents\": [", f);
    std::fclose(f);
  }
  CHECK_THROWS_WITH(load_chrome_trace(path), Catch::Contains(path) && Catch::Contains("not JSON"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(parse_chrome_trace(nlohmann::json::object(), "doc"),
                    Catch::Contains("no traceEvents"));
  const auto no_bytes = nlohmann::json::parse(
      R"({"traceEvents": [{"name": "allocated", "ph": "C", "ts": 1, "pid": 1, "args": {}}]})");
  CHECK_THROWS_WITH(parse_chrome_trace(no_bytes, "doc"), Catch::Contains("args.bytes"));
}
