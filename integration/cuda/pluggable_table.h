// pluggable_table.h: the per-device, per-stream caching behind dtr_malloc / dtr_free.
//
// A PluggableTable serves requests (size, device, stream) from one dtr::CachingAllocator
// per (device, stream) (Note [Streams] in pluggable_table.cpp), under a budget on each
// device's live bytes read from DTR_CONF / DTR_BUDGET (Note [Budget across streams]), and
// keeps device-wide counters under PyTorch's names (Note [Device stats]). Where segments
// come from is the BackendFactory's business: CUDA for the process-wide table behind the C
// ABI (pluggable_allocator.cpp), a fake device in tests and benchmarks, so everything but
// cudaMalloc itself is tested without a GPU.
// Lock rules: one std::mutex guards the table, the allocators' calls included (each
// CachingAllocator's own lock is always taken inside it, and none has an EvictionCallback,
// so there is no lock-order cycle); backends are only called under it. Every method may
// be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "dtr/allocator/backend.h"
#include "integration/cuda/cuda_backend.h"

namespace dtr {

class CachingAllocator;

// Counters of one device, summed over its streams' caching allocators (names follow
// torch.cuda.memory_stats()).
struct PluggableDeviceStats {
  uint64_t allocated_bytes_current = 0;  // live bytes, after rounding to 512
  uint64_t allocated_bytes_peak = 0;
  uint64_t allocation_current = 0;      // live allocations
  uint64_t reserved_bytes_current = 0;  // segments held from the backend, live and cached
  uint64_t reserved_bytes_peak = 0;
  uint64_t num_device_alloc = 0;       // segments taken from the backend (cudaMalloc)
  uint64_t num_device_free = 0;        // segments given back (cudaFree)
  uint64_t num_ooms = 0;               // requests answered with nullptr
  uint64_t budget_bytes = UINT64_MAX;  // UINT64_MAX: unlimited
  uint64_t streams = 0;                // streams that have a caching allocator (dtr.*)
  uint64_t cache_releases = 0;         // device ran short: other streams' caches released (dtr.*)
};

// A nested error's text without its leading "dtr: " (CudaError and ConfigError messages
// have one; the C ABI's report() adds its own).
std::string without_dtr_prefix(const std::string& text);

class DTR_CUDA_API PluggableTable {
 public:
  // Makes the backend of one stream's allocator on `device`; throws for a device that
  // does not exist (the table asks once per device before serving it).
  using BackendFactory = std::function<std::unique_ptr<Backend>(int device)>;

  explicit PluggableTable(BackendFactory make_backend);
  ~PluggableTable();  // gives every segment back, live ones included
  PluggableTable(const PluggableTable&) = delete;
  PluggableTable& operator=(const PluggableTable&) = delete;

  // At least `size` bytes (rounded up to 512) for work on `stream`, or nullptr with the
  // reason in `message` (over the budget, device out of memory, invalid configuration).
  // May throw what the backend throws (CudaError).
  void* allocate(size_t size, int device, cudaStream_t stream, std::string& message);
  // Back to the cache of the stream it was allocated on. An unknown pointer is left alone
  // and described in `message`.
  void deallocate(void* ptr, size_t size, int device, std::string& message);

  PluggableDeviceStats stats(int device);
  // The counters as one JSON object under torch.cuda.memory_stats()'s key names plus dtr.*
  // ones (Note [Device stats]).
  std::string stats_json(int device);
  void reset_peaks(int device);
  // Gives every fully free cached segment on `device` back; returns the bytes released.
  uint64_t empty_cache(int device);
  // Reads DTR_CONF / DTR_BUDGET again (they are read on the first request). Live
  // allocations stay and count against the new budget.
  void reload_config();

 private:
  struct DeviceTable;  // pluggable_table.cpp

  void load_config_locked();
  DeviceTable& table_locked(int device);  // checks the device on first use; may throw
  CachingAllocator& allocator_locked(DeviceTable& table, int device, cudaStream_t stream);

  BackendFactory make_backend_;
  std::mutex mutex_;
  bool config_loaded_ = false;
  std::string config_error_;  // non-empty: the configuration is unusable, refuse everything
  uint64_t budget_bytes_ = UINT64_MAX;
  uint32_t debug_ = 0;                                   // the allocators' debug level (DTR_DEBUG)
  std::map<int, std::unique_ptr<DeviceTable>> devices_;  // owned; addresses stay put
};

}  // namespace dtr
