// engine.h: the DTR engine: lineage, eviction and rematerialization under a hard budget.
//
// Vocabulary (docs/architecture.md): a *storage* is the unit of memory and of eviction; a
// *tensor* is a view of a storage (the root tensor made it, alias tensors are views);
// an *op* is one recorded call: its input tensors, its output tensors and its compute cost
// (its *lineage*). *Evict* frees a storage but keeps its lineage; *remat* re-runs the op
// that made it. *Pin* forbids eviction for good (constants, outputs); a *lock* forbids it
// while an op that reads the storage runs.
//
// The engine knows nothing of PyTorch or files. The host (the simulator, or the torch
// integration) records ops through `call`, references through `retain`/`release`, and
// learns what to free and what to recompute through EngineHooks.
//
// Invariants (checked by is_valid(), after every operation at debug level 3):
//  - live_bytes() == sum of sizes of material storages <= budget_bytes();
//  - a storage is in the eviction pool iff it is material, unlocked and not pinned;
//  - a defined tensor has a material storage;
//  - a storage's external references are the sum of its tensors';
//  - with eq classes on, an evicted storage has a class node and a material one has none.
//
// Semantics follow DTR's simulator (simrd, RuntimeV2EagerOptimized) so that results can be
// compared with the paper's: see Note [Faithful to simrd] in engine.cpp.
//
// Memory (Note [Budget owner] in engine.cpp). Alone, the engine keeps the budget by byte
// accounting, as DTR's simulator does. With a CachingAllocator attached (EngineMemory), the
// allocator owns the budget: the engine registers itself as the allocator's eviction
// callback and evicts when an allocation does not fit, and heuristics may read the blocks
// in address order (kFeatureAddressOrder: the `coop` window search). A block's owner is
// owner_of(storage). Either the engine allocates each storage's memory itself (the
// simulator, over the fake backend) or the host does and tells the engine nothing but the
// owner (the torch integration: PyTorch allocates through the allocator hook).
//
// Thread safety: none. One engine is driven by one thread at a time (the torch
// integration serialises calls under its own lock).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/clock.h"
#include "dtr/core/stats.h"
#include "dtr/core/status.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/heuristic.h"

namespace dtr {

using TensorId = uint32_t;
using OpId = uint32_t;
constexpr uint32_t kNoId = UINT32_MAX;

enum class SearchMode : uint8_t {
  full,    // score every evictable storage (exact; DTR's simulator does this)
  sample,  // score a random subset of ceil(sqrt(n)) (or `sample_size`) storages
};
SearchMode parse_search_mode(const std::string& text);  // throws ConfigError
const char* search_mode_name(SearchMode mode);

struct EngineConfig {
  uint64_t budget_bytes = UINT64_MAX;  // hard cap on live bytes
  SearchMode search = SearchMode::full;
  uint32_t sample_size = 0;  // 0: ceil(sqrt(pool size))
  bool dead_first = false;   // Note [Dead storages first] in eviction/engine.cpp
  double dead_first_ratio = 16;  // 0: a dead storage always first; else bounded (same Note)
  bool lazy_release = false;  // Note [Lazy release] in eviction/engine.cpp
  // > 0: a storage the program drops is kept to the end of the period while a storage the
  // program holds, at most two ops downstream, is at least this many times its size (Note
  // [Dropped inputs of large results] in eviction/engine.cpp); 0: as the policy says
  // (Heuristic::keep_near_large: off, but for dtr_eq_keep).
  double keep_near_large = 0;
  bool relax_locks = true;    // Note [Relaxed remat locks] in eviction/engine.cpp
  uint64_t seed = 0;
  uint64_t max_remat_ns = 0;  // 0: unlimited; else `thrash` once remat compute exceeds it
  uint32_t debug = 0;         // 3: check invariants after every operation
  // When the engine allocates (EngineMemory::engine_allocates) and the allocator's reserved
  // limit refuses a segment: move material storages no op holds before evicting (Note
  // [Compaction in the engine] in engine.cpp). The simulator's reserved_limit sets it.
  bool compact = false;
  // For a host with no collector of its own (the simulator): when nothing is left to
  // evict, discard the pinned storages the program dropped and no lineage needs (Note
  // [Collecting dropped pins] in engine.cpp). The torch host collects them itself.
  bool collect_pins = false;
};

// What an op produces: one entry per output.
struct OutputSpec {
  uint64_t size_bytes = 0;  // ignored for an alias
  int32_t alias = -1;       // index of the input this output is a view of, or -1
};

// How the host carries out the engine's decisions. Default: pure accounting (simulator).
class EngineHooks {
 public:
  virtual ~EngineHooks() = default;
  // `op` runs now (remat: again): its inputs are material and locked, its outputs that were
  // evicted become material when this returns. The host may allocate here (an attached
  // allocator may then ask the engine to evict other storages).
  virtual void on_compute(OpId op, bool remat) {}
  // Storage `s` lost its memory (heuristic eviction or eager eviction of a dead storage).
  virtual void on_evict(StorageId s) {}
  // Remat `op` ran and its inputs were unlocked, inside a materialization: the host may
  // drop (Engine::drop) storages that are not locked, as a warm-start plan does with
  // intermediates it no longer needs (eviction/plan_guide.h).
  virtual void after_remat(OpId op) {}
  // Asked after each remat of a materialization that is not nested in another (not one
  // the host started while it ran an op of another, in on_compute): true abandons it,
  // every lock it took undone, and it returns Status::thrashing() (Note [Stopping a
  // materialization] in engine.cpp).
  virtual bool stop_remats() { return false; }
  // Asked before remat `op` runs, its inputs material and locked: false abandons the
  // materialization as stop_remats does, before the op runs, and it returns
  // Status::refused() (Note [Refused remats] in engine.cpp).
  virtual bool may_recompute(OpId op) { return true; }
  // Asked before the policy's choice `s` is evicted to make room: false when s could not
  // be made again now, after the host has taken it out of the pool for good (pinned it);
  // the engine then chooses again (Note [Unrecomputable victims] in engine.cpp).
  virtual bool may_evict(StorageId s) { return true; }
  // Note [Retiring] in engine.cpp: `op` and its output tensors are forgotten (the host
  // may still read op_inputs/op_outputs/storage_of during the call); their ids come back
  // at the next reuse_retired().
  virtual void on_retire(OpId op) {}
  // Storage `s` is forgotten (its last tensor retired); its id comes back likewise.
  virtual void on_retire_storage(StorageId s) {}
  // The allocator moved `blocks` live blocks (`moved_bytes`) and gave `released_bytes` of
  // segments back (Engine::compact_allocator).
  virtual void on_compact(uint64_t blocks, uint64_t moved_bytes, uint64_t released_bytes) {}
};

// The caching allocator the engine works with, if any (see the header comment).
struct EngineMemory {
  CachingAllocator* allocator = nullptr;  // must outlive the engine
  bool engine_allocates = false;          // true: the engine allocates each storage itself
};

class Engine {
 public:
  // Throws ConfigError if `heuristic` needs a feature this engine lacks (address order
  // needs an allocator). With an allocator, the engine becomes its eviction callback.
  Engine(EngineConfig config, std::unique_ptr<Heuristic> heuristic, Clock& clock,
         EngineHooks* hooks = nullptr, EngineMemory memory = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- driving the engine -------------------------------------------------------------
  // Records an op on `inputs` and runs it (making room first); appends its output tensors
  // to `outputs` (each with one external reference) even when the status is not ok.
  // `compute_ns` is what the op cost when the program ran it; `remat_ns`, what re-making
  // its outputs costs, when the host has a cheaper way than running it again (Note [Remat
  // cost] in engine.cpp); kSameCost: the same. It is the trace's value for a CALL without
  // REMAT_TIME, so a trace's cost passes to the engine and back unchanged.
  // `workspace_bytes`: scratch the op holds while it runs, beside its outputs, every time
  // it runs (Note [Op workspace] in engine.cpp); a trace's WORKSPACE.
  static constexpr uint64_t kSameCost = TraceEvent::kSameTime;
  Status call(uint64_t compute_ns, const std::vector<TensorId>& inputs,
              const std::vector<OutputSpec>& specs, std::vector<TensorId>& outputs,
              uint64_t remat_ns = kSameCost, uint64_t workspace_bytes = 0);
  // A constant: computed at no cost and pinned.
  Status constant(uint64_t size_bytes, TensorId& out);
  void retain(TensorId t);   // one more external reference
  // One fewer; a dead storage is evicted at once (eager eviction), or kept to the period's
  // end under option keep_near_large (Note [Dropped inputs of large results]).
  void release(TensorId t);
  Status materialize(TensorId t);  // make `t` defined, rematerializing as needed
  Status pin(TensorId t);          // materialize and pin for good
  // Frees storages until `bytes` more fit the engine's own budget (no-op when an allocator
  // owns the budget).
  Status make_room(uint64_t bytes);
  // The allocator's side of the out-of-memory chain (EvictionCallback::make_room): evicts
  // until `bytes_needed` more bytes fit the budget, or, when `contiguous`, until a free
  // block of `bytes_needed` may exist. Returns the (block-rounded) bytes freed; 0 when
  // nothing is evictable. Note [Evicting for the allocator].
  uint64_t free_for_allocator(uint64_t bytes_needed, bool contiguous);
  // The allocator's compaction step (EvictionCallback::compact): with config().compact and
  // engine-owned memory, lets CachingAllocator::compact move the blocks of material
  // storages not in use. Returns the segment bytes released (0: nothing moved).
  uint64_t compact_for_allocator(uint64_t bytes_requested);
  // CachingAllocator::compact on the attached allocator with `mover` (the engine's own, or
  // a host's that moves its storages itself); when segments went back, tells the hooks
  // what moved (EngineHooks::on_compact), e.g. for a timeline. Returns the bytes released.
  uint64_t compact_allocator(uint64_t bytes_requested, BlockMover& mover);
  // The storage the policy would evict now (the pool must not be empty); evicts nothing.
  StorageId choose_victim();
  // A period of the program ended (the PyTorch host: as each optimizer step returns; a
  // replay: at ANNOTATE STEP): tells the heuristic what the period cost
  // (Heuristic::on_period), counted from the previous call or the engine's start.
  void end_period();
  // The host's budget changed (not at start): tells the heuristic
  // (Heuristic::on_budget_changed).
  void budget_changed() { heuristic_->on_budget_changed(); }
  // What the current period has cost so far (from the last end_period() or the start).
  PeriodCost period_cost() const;
  // Evicts `s` now because the host says so (a warm-start plan: eviction/plan_guide.h), not
  // to make room; counted in dtr.num_plan_drops. False, and nothing done, when `s` is not
  // evictable (evicted, locked or pinned).
  bool drop(StorageId s);

  // --- hosts that run an op before recording it (the torch integration) -----------------
  // Note [Recording an op that ran]. Like call(), but the op has already run: its inputs
  // must be defined (lock_tensors), its outputs are material on return, and the host is
  // not asked to compute it (on_compute comes only for remats).
  Status record(uint64_t compute_ns, const std::vector<TensorId>& inputs,
                const std::vector<OutputSpec>& specs, std::vector<TensorId>& outputs,
                uint64_t remat_ns = kSameCost);
  // A storage the engine cannot recompute (external memory, a seeded-random op's output):
  // recorded as an op without inputs, then pinned.
  Status record_constant(uint64_t size_bytes, TensorId& out);
  // Makes every tensor of `ts` defined and locks its storage, until unlock_tensors(ts)
  // with the same list (a tensor may appear twice). Defined tensors are locked first, so
  // rematerializing one input never evicts another. On failure nothing stays locked.
  Status lock_tensors(const std::vector<TensorId>& ts);
  void unlock_tensors(const std::vector<TensorId>& ts);
  // The host promises `s` will never be read again, nor rematerialized through: unpins it
  // and evicts it if material and unlocked (Note [Discarding]), then retires what can go
  // (Note [Retiring]).
  void discard(StorageId s);
  // Lets new ops, tensors and storages take the ids of retired ones (Note [Retiring]). The
  // host calls it when it holds none of those ids any more.
  void reuse_retired();
  // With EngineConfig::collect_pins: storages the host needs beyond those the program
  // holds (the replay's pins that wait for a storage to be material), asked at each
  // collect; an empty function for none. Note [Collecting dropped pins].
  void set_collect_roots(std::function<void(std::vector<StorageId>&)> roots) {
    collect_roots_ = std::move(roots);
  }
  // Whether discard() was called for `s` (or it was retired since).
  bool is_discarded(StorageId s) const { return storages_[s].discarded || storages_[s].retired; }

  // Block owners in the allocator: storage s <-> s + 1 (0 is "no owner").
  static uint64_t owner_of(StorageId s) { return uint64_t{s} + 1; }
  static StorageId storage_of_owner(uint64_t owner) { return static_cast<StorageId>(owner - 1); }
  CachingAllocator* allocator() const { return memory_.allocator; }

  // --- state, for hosts, heuristics and tests -------------------------------------------
  uint64_t budget_bytes() const { return config_.budget_bytes; }
  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t evictable_bytes() const { return pool_bytes_; }
  // Live bytes that cannot be evicted now: pinned, or locked by a running op or remat.
  uint64_t unevictable_bytes() const { return live_bytes_ - pool_bytes_; }
  // Of those, the bytes only a running op or remat holds (locked, not pinned): they become
  // evictable again when it returns (Note [Out-of-memory breakdown]).
  uint64_t in_use_bytes() const {
    const uint64_t unevictable = unevictable_bytes();
    return unevictable > stats_.pinned_current ? unevictable - stats_.pinned_current : 0;
  }
  Tick now() const { return clock_.now(); }
  const Stats& stats() const { return stats_; }
  Stats& stats() { return stats_; }
  const EngineConfig& config() const { return config_; }
  const Heuristic& heuristic() const { return *heuristic_; }

  // Ids in use so far: the tables' sizes (retired ids included, Note [Retiring]).
  size_t num_storages() const { return storages_.size(); }
  size_t num_tensors() const { return tensors_.size(); }
  size_t num_ops() const { return ops_.size(); }
  bool is_retired(OpId op) const { return ops_[op].retired; }
  size_t pool_size() const { return pool_.size(); }

  StorageId storage_of(TensorId t) const { return tensors_[t].storage; }
  OpId op_of(TensorId t) const { return tensors_[t].op; }
  bool is_defined(TensorId t) const { return tensors_[t].defined; }
  // The tensor the outermost materialization in progress was asked for (kNoId outside one),
  // and how many frames deep it is now: Note [Out-of-memory within a remat] in
  // integration/torch/lineage.cpp. The caller holds the engine (its lock, in a host).
  TensorId materializing() const { return frames_.empty() ? kNoId : frames_.front().tensor; }
  size_t materialize_depth() const { return frames_.size(); }
  uint32_t external_refs(TensorId t) const { return tensors_[t].ext_refs; }
  const std::vector<TensorId>& op_inputs(OpId op) const { return ops_[op].inputs; }
  const std::vector<TensorId>& op_outputs(OpId op) const { return ops_[op].outputs; }
  uint64_t op_compute_ns(OpId op) const { return ops_[op].compute_ns; }
  uint64_t op_remat_ns(OpId op) const { return ops_[op].remat_ns; }  // Note [Remat cost]
  uint64_t op_workspace_bytes(OpId op) const { return ops_[op].workspace_bytes; }

  uint64_t storage_size(StorageId s) const { return storages_[s].size_bytes; }
  uint64_t storage_compute(StorageId s) const { return storages_[s].compute_ns; }
  // How many times a remat has made s material again in the current period (since the last
  // end_period(), or since s was first computed).
  uint32_t storage_remakes(StorageId s) const {
    return storages_[s].remake_period == period_ ? storages_[s].remakes : 0;
  }
  bool is_material(StorageId s) const { return storages_[s].material; }
  bool is_pinned(StorageId s) const { return storages_[s].pinned; }
  bool is_evictable(StorageId s) const { return storages_[s].pool_index >= 0; }
  bool is_locked(StorageId s) const { return storages_[s].locks > 0; }
  // Locked by a running op or remat (a pin holds one lock of its own, which does not count).
  bool is_in_use(StorageId s) const { return storages_[s].locks > (storages_[s].pinned ? 1u : 0u); }
  uint32_t storage_refs(StorageId s) const { return storages_[s].ext_refs; }
  const std::vector<TensorId>& storage_tensors(StorageId s) const { return storages_[s].tensors; }
  const std::vector<TensorId>& tensor_children(TensorId t) const { return tensors_[t].children; }
  uint64_t pool_seq(StorageId s) const { return storages_[s].pool_seq; }
  const std::vector<StorageId>& pool() const { return pool_; }
  Tick last_access(StorageId s) const { return storages_[s].last_access; }
  // Note [Search clock] in engine.cpp: within a search, the time it began.
  Tick staleness(StorageId s) const {
    return (searching_ ? search_now_ : clock_.now()) - storages_[s].last_access;
  }
  // Compute of the evicted storages reachable from `s` through evicted storages, along
  // children (forward) or parents (backward). Needs kFeatureNeighborhood. The search stops
  // as soon as the sum passes `stop_above` and returns what it has summed so far (Note
  // [Cutoff scores] in candidate_search.cpp).
  uint64_t evicted_neighborhood_compute(StorageId s, bool forward,
                                        uint64_t stop_above = UINT64_MAX) const;
  // What rematerializing the storages on `stack` may go through: their parents, and the
  // parents of those through unpinned ones (a pinned storage is never recomputed). `mark(s)`
  // marks s and says whether it was unmarked; the caller marks the roots. Empties `stack`.
  // A host's collector finds so what lineage still needs (the torch host's mark_needed, the
  // replay's Note [Pins when material]).
  template <typename Mark>
  void walk_needed_parents(std::vector<StorageId>& stack, Mark&& mark) const {
    while (!stack.empty()) {
      const StorageId s = stack.back();
      stack.pop_back();
      for (TensorId t : storages_[s].tensors) {
        for (TensorId p : ops_[tensors_[t].op].inputs) {
          const StorageId ps = tensors_[p].storage;
          if (mark(ps) && !storages_[ps].pinned) stack.push_back(ps);
        }
      }
    }
  }
  // s's compute plus the compute of every distinct eq class among s's evicted neighbours.
  // Needs kFeatureEqClasses.
  uint64_t eq_class_cost(StorageId s) const;
  // Whether the program holds s and the op that made it read an unpinned storage the
  // program holds no more (Note [Live storages on dead lineage] in
  // eviction/heuristics/dtr_eq_heuristic.cpp).
  bool on_dead_lineage(StorageId s) const;
  // Note [Dropped inputs of large results]: a storage the program holds, unpinned, at least
  // `ratio` times s's size, made by an op that read s or read a storage made from s.
  bool near_large_held(StorageId s, double ratio) const;

  // All invariants; on failure `why` says which (debug level 3 calls this after every op).
  bool is_valid(std::string* why = nullptr) const;

 private:
  // release(); may_keep false when the engine lets go of what it kept (end_period).
  void release_ref(TensorId t, bool may_keep);
  struct StorageRec {
    // What scoring reads comes first, in one cache line: a sampled search touches one
    // random record per candidate.
    uint64_t size_bytes = 0;
    uint64_t compute_ns = 0;  // sum over the distinct ops of its tensors of their remat_ns
    Tick last_access = 0;
    uint64_t pool_seq = 0;           // when it last entered the pool: Note [Tie-breaking]
    uint32_t evicted_neighbors = 0;  // Note [Evicted neighbour count]
    uint32_t eq_node = kNoId;
    int32_t pool_index = -1;  // position in pool_, -1 if not evictable
    int32_t dead_index = -1;  // position in dead_pool_: Note [Dead storages first]
    uint32_t locks = 0;
    uint32_t ext_refs = 0;
    mutable uint32_t visit_epoch = 0;
    bool material = false;
    bool pinned = false;
    bool discarded = false;  // Engine::discard: Note [Children of discarded storages]
    bool retired = false;    // Note [Retiring]
    bool lazily_released = false;   // dead, material, in lazy_released_: Note [Lazy release]
    uint32_t dropped_parents = 0;   // edges from dropped parents: Note [Dropped parent count]
    uint32_t remakes = 0;           // times a remat made it material again in remake_period
    uint32_t remake_period = 0;     // the period (end_period) remakes counts in
    void* memory = nullptr;         // the allocator block, when the engine allocates
    std::vector<TensorId> tensors;  // root first, then aliases
  };
  struct TensorRec {
    StorageId storage = kNoId;
    OpId op = kNoId;
    uint32_t ext_refs = 0;
    bool defined = false;
    std::vector<TensorId> children;  // outputs of ops that read this tensor
    uint32_t children_kept = 0;      // size after the last compact_children
  };
  struct OpRec {
    uint64_t compute_ns = 0;
    uint64_t remat_ns = 0;     // Note [Remat cost]
    uint64_t total_bytes = 0;  // sum of non-alias output sizes
    uint64_t workspace_bytes = 0;  // Note [Op workspace]
    std::vector<TensorId> inputs;
    std::vector<TensorId> outputs;
    uint32_t readers = 0;  // inputs of unretired ops that are this op's outputs
    bool retired = false;  // Note [Retiring]
  };
  struct EqNode {
    uint32_t parent;
    uint32_t size;
    int64_t compute_ns;
  };
  struct Frame {  // one pending materialization: Note [Explicit remat stack]
    TensorId tensor;
    bool remat;
    uint32_t pending_begin, pending_end, cursor;
    uint32_t held_begin;
  };

  class AllocatorLink;  // the EvictionCallback given to the allocator

  Status run_materialize(TensorId t, bool remat);
  StorageId next_victim();  // Note [Unrecomputable victims]; kNoId: the pool is empty
  bool may_evict(StorageId s);  // asks the host; on no, counts it (it left the pool)
  void enter_frame(TensorId t, bool remat);
  bool relax_remat_locks();  // Note [Relaxed remat locks]
  bool has_relaxed() const;  // the outermost call has relaxed: its frames lock late
  void push_parents_late(const std::vector<TensorId>& inputs);  // Note [Late remat locks]
  Status allocate_outputs(TensorId t);                          // fills transient_blocks_
  void free_transient_blocks();
  void compute(TensorId t, bool remat);
  void evict(StorageId s, bool eager);
  void lock(StorageId s);
  void unlock(StorageId s);
  void pool_insert(StorageId s);
  void pool_remove(StorageId s);
  OomInfo oom_info(uint64_t requested) const;
  void check_invariants() const;
  void compact_children(TensorId t);
  OpId new_op();
  TensorId new_tensor();
  StorageId new_storage();
  void dead_pool_insert(StorageId s);
  void dead_pool_remove(StorageId s);
  uint64_t evict_lazily_released();
  uint64_t collect_pins();  // Note [Collecting dropped pins]: bytes freed
  void try_retire(StorageId s);
  bool retirable(OpId op) const;
  // Note [Dropped parent count]: adds delta to the count of each child edge of ps.
  void count_child_edges(StorageId ps, int delta);
  void count_edge(StorageId ps, TensorId c, int delta);  // the edge ps -> c, unless c is on ps
  bool dropped(StorageId s) const { return storages_[s].ext_refs == 0 && !storages_[s].pinned; }
  void retire_op(OpId op);
  void retire_storage(StorageId s);
  void compact_eq_nodes();

  uint32_t eq_find(uint32_t node) const;
  void eq_on_evict(StorageId s);
  void eq_on_remat(StorageId s);
  void recount_evicted_neighbors(StorageId s);
  template <typename F>
  void for_each_neighbor(StorageId s, F&& f) const;
  template <typename F>
  void for_each_edge(StorageId s, F&& f) const;  // each adjacent tensor, once per edge

  EngineConfig config_;
  EngineMemory memory_;
  std::unique_ptr<AllocatorLink> link_;
  std::unique_ptr<Heuristic> heuristic_;
  Clock& clock_;
  EngineHooks default_hooks_;
  EngineHooks* hooks_;
  bool track_eq_ = false;
  bool op_already_ran_ = false;  // Note [Recording an op that ran]

  std::vector<StorageRec> storages_;
  std::vector<TensorRec> tensors_;
  std::vector<OpRec> ops_;
  std::vector<StorageId> pool_;
  std::vector<StorageId> dead_pool_;  // the pool's storages with no external reference
  std::vector<StorageId> lazy_released_;  // Note [Lazy release]; entries may be stale
  std::vector<TensorId> kept_to_period_end_;  // Note [Dropped inputs of large results]
  uint64_t kept_bytes_ = 0;                   // their sizes, at most keep_cap_bytes()
  static constexpr uint64_t kKeepBudgetShare = 16;  // same Note
  uint64_t keep_cap_bytes() const;                  // the budget / kKeepBudgetShare
  double keep_ratio() const;  // option keep_near_large if set, else the policy's (0: no keep)
  uint64_t budget_in_force() const;  // the allocator's budget if attached, else the engine's
  uint64_t pool_bytes_ = 0;
  uint64_t pool_seq_next_ = 0;
  uint64_t live_bytes_ = 0;
  // Note [Retiring]: ids retired since the last reuse_retired(), and ids free for reuse.
  std::vector<OpId> retired_ops_, free_ops_;
  std::vector<TensorId> retired_tensors_, free_tensors_;
  std::vector<StorageId> retired_storages_, free_storages_;
  std::vector<OpId> retire_work_;
  std::vector<StorageId> recount_;
  bool retiring_ = false;
  mutable std::vector<EqNode> eq_nodes_;
  size_t eq_compact_at_ = 4096;  // compact_eq_nodes() when eq_nodes_ reaches this
  mutable uint32_t epoch_ = 0;
  mutable std::vector<StorageId> dfs_stack_;
  // Note [Search work] in engine.cpp: counted here (the search is const), copied into
  // stats_ after each search.
  mutable uint64_t neighborhood_visits_ = 0;
  // Note [Search clock] in engine.cpp: set by a SearchScope while a search runs.
  bool searching_ = false;
  Tick search_now_ = 0;
  // Note [Neighbourhoods within one search] in engine.cpp: the evicted storages the
  // search's neighbourhood scores reached, numbered in the order reached, with their
  // evicted neighbours as those numbers, listed once per search and direction.
  struct LocalNode {
    StorageId storage = kNoId;
    uint32_t begin[2] = {0, 0}, end[2] = {0, 0};  // its range of local_adj_, [forward]
    bool listed[2] = {false, false};
  };
  mutable std::vector<LocalNode> local_nodes_;
  // Per local number, apart, as a walk reads them for every neighbour it meets: the
  // local_epoch_ of the last walk that reached it, and its compute.
  mutable std::vector<uint32_t> local_visit_;
  mutable std::vector<uint64_t> local_compute_;
  mutable std::vector<uint32_t> local_adj_;
  mutable std::vector<uint64_t> local_of_;  // per storage: search_gen_ << 32 | local number
  mutable uint32_t local_epoch_ = 0;
  uint32_t search_gen_ = 0;
  uint32_t local_node(StorageId s) const;
  void list_neighbors(uint32_t node, bool forward) const;
  uint64_t search_neighborhood(StorageId base, bool forward, uint64_t stop_above) const;
  uint64_t walk_records(StorageId base, bool forward, uint64_t stop_above) const;
  struct SearchScope {
    Engine& e;
    explicit SearchScope(Engine& engine);
    ~SearchScope();
  };

  std::vector<Frame> frames_;
  std::vector<TensorId> pending_;
  std::vector<StorageId> held_;
  // Blocks an op holds only while it runs, where the engine allocates: its workspace and
  // the copies a remat makes of outputs still material (Note [Duplicate outputs in the
  // peak] in engine.cpp). Taken in allocate_outputs, freed as the op returns; ops do not
  // nest between the two, so one buffer serves.
  std::vector<void*> transient_blocks_;
  size_t materialize_base_ = 0;  // frames_ of the innermost run_materialize start here
  uint32_t relaxations_left_ = 0;  // Note [Relaxed remat locks], per outermost call
  // Note [Collecting dropped pins]: last releases, pins and discards so far, and their
  // count at the last collect that freed nothing (it need not run again until it moves).
  uint64_t lineage_changes_ = 0;
  uint64_t fruitless_collect_at_ = UINT64_MAX;
  std::function<void(std::vector<StorageId>&)> collect_roots_;
  std::mt19937_64 rng_;
  std::vector<std::pair<double, StorageId>> search_scratch_;
  Stats stats_;
  Stats period_start_;  // stats_ at the last end_period()
  uint32_t period_ = 0;  // end_period() calls so far: StorageRec::remake_period
};

}  // namespace dtr
