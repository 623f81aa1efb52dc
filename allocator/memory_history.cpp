// memory_history.cpp: the allocator event recorder (include/dtr/allocator/memory_history.h).
//
// Note [Categories]
// ~~~~~~~~~~~~~~~~~
// A category is decided when the event is recorded, because only then does the host's
// context say what is happening (a dump can no longer tell an eviction from a free):
//  - alloc: `remat` inside a remat context; else `remat` too if the block's owner was
//    last freed while evicting (the simulator's engine allocates a remat's outputs before
//    it tells its hooks that a remat runs, so no context can cover that allocation; the
//    owner, one per storage, says it all); else the host's category function of the
//    owner; else `unknown`.
//  - free_requested/free_completed: `evicted` inside an evicting context (and the owner is
//    remembered for the rule above); else the category of the block's alloc, so an
//    allocation and its free pair up in a viewer.
//  - segment_alloc, segment_free, oom: `unknown` (memory the allocator holds, no tensor's).
// A host that learns what a block is only after it was allocated (the torch host sets
// owners after PyTorch allocated) corrects it with set_category: the live block and its
// alloc entry, if the ring still holds it, take the new category.
//
// Note [Context]
// ~~~~~~~~~~~~~~
// The context belongs to the thread that set it: events on other threads (another thread
// of a torch program allocating meanwhile) are not evictions or remats and keep their own
// category. One context at a time suffices, because both hosts evict and rematerialize
// under one lock (the torch host's engine lock; the simulator has one thread per engine);
// ContextScope saves and restores the (context, thread) pair, so contexts nest.
#include "dtr/allocator/memory_history.h"

namespace dtr {

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::unknown: return "unknown";
    case MemoryCategory::activation: return "activation";
    case MemoryCategory::parameter: return "parameter";
    case MemoryCategory::evicted: return "evicted";
    case MemoryCategory::remat: return "remat";
  }
  return "unknown";
}

MemoryHistory::MemoryHistory(const Clock& clock, size_t max_entries, CategoryFn category)
    : clock_(clock), max_entries_(max_entries), category_fn_(std::move(category)) {
  ring_.reserve(max_entries_ < 4096 ? max_entries_ : 4096);  // grows up to max_entries_
}

bool MemoryHistory::in_context_locked(MemoryContext context) const {
  return context_ == context && context_thread_ == std::this_thread::get_id();
}

MemoryCategory MemoryHistory::alloc_category_locked(const AllocatorEvent& event) {
  // Note [Categories]
  if (in_context_locked(MemoryContext::remat)) {
    if (event.owner) evicted_owners_.erase(event.owner);
    return MemoryCategory::remat;
  }
  if (event.owner && evicted_owners_.erase(event.owner) > 0) return MemoryCategory::remat;
  if (category_fn_) return category_fn_(event.owner);
  return MemoryCategory::unknown;
}

MemoryCategory MemoryHistory::free_category_locked(const AllocatorEvent& event) {
  if (in_context_locked(MemoryContext::evicting)) {
    if (event.owner) evicted_owners_.insert(event.owner);
    return MemoryCategory::evicted;
  }
  auto it = live_.find(event.addr);
  return it == live_.end() ? MemoryCategory::unknown : it->second.category;
}

void MemoryHistory::on_allocator_event(const AllocatorEvent& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryHistoryEntry entry;
  entry.action = event.action;
  entry.small_path = event.small_path;
  entry.addr = event.addr;
  entry.size = event.size;
  entry.requested_bytes = event.requested_bytes;
  entry.owner = event.owner;
  entry.free_bytes = event.free_bytes;
  entry.time = clock_.now();
  switch (event.action) {
    case AllocatorAction::alloc:
      entry.category = alloc_category_locked(event);
      live_[event.addr] = Live{entry.category, next_seq_};
      break;
    case AllocatorAction::free_requested: entry.category = free_category_locked(event); break;
    case AllocatorAction::free_completed:
      entry.category = free_category_locked(event);
      live_.erase(event.addr);
      break;
    case AllocatorAction::segment_alloc:
    case AllocatorAction::segment_free:
    case AllocatorAction::oom: entry.category = MemoryCategory::unknown; break;
  }
  const uint64_t seq = next_seq_++;
  if (max_entries_ == 0) return;
  if (ring_.size() < max_entries_)
    ring_.push_back(entry);  // seq == ring_.size() until the ring is full
  else
    ring_[seq % max_entries_] = entry;
}

void MemoryHistory::set_context(MemoryContext context) {
  std::lock_guard<std::mutex> lock(mutex_);
  context_ = context;
  context_thread_ = std::this_thread::get_id();
}

MemoryContext MemoryHistory::context() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return context_thread_ == std::this_thread::get_id() ? context_ : MemoryContext::none;
}

MemoryHistory::ContextScope::ContextScope(MemoryHistory* history, MemoryContext context)
    : history_(history) {
  if (!history_) return;
  std::lock_guard<std::mutex> lock(history_->mutex_);
  previous_context_ = history_->context_;
  previous_thread_ = history_->context_thread_;
  history_->context_ = context;
  history_->context_thread_ = std::this_thread::get_id();
}

MemoryHistory::ContextScope::~ContextScope() {
  if (!history_) return;
  std::lock_guard<std::mutex> lock(history_->mutex_);
  history_->context_ = previous_context_;
  history_->context_thread_ = previous_thread_;
}

bool MemoryHistory::set_category(uintptr_t addr, MemoryCategory category) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(addr);
  if (it == live_.end()) return false;
  it->second.category = category;
  const uint64_t seq = it->second.seq;
  if (max_entries_ > 0 && seq + max_entries_ >= next_seq_ && seq < next_seq_) {
    MemoryHistoryEntry& entry = ring_[seq % max_entries_];
    if (entry.action == AllocatorAction::alloc && entry.addr == addr) entry.category = category;
  }
  return true;
}

MemoryCategory MemoryHistory::category_of(uintptr_t addr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(addr);
  return it == live_.end() ? MemoryCategory::unknown : it->second.category;
}

std::vector<MemoryHistoryEntry> MemoryHistory::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<MemoryHistoryEntry> out;
  out.reserve(ring_.size());
  if (ring_.size() < max_entries_ || max_entries_ == 0) return ring_;
  for (size_t i = 0; i < max_entries_; ++i) out.push_back(ring_[(next_seq_ + i) % max_entries_]);
  return out;
}

uint64_t MemoryHistory::num_recorded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_seq_;
}

}  // namespace dtr
