// test_replay_snapshot.cpp: a replay's memory snapshot (sim/replay_snapshot.h). The files
// themselves are checked against Python and PyTorch's readers by test_snapshot_viz.py.
#include <catch2/catch.hpp>

#include <cstdio>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "dtr/allocator/fake_backend.h"
#include "dtr/core/options.h"
#include "dtr/sim/replay.h"
#include "dtr/sim/replay_snapshot.h"
#include "dtr/sim/synthetic_trace.h"

using namespace dtr;

TEST_CASE("snapshot options reach the replay, and need the fake allocator", "[sim][snapshot]") {
  Config config;
  config.set("snapshot", "x.pickle");
  config.set("snapshot_format", "list");
  config.set("snapshot_entries", "50");
  ReplayOptions o = ReplayOptions::from_config(config);
  CHECK(o.snapshot_path == "x.pickle");
  CHECK(o.snapshot_format == SnapshotFormat::list);
  CHECK(o.snapshot_entries == 50);
  CHECK_THROWS_AS(config.set("snapshot_format", "tree"), ConfigError);  // Note [Option choices]
  config.snapshot_format = "tree";  // set around the parser: the replay refuses it too
  CHECK_THROWS_AS(ReplayOptions::from_config(config), ConfigError);

  const Trace trace = make_linear_chain_trace(20, 4096, 10);
  const Baseline baseline = compute_baseline(trace);
  o.memory = ReplayOptions::Memory::none;
  o.budget = Budget::parse("0.5");
  try {
    replay(trace, baseline, o);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("use allocator host or fake") != std::string::npos);
  }
}

TEST_CASE("a replay's snapshot: parameters, activations, evictions and remats",
          "[sim][snapshot]") {
  const Trace trace = make_linear_chain_trace(40, 1 << 20, 10);
  const Baseline baseline = compute_baseline(trace);
  ReplayOptions o;
  o.budget = Budget::parse("0.4");
  o.debug = 3;
  o.snapshot_path = "test_replay_snapshot.pickle";
  const ReplayResult r = replay(trace, baseline, o);
  REQUIRE(r.status.ok());
  REQUIRE(r.stats.num_evictions > 0);
  std::FILE* f = std::fopen(o.snapshot_path.c_str(), "rb");
  REQUIRE(f != nullptr);
  unsigned char head[2] = {0, 0};
  CHECK(std::fread(head, 1, 2, f) == 2);
  std::fclose(f);
  CHECK(head[0] == 0x80);
  CHECK(head[1] == 4);
  std::remove(o.snapshot_path.c_str());

  // The same recording, in memory, through ReplaySnapshot on an engine of our own: a
  // device of 48 MiB, a 1 MiB constant and three 20 MiB activations (exact segments).
  constexpr uint64_t kMiB = 1 << 20;
  AllocatorConfig aconfig;
  aconfig.budget_bytes = aconfig.reserved_limit_bytes = 48 * kMiB;
  CachingAllocator allocator(aconfig, std::make_unique<FakeBackend>());
  LogicalClock clock(0);
  ReplaySnapshot snapshot(allocator, clock, 1000);
  EngineConfig config;
  config.budget_bytes = 48 * kMiB;
  EngineMemory memory{&allocator, true};
  nlohmann::ordered_json snap;
  {
    Engine engine(config, builtin_heuristics().make("dtr_eq", {}), clock, nullptr, memory);
    snapshot.bind(engine);
    TensorId w;
    REQUIRE(engine.constant(kMiB, w).ok());
    std::vector<TensorId> out;
    auto run = [&](TensorId input) {
      out.clear();
      REQUIRE(engine.call(10, {input}, {OutputSpec{20 * kMiB, -1}}, out).ok());
      return out[0];
    };
    const TensorId x = run(w);
    const TensorId y = run(x);
    run(y);                       // over the budget: evicts x
    REQUIRE(engine.pin(x).ok());  // x comes back: a remat (evicting another)
    snap = snapshot.finish(SnapshotFormat::dict, {{"trace", "hand-made"}});
  }
  std::multiset<std::string> seen;
  for (const auto& e : snap["device_traces"][0])
    seen.insert(e["action"].get<std::string>() + ":" + e["category"].get<std::string>());
  CHECK(seen.count("alloc:parameter") == 1);
  CHECK(seen.count("alloc:activation") == 3);
  CHECK(seen.count("free_completed:evicted") >= 1);
  CHECK(seen.count("alloc:remat") == 1);
  CHECK(snap["user_metadata"]["trace"] == "hand-made");
}
