// recording.cpp: the trace and the timeline of a live run (recording.h).
//
// Note [Recording a trace]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// DTR_TRACE=path writes, at exit, what the engine was told, in our trace format: each
// engine tensor is one name (t<id>), a recorded op a CALL (an in-place op recorded as a
// new version: a result aliasing the written input), a constant a CONSTANT (where an op
// first read it, or with trace_constants:allocated where its memory was allocated: Note
// [Constants where they were allocated]), a death a
// RELEASE per reference, a pin (raw access, a mutated persistent buffer, a gradient at
// the optimizer step) a PIN, a pin made only where the storage is material (Note [Dead
// constants] in lineage.cpp) a PIN with WHEN_MATERIAL (format v3), and a storage the
// collector discarded (nothing can read it again; pinned storages are freed only this
// way) a DISCARD (format v2). `dtr-sim run --trace path` replays it under any policy and
// budget. A RELEASE is written when the collector finds the storage dead; while tracing it
// looks before every op (not every 64 ops), so the release comes before the next op
// allocates, as memory would come back without lineage (the snapshots of recorded ops
// keep a dead storage's memory until the collector sees it). Under a budget that look
// only writes the RELEASE, and the run goes on as untraced (Note [Tracing under a budget]
// in collector.cpp). A recorded op's scratch, which it allocated and freed again while it
// ran, is its CALL's WORKSPACE (Note [Measuring workspaces] in cpu_allocator.cpp). Not in
// the trace: the memory of unrecorded ops and tensors made with recording off.
//
// Note [Constants where they were allocated]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine learns of a storage it did not make (a parameter filled by an opaque init op,
// a batch drawn by randn under no_grad) when an op first reads it, and the CONSTANT came
// there: a replay counted none of a model's parameters until its forward pass read them
// (33 MB less than the live run held at the start of the 2000-layer MLP). Memory held it
// from its allocation on. So where
// our allocator made it, the CONSTANT goes where the allocation came: each CALL notes how
// many allocations the allocator had handed out when it was recorded
// (CachingAllocator::allocations), and a constant whose block's number
// (allocation_number) is no more than a CALL's count goes just before the first such CALL
// (after the START and the declarations of a trace begun mid-run, at the latest when the
// CALL that reads it is recorded). The placed constants wait beside the trace and join it,
// in order, before a replay or a write reads it. Memory from elsewhere (numpy, a
// DataLoader worker's shared memory, tensors made before the library was loaded) is
// declared where it is first read, as before. `auto`'s own trace (Note [Trial by replay])
// places them always; a DTR_TRACE file only with option trace_constants:allocated, since
// a plan cannot be made from such a trace (Note [Plans number constants at first read] in
// core/constant_placement.cpp): the placed ones say EARLY.
//
// Note [Trial trace from a budget change]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A budget set after the start (dtr.set_budget) starts `auto`'s trial again (Note [Trial
// after a budget change] in eviction/heuristics/auto_heuristic.cpp), and its replays need
// a trace; without DTR_TRACE none is kept by then. So one starts at the change
// (start_trial), as a trace of a program whose memory already holds what the program holds
// now: after START, a CONSTANT for each material storage the program holds (what the
// collector has found dead, and storages only lineage keeps, are not declared), COPYs for
// its other held tensors. Its lineage is not in the trace, so a replay cannot remake what
// came before; a storage that was evicted then is declared as a CONSTANT where a CALL first
// reads it, and a RELEASE, PIN or DISCARD of a tensor the trace never named is left out (it
// was not declared). At a step's end, where scripts set budgets, the program holds its
// parameters and optimizer state, which are pinned anyway.
//
// Note [Live timeline]
// ~~~~~~~~~~~~~~~~~~~~
// DTR_TIMELINE=path writes, at exit, a Chrome trace (core/chrome_trace.h) on the steady
// clock: one span per recorded op, ending when the fallback recorded it and as long as
// the op ran; one per remat on the remat track, timed around the re-run (TimelineHooks,
// Timing::measured); an eviction mark per storage the policy chose; and the allocator's
// allocated bytes after every recorded op and every eviction or remat. Ops that ran with
// recording off (dtr.disable()) or that were not recorded (opaque ops, Note [Never
// recompute]) have no span, but their memory shows in the allocated counter.
#include "integration/torch/recording.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/chrome_trace.h"
#include "dtr/sim/trial_replay.h"

namespace dtr::torch_integration {

namespace {
// The trial's trace (Note [Trial by replay]) is dropped past this many events, about 125
// MB of host memory; two steps of the chunked LSTM LM, one of the longest test scripts, are
// about 85 000.
constexpr size_t kTrialMaxEvents = 500'000;
}  // namespace

bool constants_where_allocated(const Config& config) {
  if (config.trace_constants == "read") return false;
  if (config.trace_constants == "allocated") return true;
  throw ConfigError("dtr: option trace_constants is '" + config.trace_constants +
                    "'; valid values: read, allocated (DTR_CONF trace_constants:allocated)");
}

Recording::Recording(const Config& config, CachingAllocator& allocator, const Clock& clock,
                     bool trial)
    : config_(config),
      allocator_(allocator),
      clock_(clock),
      constants_where_allocated_(config.trace.empty() || constants_where_allocated(config)) {
  if (!config.trace.empty() || trial) {
    trace_ = std::make_unique<Trace>();
    trace_->version = kTraceFormatVersion;
    TraceEvent start;
    start.op = "START";
    trace_->events.push_back(std::move(start));
    tracing_.store(true, std::memory_order_relaxed);
  }
  if (!config.timeline.empty()) {
    timeline_ = std::make_unique<Timeline>();
    const uint64_t budget = allocator.config().budget_bytes;
    timeline_->budget(clock_.now(), budget == kUnlimitedBytes ? std::optional<uint64_t>()
                                                             : std::optional<uint64_t>(budget));
    sample_allocated();
  }
}

Recording::~Recording() = default;

EngineHooks* Recording::engine_hooks(EngineHooks* host) {
  if (!timeline_) return host;
  timeline_hooks_ = std::make_unique<TimelineHooks>(*timeline_, host,
                                                    TimelineHooks::Timing::measured);
  // The counter is the allocator's: the engine knows only the storages it recorded.
  timeline_hooks_->sample_from(
      [this] { return allocator_.stats().allocated_bytes.all.current; });
  return timeline_hooks_.get();
}

void Recording::bind(const Engine& engine) {
  engine_ = &engine;
  if (timeline_hooks_) timeline_hooks_->bind(engine);
}

void Recording::sample_allocated() {
  timeline_->allocated(clock_.now(), allocator_.stats().allocated_bytes.all.current);
}

void Recording::start_trial(const std::vector<std::vector<TensorId>>& held) {
  if (trace_) return;  // DTR_TRACE's, or the trial's since the start: it goes on
  trace_ = std::make_unique<Trace>();
  trace_->version = kTraceFormatVersion;
  TraceEvent start;
  start.op = "START";
  trace_->events.push_back(std::move(start));
  for (const std::vector<TensorId>& tensors : held) {
    constant(tensors[0], engine_->storage_size(engine_->storage_of(tensors[0])));
    for (size_t i = 1; i < tensors.size(); ++i) {
      TraceEvent e;
      e.kind = TraceEventKind::copy;
      e.src = trace_name(tensors[0]);
      e.dst = trace_name(tensors[i]);
      trace_->events.push_back(std::move(e));
    }
  }
  tracing_.store(true, std::memory_order_relaxed);
}

bool Recording::named(TensorId t) const {
  return t < trace_names_.size() && trace_names_[t] != UINT32_MAX;
}

NameId Recording::trace_name(TensorId t) {
  if (trace_names_.size() <= t) trace_names_.resize(t + 1, UINT32_MAX);
  if (trace_names_[t] == UINT32_MAX)
    trace_names_[t] = trace_->intern("t" + std::to_string(next_name_++));
  return trace_names_[t];
}

void Recording::trace_simple(TraceEventKind kind, TensorId t) {
  if (!named(t)) return;  // Note [Trial trace from a budget change]: not declared
  TraceEvent e;
  e.kind = kind;
  e.dst = trace_name(t);
  trace_->events.push_back(std::move(e));
}

void Recording::constant(TensorId t, uint64_t bytes, uint64_t allocation) {
  if (!trace_) return;
  TraceEvent e;
  e.kind = TraceEventKind::constant;
  e.results.push_back(TraceResult{trace_name(t), bytes, -1});
  // Note [Constants where they were allocated]: calls_ is empty unless it places them.
  const auto call =
      std::lower_bound(calls_.begin(), calls_.end(), allocation,
                       [](const CallMark& m, uint64_t number) { return m.allocations < number; });
  if (allocation == 0 || call == calls_.end()) {
    trace_->events.push_back(std::move(e));
  } else {
    e.early = true;  // Note [Plans number constants at first read]
    placed_.push_back({call->event, std::move(e)});
  }
}

// Note [Constants where they were allocated]: the placed constants join the trace.
void Recording::place_constants() {
  if (placed_.empty()) return;
  std::stable_sort(placed_.begin(), placed_.end(),
                   [](const Placed& a, const Placed& b) { return a.before < b.before; });
  std::vector<TraceEvent> events;
  events.reserve(trace_->events.size() + placed_.size());
  size_t next = 0;
  for (size_t i = 0; i < trace_->events.size(); ++i) {
    for (; next < placed_.size() && placed_[next].before == i; ++next)
      events.push_back(std::move(placed_[next].event));
    events.push_back(std::move(trace_->events[i]));
  }
  trace_->events = std::move(events);
  next = 0;  // each CALL moves down by the constants placed at or before it
  for (CallMark& m : calls_) {
    while (next < placed_.size() && placed_[next].before <= m.event) ++next;
    m.event += next;
  }
  placed_.clear();
}

void Recording::op(std::string_view name, OpId id, const std::vector<TensorId>& inputs,
                   const std::vector<OutputSpec>& specs, const std::vector<TensorId>& outputs,
                   uint64_t compute_ns, uint64_t remat_ns, uint64_t workspace_bytes) {
  if (trace_) {
    if (constants_where_allocated_)  // Note [Constants where they were allocated]
      calls_.push_back({allocator_.allocations(), trace_->events.size()});
    TraceEvent e;
    e.kind = TraceEventKind::call;
    e.op = std::string(name);
    e.time_ns = compute_ns;
    e.remat_time_ns = remat_ns;  // Engine::kSameCost is TraceEvent::kSameTime
    e.workspace_bytes = workspace_bytes;
    for (TensorId in : inputs) {
      // Note [Trial trace from a budget change]: evicted when the trace started.
      if (!named(in)) constant(in, engine_->storage_size(engine_->storage_of(in)));
      e.args.push_back(trace_name(in));
    }
    for (size_t i = 0; i < outputs.size(); ++i)
      e.results.push_back(TraceResult{trace_name(outputs[i]), specs[i].size_bytes, specs[i].alias});
    trace_->events.push_back(std::move(e));
    // Note [Trial by replay]: a program whose second step is long in coming (no optimizer
    // steps at all, or very long ones) is not recorded without end; `auto` then tries its
    // candidates live, if periods come.
    if (trace_->events.size() > kTrialMaxEvents && config_.trace.empty()) {
      std::fprintf(stderr,
                   "dtr: policy auto recorded %zu trace events without two training steps and "
                   "stopped recording them for its trial by replay; if steps come, it tries its "
                   "candidates live, one step each (option trial:live does so without this "
                   "note)\n",
                   kTrialMaxEvents);
      drop_trial_trace();
    }
  }
  if (timeline_) {
    // Note [Live timeline]: the op ran just before it was recorded.
    const Tick end = clock_.now();
    const uint32_t interned = timeline_->intern(name);
    timeline_->span(interned, end > compute_ns ? end - compute_ns : 0, compute_ns, false, id);
    timeline_hooks_->name_op(id, name);
    sample_allocated();
  }
}

void Recording::release(TensorId t) {
  if (trace_) trace_simple(TraceEventKind::release, t);
}

void Recording::pin(TensorId t) {
  if (trace_) trace_simple(TraceEventKind::pin, t);
}

void Recording::pin_when_material(TensorId t) {
  if (!trace_) return;
  if (!named(t)) return;
  trace_simple(TraceEventKind::pin_when_material, t);
  const NameId name = trace_names_[t];
  if (pinned_when_material_.size() <= name) pinned_when_material_.resize(name + 1, false);
  pinned_when_material_[name] = true;
}

void Recording::write_pinned(TensorId t) {
  if (!trace_ || t >= trace_names_.size()) return;
  const NameId name = trace_names_[t];
  if (name < pinned_when_material_.size() && pinned_when_material_[name])
    trace_simple(TraceEventKind::pin, t);
}

void Recording::discard(TensorId t) {
  if (trace_) trace_simple(TraceEventKind::discard, t);
}

void Recording::step() {
  if (!trace_) return;
  TraceEvent e;
  e.kind = TraceEventKind::annotate;
  e.op = "STEP";
  trace_->events.push_back(std::move(e));
}

void Recording::forget(const std::vector<TensorId>& ts) {
  for (TensorId t : ts)
    if (t < trace_names_.size()) trace_names_[t] = UINT32_MAX;
}

std::vector<ReplayedPeriod> Recording::replay_trial(const std::vector<std::string>& policies,
                                                    uint64_t budget_bytes) {
  std::vector<ReplayedPeriod> out;
  if (trace_ && budget_bytes != kUnlimitedBytes) {
    // As this host runs: its budget caps live bytes, not a device's blocks (the byte model,
    // which follows resnet18's live overhead within 0.02: docs/pytorch.md, "Simulator
    // against the live run"), and what the program drops stays until an eviction request
    // (Note [Lazy release] in eviction/engine.cpp). Its options (dead_first, ...) as given.
    Config config = config_;
    config.allocator = "none";
    config.reserved_limit = Budget{};
    config.lazy_release = true;
    place_constants();
    try {
      out = replay_last_period(*trace_, ReplayOptions::from_config(config), budget_bytes, policies);
    } catch (const std::exception& e) {  // the training step goes on: the live trial instead
      std::fprintf(stderr,
                   "dtr: policy auto could not replay its first steps (%s); it tries "
                   "its candidates live instead\n",
                   e.what());
      out.clear();
    }
  }
  drop_trial_trace();
  return out;
}

void Recording::drop_trial_trace() {
  if (!config_.trace.empty()) return;  // DTR_TRACE's
  tracing_.store(false, std::memory_order_relaxed);
  trace_.reset();
  decltype(calls_)().swap(calls_);
  decltype(placed_)().swap(placed_);
  decltype(trace_names_)().swap(trace_names_);
  decltype(pinned_when_material_)().swap(pinned_when_material_);
}

void Recording::write_files() {
  if (trace_ && !config_.trace.empty()) {
    place_constants();
    try {
      write_trace(*trace_, config_.trace);
      std::fprintf(stderr, "dtr: wrote trace %s (%zu events)\n", config_.trace.c_str(),
                   trace_->events.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtr: could not write the trace %s: %s\n", config_.trace.c_str(),
                   e.what());
    }
  }
  if (timeline_) {
    sample_allocated();
    try {
      ChromeTraceInfo info;
      info.host = "torch";
      info.clock = "steady";
      write_chrome_trace(config_.timeline, *timeline_, info);
      std::fprintf(stderr, "dtr: wrote timeline %s\n", config_.timeline.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtr: could not write the timeline %s: %s\n",
                   config_.timeline.c_str(), e.what());
    }
  }
}

}  // namespace dtr::torch_integration
