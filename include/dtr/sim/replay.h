// replay.h: replaying a trace against the engine, with a logical clock.
//
// The simulator is a host of the engine like the torch integration is: it turns trace
// events into engine calls (Note [Trace to engine] in replay.cpp) and charges each op's
// recorded time to a LogicalClock. A baseline pass (unlimited memory, every storage freed
// at its last release, as DTR's simulator measures it) gives the peak that budget ratios
// refer to and the compute that overheads divide by.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "dtr/core/options.h"
#include "dtr/core/stats.h"
#include "dtr/core/status.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"

namespace dtr {

struct Baseline {
  uint64_t peak_bytes = 0;
  uint64_t compute_ns = 0;
};
Baseline compute_baseline(const Trace& trace);

struct ReplayOptions {
  Budget budget;  // ratio of the baseline peak, or bytes
  std::string policy = "dtr_eq";
  SearchMode search = SearchMode::full;
  uint32_t sample = 0;
  uint64_t seed = 0;
  double max_overhead = 2.0;  // 0: never give up
  uint32_t debug = 0;

  static ReplayOptions from_config(const Config& config);
};

struct ReplayResult {
  std::string trace;   // file name (no directory)
  std::string policy;
  std::string search;
  double budget_ratio = 0;  // budget / baseline peak
  uint64_t budget_bytes = 0;
  uint64_t baseline_peak_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t baseline_compute_ns = 0;
  uint64_t compute_ns = 0;  // model + remat compute until the end or the failure
  double overhead = 0;      // compute_ns / baseline_compute_ns
  Status status;
  std::string status_name;  // "ok", "oom", "thrash"
  Stats stats;
  double wall_seconds = 0;
};

ReplayResult replay(const Trace& trace, const Baseline& baseline, const ReplayOptions& options,
                    const HeuristicRegistry& registry = builtin_heuristics());

// The fields documented for `dtr-sim run --json`, in that order.
nlohmann::ordered_json to_json(const ReplayResult& result);

}  // namespace dtr
