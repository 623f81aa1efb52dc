// test_timeline.cpp: the simulator's timelines (dtr-sim run --timeline, DTR_TIMELINE,
// ReplayOptions::timeline) are structurally valid Chrome traces and agree with the replay.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtr/core/chrome_trace.h"
#include "dtr/sim/replay.h"
#include "test_support.h"

using namespace dtr;
using dtr::test::run_command;

namespace {

std::string sim() { return DTR_SIM_BIN; }
std::string small_log() { return std::string(DTR_TEST_DATA_DIR) + "/golden/small.log"; }
std::string temp_path(const std::string& stem) {
  return "/tmp/dtr_sim_timeline_" + stem + "_" + std::to_string(getpid()) + ".json";
}

bool has_number(const nlohmann::json& e, const char* key) {
  return e.contains(key) && e[key].is_number();
}

struct TraceCounts {
  size_t ops = 0, remats = 0, evictions = 0, allocated = 0, budget = 0;
  double end_us = 0;  // the end of the last op or remat
};

// Checks the structure the issue asks for; returns what it counted.
TraceCounts check_chrome_trace(const nlohmann::json& doc) {
  TraceCounts n;
  REQUIRE(doc.is_object());
  REQUIRE(doc.contains("traceEvents"));
  REQUIRE(doc["traceEvents"].is_array());
  CHECK(doc["displayTimeUnit"] == "ms");
  CHECK(doc["otherData"]["format"] == "dtr-timeline");

  std::map<int, std::string> thread_names;
  std::set<uint32_t> op_ids;           // args.op of the op spans
  std::vector<uint32_t> eviction_ops;  // args.op of the evictions
  std::map<std::string, double> last_counter_ts;
  std::set<int> op_tids, remat_tids;
  double run_begin = 1e300, run_end = -1e300;
  std::vector<std::pair<double, double>> remat_spans;
  double max_allocated = 0, budget = 1e300;
  for (const auto& e : doc["traceEvents"]) {
    INFO(e.dump());
    REQUIRE(e.is_object());
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("name"));
    REQUIRE(e.contains("pid"));
    const std::string ph = e["ph"];
    if (ph == "M") {
      REQUIRE(e["args"]["name"].is_string());
      if (e["name"] == "thread_name") thread_names[e["tid"].get<int>()] = e["args"]["name"];
    } else if (ph == "X") {
      REQUIRE(has_number(e, "ts"));
      REQUIRE(has_number(e, "dur"));
      REQUIRE(e.contains("tid"));
      CHECK(e["dur"].get<double>() >= 0);
      const double ts = e["ts"], end = ts + e["dur"].get<double>();
      if (e["cat"] == "remat") {
        ++n.remats;
        remat_tids.insert(e["tid"].get<int>());
        remat_spans.emplace_back(ts, end);
        run_end = std::max(run_end, end);  // the step's results may be remats after the last op
      } else {
        CHECK(e["cat"] == "op");
        ++n.ops;
        if (e.contains("args") && e["args"].contains("op"))
          op_ids.insert(e["args"]["op"].get<uint32_t>());
        op_tids.insert(e["tid"].get<int>());
        run_begin = std::min(run_begin, ts);
        run_end = std::max(run_end, end);
      }
    } else if (ph == "i") {
      REQUIRE(has_number(e, "ts"));
      REQUIRE(e.contains("tid"));
      REQUIRE(e.contains("s"));
      CHECK((e["s"] == "t" || e["s"] == "p" || e["s"] == "g"));
      if (e["cat"] == "eviction") {
        ++n.evictions;
        CHECK(e["args"]["bytes"].is_number_unsigned());
        REQUIRE(e["args"].contains("op"));  // the op that made the storage
        eviction_ops.push_back(e["args"]["op"].get<uint32_t>());
      }
    } else if (ph == "C") {
      REQUIRE(has_number(e, "ts"));
      REQUIRE(e["args"].is_object());
      REQUIRE_FALSE(e["args"].empty());
      for (const auto& [k, v] : e["args"].items()) CHECK(v.is_number());
      const std::string name = e["name"];
      const double ts = e["ts"];
      // Counters monotone in time, per counter name.
      if (last_counter_ts.count(name)) CHECK(ts >= last_counter_ts[name]);
      last_counter_ts[name] = ts;
      const double bytes = e["args"]["bytes"];
      if (name == "allocated") ++n.allocated, max_allocated = std::max(max_allocated, bytes);
      if (name == "budget") ++n.budget, budget = std::min(budget, bytes);
    } else {
      FAIL("unexpected phase " << ph);
    }
  }
  // Remats on their own track, named by metadata; every remat inside the run: after the
  // first op started, and before the end of the run, which callers check against the
  // replay's compute time.
  CHECK(thread_names.size() >= 3);
  for (uint32_t op : eviction_ops) CHECK(op_ids.count(op) == 1);  // an op that ran before
  for (int tid : remat_tids) {
    CHECK(op_tids.count(tid) == 0);
    CHECK(thread_names[tid] == "remat");
  }
  for (int tid : op_tids) CHECK(thread_names[tid] == "ops");
  for (const auto& [b, e] : remat_spans) {
    CHECK(b >= run_begin);
    CHECK(e <= run_end);
  }
  CHECK(max_allocated <= budget);
  n.end_us = run_end;
  return n;
}

}  // namespace

TEST_CASE("dtr-sim run --timeline on resnet32 at 0.5 is a valid Chrome trace", "[sim][timeline]") {
  const std::string log = test::log_path("resnet32");
  if (log.empty()) {
    WARN("skipping: no resnet32 log in " << DTR_LOG_DIR);
    return;
  }
  const std::string path = temp_path("resnet32");
  const auto r =
      run_command(sim() + " run --trace " + log + " --budget 0.5 --timeline " + path + " --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto result = nlohmann::json::parse(r.output);
  const auto doc = nlohmann::json::parse(test::read_file(path));
  std::remove(path.c_str());
  const TraceCounts n = check_chrome_trace(doc);
  CHECK(n.remats >= 1);
  CHECK(n.evictions >= 1);
  CHECK(n.allocated >= 1);
  CHECK(n.budget >= 1);
  CHECK(n.remats == result["remats"].get<size_t>());
  CHECK(n.evictions == result["evictions"].get<size_t>());
  CHECK(n.end_us * 1000.0 == Approx(result["compute_ns"].get<double>()));
  CHECK(doc["otherData"]["host"] == "dtr-sim");
  CHECK(doc["otherData"]["clock"] == "logical");
  CHECK(doc["otherData"]["truncated"] == false);
  CHECK(doc["otherData"]["replay"]["status"] == result["status"]);
}

TEST_CASE("DTR_TIMELINE is honoured; a sweep refuses it", "[sim][timeline]") {
  const std::string path = temp_path("env");
  const auto r = run_command("DTR_TIMELINE=" + path + " " + sim() + " run --trace " + small_log() +
                             " --budget 1400 --allocator none");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(test::read_file(path));
  std::remove(path.c_str());
  const TraceCounts n = check_chrome_trace(doc);
  CHECK(n.remats == 6);  // as test_dtr_sim_cli.cpp's run of the same trace and budget
  CHECK(n.end_us * 1000.0 == Approx(doc["otherData"]["replay"]["compute_ns"].get<double>()));
  const auto sweep =
      run_command("DTR_TIMELINE=" + path + " " + sim() + " sweep --quiet --trace " + small_log());
  CHECK(sweep.exit_code == 2);
  CHECK_THAT(sweep.output, Catch::Contains("dtr-sim run --timeline"));
}

TEST_CASE("a recorded replay is the same replay, and its timeline agrees with it",
          "[sim][timeline]") {
  const Trace trace = read_trace(small_log());
  Timeline base_timeline;
  const Baseline baseline = compute_baseline(trace, &base_timeline);
  CHECK(compute_baseline(trace).peak_bytes == baseline.peak_bytes);
  uint64_t base_peak = 0;
  for (const TimelineSample& s : base_timeline.allocated_samples())
    base_peak = std::max(base_peak, s.bytes);
  CHECK(base_peak == baseline.peak_bytes);
  CHECK(base_timeline.end_ns() == baseline.compute_ns);

  for (auto memory : {ReplayOptions::Memory::none, ReplayOptions::Memory::fake}) {
    ReplayOptions o;
    o.budget = Budget::parse("1400");
    o.memory = memory;
    o.max_overhead = 0;
    o.debug = 3;
    const ReplayResult plain = replay(trace, baseline, o);
    Timeline t;
    o.timeline = &t;
    const ReplayResult recorded = replay(trace, baseline, o);
    CHECK(recorded.stats.to_json() == plain.stats.to_json());
    CHECK(recorded.compute_ns == plain.compute_ns);
    size_t remats = 0;
    uint64_t peak = 0, end = 0;
    for (const TimelineSpan& s : t.spans()) {
      remats += s.remat;
      end = std::max(end, s.start_ns + s.dur_ns);
    }
    for (const TimelineSample& s : t.allocated_samples()) peak = std::max(peak, s.bytes);
    CHECK(remats == plain.stats.num_remats);
    CHECK(t.evictions().size() == plain.stats.num_evictions);
    CHECK(end == plain.compute_ns);
    CHECK(peak <= plain.budget_bytes);
    CHECK(peak <= plain.peak_bytes);
    CHECK(t.last_budget() == std::optional<uint64_t>(plain.budget_bytes));
  }
}

TEST_CASE("a timeline composes with a warm start", "[sim][timeline]") {
  const std::string plan_bin =
      sim().substr(0, sim().size() - std::string("dtr-sim").size()) + "dtr-plan";
  const std::string plan = temp_path("plan");
  const auto made = run_command(plan_bin + " --trace " + small_log() +
                                " --budget 0.8 --method chen --out " + plan);
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  const std::string run = sim() + " run --trace " + small_log() +
                          " --budget 0.8 --allocator none --json --plan " + plan;
  const auto cold = run_command(run);
  const std::string path = temp_path("warm");
  const auto warm = run_command(run + " --timeline " + path);
  std::remove(plan.c_str());
  REQUIRE(cold.exit_code == 0);
  REQUIRE(warm.exit_code == 0);
  auto a = nlohmann::json::parse(cold.output), b = nlohmann::json::parse(warm.output);
  for (const char* key :
       {"plan_drops", "evictions", "remats", "compute_ns", "peak_bytes", "status"})
    CHECK(a[key] == b[key]);
  CHECK(a["plan"] != "");
  check_chrome_trace(nlohmann::json::parse(test::read_file(path)));
  std::remove(path.c_str());
}
