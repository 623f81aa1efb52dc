// plan_guide.cpp: warm start: a running engine follows a static plan (plan_guide.h).
//
// Note [Warm start]
// ~~~~~~~~~~~~~~~~~
// Storage k of the run is node k of the plan's graph: the graph is built from the trace by
// the same walk that turns the trace into engine calls (Note [Trace to graph] in
// planner/graph.cpp, Note [Trace to engine] in sim/replay.cpp), one node per storage in
// creation order. The guide drops what the common evaluator frees (Note [Static execution]
// in planner/plan_eval.cpp), with the forward pass's progress as its clock: `stage` is the
// last node the forward pass has made, and a storage that is evictable (material, not
// locked, not pinned) is dropped when
//  - its last use has passed: last_use <= stage (the graph lets a node die after its last
//    use; a trace often holds the reference longer, until autograd lets go of it), or
//  - the plan recomputes it and the forward pass is past its last forward use:
//    forward_drop <= stage < first_backward. This is the drop that a checkpointing plan
//    saves memory by; the backward's first use rematerializes it (and its dropped
//    ancestors, back to the nearest checkpoints) on demand, as the evaluator does, and the
//    recomputed copy then lives until its last use.
// Checkpoints (`keep` nodes) are simply never dropped before their last use.
//
// When. The guide drops in end_op(), which the host calls after each op it records: the
// engine then holds no locks but the pinned ones, so dropping cannot take away a parent
// that a pending rematerialization still needs. The storages looked at are those the ops
// since the last end_op read or made, remats included: the only ones whose state or stage
// can have changed. Inside a remat chain it also drops each remat's inputs that the plan
// no longer needs (Note [Dropping inside a remat chain]). An op makes all its outputs at
// once where the evaluator counts them one by one: so a run that follows the plan exactly
// can still differ a little from the evaluator's peak; compute is the same
// (tests/planner/test_warm_start.cpp).
//
// Note [Undemanded siblings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Rematerializing one output of a multi-output op (an LSTM cell's gates) refills all of
// them, while the evaluator recomputes only the node it needs. A remat's output that
// neither the op nor any remat since the last end_op read, and that the plan recomputes,
// was not asked for: it is dropped at once, as the evaluator would never have made it
// resident. (Measured on the LSTM log: without this the backward kept every gate of every
// recomputed cell and a plan that fits by 3% thrashed.)
//
// Departures. Two ways reality can differ from the plan:
//  - memory: following the plan, the run still does not fit (the plan was made for a
//    larger budget, the allocator's blocks and segments do not pack as bytes do, or the
//    program keeps a storage the graph thinks dead because a lineage still reads it).
//    The engine's heuristic evicts as in a cold run (`dtr.num_evictions` counts it) and
//    the guide keeps following the plan: its drops are still right.
//  - structure: the program is not the one the plan was made for: a new storage has
//    another size than its node, its op reads other storages than the node's deps, or
//    there are more storages than nodes. Node numbers no longer mean anything, so the
//    guide stops dropping for good (`dtr.plan_departures` = 1, departure() says where) and
//    the rest of the run is a cold run of the heuristic.
// A plan made for another trace never gets here: its graph hash is checked when it is
// loaded (planner/warm_start.cpp).
#include "dtr/eviction/plan_guide.h"

#include <algorithm>

namespace dtr {

PlanGuide::PlanGuide(const PlanHints& hints, EngineHooks* inner) : hints_(hints), inner_(inner) {}

void PlanGuide::on_compute(OpId op, bool remat) {
  if (remat) remats_.push_back(op);  // the host names its forward ops in end_op
  if (inner_) inner_->on_compute(op, remat);
}

void PlanGuide::on_evict(StorageId s) {
  if (inner_) inner_->on_evict(s);
}

// Note [Dropping inside a remat chain]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A backward op whose input the plan dropped can set off a long chain of remats (the first
// backward op of the LSTM log reran 1017 ops). The evaluator frees each intermediate of
// such a chain once its last user in the chain has run; keeping them all until end_op made
// a plan whose evaluated peak is 3.16 GiB peak at 7.18 GiB. So after each remat the guide
// drops that op's inputs that the plan no longer needs (past their last use, or recomputed
// forward nodes past their forward drop) if they are not locked and every node that reads
// them is material. The last condition matters: a frame still open further out locks the
// parents it has reached, but a parent it has not reached yet could be dropped under it and
// recomputed, with its own dropped ancestors, each time; on the LSTM's diamonds that
// compounds without bound. If all users are material, no open frame is about to compute
// one. The op's own output storages are never dropped here (a view op reads the storage it
// returns): the frame that asked for them reads them next.
void PlanGuide::after_remat(OpId op) {
  if (inner_) inner_->after_remat(op);
  if (!on_plan_ || engine_ == nullptr) return;
  // Never the storage the op made or viewed: the frame that asked for it is about to read
  // it (a view's input shares its output's storage; dropping it would loop).
  auto is_output = [&](StorageId s) {
    for (TensorId u : engine_->op_outputs(op))
      if (engine_->storage_of(u) == s) return true;
    return false;
  };
  // Only when every user is material: an open frame that will compute a user needs it.
  auto users_material = [&](StorageId s) {
    if (s + 1 >= hints_.user_begin.size()) return false;
    for (uint32_t k = hints_.user_begin[s]; k < hints_.user_begin[s + 1]; ++k) {
      const uint32_t u = hints_.users[k];
      if (u >= engine_->num_storages() || !engine_->is_material(u)) return false;
    }
    return true;
  };
  for (TensorId t : engine_->op_inputs(op)) {
    const StorageId s = engine_->storage_of(t);
    if (engine_->is_evictable(s) && should_drop(s) && !is_output(s) && users_material(s) &&
        engine_->drop(s))
      ++drops_;
  }
}

void PlanGuide::depart(std::string why) {
  on_plan_ = false;
  departure_ = std::move(why);
}

// Checks the storages forward op `op` made against their nodes; advances the stage.
void PlanGuide::check_new_storages(const Engine& engine, OpId op) {
  uint32_t last_new = 0;
  bool made_any = false;
  for (TensorId t : engine.op_outputs(op)) {
    const StorageId s = engine.storage_of(t);
    if (s < storages_seen_) continue;  // a view of an older storage
    made_any = true;
    last_new = std::max(last_new, s);
  }
  if (!made_any) return;  // a view: no new storage, the stage stays
  // The op's distinct input storages: the deps of each node it makes.
  candidates_.clear();
  for (TensorId t : engine.op_inputs(op)) candidates_.push_back(engine.storage_of(t));
  std::sort(candidates_.begin(), candidates_.end());
  candidates_.erase(std::unique(candidates_.begin(), candidates_.end()), candidates_.end());
  uint64_t dep_sum = 0;
  for (StorageId d : candidates_) dep_sum += d;
  for (StorageId s = storages_seen_; s <= last_new && on_plan_; ++s) {
    if (s >= hints_.nodes.size()) {
      depart("storage " + std::to_string(s) + " is past the plan's " +
             std::to_string(hints_.nodes.size()) + " nodes");
      break;
    }
    const PlanHints::Node& node = hints_.nodes[s];
    if (engine.storage_size(s) != node.size_bytes) {
      depart("storage " + std::to_string(s) + " has " + std::to_string(engine.storage_size(s)) +
             " bytes, the plan's node " + std::to_string(s) + " has " +
             std::to_string(node.size_bytes));
    } else if (candidates_.size() != node.dep_count || dep_sum != node.dep_sum) {
      depart("storage " + std::to_string(s) + "'s op reads other storages (" +
             std::to_string(candidates_.size()) + ") than the plan's node " + std::to_string(s) +
             " depends on (" + std::to_string(node.dep_count) + ")");
    }
  }
  storages_seen_ = last_new + 1;
  stage_ = int64_t{last_new};
}

bool PlanGuide::should_drop(StorageId s) const {
  if (s >= hints_.nodes.size()) return false;
  const PlanHints::Node& node = hints_.nodes[s];
  if (node.last_use != PlanHints::kNever && int64_t{node.last_use} <= stage_) return true;
  return node.forward_drop != PlanHints::kNever && int64_t{node.forward_drop} <= stage_ &&
         stage_ < int64_t{hints_.first_backward};
}

void PlanGuide::end_op(Engine& engine, OpId op) {
  if (!on_plan_) {
    remats_.clear();
    return;
  }
  if (op != kNoId) {
    check_new_storages(engine, op);
    if (!on_plan_) {
      ++engine.stats().plan_departures;
      remats_.clear();
      return;
    }
  }
  // Note [Undemanded siblings]: what this op and its remats read.
  read_.clear();
  auto add_inputs = [&](OpId o) {
    for (TensorId t : engine.op_inputs(o)) read_.push_back(engine.storage_of(t));
  };
  if (op != kNoId) add_inputs(op);
  for (OpId o : remats_) add_inputs(o);
  std::sort(read_.begin(), read_.end());
  candidates_ = read_;
  if (op != kNoId)
    for (TensorId t : engine.op_outputs(op)) candidates_.push_back(engine.storage_of(t));
  for (OpId o : remats_) {
    for (TensorId t : engine.op_outputs(o)) {
      const StorageId s = engine.storage_of(t);
      candidates_.push_back(s);
      if (s < hints_.nodes.size() && hints_.nodes[s].forward_drop != PlanHints::kNever &&
          !std::binary_search(read_.begin(), read_.end(), s) && engine.is_evictable(s) &&
          engine.drop(s))
        ++drops_;
    }
  }
  remats_.clear();
  if (candidates_.empty()) return;
  std::sort(candidates_.begin(), candidates_.end());
  candidates_.erase(std::unique(candidates_.begin(), candidates_.end()), candidates_.end());
  for (StorageId s : candidates_)
    if (engine.is_evictable(s) && should_drop(s) && engine.drop(s)) ++drops_;
}

}  // namespace dtr
