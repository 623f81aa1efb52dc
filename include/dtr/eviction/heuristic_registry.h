// heuristic_registry.h: every heuristic, reachable by name.
//
// The built-in registry is an immutable table (one line per heuristic in
// heuristic_registry.cpp; the heuristic itself is one file under eviction/heuristics/).
// Tests and tools may build their own registry value and add to it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtr/eviction/heuristic.h"

namespace dtr {

struct HeuristicInfo {
  std::string name;
  std::string summary;  // one line, for `dtr-sim policies`
  uint32_t needs = 0;
  std::function<std::unique_ptr<Heuristic>(const HeuristicParams&)> make;
};

class HeuristicRegistry {
 public:
  void add(HeuristicInfo info);  // replaces an entry of the same name
  const HeuristicInfo* find(const std::string& name) const;
  // find, or throws ConfigError naming the unknown policy and listing the known ones (a
  // policy option checked at start, where nothing is made yet: the PyTorch host, dtr-run).
  const HeuristicInfo& require(const std::string& name) const;
  // Throws ConfigError naming the unknown policy and listing the known ones.
  std::unique_ptr<Heuristic> make(const std::string& name, const HeuristicParams& params) const;
  const std::vector<HeuristicInfo>& entries() const { return entries_; }
  std::string names() const;  // "dtr, dtr_eq, ..."
  // The entries that need none of `features`, in table order (kFeatureAddressOrder: the
  // policies that run without an allocator).
  std::vector<std::string> names_without(uint32_t features) const;

 private:
  std::vector<HeuristicInfo> entries_;
};

// The registry of built-in heuristics (immutable; built on first use).
const HeuristicRegistry& builtin_heuristics();

// Option trial (policy auto): `replay` or `live`; throws ConfigError naming the valid values.
enum class TrialMode : uint8_t { replay, live };
TrialMode parse_trial_mode(const std::string& text);

// `inner` with every score searched in full (its score_up_to never called): the same
// choices, at the cost Note [Cutoff scores] in candidate_search.cpp saves; for the A/B of
// that search in tests/eviction/test_cutoff_scores.cpp and bench/bench_eviction.cpp.
std::unique_ptr<Heuristic> with_full_scores(std::unique_ptr<Heuristic> inner);

}  // namespace dtr
