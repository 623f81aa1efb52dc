// test_replay.cpp: the simulator against hand-checked results, DTR's published numbers,
// random programs under invariant checks, and the sqrt(N) theory bound.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>

#include "dtr/allocator/memory_snapshot.h"
#include "dtr/core/chrome_trace.h"
#include "dtr/core/options.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"
#include "dtr/eviction/op_costs.h"
#include "dtr/eviction/thrash_watch.h"
#include "dtr/sim/replay.h"
#include "dtr/sim/sweep.h"
#include "dtr/sim/synthetic_trace.h"
#include "dtr/sim/trial_replay.h"
#include "sim/dtr_logs.h"
#include "test_support.h"

using namespace dtr;

namespace {

ReplayResult run(const Trace& trace, const std::string& policy, const std::string& budget,
                 uint32_t debug = 0, SearchMode search = SearchMode::full,
                 ReplayOptions::Memory memory = ReplayOptions::Memory::none) {
  ReplayOptions o;
  o.memory = memory;
  o.policy = policy;
  o.budget = Budget::parse(budget);
  o.debug = debug;
  o.search = search;
  return replay(trace, compute_baseline(trace), o);
}

// The trace lines of a one-result op `name` reading `arg` (`bytes`, `ns`), and of a release.
std::string call_line(const std::string& name, const std::string& arg, uint64_t bytes,
                      uint64_t ns) {
  return "{\"ARGS\":[\"" + arg + "\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"" + name +
         "\",\"RESULT\":[\"" + name + "\"],\"TIME\":" + std::to_string(ns) +
         "}\n{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"" + std::to_string(bytes) + "\",\"NAME\":\"" +
         name + "\"}\n{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" + name + "\"}\n";
}
std::string release_line(const std::string& name) {
  return "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"" + name + "\"}\n";
}

}  // namespace

TEST_CASE("golden: the small hand-written trace", "[sim][golden]") {
  const Trace trace = read_trace(std::string(DTR_TEST_DATA_DIR) + "/golden/small.log");
  const Baseline b = compute_baseline(trace);
  // Constants 200 B; conv 400, relu 400, linear 200, ones 200, then linear_backward's 500
  // and relu_backward's 400 with gc and c gone: 200+400+400+500-200+400-... peaks at 1900.
  CHECK(b.peak_bytes == 1900);
  CHECK(b.compute_ns == 232);  // 40+10+1+30+1+60+10+80

  SECTION("unlimited: nothing evicted but the 7 dead storages") {
    ReplayResult r = run(trace, "dtr_eq", "2000", 3);
    CHECK(r.status.ok());
    CHECK(r.overhead == 1.0);
    CHECK(r.stats.num_evictions == 0);
    CHECK(r.stats.num_eager_evictions == 7);
    CHECK(r.peak_bytes == 1900);
  }
  SECTION("1400 B: gw is evicted and recomputed through a six-op chain at the end") {
    // a and gw make room for the backward ops; at the end gw is still referenced but
    // evicted, and its lineage (conv, relu, view, linear, ones_like, linear_backward) was
    // evicted with it: 40+10+1+30+1+60 = 142 ns of recompute.
    ReplayResult r = run(trace, "dtr_eq", "1400", 3);
    CHECK(r.status.ok());
    CHECK(r.peak_bytes == 1400);
    CHECK(r.stats.num_evictions == 4);
    CHECK(r.stats.num_remats == 6);
    CHECK(r.stats.remat_compute_ns == 142);
    CHECK(r.compute_ns == 374);
    CHECK(r.overhead == Approx(374.0 / 232.0));
  }
  SECTION("900 B: relu cannot run next to its locked input") {
    ReplayResult r = run(trace, "dtr_eq", "900", 3);
    CHECK(r.status.code == StatusCode::oom);
    CHECK(r.status.oom.requested_bytes == 400);
    CHECK(r.status.oom.pinned_bytes == 600);  // two constants and conv's output, locked
    CHECK(r.status.oom.evictable_bytes == 0);
    CHECK(r.peak_bytes == 600);
  }
}

namespace {
// DTR's simulator's overheads (../shared/data/dtr-logs/README.md); 0 = ">2x", -1 = not
// compared (a documented deviation).
struct Reference {
  const char* log;
  const char* policy;
  double overhead[8];  // budgets 0.2 .. 0.9
};
const Reference kReference[] = {
    {"resnet32", "dtr_eq", {1.332, 1.179, 1.140, 1.107, 1.074, 1.046, 1.025, 1.013}},
    {"resnet32", "dtr", {1.371, 1.178, 1.140, 1.107, 1.074, 1.046, 1.025, 1.013}},
    {"resnet32", "dtr_local", {0, 0, 0, 1.197, 1.133, 1.067, 1.041, 1.013}},
    {"resnet32", "lru", {0, 0, 0, 0, 1.130, 1.095, 1.067, 1.032}},
    {"resnet32", "size", {0, 0, 1.738, 1.452, 1.234, 1.092, 1.065, 1.030}},
    {"resnet32", "msps", {1.431, 1.209, 1.146, 1.106, 1.063, 1.037, 1.024, 1.013}},
    {"transformer", "dtr_eq", {1.545, 1.124, 1.091, 1.058, 1.044, 1.031, 1.020, 1.009}},
    {"transformer", "dtr", {1.352, 1.123, 1.083, 1.058, 1.044, 1.031, 1.020, 1.009}},
    {"transformer", "dtr_local", {1.642, 1.505, 1.161, 1.112, 1.060, 1.037, 1.022, 1.010}},
    {"transformer", "lru", {0, 0, 0, 0, 1.134, 1.098, 1.065, 1.033}},
    // Documented deviation (docs/simulator.md): at 0.3-0.7 our `size` row reads like the
    // published one shifted by a column (we get 1.135 1.080 1.066 1.053 1.046); not compared.
    {"transformer", "size", {0, -1, -1, -1, -1, -1, 1.028, 1.016}},
    {"transformer", "msps", {1.333, 1.113, 1.089, 1.067, 1.048, 1.035, 1.018, 1.009}},
    {"lstm", "dtr_eq", {1.550, 1.365, 1.159, 1.071, 1.042, 1.031, 1.027, 1.017}},
    {"lstm", "msps", {0, 1.382, 1.121, 1.071, 1.057, 1.041, 1.031, 1.023}},
};
}  // namespace

TEST_CASE("faithful to DTR's simulator on its own logs", "[sim][faithful]") {
  test::for_each_dtr_log([](const std::string& log, const Trace& trace, const Baseline& baseline) {
    for (const Reference& ref : kReference) {
      if (ref.log != log) continue;
      for (int i = 0; i < 8; ++i) {
        const double ratio = 0.2 + 0.1 * i;
        ReplayOptions o;
        o.memory = ReplayOptions::Memory::none;  // DTR's simulator counts bytes only
        o.dead_first = false;                    // simrd's choice (Note [Dead storages first])
        o.dead_lineage_factor = 1;  // simrd's h_DTR^eq (Note [Live storages on dead lineage])
        o.policy = ref.policy;
        o.budget.kind = Budget::Kind::ratio;
        o.budget.ratio = std::round(ratio * 10) / 10;
        const ReplayResult r = replay(trace, baseline, o);
        INFO(log << " " << ref.policy << " at " << o.budget.ratio << ": " << r.status_name << " "
                 << r.overhead << " (DTR: " << ref.overhead[i] << ")");
        if (ref.overhead[i] < 0) continue;
        if (ref.overhead[i] == 0) {
          CHECK(!r.status.ok());  // DTR's simulator failed or thrashed here
        } else {
          REQUIRE(r.status.ok());
          // Issue #2 asks for +-0.03 on dtr_eq, dtr and msps at 0.3-0.9; we hold every
          // published cell to it.
          CHECK(std::abs(r.overhead - ref.overhead[i]) <= 0.03);
        }
        CHECK(r.peak_bytes <= r.budget_bytes);
      }
    }
  });
}

namespace {
// Invariants are checked after every event (debug 3): the engine's, and with the fake
// allocator also the allocator's after every allocate and free; any violation aborts the
// test binary. The budget is checked by the engine (byte accounting) or the allocator.
// The seeds are split over four test cases so that ctest runs them side by side: as one
// case it took 441 s under ASan/UBSan (2026-12-01), alone at the end of `make test`.
// With `workspaces`, a third of the calls hold scratch while they run (Note [Op workspace]).
void stress_invariants(ReplayOptions::Memory memory, uint64_t first_seed, uint64_t last_seed,
                       bool workspaces = false) {
  const bool fake = memory == ReplayOptions::Memory::fake;
  const bool blocks = memory != ReplayOptions::Memory::none;  // fake or host
  for (uint64_t seed = first_seed; seed <= last_seed; ++seed) {
    Trace trace = make_random_trace(seed, 600, blocks ? 16384 : 1024);
    if (workspaces) add_random_workspaces(trace, seed, blocks ? 16384 : 1024);
    const Baseline baseline = compute_baseline(trace);
    REQUIRE(baseline.peak_bytes > 0);
    for (const char* policy :
         {"dtr_eq", "dtr", "dtr_local", "dtr_ancestors", "msps", "lru", "size", "random", "coop"}) {
      if (!blocks && std::string(policy) == "coop") continue;  // coop reads block addresses
      for (const char* budget : {"1.0", "0.7", "0.5", "0.35", "0.2"}) {
        for (SearchMode mode : {SearchMode::full, SearchMode::sample}) {
          ReplayOptions o;
          o.memory = memory;
          o.policy = policy;
          o.budget = Budget::parse(budget);
          o.debug = 3;
          o.search = mode;
          o.seed = seed;
          o.max_overhead = 0;
          const ReplayResult r = replay(trace, baseline, o);
          INFO("seed " << seed << " " << policy << " " << budget << " " << r.status_name << " "
                       << r.allocator);
          CHECK(r.peak_bytes <= r.budget_bytes);
          if (blocks) CHECK(r.peak_allocated_bytes <= r.budget_bytes);
          if (fake) CHECK(r.peak_reserved_bytes <= r.budget_bytes);
          // Note [Host device]: no size, so a request never fails for want of a block.
          if (!fake && blocks) CHECK(r.contiguous_failures == 0);
          CHECK(r.status.code != StatusCode::thrash);  // no limit set
          if (r.status.ok()) CHECK(r.overhead >= 1.0);
        }
      }
    }
  }
}
}  // namespace

TEST_CASE("stress: random programs keep every invariant at DTR_DEBUG=3, bytes, seeds 1-6",
          "[sim][stress]") {
  stress_invariants(ReplayOptions::Memory::none, 1, 6);
}
TEST_CASE("stress: random programs keep every invariant at DTR_DEBUG=3, bytes, seeds 7-12",
          "[sim][stress]") {
  stress_invariants(ReplayOptions::Memory::none, 7, 12);
}
TEST_CASE("stress: random programs keep every invariant at DTR_DEBUG=3, allocator, seeds 1-3",
          "[sim][stress]") {
  stress_invariants(ReplayOptions::Memory::fake, 1, 3);
}
TEST_CASE("stress: random programs keep every invariant at DTR_DEBUG=3, allocator, seeds 4-6",
          "[sim][stress]") {
  stress_invariants(ReplayOptions::Memory::fake, 4, 6);
}

TEST_CASE(
    "stress: random programs keep every invariant at DTR_DEBUG=3, host's allocator, seeds 1-2",
    "[sim][stress]") {
  stress_invariants(ReplayOptions::Memory::host, 1, 2, /*workspaces=*/true);
}

TEST_CASE("stress: random programs with op workspaces keep every invariant, bytes, seeds 1-4",
          "[sim][stress]") {
  stress_invariants(ReplayOptions::Memory::none, 1, 4, /*workspaces=*/true);
}
TEST_CASE("stress: random programs with op workspaces keep every invariant, allocator, seeds 1-2",
          "[sim][stress]") {
  stress_invariants(ReplayOptions::Memory::fake, 1, 2, /*workspaces=*/true);
}

TEST_CASE("stress: an unlimited budget reproduces the program exactly", "[sim][stress]") {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    const Trace trace = make_random_trace(seed, 2000);
    const ReplayResult r = run(trace, "dtr_eq", "0", 3);
    CHECK(r.status.ok());
    CHECK(r.overhead == 1.0);
    CHECK(r.stats.num_evictions == 0);
    CHECK(r.stats.num_remats == 0);
  }
}

TEST_CASE("a written trace replays exactly like the original", "[sim][trace]") {
  const Trace original = make_random_trace(7, 1500);
  std::stringstream buffer;
  write_trace(original, buffer);
  const Trace copy = read_trace(buffer, "copy.trace");
  for (const char* budget : {"0.6", "0.3"}) {
    const ReplayResult a = run(original, "dtr_eq", budget);
    const ReplayResult b = run(copy, "dtr_eq", budget);
    CHECK(a.status_name == b.status_name);
    CHECK(a.compute_ns == b.compute_ns);
    CHECK(a.peak_bytes == b.peak_bytes);
    CHECK(a.stats.num_evictions == b.stats.num_evictions);
  }
}

TEST_CASE("theory: dtr_eq on a linear chain with c*sqrt(N) memory does O(N) work", "[sim][theory]") {
  // Kirisame et al. (ICLR 2021), Theorem 3.1: for a linear feedforward network of N unit
  // ops, DTR with Omega(sqrt(N)) memory performs O(N) operations. So the overhead (total
  // ops / 2N+1 baseline ops) must stay bounded as N grows 16x.
  double overheads[3];
  const uint32_t sizes[3] = {100, 400, 1600};
  for (int i = 0; i < 3; ++i) {
    const uint32_t n = sizes[i];
    const Trace trace = make_linear_chain_trace(n);
    const Baseline b = compute_baseline(trace);
    CHECK(b.compute_ns == 2 * n + 1);
    ReplayOptions o;
    o.memory = ReplayOptions::Memory::none;  // unit sizes: the theorem counts bytes, not blocks
    o.policy = "dtr_eq";
    o.max_overhead = 0;
    o.budget.kind = Budget::Kind::bytes;
    o.budget.bytes = static_cast<uint64_t>(std::ceil(2.0 * std::sqrt(double(n)))) + 3;
    const ReplayResult r = replay(trace, b, o);
    INFO("N=" << n << " budget=" << o.budget.bytes << " overhead=" << r.overhead);
    REQUIRE(r.status.ok());
    CHECK(r.peak_bytes <= o.budget.bytes);
    overheads[i] = r.overhead;
  }
  INFO("overheads " << overheads[0] << " " << overheads[1] << " " << overheads[2]);
  CHECK(overheads[2] < 4.0);
  CHECK(overheads[2] <= overheads[0] * 1.5);
}

TEST_CASE("budget lists parse ranges and reject nonsense", "[sim]") {
  CHECK(parse_ratio_list("0.1:0.9:0.1").size() == 9);
  CHECK(parse_ratio_list("0.2,0.5") == std::vector<double>{0.2, 0.5});
  CHECK_THROWS_AS(parse_ratio_list("0.1:0.9"), ConfigError);
  CHECK_THROWS_AS(parse_ratio_list("abc"), ConfigError);
  CHECK_THROWS_AS(parse_ratio_list("1.5"), ConfigError);
}

TEST_CASE("budget lists refuse an empty item, in a sweep's and a bound's alike", "[sim]") {
  // Note [Empty items in a budget list] in sim/sweep.cpp.
  CHECK(split_budget_list("0.5,300M") == std::vector<std::string>{"0.5", "300M"});
  CHECK(split_budget_list("0.5").size() == 1);
  CHECK(split_budget_list("").empty());
  CHECK(split_budget_list(",").empty());  // the caller says the list names no budget
  auto error_of = [](const std::string& text) {
    try {
      split_budget_list(text);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("0.5,,0.3") ==
        "dtr: bad budget list '0.5,,0.3': item 2 is empty; drop the stray comma: 0.5,0.3");
  CHECK_THAT(error_of(",0.5"), Catch::Contains("item 1 is empty"));
  CHECK_THAT(error_of("0.5,"), Catch::Contains("item 2 is empty"));
  CHECK_THAT(error_of("0.5, ,0.3"), Catch::Contains("item 2 is empty"));
  try {
    parse_ratio_list("0.5,,0.3");
    FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("item 2 is empty"));
  }
  CHECK_THROWS_AS(parse_ratio_list(","), ConfigError);
}

TEST_CASE("DISCARD frees a pinned storage nothing reads again (trace format v2)",
          "[sim][trace][discard]") {
  // A pinned 1000 B storage (a gradient pinned at the optimizer step, say) is released and
  // then discarded, as the torch host's collector does; a later 1000 B op must fit a
  // 1500 B budget. Without the DISCARD the pinned bytes stay and the replay runs out.
  const std::string body =
      "{\"ANNOTATION\":\"START\",\"INSTRUCTION\":\"ANNOTATE\"}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"w\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"100\",\"NAME\":\"w\"}\n"
      "{\"ARGS\":[\"w\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"grad\",\"RESULT\":[\"g\"],\"TIME\":\"10\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"g\"}\n"
      "{\"ALIAS\":\"-1\",\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"g\"}\n"
      "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"g\"}\n"
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"g\"}\n";
  const std::string tail =
      "{\"ARGS\":[\"w\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"next\",\"RESULT\":[\"n\"],\"TIME\":\"10\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"n\"}\n"
      "{\"ALIAS\":\"-1\",\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"n\"}\n";
  const std::string header = "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":2}\n";
  std::istringstream with(header + body + "{\"INSTRUCTION\":\"DISCARD\",\"NAME\":\"g\"}\n" + tail);
  std::istringstream without(header + body + tail);
  const Trace discarded = read_trace(with, "with.trace");
  const Trace kept = read_trace(without, "without.trace");
  REQUIRE(discarded.events.size() == kept.events.size() + 1);

  // Written and read back, the DISCARD survives.
  std::stringstream again;
  write_trace(discarded, again);
  CHECK(again.str().find("{\"INSTRUCTION\":\"DISCARD\",\"NAME\":\"g\"}") != std::string::npos);
  CHECK(read_trace(again, "again.trace").events.size() == discarded.events.size());

  // The baseline frees at the last release either way: 1100 B.
  CHECK(compute_baseline(discarded).peak_bytes == 1100);
  const ReplayResult with_discard = run(discarded, "dtr_eq", "1500");
  CHECK(with_discard.status_name == "ok");
  CHECK(with_discard.stats.full_collects == 0);
  // Without it the replay collects g when nothing is left to evict, as the live host's
  // last-resort collect does (Note [Collecting dropped pins] in eviction/engine.cpp).
  const ReplayResult collected = run(kept, "dtr_eq", "1500", 3);
  CHECK(collected.status_name == "ok");
  CHECK(collected.stats.full_collects == 1);
  CHECK(collected.peak_bytes <= 1500);
  // ... unless a storage the program holds is made from g: its remat may read g.
  const std::string child =
      "{\"ARGS\":[\"g\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"use\",\"RESULT\":[\"u\"],\"TIME\":"
      "\"10\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"10\",\"NAME\":\"u\"}\n"
      "{\"ALIAS\":\"-1\",\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"u\"}\n";
  const std::string pinned_g = "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"g\"}\n";
  const std::string released_g = "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"g\"}\n";
  const std::string prefix = body.substr(0, body.find(pinned_g) + pinned_g.size());
  std::istringstream needed_in(header + prefix + child + released_g + tail);
  const Trace needed = read_trace(needed_in, "needed.trace");
  CHECK(run(needed, "dtr_eq", "1500", 3).status_name == "oom");
  // With the DISCARD after an engine's collect, the replay skips it (the storage is gone).
  std::istringstream late_in(header + body + tail +
                             "{\"INSTRUCTION\":\"DISCARD\",\"NAME\":\"g\"}\n");
  CHECK(run(read_trace(late_in, "late.trace"), "dtr_eq", "1500", 3).status_name == "ok");

  // DISCARD of a name never defined is a clear error.
  std::istringstream bad(header + "{\"INSTRUCTION\":\"DISCARD\",\"NAME\":\"zz\"}\n");
  CHECK_THROWS_WITH(read_trace(bad, "bad.trace"), Catch::Contains("zz"));
}

TEST_CASE("REMAT_TIME prices a remat, TIME the program's own run (Note [Remat cost])",
          "[sim][trace]") {
  // m (a mask, 600 ns to make, 90 ns to make again) is read after two 1000 B ops that
  // leave no room for it under 2100 B: it is evicted and rematerialized once.
  const auto trace_with = [](const std::string& remat) {
    std::istringstream text(
        "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":2}\n"
        "{\"ANNOTATION\":\"START\",\"INSTRUCTION\":\"ANNOTATE\"}\n"
        "{\"ARGS\":[],\"INSTRUCTION\":\"CALL\",\"NAME\":\"aten::bernoulli_\",\"RESULT\":[\"m\"]," +
        remat +
        "\"TIME\":600}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"m\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"m\"}\n"
        "{\"ARGS\":[],\"INSTRUCTION\":\"CALL\",\"NAME\":\"a\",\"RESULT\":[\"a\"],\"TIME\":10}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"a\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\"}\n"
        "{\"ARGS\":[\"a\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"b\",\"RESULT\":[\"b\"],\"TIME\":10}"
        "\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"b\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"b\"}\n"
        "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"a\"}\n"
        "{\"ARGS\":[\"m\",\"b\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"mul\",\"RESULT\":[\"y\"],"
        "\"TIME\":10}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"100\",\"NAME\":\"y\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"y\"}\n");
    return read_trace(text, "mask.trace");
  };
  const Trace cheap = trace_with("\"REMAT_TIME\":90,");
  const Trace dear = trace_with("");
  REQUIRE(cheap.events[1].remat_time_ns == 90);
  CHECK(compute_baseline(cheap).compute_ns == 630);
  const ReplayResult with = run(cheap, "dtr_eq", "2100");
  const ReplayResult without = run(dear, "dtr_eq", "2100");
  REQUIRE(with.status_name == "ok");
  REQUIRE(without.status_name == "ok");
  REQUIRE(with.stats.num_remats == 1);
  CHECK(with.stats.remat_compute_ns == 90);
  CHECK(without.stats.remat_compute_ns == 600);
  CHECK(with.stats.model_compute_ns == 630);
  CHECK(with.compute_ns == 720);
}

TEST_CASE("WORKSPACE is held while its op runs, in the baseline and the replay", "[sim][trace]") {
  // Note [Op workspace]: a and b (600 KiB each), then c on b with 600 KiB of scratch: 1800
  // KiB live with c, 2400 KiB while c runs. The fake device needs whole 2 MiB segments.
  const auto trace_with = [](const std::string& workspace) {
    std::istringstream text(
        "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":4}\n"
        "{\"ANNOTATION\":\"START\",\"INSTRUCTION\":\"ANNOTATE\"}\n"
        "{\"ARGS\":[],\"INSTRUCTION\":\"CALL\",\"NAME\":\"a\",\"RESULT\":[\"a\"],\"TIME\":10}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"614400\",\"NAME\":\"a\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\"}\n"
        "{\"ARGS\":[\"a\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"b\",\"RESULT\":[\"b\"],"
        "\"TIME\":10}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"614400\",\"NAME\":\"b\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"b\"}\n"
        "{\"ARGS\":[\"b\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"conv\",\"RESULT\":[\"c\"]," +
        workspace +
        "\"TIME\":10}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"614400\",\"NAME\":\"c\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"c\"}\n");
    return read_trace(text, "workspace.trace");
  };
  const Trace with = trace_with("\"WORKSPACE\":614400,");
  const Trace without = trace_with("");
  REQUIRE(with.events[3].workspace_bytes == 614400);
  CHECK(compute_baseline(with).peak_bytes == 4 * 614400);
  CHECK(compute_baseline(without).peak_bytes == 3 * 614400);
  // Under 2 MiB: without scratch nothing is evicted; with it, a goes while c runs.
  for (ReplayOptions::Memory memory : {ReplayOptions::Memory::none, ReplayOptions::Memory::fake}) {
    INFO("allocator " << (memory == ReplayOptions::Memory::none ? "none" : "fake"));
    const ReplayResult held = run(with, "dtr_eq", "2M", 3, SearchMode::full, memory);
    const ReplayResult free = run(without, "dtr_eq", "2M", 3, SearchMode::full, memory);
    REQUIRE(held.status_name == "ok");
    REQUIRE(free.status_name == "ok");
    CHECK(held.stats.num_evictions == 1);
    CHECK(free.stats.num_evictions == 0);
    CHECK(held.peak_bytes <= 2 * 1024 * 1024);
  }
}

TEST_CASE("lazy_release keeps a released storage for the next remat (Note [Lazy release])",
          "[sim][lazy]") {
  // a (1 unit) -> m (1) -> b (4) fill the budget of 6 units, and c (1) evicts b (policy
  // `size`). The program drops c, a and m; then d reads b. simrd evicted a and m at their
  // release, so b's remat remakes a and m first; lazy_release kept them, so it remakes b
  // alone, and d's room comes from a and m, evicted unchosen at that eviction request.
  // Through the caching allocator (fake device) as with byte counting: a unit is 16 MiB,
  // above the 10 MiB from which PyTorch's allocator (and ours) makes exact-size segments.
  const uint64_t unit = 16ull << 20;
  const auto call = [&](const std::string& name, const std::string& args, int units, int ns) {
    return "{\"ARGS\":[" + args + "],\"INSTRUCTION\":\"CALL\",\"NAME\":\"" + name +
           "\",\"RESULT\":[\"" + name + "\"],\"TIME\":" + std::to_string(ns) +
           "}\n{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"" + std::to_string(units * unit) +
           "\",\"NAME\":\"" + name + "\"}\n{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" +
           name + "\"}\n";
  };
  std::istringstream text("{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":3}\n" +
                          call("a", "", 1, 100) + call("m", "\"a\"", 1, 100) +
                          call("b", "\"m\"", 4, 1) + call("c", "", 1, 100) +
                          "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"c\"}\n"
                          "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"a\"}\n"
                          "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"m\"}\n" +
                          call("d", "\"b\"", 1, 1));
  const Trace trace = read_trace(text, "lazy.trace");
  for (const auto memory : {ReplayOptions::Memory::none, ReplayOptions::Memory::fake}) {
    for (const bool lazy : {false, true}) {
      CAPTURE(memory == ReplayOptions::Memory::fake, lazy);
      ReplayOptions o;
      o.memory = memory;
      o.policy = "size";
      o.budget = Budget::parse(std::to_string(6 * unit));
      o.lazy_release = lazy;
      o.debug = 3;
      const ReplayResult r = replay(trace, compute_baseline(trace), o);
      REQUIRE(r.status_name == "ok");
      CHECK(r.stats.num_remats == (lazy ? 1 : 3));
      CHECK(r.stats.remat_compute_ns == (lazy ? 1 : 201));
      CHECK(r.stats.num_evictions == (lazy ? 1 : 2));  // b; simrd also chose a dead one
    }
  }
}

TEST_CASE("PIN WHEN_MATERIAL pins where material, else when next material (trace format v3)",
          "[sim][trace][pin]") {
  // Note [Pins when material] in sim/replay.cpp. g (300 B) is made from the input x (1000
  // B, pinned), which then dies; a and b leave no room for g under 2200 B, so it is evicted.
  // The host then pins g where material and discards x. `write` adds the PIN a live host
  // writes when an in-place op then reads g (Recording::write_pinned); c (1300 B) fits
  // only once x is gone.
  const auto trace_with = [](const std::string& pin, bool write) {
    std::istringstream text(
        "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":3}\n"
        "{\"ANNOTATION\":\"START\",\"INSTRUCTION\":\"ANNOTATE\"}\n"
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"x\"}\n"
        "{\"ARGS\":[\"x\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"grad\",\"RESULT\":[\"g\"],\"TIME\":"
        "1000}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"300\",\"NAME\":\"g\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"g\"}\n"
        "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"x\"}\n"
        "{\"ARGS\":[],\"INSTRUCTION\":\"CALL\",\"NAME\":\"a\",\"RESULT\":[\"a\"],\"TIME\":10}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"600\",\"NAME\":\"a\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"a\"}\n"
        "{\"ARGS\":[\"a\"],\"INSTRUCTION\":\"CALL\",\"NAME\":\"b\",\"RESULT\":[\"b\"],\"TIME\":10}"
        "\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"600\",\"NAME\":\"b\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"b\"}\n"
        "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"a\"}\n" +
        pin + "{\"INSTRUCTION\":\"DISCARD\",\"NAME\":\"x\"}\n" +
        (write ? "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"g\"}\n" : "") +
        "{\"ARGS\":[],\"INSTRUCTION\":\"CALL\",\"NAME\":\"c\",\"RESULT\":[\"c\"],\"TIME\":10}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1300\",\"NAME\":\"c\"}\n"
        "{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"c\"}\n");
    return read_trace(text, "pins.trace");
  };
  const std::string soft = "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"g\",\"WHEN_MATERIAL\":true}\n";
  const std::string hard = "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"g\"}\n";
  const Trace soft_write = trace_with(soft, true);
  REQUIRE(soft_write.events[7].kind == TraceEventKind::pin_when_material);
  REQUIRE(soft_write.events[9].kind == TraceEventKind::pin);

  // Written and read back, the flag survives.
  std::stringstream again;
  write_trace(soft_write, again);
  CHECK(again.str().find(soft) != std::string::npos);
  CHECK(read_trace(again, "again.trace").events[7].kind == TraceEventKind::pin_when_material);

  // The soft pin remakes nothing; x stays while g may need it, and c does not fit.
  const ReplayResult waiting = run(trace_with(soft, false), "dtr_eq", "2200", 3);
  CHECK(waiting.status_name == "oom");
  CHECK(waiting.stats.num_remats == 0);
  // The write refills g through x; then x is discarded and c fits.
  const ReplayResult written = run(soft_write, "dtr_eq", "2200", 3);
  CHECK(written.status_name == "ok");
  CHECK(written.stats.num_remats == 1);
  // A plain PIN remakes g at once.
  const ReplayResult pinned = run(trace_with(hard, false), "dtr_eq", "2200", 3);
  CHECK(pinned.status_name == "ok");
  CHECK(pinned.stats.num_remats == 1);

  // WHEN_MATERIAL is true or false, nothing else.
  std::istringstream bad(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":3}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"1000\",\"NAME\":\"x\"}\n"
      "{\"INSTRUCTION\":\"PIN\",\"NAME\":\"x\",\"WHEN_MATERIAL\":\"yes\"}\n");
  CHECK_THROWS_WITH(read_trace(bad, "bad.trace"), Catch::Contains("WHEN_MATERIAL"));
}

TEST_CASE("reserved_limit sizes the fake device, and storages move before evictions",
          "[sim][compaction]") {
  // Note [Compaction in the engine]. x (64 KiB, a constant) makes a (16 MiB, dies), y (20
  // MiB, dies) and b (2 MiB, lives, in y's segment); c (3 MiB) takes a's 16 MiB segment, so
  // b alone keeps a 20 MiB one; d (30 MiB) then needs that segment back on a 64 MiB device:
  // 38 MiB reserved + 30. (y makes the 20 MiB segment under the host's reserved limit too,
  // where b alone would get one of 2 MiB: Note [Segments under a reserved limit].)
  const auto call = [](const std::string& name, const std::string& args, uint64_t bytes) {
    return "{\"ARGS\":[" + args + "],\"INSTRUCTION\":\"CALL\",\"NAME\":\"" + name +
           "\",\"RESULT\":[\"" + name +
           "\"],\"TIME\":1000}\n{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"" + std::to_string(bytes) +
           "\",\"NAME\":\"" + name + "\"}\n{\"ALIAS\":-1,\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" +
           name + "\"}\n";
  };
  const uint64_t mib = 1 << 20;
  std::istringstream text(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":3}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"65536\",\"NAME\":\"x\"}\n" +
      call("a", "\"x\"", 16 * mib) + call("y", "\"x\"", 20 * mib) +
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"y\"}\n" + call("b", "\"x\"", 2 * mib) +
      "{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"a\"}\n" + call("c", "\"b\"", 3 * mib) +
      call("d", "\"c\"", 30 * mib) + call("e", "\"b\"", 1024));
  const Trace trace = read_trace(text, "moves.trace");
  const Baseline baseline = compute_baseline(trace);
  const auto replay_of = [](const Trace& t, const Baseline& b, const std::string& budget,
                            const std::string& conf) {
    Config config;
    config.set("budget", budget);
    config.set("debug", "3");
    if (!conf.empty()) config.apply_conf(conf);
    return replay(t, b, ReplayOptions::from_config(config));
  };
  const auto replay_with = [&](const std::string& conf) {
    return replay_of(trace, baseline, "64M", conf);
  };
  // Without reserved_limit the device is the budget's 64 MiB and models a GPU: b is
  // evicted for contiguity and made again when e reads it; nothing moves.
  const ReplayResult gpu = replay_with("");
  REQUIRE(gpu.status_name == "ok");
  CHECK(gpu.reserved_limit_bytes == 64 * mib);
  CHECK(gpu.allocator_stats.num_block_moves == 0);
  CHECK(gpu.stats.num_evictions == 1);
  CHECK(gpu.stats.num_remats == 1);
  // allocator:host (Note [Host device]) is the PyTorch CPU host without a reserved limit:
  // the budget caps allocated bytes only, so d takes a segment of its own (16 + 20 + 30 MiB
  // reserved, over the budget; x's 64 KiB and e's 1 KiB are small blocks of their own, as
  // the host's mimalloc heap serves them) and nothing is evicted or moved; coop has its
  // addresses.
  for (const char* policy : {"dtr_eq", "coop"}) {
    INFO(policy);
    const ReplayResult cpu = replay_with(std::string("allocator:host,policy:") + policy);
    REQUIRE(cpu.status_name == "ok");
    CHECK(cpu.allocator == "host");
    CHECK(cpu.reserved_limit_bytes == 0);
    CHECK(to_json(cpu).at("reserved_limit_bytes") == 0);
    CHECK(cpu.stats.num_evictions == 0);
    CHECK(cpu.allocator_stats.num_block_moves == 0);
    CHECK(cpu.peak_reserved_bytes == 66 * mib + 65536 + 1024);
    CHECK(cpu.peak_allocated_bytes <= 64 * mib);
  }
  // Under a reserved limit the two models are one, the host's under its limit.
  {
    const ReplayResult limited = replay_with("allocator:host,reserved_limit:64M");
    REQUIRE(limited.status_name == "ok");
    CHECK(limited.reserved_limit_bytes == 64 * mib);
    CHECK(limited.allocator_stats.num_block_moves == 1);
    CHECK(limited.stats.num_evictions == 0);
  }
  // With the host's reserved limit, b moves into a's old segment and nothing is evicted.
  {
    const ReplayResult host = replay_with("reserved_limit:64M");
    REQUIRE(host.status_name == "ok");
    CHECK(host.allocator_stats.num_block_moves == 1);
    CHECK(host.allocator_stats.moved_bytes == 2 * mib);
    CHECK(host.stats.num_evictions == 0);
    CHECK(host.stats.num_remats == 0);
    CHECK(host.peak_reserved_bytes <= host.reserved_limit_bytes);
    CHECK(to_json(host).at("reserved_limit_bytes") == host.reserved_limit_bytes);
  }
  // A timeline of the replay marks the compaction: b (2 MiB) moved, Y (20 MiB) went back.
  {
    const std::string path =
        (std::filesystem::temp_directory_path() / "dtr-test-replay-moves.json").string();
    REQUIRE(replay_with("reserved_limit:64M,timeline:" + path).status_name == "ok");
    const Timeline timeline = load_chrome_trace(path);
    std::filesystem::remove(path);
    REQUIRE(timeline.compactions().size() == 1);
    CHECK(timeline.compactions()[0].blocks == 1);
    CHECK(timeline.compactions()[0].moved_bytes == 2 * mib);
    CHECK(timeline.compactions()[0].released_bytes == 20 * mib);
  }
  // The same with a memory snapshot recorded, which attaches its own eviction callback:
  // the moves are in it as an alloc at the new address and a free at the old.
  {
    const std::string path =
        (std::filesystem::temp_directory_path() / "dtr-test-replay-moves.pickle").string();
    const ReplayResult host = replay_with("reserved_limit:64M,snapshot:" + path);
    REQUIRE(host.status_name == "ok");
    CHECK(host.allocator_stats.num_block_moves == 1);
    CHECK(host.stats.num_evictions == 0);
    std::filesystem::remove(path);
  }
  // A ratio refers to the baseline peak, as the budget's does.
  CHECK(replay_with("reserved_limit:0.99").reserved_limit_bytes ==
        Budget::parse("0.99").resolve(baseline.peak_bytes));
  // compact:False evicts, as the host does.
  const ReplayResult evict_only = replay_with("reserved_limit:64M,compact:False");
  REQUIRE(evict_only.status_name == "ok");
  CHECK(evict_only.allocator_stats.num_block_moves == 0);
  CHECK(evict_only.stats.num_evictions == 1);
  // Byte accounting has no segments to size.
  CHECK_THROWS_WITH(replay_with("reserved_limit:64M,allocator:none"),
                    Catch::Contains("reserved_limit") && Catch::Contains("allocator host"));

  // Note [Segments under a reserved limit]: under the host's limit each output of 2 and 3
  // MiB gets a segment of its size (2 + 4 MiB, and x's 64 KiB small block: Note [Host
  // device]); the default device, a GPU of the budget's 8 MiB, gives the first PyTorch's 20
  // MiB segment, which does not fit, and x a 2 MiB small segment.
  std::istringstream small_text(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":3}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"65536\",\"NAME\":\"x\"}\n" +
      call("a", "\"x\"", 2 * mib) + call("b", "\"a\"", 3 * mib));
  const Trace small = read_trace(small_text, "segments.trace");
  const Baseline small_baseline = compute_baseline(small);
  const ReplayResult exact = replay_of(small, small_baseline, "64M", "reserved_limit:8M");
  REQUIRE(exact.status_name == "ok");
  CHECK(exact.peak_reserved_bytes == 6 * mib + 65536);
  const ReplayResult gpu_small = replay_of(small, small_baseline, "8M", "");
  CHECK(gpu_small.status_name == "oom");
  CHECK(gpu_small.peak_reserved_bytes == 2 * mib);  // x's small segment
}

// Note [Late remat locks]. A trace of `tests/torch/scripts/patterns.py --pattern two_losses
// --steps 2` (DTR_TRACE, no budget, 2026-12-02): each weight's gradient is the sum of two,
// each remade through its own backward chain. Replayed as the PyTorch host runs (dead_first,
// lazy_release), dtr_eq ran out of memory at these budgets when a relaxed remat went on
// locking each new frame's parents on entry; with late locks it finishes, within the budget.
TEST_CASE("after a relaxation, remats lock late: two backward chains summed into one gradient",
          "[sim][relax]") {
  const Trace trace = read_trace(std::string(DTR_TEST_DATA_DIR) + "/replay/two_losses.trace");
  const Baseline baseline = compute_baseline(trace);
  for (const char* budget : {"0.7", "0.75"}) {
    for (const bool relax : {true, false}) {
      CAPTURE(budget, relax);
      ReplayOptions o;
      o.memory = ReplayOptions::Memory::none;
      o.policy = "dtr_eq";
      o.budget = Budget::parse(budget);
      o.dead_first = true;
      o.lazy_release = true;
      o.relax_locks = relax;
      o.max_overhead = 0;
      o.debug = 3;
      const ReplayResult r = replay(trace, baseline, o);
      if (!relax) {
        CHECK(r.status_name == "oom");
        continue;
      }
      REQUIRE(r.status_name == "ok");
      CHECK(r.stats.num_relaxed_remats > 0);
      CHECK(r.stats.num_remats > 0);
      CHECK(r.peak_bytes <= r.budget_bytes);
    }
  }
}

TEST_CASE("remake_factor keeps a storage the replay drops and remakes again and again",
          "[sim][heuristics]") {
  // Note [Storages remade again and again] in eviction/heuristics/dtr_eq_heuristic.cpp. p
  // (10 MiB, 0.5 ms) is read once a round by a small s_i; eleven k_j (1 MiB, 4 ms each)
  // are made once and read no more; each round first runs t_i (10 MiB, 1 ms, released at
  // once), which needs 10 MiB of room under the 22 MiB budget. Per byte p is 80 times
  // cheaper to lose than a k_j, and the k_j only grow staler, so simrd's dtr_eq drops p for
  // every t_i and remakes it for every s_i. With remake_factor 1, p costs 1 + (r - 2) times
  // more once remade r > 2 times, and the k_j go instead, which nothing remakes.
  const uint64_t mib = 1 << 20;
  const int rounds = 16, kept_once = 11;
  std::string text =
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":3}\n"
      "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
      "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"65536\",\"NAME\":\"x\"}\n" +
      call_line("p", "x", 10 * mib, 500'000);
  for (int j = 0; j < kept_once; ++j)
    text += call_line("k" + std::to_string(j), "x", mib, 4'000'000);
  for (int i = 0; i < rounds; ++i) {
    const std::string n = std::to_string(i);
    text += call_line("t" + n, "x", 10 * mib, 1'000'000) + release_line("t" + n) +
            call_line("s" + n, "p", 65536, 1000) + release_line("s" + n);
  }
  for (int j = 0; j < kept_once; ++j) text += release_line("k" + std::to_string(j));
  text += release_line("p");
  std::istringstream in(text);
  const Trace trace = read_trace(in, "remakes.trace");
  const Baseline baseline = compute_baseline(trace);
  const auto replay_with = [&](const std::string& factor) {
    Config config;
    config.apply_conf("budget:22M,policy:dtr_eq,allocator:none,debug:3,remake_factor:" + factor);
    return replay(trace, baseline, ReplayOptions::from_config(config));
  };
  const ReplayResult simrd = replay_with("0"), kept = replay_with("1");
  REQUIRE(simrd.status_name == "ok");
  REQUIRE(kept.status_name == "ok");
  CHECK(simrd.stats.num_remats == rounds);  // p, once a round
  INFO("remats with remake_factor 1: " << kept.stats.num_remats);
  CHECK(kept.stats.num_remats >= 3);  // the first two remakes are free
  CHECK(kept.stats.num_remats <= 5);
  CHECK(kept.stats.allocated_peak <= 22 * mib);
  CHECK(simrd.stats.allocated_peak <= 22 * mib);
}

TEST_CASE("keep_near_large keeps the small input a large result is remade from",
          "[sim][heuristics]") {
  // Note [Dropped inputs of large results] in eviction/engine.cpp. a (1 MiB, 100 ms) makes b
  // (512 KiB), which makes g (8 MiB, 1 ms), the gradient-like result the step reads at its
  // end; a and b die. 50 ms later h (10 MiB) needs room under 12 MiB, and g, the cheapest
  // per byte, goes. Read again by k: without the option b died with a, and g's remat reruns
  // A, B and G; with keep_near_large:8 the engine held b to the step's end and G alone
  // reruns. A b of 1 MiB is over the cap (a 16th of the budget, 768 KiB): not kept.
  const uint64_t kib = 1 << 10, mib = 1 << 20, ms = 1'000'000;
  const auto replay_with = [&](uint64_t b_bytes, const std::string& ratio) {
    const std::string text =
        "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":4}\n"
        "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x\"}\n"
        "{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"65536\",\"NAME\":\"x\"}\n" +
        call_line("a", "x", mib, 100 * ms) + call_line("b", "a", b_bytes, ms) + release_line("a") +
        call_line("g", "b", 8 * mib, ms) + release_line("b") + call_line("w", "x", 65536, 50 * ms) +
        release_line("w") + call_line("h", "x", 10 * mib, ms) + release_line("h") +
        call_line("k", "g", 65536, ms) + release_line("k") +
        "{\"ANNOTATION\":\"STEP\",\"INSTRUCTION\":\"ANNOTATE\"}\n" + release_line("g");
    std::istringstream in(text);
    const Trace trace = read_trace(in, "keep.trace");
    Config config;
    config.apply_conf("budget:12M,policy:dtr_eq,allocator:none,debug:3,keep_near_large:" + ratio);
    const ReplayResult r =
        replay(trace, compute_baseline(trace), ReplayOptions::from_config(config));
    REQUIRE(r.status_name == "ok");
    CHECK(r.stats.allocated_peak <= 12 * mib);
    return r;
  };
  const ReplayResult off = replay_with(512 * kib, "0"), kept = replay_with(512 * kib, "8"),
                     above = replay_with(512 * kib, "17"), capped = replay_with(mib, "8");
  CHECK(off.stats.num_kept_dropped == 0);
  CHECK(off.stats.remat_compute_ns == 102 * ms);  // A, B and G
  CHECK(kept.stats.num_kept_dropped == 1);        // b: g is 16 times it
  CHECK(kept.stats.remat_compute_ns == ms);       // G alone
  CHECK(above.stats.num_kept_dropped == 0);
  CHECK(above.stats.remat_compute_ns == 102 * ms);
  CHECK(capped.stats.num_kept_dropped == 0);  // 1 MiB: over a 16th of 12 MiB
  CHECK(capped.stats.remat_compute_ns == 102 * ms);
}

// Note [Trial by replay] in eviction/heuristics/auto_heuristic.cpp. A 2-step trace of
// resnet18 with its ops' scratch (tests/data/planner/resnet18_scratch.trace): the replays
// auto asks for at the second step's end give each candidate's second period as a replay of
// that candidate alone does, and auto runs the least of them.
TEST_CASE("auto's trial by replay: each candidate's replayed period, and the least chosen",
          "[sim][trial]") {
  const Trace trace =
      read_trace(std::string(DTR_TEST_DATA_DIR) + "/planner/resnet18_scratch.trace");
  const Baseline baseline = compute_baseline(trace);
  ReplayOptions o;
  o.memory = ReplayOptions::Memory::none;
  o.budget = Budget::parse("0.8");
  o.dead_first = true;
  o.lazy_release = true;
  o.max_overhead = 0;
  const uint64_t budget = o.budget.resolve(baseline.peak_bytes);
  const std::vector<std::string> names = {"dtr_eq", "dtr_ancestors", "msps", "dtr_eq_keep"};
  const std::vector<ReplayedPeriod> periods = replay_last_period(trace, o, budget, names);
  REQUIRE(periods.size() == names.size());
  size_t least = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    ReplayOptions alone = o;
    alone.policy = names[i];
    const ReplayResult r = replay(trace, baseline, alone);
    REQUIRE(r.status_name == "ok");
    REQUIRE(r.periods.size() == 2);
    CHECK(r.policy_status == names[i]);
    REQUIRE(periods[i].failure.empty());
    CHECK(periods[i].cost.model_compute_ns == r.periods[1].model_compute_ns);
    CHECK(periods[i].cost.remat_compute_ns == r.periods[1].remat_compute_ns);
    CHECK(periods[i].cost.num_remats == r.periods[1].num_remats);
    const auto ratio = [&](size_t k) {
      return double(periods[k].cost.remat_compute_ns) / double(periods[k].cost.model_compute_ns);
    };
    if (ratio(i) < ratio(least)) least = i;
  }
  CHECK(periods[0].cost.num_remats > 0);  // the budget binds
  o.policy = "auto";
  const ReplayResult chosen = replay(trace, baseline, o);
  REQUIRE(chosen.status_name == "ok");
  // ... unless it saves dtr_eq no more than a hundredth of the compute (Note [Switch floor]).
  const auto ratio = [&](size_t k) {
    return double(periods[k].cost.remat_compute_ns) / double(periods[k].cost.model_compute_ns);
  };
  const size_t expected = ratio(0) - ratio(least) > 0.01 ? least : 0;
  CHECK(chosen.policy_status.rfind("auto: " + names[expected] + " (by replay in ", 0) == 0);
  o.trial_by_replay = false;  // option trial:live: the live period was dtr_eq's trial period
  char dtr_eq_period[32];
  std::snprintf(
      dtr_eq_period, sizeof dtr_eq_period, "%.3f",
      double(periods[0].cost.remat_compute_ns) / double(periods[0].cost.model_compute_ns));
  CHECK(replay(trace, baseline, o).policy_status ==
        "auto: trying dtr_ancestors (dtr_eq " + std::string(dtr_eq_period) + ")");
  // A budget no replay fits under: every candidate's replay says why.
  for (const ReplayedPeriod& p : replay_last_period(trace, o, baseline.peak_bytes / 10, names))
    CHECK(p.failure == "oom");
}

TEST_CASE("every word an option's table row allows, its layer's parser takes", "[core][options]") {
  // Note [Option choices]: the words are checked where the option is set; each layer still
  // parses its own into an enum. The two lists must agree. (trace_constants' parser is the
  // PyTorch host's, tests/torch/test_trace.py.)
  const std::map<std::string, std::function<void(const std::string&)>> parsers = {
      {"trial", [](const std::string& w) { parse_trial_mode(w); }},
      {"search", [](const std::string& w) { parse_search_mode(w); }},
      {"on_thrash", [](const std::string& w) { parse_thrash_action(w); }},
      {"allocator", [](const std::string& w) { parse_memory_model(w); }},
      {"op_cost", [](const std::string& w) { parse_op_cost(w); }},
      {"snapshot_format", [](const std::string& w) { parse_snapshot_format(w); }},
  };
  size_t checked = 0;
  for (const OptionInfo& option : option_table()) {
    if (option.range.rfind("one of ", 0) != 0) continue;
    const auto parser = parsers.find(option.key);
    if (parser == parsers.end()) {
      CHECK(std::string(option.key) == "trace_constants");
      continue;
    }
    std::stringstream words(option.range.substr(7));
    for (std::string word; std::getline(words, word, ',');) {
      word.erase(0, word.find_first_not_of(' '));
      INFO(option.key << ": " << word);
      CHECK_NOTHROW(parser->second(word));
      ++checked;
    }
    CHECK_THROWS_AS(parser->second("nope"), ConfigError);
  }
  CHECK(checked == 13);
}
