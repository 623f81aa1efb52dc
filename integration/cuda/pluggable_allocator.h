// pluggable_allocator.h: the C ABI that PyTorch's CUDAPluggableAllocator loads, and a small
// C++ view of its state for tests and tools.
//
// PyTorch (>= 2.0) calls dtr_malloc / dtr_free for every CUDA allocation once
//   torch.cuda.memory.change_current_allocator(
//       torch.cuda.memory.CUDAPluggableAllocator("libdtr_cuda.so", "dtr_malloc", "dtr_free"))
// has run, before CUDA is initialised (docs/cuda.md). Behind the ABI sits one process-wide
// PluggableTable (pluggable_table.h) over CUDA, created on first use, with a
// dtr::CachingAllocator per (device, CUDA stream): the one process-wide instance dtr
// allows, and it lives here in integration/.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "integration/cuda/cuda_backend.h"
#include "integration/cuda/pluggable_table.h"

extern "C" {
// Device memory of at least `size` bytes (rounded up to 512) on `device`, from the cache of
// `stream`'s caching allocator or a new segment, or nullptr when the request would exceed
// DTR_BUDGET, the device is out of memory, the configuration is invalid or CUDA failed (a
// line on stderr says which). size 0 gives nullptr, no error.
DTR_CUDA_API void* dtr_malloc(size_t size, int device, cudaStream_t stream);
// Frees what dtr_malloc returned into the cache of the stream it was allocated on (the
// stream argument is not needed for that); nullptr is a no-op; an unknown pointer is
// reported on stderr and ignored.
DTR_CUDA_API void dtr_free(void* ptr, size_t size, int device, cudaStream_t stream);

// For Python's ctypes (python/dtr/cuda.py), since PyTorch's torch.cuda.memory_stats() does
// not reach a pluggable allocator. The counters of `device` as one JSON object under
// torch.cuda.memory_stats()'s key names plus dtr.* ones (Note [Device stats]); the string
// is the calling thread's and stays valid until its next call. Never null.
DTR_CUDA_API const char* dtr_cuda_memory_stats_json(int device);
// pluggable_empty_cache(device); 0 when the call failed (the reason is on stderr).
DTR_CUDA_API uint64_t dtr_cuda_empty_cache(int device);
// Every peak of `device` restarts from its current value.
DTR_CUDA_API void dtr_cuda_reset_peak_stats(int device);
}

namespace dtr {

// The process-wide table's counters of `device`.
DTR_CUDA_API PluggableDeviceStats pluggable_device_stats(int device);

// Gives every fully free cached segment of every stream on `device` back to CUDA
// (torch.cuda.empty_cache() for this allocator); returns the bytes released.
DTR_CUDA_API uint64_t pluggable_empty_cache(int device);

// Reads DTR_CONF / DTR_BUDGET again (they are read once, on the first dtr_malloc). Live
// allocations stay and count against the new budget. For tests and for tools that set
// the environment after loading the library.
DTR_CUDA_API void pluggable_reload_config();

}  // namespace dtr
