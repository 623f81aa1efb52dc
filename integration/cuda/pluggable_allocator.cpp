// pluggable_allocator.cpp: dtr_malloc / dtr_free for torch.cuda.memory.CUDAPluggableAllocator.
//
// Design: one process-wide State (Note [Process-wide state]) holding, per device, a
// CudaBackend and a table of live allocations (pointer -> rounded bytes). For now every
// request goes straight to the backend (Note [Until the caching allocator lands]); the
// budget from DTR_CONF / DTR_BUDGET is enforced here by refusing requests.
// Invariant: per device, allocated_bytes_current == sum of the table's bytes and never
// exceeds the budget (a budget lowered by pluggable_reload_config() only refuses new
// requests).
// Lock rules: one std::mutex guards the whole State, backend calls included (cudaMalloc
// is slow but this path is temporary). Messages are built under the lock and printed
// after it is released. No exception crosses the C ABI: each entry point catches and
// reports on stderr.
#include "integration/cuda/pluggable_allocator.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "dtr/core/options.h"
#include "dtr/core/status.h"

// Note [Until the caching allocator lands]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The plan (issue #3): each device's table becomes a dtr::CachingAllocator (include/dtr/
// allocator/caching_allocator.h) over a CudaBackend, configured from the same dtr::Config
// (budget from DTR_CONF / DTR_BUDGET). It caches segments, splits and coalesces blocks,
// enforces the budget with its out-of-memory chain (free list -> eviction callback ->
// release cached segments -> typed error) and keeps memory_stats()-named counters. Until
// that class exists, each request is one cudaMalloc of the size rounded up to 512 bytes
// and each free one cudaFree, and the budget is a plain check on live bytes. The C ABI,
// the rounding, the budget semantics and the stderr messages stay when the swap happens;
// only the body of DeviceTable changes.

// Note [Null from dtr_malloc]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The C ABI has no error channel besides nullptr. PyTorch's CUDAPluggableAllocator (2.x
// sources, torch/csrc/cuda/CUDAPluggableAllocator.cpp) does not check the pointer: a
// refused request becomes a tensor whose data pointer is null, and the failure shows up
// later (an illegal address or a "data is not allocated" error), not as
// torch.cuda.OutOfMemoryError. So every refusal prints one line on stderr saying why:
// budget, live bytes, request and what to try. Raising a real c10::OutOfMemoryError needs
// the torch integration (integration/torch/), which may link libtorch; this file may not.
// A size-0 request returns nullptr silently: PyTorch's own allocator does the same, and a
// DataPtr holding nullptr never calls the deleter.

// Note [Streams]
// ~~~~~~~~~~~~~~
// The stream argument is ignored. cudaMalloc memory can be used on any stream, and
// cudaFree synchronises the device before it releases memory, so a free while a kernel on
// another stream still reads the block is safe (at the price of one device sync per free).
// The caching allocator reuses blocks without cudaFree, so it must become stream-aware
// (reuse a block only on its stream, or wait on events recorded for other streams, as
// PyTorch's recordStream does) before it replaces this table.

// Note [Process-wide state]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch calls a plain C function, so the state behind it must be process-wide: this is
// the one place dtr allows that (STYLE.md rule 7). It is created on the first call, never
// in a static initialiser, and deliberately never destroyed: PyTorch frees tensors during
// interpreter shutdown, possibly after this library's static destructors have run, and a
// destroyed table would turn those frees into use-after-free. The process exit returns the
// memory to the driver.

namespace dtr {
namespace {

struct DeviceTable {
  std::unique_ptr<Backend> backend;
  std::unordered_map<void*, size_t> live_bytes;  // pointer -> rounded bytes
  PluggableDeviceStats stats;
};

class State {
 public:
  void* allocate(size_t size, int device, std::string& message);
  void deallocate(void* ptr, size_t size, int device, std::string& message);
  PluggableDeviceStats stats(int device);
  void reload_config();

 private:
  void load_config_locked();
  DeviceTable& table_locked(int device);  // creates the backend on first use; may throw

  std::mutex mutex_;
  bool config_loaded_ = false;
  std::string config_error_;  // non-empty: the configuration is unusable, refuse everything
  uint64_t budget_bytes_ = UINT64_MAX;
  std::map<int, DeviceTable> devices_;
};

// Nested messages (CudaError, ConfigError) start with "dtr: " already; report() adds it.
std::string without_dtr_prefix(const std::string& text) {
  return text.rfind("dtr: ", 0) == 0 ? text.substr(5) : text;
}

std::string pointer_text(const void* ptr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", ptr);
  return buf;
}

State& state() {
  static State* instance = new State();  // Note [Process-wide state]: never destroyed
  return *instance;
}

void State::load_config_locked() {
  config_loaded_ = true;
  config_error_.clear();
  budget_bytes_ = UINT64_MAX;
  try {
    Config config;
    config.apply_environment();
    switch (config.budget.kind) {
      case Budget::Kind::unlimited: break;
      case Budget::Kind::bytes: budget_bytes_ = config.budget.bytes; break;
      case Budget::Kind::ratio:
        config_error_ = "budget " + config.budget.to_string() +
                        " is a ratio of the baseline peak, which only the simulator knows; "
                        "give the CUDA budget in bytes (e.g. DTR_BUDGET=8G)";
        break;
    }
  } catch (const std::exception& e) {
    config_error_ = without_dtr_prefix(e.what());
  }
  for (auto& [device, table] : devices_) table.stats.budget_bytes = budget_bytes_;
}

DeviceTable& State::table_locked(int device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return it->second;
  DeviceTable table;
  table.backend = make_cuda_backend(device);  // throws CudaError for a bad device
  table.stats.budget_bytes = budget_bytes_;
  return devices_.emplace(device, std::move(table)).first->second;
}

void* State::allocate(size_t size, int device, std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!config_loaded_) load_config_locked();
  if (!config_error_.empty()) {
    message = "dtr_malloc: refusing every CUDA allocation, the dtr configuration is invalid: " +
              config_error_;
    if (auto it = devices_.find(device); it != devices_.end()) ++it->second.stats.num_ooms;
    return nullptr;
  }
  DeviceTable& table = table_locked(device);
  PluggableDeviceStats& stats = table.stats;
  const uint64_t align = kCudaSegmentAlignment;
  const uint64_t bytes = (static_cast<uint64_t>(size) + align - 1) / align * align;
  if (bytes < size || stats.allocated_bytes_current + bytes > budget_bytes_ ||
      stats.allocated_bytes_current + bytes < bytes) {
    ++stats.num_ooms;
    message = "dtr_malloc: CUDA device " + std::to_string(device) + " over budget: requested " +
              format_bytes(bytes) + " with " + format_bytes(stats.allocated_bytes_current) +
              " live of a " + format_bytes(budget_bytes_) +
              " budget; raise DTR_BUDGET or lower the batch size (no eviction yet: issue #3)";
    return nullptr;
  }
  // TODO(issue #3): route through CachingAllocator once it lands.
  void* ptr = table.backend->allocate_segment(static_cast<size_t>(bytes));
  if (ptr == nullptr) {
    ++stats.num_ooms;
    message = "dtr_malloc: CUDA device " + std::to_string(device) + " out of memory: cudaMalloc(" +
              format_bytes(bytes) + ") failed with " + format_bytes(stats.allocated_bytes_current) +
              " live through dtr";
    return nullptr;
  }
  table.live_bytes.emplace(ptr, static_cast<size_t>(bytes));
  stats.allocated_bytes_current += bytes;
  if (stats.allocated_bytes_current > stats.allocated_bytes_peak) {
    stats.allocated_bytes_peak = stats.allocated_bytes_current;
  }
  ++stats.allocation_current;
  return ptr;
}

void State::deallocate(void* ptr, size_t size, int device, std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto dev = devices_.find(device);
  if (dev != devices_.end()) {
    DeviceTable& table = dev->second;
    auto it = table.live_bytes.find(ptr);
    if (it != table.live_bytes.end()) {
      const size_t bytes = it->second;
      table.live_bytes.erase(it);
      table.stats.allocated_bytes_current -= bytes;
      --table.stats.allocation_current;
      // TODO(issue #3): route through CachingAllocator once it lands.
      table.backend->free_segment(ptr, bytes);  // may throw CudaError; the entry is gone anyway
      return;
    }
  }
  message = "dtr_free: pointer " + pointer_text(ptr) + " (" + std::to_string(size) +
            " bytes) was not allocated by dtr_malloc on CUDA device " + std::to_string(device) +
            "; ignored";
}

PluggableDeviceStats State::stats(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!config_loaded_) load_config_locked();
  auto it = devices_.find(device);
  if (it != devices_.end()) return it->second.stats;
  PluggableDeviceStats empty;
  empty.budget_bytes = budget_bytes_;
  return empty;
}

void State::reload_config() {
  std::lock_guard<std::mutex> lock(mutex_);
  load_config_locked();
}

void report(const std::string& message) {
  if (!message.empty()) std::fprintf(stderr, "dtr: %s\n", message.c_str());
}

}  // namespace

PluggableDeviceStats pluggable_device_stats(int device) { return state().stats(device); }

void pluggable_reload_config() { state().reload_config(); }

}  // namespace dtr

extern "C" void* dtr_malloc(size_t size, int device, cudaStream_t stream) {
  if (size == 0) return nullptr;  // Note [Null from dtr_malloc]
  std::string message;
  void* ptr = nullptr;
  try {
    ptr = dtr::state().allocate(size, device, message);
  } catch (const std::exception& e) {
    message = "dtr_malloc: " + dtr::without_dtr_prefix(e.what());
    ptr = nullptr;
  }
  dtr::report(message);
  return ptr;
}

extern "C" void dtr_free(void* ptr, size_t size, int device, cudaStream_t stream) {
  if (ptr == nullptr) return;
  std::string message;
  try {
    dtr::state().deallocate(ptr, size, device, message);
  } catch (const std::exception& e) {
    message = "dtr_free: " + dtr::without_dtr_prefix(e.what());
  }
  dtr::report(message);
}
