// stats.h: the runtime's counters, from one X-macro list.
//
// Every counter is declared once in DTR_STATS below: its C++ member, its exported key
// and a one-line description. Keys follow PyTorch's `torch.cuda.memory_stats()` where
// PyTorch has one (`allocated_bytes.all.current`, `num_ooms`) and live under `dtr.`
// otherwise. The struct, the JSON export and the docs all come from this list, so a
// counter cannot be exported under two names or forgotten in one of them.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dtr {

// X(member, "exported.key", "description")
#define DTR_STATS(X)                                                                               \
  X(allocated_current, "allocated_bytes.all.current", "live bytes of material storages")           \
  X(allocated_peak, "allocated_bytes.all.peak", "peak of allocated_bytes.all.current")             \
  X(allocated_total, "allocated_bytes.all.allocated", "bytes ever made material (incl. remats)")   \
  X(freed_total, "allocated_bytes.all.freed", "bytes ever freed (evictions and deaths)")           \
  X(allocation_current, "allocation.all.current", "material storages now")                         \
  X(allocation_peak, "allocation.all.peak", "peak of allocation.all.current")                      \
  X(num_ooms, "num_ooms", "requests that failed with out-of-memory")                               \
  X(num_ops, "dtr.num_ops", "ops recorded")                                                        \
  X(num_evictions, "dtr.num_evictions", "storages evicted to make room (heuristic choices)")       \
  X(num_eager_evictions, "dtr.num_eager_evictions", "storages evicted at their last release")      \
  X(num_kept_dropped, "dtr.num_kept_dropped",                                                      \
    "storages the program dropped that option keep_near_large (or policy dtr_eq_keep) kept to "    \
    "the period's end")                                                                            \
  X(num_plan_drops, "dtr.num_plan_drops",                                                          \
    "storages dropped because a warm-start plan drops them (eviction/plan_guide.h)")               \
  X(plan_departures, "dtr.plan_departures",                                                        \
    "1 once the program departed from the warm-start plan's graph (the guide then stops)")         \
  X(num_retired_ops, "dtr.num_retired_ops", "ops forgotten for good (Note [Retiring])")            \
  X(num_remats, "dtr.num_remats", "ops re-run to rematerialize a storage")                         \
  X(evicted_bytes, "dtr.evicted_bytes", "bytes freed by heuristic evictions")                      \
  X(model_compute_ns, "dtr.model_compute_ns", "compute of ops the program asked for")              \
  X(remat_compute_ns, "dtr.remat_compute_ns", "compute spent rematerializing")                     \
  X(remat_measured_ns, "dtr.remat_measured_ns",                                                    \
    "torch host: the wall time its remats took, measured (remat_compute_ns sums the costs "        \
    "charged for them: Note [Noisy op times])")                                                    \
  X(remat_room_ns, "dtr.remat_room_ns",                                                            \
    "torch host: of remat_measured_ns, the wall time spent making room for the remats "            \
    "(collecting, searching, evicting: Note [Room within remats])")                                \
  X(make_room_ns, "dtr.make_room_ns",                                                              \
    "torch host: the wall time it spent making room for the allocator (collecting, searching, "    \
    "evicting; with no budget, the scans and collects before a new peak), which op times leave "   \
    "out (Note [Host work in op times])")                                                          \
  X(full_collects, "dtr.full_collects",                                                            \
    "torch host: full collects of dead lineage (Note [Collecting dead lineage]; under a budget, "  \
    "Note [Collects when making room]); a replay: collects of dropped pins that freed memory "     \
    "(Note [Collecting dropped pins])")                                                            \
  X(num_periods, "dtr.num_periods",                                                                \
    "periods ended: training iterations (torch host: Note [Iteration periods], dtr.mark_step(); "  \
    "a trace: ANNOTATE STEP)")                                                                     \
  X(num_thrash_alerts, "dtr.num_thrash_alerts",                                                    \
    "torch host: times remats passed option max_overhead (Note [Thrashing in a live run])")        \
  X(num_packed_masks, "dtr.num_packed_masks",                                                      \
    "dropout masks kept packed to bits, one per element (torch host: Note [Packed masks])")        \
  X(num_mask_unpacks, "dtr.num_mask_unpacks",                                                      \
    "remats that unpacked a mask instead of drawing it again")                                     \
  X(eviction_searches, "dtr.eviction_searches", "times the engine chose a storage to evict")       \
  X(candidates_scored, "dtr.candidates_scored", "heuristic evaluations during those searches")     \
  X(neighborhood_visits, "dtr.neighborhood_visits",                                                \
    "evicted storages the neighbourhood scores (dtr, dtr_ancestors, msps) reached in those "       \
    "searches (Note [Search work])")                                                               \
  X(pinned_current, "dtr.pinned_bytes.current", "bytes pinned (constants, outputs, raw access)")   \
  X(outside_current, "dtr.outside_bytes.current",                                                  \
    "torch host: of those, the bytes whose memory dtr's allocator did not make (from_numpy, "      \
    "storages made before the library, qnnpack's quantized results): outside the budget (Note "    \
    "[Memory outside the allocator])")                                                             \
  X(max_remat_depth, "dtr.max_remat_depth", "deepest chain of nested rematerializations")          \
  X(num_relaxed_remats, "dtr.num_relaxed_remats",                                                  \
    "times a nested remat let go of its outer frames' parents to find room (Note [Relaxed "        \
    "remat locks])")                                                                               \
  X(num_unrecomputable, "dtr.num_unrecomputable",                                                  \
    "storages the policy chose that could no longer be made again, pinned instead of evicted "     \
    "(Note [Unrecomputable victims])")                                                             \
  X(allocator_requests, "dtr.allocator_requests", "times the allocator asked the engine for room") \
  X(contiguous_requests, "dtr.contiguous_requests",                                                \
    "of those, requests for a contiguous block while the budget had room (fragmentation)")         \
  X(fragmentation_free_bytes, "dtr.eviction_free_bytes",                                           \
    "sum over allocator requests of the free bytes within the budget at that moment")

struct Stats {
#define DTR_STATS_MEMBER(member, key, doc) uint64_t member = 0;
  DTR_STATS(DTR_STATS_MEMBER)
#undef DTR_STATS_MEMBER

  // Flat object {"allocated_bytes.all.current": 123, ...} in list order.
  nlohmann::ordered_json to_json() const;
  // Peaks restart from the current values (torch.cuda.reset_peak_memory_stats()).
  void reset_peaks();
  // One line per counter: key, description. For --help texts and docs.
  static std::string describe();
};

}  // namespace dtr
