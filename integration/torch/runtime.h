// runtime.h: the process-wide dtr runtime inside a PyTorch process, and its C API.
//
// What it is. libdtr_torch.so's static initializer builds one TorchRuntime (the one
// process-wide instance of the project: STYLE.md 7) from the options table (DTR_CONF and
// DTR_*), and installs its CachingAllocator, over the host (mimalloc) backend with the
// hard budget from the `budget` option, as PyTorch's CPU allocator (cpu_allocator.h).
// It happens at load: under LD_PRELOAD before the script runs, or inside
// torch.ops.load_library(path). The runtime is never destroyed (Note [Immortal
// allocator] in cpu_allocator.cpp).
//
// Failure at start. A bad DTR_CONF or DTR_* value, or a budget the live runtime cannot
// use (a ratio: only the simulator knows a baseline peak), prints the reason and the
// valid keys on stderr and ends the process with exit status 2, before the script runs
// (LD_PRELOAD) or inside torch.ops.load_library; under dtr.load() it raises DtrError
// instead (dtr_torch_start). A static initializer cannot raise a
// Python exception, and running on without the requested budget would be the silent
// failure the options table exists to prevent (Note [Bad configuration] in runtime.cpp).
//
// The C API below is what python/dtr (ctypes) calls; no exception crosses it. Functions
// returning text return a pointer to a thread-local buffer, valid until the next call
// on the same thread.
#pragma once

#include <cstdint>

#define DTR_TORCH_API __attribute__((visibility("default")))

extern "C" {

// 1 when this library's allocator is PyTorch's CPU allocator, else 0.
DTR_TORCH_API int dtr_torch_is_enabled(void);
// The allocator's stats as a flat JSON object with torch.cuda.memory_stats() key names
// (AllocatorStats::to_json), or "{}" when not enabled.
DTR_TORCH_API const char* dtr_torch_memory_stats_json(void);
// Sets the budget from text as the `budget` option reads it ("300M", "1G", "123456";
// "0" or "unlimited" = no budget). 0 on success; otherwise nonzero and
// dtr_torch_last_error() says why (bad text, a ratio, below the bytes allocated now, or
// not enabled).
DTR_TORCH_API int dtr_torch_set_budget(const char* text);
// The budget in bytes; UINT64_MAX when unlimited or not enabled.
DTR_TORCH_API uint64_t dtr_torch_budget_bytes(void);
// Option reserved_limit in bytes; UINT64_MAX when unlimited or not enabled.
DTR_TORCH_API uint64_t dtr_torch_reserved_limit_bytes(void);
// Peaks restart from the current values (torch.cuda.reset_peak_memory_stats()).
DTR_TORCH_API void dtr_torch_reset_peak_stats(void);
// Gives every fully free cached segment back to the system (torch.cuda.empty_cache()),
// and the pages mimalloc kept for the calling thread's freed small blocks (Note [Trimming
// the small path]); returns the segment bytes released, 0 when not enabled. Live tensors
// and the budget are not touched; evicted tensors stay evicted.
DTR_TORCH_API uint64_t dtr_torch_empty_cache(void);
// Whether the library started: 0 when it did (or this process runs no PyTorch ops), 1 when
// its options stopped it and dtr_torch_last_error() says why. That happens only in a
// start under dtr.load(), which sets DTR_LOAD_RAISES to its pid (Note [Bad configuration] in
// runtime.cpp: otherwise a bad option ends the process). With `again` nonzero, a start
// that failed so is tried again, reading the environment anew.
DTR_TORCH_API int dtr_torch_start(int again);
// The message of this thread's last failed call.
DTR_TORCH_API const char* dtr_torch_last_error(void);
// "1.13": the PyTorch version the library was compiled against.
DTR_TORCH_API const char* dtr_torch_compiled_torch_version(void);
// Writes a memory snapshot (docs/observability.md) to `path` as a pickle: format "dict"
// (PyTorch >= 2.0) or "list" (1.13's _memory_viz); NULL or "" = the `snapshot_format`
// option. device_traces is empty unless DTR_SNAPSHOT is set (Note [Snapshot history]).
// 0 on success, else dtr_torch_last_error() says why.
DTR_TORCH_API int dtr_torch_dump_snapshot(const char* path, const char* format);
// Recording on the calling thread (1 on, 0 off): dtr.enable() / dtr.disable().
DTR_TORCH_API void dtr_torch_set_recording(int on);
DTR_TORCH_API int dtr_torch_recording(void);
// The program says a training iteration ended (dtr.mark_step()): a period ends, and from
// then on optimizer steps end none (Note [Marked steps] in lineage.cpp). 0 on success, 1
// when not enabled (dtr_torch_last_error() says so).
DTR_TORCH_API int dtr_torch_mark_step(void);

}  // extern "C"
