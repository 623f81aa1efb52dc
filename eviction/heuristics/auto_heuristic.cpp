// auto_heuristic.cpp: `auto`, which tries dtr_eq, dtr_ancestors and msps for one period of
// the program each and then runs the one whose periods cost the least (Note [Policy trial]).
//
// It scores with one candidate at a time and delegates every call to it, so a search under
// `auto` is the active candidate's search. The engine provides the union of the
// candidates' features from the start, so a switch finds its features up to date.
//
// Note [Policy trial]
// ~~~~~~~~~~~~~~~~~~~
// No policy is cheapest on every program: in replays of ten training traces at 0.3-0.7 of
// their peaks, dtr_eq, msps and dtr_ancestors each won somewhere and each thrashed
// somewhere (docs/simulator.md, "dtr_ancestors"), and live on this machine dtr_ancestors
// cut the transformer's remat time by a quarter while the chunked LSTM LM's steps took a
// third longer under it (docs/pytorch.md). A training loop repeats its step, so what a
// policy costs in one step is a fair guess of what it costs in the next. A host that knows
// where a step ends (the PyTorch host: each optimizer step) calls Engine::end_period
// there; `auto` then:
//   - lets the first period go by under dtr_eq (set-up, and optimizer state made on the
//     first step, are not what the run repeats);
//   - runs each candidate for the next period, in order, and records its ratio of charged
//     remat compute to model compute in that period (charged costs, not wall time: the
//     machine's drift between periods cancels in the ratio, and op times are the noisy
//     part of a wall clock, Note [Noisy op times] in eviction/op_costs.cpp);
//   - then keeps running the candidate whose periods cost the least on average, and goes
//     on measuring: the chosen candidate's later periods join its trial period in its
//     mean, so a choice made on one lucky period is undone once the candidate's mean
//     passes another's (ties: the earlier candidate, so dtr_eq where no period needed a
//     remat). One period is a small sample: in a replay of the chunked LSTM LM at 0.7 of
//     its peak, msps's trial period was the cheapest and msps then cost the run 1.325
//     against dtr_eq's 1.045 (docs/simulator.md, "Policy trial").
// A period in which the program asked for no compute (two optimizer steps back to back)
// measures nothing and does not count. A candidate's period also pays for some of what
// the one before it evicted; the boundary sits after the optimizer step, where the step's
// activations are dead, which keeps that small. A replay ends periods where the trace
// says `ANNOTATE STEP` (trace format 4, which the PyTorch host writes at the same points);
// without periods (DTR's logs, a script with no torch.optim optimizer) `auto` is dtr_eq
// throughout.
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {

HeuristicInfo (*const kCandidates[])() = {dtr_eq_heuristic_info, dtr_ancestors_heuristic_info,
                                          msps_heuristic_info};

class AutoHeuristic final : public Heuristic {
 public:
  explicit AutoHeuristic(const HeuristicParams& params) {
    for (auto info : kCandidates) {
      candidates_.push_back(info().make(params));
      needs_ |= candidates_.back()->needs();
    }
    measured_.resize(candidates_.size());
  }
  std::string_view name() const override { return "auto"; }
  uint32_t needs() const override { return needs_; }
  double score(const Engine& e, StorageId s) override { return active().score(e, s); }
  bool has_lower_bound() const override { return active().has_lower_bound(); }
  double lower_bound(const Engine& e, StorageId s) override { return active().lower_bound(e, s); }

  void on_period(const PeriodCost& cost) override {
    if (cost.model_compute_ns == 0) return;  // Note [Policy trial]
    if (!warmed_up_) {
      warmed_up_ = true;
      return;
    }
    const bool chosen = trial_over();  // before this period
    Measured& m = measured_[active_];
    m.sum += double(cost.remat_compute_ns) / double(cost.model_compute_ns);
    ++m.periods;
    if (!chosen && active_ + 1 < candidates_.size()) {
      ++active_;
      return;
    }
    size_t best = 0;
    for (size_t i = 1; i < measured_.size(); ++i)
      if (measured_[i].mean() < measured_[best].mean()) best = i;
    if (chosen && best != active_) ++switches_;  // a choice undone, not the trial's end
    active_ = best;
  }

  // "auto: msps (dtr_eq 0.131, dtr_ancestors 0.104, msps 0.098 over 12 steps)", "auto:
  // trying dtr_ancestors (dtr_eq 0.131)", or "auto: dtr_eq (no period yet)"; a choice
  // undone by later periods adds "; 1 switch".
  std::string status() const override {
    std::string trial;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const Measured& m = measured_[i];
      if (m.periods == 0) continue;  // not tried yet
      char ratio[64];
      std::snprintf(ratio, sizeof ratio, m.periods > 1 ? "%.3f over %llu steps" : "%.3f", m.mean(),
                    (unsigned long long)m.periods);
      trial += (trial.empty() ? "" : ", ") + std::string(candidates_[i]->name()) + " " + ratio;
    }
    std::string out = "auto: ";
    if (!trial_over() && warmed_up_) out += "trying ";
    out += std::string(active().name());
    if (switches_ > 0)
      trial += "; " + std::to_string(switches_) + (switches_ > 1 ? " switches" : " switch");
    out += trial.empty() ? " (no period yet)" : " (" + trial + ")";
    return out;
  }

 private:
  Heuristic& active() const { return *candidates_[active_]; }
  // The candidates are tried in order, so the trial is over once the last has a period.
  bool trial_over() const { return measured_.back().periods > 0; }

  std::vector<std::unique_ptr<Heuristic>> candidates_;
  // Each candidate's periods: the sum of their ratios of remat to model compute.
  struct Measured {
    double sum = 0;
    uint64_t periods = 0;
    double mean() const {
      return periods ? sum / double(periods) : std::numeric_limits<double>::infinity();
    }
  };
  std::vector<Measured> measured_;
  uint32_t needs_ = 0;
  size_t active_ = 0;
  bool warmed_up_ = false;
  uint64_t switches_ = 0;
};

}  // namespace

HeuristicInfo auto_heuristic_info() {
  uint32_t needs = 0;
  for (auto info : kCandidates) needs |= info().needs;
  return {"auto",
          "tries dtr_eq, dtr_ancestors and msps for one step each, then runs the one whose steps "
          "cost the least on average (steps: the PyTorch host's optimizer steps, ANNOTATE STEP in "
          "its traces; none: dtr_eq) (default)",
          needs,
          [](const HeuristicParams& params) { return std::make_unique<AutoHeuristic>(params); }};
}
}  // namespace dtr
