// trial_replay.cpp: replays of the program so far for `auto`'s trial (trial_replay.h).
#include "dtr/sim/trial_replay.h"

#include <algorithm>

#include "dtr/sim/worker_pool.h"

namespace dtr {
namespace {

// Note [Trial by replay] in eviction/heuristics/auto_heuristic.cpp: a replay gives up once
// its remats pass twice the program's compute (overhead 3), so that a thrashing candidate
// costs the trial little; a live candidate is cut short at 4 times a period's compute
// (Note [Thrashing period]).
constexpr double kReplayMaxOverhead = 3.0;

}  // namespace

std::vector<ReplayedPeriod> replay_last_period(const Trace& trace, ReplayOptions options,
                                               uint64_t budget_bytes,
                                               const std::vector<std::string>& policies) {
  const size_t periods = size_t(std::count_if(
      trace.events.begin(), trace.events.end(), [](const TraceEvent& e) {
        return e.kind == TraceEventKind::annotate && e.op == "STEP";
      }));
  options.budget = Budget{Budget::Kind::bytes, budget_bytes, 0.0};
  options.max_overhead = kReplayMaxOverhead;
  options.trial_by_replay = false;  // the candidates are plain policies; no trial within
  options.timeline = nullptr;
  options.timeline_path.clear();
  options.snapshot_path.clear();
  options.plan_path.clear();
  options.plan_hints.reset();
  const Baseline baseline = compute_baseline(trace);
  std::vector<ReplayedPeriod> out(policies.size());
  // Each candidate's replay on a thread of its own, as many at once as the machine has
  // cores: the host's step waits for them (the chunked LSTM LM's two steps, four
  // candidates: 0.56 s one after another on this machine, against a 0.9 s step).
  run_on_workers(policies.size(), 0, [&](size_t i) {
    ReplayOptions o = options;
    o.policy = policies[i];
    const ReplayResult r = replay(trace, baseline, o);
    ReplayedPeriod& p = out[i];
    p.wall_seconds = r.wall_seconds;
    // The last period ended if the replay got past the trace's last STEP; a failure after
    // it (the trace's end pins what is still referenced) is not the period's.
    if (periods > 0 && r.periods.size() == periods)
      p.cost = r.periods.back();
    else
      p.failure = r.status.ok() ? "no period" : r.status_name;
  });
  return out;
}

}  // namespace dtr
