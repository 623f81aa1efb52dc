// lineage_impl.h: the torch-facing host of the DTR engine (lineage.cpp) and what the
// dispatcher fallback (dispatch_hook.cpp) tells it about each op. Private to
// integration/torch.
//
// Model (docs/pytorch.md, ARCHITECTURE.md "Proven"). Every c10::StorageImpl the engine knows
// is one engine storage (StorageRec, indexed by StorageId). The engine's *current* tensor
// of a storage is the version ops read now: an in-place op recorded on a storage adds a
// new version (an alias tensor) on it. Lineage holds private shallow copies of each
// recorded op's input tensors (*snapshots*) and only weak references to output storages.
// Evict = the StorageImpl gives up its DataPtr (nbytes kept); remat = re-run the op below
// autograd and move the fresh buffer into the same StorageImpl, so every view, detach()
// and .data alias sees it.
//
// Lock rules. One lock (`mutex`, recursive: Note [Engine lock]) guards the engine and
// every table here. The fallback holds it while it looks up and locks an op's inputs and
// while it records the op, not while the op runs (the inputs stay locked in the engine).
// Remats run with it held. The allocator's eviction callback takes it too.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>
#include <mimalloc.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "dtr/allocator/memory_history.h"
#include "integration/torch/recording.h"

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/clock.h"
#include "dtr/core/options.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/op_costs.h"
#include "dtr/eviction/plan_guide.h"
#include "dtr/eviction/thrash_watch.h"
#include "integration/torch/compat.h"
#include "integration/torch/op_context.h"

namespace dtr::torch_integration {

// Dead pinned storages under this size are not worth a full collect of their own nor a
// cut (Note [Small storages] in lineage.cpp).
constexpr size_t kSmallPinnedBytes = 16384;

// A walk's mark over storages (Lineage::begin_marks). 64 bits, as nothing clears the
// marks: a full collect's cut can start a walk per small dead constant it keeps (Note
// [Small dead constants in bulk]), and a review counted 393 460 walks in 4 steps of a
// 400-layer MLP under a budget (before the cut stopped bringing on extra collects), where
// 32 bits would wrap within some 40 000 steps; a wrapped mark reads an unmarked storage as
// marked, and a collect could then drop lineage a live storage needs.
using Mark = uint64_t;

// Option budget as a ratio is set after this many training steps: Note [Ratio budgets] in
// lineage.cpp.
constexpr uint32_t kRatioBudgetSteps = 2;

// Where a tensor sits among an op's arguments or returns: value `index`, and `element`
// inside a tensor list (-1 for a plain tensor).
struct TensorSlot {
  uint16_t index = 0;
  int16_t element = -1;
};

// How the fallback treats an op (classify_op in dispatch_hook.cpp).
enum class OpKind : uint8_t {
  view,     // returns an alias of an input and writes nothing: runs untouched, no refill
  compute,  // deterministic: recorded, may be recomputed
  opaque,   // run once, never recomputed: Note [Never recompute] in dispatch_hook.cpp
};

using LeanKernel = bool (*)(torch::jit::Stack& stack);

enum class LikeFill : uint8_t { none, normal, uniform, random };

// OpInfo::observed: whose results the fallback records as another call's.
enum class Observed : uint8_t { none, fake_quant, rrelu };

struct OpInfo {
  OpKind kind = OpKind::opaque;
  uint16_t num_args = 0;
  uint16_t num_returns = 0;
  // Arguments the op writes ((a!) in the schema, or hidden: batch norm's running stats).
  std::vector<uint16_t> write_args;
  // compute ops with one written tensor argument whose returns all alias it (add_, copy_).
  bool in_place = false;
  // in_place ops whose result does not depend on the written tensor's old value (zero_,
  // fill_, copy_): Note [Overwrite].
  bool overwrites = false;
  // native_batch_norm in training mode: remat passes no running stats (Note [Batch norm]).
  bool batch_norm = false;
  // A seeded fill (bernoulli_, uniform_, ...) or factory (randn, normal, ...): its
  // `Generator?` argument, whose state is kept for replays (Note [Seeded ops], Note [Seeded
  // factories] in dispatch_hook.cpp); -1 for other ops.
  int16_t generator_arg = -1;
  // A seeded factory whose schema has no `Generator?` argument (randn, rand, randint,
  // randperm): the overload that has one, which its remats call; generator_arg is that
  // argument's index there (Note [Seeded factories] in dispatch_hook.cpp).
  std::optional<c10::OperatorHandle> replay_op;
  // Runs the op in place of its kernel where it can, with less memory and the same bits
  // (Note [Lean batch-norm backward] in compat.cpp); false: run the kernel.
  LeanKernel lean_kernel = nullptr;
  // bernoulli_: what it writes is kept packed to bits once the budget binds (Note [Packed
  // masks] in lineage.cpp).
  bool packs_mask = false;
  // randn_like, rand_like, randint_like: the fill their kernels draw with, which the
  // fallback runs instead in grad mode (Note [Seeded like factories] in dispatch_hook.cpp).
  LikeFill like_fill = LikeFill::none;
  // An op that runs opaque, as it writes state, whose results are then recorded as those
  // of another call: _fused_moving_avg_obs_fq_helper's as its fake quantization alone
  // (Note [Observed fake quantization] in dispatch_hook.cpp), rrelu_with_noise's as
  // mul(self, noise) (Note [Observed RReLU] there).
  Observed observed = Observed::none;
  // Not an aten:: op (c10d's collectives, an extension's kernels) nor one of Note [Pure
  // foreign ops] in dispatch_hook.cpp: it may hand its tensors' addresses to other threads,
  // so they are never moved (Note [Moving storages]).
  bool foreign = false;
  // index_put_ and put_: with accumulate=True their CPU kernels give other bits from call
  // to call on several threads, so such a call is not recorded (Note [Thread-order
  // results] in dispatch_hook.cpp). The `accumulate` argument's index; -1 for other ops.
  int16_t thread_order_arg = -1;
  // aten::resize_: a view op where it keeps its tensor's storage, opaque where it grows it
  // (Note [Grown storages] in lineage.cpp).
  bool resize = false;
};

// What a raw scope (Note [Raw scopes] in dispatch_hook.cpp) holds until it ends: engine
// locks, and a reference to each storage so that it is not found dead meanwhile.
struct RawHold {
  std::vector<TensorId> locked;
  std::vector<c10::intrusive_ptr<c10::StorageImpl>> storages;
};

// One op the fallback is running: its inputs, found and locked before it runs, and what
// recording needs afterwards. Built by Lineage::before_op, finished by after_op/abort_op.
// The fallback keeps one per thread and reuses it, so its vectors keep their capacity
// from op to op (Note [Hot-path allocations] in lineage.cpp); reset() starts a new op.
struct PendingOp {
  const OpInfo* info = nullptr;
  std::vector<TensorSlot> input_slots;  // every defined tensor argument, flattened
  std::vector<TensorId> inputs;         // engine tensors, parallel to input_slots
  std::vector<TensorId> locked;         // what before_op locked in the engine
  std::vector<c10::IValue> args;        // snapshots in place of tensors (compute ops only)
  int32_t target = -1;                  // index in `inputs` of the written tensor (in_place)
  uint64_t target_nbytes = 0;
  bool record = false;                  // record the op once it has run
  bool new_target_storage = false;      // the target was copied away: Note [Copy on write]
  uint32_t chain_writes = 0;  // the new target's copied_writes: Note [Chains through copies]
  bool overwrite = false;               // Note [Overwrite]
  uint64_t workspace_bytes = 0;         // the kernel's scratch, while tracing (Note [Op workspace])
  StorageId orphan = kNoId;             // the overwritten storage's old engine storage
  // The overwritten storage, which the op writes without a lock (Note [Moving storages]).
  const c10::StorageImpl* unlocked_target = nullptr;
  // Note [Writes outside the dispatcher] in lineage.cpp: each exposed input's slot and the
  // fingerprint of the bytes the op reads there.
  std::vector<std::pair<TensorSlot, uint64_t>> fingerprints;
  // Note [Grown storages] in lineage.cpp: the tensors the op writes.
  std::vector<at::Tensor> written;
  // The dispatch keys below dtr's that the fallback runs the op with (Note [Op context]).
  c10::DispatchKeySet keys;
  // Scratch: before_op's input tensors (parallel to input_slots) and after_op's outputs.
  // Emptied when the op ends (release()): they hold references.
  std::vector<at::Tensor> tensors;
  std::vector<OutputSpec> specs;
  std::vector<TensorSlot> output_slots;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> impls;
  std::vector<char> evictable;  // per output: an OutputKeep (lineage.cpp)
  std::vector<TensorId> outputs;

  void reset(const OpInfo& op_info, bool record_op) {
    info = &op_info;
    input_slots.clear();
    inputs.clear();
    locked.clear();
    args.clear();
    target = -1;
    target_nbytes = 0;
    record = record_op;
    new_target_storage = false;
    chain_writes = 0;
    overwrite = false;
    workspace_bytes = 0;
    orphan = kNoId;
    unlocked_target = nullptr;
    fingerprints.clear();
    release();
  }
  void release() {
    args.clear();  // moved into the op's record if it was recorded
    tensors.clear();
    written.clear();
    specs.clear();
    output_slots.clear();
    impls.clear();
    evictable.clear();
    outputs.clear();
  }
};

class Lineage final : public EngineHooks, public EvictionCallback {
 public:
  // `history` (DTR_SNAPSHOT; may be null) learns which blocks are parameters and
  // activations, and which frees are evictions and which allocations remats.
  // `plan` (may be null): DTR_PLAN's hints, Note [Warm start in PyTorch].
  Lineage(const Config& config, CachingAllocator& allocator, MemoryHistory* history,
          std::shared_ptr<const PlanHints> plan);

  std::recursive_mutex& mutex() { return mutex_; }
  // In the child of fork(): a remat never raises the thread count (Note [Op context]).
  void note_forked_child() { forked_child_ = true; }
  Engine& engine() { return *engine_; }
  const PlanGuide* guide() const { return guide_.get(); }
  const PlanHints* plan() const { return plan_.get(); }

  // DTR_TRACE, or the trace `auto`'s trial records (Note [Trial by replay]): the fallback
  // measures each recorded op's scratch (Note [Measuring workspaces] in cpu_allocator.cpp).
  bool tracing() const { return recording_->tracing(); }
  // The fallback's side (dispatch_hook.cpp). `stack` holds the op's arguments on top.
  void before_op(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack& stack,
                 PendingOp& pending);
  // The op has run; its returns are on top of `stack`.
  void after_op(const c10::OperatorHandle& op, PendingOp& pending, torch::jit::Stack& stack,
                uint64_t compute_ns);
  // The op threw: unlocks what before_op locked.
  void abort_op(PendingOp& pending);

  // Raw access (Note [Raw access] in dispatch_hook.cpp): refills the tensor's storage if
  // evicted and, with held null, pins it for good (torch.ops.dtr.pin_raw); inside a raw
  // scope (Note [Raw scopes]) locks it and keeps it alive until release_raw_access(*held).
  // An undefined tensor, or one not on the CPU, is left alone.
  void hold_for_raw_access(const at::Tensor& tensor, RawHold* held);
  void release_raw_access(RawHold& held);
  // Note [Composites that read past the dispatcher] in dispatch_hook.cpp: while one that
  // writes results directly runs on any thread, nothing moves (compact waits).
  void begin_raw_composite() { raw_composites_.fetch_add(1, std::memory_order_acq_rel); }
  void end_raw_composite() { raw_composites_.fetch_sub(1, std::memory_order_acq_rel); }
  // Note [Storages Python allocates] in dispatch_hook.cpp: moves the tensor's storage into
  // our allocator if PyTorch's default CPU allocator made it; true if it moved.
  bool adopt_default_storage(const at::Tensor& tensor);

  // Note [Collecting dead lineage]: releases dead storages, discards what nothing can
  // need; called every so many ops and before evicting for the allocator.
  void collect(bool full);
  // At start and after dtr.set_budget: Note [Temporaries] (the newest storages are scanned
  // after every op when there is no budget), and the thrash watch counts from now; a
  // change of budget starts `auto`'s trial again (Note [Trial after a budget change]).
  void budget_changed(uint64_t budget_bytes);
  std::vector<std::vector<TensorId>> held_storages() const;
  // A training step ended (Note [Step marks] in dispatch_hook.cpp): Engine::end_period,
  // and a STEP annotation in the trace.
  void end_period();
  // An optimizer step's scope opens and closes (the outermost one); the close ends a period
  // where the step ends an iteration (Note [Iteration periods]).
  void begin_optimizer_step();
  void end_optimizer_step();
  void mark_step();  // Note [Marked steps]
  // Note [Ratio budgets]: sets option budget's ratio of the peak so far once the first
  // kRatioBudgetSteps periods ended; not yet applied at exit: a warning (at_exit).
  void apply_ratio_budget();
  void warn_ratio_budget_unapplied();
  // Asks the thrash watch; warns or arms the raise (Note [Thrashing within one op]).
  void watch_for_thrash();
  void watch_for_runaway();  // Note [Runaway cascades] in eviction/thrash_watch.cpp
  // Throws PyTorch's out-of-memory error for a failed engine call: the armed thrash
  // message for `thrash` (Note [Thrashing within one op]), else the status's own.
  [[noreturn]] void throw_status(const Status& status);

  // The first half of a collect: releases storages found dead since the last scan, among
  // the `newest` storages adopted last (all by default: Note [Temporaries]).
  void scan_for_dead(size_t newest = SIZE_MAX);

  // DTR_TRACE, DTR_TIMELINE: writes what was recorded (recording.h).
  void write_recordings();

  // EngineHooks
  void on_compute(OpId op, bool remat) override;
  void on_evict(StorageId s) override;
  void on_retire(OpId op) override;
  void on_retire_storage(StorageId s) override;
  bool stop_remats() override;  // Note [Thrashing within one op]
  bool may_recompute(OpId op) override;  // Note [Writes outside the dispatcher]
  bool may_evict(StorageId s) override;  // Note [Unrecomputable victims] in eviction/engine.cpp
  // EvictionCallback (the allocator, without its lock)
  uint64_t make_room(uint64_t bytes_needed, bool contiguous_request) override;
  uint64_t before_new_peak(uint64_t bytes_requested) override;
  uint64_t compact(uint64_t bytes_requested) override;  // Note [Moving storages]
  uint64_t pinned_bytes() const override;
  // Note [Memory outside the allocator]: material storages whose memory is not ours, and
  // with `freed` those PyTorch freed that no scan has found yet.
  uint64_t outside_bytes(bool freed) const;
  std::string oom_advice(uint64_t bytes_requested) const override;
  std::string oom_context() const override;  // Note [Out-of-memory within a remat]
  uint64_t evictable_bytes() const override;
  uint64_t in_use_bytes() const override;

 private:
  std::unique_lock<std::recursive_mutex> allocator_lock() const;
  // after_op's body, run under its guard: Note [Exceptions after an op] in lineage.cpp.
  void record_finished_op(const c10::OperatorHandle& op, PendingOp& pending,
                          torch::jit::Stack& stack, uint64_t compute_ns);
  struct StorageRec {
    c10::weak_intrusive_ptr<c10::StorageImpl> impl{
        c10::weak_intrusive_ptr<c10::StorageImpl>(c10::intrusive_ptr<c10::StorageImpl>())};
    TensorId current = kNoId;     // the version ops read now
    uint32_t snapshot_refs = 0;   // live snapshots whose storage is `impl`
    uint32_t versions = 0;        // in-place ops recorded on it: Note [Mutation]
    // In-place ops recorded on the copies it was made from (Note [Chains through copies]).
    uint32_t copied_writes = 0;
    std::vector<std::pair<OpId, uint32_t>> readers;  // (op, input index) snapshots
    bool dead = false;            // unreachable from the program: refs released
    bool discarded = false;       // Note [Collecting dead lineage]; also once retired
    bool death_traced = false;    // its RELEASEs are in the trace: Note [Tracing under a budget]
    // The program can write its memory without the dispatcher: Note [Writes outside the
    // dispatcher] in lineage.cpp.
    bool exposed = false;
    // Pinned when recorded for being under option min_evictable: Note [Small storages].
    bool small = false;
  };
  struct OpRec {
    c10::optional<c10::OperatorHandle> op;
    // Empty once the lineage is dropped (or a constant). Inline for a usual op's handful
    // of arguments: Note [Hot-path allocations] in lineage.cpp.
    c10::SmallVector<c10::IValue, 4> args;
    c10::SmallVector<TensorSlot, 4> input_slots;
    c10::SmallVector<TensorSlot, 2> output_slots;  // per engine output: its place among the returns
    bool in_place = false;    // remat writes target_slot's tensor in its own storage
    bool overwrite = false;   // Note [Overwrite]: the target's old value is not an input
    int16_t generator_arg = -1;  // Note [Seeded ops]: args[k] holds the generator's state
    LeanKernel lean_kernel = nullptr;  // OpInfo::lean_kernel
    TensorSlot target_slot;
    // Note [Packed masks]: what the op wrote, one bit per element, and the bit pattern of
    // its nonzero elements; empty when a remat replays the op instead.
    c10::DataPtr mask_bits;
    uint64_t mask_one = 0;
    // Note [Writes outside the dispatcher]: each exposed input's slot and the fingerprint
    // of the bytes the op read there.
    c10::SmallVector<std::pair<TensorSlot, uint64_t>, 1> fingerprints;
    // Note [Op context]: the keys the op ran with below dtr's, and the state it saw.
    c10::DispatchKeySet keys;
    OpContext context;
  };

  StorageId lookup(const c10::StorageImpl* impl) const;
  TensorId input_tensor(const at::Tensor& t, bool register_unknown);
  TensorId register_constant(const at::Tensor& t);
  bool is_external(const c10::StorageImpl& impl) const;  // Note [Writes outside the dispatcher]
  void adopt(StorageId s, const c10::weak_intrusive_ptr<c10::StorageImpl>& impl,
             TensorId current);
  void sync_tables();
  bool has_readers(StorageId s);
  bool has_live_readers(StorageId s);
  bool has_readers_beyond(StorageId s);
  bool reads_reach_beyond(StorageId s) const;
  void copy_on_write(StorageId s);
  void hold_inner_tensors(const at::Tensor& t, bool written);
  template <typename F>
  void for_each_unpinned_child(StorageId s, F&& f) const;
  void pin_live_descendants(StorageId root);
  Mark mark_needed();
  bool cut_at_dead_constants(Mark needed_mark);
  Mark begin_marks();
  bool is_ours(const c10::StorageImpl& impl) const;
  void warn_outside(const c10::OperatorHandle& op,
                    const at::Tensor& result);  // Note [Results outside the allocator]
  void release_storage(StorageId s);
  void discard_storage(StorageId s);  // Note [Collecting dead lineage]
  void forget_storage(StorageId s);   // Note [Grown storages] in lineage.cpp
  bool found_dead(StorageId s) const;
  // Of the newest `newest` storages of alive_ (all by default): Note [Deaths in the
  // trial's trace] in collector.cpp.
  void trace_deaths(size_t newest = SIZE_MAX);
  void drop_lineage(OpId op);
  void set_block_owner(StorageId s);
  void reuse_retired_ids();
  void print_storages() const;
  bool full_collect_stale() const;
  bool full_collect_due() const;  // Note [Collects when making room]
  bool full_collect_earned(size_t per_op) const;
  bool scan_earned(uint64_t last_full_scan) const;  // Note [Scan credit]
  Status pin_tensor(TensorId t);

  const Config config_;
  CachingAllocator& allocator_;
  MemoryHistory* history_;  // null unless a snapshot is recorded
  c10::DeleterFnPtr our_deleter_ = nullptr;  // the CPU allocator hook's
  uint64_t dead_scan_ops_ = UINT64_MAX;      // ops recorded at the last dead scan
  uint64_t trace_scan_ops_ = UINT64_MAX;     // the same, of trace_deaths' last full scan
  uint64_t full_collect_ops_ = UINT64_MAX;   // ... and at the last full collect
  uint64_t deaths_ = 0;                      // storages found dead so far
  uint64_t full_collect_deaths_ = UINT64_MAX;
  uint64_t pinned_dead_bytes_ = 0;  // pinned storages found dead since the last full collect
  uint64_t pinned_dead_large_bytes_ = 0;  // ... of kSmallPinnedBytes or more each
  uint64_t pinned_dead_kept_bytes_ = 0;  // ... and dead pinned ones it kept, still needed
  uint64_t pinned_dead_kept_large_bytes_ = 0;  // ... of kSmallPinnedBytes or more each
  // Note [Discards in a trace]: new versions recorded since the last full collect, and
  // whether that collect's cut (Note [Dead constants]) found a dead constant still needed.
  uint64_t versions_since_collect_ = 0;
  bool holds_dead_constants_ = false;
  SteadyClock clock_;
  // Note [Noisy op times] in eviction/op_costs.cpp: op_cost "median" (else each op's own time)
  const bool median_costs_;
  OpCosts op_costs_;
  // Note [Thrashing in a live run] in eviction/thrash_watch.cpp
  ThrashWatch thrash_watch_;
  const ThrashAction thrash_action_;
  // on_thrash:raise: raised at the start of the next op, or where the engine stopped a
  // cascade of remats for it (Note [Thrashing within one op])
  std::string thrash_error_;
  // Note [Ratio budgets]: the ratio still to set (0: none), the periods ended so far, and
  // a budget that could not be met, raised at the start of the program's next op.
  double ratio_budget_ = 0.0;
  uint32_t periods_ended_ = 0;
  std::string ratio_error_;
  std::shared_ptr<const PlanHints> plan_;  // DTR_PLAN, or null
  std::unique_ptr<PlanGuide> guide_;       // follows plan_: the engine's hooks
  std::unique_ptr<Engine> engine_;
  mutable std::recursive_mutex mutex_;
  bool forked_child_ = false;
  std::vector<StorageRec> storages_;
  std::vector<OpRec> ops_;
  // Its nodes come from mimalloc: Note [Hot-path allocations] in lineage.cpp.
  std::unordered_map<const c10::StorageImpl*, StorageId, std::hash<const c10::StorageImpl*>,
                     std::equal_to<const c10::StorageImpl*>,
                     mi_stl_allocator<std::pair<const c10::StorageImpl* const, StorageId>>>
      by_impl_;
  std::vector<StorageId> active_;  // storages not yet discarded
  std::vector<StorageId> alive_;   // ... and not yet found dead (some may be, since)
  std::vector<Mark> marks_;        // begin_marks()
  std::vector<StorageId> retired_readers_;  // inputs of ops retired since the last reuse
  Mark mark_epoch_ = 0;
  size_t bulk_turn_ = 0;  // Note [Small dead constants in bulk]: where its walks start
  // Note [Writes outside the dispatcher]: exposed storages lineage does not know now
  // (exported before an op read them, or copied away: Note [Copy on write]), exposed once
  // read as constants; and why a remat was refused.
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> exposed_unknown_;
  // Note [Iteration periods]: what the anchoring step wrote (the anchors: the run's first
  // step's, or the step's that replaced them), whether the open step wrote one, and what
  // the open step wrote.
  bool step_open_ = false;
  bool step_wrote_anchor_ = false;
  uint32_t step_misses_ = 0;          // steps since the last that wrote an anchor
  uint32_t step_longest_misses_ = 0;  // the most of them before a step that did
  bool marked_steps_ = false;         // Note [Marked steps]: the program marks them
  std::unordered_map<const c10::StorageImpl*, c10::weak_intrusive_ptr<c10::StorageImpl>>
      step_anchors_;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> step_writes_;
  void note_step_write(c10::StorageImpl* impl);
  void remember_exposed(const c10::intrusive_ptr<c10::StorageImpl>& impl);
  bool any_exposed_ = false;  // some storage was ever exposed: else no op looks
  bool warned_outside_ = false;  // Note [Results outside the allocator]
  std::string refusal_;
  bool exposed_inputs_unchanged(const OpRec& r);
  // Note [Unrecomputable victims]: ops found unchanged since the last op ran, and the walk.
  std::vector<OpId> unchanged_ops_;
  uint64_t unchanged_at_ = UINT64_MAX;
  std::vector<StorageId> victim_walk_;
  // Copy on write within the current op: the user's storage -> the copy of its old value.
  std::vector<std::pair<const c10::StorageImpl*, c10::intrusive_ptr<c10::StorageImpl>>> cow_;
  // Storages running ops overwrite without locking them: Note [Moving storages].
  std::vector<const c10::StorageImpl*> unlocked_targets_;
  std::unique_ptr<Recording> recording_;  // trace and timeline (recording.h)
  bool trial_by_replay_ = false;          // `auto` with option trial:replay, no plan
  uint64_t budget_bytes_ = kUnlimitedBytes;  // as budget_changed() last saw it
  std::atomic<int> raw_composites_{0};    // Note [Composites that read past the dispatcher]
  std::atomic<bool> scan_newest_{false};  // no budget: Note [Temporaries]
  uint64_t ops_recorded_ = 0;
  uint64_t ops_since_collect_ = 0;
  uint64_t kept_at_collect_ = 0;  // active_.size() after the last full collect
  uint64_t evicted_bytes_in_call_ = 0;
};

// The process's lineage (null before start_lineage).
Lineage* the_lineage();
// The wall time the calling thread has spent in Lineage::make_room, summed: an op's time
// leaves out what its thread spent there (Note [Host work in op times] in lineage.cpp).
uint64_t room_ns_on_this_thread();

// The dispatch key our fallback sits on: Note [Dispatch key] in dispatch_hook.cpp.
using torch_compat::kDtrKey;

// dispatch_hook.cpp: registers the fallback and the dtr:: ops once per process; false
// when another library already handles kDtrKey (then nothing records).
bool register_dispatch_hook();
// Note [Reads of evicted storages] (dispatch_hook.cpp): a storage of nbytes was evicted.
void note_evicted_bytes(uint64_t nbytes);
void enable_hook_on_this_thread(bool on);
// Note [Threads]: includes the key on a Python thread that allocates without it.
void record_if_python_thread();

}  // namespace dtr::torch_integration
