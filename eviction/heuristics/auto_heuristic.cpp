// auto_heuristic.cpp: `auto`, which tries dtr_eq, dtr_ancestors, msps and dtr_eq_keep, by
// replaying the program's first periods under each where its host can (Note [Trial by
// replay]) or else for one period of the program each, and then runs the one whose periods
// cost the least (Note [Policy trial]).
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
//   - runs each candidate for the next period, in order (dtr_eq_keep last: Note [Keeping as
//     a candidate] in dtr_eq_keep_heuristic.cpp), and records its ratio of charged
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
// throughout, unless it thrashes (Note [Thrashing period]).
//
// Note [Thrashing period]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A period is the unit of the trial, but one period under the wrong candidate can cost
// more than the rest of the run. A bidirectional GRU over packed sequences with SGD at 0.75
// of its peak (`gru_packed.py --optimizer sgd`; docs/pytorch.md, "A thrashing first step")
// spent its first step, the warm-up, under dtr_eq: 89 s live against 0.2 s without the
// library, and in a replay of that step 1875 times the step's own compute, where
// dtr_ancestors paid 6.4 and msps 12.1. That step has the run's longest sequences; the
// later steps took under 2 s under any candidate. So `auto` watches each remat
// (Heuristic::on_remat) and leaves the active candidate within the period once the remats
// since it took over pass kCutRatio times the program's compute, counted as the larger of
// the period's so far and the whole last period's (so a period's early remats are not
// judged against its first few ops), and at least kCutMinNs:
//   - the candidate's cut-short stretch counts as one of its periods, at that ratio;
//   - the next untried candidate takes over (after the trial: the one of least mean,
//     which stays the same one if the others did worse);
//   - the rest of the period is not measured, as it pays for what the candidate before
//     evicted, and each further cut within the same period needs twice the ratio of the
//     one before: with a single cut per period the next candidate could not be left
//     however it did, and with an equal ratio it was cut for the first one's mess (a
//     replay of the GRU at 0.7 with the cut at 8: dtr_ancestors was cut in the first step
//     too, 5.6 in all, against 3.8 with the doubling; dtr_ancestors alone 2.0).
// kCutRatio is 4, overhead 5 within one period: in replays of twelve training traces at
// 0.4-0.8 of their peaks (docs/simulator.md, "Thrashing period"), no replay that stayed
// under overhead 2 changed, and the GRU at 0.7 went from 282 to 2.4 (3.8 with the cut at
// 8).
// The remats are the charged ones, or the host's measured time of its remats and of making
// room (PeriodCost::host_ns: the eviction searches) where that is more. A cascade of small
// ops is mostly search: on a 2000-layer residual MLP 64 wide at 0.6 of its peak
// (2026-12-06) msps cascaded live with 1 s of charged remats and 166 s of searching, so
// the charged cut came late, and dtr_ancestors, which took over amid msps's evictions,
// cascaded until the runaway stop (Note [Runaway cascades] in eviction/thrash_watch.cpp),
// 3 minutes into a run that takes 4 s under dtr_eq. By the host's time both are cut within
// the step and dtr_eq finishes the run in 12 s. The means that choose stay charged.
//
// Note [Trial by replay]
// ~~~~~~~~~~~~~~~~~~~~~~
// The live trial pays for its losers: each candidate runs a whole period, so a run pays
// for up to three periods under candidates it will not keep (resnet18 at 0.55 of its peak:
// dtr_eq 0.61, dtr_ancestors 0.53 and msps 0.50 of the step's compute in remats, against
// dtr_eq_keep's 0.28), and a run of fewer than six periods never finishes it. But a period
// can be tried without being run: the simulator replays a recorded program under any
// policy, at the cost the policies score (charged op times, the measure of the live
// trial), in milliseconds (docs/pytorch.md, "Trial by replay"). So where the host can
// replay (HeuristicParams::trial_replay: the PyTorch host records its first periods as a
// trace, option trial:replay, the default; the simulator has its trace), `auto` asks at the
// end of the first period after the warm-up for the program from its start to there,
// replayed under each candidate at the run's budget, and runs the candidate whose replayed
// period cost the least from the next period on, without a live trial. Each candidate's
// replayed period counts as one of its periods, and later live periods join the mean of
// the one that ran them, as after the live trial, so a choice the live run disagrees with
// is still undone; a cut (Note [Thrashing period]) moves to the next best the same way. A
// candidate whose replay ran out of memory or gave up (past kReplayMaxOverhead in
// sim/trial_replay.cpp) has no period and is never chosen. Where the host cannot replay (no
// budget when the period ends, nothing recorded) or every replay failed, the live trial
// goes on from that period.
//
// Note [Switch floor]
// ~~~~~~~~~~~~~~~~~~~
// After the trial, `auto` leaves the candidate running (dtr_eq after a trial by replay,
// which ran the warm-up; the choice since, after that) only for one whose mean is lower by
// more than kSwitchFloor, a hundredth of the program's compute. Below that a switch saves
// under 1% of a step, while the replays cannot tell such candidates apart (they leave out
// the searches' time and op times' noise) and a candidate can behave live as its replay
// did not: on a 2000-layer residual MLP at 0.6 of its peak (docs/pytorch.md, "Cut by the
// host's time") the replays put the four within 0.003 of one another (0.037-0.040), and
// msps, chosen by a thousandth, then cascaded live. Without the floor, in 4 of 5 runs of
// it (3 steps) the replays or the first live step took `auto` off dtr_eq, and in one of
// them msps's live step cost 4.05 times the compute and was cut; with it, 2 runs of 3
// stayed on dtr_eq, and in the third dtr_eq's own step cascaded (cut at 4.0) and msps
// took over: that model cascades live under dtr_eq too, in about half the runs (Note
// [Live storages on dead lineage] in dtr_eq_heuristic.cpp). So the floor removes a coin
// toss, not the cascade. (Those runs took 9.5-10.8 s either way against 5.1-5.4 s under
// policy:dtr_eq: recording the steps for the replays was most of that, Note [Deaths in
// the trial's trace] in integration/torch/collector.cpp.) Replays of `auto` on 6-step
// traces of ten test scripts at 0.4-0.7 of their peaks (40 cells, 2026-12-06): the
// transformer at 0.6 went 1.0959 -> 1.0487, three cells moved by under 0.0003, the rest
// not at all; a floor of 0.02 or 0.05 cost resnet18 at 0.6-0.7 and adam_foreach at 0.6 up
// to 0.005. The choice at the end of a live trial (trial:live) has no incumbent and takes
// the least mean.
//
// Note [Trial after a budget change]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// What a period cost says what the next costs at the same budget only. A script that sets
// its budget after some steps (dtr.set_budget) had its trial run without one: every
// candidate's period cost nothing, dtr_eq was kept on the tie, and once the budget came
// each candidate's first costly periods were averaged with those zeros, so the choice went
// round the candidates (resnet18, 128x128, budget 107 MiB set after 4 of 14 steps: 9
// switches, 1.65 s a step under the budget against 1.57 s with it set from the start). So
// a change of budget (Engine::budget_changed; not the one set at start) starts the trial
// again: the measures, the cuts and any replayed choice are dropped, dtr_eq runs the rest
// of the period as a warm-up, and where the host can replay, the period after it is
// replayed as at the start (the PyTorch host records a trace from the change on: Note
// [Trial trace from a budget change] in integration/torch/recording.cpp).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {

HeuristicInfo (*const kCandidates[])() = {dtr_eq_heuristic_info, dtr_ancestors_heuristic_info,
                                          msps_heuristic_info, dtr_eq_keep_heuristic_info};

class AutoHeuristic final : public Heuristic {
 public:
  explicit AutoHeuristic(const HeuristicParams& params)
      : trial_replay_(params.trial_replay), replay_due_(static_cast<bool>(params.trial_replay)) {
    for (auto info : kCandidates) {
      candidates_.push_back(info().make(params));
      needs_ |= candidates_.back()->needs();
    }
    measured_.resize(candidates_.size());
    thrashed_.resize(candidates_.size());
  }
  std::string_view name() const override { return "auto"; }
  uint32_t needs() const override { return needs_; }
  double score(const Engine& e, StorageId s) override { return active().score(e, s); }
  double score_up_to(const Engine& e, StorageId s, double cutoff) override {
    return active().score_up_to(e, s, cutoff);
  }
  bool has_lower_bound() const override { return active().has_lower_bound(); }
  double lower_bound(const Engine& e, StorageId s) override { return active().lower_bound(e, s); }
  double keep_near_large() const override { return active().keep_near_large(); }

  void on_period(const PeriodCost& cost) override {
    // The engine's period counters restart, so a cut's mark goes whatever the period was.
    const bool cut = cut_at_.has_value();
    cut_at_.reset();
    cuts_in_period_ = 0;
    if (cost.model_compute_ns == 0) return;  // Note [Policy trial]
    last_period_model_ns_ = cost.model_compute_ns;
    if (!warmed_up_ || cut) {  // Note [Thrashing period]: the rest of a cut period
      warmed_up_ = true;
      return;
    }
    if (replay_due_ && !trial_over() && replay_trial()) return;  // Note [Trial by replay]
    const bool chosen = trial_over();  // before this period
    Measured& m = measured_[active_];
    m.sum += double(cost.remat_compute_ns) / double(cost.model_compute_ns);
    ++m.periods;
    move_on(chosen);
  }

  void on_remat(const PeriodCost& so_far) override {  // Note [Thrashing period]
    const PeriodCost from = cut_at_.value_or(PeriodCost{});
    // Charged remat compute, or the host's wall time where it is more (its searches).
    const uint64_t remat_ns = std::max(so_far.remat_compute_ns - from.remat_compute_ns,
                                       so_far.host_ns - std::min(from.host_ns, so_far.host_ns));
    if (remat_ns < kCutMinNs) return;
    const double ops_ns =
        double(std::max<uint64_t>({so_far.model_compute_ns, last_period_model_ns_, 1}));
    const double ratio = double(remat_ns) / ops_ns;
    if (ratio <= kCutRatio * double(uint64_t{1} << std::min(cuts_in_period_, 16u))) return;
    const bool chosen = trial_over();  // before this stretch
    Measured& m = measured_[active_];
    m.sum += ratio;
    ++m.periods;
    ++cuts_;
    ++cuts_in_period_;
    cut_at_ = so_far;
    warmed_up_ = true;
    thrashed_[active_] = true;
    move_on(chosen);
  }

  void on_budget_changed() override {  // Note [Trial after a budget change]
    measured_.assign(candidates_.size(), Measured{});
    thrashed_.assign(candidates_.size(), false);
    replayed_.clear();
    cut_at_.reset();
    cuts_in_period_ = 0;
    warmed_up_ = false;
    active_ = 0;
    replay_due_ = static_cast<bool>(trial_replay_);
    replay_failures_.clear();
    ++restarts_;
  }

  std::vector<std::string> thrashed() const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < candidates_.size(); ++i)
      if (thrashed_[i]) out.emplace_back(candidates_[i]->name());
    return out;
  }

  // "auto: msps (dtr_eq 0.131, dtr_ancestors 0.104, msps 0.098 over 12 steps)", "auto:
  // trying dtr_ancestors (dtr_eq 0.131)", or "auto: dtr_eq (no period yet)"; where every
  // replay failed, "; every replay failed: dtr_eq oom, ..." after the figures; a choice
  // undone by later periods adds "; 1 switch", a candidate left within a period "; 1
  // thrashing period cut short" (Note [Thrashing period]), a new budget "; trial started
  // again after 1 budget change" (Note [Trial after a budget change]).
  std::string status() const override {
    if (!replayed_.empty()) return replayed_status();
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
    const std::string failed =
        replay_failures_.empty() ? "" : "; every replay failed: " + replay_failures_;
    out += " (" + (trial.empty() ? std::string("no period yet") : trial) + failed + tallies() + ")";
    return out;
  }

  // After a trial by replay: "auto: dtr_eq_keep (by replay in 12 ms: dtr_eq 0.610,
  // dtr_ancestors 0.531, msps oom, dtr_eq_keep 0.283; then dtr_eq_keep 0.290 over 8 steps)";
  // the time is the replays' own, summed (the host may run them side by side).
  std::string replayed_status() const {
    double wall = 0;
    for (const ReplayedPeriod& p : replayed_) wall += p.wall_seconds;
    char took[64];
    std::snprintf(took, sizeof took, "%.0f ms", wall * 1e3);
    std::string out = "auto: " + std::string(active().name()) + " (by replay in " + took + ": ";
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const Measured& m = measured_[i];
      char figure[64];
      if (m.seeded)  // the replayed period's ratio
        std::snprintf(figure, sizeof figure, "%.3f", m.seed);
      else  // why it has none
        std::snprintf(figure, sizeof figure, "%s",
                      replayed_[i].failure.empty() ? "no compute" : replayed_[i].failure.c_str());
      out += (i ? ", " : "") + std::string(candidates_[i]->name()) + " " + figure;
    }
    std::string live;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const Measured& m = measured_[i];
      const uint64_t periods = m.periods - (m.seeded ? 1 : 0);
      if (periods == 0) continue;
      char ratio[64];
      std::snprintf(ratio, sizeof ratio, "%.3f over %llu step%s",
                    (m.sum - m.seed) / double(periods), (unsigned long long)periods,
                    periods > 1 ? "s" : "");
      live += (live.empty() ? "" : ", ") + std::string(candidates_[i]->name()) + " " + ratio;
    }
    if (!live.empty()) out += "; then " + live;
    return out + tallies() + ")";
  }

  // "; 1 switch; 2 thrashing periods cut short; trial started again after 1 budget change",
  // or what of it happened; "" for none.
  std::string tallies() const {
    std::string out;
    if (switches_ > 0)
      out += "; " + std::to_string(switches_) + (switches_ > 1 ? " switches" : " switch");
    if (cuts_ > 0)
      out += "; " + std::to_string(cuts_) +
             (cuts_ > 1 ? " thrashing periods cut short" : " thrashing period cut short");
    if (restarts_ > 0)
      out += "; trial started again after " + std::to_string(restarts_) +
             (restarts_ > 1 ? " budget changes" : " budget change");
    return out;
  }

 private:
  Heuristic& active() const { return *candidates_[active_]; }
  // After the active candidate's period (or cut-short stretch) was recorded: during the
  // trial the next candidate in order takes over; after it, the one of least mean (ties:
  // the earlier one), a switch if that undoes the choice, not if it ends the trial.
  void move_on(bool trial_was_over) {
    if (!trial_was_over && active_ + 1 < candidates_.size()) {
      ++active_;
      return;
    }
    const size_t best = least_mean(trial_was_over ? active_ : kNoIncumbent);
    if (trial_was_over && best != active_) ++switches_;
    active_ = best;
  }
  // The candidate of least mean (ties: the earlier one), but `incumbent`, where given, unless
  // that one is lower by more than kSwitchFloor (Note [Switch floor]).
  static constexpr size_t kNoIncumbent = SIZE_MAX;
  size_t least_mean(size_t incumbent) const {
    size_t best = 0;
    for (size_t i = 1; i < measured_.size(); ++i)
      if (measured_[i].mean() < measured_[best].mean()) best = i;
    if (incumbent != kNoIncumbent &&
        measured_[incumbent].mean() - measured_[best].mean() <= kSwitchFloor)
      return incumbent;
    return best;
  }
  // The candidates are tried in order, so the trial is over once the last has a period, or
  // once the replays gave them theirs.
  bool trial_over() const { return !replayed_.empty() || measured_.back().periods > 0; }

  // Note [Trial by replay]: asks the host once; true if its replays chose a candidate, which
  // is then the active one.
  bool replay_trial() {
    replay_due_ = false;
    std::vector<std::string> names;
    for (const auto& c : candidates_) names.emplace_back(c->name());
    std::vector<ReplayedPeriod> periods = trial_replay_(names);
    if (periods.size() != candidates_.size()) return false;
    std::vector<Measured> seeded(candidates_.size());
    bool any = false;
    for (size_t i = 0; i < periods.size(); ++i) {
      const ReplayedPeriod& p = periods[i];
      if (!p.failure.empty() || p.cost.model_compute_ns == 0) continue;
      Measured& m = seeded[i];
      m.seed = m.sum = double(p.cost.remat_compute_ns) / double(p.cost.model_compute_ns);
      m.periods = 1;
      m.seeded = true;
      any = true;
    }
    if (!any) {  // the live trial, saying why (Note [Trial by replay])
      replay_failures_.clear();
      for (size_t i = 0; i < periods.size(); ++i)
        replay_failures_ += (i ? ", " : "") + std::string(candidates_[i]->name()) + " " +
                            (periods[i].failure.empty() ? "no compute" : periods[i].failure);
      return false;
    }
    replayed_ = std::move(periods);
    measured_ = std::move(seeded);
    // Note [Switch floor]: dtr_eq ran the warm-up; another must beat it by the floor (a
    // dtr_eq whose replay failed has an infinite mean, so any other does).
    active_ = least_mean(/*incumbent=*/0);
    return true;
  }

  // Note [Thrashing period]: remats past this multiple of the program's compute, and
  // past kCutMinNs (charged), cut a candidate's period short; each further cut within the
  // same period needs twice the ratio.
  static constexpr double kCutRatio = 4.0;
  static constexpr uint64_t kCutMinNs = 100'000'000;
  // Note [Switch floor]: remat compute, as a fraction of the program's, that a candidate
  // must save against the one running before `auto` switches to it after the trial.
  static constexpr double kSwitchFloor = 0.01;

  std::vector<std::unique_ptr<Heuristic>> candidates_;
  // Each candidate's periods: the sum of their ratios of remat to model compute.
  struct Measured {
    double sum = 0;
    uint64_t periods = 0;
    double seed = 0;  // Note [Trial by replay]: the replayed period in sum and periods
    bool seeded = false;
    double mean() const {
      return periods ? sum / double(periods) : std::numeric_limits<double>::infinity();
    }
  };
  std::vector<Measured> measured_;
  std::vector<bool> thrashed_;  // by candidate: cut as thrashing (Note [Thrashing period])
  TrialReplay trial_replay_;    // Note [Trial by replay]
  bool replay_due_ = false;     // trial_replay_ set and not asked since the (re)start
  std::vector<ReplayedPeriod> replayed_;  // its replays' periods, by candidate; empty: none
  std::string replay_failures_;  // every replay failed: "dtr_eq oom, ..." (the live trial's)
  uint32_t needs_ = 0;
  size_t active_ = 0;
  bool warmed_up_ = false;
  uint64_t switches_ = 0;
  uint64_t cuts_ = 0;
  uint64_t restarts_ = 0;              // Note [Trial after a budget change]
  unsigned cuts_in_period_ = 0;        // each doubles the ratio the next cut in the period needs
  uint64_t last_period_model_ns_ = 0;  // the model compute of the last period with any
  std::optional<PeriodCost> cut_at_;   // the period so far when the active candidate took over
};

}  // namespace

HeuristicInfo auto_heuristic_info() {
  uint32_t needs = 0;
  for (auto info : kCandidates) needs |= info().needs;
  return {"auto",
          "tries dtr_eq, dtr_ancestors, msps and dtr_eq_keep by replaying the first two steps "
          "under each (option trial:replay) or for one step each (trial:live), then runs the one "
          "whose steps cost the least on average (steps: the PyTorch host's optimizer steps, "
          "ANNOTATE STEP in its traces; none: dtr_eq); leaves one within a step whose remats pass "
          "4x the program's compute (default)",
          needs,
          [](const HeuristicParams& params) { return std::make_unique<AutoHeuristic>(params); }};
}
}  // namespace dtr
