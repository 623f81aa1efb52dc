// timeline.h: a host-agnostic recorder of what a run did over time.
//
// A Timeline holds five kinds of records, each with timestamps the host passes in, in
// nanoseconds of the host's clock (the simulator: its LogicalClock, i.e. simulated compute
// ns; the torch integration: steady_clock ns):
//  - spans: one per op that ran (name, start, duration), `remat` when it was re-run;
//  - evictions: a storage the policy evicted (time, bytes, storage id);
//  - allocated samples: live bytes from this time on (a step function);
//  - budget samples: the budget from this time on (none = unlimited);
//  - compactions: live blocks moved so segments could go back under a reserved limit
//    (Note [Compaction] in allocator/caching_allocator.cpp): blocks, bytes, released.
// It knows nothing of engines or files: the Chrome trace writer and reader are in
// chrome_trace.h, the engine adapter in eviction/timeline_hooks.h.
//
// Invariants: names are interned (a span holds an index into names()); allocated samples
// are kept as given, except that a sample at the timestamp of the previous one replaces
// it and a sample repeating the previous value is dropped (Note [Sample coalescing]).
// Records need not come in time order (a host may record an op's span after the remats
// it caused); the writer sorts.
//
// Note [Timeline cap]
// ~~~~~~~~~~~~~~~~~~~
// Memory is bounded by `max_records` (default kDefaultMaxRecords, about 32 bytes each):
// spans, evictions and allocated samples together. Once the cap is reached later records
// are counted, not kept: the timeline keeps the start of a run, every kept record is
// exact, and truncated() says so (the Chrome trace carries it in `otherData.truncated`
// and a "timeline truncated" instant event at the last kept time). Budget samples,
// compactions and names are not capped (a budget changes rarely, a compaction comes only
// when a reserved limit refuses a segment, names are per distinct op name).
//
// Thread safety: none. One thread records at a time (the torch host records under its
// engine lock; the simulator is single-threaded per replay).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dtr {

struct TimelineSpan {
  uint64_t start_ns = 0;
  uint64_t dur_ns = 0;
  uint32_t name = 0;         // index into Timeline::names()
  uint32_t op = UINT32_MAX;  // the engine's OpId, if the host knows it
  bool remat = false;
};

struct TimelineEviction {
  uint64_t ts_ns = 0;
  uint64_t bytes = 0;
  uint32_t storage = UINT32_MAX;  // the engine's StorageId, if the host knows it
  uint32_t op = UINT32_MAX;       // the op that made it (as TimelineSpan::op), if known
};

struct TimelineCompaction {
  uint64_t ts_ns = 0;
  uint64_t blocks = 0;          // live blocks moved
  uint64_t moved_bytes = 0;     // the bytes they hold
  uint64_t released_bytes = 0;  // segment bytes given back
};

struct TimelineSample {
  uint64_t ts_ns = 0;
  uint64_t bytes = 0;
};

struct TimelineBudget {
  uint64_t ts_ns = 0;
  std::optional<uint64_t> bytes;  // nullopt: unlimited from here on
};

class Timeline {
 public:
  static constexpr size_t kDefaultMaxRecords = size_t{1} << 20;  // ~32 MiB of records

  explicit Timeline(size_t max_records = kDefaultMaxRecords) : max_records_(max_records) {}

  // --- recording (cheap: a push_back; names are interned once) ------------------------
  uint32_t intern(std::string_view name);
  void span(uint32_t name, uint64_t start_ns, uint64_t dur_ns, bool remat,
            uint32_t op = UINT32_MAX);
  void span(std::string_view name, uint64_t start_ns, uint64_t dur_ns, bool remat,
            uint32_t op = UINT32_MAX) {
    span(intern(name), start_ns, dur_ns, remat, op);
  }
  void eviction(uint64_t ts_ns, uint64_t bytes, uint32_t storage = UINT32_MAX,
                uint32_t op = UINT32_MAX);
  void allocated(uint64_t ts_ns, uint64_t bytes);  // Note [Sample coalescing]
  void budget(uint64_t ts_ns, std::optional<uint64_t> bytes);
  void compaction(uint64_t ts_ns, uint64_t blocks, uint64_t moved_bytes, uint64_t released_bytes) {
    compactions_.push_back(TimelineCompaction{ts_ns, blocks, moved_bytes, released_bytes});
  }

  // --- reading ----------------------------------------------------------------------------
  const std::vector<std::string>& names() const { return names_; }
  const std::string& name(uint32_t index) const { return names_[index]; }
  const std::vector<TimelineSpan>& spans() const { return spans_; }
  const std::vector<TimelineEviction>& evictions() const { return evictions_; }
  const std::vector<TimelineSample>& allocated_samples() const { return samples_; }
  const std::vector<TimelineBudget>& budget_samples() const { return budgets_; }
  const std::vector<TimelineCompaction>& compactions() const { return compactions_; }
  // The last budget recorded (nullopt: none recorded, or unlimited).
  std::optional<uint64_t> last_budget() const;

  // Earliest and latest time of any record (span ends included); 0 and 0 when empty.
  uint64_t origin_ns() const;
  uint64_t end_ns() const;

  size_t max_records() const { return max_records_; }
  size_t num_records() const { return spans_.size() + evictions_.size() + samples_.size(); }
  bool truncated() const { return dropped_ > 0; }
  uint64_t dropped_records() const { return dropped_; }  // spans, evictions, samples not kept
  // For readers that restore a timeline from a file: the count the file says was dropped.
  void add_dropped(uint64_t n) { dropped_ += n; }

 private:
  bool full() {
    if (num_records() < max_records_) return false;
    ++dropped_;
    return true;
  }

  size_t max_records_;
  uint64_t dropped_ = 0;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> name_index_;
  std::vector<TimelineSpan> spans_;
  std::vector<TimelineEviction> evictions_;
  std::vector<TimelineSample> samples_;
  std::vector<TimelineBudget> budgets_;
  std::vector<TimelineCompaction> compactions_;
};

}  // namespace dtr
