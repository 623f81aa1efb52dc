// thrash_watch.cpp: the live run's thrash check (thrash_watch.h).
#include "dtr/eviction/thrash_watch.h"

#include <cstdio>

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

// Note [Thrashing in a live run]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At a budget just above what a program needs at once, the only storages left to evict
// can be ones the next ops need, and each remat evicts what the one after it needs: the
// chunked LSTM LM at 0.5 of its peak with dtr_eq took 40 000-120 000 remats and 39-170 s
// in some runs against 8.7 s without the library (docs/pytorch.md, "How low the budget
// goes"), and the run said nothing. A replay stops such a run (status `thrash`) once its
// compute passes max_overhead times the program's, which a replay knows in advance. A live
// run knows only what it has run, so the watch compares, since the budget was last set,
// the wall time of the remats (Stats::remat_measured_ns) with the program's own ops
// (Stats::model_compute_ns, what they took when the program ran them): it fires when the
// remats pass (max_overhead - 1) times the ops, that is when the run so far is more than
// max_overhead times as slow as its ops alone. Counting from the budget, not from the
// start of the process, keeps a long prologue without remats (loading data, a first
// epoch without a budget) from hiding a later collapse. A collapse after a long stretch
// under the same budget is still diluted by it: after an hour at 1.2x (50 minutes of ops,
// 10 of remats), a thrashing phase must spend about 40 minutes more on remats than on ops
// before the ratio passes 2. That is the price of a ratio over the whole run, which is
// what the run's total time depends on; a script that changes phase can call
// dtr.set_budget() to count from there.
//
// Two limits keep it quiet where nothing is wrong. Remats must have taken kMinRematNs (1
// s) in all: early on, one remat of a large op can be most of the run so far, and a
// script whose remats cost under a second has lost nothing worth a warning. And it fires
// once per budget: the message says what to try, and a run that catches the raised error
// (to save a checkpoint, or to lower its batch size and go on) must be able to run ops
// afterwards. dtr.set_budget() re-arms it.
//
// What the message suggests besides a larger budget comes from runs that thrashed here:
// policy msps passed the chunked LSTM LM at 0.5 of its peak in 42 runs of 42, where dtr_eq
// thrashed in some (docs/pytorch.md, "Where dtr_eq thrashes"); dead_first:True took the
// gradient-chain patterns (patterns.py two_losses, grad_penalty, hooks) lower, without
// warnings where dtr_eq warned. Neither is the default: msps is no better elsewhere, and
// dead_first doubled the remats of densenet121 at 0.5 (docs/pytorch.md, "Training-loop
// patterns").
//
// It never changes what the run computes: `warn` prints one line, `raise` throws
// PyTorch's out-of-memory error before the next op starts (nothing is then locked or half
// recorded), as an infeasible budget does.
void ThrashWatch::rearm(const Stats& now, uint64_t budget_bytes) {
  model_start_ns_ = now.model_compute_ns;
  remat_start_ns_ = now.remat_measured_ns;
  budget_bytes_ = budget_bytes;
  fired_ = false;
}

std::optional<std::string> ThrashWatch::check(const Stats& now) {
  if (fired_ || max_overhead_ <= 0.0) return std::nullopt;
  const uint64_t remat_ns = now.remat_measured_ns - remat_start_ns_;
  const uint64_t model_ns = now.model_compute_ns - model_start_ns_;
  if (remat_ns < kMinRematNs || double(remat_ns) <= (max_overhead_ - 1.0) * double(model_ns))
    return std::nullopt;
  fired_ = true;
  const double overhead = model_ns ? double(model_ns + remat_ns) / double(model_ns) : 0.0;
  char numbers[256];
  std::snprintf(numbers, sizeof numbers,
                "remats took %.1f s against %.1f s of the program's own ops (the run took "
                "%.2fx the time of its ops alone, over max_overhead %g)",
                double(remat_ns) * 1e-9, double(model_ns) * 1e-9, overhead, max_overhead_);
  const std::string budget =
      budget_bytes_ == kUnlimitedBytes ? std::string("no budget") : format_bytes(budget_bytes_);
  return std::string("dtr: thrashing: ") + numbers + " since the budget was set (" + budget +
         "). The budget is near the least this program needs at once, so each eviction "
         "forces another remat. Raise the budget, or try policy:msps (it scores by bytes "
         "freed per second of remat) or dead_first:True (it evicts what remats brought back "
         "first); on_thrash:raise makes this an out-of-memory error, "
         "max_overhead:0 turns the check off (Note [Thrashing in a live run])";
}

}  // namespace dtr
