// pluggable_table.cpp: PluggableTable, a CachingAllocator per (device, stream) under a
// budget per device (see pluggable_table.h).
//
// Invariant: per device, allocated_bytes_current == sum of the live table's bytes == sum of
// its allocators' allocated_bytes.all.current, and it never exceeds the budget (a budget
// lowered by reload_config() only refuses new requests); reserved_bytes_current == the
// bytes of the segments the device's allocators hold.
#include "integration/cuda/pluggable_table.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/options.h"
#include "dtr/core/status.h"

// Note [Streams]
// ~~~~~~~~~~~~~~
// A cached block must not go to work on another stream while kernels queued on its old
// stream may still touch it. PyTorch's caching allocator solves this by reusing a block
// only on the stream it was allocated on (cross-stream use needs recordStream). Here each
// (device, stream) pair gets its own CachingAllocator, created on the stream's first
// request: a freed block returns at once to its stream's cache and is reused only by later
// requests on that stream, which the stream orders after the block's earlier uses. So a
// single-stream program gets the same reuse as PyTorch's allocator, with no event or sync.
// dtr_free is told the stream the block was allocated on; the live table is what decides
// which allocator gets the block back, so a mismatched stream cannot misroute it.
// Memory cached by one stream is not seen by another: when a stream's allocator cannot get
// a segment from the device (cudaMalloc fails after it released its own cache), every
// other stream's cache on that device is released (cudaFree, which waits for the device,
// so no kernel still uses what it frees) and the request is tried once more.
// What this does not do: PyTorch 2.x's pluggable allocator ignores record_stream (its
// hook is not settable from Python), so a tensor used on a second stream without its own
// synchronisation is as unsafe here as with any pluggable allocator that reuses memory.
// A destroyed stream's allocator keeps its cache, and a later stream that gets the same
// handle reuses it. That is safe once the old stream's queued work has finished, which
// cudaStreamDestroy does not wait for: a program that destroys streams with work still
// queued should synchronise first. (PyTorch's own streams come from a pool and are never
// destroyed.)

// Note [Budget across streams]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The budget is per device, while the caching allocators are per stream, so none of them
// holds a budget of its own (each is unlimited) and the table checks the device's live bytes,
// each request rounded to kMinBlockSize exactly as the allocator rounds it, before asking
// one. Cached free memory does not count, as in the CPU runtime: the budget caps what the
// program holds (allocated_bytes), and the device itself caps what is reserved.

// Note [Device stats]
// ~~~~~~~~~~~~~~~~~~~
// Each stream's CachingAllocator keeps PyTorch-named counters of its own blocks and
// segments, and a device's counters (dtr_cuda_memory_stats_json) are their sum, with the
// exceptions that a sum would get wrong when several streams allocate, which the table
// tracks itself: allocated_bytes.all.peak (live bytes are counted here, for the budget),
// reserved_bytes.all.current and .peak (every segment passes through the table's
// SegmentCounter backend) and num_ooms (every refusal is made here, budget ones included).
// dtr.largest_free_block_bytes is the largest over the streams. The other peaks are sums
// of the streams' peaks: exact when one stream allocates, an upper bound otherwise.

namespace dtr {
namespace {

struct LiveBlock {
  CachingAllocator* allocator = nullptr;  // its stream's
  uint64_t bytes = 0;                     // rounded to kMinBlockSize
};

// The backend of every CachingAllocator of a device: the factory's backend (a CudaBackend
// behind the C ABI), its segments counted in the device's reserved bytes (Note [Device
// stats]). Only ever called with the table's mutex held (every allocator call is made
// under it) or from the table's destructor, so plain counters do.
class SegmentCounter final : public Backend {
 public:
  SegmentCounter(std::unique_ptr<Backend> inner, PluggableDeviceStats* stats)
      : inner_(std::move(inner)), stats_(stats) {}
  const char* name() const override { return inner_->name(); }
  int device() const override { return inner_->device(); }
  size_t alignment() const override { return inner_->alignment(); }
  void* allocate_segment(size_t bytes) override {
    void* ptr = inner_->allocate_segment(bytes);
    if (ptr != nullptr) {
      stats_->reserved_bytes_current += bytes;
      stats_->reserved_bytes_peak =
          std::max(stats_->reserved_bytes_peak, stats_->reserved_bytes_current);
    }
    return ptr;
  }
  void free_segment(void* ptr, size_t bytes) override {
    stats_->reserved_bytes_current -= bytes;  // the allocator forgets it even if cudaFree throws
    inner_->free_segment(ptr, bytes);
  }
  bool memory_is_real() const override { return inner_->memory_is_real(); }

 private:
  std::unique_ptr<Backend> inner_;
  PluggableDeviceStats* stats_;  // its DeviceTable's, which is on the heap and never moves
};

std::string pointer_text(const void* ptr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", ptr);
  return buf;
}

}  // namespace

struct PluggableTable::DeviceTable {
  // Declared first, so destroyed last: the allocators' destructors give their segments
  // back through SegmentCounter, which still counts them here.
  // The device-wide counters (Note [Device stats]); streams and budget_bytes stay unset
  // here: stats() derives them.
  PluggableDeviceStats stats;
  std::map<cudaStream_t, std::unique_ptr<CachingAllocator>> streams;  // Note [Streams]
  std::unordered_map<void*, LiveBlock> live;
};

std::string without_dtr_prefix(const std::string& text) {
  return text.rfind("dtr: ", 0) == 0 ? text.substr(5) : text;
}

PluggableTable::PluggableTable(BackendFactory make_backend)
    : make_backend_(std::move(make_backend)) {}

PluggableTable::~PluggableTable() = default;

void PluggableTable::load_config_locked() {
  config_loaded_ = true;
  config_error_.clear();
  budget_bytes_ = UINT64_MAX;
  try {
    Config config;
    config.apply_environment();
    debug_ = config.debug;
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
}

PluggableTable::DeviceTable& PluggableTable::table_locked(int device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return *it->second;
  (void)make_backend_(device);  // throws for a device that does not exist
  return *devices_.emplace(device, std::make_unique<DeviceTable>()).first->second;
}

CachingAllocator& PluggableTable::allocator_locked(DeviceTable& table, int device,
                                                   cudaStream_t stream) {
  auto it = table.streams.find(stream);
  if (it != table.streams.end()) return *it->second;
  AllocatorConfig config;  // unlimited: Note [Budget across streams]
  config.debug = debug_;
  auto allocator = std::make_unique<CachingAllocator>(
      config, std::make_unique<SegmentCounter>(make_backend_(device), &table.stats));
  return *table.streams.emplace(stream, std::move(allocator)).first->second;
}

void* PluggableTable::allocate(size_t size, int device, cudaStream_t stream, std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!config_loaded_) load_config_locked();
  if (!config_error_.empty()) {
    message = "dtr_malloc: refusing every CUDA allocation, the dtr configuration is invalid: " +
              config_error_;
    if (auto it = devices_.find(device); it != devices_.end()) ++it->second->stats.num_ooms;
    return nullptr;
  }
  DeviceTable& table = table_locked(device);
  PluggableDeviceStats& stats = table.stats;
  const uint64_t bytes = round_block_size(size);  // what the allocator will count
  if (bytes < size || stats.allocated_bytes_current + bytes > budget_bytes_ ||
      stats.allocated_bytes_current + bytes < bytes) {
    ++stats.num_ooms;
    message = "dtr_malloc: CUDA device " + std::to_string(device) + " over budget: requested " +
              format_bytes(bytes) + " with " + format_bytes(stats.allocated_bytes_current) +
              " live of a " + format_bytes(budget_bytes_) +
              " budget; raise DTR_BUDGET or lower the batch size (dtr does not evict CUDA "
              "tensors)";
    return nullptr;
  }
  CachingAllocator& allocator = allocator_locked(table, device, stream);
  AllocResult result = allocator.allocate(bytes);
  if (!result.ok()) {
    // The device is full. Note [Streams]: other streams' caches go back, then one retry.
    uint64_t released = 0;
    for (auto& [other, cache] : table.streams) {
      if (cache.get() != &allocator) released += cache->empty_cache();
    }
    if (released > 0) {
      stats.cache_releases += 1;
      result = allocator.allocate(bytes);
    }
  }
  if (!result.ok()) {
    ++stats.num_ooms;
    message = "dtr_malloc: CUDA device " + std::to_string(device) +
              " out of memory: no segment for " + format_bytes(bytes) + " with " +
              format_bytes(stats.allocated_bytes_current) + " live and " +
              format_bytes(stats.reserved_bytes_current - stats.allocated_bytes_current) +
              " cached through dtr; lower the batch size, or free memory held outside dtr";
    return nullptr;
  }
  table.live.emplace(result.ptr, LiveBlock{&allocator, bytes});
  stats.allocated_bytes_current += bytes;
  if (stats.allocated_bytes_current > stats.allocated_bytes_peak) {
    stats.allocated_bytes_peak = stats.allocated_bytes_current;
  }
  ++stats.allocation_current;
  return result.ptr;
}

void PluggableTable::deallocate(void* ptr, size_t size, int device, std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto dev = devices_.find(device);
  if (dev != devices_.end()) {
    DeviceTable& table = *dev->second;
    auto it = table.live.find(ptr);
    if (it != table.live.end()) {
      const LiveBlock block = it->second;
      table.live.erase(it);
      table.stats.allocated_bytes_current -= block.bytes;
      --table.stats.allocation_current;
      block.allocator->free(ptr);  // back to its stream's cache: Note [Streams]
      return;
    }
  }
  message = "dtr_free: pointer " + pointer_text(ptr) + " (" + std::to_string(size) +
            " bytes) was not allocated by dtr_malloc on CUDA device " + std::to_string(device) +
            "; ignored";
}

PluggableDeviceStats PluggableTable::stats(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!config_loaded_) load_config_locked();
  PluggableDeviceStats out;
  if (auto it = devices_.find(device); it != devices_.end()) {
    out = it->second->stats;
    out.streams = it->second->streams.size();
    for (const auto& [stream, allocator] : it->second->streams) {
      const AllocatorStats s = allocator->stats();
      out.num_device_alloc += s.num_device_alloc;
      out.num_device_free += s.num_device_free;
    }
  }
  out.budget_bytes = budget_bytes_;
  return out;
}

std::string PluggableTable::stats_json(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!config_loaded_) load_config_locked();
  nlohmann::ordered_json out = AllocatorStats().to_json();  // every key, at 0
  PluggableDeviceStats device_stats;
  uint64_t streams = 0;
  if (auto it = devices_.find(device); it != devices_.end()) {
    streams = it->second->streams.size();
    for (const auto& [stream, allocator] : it->second->streams) {
      const nlohmann::ordered_json streams_stats = allocator->stats().to_json();
      for (auto entry = streams_stats.begin(); entry != streams_stats.end(); ++entry) {
        if (!entry.value().is_number_unsigned()) continue;  // max_split_size: -1, not a sum
        const uint64_t mine = entry.value().get<uint64_t>();
        const uint64_t sum = out[entry.key()].get<uint64_t>();
        out[entry.key()] =
            entry.key() == "dtr.largest_free_block_bytes" ? std::max(sum, mine) : sum + mine;
      }
    }
    device_stats = it->second->stats;
  }
  // Note [Device stats]: what the table counts itself.
  out["allocated_bytes.all.peak"] = device_stats.allocated_bytes_peak;
  out["reserved_bytes.all.current"] = device_stats.reserved_bytes_current;
  out["reserved_bytes.all.peak"] = device_stats.reserved_bytes_peak;
  out["num_ooms"] = device_stats.num_ooms;
  out["dtr.budget_bytes"] = budget_bytes_ == UINT64_MAX ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(budget_bytes_);
  out["dtr.streams"] = streams;
  out["dtr.cache_releases"] = device_stats.cache_releases;
  return out.dump();
}

void PluggableTable::reset_peaks(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = devices_.find(device);
  if (it == devices_.end()) return;
  PluggableDeviceStats& stats = it->second->stats;
  stats.allocated_bytes_peak = stats.allocated_bytes_current;
  stats.reserved_bytes_peak = stats.reserved_bytes_current;
  for (auto& [stream, allocator] : it->second->streams) allocator->reset_peaks();
}

uint64_t PluggableTable::empty_cache(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = devices_.find(device);
  if (it == devices_.end()) return 0;
  uint64_t released = 0;
  for (auto& [stream, allocator] : it->second->streams) released += allocator->empty_cache();
  return released;
}

void PluggableTable::reload_config() {
  std::lock_guard<std::mutex> lock(mutex_);
  load_config_locked();
}

}  // namespace dtr
