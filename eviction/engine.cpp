// engine.cpp: the DTR engine (see engine.h for the model and its invariants).
//
// Note [Faithful to simrd]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The order of every step below follows DTR's simulator (simrd, RuntimeV2EagerOptimized),
// because the order decides which storage is stalest, which is in the pool first, and so
// which one a heuristic picks. To materialize tensor t:
//   1. every parent's storage is marked accessed now;
//   2. every defined parent is locked; then each parent that was undefined at that moment
//      is materialized (unless an earlier one's op already made it) and locked (where
//      nothing is left to evict, Note [Relaxed remat locks] departs from this);
//   3. room is made for *all* of t's op's outputs (an op recomputes every output);
//   4. the op runs: the clock advances by its cost, all its outputs are charged, outputs
//      that were still material are discarded again (their duplicate bytes freed);
//      storages that became material enter the pool, siblings first, t last;
//   5. parents are unlocked in argument order (so they re-enter the pool in that order).
// An alias tensor becomes undefined when its storage is evicted and is re-defined by
// re-running its (view) op, whose cost is charged, as simrd does.
// Where we deliberately differ, docs/simulator.md says so with numbers. Fragmentation is
// not modelled by the engine: with a caching allocator attached it is real (Note [Budget
// owner]).
//
// Note [Budget owner]
// ~~~~~~~~~~~~~~~~~~~
// Exactly one party enforces the budget. Without an allocator it is the engine: before an
// op runs, make_room evicts until the op's output bytes fit (step 3 above), by exact byte
// accounting. With an allocator it is the allocator, whose view is the true one (sizes
// rounded to blocks, free memory split into blocks that may each be too small): step 3 is
// skipped, and an allocation that does not fit calls free_for_allocator through the
// allocator's eviction callback. That call can come while the engine is inside compute()
// (the simulator allocates outputs there; a torch remat allocates inside on_compute), so
// compute() only calls out when the engine is consistent: parents locked, the outputs not
// yet material and so not in the pool (they cannot be chosen to make room for themselves).
// live_bytes() still counts exact storage bytes; the allocator's stats count blocks.
//
// Note [Explicit remat stack]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Rematerializing a storage may need its parents rematerialized first, and so on up a
// chain as long as the model (thousands of ops for an LSTM). simrd recurses; we keep an
// explicit stack of Frames so depth is bounded by memory, not by the C++ stack. A frame's
// undefined parents are a slice [pending_begin, pending_end) of `pending_` and `cursor`
// walks it; every lock a frame takes is also pushed on `held_` from `held_begin`, so an
// out-of-memory or thrash status unwinds all frames and leaves no storage locked.
//
// Note [Stopping a materialization]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A host that watches its remats' wall time (the torch host's thrash watch, Note
// [Thrashing within one op] in integration/torch/lineage.cpp) may want a cascade stopped
// that it cannot stop itself: an exception thrown from inside a remat would leave frames,
// locks and half-made outputs behind. So after each remat the engine asks the host
// (EngineHooks::stop_remats) and, on yes, unwinds as for `thrash` under max_remat_ns: every
// frame of the materialization, with its locks. What was rematerialized stays material
// and in the pool; the target stays undefined. Only an outermost materialization is
// stopped: a nested one was started by the host while it ran an op of the outer one
// (EngineHooks::on_compute), so its caller could only throw through the engine. The outer
// one is asked once that op is done.
//
// Note [Refused remats]
// ~~~~~~~~~~~~~~~~~~~~~
// A host may know that an op can no longer be recomputed faithfully: the torch host
// fingerprints inputs whose memory the program can write without the dispatcher, and a
// remat that would read changed bytes would make different values, silently (Note [Writes
// outside the dispatcher] in integration/torch/lineage.cpp). So before each remat runs,
// with its parents material and locked, the engine asks (EngineHooks::may_recompute) and,
// on no, unwinds the materialization as in Note [Stopping a materialization], at any
// depth: nothing of the refused op has run, its outputs stay undefined, the parents
// already remade stay material, and the caller gets Status::refused().
//
// Note [Host exceptions]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The host may throw from on_compute: the torch host runs the op's kernel there, and when
// the kernel asks for more than make_room freed (a temporary, a workspace, or no free
// block large enough) and nothing more can be evicted, its allocator raises PyTorch's
// out-of-memory error from inside the kernel. The exception passed through the engine and
// left the frames of the materialization, and their locks, behind: after a training step
// that ran out of memory in backward, caught by the program (a batch-size finder halves the
// batch and tries again), the locked storages stayed "in use by the running op" for good,
// and the retry ran out of memory at a budget a fresh run fit in. So an exception from
// on_compute unwinds the materialization as a status does (Note [Stopping a
// materialization]): every frame of it and every lock it took; what was remade stays
// material; the op that threw left its outputs undefined. lock_tensors undoes its own locks
// the same way, and the exception goes on to the host's caller.
//
// Note [Dead storages first]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A storage nobody outside holds (ext_refs 0) is evicted eagerly when it dies, but a
// remat may make it material again: the intermediates of a chain (a linear layer's
// output on the way to its ReLU, the gradients of a backward chain) are recomputed for
// the one storage the chain ends in and then sit in the pool, young, so a staleness-based
// score evicts older live storages first, often the checkpoints the next remat needs. On
// a 12-layer MLP trace the replay then thrashed at 0.6 of the peak with every policy.
// choose_victim can therefore score the dead storages in the pool first and evict the
// best of them, running the usual search over the whole pool only when there are none.
// This departs from simrd (Note [Faithful to simrd]) and is not better everywhere, so it is
// option `dead_first`, off by default: it helps chains (the MLP trace above, 0.6: thrash ->
// 1.132; DTR's LSTM log at 0.2: 1.550 -> 1.337) but hurts the densenet121 trace of `make
// eval` (dtr_eq at 0.5: 1.320 -> thrash; why was not analysed). The dead storages get the
// full scan (Note [Tie-breaking]), under search=sample too: there are only those the remats
// since the last eviction brought back, since each eviction takes from them first. Numbers:
// docs/simulator.md, "Dead storages first".
// `dead_first_ratio` K > 0 bounds it: the usual search over the whole pool runs as well,
// and the best dead storage is taken only while its score is at most K times that search's
// best; otherwise the search's choice is. A dead storage far dearer than the best live one
// then stays, while the stale gradients and chain intermediates that dead_first is for,
// scored near the best, still go first. K = 16 kept densenet121's remats where they are
// without dead_first and most of dead_first's gains elsewhere, in replays and live
// (docs/pytorch.md, "Bounded dead-first"). It costs the usual search at every eviction,
// which dead_first alone skips while dead storages are there. The PyTorch host turns the
// bounded form on by default (DTR_PYTORCH_DEFAULTS in include/dtr/core/options.h): in live
// runs it took the lowest budgets lower and ended thrashing (a GAN at 0.7 of its peak:
// 11.8 s of remats under dtr_eq, 1.4 s with it), for about a hundredth of a step's time on
// the transformers at 0.5x, within the bench's spread (docs/pytorch.md, "Dead storages
// first by default"); the simulator keeps simrd's choice.
//
// Note [Relaxed remat locks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A frame locks its material parents when it is entered and keeps them while it remakes
// the others (Note [Explicit remat stack]), so a nested remat holds the parents of every
// frame below it. Remaking a gradient through a backward chain holds one activation per
// level: a 6-layer MLP (batch 1024, 2 MiB activations) whose gradients were evicted in the
// backward pass (`zero_grad(set_to_none=True)`, then `clip_grad_norm_` reading them, as in
// tests/torch/scripts/patterns.py --pattern clip) ran out of memory at 0.8 of its peak with
// 10 MiB locked this way, 8 MiB pinned and a 2 MiB request. So when nothing is left to
// evict during a nested remat, the frames below the top let go of their parents (the top
// one keeps its own: its op is about to run or running), become evictable with everything
// else, and on resuming check every parent again from the first, remaking what was evicted
// meanwhile. It costs remats, never memory, and changes nothing in a run that had room: it
// happens only where the run would have stopped with out-of-memory. A run can cycle (a
// frame's parents evict each other's ancestors), so each outermost materialization may
// relax kMaxRelaxations times; after that out-of-memory is reported as before. The cap
// decides how long a run at a budget no schedule of this policy meets takes to fail: the
// grad_penalty pattern at 0.6 of its peak (3 steps) failed after 4.6 s without relaxing,
// 7.7 and 8.8 s (two runs) with a cap of 4 and 55 s with 64, while caps of 2 to 64 all
// passed it at 0.7 (1 did not), and hooks at 0.7 and clip at 0.8 passed with every cap
// from 1. Where nothing converges,
// a replay may report `thrash` (max_overhead) where it reported `oom` before: 120 failed
// cells of a sweep of DTR's three logs (7 policies, budgets 0.05 to 0.60 by 0.01 and 0.1 to
// 0.9 by 0.1, byte accounting), while no replay that finished changed. Option
// `relax_locks` (default True; False is simrd's behaviour) turns it off. Once a
// materialization has relaxed, its frames lock late (Note [Late remat locks]).
//
// Note [Late remat locks]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Relaxing once was not always enough. The frames entered after a relaxation locked their
// material parents on entry as before, so the chain built its locks up again, and the next
// frame to find nothing to evict relaxed again, until the cap. On the two-losses pattern
// (tests/torch/scripts/patterns.py --pattern two_losses: a weight's gradient is the sum of
// two, each remade through its own backward chain, which locks one activation per level)
// the two chains took turns: remaking the second evicted the first's result as soon as the
// frame holding it let go, and the other way round. A live run under make test's load ran
// out of memory at 0.8 of the peak that way (`pinned 10.15 MiB, in use by the running op
// 13.00 MiB`, in the optimizer step), and replays of traces of the same script reproduce
// it to the byte. So once an outermost materialization has relaxed, every frame of it
// walks its parents late: the evicted ones first, then the material ones, each locked only
// when the walk reaches it and remade there if it was evicted meanwhile (push_parents_late).
// A chain then holds only the parents it has remade, not one material parent per level.
// Locking late leaves those parents evictable and may cost remats where simrd's order
// would have fit, and it is not simrd's order, so it starts only at a relaxation, where
// the materialization would otherwise have run out of memory. Replays that never relax are
// unchanged (five traces of the PyTorch host's scripts, and every finished cell of DTR's
// three logs). In replays of nine two_losses traces (dtr_eq, dtr, auto and msps, 0.3 to
// 0.9 of the peak by 0.05) 66 cells that ran out of memory finish, none the other way, and
// each materialization converged within kMaxRelaxations (a cap of 16 gave the same
// results); dtr_eq's lowest budget went from 0.7-0.85 to 0.65 (docs/pytorch.md, "Late
// remat locks").
//
// Note [Lazy release]
// ~~~~~~~~~~~~~~~~~~~~
// simrd evicts a storage the moment its last reference goes. The PyTorch host cannot:
// PyTorch does not say when a tensor dies, so the host finds deaths by scanning, at every
// eviction request and every 64 ops (Note [Temporaries] in integration/torch/lineage.cpp).
// Until then a dead storage stays material, and the next op's remats read it as a parent
// rather than recompute it. On gradient accumulation (tests/torch/scripts/patterns.py, 4
// micro-batches) that decides feasibility: replays of traces recorded with no budget ran
// out of memory at 0.8 of the peak with every setting tried, where the live run trains at
// 0.75. With option `lazy_release` a replay models the host: a storage whose last reference
// is released stays material (and in dead_pool_, for `dead_first`) until the next eviction
// request, which evicts all such storages at once, as the host's collect does, before it
// asks the policy for victims. The host refuses the option at start: its scans already do
// this, and with no budget nothing would ever free the storages. Off by default
// (Note [Faithful to simrd]); docs/simulator.md, "Lazy release", has the numbers.
//
// Note [Tie-breaking]
// ~~~~~~~~~~~~~~~~~~~
// simrd keeps the pool as a Python list (appended when a storage becomes evictable) and
// scans it with `cost <= best`, stopping at the first zero cost. So among equal costs the
// storage that entered the pool *last* wins, and among zero costs the one that entered
// *first*. We keep the pool as a vector with O(1) swap-removal and record `pool_seq` at
// insertion; candidate_search.cpp reproduces that order from the sequence numbers.
#include "dtr/eviction/engine.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dtr/core/check.h"
#include "dtr/core/options.h"
#include "eviction/candidate_search.h"

namespace dtr {

SearchMode parse_search_mode(const std::string& text) {
  if (text == "full") return SearchMode::full;
  if (text == "sample") return SearchMode::sample;
  throw ConfigError("dtr: unknown search mode '" + text + "'; valid: full, sample");
}

const char* search_mode_name(SearchMode mode) {
  return mode == SearchMode::full ? "full" : "sample";
}

std::string feature_names(uint32_t features) {
  static const char* const kNames[] = {"staleness", "neighborhood", "eq_classes", "address_order"};
  std::string out;
  for (int i = 0; i < 4; ++i) {
    if (features & (1u << i)) {
      if (!out.empty()) out += ", ";
      out += kNames[i];
    }
  }
  return out.empty() ? "none" : out;
}

// Note [Relaxed remat locks]: relaxations allowed per outermost materialization.
constexpr uint32_t kMaxRelaxations = 4;

// The features an engine provides. Address order needs an allocator's view of blocks.
static constexpr uint32_t kEngineFeatures =
    kFeatureStaleness | kFeatureNeighborhood | kFeatureEqClasses;

class Engine::AllocatorLink : public EvictionCallback {
 public:
  explicit AllocatorLink(Engine& engine) : engine_(engine) {}
  uint64_t make_room(uint64_t bytes_needed, bool contiguous_request) override {
    return engine_.free_for_allocator(bytes_needed, contiguous_request);
  }
  uint64_t compact(uint64_t bytes_requested) override {
    return engine_.compact_for_allocator(bytes_requested);
  }
  uint64_t pinned_bytes() const override { return engine_.unevictable_bytes(); }
  uint64_t evictable_bytes() const override { return engine_.evictable_bytes(); }
  uint64_t in_use_bytes() const override { return engine_.in_use_bytes(); }

 private:
  Engine& engine_;
};

Engine::Engine(EngineConfig config, std::unique_ptr<Heuristic> heuristic, Clock& clock,
               EngineHooks* hooks, EngineMemory memory)
    : config_(config),
      memory_(memory),
      heuristic_(std::move(heuristic)),
      clock_(clock),
      hooks_(hooks ? hooks : &default_hooks_),
      rng_(config.seed) {
  DTR_CHECK(heuristic_ != nullptr, "engine needs a heuristic");
  DTR_CHECK(memory_.allocator || !memory_.engine_allocates,
            "engine_allocates needs an allocator");
  const uint32_t provided =
      kEngineFeatures | (memory_.allocator ? uint32_t{kFeatureAddressOrder} : 0u);
  uint32_t missing = heuristic_->needs() & ~provided;
  if (missing) {
    throw ConfigError("dtr: policy '" + std::string(heuristic_->name()) + "' needs " +
                      feature_names(missing) + ", which this engine does not provide (" +
                      feature_names(provided) +
                      "); address order needs the caching allocator attached "
                      "(dtr-sim: --allocator host or fake)");
  }
  track_eq_ = (heuristic_->needs() & kFeatureEqClasses) != 0;
  if (memory_.allocator) {
    link_ = std::make_unique<AllocatorLink>(*this);
    memory_.allocator->set_eviction_callback(link_.get());
  }
}

Engine::~Engine() {
  if (!memory_.allocator) return;
  memory_.allocator->set_eviction_callback(nullptr);
  if (memory_.engine_allocates)
    for (StorageRec& rec : storages_) memory_.allocator->free(rec.memory);
}

// --- the pool ---------------------------------------------------------------------------

void Engine::pool_insert(StorageId s) {
  StorageRec& rec = storages_[s];
  DTR_ASSERT(rec.pool_index < 0 && rec.material && rec.locks == 0, "bad pool insert");
  rec.pool_index = static_cast<int32_t>(pool_.size());
  rec.pool_seq = pool_seq_next_++;
  pool_.push_back(s);
  pool_bytes_ += rec.size_bytes;
  if (rec.ext_refs == 0) dead_pool_insert(s);  // Note [Dead storages first]
}

void Engine::pool_remove(StorageId s) {
  StorageRec& rec = storages_[s];
  DTR_ASSERT(rec.pool_index >= 0, "storage not in pool");
  StorageId last = pool_.back();
  pool_[rec.pool_index] = last;
  storages_[last].pool_index = rec.pool_index;
  pool_.pop_back();
  rec.pool_index = -1;
  pool_bytes_ -= rec.size_bytes;
  dead_pool_remove(s);
}

void Engine::dead_pool_insert(StorageId s) {
  StorageRec& rec = storages_[s];
  if (rec.dead_index >= 0) return;
  rec.dead_index = static_cast<int32_t>(dead_pool_.size());
  dead_pool_.push_back(s);
}

void Engine::dead_pool_remove(StorageId s) {
  StorageRec& rec = storages_[s];
  if (rec.dead_index < 0) return;
  const StorageId last = dead_pool_.back();
  dead_pool_[rec.dead_index] = last;
  storages_[last].dead_index = rec.dead_index;
  dead_pool_.pop_back();
  rec.dead_index = -1;
}

void Engine::lock(StorageId s) {
  StorageRec& rec = storages_[s];
  DTR_ASSERT(rec.material, "cannot lock an evicted storage");
  if (rec.locks == 0 && rec.pool_index >= 0) pool_remove(s);
  ++rec.locks;
}

void Engine::unlock(StorageId s) {
  StorageRec& rec = storages_[s];
  DTR_ASSERT(rec.material && rec.locks > 0, "unlock without lock");
  if (--rec.locks == 0) pool_insert(s);
}

// --- recording ----------------------------------------------------------------------------

// Note [Remat cost]
// ~~~~~~~~~~~~~~~~~
// An op has two costs: what it took when the program ran it (compute_ns: the clock, the
// model's compute, the baseline) and what re-making its outputs takes (remat_ns: the
// clock and remat compute at a remat, and the cost every heuristic scores, through the
// storage's compute_ns). They differ when the host keeps a cheaper way back than running
// the op again: the torch host keeps a dropout mask packed to bits and unpacks it at a
// remat, which is several times cheaper than drawing it again (Note [Packed masks] in
// integration/torch/lineage.cpp). A trace carries it as REMAT_TIME (docs/trace-format.md).
//
// Note [Op workspace]
// ~~~~~~~~~~~~~~~~~~~
// Some ops hold scratch memory while they run beside their outputs: a CPU convolution's
// columns or oneDNN's reorders, freed before the op returns. A live run counts it in the
// allocator (and the budget) for the op's duration, every time the op runs, remats
// included; the PyTorch host measures it while tracing (Note [Measuring workspaces] in
// integration/torch/cpu_allocator.cpp) and a trace carries it as WORKSPACE. The engine
// charges it where it makes room for an op (step 3 of Note [Faithful to simrd]): byte
// accounting makes room for outputs and workspace together and counts both in the peak;
// an engine that allocates (the simulator over an allocator) takes a block of that size
// after the outputs, with no owner (nothing moves or evicts it), and frees it as the op
// returns. The workspace is no storage: no tensor names it and no heuristic sees it.
Status Engine::call(uint64_t compute_ns, const std::vector<TensorId>& inputs,
                    const std::vector<OutputSpec>& specs, std::vector<TensorId>& outputs,
                    uint64_t remat_ns, uint64_t workspace_bytes) {
  DTR_CHECK(!specs.empty(), "an op has at least one output");
  const OpId op = new_op();
  OpRec& rec = ops_[op];
  rec.compute_ns = compute_ns;
  rec.remat_ns = remat_ns == kSameCost ? compute_ns : remat_ns;
  rec.workspace_bytes = workspace_bytes;
  rec.inputs = inputs;
  const size_t first_output = outputs.size();
  for (const OutputSpec& spec : specs) {
    const TensorId t = new_tensor();
    StorageId s;
    if (spec.alias >= 0) {
      DTR_CHECK(static_cast<size_t>(spec.alias) < inputs.size(), "alias index out of range");
      s = tensors_[inputs[spec.alias]].storage;
    } else {
      s = new_storage();
      storages_[s].size_bytes = spec.size_bytes;
      rec.total_bytes += spec.size_bytes;
    }
    TensorRec& trec = tensors_[t];
    trec.op = op;
    trec.ext_refs = 1;
    trec.storage = s;
    StorageRec& srec = storages_[s];
    // A storage's compute counts each distinct op among its tensors once.
    bool op_seen = false;
    for (TensorId other : srec.tensors) op_seen |= tensors_[other].op == op;
    if (!op_seen) srec.compute_ns += rec.remat_ns;
    srec.tensors.push_back(t);
    if (dropped(s)) count_child_edges(s, -1);  // an alias output: Note [Dropped parent count]
    ++srec.ext_refs;
    dead_pool_remove(s);  // referenced again (an alias output): Note [Dead storages first]
    srec.lazily_released = false;
    rec.outputs.push_back(t);
    outputs.push_back(t);
  }
  bool alias_output = false;
  for (const OutputSpec& spec : specs) alias_output |= spec.alias >= 0;
  for (TensorId in : inputs) {
    TensorRec& trec = tensors_[in];
    ++ops_[trec.op].readers;
    // Note [Children of discarded storages]
    if (trec.children.size() >= 64 && trec.children.size() >= 2 * trec.children_kept)
      compact_children(in);
    trec.children.insert(trec.children.end(), rec.outputs.begin(), rec.outputs.end());
    if (dropped(trec.storage))  // Note [Dropped parent count]
      for (TensorId out : rec.outputs) count_edge(trec.storage, out, +1);
  }
  if (track_eq_) {
    // New edges may join storages to evicted inputs: Note [Evicted neighbour count]. An
    // input gains only this op's outputs as neighbours, and a new output storage was never
    // evicted, so an input's count can change only through an alias output (a storage
    // that existed before).
    if (alias_output)
      for (TensorId in : inputs)
        if (!storages_[tensors_[in].storage].pinned) recount_evicted_neighbors(tensors_[in].storage);
    for (TensorId out : rec.outputs) recount_evicted_neighbors(tensors_[out].storage);
  }
  ++stats_.num_ops;

  Status status = run_materialize(rec.outputs[0], /*remat=*/false);
  if (status.ok()) {
    const Tick now = clock_.now();
    for (size_t i = first_output; i < outputs.size(); ++i)
      storages_[tensors_[outputs[i]].storage].last_access = now;
  }
  if (config_.debug >= 3) check_invariants();
  return status;
}

// Note [Recording an op that ran]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The simulator asks the engine to run each op; a live host (PyTorch) has to run it first:
// only then does it know the outputs' sizes, and the op's own allocations go through the
// allocator, which may ask the engine to evict meanwhile (the host locks the inputs with
// lock_tensors first). record() goes through exactly the steps of call(), so the pool
// order, clock and stats are the simulator's, except that compute() does not call the
// host for this op: its outputs already exist.
Status Engine::record(uint64_t compute_ns, const std::vector<TensorId>& inputs,
                      const std::vector<OutputSpec>& specs, std::vector<TensorId>& outputs,
                      uint64_t remat_ns) {
  for (TensorId in : inputs)
    DTR_CHECK(tensors_[in].defined, "record: an input of an op that ran is not defined");
  op_already_ran_ = true;
  Status status = call(compute_ns, inputs, specs, outputs, remat_ns);
  op_already_ran_ = false;
  return status;
}

Status Engine::record_constant(uint64_t size_bytes, TensorId& out) {
  std::vector<TensorId> outs;
  Status status = record(0, {}, {OutputSpec{size_bytes, -1}}, outs);
  out = outs[0];
  if (!status.ok()) return status;
  return pin(out);
}

Status Engine::lock_tensors(const std::vector<TensorId>& ts) {
  // Defined inputs first: rematerializing an evicted one may evict, and must not take
  // another input away (ARCHITECTURE.md "Proven" 7).
  // Which are locked: on the stack for an op's usual handful of inputs (a live host
  // calls this before every op).
  char few[16];
  std::vector<char> many;
  char* locked = few;
  if (ts.size() > sizeof(few)) {
    many.resize(ts.size());
    locked = many.data();
  }
  std::fill(locked, locked + ts.size(), 0);
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!tensors_[ts[i]].defined) continue;
    lock(tensors_[ts[i]].storage);
    locked[i] = 1;
  }
  auto undo = [&] {
    for (size_t j = 0; j < ts.size(); ++j)
      if (locked[j]) unlock(tensors_[ts[j]].storage);
  };
  for (size_t i = 0; i < ts.size(); ++i) {
    if (locked[i]) continue;
    if (!tensors_[ts[i]].defined) {
      Status status = Status::success();
      try {
        status = run_materialize(ts[i], /*remat=*/true);
      } catch (...) {  // Note [Host exceptions]
        undo();
        throw;
      }
      if (!status.ok()) {
        undo();
        return status;
      }
    }
    lock(tensors_[ts[i]].storage);
    locked[i] = 1;
  }
  if (config_.debug >= 3) check_invariants();
  return Status::success();
}

void Engine::unlock_tensors(const std::vector<TensorId>& ts) {
  for (TensorId t : ts) unlock(tensors_[t].storage);
}

// Note [Discarding]
// ~~~~~~~~~~~~~~~~~
// A live host learns late that a storage is dead (its tensors were dropped while lineage
// still refers to it) and later still that no live storage can ever be rematerialized
// through it. Eager eviction (release) frees the first kind unless it is pinned: a
// seeded-random output such as a dropout mask, or an old parameter value kept for the
// lineage that read it. discard() frees such a storage for good; the host must never
// name it again.
void Engine::discard(StorageId s) {
  StorageRec& rec = storages_[s];
  rec.discarded = true;
  ++lineage_changes_;  // Note [Collecting dropped pins]
  if (rec.pinned) {
    rec.pinned = false;
    if (rec.ext_refs == 0) count_child_edges(s, +1);  // Note [Dropped parent count]
    stats_.pinned_current -= rec.size_bytes;
    if (track_eq_) recount_evicted_neighbors(s);  // not kept while pinned
    unlock(s);
  }
  if (rec.material && rec.locks == 0)
    evict(s, /*eager=*/true);  // retires what it can
  else
    try_retire(s);
  if (config_.debug >= 3) check_invariants();
}

// Note [Collecting dropped pins]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pinned storage the program drops stays until the host discards it: an old parameter
// value, a seeded-random output, a result under min_evictable, a constant. The torch host
// finds with its collector when no lineage needs one any more, batched, and at the latest
// when nothing else can be evicted (Note [Collects when making room] in
// integration/torch/lineage.cpp); its trace writes each such discard as a DISCARD. A
// replay follows those DISCARDs, which came where the traced run's collects came, under
// its own memory; under a smaller budget the live run collects sooner, and a replay that
// waited for the DISCARD ran out of memory where the live run would have collected. The
// case that showed it: a 6-op trace (a matrix product, sums read by .item()) replayed at
// exactly its baseline peak evicted the product's input and output, and pinning what the
// program held at the end needed 8 B more than the budget, the two 4 B sums the program
// had dropped, pinned as results under min_evictable and never discarded (the run ended
// before a collect). So with EngineConfig::collect_pins (the simulator sets it), when
// nothing is left to evict and before remat locks are relaxed, the engine does what the
// host's last-resort collect does: it marks what lineage needs, from every unpinned
// storage the program holds, every storage being materialized and the host's roots
// (set_collect_roots), through walk_needed_parents, and discards each pinned, material
// storage the program no longer holds that no running op locks and nothing marked. It
// runs again only after a last release, a pin or a discard since one that freed nothing.
// dtr.full_collects counts the collects that freed something.
uint64_t Engine::collect_pins() {
  if (!config_.collect_pins || fruitless_collect_at_ == lineage_changes_) return 0;
  std::vector<char> mark(storages_.size(), 0);
  std::vector<StorageId> stack;
  auto root = [&](StorageId s) {
    if (!mark[s]) mark[s] = 1, stack.push_back(s);
  };
  for (StorageId s = 0; s < storages_.size(); ++s) {
    const StorageRec& rec = storages_[s];
    if (rec.ext_refs > 0 && !rec.pinned) root(s);  // a retired record holds none
  }
  for (const Frame& frame : frames_) root(tensors_[frame.tensor].storage);
  if (collect_roots_) {
    std::vector<StorageId> extra;
    collect_roots_(extra);
    for (StorageId s : extra) root(s);
  }
  walk_needed_parents(stack, [&](StorageId s) {
    if (mark[s]) return false;
    mark[s] = 1;
    return true;
  });
  uint64_t freed = 0;
  for (StorageId s = 0; s < mark.size(); ++s) {
    const StorageRec& rec = storages_[s];
    // A pin holds one lock (pin()); more are a running op's.
    if (mark[s] || !rec.pinned || !rec.material || rec.ext_refs > 0 || rec.locks != 1) continue;
    freed += memory_.engine_allocates ? round_block_size(rec.size_bytes) : rec.size_bytes;
    discard(s);
  }
  if (freed > 0)
    ++stats_.full_collects;
  else
    fruitless_collect_at_ = lineage_changes_;
  return freed;
}

// Note [Children of discarded storages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A live host never forgets an op, and a tensor that every step reads (a parameter, a
// constant) gains children every step: walking them (eq-class counts, a host's walk of
// descendants) would grow with the length of the run. Children whose storage was
// discarded are never needed again, so a children list is compacted whenever it has
// doubled since its last compaction: amortized O(1) per edge.
void Engine::compact_children(TensorId t) {
  TensorRec& trec = tensors_[t];
  const bool from_dropped = dropped(trec.storage);  // Note [Dropped parent count]
  trec.children.erase(std::remove_if(trec.children.begin(), trec.children.end(),
                                     [&](TensorId c) {
                                       if (!storages_[tensors_[c].storage].discarded) return false;
                                       if (from_dropped) count_edge(trec.storage, c, -1);
                                       return true;
                                     }),
                      trec.children.end());
  trec.children_kept = static_cast<uint32_t>(trec.children.size());
}

// Note [Retiring]
// ~~~~~~~~~~~~~~~
// A live host records ops for as long as the program runs; without forgetting, the
// engine's tables (and the host's, indexed by the same ids) grow by a record per op for
// good (the torch host measured 2.4 KB per op: 10^6 ops, 2.7 GB). An op is *retired*
// when nothing can ever need it again:
//  - every output's storage is discarded (Note [Discarding]) and is not material, not
//    locked and unreferenced: it will never be read or recomputed;
//  - no unretired op reads one of its outputs (`readers`): no lineage walks through it.
// Retiring an op removes its edges (its outputs leave its inputs' children; each input's
// producer loses a reader, and may become retirable in turn: the walk goes backwards
// through discarded lineage), then forgets its output tensors, and a storage whose last
// tensor goes is forgotten too. The host hears on_retire / on_retire_storage first, while
// the records are intact. A retired storage was evicted with an eq class: its compute
// leaves the class (as at a remat), and storages that were its neighbours are recounted
// (Note [Evicted neighbour count]); nothing it touched can be needed, so no heuristic
// choice that could matter changes.
// Retired ids are reused only after the host calls reuse_retired(), when it has dropped
// them from its own lists, so an id never names two things at once in the host. Without
// that call (the simulator) ids are never reused: storage k stays the k-th one made,
// which a warm-start plan relies on (Note [Warm start]). Each eviction also adds an eq
// class node; reuse_retired() compacts those when they have doubled since the last time.
OpId Engine::new_op() {
  if (free_ops_.empty()) {
    ops_.emplace_back();
    return static_cast<OpId>(ops_.size() - 1);
  }
  const OpId op = free_ops_.back();
  free_ops_.pop_back();
  ops_[op].retired = false;
  return op;
}

TensorId Engine::new_tensor() {
  if (free_tensors_.empty()) {
    tensors_.emplace_back();
    return static_cast<TensorId>(tensors_.size() - 1);
  }
  const TensorId t = free_tensors_.back();
  free_tensors_.pop_back();
  return t;
}

StorageId Engine::new_storage() {
  if (free_storages_.empty()) {
    storages_.emplace_back();
    return static_cast<StorageId>(storages_.size() - 1);
  }
  const StorageId s = free_storages_.back();
  free_storages_.pop_back();
  storages_[s].retired = false;
  return s;
}

bool Engine::retirable(OpId op) const {
  const OpRec& rec = ops_[op];
  if (rec.retired || rec.readers > 0) return false;
  for (TensorId t : rec.outputs) {
    const StorageRec& srec = storages_[tensors_[t].storage];
    if (!srec.discarded || srec.material || srec.locks > 0 || srec.ext_refs > 0) return false;
  }
  return true;
}

void Engine::try_retire(StorageId s) {
  // Note [Retiring]. Re-entered from an eviction inside a retirement: the outer walk
  // goes on with what this one would find.
  const bool outer = !retiring_;
  retiring_ = true;
  for (TensorId t : storages_[s].tensors) retire_work_.push_back(tensors_[t].op);
  if (!outer) return;
  while (!retire_work_.empty()) {
    const OpId op = retire_work_.back();
    retire_work_.pop_back();
    if (retirable(op)) retire_op(op);
  }
  retiring_ = false;
}

void Engine::retire_op(OpId op) {
  hooks_->on_retire(op);
  OpRec& rec = ops_[op];
  recount_.clear();
  for (TensorId in : rec.inputs) {
    TensorRec& trec = tensors_[in];
    auto& children = trec.children;
    // call() appended the outputs once per occurrence of `in`: one of each goes per
    // occurrence. A plain search, stopping at the first match: lists are in recording
    // order and a collect retires oldest first, so it is found near the front.
    const bool from_dropped = dropped(trec.storage);  // Note [Dropped parent count]
    for (TensorId out : rec.outputs) {
      auto it = std::find(children.begin(), children.end(), out);
      if (it == children.end()) continue;
      children.erase(it);
      if (from_dropped) count_edge(trec.storage, out, -1);
    }
    trec.children_kept = std::min<uint32_t>(trec.children_kept,
                                            static_cast<uint32_t>(children.size()));
    OpRec& producer = ops_[trec.op];
    if (--producer.readers == 0) retire_work_.push_back(trec.op);
    recount_.push_back(trec.storage);
  }
  for (TensorId t : rec.outputs) {
    const StorageId s = tensors_[t].storage;
    auto& ts = storages_[s].tensors;
    ts.erase(std::find(ts.begin(), ts.end(), t));
    TensorRec& trec = tensors_[t];
    if (dropped(s))  // no unretired op reads t, so none is left: Note [Dropped parent count]
      for (TensorId c : trec.children) count_edge(s, c, -1);
    trec.storage = kNoId;
    trec.op = kNoId;
    trec.ext_refs = 0;
    trec.defined = false;
    trec.children.clear();
    trec.children_kept = 0;
    retired_tensors_.push_back(t);
    if (ts.empty())
      retire_storage(s);
    else
      recount_.push_back(s);
  }
  rec.compute_ns = rec.remat_ns = 0;
  rec.total_bytes = 0;
  rec.inputs.clear();
  rec.outputs.clear();
  rec.readers = 0;
  rec.retired = true;
  retired_ops_.push_back(op);
  ++stats_.num_retired_ops;
  if (track_eq_)
    for (StorageId s : recount_)
      if (!storages_[s].pinned && !storages_[s].retired) recount_evicted_neighbors(s);
}

void Engine::retire_storage(StorageId s) {
  StorageRec& rec = storages_[s];
  if (track_eq_ && rec.eq_node != kNoId)
    eq_nodes_[eq_find(rec.eq_node)].compute_ns -= static_cast<int64_t>(rec.compute_ns);
  hooks_->on_retire_storage(s);
  std::vector<TensorId> tensors = std::move(rec.tensors);
  rec = StorageRec{};
  rec.tensors = std::move(tensors);  // empty; keeps its capacity for the next storage
  rec.retired = true;
  retired_storages_.push_back(s);
}

void Engine::reuse_retired() {
  free_ops_.insert(free_ops_.end(), retired_ops_.begin(), retired_ops_.end());
  free_tensors_.insert(free_tensors_.end(), retired_tensors_.begin(), retired_tensors_.end());
  free_storages_.insert(free_storages_.end(), retired_storages_.begin(), retired_storages_.end());
  retired_ops_.clear();
  retired_tensors_.clear();
  retired_storages_.clear();
  if (eq_nodes_.size() >= eq_compact_at_) compact_eq_nodes();
}

// Each class becomes one node that every evicted storage of it points to; classes that no
// storage belongs to any more go. Costs and sizes are kept, so scores do not change.
void Engine::compact_eq_nodes() {
  std::vector<uint32_t> new_root(eq_nodes_.size(), kNoId);
  std::vector<EqNode> fresh;
  for (StorageRec& rec : storages_) {
    if (rec.eq_node == kNoId) continue;
    const uint32_t root = eq_find(rec.eq_node);
    if (new_root[root] == kNoId) {
      new_root[root] = static_cast<uint32_t>(fresh.size());
      fresh.push_back(EqNode{new_root[root], eq_nodes_[root].size, eq_nodes_[root].compute_ns});
    }
    rec.eq_node = new_root[root];
  }
  eq_nodes_.swap(fresh);
  eq_compact_at_ = std::max<size_t>(4096, 2 * eq_nodes_.size());
}

Status Engine::constant(uint64_t size_bytes, TensorId& out) {
  std::vector<TensorId> outs;
  Status status = call(0, {}, {OutputSpec{size_bytes, -1}}, outs);
  out = outs[0];
  if (!status.ok()) return status;
  return pin(out);
}

void Engine::retain(TensorId t) {
  TensorRec& trec = tensors_[t];
  DTR_CHECK(storages_[trec.storage].ext_refs > 0, "retain of a tensor with no references");
  ++trec.ext_refs;
  ++storages_[trec.storage].ext_refs;
}

void Engine::release(TensorId t) { release_ref(t, /*may_keep=*/true); }

void Engine::release_ref(TensorId t, bool may_keep) {
  TensorRec& trec = tensors_[t];
  StorageRec& srec = storages_[trec.storage];
  DTR_CHECK(trec.ext_refs > 0 && srec.ext_refs > 0, "release of a tensor with no references");
  --trec.ext_refs;
  --srec.ext_refs;
  if (srec.ext_refs == 0) ++lineage_changes_;  // Note [Collecting dropped pins]
  // Note [Dropped inputs of large results]: the engine holds the reference the program let go.
  // The ratio is asked for only at a last release (a virtual call under a policy).
  if (may_keep && srec.ext_refs == 0 && !srec.pinned && !srec.discarded) {
    const double ratio = keep_ratio();
    if (ratio > 0 && kept_bytes_ + srec.size_bytes <= keep_cap_bytes() &&
        near_large_held(trec.storage, ratio)) {
      kept_bytes_ += srec.size_bytes;
      ++trec.ext_refs;
      ++srec.ext_refs;
      kept_to_period_end_.push_back(t);
      ++stats_.num_kept_dropped;
      if (config_.debug >= 3) check_invariants();
      return;
    }
  }
  // Dropped now: Note [Dropped parent count].
  if (srec.ext_refs == 0 && !srec.pinned) count_child_edges(trec.storage, +1);
  // Eager eviction: nobody outside can reach a dead storage, so its memory goes now; its
  // lineage stays, in case a live descendant must be rematerialized through it.
  if (srec.ext_refs == 0 && srec.material && !srec.pinned) {
    DTR_CHECK(srec.locks == 0, "a dead storage is locked");
    if (config_.lazy_release) {  // Note [Lazy release]
      srec.lazily_released = true;
      lazy_released_.push_back(trec.storage);
      dead_pool_insert(trec.storage);  // Note [Dead storages first]
    } else {
      evict(trec.storage, /*eager=*/true);  // so it never enters dead_pool_ from here
    }
  } else if (srec.ext_refs == 0 && srec.discarded) {
    try_retire(trec.storage);
  }
  if (config_.debug >= 3) check_invariants();
}

Status Engine::materialize(TensorId t) {
  if (tensors_[t].defined) return Status::success();
  Status status = run_materialize(t, /*remat=*/true);
  if (config_.debug >= 3) check_invariants();
  return status;
}

Status Engine::pin(TensorId t) {
  Status status = materialize(t);
  if (!status.ok()) return status;
  StorageRec& srec = storages_[tensors_[t].storage];
  if (!srec.pinned) {
    if (srec.ext_refs == 0)
      count_child_edges(tensors_[t].storage, -1);  // Note [Dropped parent count]
    lock(tensors_[t].storage);
    ++lineage_changes_;  // Note [Collecting dropped pins]
    srec.pinned = true;
    srec.lazily_released = false;  // Note [Lazy release]: freed only by a discard now
    stats_.pinned_current += srec.size_bytes;
  }
  return status;
}

// --- eviction -----------------------------------------------------------------------------

void Engine::evict(StorageId s, bool eager) {
  StorageRec& rec = storages_[s];
  DTR_ASSERT(rec.material && rec.locks == 0 && !rec.pinned, "cannot evict this storage");
  pool_remove(s);
  rec.material = false;
  rec.lazily_released = false;
  live_bytes_ -= rec.size_bytes;
  stats_.allocated_current = live_bytes_;
  stats_.freed_total += rec.size_bytes;
  --stats_.allocation_current;
  for (TensorId t : rec.tensors) tensors_[t].defined = false;
  if (eager) {
    ++stats_.num_eager_evictions;
  } else {
    ++stats_.num_evictions;
    stats_.evicted_bytes += rec.size_bytes;
  }
  if (track_eq_) eq_on_evict(s);
  if (memory_.engine_allocates) {
    memory_.allocator->free(rec.memory);
    rec.memory = nullptr;
  }
  hooks_->on_evict(s);
  if (rec.discarded) try_retire(s);
}

// The budget the run is under: the attached allocator's (Note [Budget owner]) or the
// engine's own.
uint64_t Engine::budget_in_force() const {
  return memory_.allocator ? memory_.allocator->config().budget_bytes : config_.budget_bytes;
}

OomInfo Engine::oom_info(uint64_t requested) const {
  OomInfo info;
  info.budget_bytes = budget_in_force();
  info.live_bytes = live_bytes_;
  info.evictable_bytes = pool_bytes_;
  info.pinned_bytes = unevictable_bytes();
  info.in_use_bytes = in_use_bytes();
  info.requested_bytes = requested;
  return info;
}

// Note [Lazy release]: what died since the last eviction request goes first, all of it.
// A storage locked as a remat's parent stays for the next request. Returns block bytes.
uint64_t Engine::evict_lazily_released() {
  uint64_t freed = 0;
  size_t kept = 0;
  for (StorageId s : lazy_released_) {
    StorageRec& rec = storages_[s];
    if (!rec.lazily_released) continue;  // evicted, pinned or referenced since
    if (rec.locks > 0) {
      lazy_released_[kept++] = s;
      continue;
    }
    freed += round_block_size(rec.size_bytes);
    evict(s, /*eager=*/true);
  }
  lazy_released_.resize(kept);
  return freed;
}

Status Engine::make_room(uint64_t bytes) {
  if (memory_.allocator) return Status::success();  // Note [Budget owner]
  if (live_bytes_ + bytes > config_.budget_bytes) evict_lazily_released();
  while (live_bytes_ + bytes > config_.budget_bytes) {
    if (bytes > config_.budget_bytes) {
      ++stats_.num_ooms;
      return Status::out_of_memory(oom_info(bytes));
    }
    // Note [Collecting dropped pins], then Note [Relaxed remat locks].
    if (pool_.empty() && collect_pins() == 0 && !relax_remat_locks()) {
      ++stats_.num_ooms;
      return Status::out_of_memory(oom_info(bytes));
    }
    const StorageId victim = next_victim();
    if (victim != kNoId) evict(victim, /*eager=*/false);
  }
  return Status::success();
}

// Note [Evicting for the allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The allocator asks for room in two cases. Budget: `bytes_needed` more bytes must be
// freed; a scoring policy evicts its best choice until that many block bytes are freed.
// Contiguous: the budget has room but no free block of `bytes_needed` bytes exists (the
// free memory is fragmented); a scoring policy evicts one choice per call, and the
// allocator retries after each. A policy that reads address order (coop) instead evicts
// the cheapest window of adjacent blocks that frees enough, in one go (candidate_search.cpp,
// Note [Window search]), or for a contiguous request that no window serves, a whole
// segment (Note [Segment fallback]); when even that finds nothing, one scored choice.
// Each request also samples fragmentation: the free bytes within the budget at that
// moment (large at a contiguous request: memory was free, just not in one piece).
uint64_t Engine::free_for_allocator(uint64_t bytes_needed, bool contiguous) {
  DTR_CHECK(memory_.allocator != nullptr, "free_for_allocator without an allocator");
  const AllocatorStats astats = memory_.allocator->stats();
  const uint64_t budget = memory_.allocator->config().budget_bytes;
  const uint64_t allocated = astats.allocated_bytes.all.current;
  ++stats_.allocator_requests;
  if (contiguous) ++stats_.contiguous_requests;
  if (budget != kUnlimitedBytes && allocated < budget)
    stats_.fragmentation_free_bytes += budget - allocated;
  uint64_t freed = evict_lazily_released();  // Note [Lazy release]
  if (freed > 0 && (contiguous || freed >= bytes_needed)) return freed;
  if (pool_.empty()) {  // Note [Collecting dropped pins], then Note [Relaxed remat locks]
    freed += collect_pins();
    if (freed > 0 && (contiguous || freed >= bytes_needed)) return freed;
    if (!relax_remat_locks()) return freed;
  }

  auto evict_one = [&](StorageId s) {
    if (s == kNoId) return;
    freed += round_block_size(storages_[s].size_bytes);
    evict(s, /*eager=*/false);
  };
  if (heuristic_->needs() & kFeatureAddressOrder) {
    ++stats_.eviction_searches;
    const uint64_t released = freed;  // what Note [Lazy release] freed: short of the need
    std::vector<StorageId> window;
    {
      SearchScope scope{*this};
      CandidateSearch search{*this, *heuristic_, rng_, search_scratch_};
      window = search.window(memory_.allocator->blocks_in_address_order(), bytes_needed - released,
                             contiguous, stats_.candidates_scored);
    }
    for (StorageId s : window)  // each still evictable: may_evict pins only what it refuses
      if (may_evict(s)) evict_one(s);
    if (freed == released) evict_one(next_victim());
  } else if (contiguous) {
    evict_one(next_victim());
  } else {
    while (freed < bytes_needed) {
      if (pool_.empty()) {  // as above
        freed += collect_pins();
        if (freed >= bytes_needed || !relax_remat_locks()) break;
      }
      evict_one(next_victim());
    }
  }
  if (config_.debug >= 3) check_invariants();
  return freed;
}

// Note [Compaction in the engine]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The PyTorch host moves storages when its reserved limit refuses a segment (Note [Moving
// storages] in integration/torch/lineage.cpp); the simulator's fake device does the same
// when it is given a reserved limit of its own, so that a replay can say whether a budget
// and a limit fit together before a live run tries. Only where the engine allocates (it
// then holds every block's address, StorageRec::memory) and only with config().compact.
// What may move is what the host would move of a trace's storages: material and not in
// use (no running op or remat holds it; a pin's own lock does not count). A move only
// changes the address the engine holds: the fake device has no bytes to copy, and
// allocated bytes, evictions and remats stay as they were.
uint64_t Engine::compact_for_allocator(uint64_t bytes_requested) {
  if (!config_.compact || !memory_.engine_allocates) return 0;
  struct Mover final : BlockMover {
    Engine& engine;
    explicit Mover(Engine& e) : engine(e) {}
    bool movable(uint64_t owner, void* ptr) override {
      const StorageId s = storage_of_owner(owner);
      if (owner == 0 || s >= engine.storages_.size()) return false;
      const StorageRec& rec = engine.storages_[s];
      return rec.material && rec.memory == ptr && !engine.is_in_use(s);
    }
    void moved(uint64_t owner, void* from, void* to) override {
      StorageRec& rec = engine.storages_[storage_of_owner(owner)];
      DTR_ASSERT(rec.memory == from, "moved block is not the storage's");
      rec.memory = to;
    }
  } mover(*this);
  const uint64_t released = compact_allocator(bytes_requested, mover);
  if (config_.debug >= 3) check_invariants();
  return released;
}

uint64_t Engine::compact_allocator(uint64_t bytes_requested, BlockMover& mover) {
  DTR_CHECK(memory_.allocator != nullptr, "compact_allocator without an allocator");
  const AllocatorStats before = memory_.allocator->stats();
  const uint64_t released = memory_.allocator->compact(bytes_requested, mover);
  if (released > 0) {
    const AllocatorStats after = memory_.allocator->stats();
    hooks_->on_compact(after.num_block_moves - before.num_block_moves,
                       after.moved_bytes - before.moved_bytes, released);
  }
  return released;
}

PeriodCost Engine::period_cost() const {
  const auto since = [](uint64_t now, uint64_t then) { return now > then ? now - then : 0; };
  PeriodCost cost;
  cost.model_compute_ns = since(stats_.model_compute_ns, period_start_.model_compute_ns);
  cost.remat_compute_ns = since(stats_.remat_compute_ns, period_start_.remat_compute_ns);
  cost.num_remats = since(stats_.num_remats, period_start_.num_remats);
  // Making room within remats is in both the remats' measured time and make_room_ns.
  const auto host = [](const Stats& s) {
    return s.remat_measured_ns + s.make_room_ns - std::min(s.remat_room_ns, s.make_room_ns);
  };
  cost.host_ns = since(host(stats_), host(period_start_));
  return cost;
}

void Engine::end_period() {
  ++stats_.num_periods;
  const PeriodCost cost = period_cost();
  period_start_ = stats_;
  ++period_;
  heuristic_->on_period(cost);
  // Note [Dropped inputs of large results]: what was kept is let go as the period ends.
  std::vector<TensorId> kept;
  kept.swap(kept_to_period_end_);
  for (TensorId t : kept) release_ref(t, /*may_keep=*/false);
  kept_bytes_ = 0;
}

// Note [Search clock]
// ~~~~~~~~~~~~~~~~~~~
// The DTR scores divide by staleness, the time since a storage was last used, and each
// candidate's score read the clock. A simulator's logical clock costs nothing to read and
// stands still during a search; the PyTorch host's steady clock costs some 26 ns a read on
// this machine's VM, and a search scores every candidate in the pool: under dtr_eq a
// 1000-layer residual MLP (tests/torch/scripts/mlp.py --residual, min_evictable:4K) at 0.6
// of its peak spent 7% of its run in clock_gettime, all of it from staleness. So a search
// reads the clock once, when it begins, and every candidate's staleness is taken from that
// time, as in the simulator. SearchScope also copies the search's neighbourhood visits
// into the stats on every way out (Note [Search work]).
Engine::SearchScope::SearchScope(Engine& engine) : e(engine) {
  e.search_now_ = e.clock_.now();
  e.searching_ = true;
  // Note [Neighbourhoods within one search]: what the last search listed is stale now.
  if (++e.search_gen_ == 0) {
    std::fill(e.local_of_.begin(), e.local_of_.end(), 0);
    e.search_gen_ = 1;
  }
  e.local_nodes_.clear();
  e.local_visit_.clear();
  e.local_compute_.clear();
  e.local_adj_.clear();
  e.local_epoch_ = 0;
}

Engine::SearchScope::~SearchScope() {
  e.searching_ = false;
  e.stats_.neighborhood_visits = e.neighborhood_visits_;
}

StorageId Engine::choose_victim() {
  SearchScope scope{*this};  // Note [Search clock]
  ++stats_.eviction_searches;
  CandidateSearch search{*this, *heuristic_, rng_, search_scratch_};
  const bool dead = config_.dead_first && !dead_pool_.empty();  // Note [Dead storages first]
  StorageId dead_best = kNoId;
  double dead_cost = 0;
  if (dead) {
    dead_best = search.full_scan(dead_pool_, stats_.candidates_scored);
    if (config_.dead_first_ratio == 0) return dead_best;
    dead_cost = search.chosen_cost();
  }
  const StorageId best = config_.search == SearchMode::full
                             ? search.full_scan(pool_, stats_.candidates_scored)
                             : search.sample(config_.sample_size, stats_.candidates_scored);
  if (dead && dead_cost <= config_.dead_first_ratio * search.chosen_cost()) return dead_best;
  return best;
}

// Note [Unrecomputable victims]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A host may know that a storage can no longer be made again: the torch host refuses a
// remat whose exposed input was written outside the dispatcher since the op read it (Note
// [Refused remats]; Note [Writes outside the dispatcher] in integration/torch/lineage.cpp),
// as when a program frees a tensor's memory with `h.storage().resize_(0)` while results
// computed from h live on. Evicting such a result loses its value for good: the next read
// raised, at budgets where it could simply have stayed (a probe failed at 0.89 of its peak
// while 24 MiB of recomputable storages were in the pool). So before the policy's choice
// is evicted to make room, the host is asked (EngineHooks::may_evict); on no it has pinned
// the storage, which leaves the pool for good, and the policy chooses again. Only what the
// host refuses changes; a value whose input is written after it was evicted is still lost
// (the refusal's error says so). Eager eviction of dead storages and a plan's drops do not
// ask.
bool Engine::may_evict(StorageId s) {
  if (hooks_->may_evict(s)) return true;
  DTR_CHECK(storages_[s].pool_index < 0, "may_evict refused a storage but left it evictable");
  ++stats_.num_unrecomputable;
  return false;
}

StorageId Engine::next_victim() {
  while (!pool_.empty()) {
    const StorageId s = choose_victim();
    if (may_evict(s)) return s;
  }
  return kNoId;
}

bool Engine::drop(StorageId s) {
  if (s >= storages_.size() || storages_[s].pool_index < 0) return false;
  evict(s, /*eager=*/true);
  --stats_.num_eager_evictions;  // not a release: counted as a plan drop instead
  ++stats_.num_plan_drops;
  if (config_.debug >= 3) check_invariants();
  return true;
}

// --- materialization ------------------------------------------------------------------------

// Note [Relaxed remat locks]. Returns whether any storage became evictable.
bool Engine::relax_remat_locks() {
  const size_t base = materialize_base_;
  if (frames_.size() < base + 2 || relaxations_left_ == 0) return false;
  const size_t top = frames_.size() - 1;
  const uint32_t held_low = frames_[base].held_begin;
  const uint32_t held_top = frames_[top].held_begin;
  if (held_top == held_low) return false;  // the frames below hold nothing
  --relaxations_left_;
  ++stats_.num_relaxed_remats;
  const uint64_t pool_before = pool_bytes_;
  for (uint32_t i = held_low; i < held_top; ++i) unlock(held_[i]);
  held_.erase(held_.begin() + held_low, held_.begin() + held_top);
  // Each lower frame checks all of its op's inputs again when it resumes, the ones it had
  // locked at entry too; the top frame's slice (all defined and locked) moves up behind.
  const uint32_t pending_low = frames_[base].pending_begin;
  std::vector<TensorId> top_slice(pending_.begin() + frames_[top].pending_begin,
                                  pending_.begin() + frames_[top].pending_end);
  pending_.resize(pending_low);
  for (size_t f = base; f < top; ++f) {
    Frame& frame = frames_[f];
    frame.held_begin = held_low;
    frame.pending_begin = static_cast<uint32_t>(pending_.size());
    push_parents_late(ops_[tensors_[frame.tensor].op].inputs);
    frame.pending_end = static_cast<uint32_t>(pending_.size());
    frame.cursor = frame.pending_begin;
  }
  Frame& last = frames_[top];
  last.held_begin = held_low;
  last.pending_begin = static_cast<uint32_t>(pending_.size());
  pending_.insert(pending_.end(), top_slice.begin(), top_slice.end());
  last.pending_end = last.cursor = static_cast<uint32_t>(pending_.size());
  return pool_bytes_ > pool_before;
}

// Note [Late remat locks]: whether the outermost materialization has used a relaxation.
bool Engine::has_relaxed() const {
  return relaxations_left_ < (config_.relax_locks ? kMaxRelaxations : 0);
}

// Note [Late remat locks]: a frame's parents as its walk takes them, the evicted ones first,
// then the material ones, each locked only when the walk reaches it (and remade there if
// it was evicted meanwhile).
void Engine::push_parents_late(const std::vector<TensorId>& inputs) {
  for (TensorId p : inputs)
    if (!tensors_[p].defined) pending_.push_back(p);
  for (TensorId p : inputs)
    if (tensors_[p].defined) pending_.push_back(p);
}

void Engine::enter_frame(TensorId t, bool remat) {
  const Tick now = clock_.now();
  const OpRec& op = ops_[tensors_[t].op];
  Frame frame;
  frame.tensor = t;
  frame.remat = remat;
  frame.held_begin = static_cast<uint32_t>(held_.size());
  for (TensorId p : op.inputs) storages_[tensors_[p].storage].last_access = now;
  frame.pending_begin = static_cast<uint32_t>(pending_.size());
  if (has_relaxed()) {
    push_parents_late(op.inputs);  // Note [Late remat locks]
  } else {
    for (TensorId p : op.inputs) {
      if (tensors_[p].defined) {
        lock(tensors_[p].storage);
        held_.push_back(tensors_[p].storage);
      }
    }
    for (TensorId p : op.inputs)
      if (!tensors_[p].defined) pending_.push_back(p);
  }
  frame.pending_end = static_cast<uint32_t>(pending_.size());
  frame.cursor = frame.pending_begin;
  frames_.push_back(frame);
  stats_.max_remat_depth = std::max<uint64_t>(stats_.max_remat_depth, frames_.size() - 1);
}

Status Engine::run_materialize(TensorId target, bool remat) {
  DTR_ASSERT(!tensors_[target].defined, "materializing a defined tensor");
  const size_t base_depth = frames_.size();
  const size_t base_held = held_.size();
  const size_t base_pending = pending_.size();
  const size_t outer_base = materialize_base_;
  materialize_base_ = base_depth;
  if (base_depth == 0) relaxations_left_ = config_.relax_locks ? kMaxRelaxations : 0;
  struct RestoreBase {
    size_t& base;
    size_t saved;
    ~RestoreBase() { base = saved; }
  } restore_base{materialize_base_, outer_base};
  auto abandon = [&](Status status) {
    // Release every lock taken by the frames of this call, newest first.
    while (held_.size() > base_held) {
      unlock(held_.back());
      held_.pop_back();
    }
    frames_.resize(base_depth);
    pending_.resize(base_pending);
    return status;
  };

  enter_frame(target, remat);
  while (frames_.size() > base_depth) {
    Frame& frame = frames_.back();
    if (frame.cursor < frame.pending_end) {
      const TensorId p = pending_[frame.cursor];
      if (!tensors_[p].defined) {
        enter_frame(p, /*remat=*/true);  // `frame` may dangle from here on
        continue;
      }
      lock(tensors_[p].storage);
      held_.push_back(tensors_[p].storage);
      ++frame.cursor;
      continue;
    }
    // Every parent is defined and locked: make room for all outputs, then run the op.
    const TensorId t = frame.tensor;
    const bool is_remat = frame.remat;
    const OpRec& op = ops_[tensors_[t].op];
    // Note [Refused remats]
    if (is_remat && !hooks_->may_recompute(tensors_[t].op)) return abandon(Status::refused());
    // Note [Op workspace]: room for the op's scratch too, held only while it runs.
    Status status = make_room(op.total_bytes + op.workspace_bytes);
    if (status.ok() && memory_.engine_allocates) status = allocate_outputs(t);
    if (!status.ok()) return abandon(status);
    try {
      compute(t, is_remat);
    } catch (...) {  // Note [Host exceptions]
      free_transient_blocks();
      abandon(Status::success());
      throw;
    }
    free_transient_blocks();
    for (TensorId p : op.inputs) unlock(tensors_[p].storage);
    // Read after compute: making room may have relaxed the frames (Note [Relaxed remat
    // locks]), which moves this frame's slices.
    held_.resize(frames_.back().held_begin);
    pending_.resize(frames_.back().pending_begin);
    frames_.pop_back();
    if (is_remat) hooks_->after_remat(tensors_[t].op);
    const bool past_limit =
        config_.max_remat_ns != 0 && stats_.remat_compute_ns > config_.max_remat_ns;
    // Note [Stopping a materialization]: the host's own limit, on the outermost one only.
    if (past_limit || (is_remat && base_depth == 0 && hooks_->stop_remats()))
      return abandon(Status::thrashing());
  }
  return Status::success();
}

// Allocates the block of every output storage of t's op that is not material (the engine
// allocates: the simulator), a block for each output still material, which the op's run
// makes again (Note [Duplicate outputs in the peak]), in the outputs' order, then the op's
// workspace block, if it has one (Note [Op workspace]); the last two go to
// transient_blocks_. Outputs that are still material are locked meanwhile: an allocation
// may evict, and a sibling evicted now would be marked material by compute() without
// memory. On failure frees what it took and reports the allocator's out-of-memory
// details.
Status Engine::allocate_outputs(TensorId t) {
  const OpRec& op = ops_[tensors_[t].op];
  DTR_ASSERT(transient_blocks_.empty(), "an op's transient blocks outlived it");
  size_t n_locked = 0;
  for (TensorId u : op.outputs) {
    const StorageId s = tensors_[u].storage;
    if (storages_[s].material && storages_[s].tensors[0] == u) {
      lock(s);
      ++n_locked;
    }
  }
  Status status = Status::success();
  // Frees the blocks taken for outputs before the `taken`-th and the transient ones, and
  // reports `r`'s shortfall.
  auto fail = [&](const AllocResult& r, size_t taken) {
    for (size_t j = 0; j < taken; ++j) {
      StorageRec& other = storages_[tensors_[op.outputs[j]].storage];
      if (!other.material && other.memory) {
        memory_.allocator->free(other.memory);
        other.memory = nullptr;
      }
    }
    free_transient_blocks();
    ++stats_.num_ooms;
    OomInfo info = oom_info(r.oom.requested_bytes);
    info.live_bytes = r.oom.allocated_bytes;
    info.reserved_limit_bytes = r.oom.reserved_limit_bytes;
    info.reserved_bytes = r.oom.reserved_bytes;
    info.largest_free_block_bytes = r.oom.largest_free_block_bytes;
    info.segment_bytes = r.oom.segment_bytes;
    status = Status::out_of_memory(info);
  };
  for (size_t i = 0; i < op.outputs.size() && status.ok(); ++i) {
    const TensorId u = op.outputs[i];
    const StorageId s = tensors_[u].storage;
    StorageRec& rec = storages_[s];
    if (rec.tensors[0] != u) continue;
    if (rec.material) {  // the run's copy, no owner: nothing moves or evicts it
      AllocResult r = memory_.allocator->allocate(rec.size_bytes, 0);
      if (r.ok())
        transient_blocks_.push_back(r.ptr);
      else
        fail(r, i);
      continue;
    }
    if (rec.memory) continue;
    AllocResult r = memory_.allocator->allocate(rec.size_bytes, owner_of(s));
    if (r.ok())
      storages_[s].memory = r.ptr;
    else
      fail(r, i);
  }
  if (status.ok() && op.workspace_bytes > 0) {  // Note [Op workspace]: no owner
    AllocResult r = memory_.allocator->allocate(op.workspace_bytes, 0);
    if (r.ok())
      transient_blocks_.push_back(r.ptr);
    else
      fail(r, op.outputs.size());
  }
  if (n_locked > 0) {
    for (TensorId u : op.outputs) {
      const StorageId s = tensors_[u].storage;
      if (storages_[s].material && storages_[s].tensors[0] == u) unlock(s);
    }
  }
  return status;
}

void Engine::free_transient_blocks() {
  for (void* p : transient_blocks_) memory_.allocator->free(p);
  transient_blocks_.clear();
}

// Note [Duplicate outputs in the peak]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A remat of a multi-output op whose other outputs are still material makes them again:
// the PyTorch host's kernel writes every output into memory of its own, and the copies
// die as it returns. So they count in the peak, and byte accounting makes room for them
// (make_room(total_bytes)). Where the engine allocates (the simulator over its allocator),
// allocate_outputs takes a block for each such copy, with no owner, freed with the op's
// workspace as the op returns, so the allocator holds what the host's allocator holds.
// Until 2026-12-05 it took none and the peak left them out (so that it did not pass the
// allocator's allocated bytes: a replay on the host's device, `allocator:host`, Note [Host
// device] in sim/replay.cpp, reported peaks 3-5 MB over its budget in the random programs
// of the replay's stress test); the replay then ran such remats with less memory than the
// live run needs.
void Engine::compute(TensorId t, bool remat) {
  const OpId op_id = tensors_[t].op;
  const OpRec& op = ops_[op_id];
  // The host runs the op while its outputs are not yet material: Note [Budget owner].
  // A recorded op has run already: Note [Recording an op that ran].
  if (remat || !op_already_ran_) hooks_->on_compute(op_id, remat);
  clock_.advance(remat ? op.remat_ns : op.compute_ns);  // Note [Remat cost]
  if (remat) {
    stats_.remat_compute_ns += op.remat_ns;
    ++stats_.num_remats;
  } else {
    stats_.model_compute_ns += op.compute_ns;
  }
  live_bytes_ += op.total_bytes;
  stats_.allocated_total += op.total_bytes;
  DTR_CHECK(memory_.allocator || live_bytes_ <= config_.budget_bytes, "budget exceeded");

  // Outputs whose storage was evicted become material (siblings first, t last: the order
  // they enter the pool, Note [Faithful to simrd]); outputs still material were computed
  // twice and their duplicate bytes are dropped again.
  StorageId newly_material[64];
  size_t n_new = 0;
  std::vector<StorageId> overflow;
  auto note_new = [&](StorageId s) {
    if (n_new < 64)
      newly_material[n_new++] = s;
    else
      overflow.push_back(s);
  };
  uint64_t duplicate_bytes = 0;
  for (TensorId u : op.outputs) {
    if (u == t) continue;
    TensorRec& urec = tensors_[u];
    StorageRec& srec = storages_[urec.storage];
    if (urec.defined) {
      if (srec.tensors[0] == u) duplicate_bytes += srec.size_bytes;
      continue;
    }
    if (!srec.material) {
      srec.material = true;
      note_new(urec.storage);
    }
    urec.defined = true;
  }
  {
    TensorRec& trec = tensors_[t];
    StorageRec& srec = storages_[trec.storage];
    if (!srec.material) {
      srec.material = true;
      note_new(trec.storage);
    }
    trec.defined = true;
  }
  // The peak while the op ran: its outputs and its scratch (Note [Op workspace]), with the
  // copies its run made of outputs still material (Note [Duplicate outputs in the peak]).
  stats_.allocated_peak = std::max(stats_.allocated_peak, live_bytes_ + op.workspace_bytes);
  live_bytes_ -= duplicate_bytes;
  stats_.freed_total += duplicate_bytes;
  auto admit = [&](StorageId s) {
    StorageRec& srec = storages_[s];
    if (remat) {  // Note [Storages remade again and again] in dtr_eq_heuristic.cpp
      if (srec.remake_period != period_) srec.remakes = 0;
      srec.remake_period = period_;
      ++srec.remakes;
    }
    ++stats_.allocation_current;
    if (srec.locks == 0 && srec.pool_index < 0) pool_insert(s);
    if (track_eq_) eq_on_remat(s);
  };
  for (size_t i = 0; i < n_new; ++i) admit(newly_material[i]);
  for (StorageId s : overflow) admit(s);
  stats_.allocated_current = live_bytes_;
  stats_.allocation_peak = std::max(stats_.allocation_peak, stats_.allocation_current);
  if (remat) heuristic_->on_remat(period_cost());  // Note [Thrashing period] in auto_heuristic.cpp
}

// --- evicted neighbourhoods and eq classes --------------------------------------------------

template <typename F>
void Engine::for_each_neighbor(StorageId s, F&& f) const {
  // Distinct storages adjacent to s (through any of its tensors' parents or children),
  // s itself excluded. Adjacency is symmetric: n is s's neighbour iff s is n's.
  const uint32_t epoch = ++epoch_;
  storages_[s].visit_epoch = epoch;
  for_each_edge(s, [&](TensorId u) {
    const StorageId us = tensors_[u].storage;
    if (storages_[us].visit_epoch == epoch) return;
    storages_[us].visit_epoch = epoch;
    f(us);
  });
}

template <typename F>
void Engine::for_each_edge(StorageId s, F&& f) const {
  // The tensors adjacent to s's tensors (their ops' inputs, then their children), once
  // per edge: a storage may come more than once, and s itself through an alias.
  for (TensorId t : storages_[s].tensors) {
    for (TensorId p : ops_[tensors_[t].op].inputs) f(p);
    for (TensorId c : tensors_[t].children) f(c);
  }
}

// Note [Search work]
// ~~~~~~~~~~~~~~~~~~
// The exact neighbourhood scores (dtr, dtr_ancestors, msps) cost a graph search each, and
// once long chains are evicted that search is most of what a run does besides its ops
// (Note [Cutoff scores] in candidate_search.cpp). Stats::neighborhood_visits counts the
// evicted storages those searches reach, one per storage per search: a count, not a time,
// so a replay and a live run of the same choices report the same number, and a policy's
// search work can be compared across machines. The PyTorch host also times what making
// room takes (dtr.make_room_ns; Note [Host work in op times] in
// integration/torch/lineage.cpp).
uint64_t Engine::evicted_neighborhood_compute(StorageId base, bool forward,
                                              uint64_t stop_above) const {
  if (!searching_) return walk_records(base, forward, stop_above);
  // Note [Neighbourhoods within one search]
  const uint64_t visits_before = neighborhood_visits_;
  const uint64_t found = search_neighborhood(base, forward, stop_above);
  if (config_.debug >= 3) {  // the walk over the records must agree, visits included
    const uint64_t visits = neighborhood_visits_;
    neighborhood_visits_ = visits_before;
    DTR_CHECK(walk_records(base, forward, stop_above) == found && neighborhood_visits_ == visits,
              "a walk over a search's neighbour lists disagrees with the walk over the records");
  }
  return found;
}

uint64_t Engine::walk_records(StorageId base, bool forward, uint64_t stop_above) const {
  const StorageRec& brec = storages_[base];
  const uint32_t epoch = ++epoch_;
  uint64_t compute = 0;
  dfs_stack_.clear();
  dfs_stack_.push_back(base);
  brec.visit_epoch = epoch;
  while (!dfs_stack_.empty()) {
    const StorageId s = dfs_stack_.back();
    dfs_stack_.pop_back();
    for (TensorId t : storages_[s].tensors) {
      const std::vector<TensorId>& next = forward ? tensors_[t].children : ops_[tensors_[t].op].inputs;
      for (TensorId u : next) {
        const StorageId us = tensors_[u].storage;
        const StorageRec& urec = storages_[us];
        if (urec.material || urec.visit_epoch == epoch) continue;
        urec.visit_epoch = epoch;
        ++neighborhood_visits_;  // Note [Search work]
        compute += urec.compute_ns;
        if (compute > stop_above) return compute;  // Note [Cutoff scores]
        dfs_stack_.push_back(us);
      }
    }
  }
  return compute;
}

// Note [Neighbourhoods within one search]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A search scores every candidate against the same graph: nothing is evicted, made again
// or recorded until it has chosen. Once long chains are evicted, the candidates' evicted
// neighbourhoods overlap: on a 2000-layer residual MLP at 0.6 of its peak under dtr, about
// 300 candidates a search each reached 2,500-6,000 of the same evicted storages (docs/
// pytorch.md, "Time within remats"), and each step of each walk went storage -> tensors ->
// op -> inputs -> tensor -> storage record, a chain of dependent loads over records of
// 100 bytes. So within a search (SearchScope) the walk numbers the storages it reaches and
// lists each one's evicted neighbours once per direction, as those numbers, the first time
// a walk leaves it; later walks in the same search read the lists. The lists hold the same
// storages in the same order as the records give them (repeats included), so every walk
// visits, sums and stops exactly as the walk over the records does, and the choices and
// Stats::neighborhood_visits are unchanged. Outside a search (a score asked for alone) the
// walk reads the records.
uint32_t Engine::local_node(StorageId s) const {
  if (s >= local_of_.size()) local_of_.resize(storages_.size(), 0);
  uint64_t& slot = local_of_[s];
  if (slot >> 32 == search_gen_) return static_cast<uint32_t>(slot);
  const uint32_t node = static_cast<uint32_t>(local_nodes_.size());
  LocalNode n;
  n.storage = s;
  local_nodes_.push_back(n);
  local_visit_.push_back(0);
  local_compute_.push_back(storages_[s].compute_ns);
  slot = (uint64_t{search_gen_} << 32) | node;
  return node;
}

void Engine::list_neighbors(uint32_t node, bool forward) const {
  const uint32_t begin = static_cast<uint32_t>(local_adj_.size());
  for (TensorId t : storages_[local_nodes_[node].storage].tensors) {
    const std::vector<TensorId>& next =
        forward ? tensors_[t].children : ops_[tensors_[t].op].inputs;
    for (TensorId u : next) {
      const StorageId us = tensors_[u].storage;
      if (!storages_[us].material) local_adj_.push_back(local_node(us));
    }
  }
  LocalNode& n = local_nodes_[node];  // after local_node(), which may move the nodes
  n.begin[forward] = begin;
  n.end[forward] = static_cast<uint32_t>(local_adj_.size());
  n.listed[forward] = true;
}

uint64_t Engine::search_neighborhood(StorageId base, bool forward, uint64_t stop_above) const {
  const uint32_t epoch = ++local_epoch_;
  uint64_t compute = 0;
  const uint32_t root = local_node(base);
  local_visit_[root] = epoch;
  dfs_stack_.clear();
  dfs_stack_.push_back(root);
  while (!dfs_stack_.empty()) {
    const uint32_t x = dfs_stack_.back();
    dfs_stack_.pop_back();
    if (!local_nodes_[x].listed[forward]) list_neighbors(x, forward);
    for (uint32_t i = local_nodes_[x].begin[forward]; i < local_nodes_[x].end[forward]; ++i) {
      const uint32_t u = local_adj_[i];
      if (local_visit_[u] == epoch) continue;
      local_visit_[u] = epoch;
      ++neighborhood_visits_;  // Note [Search work]
      compute += local_compute_[u];
      if (compute > stop_above) return compute;  // Note [Cutoff scores]
      dfs_stack_.push_back(u);
    }
  }
  return compute;
}

// Note [Pending outputs]
// ~~~~~~~~~~~~~~~~~~~~~~
// While an op waits for its parents, its outputs exist in the graph but are not material.
// A parent that is a view whose storage is material is not locked until its own turn, so
// it can be scored (or evicted) while its children include those pending outputs. Such a
// neighbour was never evicted and has no eq class: it counts as zero cost (simrd gives it
// a class of value 0, which is the same for scoring) and is never merged.
uint32_t Engine::eq_find(uint32_t node) const {
  uint32_t root = node;
  while (eq_nodes_[root].parent != root) root = eq_nodes_[root].parent;
  while (eq_nodes_[node].parent != root) {  // path compression
    uint32_t next = eq_nodes_[node].parent;
    eq_nodes_[node].parent = root;
    node = next;
  }
  return root;
}

void Engine::eq_on_evict(StorageId s) {
  const uint32_t node = static_cast<uint32_t>(eq_nodes_.size());
  eq_nodes_.push_back(EqNode{node, 1, static_cast<int64_t>(storages_[s].compute_ns)});
  storages_[s].eq_node = node;
  for_each_neighbor(s, [&](StorageId n) {
    ++storages_[n].evicted_neighbors;  // Note [Evicted neighbour count]
    // Note [Pending outputs]: a neighbour that is not material but was never evicted is an
    // output of an op still waiting to run; it has no class and adds nothing.
    if (storages_[n].material || storages_[n].eq_node == kNoId) return;
    uint32_t a = eq_find(storages_[n].eq_node);
    uint32_t b = eq_find(node);
    if (a == b) return;
    if (eq_nodes_[a].size > eq_nodes_[b].size) std::swap(a, b);
    eq_nodes_[a].parent = b;
    eq_nodes_[b].size += eq_nodes_[a].size;
    eq_nodes_[b].compute_ns += eq_nodes_[a].compute_ns;
  });
}

void Engine::eq_on_remat(StorageId s) {
  StorageRec& rec = storages_[s];
  if (rec.eq_node == kNoId) return;  // a new storage: never evicted
  eq_nodes_[eq_find(rec.eq_node)].compute_ns -= static_cast<int64_t>(rec.compute_ns);
  rec.eq_node = kNoId;
  for_each_neighbor(s, [&](StorageId n) { --storages_[n].evicted_neighbors; });
}

// Note [Evicted neighbour count]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Most candidates have no evicted neighbour, and walking a storage's neighbours costs a
// chain of dependent loads (storage -> tensor -> op -> inputs -> storage). With eq classes
// on, each storage counts its distinct neighbours that are evicted (with a class): +1 for
// each neighbour when a storage is evicted, -1 when it is rematerialized. Edges appear when
// an op is recorded, possibly on inputs that are evicted at that moment (DTR's whole
// point), so `call` recounts the storages its new edges touch. is_valid() recounts all.
// A zero count lets eq_class_cost answer from the storage record alone.
void Engine::recount_evicted_neighbors(StorageId s) {
  uint32_t evicted = 0;
  for_each_neighbor(s, [&](StorageId n) {
    evicted += !storages_[n].material && storages_[n].eq_node != kNoId;
  });
  storages_[s].evicted_neighbors = evicted;
}

// Note [Dropped inputs of large results]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A storage the program drops is gone for good unless a remat needs it, and eager eviction
// frees it at once. Where a large result the program still holds was made from it, that
// result's remat then goes back through whatever made the dropped storage. resnet18 at
// batch 32 (tests/torch/scripts/vision.py) shows it: its layer4 weight gradients (9 MiB
// each) are made by a convolution backward from two 1 MiB inputs that die right after; at
// the stem, near the end of the backward pass, the policy drops those gradients, and the
// optimizer step makes them again through the whole forward pass (docs/pytorch.md, "What
// any schedule must pay on resnet18"). So with a keep ratio R > 0 (below), a storage
// whose last reference goes while a storage the program holds, unpinned, at most two ops
// downstream of it (an op read it, or read a storage such an op made), is at least R times
// its size, is held by the engine instead, as if the program still held it, until the
// period ends (Engine::end_period: the host's optimizer step, a trace's ANNOTATE STEP). It
// is then an ordinary candidate, scored as the policy scores any, and the large result is
// not on dead lineage (Note [Live storages on dead lineage]). The walk stops after
// kMaxKeepVisits storages. What is kept counts in the peak, and only a period's end lets
// it go: a program without periods (no torch.optim step, a trace without ANNOTATE STEP)
// keeps it to the end of the run.
// A period keeps at most a kKeepBudgetShare-th of the budget (keep_cap_bytes). Without
// the cap the rule was ruinous where many small storages sit near one large one: a GRU's
// per-step slices beside its input projection (the SGD GRU at 0.7 of its peak: 2.6 ->
// 12.9 in a replay; live, the CTC GRU hit the runaway stop), and the chunked LSTM LM at
// 0.4 (1.55 -> 59). With a 16th, in replays of 21 traces at 0.4-0.7 (docs/simulator.md,
// "Dropped inputs of large results"), no cell went up by more than 0.07 and those
// catastrophes are gone (the SGD GRU at 0.7 2.24), while resnet18 keeps all it kept
// without the cap, and live the CTC GRU trains (with twice the remats it makes without).
// Not the default for every policy: replays of 23 traces (docs/pytorch.md, "Keeping dead
// storages, chosen in hindsight") gained where a large result is cheap to remake from small
// inputs and lost badly where many small storages sit near one large one. So it is an option
// (keep_near_large R), or the policy's (Heuristic::keep_near_large: dtr_eq_keep, which
// `auto` tries as its fourth candidate, Note [Keeping as a candidate]); the option, where
// set, wins.
double Engine::keep_ratio() const {
  return config_.keep_near_large > 0 ? config_.keep_near_large : heuristic_->keep_near_large();
}

uint64_t Engine::keep_cap_bytes() const {
  return budget_in_force() / kKeepBudgetShare;  // no budget: no cap that matters
}

bool Engine::near_large_held(StorageId s, double ratio) const {
  const uint64_t size = storages_[s].size_bytes;
  if (size == 0) return false;
  const double least = ratio * static_cast<double>(size);
  constexpr size_t kMaxKeepVisits = 256;
  size_t visits = 0;
  const uint32_t epoch = ++epoch_;
  storages_[s].visit_epoch = epoch;
  std::vector<StorageId> first_hop;
  // Whether some storage downstream of `from` (one op away) is held and large; the ones
  // seen are added to `next` when given.
  auto look = [&](StorageId from, std::vector<StorageId>* next) {
    for (TensorId t : storages_[from].tensors)
      for (TensorId c : tensors_[t].children) {
        const StorageId n = tensors_[c].storage;
        const StorageRec& rec = storages_[n];
        if (rec.visit_epoch == epoch) continue;
        rec.visit_epoch = epoch;
        if (rec.ext_refs > 0 && !rec.pinned && static_cast<double>(rec.size_bytes) >= least)
          return true;
        if (++visits >= kMaxKeepVisits) return false;
        if (next) next->push_back(n);
      }
    return false;
  };
  if (look(s, &first_hop)) return true;
  for (StorageId m : first_hop)
    if (visits < kMaxKeepVisits && look(m, nullptr)) return true;
  return false;
}

bool Engine::on_dead_lineage(StorageId s) const {  // Note [Dropped parent count]
  const StorageRec& rec = storages_[s];
  return rec.ext_refs > 0 && rec.dropped_parents > 0;
}

// Note [Dropped parent count]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// on_dead_lineage(s) asks whether an op that made one of s's tensors read a storage that is
// dropped (the program holds it no more, and it is not pinned). It walked s's tensors,
// their ops' inputs and those inputs' storages at each score: three dependent loads per
// edge, for every candidate of every eviction search, and 14% of a live run of a 2000-layer
// residual MLP (width 64, batch 48) at 0.6 of its peak under dtr_eq (19% of a replay of its
// trace), where thousands of storages are candidates. Now each storage counts its edges from
// dropped parents: the pairs (p, c) with c in tensor p's children (the outputs of ops that
// read p, once per reading), p's storage dropped and c's storage s another one. Children
// lists are call()'s inputs read backwards, so for every storage not discarded the count is
// nonzero exactly when the walk found a dropped parent; a discarded storage may have lost
// edges to compaction (Note [Children of discarded storages]), and the count follows its
// children lists there too. The count changes where an edge comes or goes (call,
// compact_children, retire_op) and where a parent's storage starts or stops being dropped
// (release_ref, an alias output in call, pin, discard): count_child_edges walks that
// storage's children once, as the program drops it, rather than each score. check_invariants
// recounts it and compares with the walk.
void Engine::count_child_edges(StorageId ps, int delta) {
  for (TensorId t : storages_[ps].tensors)
    for (TensorId c : tensors_[t].children) count_edge(ps, c, delta);
}

void Engine::count_edge(StorageId ps, TensorId c, int delta) {
  const StorageId s = tensors_[c].storage;
  if (s != ps) storages_[s].dropped_parents += delta;
}

uint64_t Engine::eq_class_cost(StorageId s) const {
  int64_t cost = static_cast<int64_t>(storages_[s].compute_ns);
  if (storages_[s].evicted_neighbors == 0) return static_cast<uint64_t>(cost);
  // Distinct classes among the neighbours; a handful at most, so a small vector.
  uint32_t roots[32];
  size_t n_roots = 0;
  std::vector<uint32_t> more;
  // The edges one by one, without for_each_neighbor's marks (a store per neighbour): a
  // storage met twice gives a class met twice, which the roots dedupe; s itself, met through
  // an alias, is skipped as material, or, evicted, is in its evicted neighbours' class.
  for_each_edge(s, [&](TensorId u) {
    const StorageRec& n = storages_[tensors_[u].storage];
    if (n.material || n.eq_node == kNoId) return;  // Note [Pending outputs]
    const uint32_t r = eq_find(n.eq_node);
    for (size_t i = 0; i < n_roots; ++i)
      if (roots[i] == r) return;
    if (std::find(more.begin(), more.end(), r) != more.end()) return;
    if (n_roots < 32)
      roots[n_roots++] = r;
    else
      more.push_back(r);
    cost += eq_nodes_[r].compute_ns;
  });
  return cost < 0 ? 0 : static_cast<uint64_t>(cost);
}

// --- invariants -------------------------------------------------------------------------------

void Engine::check_invariants() const {
  std::string why;
  if (!is_valid(&why)) {
    std::fprintf(stderr, "dtr: engine invariant violated: %s\n", why.c_str());
    std::abort();
  }
}

bool Engine::is_valid(std::string* why) const {
  auto fail = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  uint64_t live = 0, pool_bytes = 0;
  size_t in_pool = 0;
  for (StorageId s = 0; s < storages_.size(); ++s) {
    const StorageRec& rec = storages_[s];
    if (rec.material) live += rec.size_bytes;
    const bool should_pool = rec.material && rec.locks == 0 && !rec.pinned;
    if (should_pool != (rec.pool_index >= 0))
      return fail("storage " + std::to_string(s) + " pool membership is wrong");
    if (rec.pool_index >= 0) {
      if (static_cast<size_t>(rec.pool_index) >= pool_.size() || pool_[rec.pool_index] != s)
        return fail("storage " + std::to_string(s) + " pool index is stale");
      pool_bytes += rec.size_bytes;
      ++in_pool;
    }
    // Note [Dead storages first]
    if ((rec.pool_index >= 0 && rec.ext_refs == 0) != (rec.dead_index >= 0))
      return fail("storage " + std::to_string(s) + " dead pool membership is wrong");
    if (rec.dead_index >= 0 && (static_cast<size_t>(rec.dead_index) >= dead_pool_.size() ||
                                dead_pool_[rec.dead_index] != s))
      return fail("storage " + std::to_string(s) + " dead pool index is stale");
    // Note [Lazy release]
    if (rec.lazily_released && (!rec.material || rec.pinned || rec.ext_refs > 0))
      return fail("storage " + std::to_string(s) + " lazily released but not dead and evictable");
    if (rec.pinned && rec.locks == 0) return fail("pinned storage without its lock");
    if (!rec.material && rec.locks != 0) return fail("evicted storage is locked");
    uint32_t refs = 0;
    for (TensorId t : rec.tensors) {
      refs += tensors_[t].ext_refs;
      if (tensors_[t].storage != s) return fail("tensor/storage link broken");
    }
    if (refs != rec.ext_refs) return fail("storage " + std::to_string(s) + " ref count mismatch");
    if (track_eq_ && rec.material && rec.eq_node != kNoId)
      return fail("material storage still in an eq class");
    if (track_eq_ && !rec.pinned) {  // not kept while pinned: Engine::call
      uint32_t evicted = 0;
      for_each_neighbor(s, [&](StorageId n) {
        evicted += !storages_[n].material && storages_[n].eq_node != kNoId;
      });
      if (evicted != rec.evicted_neighbors)
        return fail("storage " + std::to_string(s) + " evicted-neighbour count is stale");
    }
  }
  for (TensorId t = 0; t < tensors_.size(); ++t)
    if (tensors_[t].defined && !storages_[tensors_[t].storage].material)
      return fail("defined tensor " + std::to_string(t) + " on an evicted storage");
  {  // Note [Dropped parent count]: recounted from the children lists, and against the walk
    std::vector<uint32_t> count(storages_.size(), 0);
    for (TensorId p = 0; p < tensors_.size(); ++p) {
      const StorageId ps = tensors_[p].storage;
      if (ps == kNoId || !dropped(ps)) continue;
      for (TensorId c : tensors_[p].children)
        if (tensors_[c].storage != ps) ++count[tensors_[c].storage];
    }
    for (StorageId s = 0; s < storages_.size(); ++s) {
      const StorageRec& rec = storages_[s];
      if (count[s] != rec.dropped_parents)
        return fail("storage " + std::to_string(s) + " dropped-parent count is stale");
      if (rec.discarded || rec.retired) continue;
      bool walked = false;
      for (TensorId t : rec.tensors)
        for (TensorId p : ops_[tensors_[t].op].inputs)
          walked |= tensors_[p].storage != s && dropped(tensors_[p].storage);
      if (walked != (rec.dropped_parents > 0))
        return fail("storage " + std::to_string(s) + " dropped-parent count misses the walk");
    }
  }
  if (live != live_bytes_) return fail("live bytes " + std::to_string(live_bytes_) + " != recount " + std::to_string(live));
  if (!memory_.allocator && live_bytes_ > config_.budget_bytes)
    return fail("live bytes exceed the budget");
  if (memory_.engine_allocates) {
    // Mid-materialization an op's outputs hold memory before they become material.
    for (StorageId s = 0; s < storages_.size(); ++s)
      if (storages_[s].material ? storages_[s].memory == nullptr
                                : storages_[s].memory != nullptr && frames_.empty())
        return fail("storage " + std::to_string(s) + " memory does not match its state (" +
                    (storages_[s].material ? "material, no block" : "evicted, holds a block") +
                    ")");
  }
  if (pool_bytes != pool_bytes_ || in_pool != pool_.size()) return fail("pool bytes or size mismatch");
  if (frames_.empty() && !held_.empty()) return fail("locks held outside a materialization");
  return true;
}

}  // namespace dtr
