// replay.cpp: trace events -> engine calls.
//
// Note [Trace to engine]
// ~~~~~~~~~~~~~~~~~~~~~~
// Each trace name maps to an engine tensor. CALL records an op (outputs that alias an
// input take no memory; its WORKSPACE is held while it runs, Note [Op workspace] in
// eviction/engine.cpp); CONSTANT makes a pinned constant; COPY retains the tensor under
// a new name; COPY_FROM re-points a name (release the old tensor, retain the new one);
// RELEASE drops a reference; PIN pins (with WHEN_MATERIAL: Note [Pins when material]);
// DISCARD frees a storage for good. MUTATE is copy-on-write, as in DTR's simulator: the op
// produces a fresh storage per mutated argument (of that argument's storage size), the
// argument's name moves to it, and the old version is released, so lineages that read the
// old value keep reading it. At the end every tensor still referenced is
// rematerialized if needed and pinned: the step's results must exist when it returns.
// With a warm-start plan, a PlanGuide (eviction/plan_guide.h) is the engine's hooks and
// sees the end of every event: after a CALL, MUTATE or CONSTANT it is told the op.
// With a timeline, a TimelineHooks (eviction/timeline_hooks.h) records under the guide (or
// alone) and is told each op's name before the engine runs it.
#include "dtr/sim/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "dtr/allocator/fake_backend.h"
#include "dtr/core/check.h"
#include "dtr/core/chrome_trace.h"
#include "dtr/eviction/timeline_hooks.h"
#include "dtr/sim/replay_snapshot.h"
#include "dtr/sim/trial_replay.h"

namespace dtr {

Baseline compute_baseline(const Trace& trace, Timeline* timeline) {
  // Storage-level reference counting with unlimited memory: memory is charged when an op
  // runs and freed at a storage's last release (constants included).
  std::vector<uint32_t> storage_of(trace.names.size(), kNoId);
  std::vector<uint64_t> size;
  std::vector<uint32_t> refs;
  uint64_t live = 0;
  Baseline b;
  // The timeline's clock: recorded op time so far. An op's outputs are allocated when it
  // starts (allocated() below); what it frees is sampled when it ends (after the switch).
  uint64_t clock_ns = 0;
  // `scratch`: what the op held beside its results while it ran (Note [Op workspace] in
  // eviction/engine.cpp), counted in the peak only.
  auto allocated = [&](uint64_t scratch = 0) {
    b.peak_bytes = std::max(b.peak_bytes, live + scratch);
    if (timeline) timeline->allocated(clock_ns, live);
  };
  auto fresh = [&](uint64_t bytes) {
    size.push_back(bytes);
    refs.push_back(1);
    live += bytes;
    return static_cast<uint32_t>(size.size() - 1);
  };
  auto drop = [&](uint32_t s) {
    if (s == kNoId || refs[s] == 0) return;
    if (--refs[s] == 0) live -= size[s];
  };
  for (const TraceEvent& ev : trace.events) {
    switch (ev.kind) {
      case TraceEventKind::annotate: break;
      case TraceEventKind::constant:
        storage_of[ev.results[0].name] = fresh(ev.results[0].size_bytes);
        allocated();
        break;
      case TraceEventKind::call:
        b.compute_ns += ev.time_ns;
        for (const TraceResult& r : ev.results) {
          if (r.alias >= 0) {
            const uint32_t s = storage_of[ev.args[r.alias]];
            storage_of[r.name] = s;
            if (s != kNoId) ++refs[s];
          } else {
            storage_of[r.name] = fresh(r.size_bytes);
          }
        }
        allocated(ev.workspace_bytes);
        break;
      case TraceEventKind::mutate: {
        b.compute_ns += ev.time_ns;
        std::vector<uint32_t> fresh_ids;
        for (uint32_t m : ev.mutated) {
          const uint32_t old = storage_of[ev.args[m]];
          fresh_ids.push_back(fresh(old == kNoId ? 0 : size[old]));
        }
        allocated();
        for (size_t i = 0; i < ev.mutated.size(); ++i) {
          const NameId name = ev.args[ev.mutated[i]];
          const uint32_t old = storage_of[name];
          storage_of[name] = fresh_ids[i];
          drop(old);
        }
        break;
      }
      case TraceEventKind::copy: {
        const uint32_t s = storage_of[ev.src];
        storage_of[ev.dst] = s;
        if (s != kNoId) ++refs[s];
        break;
      }
      case TraceEventKind::copy_from: {
        const uint32_t old = storage_of[ev.dst];
        const uint32_t s = storage_of[ev.src];
        storage_of[ev.dst] = s;
        if (s != kNoId) ++refs[s];
        drop(old);
        break;
      }
      case TraceEventKind::release: drop(storage_of[ev.dst]); break;
      case TraceEventKind::pin:
      case TraceEventKind::pin_when_material: break;
      case TraceEventKind::discard: break;  // freed at its last release already
    }
    if (!timeline) continue;
    if (ev.kind == TraceEventKind::call || ev.kind == TraceEventKind::mutate) {
      timeline->span(ev.op, clock_ns, ev.time_ns, /*remat=*/false);
      clock_ns += ev.time_ns;
    }
    timeline->allocated(clock_ns, live);
  }
  return b;
}

namespace {
// Option `allocator`'s values, for parsing and for ReplayResult::allocator.
struct MemoryModelName {
  const char* name;
  ReplayOptions::Memory memory;
};
constexpr MemoryModelName kMemoryModels[] = {{"fake", ReplayOptions::Memory::fake},
                                             {"host", ReplayOptions::Memory::host},
                                             {"none", ReplayOptions::Memory::none}};

const char* memory_model_name(ReplayOptions::Memory memory) {
  for (const MemoryModelName& m : kMemoryModels)
    if (m.memory == memory) return m.name;
  return "?";
}
}  // namespace

ReplayOptions::Memory parse_memory_model(const std::string& text) {
  std::string valid;
  for (const MemoryModelName& m : kMemoryModels) {
    if (text == m.name) return m.memory;
    valid += (valid.empty() ? "" : ", ") + std::string(m.name);
  }
  throw ConfigError("dtr: unknown allocator '" + text + "' (option `allocator`); valid: " + valid);
}

namespace {
// Option reserved_limit sizes the fake device: byte accounting has no segments to size.
void check_reserved_limit(const ReplayOptions& o) {
  if (o.reserved_limit.kind != Budget::Kind::unlimited && !o.through_allocator())
    throw ConfigError("dtr: option reserved_limit (" + o.reserved_limit.to_string() +
                      ") sizes the fake device's segments, and allocator none has none: use "
                      "allocator host or fake (--allocator host) or drop reserved_limit");
}
}  // namespace

ReplayOptions ReplayOptions::from_config(const Config& config) {
  ReplayOptions o;
  o.reserved_limit = config.reserved_limit;
  o.compact = config.compact;
  o.budget = config.budget;
  o.policy = config.policy;
  o.search = parse_search_mode(config.search);
  o.sample = config.sample;
  o.dead_first = config.dead_first;
  o.dead_first_ratio = config.dead_first_ratio;
  o.dead_lineage_factor = config.dead_lineage_factor;
  o.remake_factor = config.remake_factor;
  o.lazy_release = config.lazy_release;
  o.keep_near_large = config.keep_near_large;
  o.relax_locks = config.relax_locks;
  o.seed = config.seed;
  o.trial_by_replay = parse_trial_mode(config.trial) == TrialMode::replay;
  o.max_overhead = config.max_overhead;
  o.debug = config.debug;
  o.memory = parse_memory_model(config.allocator);
  check_reserved_limit(o);
  o.plan_path = config.plan;
  o.snapshot_path = config.snapshot;
  o.snapshot_format = parse_snapshot_format(config.snapshot_format);
  o.snapshot_entries = config.snapshot_entries;
  o.timeline_path = config.timeline;
  return o;
}

namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Note [Pins when material]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A live host may pin a storage only where it is material, since a pin costs no memory
// there: the torch host's cut at dead constants (Note [Dead constants] in
// integration/torch/lineage.cpp) pins gradients accumulated in place, so that a dead input
// batch and the backward pass behind it can be discarded. The trace writes such a pin as
// PIN with WHEN_MATERIAL (format v3), followed by the DISCARDs it allowed. A trace is
// recorded with no budget, where every storage is material; in a replay under a budget the
// storage may be evicted by then, and a plain pin rematerialized it at once through the
// lineage the host was cutting (for an accumulated gradient, the earlier micro-batches'
// forward and backward passes). So, as the live host does, the replay pins such a storage
// now if it is material, and else when it next is. Until then the DISCARDs of what its
// rematerialization may go through wait (Engine::walk_needed_parents, the walk the torch
// host's collector makes), and are done once no waiting pin reaches them.
// What refills it is the next in-place write. The traced run had pinned it and so did not
// record that write (Note [Mutation]); the trace has a plain PIN there instead
// (Recording::write_pinned), since the write reads the old value: a live run under a
// budget that did not make the pin refills it at that write too. On 3-step traces of
// tests/torch/scripts/patterns.py --pattern accumulate, every dtr_eq replay at 0.9 of the
// peak ran out of memory before (25.07 MiB pinned: two micro-batches' inputs, the weights
// and a forward pass locked for the remat); now 7 of 8 finish, at 2.30-3.01 (the live run:
// 1.085-1.725), and the rest of the gap is Note [Dead storages in the replay] in
// bench/torch_sim_vs_live.py.
class PinsWhenMaterial {
 public:
  explicit PinsWhenMaterial(Engine& engine) : engine_(engine) {}

  void pin(TensorId t) {
    const StorageId s = engine_.storage_of(t);
    if (pin_if_material(s)) return;
    if (std::find(waiting_.begin(), waiting_.end(), s) == waiting_.end()) {
      waiting_.push_back(s);
      needed_.clear();
    }
  }

  // The storages a waiting pin may need, for the engine's collect (Note [Collecting
  // dropped pins] in eviction/engine.cpp): the waiting ones themselves; the walk adds the rest.
  void roots(std::vector<StorageId>& out) const {
    out.insert(out.end(), waiting_.begin(), waiting_.end());
  }

  // DISCARD of `s`: done now, or later if a waiting pin may need it; nothing where the
  // engine's own collect discarded it first (Note [Collecting dropped pins] in
  // eviction/engine.cpp).
  void discard(StorageId s) {
    if (engine_.is_discarded(s)) return;
    const auto it = std::find(waiting_.begin(), waiting_.end(), s);
    if (it != waiting_.end()) {  // the storage itself is dropped: nothing to pin
      waiting_.erase(it);
      needed_.clear();
      engine_.discard(s);
      retry_discards();
      return;
    }
    if (!waiting_.empty() && is_needed(s)) {
      deferred_.push_back(s);
      return;
    }
    engine_.discard(s);
  }

  // After each event: pins what became material, then the discards nothing waits for.
  void settle() {
    if (waiting_.empty()) return;
    const size_t before = waiting_.size();
    waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(),
                                  [&](StorageId s) { return pin_if_material(s); }),
                   waiting_.end());
    if (waiting_.size() == before) return;
    needed_.clear();
    retry_discards();
  }

 private:
  // Pins `s` through one of its defined tensors, if it has one; pinning then costs nothing.
  bool pin_if_material(StorageId s) {
    if (!engine_.is_material(s)) return false;
    for (TensorId t : engine_.storage_tensors(s)) {
      if (!engine_.is_defined(t)) continue;
      const Status status = engine_.pin(t);
      DTR_CHECK(status.ok(), "pinning a defined tensor cannot fail");
      return true;
    }
    return false;
  }

  void retry_discards() {
    if (deferred_.empty()) return;
    std::vector<StorageId> deferred;
    deferred.swap(deferred_);
    for (StorageId s : deferred) discard(s);
  }

  // Whether a waiting storage may be rematerialized through `s`. The marks are kept until
  // the waiting set changes: lineage does not change, and a storage pinned since only
  // makes them larger than they need be, which delays a discard to the next change.
  bool is_needed(StorageId s) {
    if (needed_.empty()) needed_ = mark_needed();
    return s < needed_.size() && needed_[s];
  }

  std::vector<char> mark_needed() const {
    std::vector<char> mark(engine_.num_storages(), 0);
    std::vector<StorageId> stack(waiting_.begin(), waiting_.end());
    for (StorageId s : stack) mark[s] = 1;
    engine_.walk_needed_parents(stack, [&](StorageId s) {
      if (mark[s]) return false;
      mark[s] = 1;
      return true;
    });
    return mark;
  }

  Engine& engine_;
  std::vector<StorageId> waiting_;   // evicted storages to pin when next material
  std::vector<StorageId> deferred_;  // DISCARDs a waiting pin may need
  std::vector<char> needed_;         // is_needed's marks; empty: to be made
};

// Where run_events is: the event it is running, and what each period so far cost.
struct Progress {
  size_t event = 0;
  std::vector<PeriodCost> periods;
};

// Runs the events; returns the first failure. `guide` (may be null) follows a plan;
// `recorder` (may be null) is told each op's name for the timeline.
Status run_events(const Trace& trace, Engine& engine, PlanGuide* guide, TimelineHooks* recorder,
                  Progress& progress) {
  std::vector<TensorId> tensor_of(trace.names.size(), kNoId);
  std::vector<TensorId> inputs, outputs;
  std::vector<OutputSpec> specs;
  PinsWhenMaterial pins(engine);  // Note [Pins when material]
  engine.set_collect_roots([&pins](std::vector<StorageId>& out) { pins.roots(out); });
  struct ForgetRoots {
    Engine& engine;
    ~ForgetRoots() { engine.set_collect_roots({}); }
  } forget_roots{engine};
  Status status;
  for (progress.event = 0; progress.event < trace.events.size(); ++progress.event) {
    const TraceEvent& ev = trace.events[progress.event];
    OpId op = kNoId;  // the op this event recorded, for the guide
    switch (ev.kind) {
      case TraceEventKind::annotate:
        // A training step ended where the host recorded it (policy auto: Note [Policy trial])
        if (ev.op == "STEP") {
          progress.periods.push_back(engine.period_cost());
          engine.end_period();
        }
        break;
      case TraceEventKind::constant: {
        TensorId t;
        if (recorder) recorder->name_next_op("constant");
        status = engine.constant(ev.results[0].size_bytes, t);
        tensor_of[ev.results[0].name] = t;
        op = engine.op_of(t);
        break;
      }
      case TraceEventKind::call: {
        inputs.clear(), outputs.clear(), specs.clear();
        for (NameId a : ev.args) inputs.push_back(tensor_of[a]);
        for (const TraceResult& r : ev.results)
          specs.push_back(OutputSpec{r.alias >= 0 ? 0 : r.size_bytes, r.alias});
        // An op that returns nothing still runs on its inputs: give the engine one empty
        // output (an op has at least one) and drop it at once.
        if (specs.empty()) specs.push_back(OutputSpec{0, -1});
        if (recorder) recorder->name_next_op(ev.op);
        status =
            engine.call(ev.time_ns, inputs, specs, outputs, ev.remat_time_ns, ev.workspace_bytes);
        op = engine.op_of(outputs[0]);
        for (size_t i = 0; i < ev.results.size(); ++i) tensor_of[ev.results[i].name] = outputs[i];
        if (ev.results.empty() && status.ok()) engine.release(outputs[0]);
        break;
      }
      case TraceEventKind::mutate: {
        inputs.clear(), outputs.clear(), specs.clear();
        for (NameId a : ev.args) inputs.push_back(tensor_of[a]);
        for (uint32_t m : ev.mutated)
          specs.push_back(OutputSpec{engine.storage_size(engine.storage_of(inputs[m])), -1});
        if (recorder) recorder->name_next_op(ev.op);
        status = engine.call(ev.time_ns, inputs, specs, outputs);
        if (!status.ok()) break;
        op = engine.op_of(outputs[0]);
        for (size_t i = 0; i < ev.mutated.size(); ++i) {
          const NameId name = ev.args[ev.mutated[i]];
          const TensorId old = tensor_of[name];
          tensor_of[name] = outputs[i];
          engine.release(old);
        }
        break;
      }
      case TraceEventKind::copy:
        tensor_of[ev.dst] = tensor_of[ev.src];
        engine.retain(tensor_of[ev.src]);
        break;
      case TraceEventKind::copy_from: {
        // Retain before releasing, so `x = x` (or a view of the same storage) does not
        // evict the storage in between; otherwise the order does not matter.
        const TensorId old = tensor_of[ev.dst];
        tensor_of[ev.dst] = tensor_of[ev.src];
        engine.retain(tensor_of[ev.src]);
        engine.release(old);
        break;
      }
      case TraceEventKind::release:
        if (tensor_of[ev.dst] != kNoId && engine.external_refs(tensor_of[ev.dst]) > 0)
          engine.release(tensor_of[ev.dst]);
        break;
      case TraceEventKind::pin: status = engine.pin(tensor_of[ev.dst]); break;
      case TraceEventKind::pin_when_material: pins.pin(tensor_of[ev.dst]); break;
      case TraceEventKind::discard:
        // A live host found nothing can read the storage again (trace format v2): freed
        // even if pinned, as Lineage::collect does. The engine's own collect may have
        // retired the tensor first (Note [Collecting dropped pins] in eviction/engine.cpp).
        if (tensor_of[ev.dst] != kNoId && engine.storage_of(tensor_of[ev.dst]) != kNoId)
          pins.discard(engine.storage_of(tensor_of[ev.dst]));
        break;
    }
    if (!status.ok()) return status;
    pins.settle();
    if (guide) guide->end_op(engine, op);
  }
  // The step's results: everything still referenced must be material at the end.
  for (NameId n = 0; n < tensor_of.size(); ++n) {
    const TensorId t = tensor_of[n];
    if (t == kNoId || engine.external_refs(t) == 0) continue;
    status = engine.pin(t);
    if (!status.ok()) return status;
    if (guide) guide->end_op(engine);
  }
  return status;
}

}  // namespace

ReplayResult replay(const Trace& trace, const Baseline& baseline, const ReplayOptions& options,
                    const HeuristicRegistry& registry) {
  const auto start = std::chrono::steady_clock::now();
  ReplayResult result;
  result.trace = base_name(trace.path);
  result.policy = options.policy;
  result.search = search_mode_name(options.search);
  result.baseline_peak_bytes = baseline.peak_bytes;
  result.baseline_compute_ns = baseline.compute_ns;
  result.budget_bytes = options.budget.resolve(baseline.peak_bytes);
  result.budget_ratio = options.budget.kind == Budget::Kind::ratio
                            ? options.budget.ratio
                            : (baseline.peak_bytes ? double(result.budget_bytes) / double(baseline.peak_bytes) : 0.0);

  EngineConfig config;
  config.budget_bytes = result.budget_bytes;
  config.search = options.search;
  config.sample_size = options.sample;
  config.dead_first = options.dead_first;
  config.dead_first_ratio = options.dead_first_ratio;
  config.lazy_release = options.lazy_release;
  config.keep_near_large = options.keep_near_large;
  config.relax_locks = options.relax_locks;
  config.seed = options.seed;
  config.debug = options.debug;
  // The torch host's last-resort collect: Note [Collecting dropped pins].
  config.collect_pins = true;
  if (options.max_overhead > 0) {
    const double limit = double(baseline.compute_ns) * (options.max_overhead - 1.0);
    config.max_remat_ns = limit < 1.0 ? 1 : static_cast<uint64_t>(limit);
  }
  HeuristicParams params;
  params.seed = options.seed;
  params.dead_lineage_factor = options.dead_lineage_factor;
  params.remake_factor = options.remake_factor;
  Progress progress;
  if (options.trial_by_replay) {
    // Note [Trial by replay]: the candidates replay the trace up to the STEP being run.
    params.trial_replay = [&trace, &progress, &options,
                           &result](const std::vector<std::string>& policies) {
      Trace so_far;
      so_far.path = trace.path;
      so_far.version = trace.version;
      so_far.names = trace.names;
      so_far.events.assign(trace.events.begin(),
                           trace.events.begin() + std::ptrdiff_t(progress.event + 1));
      return replay_last_period(so_far, options, result.budget_bytes, policies);
    };
  }
  LogicalClock clock(0);
  // Note [Fake device]
  // ~~~~~~~~~~~~~~~~~~
  // With the fake allocator the replay runs on a device that holds exactly the budget:
  // the caching allocator's budget (allocated bytes) and its reserved limit (segments) are
  // both the budget, so memory that is free but split into blocks too small for a request
  // costs evictions, as on a real GPU. Sizes are rounded to 512-byte blocks and segments
  // are 2 MiB / 20 MiB / exact, as in PyTorch's caching allocator; the budget ratio still
  // refers to the byte-accounting baseline, so a ratio near 1.0 may evict where `none`
  // does not. With option `reserved_limit` the device holds that instead, as the PyTorch
  // host's reserved limit caps its segments (each its request's size, as there), and with
  // `compact` (the default) the engine moves storages before it evicts for contiguity, as
  // that host does (Note [Compaction in the engine] in eviction/engine.cpp). Without it
  // nothing moves: the CUDA backend cannot copy, and the default device models a GPU.
  //
  // Note [Host device]
  // ~~~~~~~~~~~~~~~~~~
  // The PyTorch CPU host's budget caps allocated bytes only: without a reserved_limit its
  // caching allocator takes a new segment from the system whenever no cached block fits,
  // so fragmentation costs it memory (reserved bytes: 1.4-2x the budget at 0.5x, docs/
  // pytorch.md "Reserved memory"), never an eviction. A device of the budget's size does
  // not model that: a replay of a 4-step LSTM trace at 0.7 ran out of memory in its first
  // step, a 15.6 MiB request finding no block in 62 MiB of segments, where the live run
  // trained under every policy. So `allocator:host` replays through the caching allocator
  // over a fake device with no size: blocks, segments and addresses as the host has them
  // (coop's windows need them), the budget on allocated bytes, reserved bytes wherever the
  // host's would go. With a reserved_limit, host and fake are the same model, the host's
  // under its limit. In both, requests of 1 MiB or less are small blocks of their own, as
  // the host's mimalloc heap serves them (Note [Small path] in
  // allocator/caching_allocator.cpp), not pieces of 2 MiB segments: that moved host
  // replays' reserved peaks 0-6 MiB towards the live ones on 3-step traces of the test
  // scripts, to the live peak on gradient accumulation at 0.8 (34.0 -> 33.1 MiB, live 33.1;
  // docs/simulator.md, "Small blocks in the host's model").
  std::unique_ptr<CachingAllocator> allocator;
  EngineMemory memory;
  check_reserved_limit(options);  // options made without from_config, too
  const bool own_limit = options.reserved_limit.kind != Budget::Kind::unlimited;
  if (options.through_allocator()) {
    AllocatorConfig aconfig;
    aconfig.budget_bytes = result.budget_bytes;
    aconfig.reserved_limit_bytes = own_limit ? options.reserved_limit.resolve(baseline.peak_bytes)
                                   : options.memory == ReplayOptions::Memory::host
                                       ? kUnlimitedBytes  // Note [Host device]
                                       : result.budget_bytes;
    result.reserved_limit_bytes =
        aconfig.reserved_limit_bytes == kUnlimitedBytes ? 0 : aconfig.reserved_limit_bytes;
    // The host's limit, not a device's: Note [Segments under a reserved limit] in
    // allocator/caching_allocator.cpp.
    aconfig.exact_segments = own_limit;
    config.compact = own_limit && options.compact;
    aconfig.debug = options.debug;
    // Note [Host device]: the host's small requests go to its mimalloc heap.
    const bool host_model = own_limit || options.memory == ReplayOptions::Memory::host;
    allocator = std::make_unique<CachingAllocator>(
        aconfig, std::make_unique<FakeBackend>(UINT64_MAX, host_model));
    memory.allocator = allocator.get();
    memory.engine_allocates = true;
  }
  result.allocator = memory_model_name(options.memory);
  std::unique_ptr<ReplaySnapshot> snapshot;  // outlives the engine: replay_snapshot.h
  nlohmann::ordered_json snapshot_data;
  if (!options.snapshot_path.empty()) {
    if (!allocator)
      throw ConfigError(
          "dtr: a memory snapshot (option `snapshot`) shows the allocator's "
          "segments: use allocator host or fake, not none");
    snapshot = std::make_unique<ReplaySnapshot>(*allocator, clock, options.snapshot_entries);
  }
  if (!options.plan_path.empty() && !options.plan_hints)
    throw ConfigError("dtr: plan '" + options.plan_path +
                      "' was not loaded; the simulator's host loads it for the trace "
                      "(planner/warm_start.h: load_warm_start)");
  // Timeline: a recorder under the guide, if any (the guide forwards every hook).
  std::unique_ptr<Timeline> own_timeline;
  Timeline* timeline = options.timeline;
  if (!timeline && !options.timeline_path.empty()) {
    own_timeline = std::make_unique<Timeline>();
    timeline = own_timeline.get();
  }
  std::unique_ptr<TimelineHooks> recorder;
  if (timeline) recorder = std::make_unique<TimelineHooks>(*timeline);
  std::unique_ptr<PlanGuide> guide;
  if (options.plan_hints) {
    guide = std::make_unique<PlanGuide>(*options.plan_hints, recorder.get());
    result.plan = options.plan_hints->source;
  }
  {
    EngineHooks* hooks = guide ? static_cast<EngineHooks*>(guide.get()) : recorder.get();
    Engine engine(config, registry.make(options.policy, params), clock, hooks, memory);
    if (guide) guide->bind(engine);
    if (snapshot) snapshot->bind(engine);
    if (recorder) {
      recorder->bind(engine);
      timeline->budget(clock.now(), result.budget_bytes == UINT64_MAX
                                        ? std::nullopt
                                        : std::optional<uint64_t>(result.budget_bytes));
    }
    result.status = run_events(trace, engine, guide.get(), recorder.get(), progress);
    result.periods = progress.periods;
    result.stats = engine.stats();
    result.policy_status = engine.heuristic().status();
    if (snapshot) {
      nlohmann::ordered_json meta;
      meta["host"] = "dtr-sim";
      meta["trace"] = result.trace;
      meta["policy"] = result.policy;
      meta["budget_bytes"] = result.budget_bytes;
      meta["budget_ratio"] = result.budget_ratio;
      meta["baseline_peak_bytes"] = result.baseline_peak_bytes;
      meta["evictions"] = result.stats.num_evictions;
      meta["remats"] = result.stats.num_remats;
      meta["status"] = result.status.name();
      meta["clock"] = "logical: time_us is microseconds of simulated compute";
      snapshot_data = snapshot->finish(options.snapshot_format, meta);
    }
    if (guide) result.plan_departure = guide->departure();
    if (allocator) {
      const AllocatorStats astats = allocator->stats();
      result.allocator_stats = astats;
      result.peak_allocated_bytes = astats.allocated_bytes.all.peak;
      result.peak_reserved_bytes = astats.reserved_bytes.all.peak;
      result.contiguous_failures = result.stats.contiguous_requests;
      if (result.stats.allocator_requests > 0 && result.budget_bytes != UINT64_MAX)
        result.fragmentation = double(result.stats.fragmentation_free_bytes) /
                               double(result.stats.allocator_requests) /
                               double(result.budget_bytes);
    }
  }
  result.status_name = result.status.name();
  result.peak_bytes = result.stats.allocated_peak;
  result.compute_ns = result.stats.model_compute_ns + result.stats.remat_compute_ns;
  result.overhead = baseline.compute_ns ? double(result.compute_ns) / double(baseline.compute_ns) : 1.0;
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (snapshot) write_snapshot(options.snapshot_path, snapshot_data);
  if (!options.timeline_path.empty()) {
    ChromeTraceInfo info;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3g", result.budget_ratio);
    info.process_name = "dtr-sim " + result.trace + ": " + result.policy + " @ " + ratio;
    info.host = "dtr-sim";
    info.clock = "logical";
    nlohmann::ordered_json summary = to_json(result);  // `dtr-sim run --json`, less the stats
    summary.erase("stats");
    summary.erase("allocator_stats");
    info.extra["replay"] = std::move(summary);
    write_chrome_trace(options.timeline_path, *timeline, info);
  }
  return result;
}

nlohmann::ordered_json to_json(const ReplayResult& r) {
  nlohmann::ordered_json j;
  j["trace"] = r.trace;
  j["policy"] = r.policy;
  j["budget_ratio"] = r.budget_ratio;
  j["budget_bytes"] = r.budget_bytes;
  j["baseline_peak_bytes"] = r.baseline_peak_bytes;
  j["peak_bytes"] = r.peak_bytes;
  j["baseline_compute_ns"] = r.baseline_compute_ns;
  j["compute_ns"] = r.compute_ns;
  j["overhead"] = r.overhead;
  j["evictions"] = r.stats.num_evictions;
  j["remats"] = r.stats.num_remats;
  j["status"] = r.status_name;
  j["search"] = r.search;
  j["eager_evictions"] = r.stats.num_eager_evictions;
  j["remat_compute_ns"] = r.stats.remat_compute_ns;
  j["allocator"] = r.allocator;
  j["peak_allocated_bytes"] = r.peak_allocated_bytes;
  j["peak_reserved_bytes"] = r.peak_reserved_bytes;
  j["reserved_limit_bytes"] = r.reserved_limit_bytes;
  j["fragmentation"] = r.fragmentation;
  j["contiguous_failures"] = r.contiguous_failures;
  j["wall_seconds"] = r.wall_seconds;
  j["plan"] = r.plan;
  j["plan_drops"] = r.stats.num_plan_drops;
  j["plan_departure"] = r.plan_departure;
  j["eviction_searches"] = r.stats.eviction_searches;
  j["candidates_scored"] = r.stats.candidates_scored;
  j["neighborhood_visits"] = r.stats.neighborhood_visits;
  j["policy_status"] = r.policy_status;
  j["stats"] = r.stats.to_json();
  if (r.allocator != "none") j["allocator_stats"] = r.allocator_stats.to_json();
  return j;
}

}  // namespace dtr
