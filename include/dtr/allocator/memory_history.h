// memory_history.h: a recorder of the caching allocator's recent events, for snapshots.
//
// What it is. A MemoryHistory is an AllocatorObserver: attached with
// CachingAllocator::set_observer, it keeps the last `max_entries` AllocatorEvents in a
// ring (PyTorch's max_entries), each with a time (the host's Clock, in ticks: SteadyClock
// nanoseconds in real runs; the simulator's LogicalClock, nanoseconds of simulated
// compute) and a category saying what the memory was for: activation, parameter,
// evicted, remat or unknown. memory_snapshot (allocator/memory_snapshot.h) turns it,
// with the allocator's segments, into the file PyTorch's memory tools read.
//
// Categories are decided when an event is recorded (Note [Categories] in
// allocator/memory_history.cpp): a context the host sets around evictions and remats
// first, then the host's category function of the block's owner; a live block's category
// can be corrected later with set_category. Events the allocator does not know the
// purpose of (segments, oom) are `unknown`.
//
// Lock rules. on_allocator_event runs with the allocator's mutex held, and takes this
// recorder's own mutex (never the other way round: the recorder never calls the
// allocator), so readers (entries, category_of, set_category) may run on any thread. The
// category function is called with both mutexes held: it must be quick, must not call
// the allocator, and must not wait for a lock that is held while allocating. The context
// is per thread of the setter (Note [Context]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/clock.h"

namespace dtr {

enum class MemoryCategory : uint8_t {
  unknown,     // not said (segments, oom, blocks the host did not classify)
  activation,  // an op's output
  parameter,   // a constant or pinned leaf: parameters, inputs, buffers
  evicted,     // a free that was an eviction (the storage keeps its lineage)
  remat,       // an allocation made to rematerialize an evicted storage
};
const char* memory_category_name(MemoryCategory category);  // "activation", ...

// What the host is doing now, on its thread: evicting (frees become `evicted`) or
// rematerializing (allocations become `remat`).
enum class MemoryContext : uint8_t { none, evicting, remat };

struct MemoryHistoryEntry {
  AllocatorAction action = AllocatorAction::alloc;
  MemoryCategory category = MemoryCategory::unknown;
  bool small_path = false;  // AllocatorEvent::small_path
  uintptr_t addr = 0;
  uint64_t size = 0;             // AllocatorEvent::size
  uint64_t requested_bytes = 0;  // AllocatorEvent::requested_bytes
  uint64_t owner = 0;
  uint64_t free_bytes = 0;  // oom only
  Tick time = 0;            // the clock's ticks (ns) when recorded
};

class MemoryHistory final : public AllocatorObserver {
 public:
  // owner -> category of a new block; called at its alloc (see the lock rules above).
  using CategoryFn = std::function<MemoryCategory(uint64_t owner)>;

  // `clock` must outlive *this. max_entries 0 keeps no events (categories still tracked).
  MemoryHistory(const Clock& clock, size_t max_entries, CategoryFn category = {});

  void on_allocator_event(const AllocatorEvent& event) override;

  // Note [Context]: applies to events on the calling thread until changed.
  void set_context(MemoryContext context);
  MemoryContext context() const;
  // Sets a context for a scope and restores the previous one (contexts nest: an eviction
  // inside a remat).
  class ContextScope {
   public:
    ContextScope(MemoryHistory* history, MemoryContext context);  // history may be null
    ~ContextScope();
    ContextScope(const ContextScope&) = delete;
    ContextScope& operator=(const ContextScope&) = delete;

   private:
    MemoryHistory* history_;
    MemoryContext previous_context_;
    std::thread::id previous_thread_;
  };

  // The host learned what a live block is: its category from now on, and that of its
  // alloc entry if still in the ring. False when no live block starts at `addr`.
  bool set_category(uintptr_t addr, MemoryCategory category);
  // The category of the live block at `addr` (as recorded at its alloc); unknown if none.
  MemoryCategory category_of(uintptr_t addr) const;

  std::vector<MemoryHistoryEntry> entries() const;  // oldest first, at most max_entries
  uint64_t num_recorded() const;                    // every event seen, dropped ones too
  size_t max_entries() const { return max_entries_; }
  Tick now() const { return clock_.now(); }  // the recorder's clock

 private:
  struct Live {
    MemoryCategory category;
    uint64_t seq;  // of its alloc entry
  };
  MemoryCategory alloc_category_locked(const AllocatorEvent& event);
  MemoryCategory free_category_locked(const AllocatorEvent& event);
  bool in_context_locked(MemoryContext context) const;

  const Clock& clock_;
  const size_t max_entries_;
  const CategoryFn category_fn_;

  mutable std::mutex mutex_;  // guards everything below
  std::vector<MemoryHistoryEntry> ring_;  // entry `seq` at ring_[seq % max_entries_]
  uint64_t next_seq_ = 0;
  std::unordered_map<uintptr_t, Live> live_;     // live blocks by address
  std::unordered_set<uint64_t> evicted_owners_;  // owners freed while evicting, not yet back
  MemoryContext context_ = MemoryContext::none;
  std::thread::id context_thread_;
};

}  // namespace dtr
