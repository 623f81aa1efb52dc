// collector.cpp: finding dead storages and dropping the lineage nothing can need (the
// lineage's collector; lineage_impl.h has the tables it works on, lineage.cpp the rest).
//
// Note [Collecting dead lineage]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch does not say when a tensor dies. A storage is dead when only our snapshots hold
// it (its use count equals its snapshot count) or it is gone. collect() finds those and
// releases their engine references, so the engine evicts them at once (eager eviction),
// before any live storage is chosen: at every eviction request, and every so many ops.
// A dead storage may still be needed: a live storage may have to be rematerialized
// through it. Every so many ops a full collect marks what is needed (walking parents from
// every live unpinned storage, through unpinned parents), discards every dead storage
// that is not (Engine::discard: pinned ones too, such as dropout masks and old parameter
// values), and drops the lineage (snapshots) of ops whose outputs are all discarded,
// which lets their inputs die in turn. Without this, recording alone grows memory without
// bound (ARCHITECTURE.md "Proven" 6).
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "integration/torch/lineage_impl.h"

namespace dtr::torch_integration {

// Note [Freed pinned storages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pinned storage stays material in the engine when it dies, until a full collect finds
// that no lineage needs it. But one that no snapshot holds is freed by PyTorch as it dies
// (a constant no recorded op read, such as most of a deepcopy'd state_dict), and no remat
// can read it again: a remembered op that reads it would hold a snapshot. Waiting for the
// full collect left its bytes in the engine's pinned and live counts meanwhile: with no
// eviction requests, a loop that deep-copied 4 live 256 KiB tensors a step showed 12 MiB
// more pinned bytes (dtr.pinned_bytes.current) than the allocator held. So such a storage
// is discarded as soon as it is found dead: by the scans ops make, and by one before
// dtr.memory_stats() is read (after `del opt` and no op since, the freed momentum buffers
// had stayed in the pinned count, above the allocated bytes).
void Lineage::release_storage(StorageId s) {
  storages_[s].dead = true;
  ++deaths_;
  const bool freed = engine_->is_pinned(s) && storages_[s].impl.expired();
  // Note [Discards in a trace] (lineage.cpp): a full collect follows while tracing.
  if (engine_->is_pinned(s) && !freed) {
    const uint64_t size = engine_->storage_size(s);
    pinned_dead_bytes_ += size;
    if (size >= kSmallPinnedBytes) pinned_dead_large_bytes_ += size;
  }
  const bool traced = storages_[s].death_traced;  // Note [Tracing under a budget]
  // As many releases as the program held: under option keep_near_large the engine may keep
  // the last one (Note [Dropped inputs of large results] in eviction/engine.cpp).
  for (TensorId t : engine_->storage_tensors(s)) {
    for (uint32_t k = engine_->external_refs(t); k > 0; --k) {
      if (!traced) recording_->release(t);
      engine_->release(t);
    }
  }
  if (freed) discard_storage(s);  // Note [Freed pinned storages]
}

void Lineage::discard_storage(StorageId s) {
  StorageRec& rec = storages_[s];
  recording_->discard(engine_->storage_tensors(s)[0]);
  engine_->discard(s);
  rec.discarded = true;
  rec.readers.clear();
  rec.readers.shrink_to_fit();
  auto it = by_impl_.find(rec.impl._unsafe_get_target());
  if (it != by_impl_.end() && it->second == s) by_impl_.erase(it);
  rec.impl = c10::weak_intrusive_ptr<c10::StorageImpl>(c10::intrusive_ptr<c10::StorageImpl>());
}

// Whether the program holds `s` no more: only our snapshots do (or nothing). A locked
// unpinned storage is an input of an op running now or of a remat in progress. The use
// count goes first: the scans ask this of every storage the program holds, at every
// eviction request, and it is what rules nearly all of them out, so the engine's record
// is read only for the few that pass (the scans were 13% of a deep MLP's run under a
// budget, perf 2026-12-04).
bool Lineage::found_dead(StorageId s) const {
  const StorageRec& rec = storages_[s];
  return rec.impl.use_count() <= rec.snapshot_refs &&
         !(engine_->is_locked(s) && !engine_->is_pinned(s));
}

// Note [Tracing under a budget]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// While tracing, the deaths go into the trace before the next op (Note [Recording a
// trace] in recording.cpp). With no budget the scan that finds them also releases them:
// nothing is evicted, so when the engine learns of a death changes nothing but the peak.
// Under a budget it changes the run: a dead storage not yet found stays material, a free
// parent for the next op's remats, until an eviction request or the scan every
// kOpsBetweenDeadScans ops finds it (Note [Temporaries]). Released before every op, it was
// evicted at once, so remats went further back: gradient accumulation
// (tests/torch/scripts/patterns.py) ran out of memory at 0.8 of its peak in 3 traced runs
// of 3, where untraced runs train at 0.75. So under a budget this scan only writes the
// deaths it finds into the trace and marks them; the collector releases them at the usual
// times and writes nothing more for them. The trace says when the program let go, the run
// is the one it would be untraced.
void Lineage::trace_deaths(size_t newest) {
  if (newest >= alive_.size()) trace_scan_ops_ = ops_recorded_;
  for (size_t i = alive_.size() - std::min(newest, alive_.size()); i < alive_.size(); ++i) {
    const StorageId s = alive_[i];
    StorageRec& rec = storages_[s];
    if (rec.dead || rec.death_traced || !found_dead(s)) continue;
    rec.death_traced = true;
    for (TensorId t : engine_->storage_tensors(s))
      for (uint32_t k = engine_->external_refs(t); k > 0; --k) recording_->release(t);
  }
}

// Note [Deaths in the trial's trace]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// trace_deaths before every op checks every storage the program holds: a cost of what it
// holds per op. On a 2000-layer residual MLP 64 wide at 0.6 of its peak
// (tests/torch/scripts/mlp.py --residual, min_evictable:4K; thousands of storages held, 68
// thousand ops in 3 steps) a traced run took 11.2-12.0 s against 5.1-5.4 s untraced
// (found_dead 39% of the samples; prefetching the records did not help), and `auto`,
// which records its first two steps for its replays (Note [Trial by replay]), took
// 9.5-10.8 s against 4.9 s with trial:live. A trace the user asked for (DTR_TRACE) keeps
// every death where it happened. The trial's own trace, which only compares the
// candidates with one another, checks the newest kNewestScanned storages before each op,
// as the scans without a budget do (Note [Temporaries] in lineage.cpp), and all of them
// once the ops since the last full check have earned it (Note [Scan credit]), so an older
// storage's death may go into it up to alive_.size() / kScannedPerOp ops late
// (Lineage::scan_earned in lineage.cpp). bench/torch_trial_cost.py on that MLP, 3
// interleaved rounds each: `auto` 2.171 times policy:dtr_eq's wall time with every death
// checked, 1.421-1.498 with this (trial:live 0.92-0.95; the rest is the replays, 2.5 s of
// their own). The replays' figures, resnet18 at 0.5x (batch 32; four runs, against three
// with every death checked): dtr_eq 0.807-0.810 against 0.806-0.809, dtr_ancestors
// 0.770-0.832 against 0.767-0.770, dtr_eq_keep 0.688-0.697 against 0.693-0.732, msps
// 0.843-0.844 in all four against 0.757-0.834 (a little higher: the deaths it finds late),
// the same choice every time; the transformer at 74 MiB and the LSTM LM at 0.6 of its peak
// chose as before (two runs and one).

void Lineage::drop_lineage(OpId op) {
  OpRec& r = ops_[op];
  r.mask_bits.clear();  // Note [Packed masks] in lineage.cpp
  if (r.args.empty()) return;
  for (TensorId in : engine_->op_inputs(op)) --storages_[engine_->storage_of(in)].snapshot_refs;
  decltype(r.args)().swap(r.args);  // gives back a spilled buffer too
}

void Lineage::scan_for_dead(size_t newest) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (newest >= alive_.size()) dead_scan_ops_ = ops_recorded_;
  // Only storages not yet found dead are scanned (alive_ drops the others as it goes),
  // so a scan costs what the program holds, not what lineage remembers; a scan of the
  // newest few costs a few (Note [Temporaries]).
  const size_t first = alive_.size() - std::min(newest, alive_.size());
  size_t kept = first;
  for (size_t i = first; i < alive_.size(); ++i) {
    const StorageId s = alive_[i];
    if (storages_[s].dead) continue;
    if (found_dead(s)) {
      release_storage(s);
      continue;
    }
    alive_[kept++] = s;
  }
  alive_.resize(kept);
}

// Marks every storage some live unpinned storage may need to be rematerialized: the
// live unpinned storages themselves, and their parents through unpinned parents.
Mark Lineage::mark_needed() {
  const Mark needed_mark = begin_marks();
  std::vector<StorageId> stack;
  for (StorageId s : alive_) {
    if (storages_[s].dead || engine_->is_pinned(s)) continue;
    marks_[s] = needed_mark;
    stack.push_back(s);
  }
  engine_->walk_needed_parents(stack, [&](StorageId s) {
    if (marks_[s] == needed_mark) return false;
    marks_[s] = needed_mark;
    return true;
  });
  return needed_mark;
}

void Lineage::collect(bool full) {
  // Note [Collecting dead lineage]
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (full || dead_scan_ops_ != ops_recorded_) scan_for_dead();
  if (!full) return;
  ++engine_->stats().full_collects;
  full_collect_ops_ = ops_recorded_;
  full_collect_deaths_ = deaths_;
  pinned_dead_bytes_ = 0;
  pinned_dead_large_bytes_ = 0;
  pinned_dead_kept_bytes_ = 0;
  pinned_dead_kept_large_bytes_ = 0;
  versions_since_collect_ = 0;
  ops_since_collect_ = 0;
  Mark needed_mark = mark_needed();
  if (cut_at_dead_constants(needed_mark)) needed_mark = mark_needed();  // Note [Dead constants]
  auto needed = [&](StorageId s) { return marks_[s] == needed_mark; };
  std::vector<StorageId> kept;
  std::vector<OpId> done;
  for (StorageId s : active_) {
    StorageRec& rec = storages_[s];
    if (rec.discarded) {
      for (TensorId t : engine_->storage_tensors(s)) done.push_back(engine_->op_of(t));
      continue;
    }
    if (!rec.dead || needed(s) || (engine_->is_locked(s) && !engine_->is_pinned(s))) {
      if (rec.dead && engine_->is_pinned(s)) {
        const uint64_t size = engine_->storage_size(s);
        pinned_dead_kept_bytes_ += size;
        if (size >= kSmallPinnedBytes) pinned_dead_kept_large_bytes_ += size;
      }
      kept.push_back(s);
      continue;
    }
    discard_storage(s);
    for (TensorId t : engine_->storage_tensors(s)) done.push_back(engine_->op_of(t));
  }
  active_.swap(kept);
  kept_at_collect_ = active_.size();
  // An op's lineage serves only to recompute its outputs: once each is discarded or
  // pinned (never evicted again, as a gradient at the optimizer step), drop it, and with
  // it the references its snapshots hold (Note [Pinned writes]).
  for (StorageId s : active_) {
    if (!engine_->is_pinned(s)) continue;
    for (TensorId t : engine_->storage_tensors(s)) done.push_back(engine_->op_of(t));
    has_readers(s);  // prunes readers whose lineage was dropped (a constant every op reads)
  }
  for (OpId op : done) {
    if (ops_[op].args.empty()) continue;
    bool droppable = true;
    for (TensorId out : engine_->op_outputs(op)) {
      const StorageId s = engine_->storage_of(out);
      droppable &= storages_[s].discarded || engine_->is_pinned(s);
    }
    if (droppable) drop_lineage(op);
  }
  reuse_retired_ids();
}

// Note [Retiring] in eviction/engine.cpp: the engine forgets ops whose outputs are all
// discarded and that no remembered op reads; their ids, and those of their tensors and
// storages, come back once no table here holds them. Retired storages are marked dead and
// discarded, so the next scan and full collect drop them from alive_ and active_; readers
// entries naming retired ops are pruned below. So ids are reused at the end of a full
// collect, which did both.
void Lineage::on_retire(OpId op) {
  drop_lineage(op);
  for (TensorId in : engine_->op_inputs(op)) retired_readers_.push_back(engine_->storage_of(in));
  recording_->forget(engine_->op_outputs(op));
  ops_[op] = OpRec{};
}

void Lineage::on_retire_storage(StorageId s) {
  StorageRec& rec = storages_[s];
  auto it = by_impl_.find(rec.impl._unsafe_get_target());
  if (it != by_impl_.end() && it->second == s) by_impl_.erase(it);
  rec.impl = c10::weak_intrusive_ptr<c10::StorageImpl>(c10::intrusive_ptr<c10::StorageImpl>());
  rec.readers.clear();
  rec.dead = true;
  rec.discarded = true;
}

void Lineage::reuse_retired_ids() {
  const Mark pruned = begin_marks();
  for (StorageId s : retired_readers_) {
    if (marks_[s] == pruned) continue;
    marks_[s] = pruned;
    has_readers(s);  // drops entries of ops whose lineage is gone, retired ones among them
  }
  retired_readers_.clear();
  engine_->reuse_retired();
}

}  // namespace dtr::torch_integration
