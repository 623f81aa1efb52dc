// trial_replay.h: `auto`'s trial by replay (Note [Trial by replay] in
// eviction/heuristics/auto_heuristic.cpp) for both hosts: the program so far, replayed under
// each candidate at the host's budget. The PyTorch host calls it on the trace it recorded
// of its first steps; a replay under `auto` on the part of its own trace played so far.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtr/core/trace.h"
#include "dtr/eviction/heuristic.h"
#include "dtr/sim/replay.h"

namespace dtr {

// Replays `trace`, which ends where its last period ends (at an ANNOTATE STEP), under each
// of `policies` at budget_bytes with `options` otherwise (the host's dead_first,
// keep_near_large, memory model and so on; its timeline, snapshot and plan are not used),
// and returns what the trace's last period cost under each, in order: a failure ("oom",
// "thrash", "no period") where the replay stopped before that period ended. The replays run
// side by side, on as many threads as the machine has cores (at most one a policy); an
// exception one throws is rethrown once all have ended.
std::vector<ReplayedPeriod> replay_last_period(const Trace& trace, ReplayOptions options,
                                               uint64_t budget_bytes,
                                               const std::vector<std::string>& policies);

}  // namespace dtr
