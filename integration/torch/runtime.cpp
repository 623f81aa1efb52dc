// runtime.cpp: the process-wide runtime, the library's initializer and the C API
// (runtime.h). No torch header: PyTorch is reached through cpu_allocator.h.
//
// Start-up, in the static initializer (load_runtime below), only in a process that can run
// PyTorch ops (Note [Wrapper processes] in process_kind.cpp; any other only hands
// LD_PRELOAD to the shim, and leaves it as it was where there is none):
//  1. hand LD_PRELOAD to the preload shim, so Python children start dtr too and other
//     children do not load libtorch (Note [Preload shim] in process_kind.cpp);
//  2. read the options: defaults (with the host's own, Config::for_pytorch), DTR_CONF,
//     DTR_* (dtr::Config::apply_environment, which only uses getenv); a bad one ends the
//     process (Note [Bad configuration]); files a child of another dtr process writes get
//     its pid (Note [Files of child processes]);
//  3. build the CachingAllocator over a HostBackend with the budget, and install it as
//     PyTorch's CPU allocator; a second load in the same process changes nothing;
//  4. with `report` (DTR_REPORT=1), register the summary printed at exit (Note [Outputs
//     at exit] in exit_writers.cpp).
//
// Note [Files of child processes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Children started through the shim read the same DTR_TRACE, DTR_TIMELINE and
// DTR_SNAPSHOT as the process that started them, and each writes its file at exit: the
// workers of a launcher would overwrite each other's, and the launcher, exiting last,
// theirs with its own nearly empty one. So every process the library starts in sets
// DTR_PARENT_PID to its pid for its children, and a process that got the library from
// the shim (its LD_PRELOAD names the shim, not the library) while DTR_PARENT_PID names
// another process writes `<path>.<pid>`. A process started with the library itself in
// LD_PRELOAD (a harness running `LD_PRELOAD=libdtr_torch.so DTR_TRACE=x python3 ...` and
// reading x back), or with the shim by hand and no dtr parent, writes the path as given.
// `%p` in a path is replaced by the writer's pid in every process (as in
// LLVM_PROFILE_FILE), and such a path is not changed further. Every report says its
// `"pid"`.
//
// Note [Bad configuration]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A static initializer cannot raise a Python exception (an exception leaving it
// terminates the process with an unhelpful message), and running without the budget the
// user asked for would hide the mistake until the machine runs out of memory. So a bad
// option prints "dtr: ..." with the reason and the valid keys on stderr and calls
// exit(2): before the script's first line under LD_PRELOAD / dtr-run, inside the call
// under torch.ops.load_library. Exit status 2 is the usual one for a usage error (dtr-run
// uses it for bad flags too).
// Under dtr.load() the process is a Python program already running, perhaps a notebook's
// kernel, and exit(2) lost it whole: no `finally` ran, nothing could catch it. So
// dtr.load() sets DTR_LOAD_RAISES to its pid around its dlopen, and then a bad option makes the
// library keep the message and stay off, with nothing installed (no allocator, no
// fallback) and no variable changed that a later start reads (Note [Output paths at
// start]: the paths are handed to children only once every check passed); dtr.load
// raises DtrError with the message, and calling it again after the environment is fixed
// starts the library (dtr_torch_start). torch.ops.load_library itself keeps exit(2): it
// has no way to ask. (After a failed dtr.load(), torch.ops.load_library finds the library
// loaded and its initializer does not run again: the library stays off without a word
// there; dtr.load() again, or dtr.memory_stats(), says why.) A failure after the
// allocator is installed (the lineage's own, which the checks before it leave unreachable
// from the options) always exits: the allocator cannot be taken back.
//
// Note [Eviction hook-up]
// ~~~~~~~~~~~~~~~~~~~~~~~
// After the allocator, the initializer starts the lineage (lineage.h): the DTR engine,
// built from the same Config (policy, search, sample, seed, debug), becomes the
// allocator's eviction callback, and the dispatcher fallback starts recording on the
// loading thread. From then on a request that does not fit the budget evicts before the
// out-of-memory error is raised.
//
// Lock rules: the runtime pointer is published once (release) and read with acquire;
// everything after that is the CachingAllocator's (one mutex).
#include "integration/torch/runtime.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/host_backend.h"
#include "dtr/allocator/memory_history.h"
#include "dtr/allocator/memory_snapshot.h"
#include "dtr/core/clock.h"
#include "dtr/core/options.h"
#include "dtr/core/output_file.h"
#include "dtr/core/status.h"
#include "dtr/eviction/heuristic_registry.h"
#include "dtr/eviction/op_costs.h"
#include "dtr/eviction/thrash_watch.h"
#include "dtr/planner/warm_start.h"
#include "integration/torch/cpu_allocator.h"
#include "integration/torch/exit_writers.h"
#include "integration/torch/lineage.h"
#include "integration/torch/process_kind.h"
#include "integration/torch/recording.h"

namespace dtr::torch_integration {

namespace {

// A limit the live runtime enforces (option `key`: budget, reserved_limit), in bytes
// (kUnlimitedBytes: none).
uint64_t live_limit_bytes(const Budget& limit, const char* key) {
  switch (limit.kind) {
    case Budget::Kind::unlimited: return kUnlimitedBytes;
    case Budget::Kind::bytes: return limit.bytes;
    case Budget::Kind::ratio: break;
  }
  throw ConfigError(std::string("dtr: ") + key + " " + limit.to_string() +
                    " is a ratio of the baseline peak, which only the simulator knows; give "
                    "bytes, e.g. DTR_CONF=" +
                    key + ":300M");
}

// Option budget as a ratio starts with none: the lineage sets it after the first steps
// (Note [Ratio budgets] in lineage.cpp), which it sees only while it records.
uint64_t live_budget_bytes(const Config& config) {
  if (config.budget.kind != Budget::Kind::ratio) return live_limit_bytes(config.budget, "budget");
  if (!config.remat)
    throw ConfigError("dtr: budget " + config.budget.to_string() +
                      " is a ratio of the peak over the first training steps, which dtr sees "
                      "only while it records lineage, and remat is False; give bytes, e.g. "
                      "DTR_CONF=budget:300M");
  return kUnlimitedBytes;
}

// The process-wide runtime: the options and the allocator behind PyTorch's CPU allocator.
class TorchRuntime {
 public:
  // budget_bytes, reserved_limit_bytes: options budget and reserved_limit, checked by
  // load_runtime (live_limit_bytes).
  TorchRuntime(Config config, uint64_t budget_bytes, uint64_t reserved_limit_bytes)
      : config_(std::move(config)),
        allocator_(allocator_config(config_, budget_bytes, reserved_limit_bytes),
                   std::make_unique<HostBackend>()),
        pid_(getpid()) {
    // Note [Snapshot history]
    if (!config_.snapshot.empty()) {
      history_ = std::make_unique<MemoryHistory>(clock_, config_.snapshot_entries);
      allocator_.set_observer(history_.get());
    }
  }

  const Config& config() const { return config_; }
  CachingAllocator& allocator() { return allocator_; }
  MemoryHistory* history() { return history_.get(); }
  // The process that loaded the library (a forked DataLoader worker is another one).
  pid_t pid() const { return pid_; }

 private:
  static AllocatorConfig allocator_config(const Config& config, uint64_t budget_bytes,
                                          uint64_t reserved_limit_bytes) {
    AllocatorConfig out;
    out.budget_bytes = budget_bytes;
    out.reserved_limit_bytes = reserved_limit_bytes;
    // Note [Segments under a reserved limit] in allocator/caching_allocator.cpp
    out.exact_segments = reserved_limit_bytes != kUnlimitedBytes;
    out.debug = config.debug;
    return out;
  }

  const Config config_;
  SteadyClock clock_;
  CachingAllocator allocator_;
  std::unique_ptr<MemoryHistory> history_;  // DTR_SNAPSHOT: the allocator's recent events
  const pid_t pid_;
};

// Set once by load_runtime, never reset or deleted (Note [Immortal allocator]).
std::atomic<TorchRuntime*> runtime_ptr{nullptr};

TorchRuntime* runtime() { return runtime_ptr.load(std::memory_order_acquire); }

thread_local std::string text_buffer;  // runtime.h: returned text lives here
thread_local std::string last_error;

const char* keep_text(std::string text) {
  text_buffer = std::move(text);
  return text_buffer.c_str();
}

// This library's own path, from the dynamic loader.
std::string own_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&dtr_torch_is_enabled), &info) == 0 || !info.dli_fname)
    return "";
  return info.dli_fname;
}

// Note [Preload shim] in process_kind.cpp: this library's entries in LD_PRELOAD become the
// shim beside it. Where there is none they are dropped, with a note, if `started` (this
// process runs dtr), and kept otherwise (Note [Wrapper processes]). True when LD_PRELOAD
// named this library (Note [Files of child processes]).
bool hand_ld_preload_to_shim(bool started) {
  const char* preload = getenv("LD_PRELOAD");
  const std::string self = own_path();
  // Not named: torch.ops.load_library, or the shim loaded this library (it stays).
  if (!preload || self.empty() || !preload_names(preload, self)) return false;
  std::string shim;
  const size_t slash = self.rfind('/');
  if (slash != std::string::npos) {
    char dir[PATH_MAX];
    const std::string own_dir = self.substr(0, slash);
    shim =
        std::string(realpath(own_dir.c_str(), dir) ? dir : own_dir.c_str()) + "/libdtr_preload.so";
    if (access(shim.c_str(), R_OK) != 0) shim.clear();
  }
  if (shim.empty()) {
    if (!started) return true;
    std::fprintf(stderr,
                 "dtr: note: no libdtr_preload.so beside %s: child processes (a launcher's "
                 "workers) will run without dtr\n",
                 self.c_str());
  }
  const std::string kept = replace_preload_entry(preload, self, shim);
  if (kept.empty())
    unsetenv("LD_PRELOAD");
  else
    setenv("LD_PRELOAD", kept.c_str(), 1);
  return true;
}

// Note [Files of child processes]: the path this process writes for option `path`.
std::string path_for_this_process(const std::string& path, bool child) {
  if (path.empty()) return path;
  const std::string pid = std::to_string(getpid());
  if (path.find("%p") != std::string::npos) {
    std::string out;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
        out += pid;
        ++i;
      } else {
        out += path[i];
      }
    }
    return out;
  }
  return child ? path + "." + pid : path;
}

// Note [Files of child processes]: true in a process the shim started the library in,
// under another dtr process. Tells this process's own children that it is their parent.
// Answered once per process: a second start after a failed one (Note [Bad configuration])
// finds DTR_PARENT_PID set to its own pid by the first.
bool child_of_a_dtr_process(bool preload_named_library) {
  static pid_t asked_in = 0;
  static bool child = false;
  if (asked_in == getpid()) return child;
  asked_in = getpid();
  const std::string own = std::to_string(getpid());
  const char* parent = getenv("DTR_PARENT_PID");
  child = !preload_named_library && parent && *parent && own != parent;
  setenv("DTR_PARENT_PID", own.c_str(), 1);
  return child;
}

// Note [Bad configuration]: the message a start that failed gives, with the valid keys.
std::string start_failure_text(const std::string& message) {
  std::string text = message;
  if (message.find("valid keys") == std::string::npos)
    text += "\ndtr: valid keys: " + valid_option_keys() + " (docs/config.md)";
  return text;
}

[[noreturn]] void exit_at_start(const std::string& message) {
  std::fprintf(stderr, "%s\ndtr: libdtr_torch.so not started: fix DTR_CONF / DTR_* and run again\n",
               start_failure_text(message).c_str());
  std::fflush(stderr);
  std::exit(2);
}

// Note [Bad configuration]: under dtr.load() (DTR_LOAD_RAISES) a failed start is kept
// in start_error(), and the library stays off. start_mutex orders starts and reads of
// the message: ctypes lets go of the GIL around calls into the library, so dtr.load() on
// one thread and memory_stats() on another may meet here. A constant-initialized mutex,
// safe in the library's initializer.
std::mutex start_mutex;
bool start_errors_raise = false;
// A function's static: the library's initializer may run before this file's dynamic
// initializers have (a global std::string crashed there).
std::string& start_error() {
  static std::string message;
  return message;
}
struct StartFailure {
  std::string message;
};

[[noreturn]] void fail_at_start(const std::string& message) {
  if (start_errors_raise) throw StartFailure{message};
  exit_at_start(message);
}

// Note [Snapshot history]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A snapshot's `segments` are read from the allocator when it is written; its
// `device_traces` need every allocator event as it happens, which costs a ring entry and
// a hash-map update per allocation and free. As PyTorch records history only after
// torch.cuda.memory._record_memory_history(), the runtime records it only when
// `snapshot` (DTR_SNAPSHOT) is set; dtr.dump_snapshot() without it writes the segments
// and an empty device_traces. The lineage tells the recorder which blocks hold
// parameters and activations and when frees are evictions and allocations remats.

// The snapshot as PyTorch's tools read it, with dtr's facts in user_metadata.
nlohmann::ordered_json runtime_snapshot(TorchRuntime& rt, SnapshotFormat format) {
  nlohmann::ordered_json meta;
  meta["host"] = "torch";
  const uint64_t budget = rt.allocator().config().budget_bytes;
  meta["budget_bytes"] = budget == kUnlimitedBytes ? nlohmann::ordered_json(nullptr)
                                                   : nlohmann::ordered_json(budget);
  meta["policy"] = rt.config().policy;
  meta["remat"] = rt.config().remat;
  const Stats engine = lineage_stats();
  meta["dtr.num_ops"] = engine.num_ops;
  meta["dtr.num_evictions"] = engine.num_evictions;
  meta["dtr.num_remats"] = engine.num_remats;
  meta["history_recorded"] = rt.history() != nullptr;
  return memory_snapshot(rt.allocator(), rt.history(), format, meta);
}

void snapshot_at_exit() {
  TorchRuntime* rt = runtime();
  if (!rt || rt->pid() != getpid()) return;
  const std::string& path = rt->config().snapshot;
  try {
    write_snapshot(path, runtime_snapshot(*rt, parse_snapshot_format(rt->config().snapshot_format)));
    std::fprintf(stderr, "dtr: wrote snapshot %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr: could not write the snapshot %s: %s\n", path.c_str(), e.what());
  }
}

// The summary DTR_REPORT=1 prints at exit: one line of JSON on stderr.
void report_at_exit() {
  TorchRuntime* rt = runtime();
  if (!rt || rt->pid() != getpid()) return;  // not in forked children that call exit()
  const AllocatorStats stats = rt->allocator().stats();
  nlohmann::ordered_json summary;
  const uint64_t budget = rt->allocator().config().budget_bytes;
  summary["budget_bytes"] = budget == kUnlimitedBytes ? nlohmann::ordered_json(nullptr)
                                                      : nlohmann::ordered_json(budget);
  summary["allocated_bytes.all.peak"] = stats.allocated_bytes.all.peak;
  summary["reserved_bytes.all.peak"] = stats.reserved_bytes.all.peak;
  summary["allocation.all.allocated"] = stats.allocation.all.allocated;
  summary["num_alloc_retries"] = stats.num_alloc_retries;
  summary["num_ooms"] = stats.num_ooms;
  const Stats engine = lineage_stats();
  summary["dtr.num_ops"] = engine.num_ops;
  summary["dtr.num_evictions"] = engine.num_evictions;
  summary["dtr.num_eager_evictions"] = engine.num_eager_evictions;
  summary["dtr.num_remats"] = engine.num_remats;
  summary["dtr.remat_compute_ns"] = engine.remat_compute_ns;
  summary["dtr.remat_measured_ns"] = engine.remat_measured_ns;
  summary["dtr.remat_room_ns"] = engine.remat_room_ns;  // Note [Room within remats]
  summary["dtr.make_room_ns"] = engine.make_room_ns;  // Note [Host work in op times]
  summary["dtr.full_collects"] = engine.full_collects;  // Note [Collects when making room]
  summary["dtr.model_compute_ns"] = engine.model_compute_ns;
  summary["dtr.num_periods"] = engine.num_periods;  // Note [Iteration periods] in lineage.cpp
  summary["dtr.num_thrash_alerts"] = engine.num_thrash_alerts;  // Note [Thrashing in a live run]
  // Note [Policy trial]: the policy, or auto's choice and trial (none with remat:False)
  if (const std::string policy = policy_status(); !policy.empty()) summary["dtr.policy"] = policy;
  if (stats.num_block_moves > 0) {  // Note [Compaction] in allocator/caching_allocator.cpp
    summary["dtr.num_block_moves"] = stats.num_block_moves;
    summary["dtr.moved_bytes"] = stats.moved_bytes;
    summary["dtr.num_packings"] = stats.num_packings;  // Note [Packing]
  }
  if (!plan_source().empty()) {  // DTR_PLAN: Note [Warm start in PyTorch] in lineage.cpp
    summary["dtr.plan"] = plan_source();
    summary["dtr.num_plan_drops"] = engine.num_plan_drops;
    summary["dtr.plan_departure"] = plan_departure();
  }
  summary["pid"] = getpid();  // Note [Files of child processes]: a launcher's workers report too
  std::fprintf(stderr, "dtr: report %s\n", summary.dump().c_str());
  std::fflush(stderr);
}

// Note [Output paths at start]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The trace, timeline and snapshot are written at exit. Until 2026-12-07 a path in a
// missing directory (or a directory, or one not writable) was found only then: the run
// trained to its end, printed "could not write the trace" and exited 0, the file lost. A
// relative path was taken against the working directory at exit, so a script that
// chdir'd wrote elsewhere than it said. So:
//  - each path is made absolute against the working directory where the library starts
//    (absolute_output_paths), and handed to child processes so once every check passed
//    (its DTR_<NAME> is set to it: export_output_paths; before, a start that failed would
//    leave it to the next start, Note [Bad configuration]): a child started in another
//    directory writes `<path>.<pid>` beside its parent's file (Note [Files of child
//    processes]), where it failed at start, that directory having no `out/` of its own;
//  - each process's own path is checked as the tools check theirs (Note [Output files] in
//    include/dtr/core/output_file.h) before the script runs (a bad one is a bad option:
//    Note [Bad configuration]), and two options may not name one file (the trace
//    overwrote the timeline, both "wrote"): check_output_paths.
// The options whose files are written at exit, with their variables.
struct OutputOption {
  std::string Config::*path;
  const char* key;
  const char* env;
};
constexpr OutputOption kOutputOptions[] = {{&Config::trace, "trace", "DTR_TRACE"},
                                           {&Config::timeline, "timeline", "DTR_TIMELINE"},
                                           {&Config::snapshot, "snapshot", "DTR_SNAPSHOT"}};

void absolute_output_paths(Config& config) {
  for (const OutputOption& output : kOutputOptions) {
    std::string& path = config.*output.path;
    if (path.empty()) continue;
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(path, error);
    if (error) continue;  // check_output_paths says what is wrong with it
    path = absolute.lexically_normal().string();
  }
}

// `absolute`: the config after absolute_output_paths, before a child's `<path>.<pid>`.
void export_output_paths(const Config& absolute) {
  for (const OutputOption& output : kOutputOptions)
    if (const std::string& path = absolute.*output.path; !path.empty())
      setenv(output.env, path.c_str(), 1);
}

// The tools' check (Note [Outputs that are inputs] in core/output_file.cpp): each path
// writable, none the same file as another or as the plan and its trace this run reads.
void check_output_paths(const Config& config) {
  std::vector<NamedPath> outputs;
  for (const OutputOption& output : kOutputOptions)
    outputs.push_back(
        {config.*output.path, std::string(output.key) + " (option " + output.key + ")"});
  check_outputs(outputs, {{config.plan, "plan (option plan)"},
                          {config.plan_trace, "trace (option plan_trace)"}});
}

void start_runtime() {
  if (!can_run_torch_ops()) {  // Note [Wrapper processes] in process_kind.cpp
    hand_ld_preload_to_shim(/*started=*/false);
    return;
  }
  const bool preload_named_library = hand_ld_preload_to_shim(/*started=*/true);
  if (runtime()) return;  // this copy is already up
  Config config = Config::for_pytorch();
  uint64_t budget_bytes = kUnlimitedBytes;
  uint64_t reserved_limit_bytes = kUnlimitedBytes;
  Config absolute;  // for export_output_paths
  try {
    config.apply_environment();
    absolute_output_paths(config);  // Note [Output paths at start]
    absolute = config;
    // Note [Files of child processes]
    const bool child = child_of_a_dtr_process(preload_named_library);
    for (const OutputOption& output : kOutputOptions)
      config.*output.path = path_for_this_process(config.*output.path, child);
    budget_bytes = live_budget_bytes(config);
    reserved_limit_bytes = live_limit_bytes(config.reserved_limit, "reserved_limit");
    if (config.lazy_release)  // Note [Lazy release] in eviction/engine.cpp
      throw ConfigError(
          "dtr: option lazy_release makes a replay in dtr-sim keep dead storages "
          "until the next eviction request, as this runtime always does; it has "
          "no meaning here: drop it from DTR_CONF / DTR_LAZY_RELEASE");
    // op_cost, on_thrash, trial, trace_constants, snapshot_format: Note [Option choices]
    // checked them as they were set.
    builtin_heuristics().require(config.policy);  // also with remat:False, which uses none
    check_output_paths(config);
    if (!config.plan_trace.empty() && config.plan.empty())
      throw ConfigError(
          "dtr: option plan_trace names the trace a plan was made from, and no "
          "plan is set: set plan (DTR_PLAN) too, or drop plan_trace");
  } catch (const ConfigError& e) {
    fail_at_start(e.what());
  } catch (const OutputError& e) {
    fail_at_start(e.what());
  }
  // DTR_PLAN: a plan that cannot be followed is a bad option (Note [Bad configuration]).
  std::shared_ptr<const PlanHints> plan;
  if (!config.plan.empty() && config.remat) {
    try {
      plan = load_warm_start(config.plan, config.plan_trace);
    } catch (const std::exception& e) {
      fail_at_start(std::string("dtr: option plan: ") + e.what());
    }
  } else if (!config.plan.empty()) {
    std::fprintf(stderr, "dtr: note: plan=%s is not followed with remat:False (nothing is "
                 "evicted or recomputed)\n", config.plan.c_str());
  }
  export_output_paths(absolute);  // Note [Output paths at start]
  const bool report = config.report;
  auto* rt =
      new TorchRuntime(std::move(config), budget_bytes, reserved_limit_bytes);  // never deleted
  switch (install_cpu_allocator(rt->allocator())) {
    case InstallResult::installed:
    case InstallResult::already_installed:
      break;
    case InstallResult::other_copy:
      std::fprintf(stderr, "dtr: another copy of libdtr_torch.so is already PyTorch's CPU "
                   "allocator; this one (%s) stays inactive\n", own_path().c_str());
      delete rt;
      return;
  }
  runtime_ptr.store(rt, std::memory_order_release);
  // Note [Forking beside the allocator] in allocator/caching_allocator.cpp. Registered
  // before the engine's handlers (Note [Fork] in dispatch_hook.cpp): prepare handlers run
  // in the reverse order, so the engine's lock is taken first, as every other path takes
  // the two.
  pthread_atfork([] { runtime()->allocator().lock_for_fork(); },
                 [] { runtime()->allocator().unlock_after_fork(); },
                 [] { runtime()->allocator().unlock_after_fork(); });
  if (compiled_torch_version() != tested_torch_version())
    std::fprintf(stderr,
                 "dtr: warning: built against PyTorch %s, tested against %s only. Under 2.11 "
                 "most tests pass, but some reads of rematerialized tensors gave other bits "
                 "than a run without dtr (docs/pytorch.md, \"Under PyTorch 2.x\"): compare "
                 "results with such a run\n",
                 compiled_torch_version().c_str(), tested_torch_version().c_str());
  try {
    if (rt->config().remat)  // Note [Eviction hook-up]
      start_lineage(rt->config(), rt->allocator(), rt->history(), std::move(plan));
    else
      install_storage_guard();
  } catch (const ConfigError& e) {
    exit_at_start(e.what());  // the allocator is in: Note [Bad configuration]
  }
  // Note [Outputs at exit] in exit_writers.cpp
  if (report) write_at_exit(report_at_exit);
  if (!rt->config().snapshot.empty()) write_at_exit(snapshot_at_exit);
}

// Note [Bad configuration]
void load_runtime() {
  std::lock_guard<std::mutex> lock(start_mutex);
  // Its value is the loading process's pid: an inherited one (a child, or a variable left
  // set) does not count, so LD_PRELOAD and the shim keep exit(2) whatever the environment.
  const char* raises = getenv("DTR_LOAD_RAISES");
  start_errors_raise = raises && std::string(raises) == std::to_string(getpid());
  start_error().clear();
  try {
    start_runtime();
  } catch (const StartFailure& failure) {
    start_error() = start_failure_text(failure.message) +
                    "\ndtr: libdtr_torch.so not started: fix DTR_CONF / DTR_* (os.environ) and "
                    "call dtr.load() again";
  }
  start_errors_raise = false;
}

__attribute__((constructor)) void dtr_torch_initializer() { load_runtime(); }

}  // namespace

}  // namespace dtr::torch_integration

using dtr::torch_integration::runtime;

namespace {

// The runtime, or null with last_error saying why (the C API's calls that need one).
dtr::torch_integration::TorchRuntime* enabled_runtime() {
  dtr::torch_integration::TorchRuntime* rt = runtime();
  if (!rt)
    dtr::torch_integration::last_error =
        "dtr: libdtr_torch.so is loaded but not enabled in this process";
  return rt;
}

}  // namespace

extern "C" {

int dtr_torch_is_enabled(void) {
  return runtime() && dtr::torch_integration::cpu_allocator_is_ours() ? 1 : 0;
}

const char* dtr_torch_memory_stats_json(void) {
  try {
    dtr::torch_integration::TorchRuntime* rt = runtime();
    if (!rt) return dtr::torch_integration::keep_text("{}");
    // Before either count is read: what the program let go of since its last op (a `del
    // opt` frees the momentum buffers) must not stay in dtr.pinned_bytes.current.
    dtr::torch_integration::find_dead_storages();
    nlohmann::ordered_json stats = rt->allocator().stats().to_json();
    // The engine's own counters under dtr.*; the allocator's are the PyTorch-named ones.
    const dtr::Stats engine = dtr::torch_integration::lineage_stats();
#define DTR_ENGINE_STAT(member, key, doc) \
  if (std::string(key).rfind("dtr.", 0) == 0) stats[key] = engine.member;
    DTR_STATS(DTR_ENGINE_STAT)
#undef DTR_ENGINE_STAT
    return dtr::torch_integration::keep_text(stats.dump());
  } catch (const std::exception& e) {
    dtr::torch_integration::last_error = e.what();
    return dtr::torch_integration::keep_text("{}");
  }
}

int dtr_torch_set_budget(const char* text) {
  using namespace dtr::torch_integration;
  try {
    TorchRuntime* rt = enabled_runtime();
    if (!rt) return 1;
    // A ratio is of the peak so far, as dtr.max_memory_allocated() reads it.
    const dtr::Budget budget = dtr::Budget::parse(text ? text : "");
    const uint64_t peak = rt->allocator().stats().allocated_bytes.all.peak;
    if (budget.kind == dtr::Budget::Kind::ratio && budget.resolve(peak) == 0) {
      // Not a budget of one byte (it was, by max(1, ...)): nothing to take a ratio of.
      last_error = "dtr: no peak to take " + budget.to_string() +
                   " of: " + dtr::format_bytes(peak) +
                   " allocated at most since the start or the last reset_peak_stats(); set "
                   "the budget in bytes, or call it after a step has run";
      return 2;
    }
    const uint64_t bytes = budget.kind == dtr::Budget::Kind::ratio
                               ? budget.resolve(peak)
                               : live_limit_bytes(budget, "budget");
    if (!rt->allocator().lower_budget(bytes)) {  // evicts down to it first
      last_error = "dtr: cannot lower the budget to " + dtr::format_bytes(bytes) + ": " +
                   dtr::format_bytes(rt->allocator().stats().allocated_bytes.all.current) +
                   " are allocated now after evicting all that could be; free tensors first";
      return 2;
    }
    lineage_budget_changed(bytes);  // Note [Temporaries] in lineage.cpp
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return 3;
  }
}

uint64_t dtr_torch_budget_bytes(void) {
  dtr::torch_integration::TorchRuntime* rt = runtime();
  return rt ? rt->allocator().config().budget_bytes : dtr::kUnlimitedBytes;
}

uint64_t dtr_torch_reserved_limit_bytes(void) {
  dtr::torch_integration::TorchRuntime* rt = runtime();
  return rt ? rt->allocator().config().reserved_limit_bytes : dtr::kUnlimitedBytes;
}

void dtr_torch_reset_peak_stats(void) {
  if (dtr::torch_integration::TorchRuntime* rt = runtime()) rt->allocator().reset_peaks();
}

uint64_t dtr_torch_empty_cache(void) {
  dtr::torch_integration::TorchRuntime* rt = runtime();
  return rt ? rt->allocator().empty_cache() : 0;
}

int dtr_torch_start(int again) {
  using namespace dtr::torch_integration;
  {
    std::lock_guard<std::mutex> lock(start_mutex);
    if (!(again && !runtime() && !start_error().empty())) {
      if (start_error().empty()) return 0;
      last_error = start_error();
      return 1;
    }
  }
  load_runtime();  // takes start_mutex; a second retry finds the runtime up
  std::lock_guard<std::mutex> lock(start_mutex);
  if (start_error().empty()) return 0;
  last_error = start_error();
  return 1;
}

const char* dtr_torch_last_error(void) {
  return dtr::torch_integration::keep_text(dtr::torch_integration::last_error);
}

const char* dtr_torch_compiled_torch_version(void) {
  return dtr::torch_integration::keep_text(dtr::torch_integration::compiled_torch_version());
}

int dtr_torch_dump_snapshot(const char* path, const char* format) {
  using namespace dtr::torch_integration;
  try {
    TorchRuntime* rt = enabled_runtime();
    if (!rt) return 1;
    const dtr::SnapshotFormat f = dtr::parse_snapshot_format(
        format && *format ? std::string(format) : rt->config().snapshot_format);
    dtr::write_snapshot(path ? path : "", runtime_snapshot(*rt, f));
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return 2;
  }
}

void dtr_torch_set_recording(int on) { dtr::torch_integration::set_recording(on != 0); }

int dtr_torch_recording(void) { return dtr::torch_integration::recording() ? 1 : 0; }

int dtr_torch_mark_step(void) {
  if (!enabled_runtime()) return 1;
  dtr::torch_integration::mark_lineage_step();
  return 0;
}

}  // extern "C"
