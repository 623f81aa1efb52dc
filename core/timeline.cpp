// timeline.cpp: the Timeline recorder (include/dtr/core/timeline.h).
//
// Note [Sample coalescing]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Allocated samples describe a step function: `bytes` holds from `ts_ns` until the next
// sample. Two samples at one timestamp would draw a zero-width step, so a sample at the
// timestamp of the previous one replaces it (the later value is what holds from then on),
// and a sample that repeats the previous value adds nothing and is dropped. Both keep the
// record count proportional to the changes, not to the events: an eviction followed at
// the same instant by the op that needed the room leaves one sample, the value after the
// op's outputs were allocated. The peak of a run is therefore the peak of the values that
// held for some time, which is what a memory counter shows.
#include "dtr/core/timeline.h"

#include <algorithm>

namespace dtr {

uint32_t Timeline::intern(std::string_view name) {
  const std::string key(name);
  auto it = name_index_.find(key);
  if (it != name_index_.end()) return it->second;
  const auto index = static_cast<uint32_t>(names_.size());
  names_.push_back(key);
  name_index_.emplace(key, index);
  return index;
}

void Timeline::span(uint32_t name, uint64_t start_ns, uint64_t dur_ns, bool remat, uint32_t op) {
  if (full()) return;
  spans_.push_back(TimelineSpan{start_ns, dur_ns, name, op, remat});
}

void Timeline::eviction(uint64_t ts_ns, uint64_t bytes, uint32_t storage, uint32_t op) {
  if (full()) return;
  evictions_.push_back(TimelineEviction{ts_ns, bytes, storage, op});
}

void Timeline::allocated(uint64_t ts_ns, uint64_t bytes) {
  // Note [Sample coalescing].
  if (!samples_.empty()) {
    TimelineSample& last = samples_.back();
    if (last.ts_ns == ts_ns) {
      last.bytes = bytes;
      if (samples_.size() >= 2 && samples_[samples_.size() - 2].bytes == bytes) samples_.pop_back();
      return;
    }
    if (last.bytes == bytes) return;
  }
  if (full()) return;
  samples_.push_back(TimelineSample{ts_ns, bytes});
}

void Timeline::budget(uint64_t ts_ns, std::optional<uint64_t> bytes) {
  if (!budgets_.empty() && budgets_.back().bytes == bytes) return;
  budgets_.push_back(TimelineBudget{ts_ns, bytes});
}

std::optional<uint64_t> Timeline::last_budget() const {
  if (budgets_.empty()) return std::nullopt;
  return budgets_.back().bytes;
}

uint64_t Timeline::origin_ns() const {
  uint64_t t = UINT64_MAX;
  for (const TimelineSpan& s : spans_) t = std::min(t, s.start_ns);
  for (const TimelineEviction& e : evictions_) t = std::min(t, e.ts_ns);
  for (const TimelineSample& s : samples_) t = std::min(t, s.ts_ns);
  for (const TimelineBudget& b : budgets_) t = std::min(t, b.ts_ns);
  for (const TimelineCompaction& c : compactions_) t = std::min(t, c.ts_ns);
  return t == UINT64_MAX ? 0 : t;
}

uint64_t Timeline::end_ns() const {
  uint64_t t = 0;
  for (const TimelineSpan& s : spans_) t = std::max(t, s.start_ns + s.dur_ns);
  for (const TimelineEviction& e : evictions_) t = std::max(t, e.ts_ns);
  for (const TimelineSample& s : samples_) t = std::max(t, s.ts_ns);
  for (const TimelineBudget& b : budgets_) t = std::max(t, b.ts_ns);
  for (const TimelineCompaction& c : compactions_) t = std::max(t, c.ts_ns);
  return t;
}

}  // namespace dtr
