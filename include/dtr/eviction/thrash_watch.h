// thrash_watch.h: tells a live run that its remats have come to cost more than its own ops.
//
// Near the least memory a program can run in, every eviction can force another remat: the
// run still finishes, but many times slower than without a budget, and nothing says why. A
// replay gives up once its compute passes option max_overhead times the program's (status
// `thrash`); a live run cannot give up, so the torch host asks this watch after each op and,
// the first time remats cost more than (max_overhead - 1) times the program's own ops over
// the run's recent past (since the budget was set, at most the last one to two windows of
// kWindowNs of ops), warns once or raises out-of-memory at the next op (option on_thrash).
// Note [Thrashing in a live run] in eviction/thrash_watch.cpp.
//
// Thread safety: none; the host calls it under its lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtr/core/stats.h"
#include "dtr/eviction/heuristic.h"

namespace dtr {

// Option on_thrash: what the torch host does when the watch fires.
enum class ThrashAction : uint8_t {
  warn,   // one line on stderr, the run goes on
  raise,  // out-of-memory (catchable) at the next op, once
};
// Either way a runaway cascade inside one op (Note [Runaway cascades]) raises.
ThrashAction parse_thrash_action(const std::string& text);  // throws ConfigError

class ThrashWatch {
 public:
  // Remats shorter than this in all are never called thrashing, whatever the ratio.
  static constexpr uint64_t kMinRematNs = 1'000'000'000;
  // The ratio is taken over the current window and the one before it; a window closes
  // after this much of the program's own ops (Note [Thrashing in a live run]).
  static constexpr uint64_t kWindowNs = 60'000'000'000;

  // max_overhead: option max_overhead (0 = never fire); policy, dead_first and
  // remake_factor: the run's options, so the message suggests only what the run does not
  // already do.
  ThrashWatch(double max_overhead, std::string policy, bool dead_first, double remake_factor)
      : max_overhead_(max_overhead),
        policy_(std::move(policy)),
        dead_first_(dead_first),
        remake_factor_(remake_factor) {}

  // Counts from these totals on, and may fire again (at start and when the budget changes).
  void rearm(const Stats& now, uint64_t budget_bytes);

  // After an op: the message, the first time since rearm() that the remats' measured time
  // over the last windows passes (max_overhead - 1) times the program's compute there;
  // nullopt otherwise. policy: the run's heuristic, if any; the message names the policies it
  // has seen thrash and left (Heuristic::thrashed(): `auto`'s cut candidates), and does
  // not suggest them. The same for runaway().
  std::optional<std::string> check(const Stats& now, const Heuristic* policy = nullptr);

  // Note [Runaway cascades]: an op starts (its inputs are about to be locked); the remats
  // from now on count as this op's.
  void mark_op(const Stats& now) { op_mark_ = Mark::of(now); }
  // Before each remat: the message when the remats since mark_op() (with the time they
  // spent making room: Note [Room within remats] in thrash_watch.cpp) have passed
  // max(kRunawayMinNs, kRunawayFactor * max_overhead * the program's compute over the span
  // check() looks at: since rearm(), at most the last one to two windows),
  // whatever on_thrash says; nullopt otherwise, and always with max_overhead 0. Firing
  // marks again, so a later cascade is judged on its own.
  std::optional<std::string> runaway(const Stats& now, const Heuristic* policy = nullptr);

  static constexpr uint64_t kRunawayMinNs = 10'000'000'000;
  static constexpr double kRunawayFactor = 5.0;

 private:
  struct Mark {
    uint64_t model_ns = 0;  // Stats::model_compute_ns then
    uint64_t remat_ns = 0;  // Stats::remat_measured_ns then
    uint64_t room_ns = 0;   // Stats::remat_room_ns then
    static Mark of(const Stats& s) {
      return {s.model_compute_ns, s.remat_measured_ns, s.remat_room_ns};
    }
  };
  double max_overhead_;
  std::string policy_;
  bool dead_first_;
  double remake_factor_;
  Mark from_;     // the ratio is taken from here: the previous window's start, or rearm()
  Mark current_;  // the current window's start
  uint64_t budget_bytes_ = 0;
  bool windowed_ = false;  // from_ is past rearm(): a window has closed since
  bool fired_ = false;
  Mark op_mark_;  // at mark_op(); its model_ns is not read

  void advance(const Stats& now);  // closes the current window once kWindowNs of ops passed
  // What to try, for both messages; policy as check() takes it.
  std::string advice(const Heuristic* policy) const;
};

}  // namespace dtr
