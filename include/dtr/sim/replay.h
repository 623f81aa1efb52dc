// replay.h: replaying a trace against the engine, with a logical clock.
//
// The simulator is a host of the engine like the torch integration is: it turns trace
// events into engine calls (Note [Trace to engine] in replay.cpp) and charges each op's
// recorded time to a LogicalClock. A baseline pass (unlimited memory, every storage freed
// at its last release, as DTR's simulator measures it) gives the peak that budget ratios
// refer to and the compute that overheads divide by.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dtr/allocator/allocator_stats.h"
#include "dtr/allocator/memory_snapshot.h"
#include "dtr/core/options.h"
#include "dtr/core/stats.h"
#include "dtr/core/status.h"
#include "dtr/core/timeline.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"
#include "dtr/eviction/plan_guide.h"

namespace dtr {

struct Baseline {
  uint64_t peak_bytes = 0;
  uint64_t compute_ns = 0;
};
// With `timeline`, also records the baseline's ops and allocated bytes on its logical
// clock (the sum of the recorded op times so far): the "baseline" of a memory picture.
Baseline compute_baseline(const Trace& trace, Timeline* timeline = nullptr);

struct ReplayOptions {
  Budget budget;  // ratio of the baseline peak, or bytes
  std::string policy = "auto";  // as the options table (Note [Policy trial])
  SearchMode search = SearchMode::full;
  uint32_t sample = 0;
  bool dead_first = false;  // option `dead_first`
  double dead_first_ratio = 16;  // option `dead_first_ratio`
  double dead_lineage_factor = 1;  // option `dead_lineage_factor`
  double remake_factor = 0;        // option `remake_factor`
  bool lazy_release = false;  // option `lazy_release`
  double keep_near_large = 0;  // option `keep_near_large`
  bool relax_locks = true;    // option `relax_locks`
  uint64_t seed = 0;
  // Option trial: `auto` chooses by replaying the trace so far under each candidate at each
  // period's end (Note [Trial by replay]; sim/trial_replay.h), or by the live trial.
  bool trial_by_replay = true;
  double max_overhead = 2.0;  // 0: never give up
  uint32_t debug = 0;
  // Memory model (option `allocator`): through the caching allocator over a fake device of
  // exactly the budget (Note [Fake device] in replay.cpp), through it over a fake device
  // with no size, as the PyTorch CPU host runs (`host`: the budget caps allocated bytes
  // only, Note [Host device] there), or byte accounting only.
  enum class Memory : uint8_t { fake, host, none };
  Memory memory = Memory::fake;
  bool through_allocator() const { return memory != Memory::none; }
  // Option `reserved_limit` (unlimited: the fake device holds the budget, or, for `host`,
  // has no size): the fake device's size instead, as the PyTorch host's reserved limit caps
  // its segments; a ratio refers to the baseline peak. Then option `compact` moves storages
  // as the host does (Note [Compaction in the engine] in eviction/engine.cpp). Needs the
  // allocator (fake or host; with it the two are the same).
  Budget reserved_limit;
  bool compact = true;
  // Warm start (option `plan`; eviction/plan_guide.h): the plan file, and the hints the
  // planner layer made from it for this trace (planner/warm_start.h, load_warm_start).
  // The simulator reads no plan files: a plan_path without hints is a ConfigError.
  std::string plan_path;
  std::shared_ptr<const PlanHints> plan_hints;
  // Timeline (option `timeline`; docs/observability.md): record the replay's ops,
  // remats, evictions, allocated bytes and budget on its LogicalClock (eviction/
  // timeline_hooks.h) into `timeline` (the caller's; must outlive replay(); never shared
  // by two replays at once), and/or write them as Chrome trace JSON to `timeline_path` at
  // the end (std::runtime_error naming the path if it cannot be written). Neither set:
  // no hooks, no cost.
  std::string timeline_path;
  Timeline* timeline = nullptr;

  // Memory snapshot (options `snapshot`, `snapshot_format`, `snapshot_entries`;
  // sim/replay_snapshot.h): at the end of the replay, also after an oom or thrash, write
  // the fake device's segments and its last snapshot_entries allocator events to
  // snapshot_path as a pickle PyTorch's memory tools read. Needs memory == fake
  // (ConfigError otherwise); std::runtime_error naming the path if it cannot be written.
  std::string snapshot_path;
  SnapshotFormat snapshot_format = SnapshotFormat::dict;
  uint32_t snapshot_entries = 100000;

  static ReplayOptions from_config(const Config& config);
};

struct ReplayResult {
  std::string trace;   // file name (no directory)
  std::string policy;
  std::string policy_status;  // Heuristic::status() at the end: `auto`'s trial and choice
  std::string search;
  double budget_ratio = 0;  // budget / baseline peak
  uint64_t budget_bytes = 0;
  uint64_t baseline_peak_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t baseline_compute_ns = 0;
  uint64_t compute_ns = 0;  // model + remat compute until the end or the failure
  double overhead = 0;      // compute_ns / baseline_compute_ns
  // What each period cost (Engine::period_cost at each ANNOTATE STEP), in order: the
  // periods that ended before the end or the failure.
  std::vector<PeriodCost> periods;
  Status status;
  std::string status_name;  // "ok", "oom", "thrash"
  Stats stats;
  // Through the allocator (memory fake or host); zero otherwise.
  std::string allocator;               // "fake", "host" or "none"
  uint64_t peak_allocated_bytes = 0;   // allocated_bytes.all.peak: block-rounded live bytes
  uint64_t peak_reserved_bytes = 0;    // reserved_bytes.all.peak: segments held
  uint64_t reserved_limit_bytes = 0;   // the device's size: budget or reserved_limit; 0: none
  double fragmentation = 0;            // mean free bytes in the budget / budget at evictions
  uint64_t contiguous_failures = 0;    // allocations that failed with enough free bytes
  AllocatorStats allocator_stats;      // the allocator's own counters at the end
  // Warm start: the hints' source ("" for a cold run) and, if the program departed from
  // the plan's graph, where (the guide then stopped). Drops: stats.num_plan_drops.
  std::string plan;
  std::string plan_departure;
  double wall_seconds = 0;
};

ReplayOptions::Memory parse_memory_model(const std::string& text);  // throws ConfigError

ReplayResult replay(const Trace& trace, const Baseline& baseline, const ReplayOptions& options,
                    const HeuristicRegistry& registry = builtin_heuristics());

// The fields documented for `dtr-sim run --json`, in that order.
nlohmann::ordered_json to_json(const ReplayResult& result);

}  // namespace dtr
