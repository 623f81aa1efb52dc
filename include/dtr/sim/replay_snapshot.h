// replay_snapshot.h: a memory snapshot of a replay (option `snapshot`; `dtr-sim run
// --snapshot`), the simulator's side of allocator/memory_snapshot.h.
//
// A ReplaySnapshot records the fake device's allocator events (a MemoryHistory on the
// replay's LogicalClock, so time_us is microseconds of simulated compute) and categorizes
// them from the engine: a block whose storage was made by an op without inputs or compute
// (a CONSTANT) is a `parameter`, any other storage an `activation`; a free made while the
// engine evicts for the allocator is `evicted`, and a storage's next block after that is
// `remat` (Note [Categories] in allocator/memory_history.cpp). Eager evictions of dead
// storages and a warm-start plan's drops are ordinary frees, so a storage recomputed after
// one of those shows as an `activation` again, not a `remat`.
//
// Lifetime: construct after the allocator, bind() once the engine exists (before the first
// event), finish() while the engine still lives (the snapshot shows the blocks it holds);
// destroy after the engine.
#pragma once

#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/memory_history.h"
#include "dtr/allocator/memory_snapshot.h"
#include "dtr/core/clock.h"
#include "dtr/eviction/engine.h"

namespace dtr {

class ReplaySnapshot {
 public:
  // Starts recording the last `entries` events of `allocator` (which must outlive *this).
  ReplaySnapshot(CachingAllocator& allocator, const Clock& clock, uint32_t entries);
  ~ReplaySnapshot();
  ReplaySnapshot(const ReplaySnapshot&) = delete;
  ReplaySnapshot& operator=(const ReplaySnapshot&) = delete;

  // `engine` (attached to the allocator, and outliving *this's recording) now categorizes
  // blocks, and its evictions for the allocator run in the evicting context: this replaces
  // the allocator's eviction callback with one that forwards to the engine.
  void bind(Engine& engine);
  // The snapshot now (memory_snapshot), then stops recording and unbinds the engine's
  // categories; the eviction forwarding stays until the engine detaches it.
  nlohmann::ordered_json finish(SnapshotFormat format, const nlohmann::ordered_json& user_metadata);

 private:
  class EvictingLink;  // the EvictionCallback in the evicting context

  MemoryCategory category_of_owner(uint64_t owner) const;

  CachingAllocator& allocator_;
  Engine* engine_ = nullptr;
  MemoryHistory history_;
  std::unique_ptr<EvictingLink> link_;
  bool recording_ = true;
};

}  // namespace dtr
