// clock.h: the runtime's notion of time, in ticks.
//
// The simulator uses a LogicalClock that the engine advances by each op's recorded
// compute cost, so a replay is deterministic. Real runs use SteadyClock (nanoseconds of
// std::chrono::steady_clock, never wall time). Staleness in heuristics is measured in
// ticks of whichever clock the Runtime owns.
#pragma once

#include <cstdint>

namespace dtr {

using Tick = uint64_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Tick now() const = 0;
  // Account for `ticks` of work done by the runtime (a logical clock moves; a real
  // clock ignores this, since real time passed by itself).
  virtual void advance(Tick ticks) = 0;
};

class LogicalClock final : public Clock {
 public:
  explicit LogicalClock(Tick start = 1) : now_(start) {}
  Tick now() const override { return now_; }
  void advance(Tick ticks) override { now_ += ticks; }

 private:
  Tick now_;
};

class SteadyClock final : public Clock {
 public:
  Tick now() const override;
  void advance(Tick) override {}
};

}  // namespace dtr
