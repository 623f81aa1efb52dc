// recording.h: what a live run leaves behind for later: its trace (`trace`, DTR_TRACE) and
// its timeline (`timeline`, DTR_TIMELINE); and the trace of its first steps that `auto`
// replays to choose a policy (Note [Trial by replay] in
// eviction/heuristics/auto_heuristic.cpp). The memory snapshot (`snapshot`) is the
// runtime's (runtime.cpp), since it needs no lineage.
//
// No torch header: the lineage (lineage.cpp) tells a Recording what the engine was told,
// under the engine lock, and the Recording writes the files at exit, from the process
// that loaded the library only (a forked DataLoader worker writes nothing).
//
// Cost: nothing is kept unless an option asks for it, or `auto` runs under a budget (its
// trial, from the start or from a budget change, until the end of the second step); each
// call is then a push_back (the timeline's allocated sample reads the allocator's stats:
// one more lock per op).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dtr/core/clock.h"
#include "dtr/core/options.h"
#include "dtr/core/timeline.h"
#include "dtr/core/trace.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/timeline_hooks.h"

namespace dtr {

class CachingAllocator;

namespace torch_integration {

// Option trace_constants: true for `allocated`; throws ConfigError for a bad value.
bool constants_where_allocated(const Config& config);

class Recording {
 public:
  // trial: also record a trace, in memory, until replay_trial() (option trial:replay).
  Recording(const Config& config, CachingAllocator& allocator, const Clock& clock, bool trial);
  ~Recording();

  // The hooks to build the engine with: `host` itself, or a TimelineHooks in front of it
  // that times remats and marks evictions. Then bind() the engine, before its first op.
  EngineHooks* engine_hooks(EngineHooks* host);
  void bind(const Engine& engine);

  bool active() const { return trace_ || timeline_; }
  // DTR_TRACE, or the trial's trace: the host then scans for deaths before every op (Note
  // [Recording a trace] in recording.cpp). Read without the lock (one store, at the
  // trial's end).
  bool tracing() const { return tracing_.load(std::memory_order_relaxed); }
  // Whether a constant() is placed where it was allocated (Note [Constants where they were
  // allocated] in recording.cpp): the caller then passes its allocation number.
  bool places_constants() const { return tracing() && constants_where_allocated_; }

  // Note [Trial by replay]: the program recorded so far (up to the STEP just recorded),
  // replayed under each policy at budget_bytes as this host runs (sim/trial_replay.h); empty
  // where nothing was recorded or there is no budget. Then a trace kept for the trial only
  // is dropped, and tracing() is false unless DTR_TRACE asks for one.
  std::vector<ReplayedPeriod> replay_trial(const std::vector<std::string>& policies,
                                           uint64_t budget_bytes);

  // Note [Trial trace from a budget change]: starts the trial's trace now, unless one is
  // kept already; `held`: the program's material storages, each as the tensors it holds.
  void start_trial(const std::vector<std::vector<TensorId>>& held);

  // What the engine was told (Note [Recording a trace] in recording.cpp).
  // allocation: CachingAllocator::allocation_number of its block, 0 if not ours (Note
  // [Constants where they were allocated] in recording.cpp).
  void constant(TensorId t, uint64_t bytes, uint64_t allocation = 0);
  // remat_ns: Engine::kSameCost, or what a remat of it costs (Note [Remat cost]);
  // workspace_bytes: the scratch it held while it ran (Note [Op workspace]).
  void op(std::string_view name, OpId id, const std::vector<TensorId>& inputs,
          const std::vector<OutputSpec>& specs, const std::vector<TensorId>& outputs,
          uint64_t compute_ns, uint64_t remat_ns, uint64_t workspace_bytes);
  void release(TensorId t);
  void pin(TensorId t);
  // A pin the host makes only where the storage is material (Note [Dead constants] in
  // lineage.cpp); a replay makes it when the storage next is (Note [Pins when material]).
  void pin_when_material(TensorId t);
  // An in-place op read and wrote the pinned tensor `t` and was not recorded (Note
  // [Mutation]). If it was pinned by pin_when_material, the trace says the write needs it
  // material (a PIN): in a replay where it was evicted, the write refills it, as in a live
  // run where the pin was never made.
  void write_pinned(TensorId t);
  void discard(TensorId t);  // the storage of `t` was discarded (Engine::discard)
  void step();               // a training step ended: `ANNOTATE STEP` (Note [Step marks])
  // These tensors were retired (Note [Retiring]): their ids may name new tensors.
  void forget(const std::vector<TensorId>& ts);

  // Writes the trace and the timeline that were asked for; says where on stderr.
  void write_files();

 private:
  bool named(TensorId t) const;  // the trace has a name for t
  NameId trace_name(TensorId t);
  void trace_simple(TraceEventKind kind, TensorId t);
  void sample_allocated();

  const Config& config_;
  CachingAllocator& allocator_;
  const Clock& clock_;
  const Engine* engine_ = nullptr;    // bind()
  // Note [Constants where they were allocated]: placed (the trial's own trace, or
  // trace_constants:allocated), or declared where first read.
  const bool constants_where_allocated_;
  void drop_trial_trace();            // a trace kept for the trial only
  void place_constants();             // Note [Constants where they were allocated]
  std::unique_ptr<Trace> trace_;      // DTR_TRACE or the trial's (until replay_trial), else null
  std::atomic<bool> tracing_{false};  // trace_ != null
  // Note [Constants where they were allocated]: each CALL in trace_, with the allocator's
  // count when it was recorded; the constants placed before a CALL, not yet in trace_.
  struct CallMark {
    uint64_t allocations;
    size_t event;  // its index in trace_->events
  };
  std::vector<CallMark> calls_;
  struct Placed {
    size_t before;  // the index in trace_->events it goes before
    TraceEvent event;
  };
  std::vector<Placed> placed_;
  std::vector<NameId> trace_names_;  // TensorId -> name in trace_
  uint64_t next_name_ = 0;           // trace names are t0, t1, ...: never reused
  std::vector<bool> pinned_when_material_;  // by trace name: pin_when_material named it
  std::unique_ptr<Timeline> timeline_;  // DTR_TIMELINE, else null
  std::unique_ptr<TimelineHooks> timeline_hooks_;
};

}  // namespace torch_integration
}  // namespace dtr
