// memory_snapshot.cpp: segments + history -> PyTorch's snapshot structure, and the file.
//
// Note [Snapshot keys]
// ~~~~~~~~~~~~~~~~~~~~
// The keys are those PyTorch writes (torch/csrc/cuda/memory_snapshot.cpp) and its readers
// use (torch/cuda/_memory_viz.py, torch/utils/viz/MemoryViz.js); we add `category` (to
// blocks and trace entries: the viewer colours allocations by it), `small_path` (to
// segments) and `user_metadata`. A segment: device, address, total_size, allocated_size
// (bytes of allocated blocks), active_size (the same: no block waits on a stream here),
// requested_size (what callers asked for), stream 0, segment_type small|large,
// is_expandable False, frames [], blocks. A block: address, size, requested_size, state
// (active_allocated or inactive), frames [], category. The blocks tile their segment
// (1.13's `stats` asserts that their sizes sum to total_size). The list format keeps
// 1.13's segment keys (address, total_size, stream, segment_type, allocated_size,
// active_size, blocks of size and state) and adds requested_size and category.
//
// Note [Small-path segments]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A block the backend served itself (Note [Small path] in caching_allocator.cpp) belongs
// to no segment. PyTorch's readers know only memory in segments, so each such block is
// shown as a segment of its own, exactly its size (segment_type small, small_path True),
// and the allocator reports it to the recorder with a segment_alloc before its alloc and
// a segment_free after its free. Reserved bytes in the snapshot then equal the
// allocator's reserved_bytes.all.current, as they should. The simulator's fake backend
// has no small path: there every block is in a real segment.
//
// Note [Trace entries]
// ~~~~~~~~~~~~~~~~~~~~
// An entry: action, addr (oom: device_free, the bytes left under the budget), size
// (alloc/free: the caller's request, as PyTorch records it; segments: their size; oom:
// the rounded request), stream 0, time_us (the recorder's clock ticks / 1000: real
// microseconds, or in the simulator microseconds of simulated compute), frames [] (no
// stack traces are collected), category. One `snapshot` entry (category unknown) ends
// the list, as PyTorch's own trace has at snapshot time; it also works around the viewer
// (MemoryViz.js, annotate_snapshot), which fails on a trace whose categories lack
// `unknown`.
#include "dtr/allocator/memory_snapshot.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "dtr/core/options.h"
#include "dtr/core/output_file.h"
#include "dtr/core/pickle.h"

namespace dtr {

using nlohmann::ordered_json;

SnapshotFormat parse_snapshot_format(const std::string& text) {
  if (text == "dict") return SnapshotFormat::dict;
  if (text == "list") return SnapshotFormat::list;
  throw ConfigError("dtr: unknown snapshot format '" + text +
                    "' (option `snapshot_format`); valid: dict, list");
}

const char* snapshot_format_name(SnapshotFormat format) {
  return format == SnapshotFormat::dict ? "dict" : "list";
}

namespace {

constexpr uint64_t kTicksPerMicrosecond = 1000;  // ticks are nanoseconds (core/clock.h)

ordered_json block_json(const BlockView& b, SnapshotFormat format, const MemoryHistory* history) {
  ordered_json j = ordered_json::object();
  if (format == SnapshotFormat::dict) j["address"] = uint64_t{b.ptr};
  j["size"] = uint64_t{b.size};
  j["requested_size"] = uint64_t{b.requested_bytes};
  j["state"] = b.allocated ? "active_allocated" : "inactive";
  if (format == SnapshotFormat::dict) j["frames"] = ordered_json::array();
  const MemoryCategory category =
      b.allocated && history ? history->category_of(b.ptr) : MemoryCategory::unknown;
  j["category"] = memory_category_name(category);
  return j;
}

ordered_json segment_json(const SegmentView& seg, SnapshotFormat format,
                          const MemoryHistory* history) {
  uint64_t allocated = 0, requested = 0;
  ordered_json blocks = ordered_json::array();
  for (const BlockView& b : seg.blocks) {
    if (b.allocated) {
      allocated += b.size;
      requested += b.requested_bytes;
    }
    blocks.push_back(block_json(b, format, history));
  }
  ordered_json j = ordered_json::object();
  if (format == SnapshotFormat::dict) j["device"] = 0;
  j["address"] = uint64_t{seg.ptr};
  j["total_size"] = uint64_t{seg.size};
  j["allocated_size"] = allocated;
  j["active_size"] = allocated;
  j["requested_size"] = requested;
  j["stream"] = 0;
  j["segment_type"] = seg.small_pool ? "small" : "large";
  if (format == SnapshotFormat::dict) {
    j["is_expandable"] = false;
    j["frames"] = ordered_json::array();
  }
  j["small_path"] = seg.small_path;  // Note [Small-path segments]
  j["blocks"] = std::move(blocks);
  return j;
}

ordered_json trace_entry_json(const char* action, const MemoryHistoryEntry& e) {
  ordered_json j = ordered_json::object();
  j["action"] = action;
  if (e.action == AllocatorAction::oom)
    j["device_free"] = e.free_bytes;
  else
    j["addr"] = uint64_t{e.addr};
  const bool block_event = e.action == AllocatorAction::alloc ||
                           e.action == AllocatorAction::free_requested ||
                           e.action == AllocatorAction::free_completed;
  j["size"] = block_event ? e.requested_bytes : e.size;
  j["stream"] = 0;
  j["time_us"] = e.time / kTicksPerMicrosecond;
  j["frames"] = ordered_json::array();
  j["category"] = memory_category_name(e.category);
  return j;
}

}  // namespace

ordered_json memory_snapshot(const CachingAllocator& allocator, const MemoryHistory* history,
                             SnapshotFormat format, const ordered_json& user_metadata) {
  // Entries first, segments second: a block allocated in between then has a category.
  std::vector<MemoryHistoryEntry> entries;
  uint64_t recorded = 0;
  if (history) {
    entries = history->entries();
    recorded = history->num_recorded();
  }
  ordered_json segments = ordered_json::array();
  for (const SegmentView& seg : allocator.segments())
    segments.push_back(segment_json(seg, format, history));
  if (format == SnapshotFormat::list) return segments;

  ordered_json trace = ordered_json::array();
  for (const MemoryHistoryEntry& e : entries)
    trace.push_back(trace_entry_json(allocator_action_name(e.action), e));
  if (history) {  // Note [Trace entries]: the closing `snapshot` entry
    MemoryHistoryEntry closing;
    closing.time = history->now();
    trace.push_back(trace_entry_json("snapshot", closing));
  }

  const AllocatorConfig& config = allocator.config();
  auto limit = [](uint64_t bytes) {
    return bytes == kUnlimitedBytes ? ordered_json(nullptr) : ordered_json(bytes);
  };
  ordered_json settings = ordered_json::object();
  settings["PYTORCH_CUDA_ALLOC_CONF"] = "";
  settings["dtr_budget_bytes"] = limit(config.budget_bytes);
  settings["dtr_reserved_limit_bytes"] = limit(config.reserved_limit_bytes);
  settings["dtr_backend_small_path"] =
      config.use_backend_small_path && allocator.backend().serves_small();

  ordered_json meta = ordered_json::object();
  meta["dtr_snapshot_version"] = 1;
  meta["time_unit"] = "time_us = clock ticks (ns) / 1000";
  meta["trace_entries_recorded"] = recorded;
  meta["trace_entries_kept"] = uint64_t{entries.size()};
  meta["max_entries"] = history ? uint64_t{history->max_entries()} : uint64_t{0};
  if (user_metadata.is_object())
    for (auto it = user_metadata.begin(); it != user_metadata.end(); ++it) meta[it.key()] = *it;

  ordered_json out = ordered_json::object();
  out["segments"] = std::move(segments);
  ordered_json traces = ordered_json::array();
  traces.push_back(std::move(trace));
  out["device_traces"] = std::move(traces);
  out["allocator_settings"] = std::move(settings);
  out["user_metadata"] = std::move(meta);
  return out;
}

void write_snapshot(const std::string& path, const ordered_json& snapshot) {
  const std::string bytes = to_pickle(snapshot);
  ReplacingFile file(path);  // Note [Whole or absent] in core/output_file.cpp
  if (file) file.out().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file || !file.commit())
    throw OutputError("dtr: cannot write snapshot '" + path + "': " + std::strerror(errno) +
                      "; check free disk space and permissions");  // Note [Output files]
}

}  // namespace dtr
