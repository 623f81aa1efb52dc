// thrash_watch.cpp: the live run's thrash check (thrash_watch.h).
#include "dtr/eviction/thrash_watch.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/options.h"
#include "dtr/core/status.h"

namespace dtr {

ThrashAction parse_thrash_action(const std::string& text) {
  if (text == "warn") return ThrashAction::warn;
  if (text == "raise") return ThrashAction::raise;
  throw ConfigError("dtr: option on_thrash is '" + text +
                    "'; valid values: warn, raise (DTR_CONF on_thrash:raise)");
}

// Note [Room within remats]: where making room is most of the remats' time, the messages
// say where it went.
namespace {
bool mostly_search(uint64_t remat_ns, uint64_t room_ns) { return room_ns * 4 > remat_ns * 3; }
constexpr const char* kMostlySearch =
    ", and most of the remats' time went to searching for what to evict, as long chains of "
    "evicted storages lie around each candidate";
}  // namespace

// Note [Thrashing in a live run]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At a budget just above what a program needs at once, the only storages left to evict
// can be ones the next ops need, and each remat evicts what the one after it needs: the
// chunked LSTM LM at 0.5 of its peak with dtr_eq took 40 000-120 000 remats and 39-170 s
// in some runs against 8.7 s without the library (docs/pytorch.md, "How low the budget
// goes"), and the run said nothing. A replay stops such a run (status `thrash`) once its
// compute passes max_overhead times the program's, which a replay knows in advance. A live
// run knows only what it has run, so the watch compares the wall time of the remats
// (Stats::remat_measured_ns) with the program's own ops (Stats::model_compute_ns, what they
// took when the program ran them) over the run's recent past: it fires when the remats
// pass (max_overhead - 1) times the ops there, that is when that part of the run was more
// than max_overhead times as slow as its ops alone.
// The recent past starts where the budget was last set, so a long prologue without remats
// (loading data, a first epoch without a budget) cannot hide a later collapse. Under one
// budget it is at most the last two windows: a window closes after kWindowNs (60 s) of the
// program's ops, and the ratio is taken from the start of the window before the current
// one, over 60 to 120 s of ops and their remats. A ratio over the whole run, as this watch
// first took, is diluted by a long healthy stretch: after an hour at 1.2x (50 minutes of
// ops, 10 of remats), a thrashing phase had to spend about 40 minutes more on remats than
// on ops before it passed 2; with the windows it fires after 54-81 s of such remats (at
// 10 s of remats to 1 s of ops; tests/eviction/test_thrash_watch.cpp, where the collapse
// comes at three points of a window). A minute of ops is many steps of the models this
// library is for, so one step's backward pass, where remats gather, does not fill a
// window alone; a run shorter than one window is judged over all of it, as before.
//
// Two limits keep it quiet where nothing is wrong. Remats must have taken kMinRematNs (1
// s) over the span it looks at: early on, one remat of a large op can be most of the run
// so far, and a script whose remats cost under a second has lost nothing worth a warning.
// And it fires once per budget: the message says what to try, and a run that catches the
// raised error (to save a checkpoint, or to lower its batch size and go on) must be able
// to run ops afterwards. dtr.set_budget() re-arms it.
//
// What the message suggests besides a larger budget comes from runs that thrashed here,
// and only what the run does not already do: policy msps passed the chunked LSTM LM at 0.5
// of its peak in 42 runs of 42, where dtr_eq thrashed in some (docs/pytorch.md, "Where
// dtr_eq thrashes"), but is no better elsewhere, so it is not the default; dead_first:True
// took the gradient-chain patterns (patterns.py two_losses, grad_penalty, hooks) lower,
// without warnings where dtr_eq warned, and is the PyTorch host's default, so a live run
// is told of it only where it was turned off.
//
// It never changes what the run computes: `warn` prints one line, `raise` throws
// PyTorch's out-of-memory error before the next op starts (nothing is then locked or half
// recorded), as an infeasible budget does, or from an op whose inputs are cascading, once
// the engine has unwound the cascade (Note [Thrashing within one op] in
// integration/torch/lineage.cpp).
void ThrashWatch::rearm(const Stats& now, uint64_t budget_bytes) {
  from_ = current_ = Mark::of(now);
  budget_bytes_ = budget_bytes;
  windowed_ = false;
  fired_ = false;
}

void ThrashWatch::advance(const Stats& now) {
  if (now.model_compute_ns - current_.model_ns >= kWindowNs) {  // a window closes
    from_ = current_;
    current_ = Mark::of(now);
    windowed_ = true;
  }
}

std::optional<std::string> ThrashWatch::check(const Stats& now, const Heuristic* policy) {
  advance(now);  // also once fired: runaway() judges over the same span
  if (fired_ || max_overhead_ <= 0.0) return std::nullopt;
  const uint64_t remat_ns = now.remat_measured_ns - from_.remat_ns;
  const uint64_t model_ns = now.model_compute_ns - from_.model_ns;
  if (remat_ns < kMinRematNs || double(remat_ns) <= (max_overhead_ - 1.0) * double(model_ns))
    return std::nullopt;
  fired_ = true;
  const double overhead = model_ns ? double(model_ns + remat_ns) / double(model_ns) : 0.0;
  const uint64_t room = std::min(remat_ns, now.remat_room_ns - from_.room_ns);
  char numbers[448];
  const std::string budget =
      budget_bytes_ == kUnlimitedBytes ? std::string("no budget") : format_bytes(budget_bytes_);
  std::snprintf(numbers, sizeof numbers,
                "remats took %.1f s (%.1f s of it making room for them: searching, evicting) "
                "against %.1f s of the program's own ops %s (%s took %.2fx the time of its ops "
                "alone, over max_overhead %g; budget %s)",
                double(remat_ns) * 1e-9, double(room) * 1e-9, double(model_ns) * 1e-9,
                windowed_ ? "in the last stretch of the run" : "since the budget was set",
                windowed_ ? "that stretch" : "the run", overhead, max_overhead_, budget.c_str());
  std::string message = std::string("dtr: thrashing: ") + numbers +
                        ". The budget is near the least this program needs at once, so each "
                        "eviction forces another remat" +
                        (mostly_search(remat_ns, room) ? kMostlySearch : "") + ". ";
  message += advice(policy);
  message +=
      "; on_thrash:raise makes this an out-of-memory error, max_overhead:0 turns the "
      "check off (Note [Thrashing in a live run])";
  return message;
}

std::string ThrashWatch::advice(const Heuristic* policy) const {
  const std::vector<std::string> thrashed =
      policy ? policy->thrashed() : std::vector<std::string>{};
  const auto left = [&](const char* name) {
    return std::find(thrashed.begin(), thrashed.end(), name) != thrashed.end();
  };
  std::vector<std::string> tries;
  if (policy_ != "msps" && !left("msps"))
    tries.push_back("policy:msps (it scores by bytes freed per second of remat)");
  if (!dead_first_) tries.push_back("dead_first:True (it evicts what remats brought back first)");
  // Note [Storages remade again and again] in eviction/heuristics/dtr_eq_heuristic.cpp
  if ((policy_ == "dtr_eq" || policy_ == "auto") && remake_factor_ == 0)
    tries.push_back(
        "remake_factor:1 (dtr_eq keeps what it has dropped and remade again and again)");
  std::string advice;
  if (!thrashed.empty()) {  // auto's cut candidates (Note [Thrashing period])
    advice = policy_ + " has left ";
    for (size_t i = 0; i < thrashed.size(); ++i)
      advice += (i == 0 ? "" : i + 1 == thrashed.size() ? " and " : ", ") + thrashed[i];
    advice += " as thrashing. ";
  }
  advice += "Raise the budget";
  for (size_t i = 0; i < tries.size(); ++i) advice += (i == 0 ? ", or try " : " or ") + tries[i];
  return advice;
}

// Note [Runaway cascades]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The watch above warns by default, and the run goes on. That is right for a run that is
// slow, and wrong for one that will not end: 3 steps of a 2-layer LSTM and a
// bidirectional GRU with Adam and clip_grad_norm_ (3.4 s without the library) at 0.5 of
// their peak warned after 4 s, then sat for over 580 s in one op (a helper agent's probe,
// 2026-11-29): clip_grad_norm_'s mul_ on an evicted gradient, whose remat cascaded through
// the recurrent backward pass, each remat evicting what a later one needed, under every
// policy tried. Nothing was printed after the warning, and the program's own threads could
// not read dtr's stats (the cascade holds the engine's lock). So the remats one op's
// inputs take are counted from the op's start (mark_op), and once they pass kRunawayMinNs
// (10 s) and kRunawayFactor * max_overhead (10 at the default) times the program's own
// ops over the run's recent past (below), the op is stopped with PyTorch's out-of-memory
// error, under on_thrash:warn as well as raise: a run that has spent ten times its recent
// compute on one op's inputs is not going to finish in a time anyone waits for. The
// engine unwinds the cascade as for a raise (Note [Thrashing within one op] in
// integration/torch/lineage.cpp); the program can catch the error and go on. A cascade
// that is merely long, recomputing a forward pass for one gradient, costs about the
// program's compute once, far under the limit. max_overhead:0 turns this off with the
// rest of the watch.
//
// The program's ops are counted over the span the thrash check looks at (since the budget
// was set, at most the last one to two windows), not since the process started, as they
// first were: that limit grew with the run, so a cascade an hour into training would have
// been let run for ten hours, and ops run before any budget (a first epoch without one)
// raised it too. A window is a minute of ops or more, many steps of the models this library
// is for, so one cascade still gets ten minutes or more before it is stopped.
//
// Note [Room within remats]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A remat's measured time (Stats::remat_measured_ns) is its wall time, and that holds
// making room for what it allocates: collecting, the eviction search, the evictions (Note
// [Host work in op times] in integration/torch/lineage.cpp). In the runs that set the watch
// off that is most of it, and both messages used to call it all remats: the runaway script
// of tests/torch/test_thrash.py (2026-12-04, one thread) was stopped after 17.8 s with
// 14.7 s of remats measured, 6.1 s of them charged as compute, and 11.2 s making room; a
// 2000-layer residual MLP 64 wide at 0.6 of its peak (`mlp.py --width 64 --batch 48 --steps
// 3 --residual --depth 2000`, min_evictable:4K) under policy dtr was stopped after 48 s,
// with 24.2 s of remats measured, 15 ms charged, and 45.9 s making room in all (the eviction
// search: 94% of the samples in a perf profile). So the host also sums the part of each
// remat spent making room (Stats::remat_room_ns, dtr.remat_room_ns), and both messages give
// it. The watch still judges the whole wall time: a cascade costs the user its searches as
// much as its remats. Judging the remats less that part was tried: the runaway script then
// ran 157 s before it was stopped (14.1 s of remats in the op, 73.9 s making room for them).
// So was letting an op run on past the limit while its remats' own time stayed under 1 s
// and under the program's ops, up to 10 times the limit (the stop fires on ops whose remats
// are nearly all search: on the MLP above under dtr, 14.18 s of remats, 14.14 s of it
// making room, with the lists of Note [Neighbourhoods within one search]). The MLP then
// finished under dtr in 242 s instead of being stopped at 20 s, and under auto in 25 s
// instead of 14; but under msps it cascaded for 752 s (143 thousand evictions, 2.0 s of
// charged remat compute against 0.55 s of ops) before the stop at ten times the limit
// came. A cascade of small ops under a long search is mostly search too. Where making room
// is over three quarters of the remats' time, both messages add that most of it went to
// the search for what to evict.
std::optional<std::string> ThrashWatch::runaway(const Stats& now, const Heuristic* policy) {
  if (max_overhead_ <= 0.0) return std::nullopt;
  advance(now);
  // Note [Room within remats]: the remats' wall time, making room for them included.
  const uint64_t in_op = now.remat_measured_ns - op_mark_.remat_ns;
  const uint64_t room = std::min(in_op, now.remat_room_ns - op_mark_.room_ns);
  const uint64_t model_ns = now.model_compute_ns - from_.model_ns;
  const double limit =
      std::max(double(kRunawayMinNs), kRunawayFactor * max_overhead_ * double(model_ns));
  if (double(in_op) <= limit) return std::nullopt;
  mark_op(now);
  char numbers[384];
  std::snprintf(numbers, sizeof numbers,
                "the remats for one op's inputs have run %.1f s (%.1f s of it making room for "
                "them: searching, evicting), over %.0f times the %.1f s the program's own ops "
                "have taken %s, and had not ended",
                double(in_op) * 1e-9, double(room) * 1e-9, kRunawayFactor * max_overhead_,
                double(model_ns) * 1e-9,
                windowed_ ? "in the last stretch of the run" : "since the budget was set");
  const std::string budget =
      budget_bytes_ == kUnlimitedBytes ? std::string("no budget") : format_bytes(budget_bytes_);
  return std::string("dtr: runaway thrashing: ") + numbers + " (budget " + budget +
         "), so the op was stopped: each remat evicts what a later one needs" +
         (mostly_search(in_op, room) ? kMostlySearch : "") + ". " + advice(policy) +
         ". This stop comes under on_thrash:warn too; max_overhead:0 turns it off with the "
         "warning (Note [Runaway cascades])";
}

}  // namespace dtr
