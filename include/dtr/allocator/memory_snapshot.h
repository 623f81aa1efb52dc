// memory_snapshot.h: the allocator's memory as the snapshot PyTorch's memory tools read.
//
// Two formats (option `snapshot_format`; docs/observability.md):
//  - dict: what torch.cuda.memory._dump_snapshot writes since PyTorch 2.0 and
//    pytorch.org/memory_viz opens: {segments, device_traces, allocator_settings,
//    user_metadata}. Each segment lists blocks that tile it (state active_allocated or
//    inactive, with a `category`); device_traces holds one list (device 0) of the
//    MemoryHistory's entries, oldest first (Note [Trace entries] in
//    allocator/memory_snapshot.cpp).
//  - list: the segment list of PyTorch 1.13's torch.cuda.memory_snapshot(), which 1.13's
//    `python -m torch.cuda._memory_viz stats|segments|memory` reads (it cannot read the
//    dict; its segments are the dict's `segments`).
// write_snapshot writes either as a pickle of protocol 4 (core/pickle.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/memory_history.h"

namespace dtr {

enum class SnapshotFormat : uint8_t { dict, list };
// "dict" or "list"; anything else is a ConfigError naming the valid values.
SnapshotFormat parse_snapshot_format(const std::string& text);
const char* snapshot_format_name(SnapshotFormat format);

// The snapshot of `allocator` now, with the events of `history` (may be null: no
// device_traces entries) in the dict format. `user_metadata` (an object, or null) is
// copied into the dict's `user_metadata`, after what the recorder adds (events recorded
// and dropped, time unit); the list format has no place for either.
nlohmann::ordered_json memory_snapshot(const CachingAllocator& allocator,
                                       const MemoryHistory* history, SnapshotFormat format,
                                       const nlohmann::ordered_json& user_metadata = nullptr);

// Writes to_pickle(snapshot) to `path` (replacing it). Throws std::runtime_error naming the
// path when it cannot be written.
void write_snapshot(const std::string& path, const nlohmann::ordered_json& snapshot);

}  // namespace dtr
