// plan_guide.cpp: warm start: a running engine follows a static plan (plan_guide.h).
//
// Note [Warm start]
// ~~~~~~~~~~~~~~~~~
// The k-th storage the run makes is node k of the plan's graph: the graph is built from the
// trace by the same walk that turns the trace into engine calls (Note [Trace to graph] in
// planner/graph.cpp, Note [Trace to engine] in sim/replay.cpp), one node per storage in
// creation order (Note [Creation index] for how the guide counts). The guide drops what the
// common evaluator frees (Note [Static execution] in planner/plan_eval.cpp), with the
// forward pass's progress as its clock: `stage` is the last node made, and a storage that
// is evictable (material, not locked, not pinned) is dropped when
//  - its last use has passed: last_use <= stage (the graph lets a node die after its last
//    use; a trace often holds the reference longer, until autograd lets go of it), or
//  - the plan recomputes it, the stage is a forward node past its last forward use and
//    before its first backward use: forward_drop <= stage < backward_use. This is the drop
//    that a checkpointing plan saves memory by; the backward's first use rematerializes it
//    (and its dropped ancestors, back to the nearest checkpoints) on demand, as the
//    evaluator does, and the recomputed copy then lives until its last use. A trace of
//    several training steps has a backward pass per step (Note [Backward passes of a
//    recorded trace] in planner/graph.cpp): each node's own step decides, not one cut.
//    (Before: one cut at the first backward node, so the second step of a 2-step trace
//    followed none of the plan's forward drops.)
// A node's uses include what makes no node of its own: an in-place write that reads it, a
// pin (Note [In-place writes] in planner/graph.cpp). Without them the guide dropped the
// storages such events read right before they read them: on a 2-step ResNet-18 trace the
// weight gradients the optimizer reads and the residual branches that `out += identity`
// reads, each drop costing a remat of a whole backward chain (435 remats, status thrash,
// where the plan recomputes 189 nodes).
// Checkpoints (`keep` nodes) are simply never dropped before their last use.
//
// Note [Reads after a stage]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A read by an event that makes no storage comes after the op that made its stage's node
// and before the next node is made. So a use at stage q that is such a read has passed
// only once the stage is past q, or an event that makes no storage has run at stage q
// (`reads_done_`: an in-place write or a pin; the guide cannot tell which storage a pin
// pins, but a pinned storage is not evictable anyway). Two reads of one storage at the
// same stage count as one: the second may find it dropped and rematerialize it.
//
// Note [Creation index]
// ~~~~~~~~~~~~~~~~~~~~~
// A host that retires ids and reuses them (the torch host calls Engine::reuse_retired()
// after each full collect: Note [Retiring] in eviction/engine.cpp) gives a new storage the
// id of a retired one, so a StorageId is not a creation index. The guide keeps its own:
// when an op it is told about makes a storage it has no index for, the storage gets the
// next one, in the op's output order (the graph's order of an op's results); the index is
// the storage's plan node. on_retire_storage forgets it, so the reused id gets a fresh
// index when the guide sees it made again. Nothing else about ids is assumed: the dep
// fingerprint and every hint lookup go through the index.
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

void PlanGuide::on_retire_storage(StorageId s) {
  // Note [Creation index]: the id may come back as another storage.
  const uint32_t node = node_of(s);
  if (node != PlanHints::kNever) {
    node_of_[s] = PlanHints::kNever;
    if (node < storage_of_node_.size()) storage_of_node_[node] = kNoId;
  }
  if (inner_) inner_->on_retire_storage(s);
}

// Whether plan node `node` is material now. A retired node counts as material: it was
// discarded, so nothing will compute it again.
bool PlanGuide::node_material(uint32_t node) const {
  if (node >= nodes_seen_) return false;  // not made yet
  const StorageId s = storage_of_node_[node];
  return s == kNoId || engine_->is_material(s);
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
    const uint32_t node = node_of(s);
    if (node == PlanHints::kNever || node + 1 >= hints_.user_begin.size()) return false;
    for (uint32_t k = hints_.user_begin[node]; k < hints_.user_begin[node + 1]; ++k)
      if (!node_material(hints_.users[k])) return false;
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
  // Note [Creation index]: the op's output storages the guide has no index for, in order.
  fresh_.clear();
  for (TensorId t : engine.op_outputs(op)) {
    const StorageId s = engine.storage_of(t);
    if (engine.storage_tensors(s).front() != t || node_of(s) != PlanHints::kNever) continue;
    if (std::find(fresh_.begin(), fresh_.end(), s) == fresh_.end()) fresh_.push_back(s);
  }
  if (fresh_.empty()) {  // a view or an in-place write: no new storage, the stage stays
    reads_done_ = true;  // Note [Reads after a stage]
    return;
  }
  // The deps of each node it makes: the op's distinct input storages and, for an input
  // made by an in-place write, what that write read (Note [In-place writes] in
  // planner/graph.cpp), as creation indices.
  candidates_.clear();
  walk_.assign(engine.op_inputs(op).begin(), engine.op_inputs(op).end());
  visited_.clear();
  while (!walk_.empty()) {
    const TensorId t = walk_.back();
    walk_.pop_back();
    if (std::find(visited_.begin(), visited_.end(), t) != visited_.end()) continue;
    visited_.push_back(t);
    const StorageId s = engine.storage_of(t);
    candidates_.push_back(node_of(s));
    if (engine.storage_tensors(s).front() != t)  // an alias: defined by its own op
      for (TensorId u : engine.op_inputs(engine.op_of(t))) walk_.push_back(u);
  }
  std::sort(candidates_.begin(), candidates_.end());
  candidates_.erase(std::unique(candidates_.begin(), candidates_.end()), candidates_.end());
  uint64_t dep_sum = 0;
  for (uint32_t d : candidates_) dep_sum += d;
  for (StorageId s : fresh_) {
    const uint32_t k = nodes_seen_;
    if (k >= hints_.nodes.size()) {
      depart("storage " + std::to_string(k) + " is past the plan's " +
             std::to_string(hints_.nodes.size()) + " nodes");
      break;
    }
    const PlanHints::Node& node = hints_.nodes[k];
    if (engine.storage_size(s) != node.size_bytes) {
      depart("storage " + std::to_string(k) + " has " + std::to_string(engine.storage_size(s)) +
             " bytes, the plan's node " + std::to_string(k) + " has " +
             std::to_string(node.size_bytes));
      break;
    }
    if (candidates_.size() != node.dep_count || dep_sum != node.dep_sum) {
      depart("storage " + std::to_string(k) + "'s op reads other storages (" +
             std::to_string(candidates_.size()) + ") than the plan's node " + std::to_string(k) +
             " depends on (" + std::to_string(node.dep_count) + ")");
      break;
    }
    if (s >= node_of_.size()) node_of_.resize(size_t{s} + 1, PlanHints::kNever);
    node_of_[s] = k;
    storage_of_node_.push_back(s);
    ++nodes_seen_;
  }
  if (!on_plan_) return;
  stage_ = int64_t{nodes_seen_} - 1;
  reads_done_ = false;
}

bool PlanGuide::should_drop(StorageId s) const {
  const uint32_t k = node_of(s);
  if (k == PlanHints::kNever || k >= hints_.nodes.size()) return false;
  const PlanHints::Node& node = hints_.nodes[k];
  if (node.last_use != PlanHints::kNever && passed(node.last_use, node.last_use_read)) return true;
  return node.forward_drop != PlanHints::kNever && passed(node.forward_drop, node.forward_drop_read) &&
         stage_ < int64_t{node.backward_use} && !hints_.nodes[stage_].backward;
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
  } else {
    reads_done_ = true;  // a materialize or pin: Note [Reads after a stage]
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
      const uint32_t k = node_of(s);
      if (k < hints_.nodes.size() && hints_.nodes[k].forward_drop != PlanHints::kNever &&
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
