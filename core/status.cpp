// status.cpp: names and human-readable messages for Status.
#include "dtr/core/status.h"

#include <algorithm>
#include <cstdint>

#include <cstdio>

namespace dtr {

const char* Status::name() const {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::oom: return "oom";
    case StatusCode::thrash: return "thrash";
    case StatusCode::refused: return "refused";
  }
  return "?";
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

// Note [Segments larger than the device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where no cached block fits a request it takes a fresh segment, and a request between 1
// and 10 MiB takes 20 MiB (segment_size_for in allocator/caching_allocator.cpp). On a
// device smaller than that segment (the simulator's fake device holds exactly the budget:
// a 6-op trace of 5.31 MiB replayed at its peak asked for 4 MiB) no eviction can ever make
// room, yet the message said to raise the budget above the pinned bytes plus the request,
// which it already was. So the message names the segment and the ways out: a device at
// least that large, or exact segments.
std::string segment_above_limit(uint64_t segment_bytes, uint64_t reserved_limit_bytes) {
  if (segment_bytes == 0 || reserved_limit_bytes == 0 || reserved_limit_bytes == UINT64_MAX ||
      segment_bytes <= reserved_limit_bytes)
    return "";
  return "No cached block fits it, and the fresh segment it takes, " + format_bytes(segment_bytes) +
         " (PyTorch's sizes: 2 MiB for requests up to 1 MiB, 20 MiB up to 10 MiB), is larger "
         "than the device's " +
         format_bytes(reserved_limit_bytes) +
         ": no eviction can make room. Try a device (budget or reserved limit) of at least " +
         format_bytes(segment_bytes) +
         ", or segments of the request's size (a reserved limit of the host's own; in the "
         "simulator option reserved_limit, or --allocator host or none).";
}

std::string Status::message() const {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::thrash:
      return "dtr: rematerialization exceeded the overhead limit (max_overhead); "
             "raise the budget or the limit";
    case StatusCode::refused:
      return "dtr: an evicted storage cannot be rematerialized: the host refused to recompute "
             "an op it needs, as what the op read has changed outside the engine's view";
    case StatusCode::oom: break;
  }
  std::string device;
  const std::string too_large = segment_above_limit(oom.segment_bytes, oom.reserved_limit_bytes);
  if (!too_large.empty() && oom.requested_bytes <= oom.reserved_limit_bytes) {
    return "dtr: out of memory: a request of " + format_bytes(oom.requested_bytes) +
           " does not fit the device of " + format_bytes(oom.reserved_limit_bytes) + " (budget " +
           format_bytes(oom.budget_bytes) + ", live " + format_bytes(oom.live_bytes) + "). " +
           too_large;
  }
  if (oom.reserved_limit_bytes != 0 && oom.reserved_limit_bytes != UINT64_MAX) {
    device = " The device holds " + format_bytes(oom.reserved_limit_bytes) + ", " +
             format_bytes(oom.reserved_bytes) + " of it in segments; the largest free block is " +
             format_bytes(oom.largest_free_block_bytes) +
             " (segments are 2 MiB for requests up to 1 MiB, 20 MiB up to 10 MiB).";
  }
  return "dtr: out of memory: a request of " + format_bytes(oom.requested_bytes) +
         " does not fit the budget of " + format_bytes(oom.budget_bytes) + " (live " +
         format_bytes(oom.live_bytes) + ", of which pinned " +
         format_bytes(oom.pinned_bytes - std::min(oom.in_use_bytes, oom.pinned_bytes)) +
         ", in use by the running op " + format_bytes(oom.in_use_bytes) + " and evictable " +
         format_bytes(oom.evictable_bytes) +
         "); nothing more can be evicted. Raise the budget above the pinned bytes plus the "
         "largest op's inputs and outputs, or reduce the batch size." +
         device;
}

}  // namespace dtr
