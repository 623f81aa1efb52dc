// heuristic.h: what an eviction heuristic is.
//
// A heuristic only scores: given a material, unlocked storage it returns a cost, and the
// engine evicts the storage of least cost (see candidate_search.h for how candidates are
// picked and ties broken). A heuristic declares the engine features it reads; the engine
// refuses, at construction, a heuristic that needs a feature it does not provide (for
// example address order without an allocator), so a mismatch never shows up as silently
// wrong scores.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtr {

class Engine;
using StorageId = uint32_t;

// Engine features a heuristic may read (bit flags).
enum Feature : uint32_t {
  kFeatureStaleness = 1u << 0,     // ticks since the storage was last accessed
  kFeatureNeighborhood = 1u << 1,  // exact evicted neighbourhoods (graph search per score)
  kFeatureEqClasses = 1u << 2,     // union-find classes of evicted storages, kept up to date
  kFeatureAddressOrder = 1u << 3,  // evictable blocks in address order (needs an allocator)
};

std::string feature_names(uint32_t features);  // "staleness, eq_classes"

// What one period of the program cost (Engine::end_period): the host marks periods, such as
// the PyTorch host at each optimizer step. Charged costs, not wall time (Note [Remat cost]
// in engine.cpp), so drift of the machine between periods cancels in the ratio; host_ns
// alone is wall time.
struct PeriodCost {
  uint64_t model_compute_ns = 0;  // the ops the program asked for, during the period
  uint64_t remat_compute_ns = 0;  // rematerializations during the period
  uint64_t num_remats = 0;
  // Wall time, where the host measures it (the PyTorch host; 0 in a replay): its remats and
  // its making room for the allocator, searches included (Note [Thrashing period] in
  // eviction/heuristics/auto_heuristic.cpp).
  uint64_t host_ns = 0;
};

class Heuristic {
 public:
  virtual ~Heuristic() = default;
  virtual std::string_view name() const = 0;
  virtual uint32_t needs() const = 0;
  // Cost of evicting `s`; lower is evicted first. May be +inf, never NaN.
  virtual double score(const Engine& engine, StorageId s) = 0;
  // Optional: score(), or any value above `cutoff` once the score is known to be above it.
  // The searches pass the best cost so far, so a heuristic whose score is a graph search
  // can stop it early (Note [Cutoff scores] in candidate_search.cpp).
  virtual double score_up_to(const Engine& engine, StorageId s, double cutoff) {
    return score(engine, s);
  }
  // Optional: a cheap value that score() never goes below. A full scan then scores in
  // order of bound and stops once the bound exceeds the best cost found, with the same
  // result as scoring everything (Note [Bounded full scan] in candidate_search.cpp).
  virtual bool has_lower_bound() const { return false; }
  virtual double lower_bound(const Engine& engine, StorageId s) { return 0.0; }
  // Optional: a period of the program ended (Engine::end_period). A heuristic that picks
  // its scoring by what periods cost (`auto`) listens; the others ignore it.
  virtual void on_period(const PeriodCost& cost) {}
  // Optional: a remat ran; `so_far` is what the current period has cost up to now
  // (Engine::period_cost). `auto` listens, to leave a candidate that thrashes.
  virtual void on_remat(const PeriodCost& so_far) {}
  // Optional: the host's budget changed (the PyTorch host's dtr.set_budget), so what the
  // periods cost before says little of what they cost now. `auto` starts its trial again
  // (Note [Trial after a budget change] in eviction/heuristics/auto_heuristic.cpp).
  virtual void on_budget_changed() {}
  // Optional: the ratio by which the engine keeps storages the program drops near larger
  // held ones (Note [Dropped inputs of large results] in engine.cpp) while this policy
  // scores; 0, none. Option keep_near_large, where set above 0, takes precedence.
  virtual double keep_near_large() const { return 0.0; }
  // What a report says the policy is: its name, or `auto`'s choice and trial.
  virtual std::string status() const { return std::string(name()); }
  // Policies this one has seen thrash and left (`auto`'s cut candidates), so that advice
  // does not suggest them; none for the others.
  virtual std::vector<std::string> thrashed() const { return {}; }
};

// What one candidate policy cost in a period its host replayed (Note [Trial by replay] in
// eviction/heuristics/auto_heuristic.cpp).
struct ReplayedPeriod {
  std::string failure;  // empty: the replay ran through the period; else why not ("oom", ...)
  PeriodCost cost;
  double wall_seconds = 0;  // what the replay took (replays may run side by side)
};
// Replays the program from its start to the end of the period that has just ended, under
// each of the named policies, at the host's budget, and returns what that last period cost
// under each, in order; an empty vector where the host cannot (no budget, nothing
// recorded). Called at most once, from Heuristic::on_period.
using TrialReplay =
    std::function<std::vector<ReplayedPeriod>(const std::vector<std::string>& policies)>;

struct HeuristicParams {
  uint64_t seed = 0;  // for heuristics with randomness
  // dtr_eq: option dead_lineage_factor (Note [Live storages on dead lineage] in
  // eviction/heuristics/dtr_eq_heuristic.cpp); 1 scores as simrd does.
  double dead_lineage_factor = 1;
  // dtr_eq: option remake_factor (Note [Storages remade again and again] in
  // eviction/heuristics/dtr_eq_heuristic.cpp); 0 scores as simrd does.
  double remake_factor = 0;
  // auto: how to replay its candidates (option trial: replay); empty, the live trial of
  // Note [Policy trial], one period per candidate.
  TrialReplay trial_replay;
};

}  // namespace dtr
