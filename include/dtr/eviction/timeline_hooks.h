// timeline_hooks.h: records what an engine does (ops, remats, evictions, live bytes) into a
// Timeline (core/timeline.h).
//
// TimelineHooks is an EngineHooks decorator, like PlanGuide: it records, then forwards
// every call to the host's own hooks (`inner`, may be null). Give it to the engine as its
// hooks, or as a PlanGuide's inner hooks (the guide forwards everything), and bind() it to
// the engine before the first op. What it records, on the engine's clock (Engine::now):
//  - on_compute(op, remat): a span for the op (a remat span when `remat`), named by
//    name_next_op / name_op ("op" when the host named nothing), and an allocated sample
//    at its start: live bytes plus the outputs the op is about to make material (memory
//    is taken when an op starts, as an allocator hands out output buffers before the
//    kernel runs). Span length: Timing::recorded_cost takes the op's recorded compute
//    (a LogicalClock advances only after on_compute returns); Timing::measured takes
//    now() after the inner hooks ran minus now() before (a SteadyClock host whose inner
//    on_compute really recomputes).
//  - on_evict(s): an eviction record when the policy chose `s` (Stats::num_evictions
//    moved); eager frees of dead storages and plan drops are not marks, only the
//    allocated sample after them (live bytes, on every on_evict).
//  - on_compact: a compaction record (blocks and bytes moved, segment bytes released).
// A host whose engine records ops that already ran (Engine::record: no on_compute for
// them) records those spans itself with Timeline::span and names ops with name_op so
// their remats carry the name.
//
// Thread safety: as the engine's (one thread at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "dtr/core/timeline.h"
#include "dtr/eviction/engine.h"

namespace dtr {

class TimelineHooks : public EngineHooks {
 public:
  enum class Timing : uint8_t { recorded_cost, measured };

  // `timeline` (and `inner`, if any) must outlive the hooks.
  explicit TimelineHooks(Timeline& timeline, EngineHooks* inner = nullptr,
                         Timing timing = Timing::recorded_cost);
  void bind(const Engine& engine) { engine_ = &engine; }

  // The name of the op the host is about to record through Engine::call: its first
  // on_compute (remat = false) takes it, and its remats reuse it.
  void name_next_op(std::string_view name) { next_name_ = timeline_.intern(name); }
  // The name of an op the host already recorded (Engine::record), for its remats.
  void name_op(OpId op, std::string_view name);

  // Where allocated samples come from. Default: the engine's live bytes (plus, at an op's
  // start, the outputs it is about to make material), which is all a simulator has. A
  // host with a real allocator passes its allocated bytes instead; samples are then taken
  // after the inner hooks ran (the remat's buffers exist, the evicted block is freed).
  void sample_from(std::function<uint64_t()> allocated_bytes) {
    allocated_bytes_ = std::move(allocated_bytes);
  }

  void on_compute(OpId op, bool remat) override;
  void on_evict(StorageId s) override;
  void on_compact(uint64_t blocks, uint64_t moved_bytes, uint64_t released_bytes) override;
  void after_remat(OpId op) override;
  void on_retire(OpId op) override {
    if (inner_) inner_->on_retire(op);
  }
  void on_retire_storage(StorageId s) override {
    if (inner_) inner_->on_retire_storage(s);
  }
  bool stop_remats() override { return inner_ && inner_->stop_remats(); }
  bool may_recompute(OpId op) override { return !inner_ || inner_->may_recompute(op); }

 private:
  uint32_t name_of(OpId op) const;
  uint64_t pending_output_bytes(OpId op) const;

  Timeline& timeline_;
  EngineHooks* inner_;
  Timing timing_;
  const Engine* engine_ = nullptr;
  uint32_t unnamed_;               // interned "op"
  uint32_t next_name_;             // for the next first run
  std::vector<uint32_t> op_name_;  // OpId -> interned name (unnamed_ if unknown)
  uint64_t seen_evictions_ = 0;    // Stats::num_evictions at the last on_evict
  std::function<uint64_t()> allocated_bytes_;  // sample_from(); empty: the engine's
};

}  // namespace dtr
