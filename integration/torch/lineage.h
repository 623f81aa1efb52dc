// lineage.h: eviction and rematerialization inside PyTorch, as seen from runtime.cpp.
//
// No torch header here: runtime.cpp (torch-free) starts the lineage and reads its stats;
// lineage.cpp and dispatch_hook.cpp hold the torch-facing parts (lineage_impl.h).
//
// Lock rules: every function here takes the lineage's engine lock itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtr/core/stats.h"

namespace dtr {

class CachingAllocator;
class MemoryHistory;
struct Config;
struct PlanHints;

namespace torch_integration {

// Builds the engine (policy, search, sample, seed and debug from `config`), makes it the
// allocator's eviction callback, registers the dispatcher fallback and enables it on the
// calling thread. Throws ConfigError for a bad policy or search mode. Once per process.
// `history` (may be null) is the snapshot's recorder: the lineage tells it categories.
// `plan` (may be null; DTR_PLAN) is a warm start the engine follows: Note [Warm start in
// PyTorch] in lineage.cpp.
void start_lineage(const Config& config, CachingAllocator& allocator, MemoryHistory* history,
                   std::shared_ptr<const PlanHints> plan = nullptr);
bool lineage_started();
// remat:False: no lineage, but the Python guard still moves deep copies into the allocator
// (Note [Storages Python allocates] in dispatch_hook.cpp). The fallback, enabled on the
// calling thread, installs it at the first op and steps aside.
void install_storage_guard();

// The engine's stats (dtr.* keys); zeros before start_lineage.
Stats lineage_stats();
// Finds the storages that died since the last op (Note [Freed pinned storages] in
// collector.cpp), so that stats read next count them out: dtr.memory_stats() after a `del`.
void find_dead_storages();

// Recording on the calling thread (python: dtr.disable()/dtr.enable()): while off, ops run
// without being recorded, but evicted inputs are still refilled first.
void set_recording(bool on);
bool recording();

// Frees what lineage holds only for dead tensors (Note [Collecting dead lineage]).
void collect_lineage();

// The allocator's budget is now `budget_bytes` (python: dtr.set_budget): Note [Temporaries]
// in lineage.cpp.
void lineage_budget_changed(uint64_t budget_bytes);

// An optimizer step's scope opened / closed (Note [Step marks] in dispatch_hook.cpp); the
// close ends a period (Engine::end_period) where the step ends an iteration (Note
// [Iteration periods] in lineage.cpp).
void begin_lineage_optimizer_step();
void end_lineage_optimizer_step();
// The program marks an iteration's end itself (python: dtr.mark_step()): a period ends,
// and optimizer steps end none from then on (Note [Marked steps] in lineage.cpp).
void mark_lineage_step();
// What the report says the policy is (Heuristic::status): "dtr_eq", "auto: msps (...)";
// "" before start_lineage.
std::string policy_status();

// DTR_PLAN: what the plan is ("plan.json (rotor)"), and where the run left it ("" while it
// follows it); both "" without a plan.
std::string plan_source();
std::string plan_departure();

}  // namespace torch_integration
}  // namespace dtr
