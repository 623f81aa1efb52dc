// status.h: the result of a runtime operation on a hot path (no exceptions there).
//
// `oom` carries the numbers a user needs to act on an infeasible budget: the budget,
// what was live, how much of that was pinned (not evictable) and how much could still
// be evicted, and what the failing request wanted. `thrash` means rematerialization
// exceeded the configured overhead limit. `refused` means the host would not recompute an
// op (EngineHooks::may_recompute): what the op read has changed where the engine cannot see.
#pragma once

#include <cstdint>
#include <string>

namespace dtr {

enum class StatusCode : uint8_t { ok, oom, thrash, refused };

struct OomInfo {
  uint64_t budget_bytes = 0;
  uint64_t live_bytes = 0;
  uint64_t pinned_bytes = 0;     // live and locked or pinned: cannot be evicted now
  uint64_t evictable_bytes = 0;  // live and in the eviction pool
  uint64_t in_use_bytes = 0;     // of pinned_bytes, locked by running ops only (not pinned)
  uint64_t requested_bytes = 0;
  // From a caching allocator with a reserved limit (0: none): segments may hold free memory
  // in blocks too small for the request.
  uint64_t reserved_limit_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t largest_free_block_bytes = 0;
  uint64_t segment_bytes = 0;  // the fresh segment the request takes (0: none or unknown)
};

struct Status {
  StatusCode code = StatusCode::ok;
  OomInfo oom;

  bool ok() const { return code == StatusCode::ok; }
  static Status success() { return {}; }
  static Status out_of_memory(const OomInfo& info) { return Status{StatusCode::oom, info}; }
  static Status thrashing() { return Status{StatusCode::thrash, {}}; }
  static Status refused() { return Status{StatusCode::refused, {}}; }

  // "ok", "oom", "thrash" or "refused": the names used in JSON results.
  const char* name() const;
  // A sentence for a human: numbers, and what to try.
  std::string message() const;
};

// Human-readable byte count ("1.50 GiB").
std::string format_bytes(uint64_t bytes);

// Where a request's fresh segment is larger than the device (its reserved limit), the
// sentences that say so and what to try; else empty. Note [Segments larger than the
// device] in core/status.cpp.
std::string segment_above_limit(uint64_t segment_bytes, uint64_t reserved_limit_bytes);

}  // namespace dtr
