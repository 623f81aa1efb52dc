// op_costs.h: what an op costs to run again, estimated from the runs of ops like it.
//
// A host that times each op once hands the engine that one measurement as the op's cost,
// and every heuristic scores it. On a busy machine one measurement is a poor estimate: a
// thread of the op's parallel region waits for a core (on this project's VM, one that
// OpenMP's spinning idle threads hold) and the op takes a scheduler slice longer (Note
// [Noisy op times] in eviction/op_costs.cpp). OpCosts keeps, per op
// signature (a hash the host makes of the operator and its arguments' shapes, dtypes and
// scalars), the last few measurements, and estimates the next run's cost as their median.
// The torch host, with option op_cost:median, passes the estimate as the op's remat cost
// (Note [Remat cost] in eviction/engine.cpp) and keeps the measurement as what the
// program's op took.
//
// Thread safety: none; the host calls it under its lock.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace dtr {

// Option op_cost: what the torch host scores as an op's remat cost.
enum class OpCostMode : uint8_t {
  measured,  // the op's own run time (DTR's prototype)
  median,    // OpCosts' estimate
};
OpCostMode parse_op_cost(const std::string& text);  // throws ConfigError

class OpCosts {
 public:
  static constexpr uint32_t kWindow = 5;  // measurements kept per signature

  // Records one measurement of an op of this signature and returns the estimate: the
  // lower median of the last kWindow measurements, this one included (the measurement
  // itself the first time a signature is seen).
  uint64_t observe(uint64_t signature, uint64_t ns);

  std::size_t signatures() const { return windows_.size(); }

 private:
  struct Window {
    std::array<uint64_t, kWindow> ns{};
    uint32_t count = 0;  // measurements seen; the newest is at (count - 1) % kWindow
  };
  std::unordered_map<uint64_t, Window> windows_;
};

}  // namespace dtr
