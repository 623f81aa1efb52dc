// timeline_hooks.cpp: TimelineHooks (include/dtr/eviction/timeline_hooks.h).
#include "dtr/eviction/timeline_hooks.h"

#include "dtr/core/check.h"

namespace dtr {

TimelineHooks::TimelineHooks(Timeline& timeline, EngineHooks* inner, Timing timing)
    : timeline_(timeline), inner_(inner), timing_(timing) {
  unnamed_ = timeline_.intern("op");
  next_name_ = unnamed_;
}

void TimelineHooks::name_op(OpId op, std::string_view name) {
  if (op >= op_name_.size()) op_name_.resize(size_t{op} + 1, unnamed_);
  op_name_[op] = timeline_.intern(name);
}

uint32_t TimelineHooks::name_of(OpId op) const {
  return op < op_name_.size() ? op_name_[op] : unnamed_;
}

uint64_t TimelineHooks::pending_output_bytes(OpId op) const {
  // The root tensor of each output storage that is not material yet: what compute() will
  // charge (aliases take no memory; outputs still material are computed twice and their
  // duplicate bytes are dropped again at once).
  uint64_t bytes = 0;
  for (TensorId u : engine_->op_outputs(op)) {
    const StorageId s = engine_->storage_of(u);
    if (engine_->storage_tensors(s)[0] == u && !engine_->is_material(s))
      bytes += engine_->storage_size(s);
  }
  return bytes;
}

void TimelineHooks::on_compute(OpId op, bool remat) {
  DTR_CHECK(engine_ != nullptr, "TimelineHooks used before bind()");
  if (!remat && (op >= op_name_.size() || op_name_[op] == unnamed_)) {
    if (op >= op_name_.size()) op_name_.resize(size_t{op} + 1, unnamed_);
    op_name_[op] = next_name_;
    next_name_ = unnamed_;
  }
  const uint64_t start = engine_->now();
  if (!allocated_bytes_) timeline_.allocated(start, engine_->live_bytes() + pending_output_bytes(op));
  if (inner_) inner_->on_compute(op, remat);
  const uint64_t dur = timing_ == Timing::recorded_cost
                           ? (remat ? engine_->op_remat_ns(op) : engine_->op_compute_ns(op))
                           : engine_->now() - start;
  timeline_.span(name_of(op), start, dur, remat, op);
  if (allocated_bytes_) timeline_.allocated(engine_->now(), allocated_bytes_());
}

void TimelineHooks::on_compact(uint64_t blocks, uint64_t moved_bytes, uint64_t released_bytes) {
  DTR_CHECK(engine_ != nullptr, "TimelineHooks used before bind()");
  timeline_.compaction(engine_->now(), blocks, moved_bytes, released_bytes);
  if (inner_) inner_->on_compact(blocks, moved_bytes, released_bytes);
}

void TimelineHooks::on_evict(StorageId s) {
  DTR_CHECK(engine_ != nullptr, "TimelineHooks used before bind()");
  const uint64_t now = engine_->now();
  const uint64_t evictions = engine_->stats().num_evictions;
  if (evictions != seen_evictions_) {
    seen_evictions_ = evictions;
    // The op that made it: its root tensor's (views share it), the `op` of its spans.
    const std::vector<TensorId>& tensors = engine_->storage_tensors(s);
    timeline_.eviction(now, engine_->storage_size(s), s,
                       tensors.empty() ? UINT32_MAX : engine_->op_of(tensors[0]));
  }
  if (!allocated_bytes_) timeline_.allocated(now, engine_->live_bytes());
  if (inner_) inner_->on_evict(s);
  if (allocated_bytes_) timeline_.allocated(engine_->now(), allocated_bytes_());
}

void TimelineHooks::after_remat(OpId op) {
  if (inner_) inner_->after_remat(op);
}

}  // namespace dtr
