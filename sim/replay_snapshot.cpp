// replay_snapshot.cpp: a replay's memory snapshot (include/dtr/sim/replay_snapshot.h).
#include "dtr/sim/replay_snapshot.h"

namespace dtr {

// Forwards the allocator's requests for room to the engine, inside the evicting context,
// so every free the engine makes for them is recorded as `evicted`.
class ReplaySnapshot::EvictingLink : public EvictionCallback {
 public:
  EvictingLink(Engine& engine, MemoryHistory& history) : engine_(engine), history_(history) {}
  uint64_t make_room(uint64_t bytes_needed, bool contiguous_request) override {
    MemoryHistory::ContextScope evicting(&history_, MemoryContext::evicting);
    return engine_.free_for_allocator(bytes_needed, contiguous_request);
  }
  // Moves are not evictions: their events keep the context they come in.
  uint64_t compact(uint64_t bytes_requested) override {
    return engine_.compact_for_allocator(bytes_requested);
  }
  uint64_t pinned_bytes() const override { return engine_.unevictable_bytes(); }
  uint64_t evictable_bytes() const override { return engine_.evictable_bytes(); }
  uint64_t in_use_bytes() const override { return engine_.in_use_bytes(); }

 private:
  Engine& engine_;
  MemoryHistory& history_;
};

ReplaySnapshot::ReplaySnapshot(CachingAllocator& allocator, const Clock& clock, uint32_t entries)
    : allocator_(allocator),
      history_(clock, entries, [this](uint64_t owner) { return category_of_owner(owner); }) {
  allocator_.set_observer(&history_);
}

ReplaySnapshot::~ReplaySnapshot() {
  if (recording_) allocator_.set_observer(nullptr);
}

void ReplaySnapshot::bind(Engine& engine) {
  engine_ = &engine;
  link_ = std::make_unique<EvictingLink>(engine, history_);
  allocator_.set_eviction_callback(link_.get());
}

// Called by the history with the allocator's mutex held, while the engine allocates a
// storage: it reads the engine's lineage only (the op is recorded before its outputs are
// allocated), never the allocator.
MemoryCategory ReplaySnapshot::category_of_owner(uint64_t owner) const {
  if (!engine_ || owner == 0) return MemoryCategory::unknown;
  const StorageId s = Engine::storage_of_owner(owner);
  if (s >= engine_->num_storages() || engine_->storage_tensors(s).empty())
    return MemoryCategory::unknown;
  const OpId op = engine_->op_of(engine_->storage_tensors(s)[0]);
  if (engine_->op_inputs(op).empty() && engine_->op_compute_ns(op) == 0)
    return MemoryCategory::parameter;
  return MemoryCategory::activation;
}

nlohmann::ordered_json ReplaySnapshot::finish(SnapshotFormat format,
                                              const nlohmann::ordered_json& user_metadata) {
  nlohmann::ordered_json snapshot = memory_snapshot(allocator_, &history_, format, user_metadata);
  allocator_.set_observer(nullptr);
  recording_ = false;
  engine_ = nullptr;
  return snapshot;
}

}  // namespace dtr
