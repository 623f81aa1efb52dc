// plan_guide.h: warm start: the dynamic runtime follows a static plan's drops.
//
// A static plan (planner/, docs/planner.md) says which storages to keep (checkpoints) and
// which to drop after their forward use and recompute in the backward. PlanGuide makes a
// running engine follow it: at the end of every forward op it drops (Engine::drop) the
// storages the plan drops at that point, so the memory the plan frees is freed before the
// budget is reached and the heuristic has nothing to search for while reality follows the
// plan. Whatever the plan does not foresee is left to the engine's heuristic: if memory
// still runs out (the plan was made for a larger budget, the allocator fragments, the
// program holds references longer than the graph says) the heuristic evicts as in a cold
// run; if the program departs from the graph the plan was made for (another storage size,
// other inputs, more storages than the plan has nodes), the guide stops dropping for good
// and the run continues as a cold run of the heuristic. Note [Warm start] in
// eviction/plan_guide.cpp has the rules.
//
// The guide knows no files and no graphs: it reads PlanHints, one entry per storage in
// creation order, which the planner layer derives from a plan and the graph of the trace
// it was made for (planner/warm_start.cpp: the k-th storage a replay of that trace makes
// is graph node k). The guide numbers storages itself, in the order it sees them made, so
// a host that reuses retired storage ids (Engine::reuse_retired) is followed as well as
// one that does not (Note [Creation index]). It is an EngineHooks decorator: it watches
// which remats run (forwarding every call to the host's own hooks, if any), and the host
// calls end_op() after each op it records (call, record, constant: naming the op) and
// after each materialize or pin, when the engine holds no locks but the pinned ones.
//
// Thread safety: as the engine's (one thread at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtr/eviction/engine.h"

namespace dtr {

// What a plan says about each storage, by creation index (= graph node index).
struct PlanHints {
  static constexpr uint32_t kNever = UINT32_MAX;
  struct Node {
    uint64_t size_bytes = 0;  // the graph's size: a different size is a departure
    uint32_t dep_count = 0;   // distinct input storages of the op that makes it
    uint64_t dep_sum = 0;     // their indices, summed (a cheap fingerprint of the deps)
    // Drop once the forward pass has made node `last_use` (its last user, or itself when it
    // has none); kNever for pinned nodes.
    uint32_t last_use = kNever;
    // A `recompute` forward node read in the backward: drop once the forward pass has made
    // node `forward_drop` (its last forward user, or itself) and until the backward pass
    // makes node `backward_use` (its first backward user); kNever otherwise.
    uint32_t forward_drop = kNever;
    uint32_t backward_use = kNever;
    // Whether that use is a read by an event that makes no storage (an in-place write into
    // another storage, a pin), which comes after the op that made node `last_use` (resp.
    // `forward_drop`): Note [Reads after a stage] in eviction/plan_guide.cpp.
    bool last_use_read = false;
    bool forward_drop_read = false;
    bool backward = false;  // made by a backward pass (a graph of several steps has several)
  };
  std::vector<Node> nodes;
  // The nodes that read node k: users[user_begin[k] .. user_begin[k + 1]).
  std::vector<uint32_t> user_begin;
  std::vector<uint32_t> users;
  std::string source;           // what the hints came from, for messages ("plan.json (rotor)")
};

class PlanGuide : public EngineHooks {
 public:
  // `hints` must outlive the guide; `inner` (the host's hooks, or null) gets every call.
  // The guide must be given to `engine` as its hooks (bind before the first op).
  explicit PlanGuide(const PlanHints& hints, EngineHooks* inner = nullptr);
  void bind(Engine& engine) { engine_ = &engine; }

  void on_compute(OpId op, bool remat) override;
  void on_evict(StorageId s) override;
  void after_remat(OpId op) override;
  void on_retire(OpId op) override {
    if (inner_) inner_->on_retire(op);
  }
  void on_compact(uint64_t blocks, uint64_t moved_bytes, uint64_t released_bytes) override {
    if (inner_) inner_->on_compact(blocks, moved_bytes, released_bytes);
  }
  bool stop_remats() override { return inner_ && inner_->stop_remats(); }
  bool may_recompute(OpId op) override { return !inner_ || inner_->may_recompute(op); }
  // Forgets the storage's creation index: its id may name a new storage after the host's
  // next Engine::reuse_retired() (Note [Creation index]).
  void on_retire_storage(StorageId s) override;

  // After each op the host records (`op`: Engine::op_of of one of its outputs) and after
  // each materialize or pin (`op` = kNoId): checks the storages the op made against the
  // plan, then drops what the plan drops now.
  void end_op(Engine& engine, OpId op = kNoId);

  bool on_plan() const { return on_plan_; }
  uint64_t drops() const { return drops_; }
  // Empty while on plan; else why the guide stopped ("storage 12: 4096 bytes, the plan's
  // node 12 has 2048").
  const std::string& departure() const { return departure_; }
  // The plan node of storage `s` (its creation index), or PlanHints::kNever when the guide
  // has not seen it made or it was retired (Note [Creation index]).
  uint32_t node_of(StorageId s) const {
    return s < node_of_.size() ? node_of_[s] : PlanHints::kNever;
  }

 private:
  void check_new_storages(const Engine& engine, OpId op);
  void depart(std::string why);
  bool should_drop(StorageId s) const;
  // Whether a use at stage `q` has passed (`read`: a read after that stage's op).
  bool passed(uint32_t q, bool read) const {
    return int64_t{q} < stage_ || (int64_t{q} == stage_ && (!read || reads_done_));
  }
  bool node_material(uint32_t node) const;

  const PlanHints& hints_;
  EngineHooks* inner_;
  Engine* engine_ = nullptr;  // for after_remat
  bool on_plan_ = true;
  std::string departure_;
  uint64_t drops_ = 0;
  int64_t stage_ = -1;        // the last node the forward pass made (-1: none yet)
  bool reads_done_ = false;   // an event after the stage's op ran: Note [Reads after a stage]
  uint32_t nodes_seen_ = 0;   // creation indices given so far
  // Note [Creation index]: storage id -> plan node, and back (kNever: unknown, retired).
  std::vector<uint32_t> node_of_;
  std::vector<StorageId> storage_of_node_;
  std::vector<OpId> remats_;    // remats run since the last end_op
  std::vector<StorageId> candidates_;  // scratch: storages to look at
  std::vector<StorageId> read_;        // scratch: storages the op and its remats read
  std::vector<TensorId> walk_, visited_;  // scratch: an op's inputs, through in-place writes
  std::vector<StorageId> fresh_;       // scratch: the storages an op made
};

}  // namespace dtr
