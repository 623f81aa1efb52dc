// test_pluggable_table.cpp: PluggableTable (the caching behind dtr_malloc) over a fake
// device, so the per-stream caches, the budget across streams, the release of other
// streams' caches and the counters are tested on machines without a GPU. The same paths
// over real CUDA memory are in test_cuda_backend.cpp, which needs a GPU.
#include <catch2/catch.hpp>

#include "test_support.h"

#ifdef DTR_HAVE_CUDA

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtr/allocator/caching_allocator.h"
#include "integration/cuda/pluggable_table.h"

namespace {

using dtr::test::EnvGuard;

// One fake device's memory: a capacity shared by every backend made for it. Only called
// under the table's lock, like every backend.
struct FakeDevice {
  uint64_t capacity = UINT64_MAX;
  uint64_t live = 0;
  uint64_t next = uint64_t{1} << 40;  // never dereferenced
};

class FakeDeviceBackend final : public dtr::Backend {
 public:
  explicit FakeDeviceBackend(FakeDevice* device) : device_(device) {}
  const char* name() const override { return "fake-device"; }
  int device() const override { return 0; }
  size_t alignment() const override { return 512; }
  void* allocate_segment(size_t bytes) override {
    if (bytes > device_->capacity - device_->live) return nullptr;
    device_->live += bytes;
    const uint64_t ptr = device_->next;
    device_->next += (bytes + 4095) / 4096 * 4096;
    return reinterpret_cast<void*>(ptr);
  }
  void free_segment(void*, size_t bytes) override { device_->live -= bytes; }
  bool memory_is_real() const override { return false; }

 private:
  FakeDevice* device_;
};

// A table over one fake device 0 (any other device index does not exist).
struct FakeTable {
  FakeDevice device;
  dtr::PluggableTable table{[this](int index) -> std::unique_ptr<dtr::Backend> {
    if (index != 0)
      throw std::runtime_error("dtr: fake device " + std::to_string(index) + " does not exist");
    return std::make_unique<FakeDeviceBackend>(&device);
  }};
};

cudaStream_t stream(uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

void* must_allocate(dtr::PluggableTable& table, size_t bytes, cudaStream_t on) {
  std::string message;
  void* ptr = table.allocate(bytes, 0, on, message);
  INFO(message);
  REQUIRE(ptr != nullptr);
  CHECK(message.empty());
  return ptr;
}

void release(dtr::PluggableTable& table, void* ptr, size_t bytes) {
  std::string message;
  table.deallocate(ptr, bytes, 0, message);
  CHECK(message.empty());
}

}  // namespace

TEST_CASE("pluggable table: a freed block is reused on its own stream only", "[pluggable]") {
  EnvGuard budget("DTR_BUDGET", "0");
  FakeTable fake;
  auto& table = fake.table;
  void* first = must_allocate(table, 3 << 20, stream(1));
  CHECK(table.stats(0).allocated_bytes_current == (3u << 20));
  CHECK(table.stats(0).reserved_bytes_current == dtr::kLargeBuffer);  // a 20 MiB segment
  release(table, first, 3 << 20);
  CHECK(table.stats(0).reserved_bytes_current == dtr::kLargeBuffer);  // cached, not freed
  CHECK(must_allocate(table, 3 << 20, stream(1)) == first);           // same stream: reused
  CHECK(table.stats(0).num_device_alloc == 1);
  void* other = must_allocate(table, 3 << 20, stream(2));  // another stream: a new segment
  CHECK(other != first);
  const auto stats = table.stats(0);
  CHECK(stats.num_device_alloc == 2);
  CHECK(stats.streams == 2);
  CHECK(stats.allocation_current == 2);
  release(table, first, 3 << 20);
  release(table, other, 3 << 20);
  CHECK(table.empty_cache(0) == 2 * dtr::kLargeBuffer);
  CHECK(table.stats(0).reserved_bytes_current == 0);
  CHECK(fake.device.live == 0);
}

TEST_CASE("pluggable table: a device short of memory takes other streams' caches back",
          "[pluggable]") {
  EnvGuard budget("DTR_BUDGET", "0");
  FakeTable fake;
  fake.device.capacity = 100 << 20;
  auto& table = fake.table;
  void* a = must_allocate(table, 60 << 20, stream(1));
  release(table, a, 60 << 20);  // 60 MiB cached for stream 1
  void* b = must_allocate(table, 60 << 20, stream(2));
  auto stats = table.stats(0);
  CHECK(stats.cache_releases == 1);
  CHECK(stats.num_device_free == 1);
  CHECK(stats.num_ooms == 0);
  CHECK(stats.reserved_bytes_current == (60u << 20));
  // Nothing cached elsewhere now: the device is simply full.
  std::string message;
  CHECK(table.allocate(60 << 20, 0, stream(3), message) == nullptr);
  CHECK_THAT(message, Catch::Contains("out of memory") && Catch::Contains("60.00 MiB live"));
  CHECK(table.stats(0).num_ooms == 1);
  release(table, b, 60 << 20);
}

TEST_CASE("pluggable table: the budget counts live bytes over every stream", "[pluggable]") {
  EnvGuard budget("DTR_BUDGET", "4M");
  FakeTable fake;
  auto& table = fake.table;
  void* a = must_allocate(table, 3 << 20, stream(1));
  std::string message;
  CHECK(table.allocate(2 << 20, 0, stream(2), message) == nullptr);
  CHECK_THAT(message, Catch::Contains("over budget") && Catch::Contains("DTR_BUDGET") &&
                          Catch::Contains("3.00 MiB live of a 4.00 MiB budget"));
  release(table, a, 3 << 20);
  // Cached bytes do not count: the 20 MiB segment stream 1 keeps is not live.
  void* b = must_allocate(table, 4 << 20, stream(2));
  const auto stats = table.stats(0);
  CHECK(stats.allocated_bytes_current == (4u << 20));
  CHECK(stats.reserved_bytes_current == 2 * dtr::kLargeBuffer);
  CHECK(stats.num_ooms == 1);
  CHECK(stats.budget_bytes == (4u << 20));
  release(table, b, 4 << 20);
}

TEST_CASE("pluggable table: device stats are device-wide where a sum would be wrong",
          "[pluggable]") {
  EnvGuard budget("DTR_BUDGET", "0");
  FakeTable fake;
  auto& table = fake.table;
  void* a = must_allocate(table, 3 << 20, stream(1));
  release(table, a, 3 << 20);
  void* b = must_allocate(table, 3 << 20, stream(2));
  // Each stream's allocator peaked at 3 MiB; the device never held more than 3 MiB.
  auto json = nlohmann::json::parse(table.stats_json(0));
  CHECK(json.at("allocated_bytes.all.peak") == (3u << 20));
  CHECK(json.at("allocated_bytes.large_pool.peak") == (6u << 20));  // a sum: Note [Device stats]
  CHECK(json.at("allocated_bytes.all.current") == (3u << 20));
  CHECK(json.at("reserved_bytes.all.current") == 2 * dtr::kLargeBuffer);
  CHECK(json.at("reserved_bytes.all.peak") == 2 * dtr::kLargeBuffer);
  CHECK(json.at("segment.all.current") == 2);
  CHECK(json.at("allocation.all.current") == 1);
  CHECK(json.at("dtr.streams") == 2);
  CHECK(json.at("dtr.budget_bytes") == nullptr);
  CHECK(json.at("dtr.largest_free_block_bytes") == dtr::kLargeBuffer);  // the largest, not a sum
  CHECK(json.at("max_split_size") == -1);  // neither: summed, it read 2^64 - 3 over two streams
  CHECK(json.at("active.all.current") == 1);
  release(table, b, 3 << 20);
  table.empty_cache(0);
  table.reset_peaks(0);
  json = nlohmann::json::parse(table.stats_json(0));
  CHECK(json.at("allocated_bytes.all.peak") == 0);
  CHECK(json.at("reserved_bytes.all.peak") == 0);
  CHECK(json.at("allocated_bytes.large_pool.peak") == 0);
}

TEST_CASE("pluggable table: bad requests and bad configurations say why", "[pluggable]") {
  FakeTable fake;
  auto& table = fake.table;
  std::string message;
  {
    EnvGuard conf("DTR_CONF", "budget:8G,bogus:1");
    table.reload_config();
    CHECK(table.allocate(512, 0, stream(1), message) == nullptr);
    CHECK_THAT(message, Catch::Contains("configuration is invalid") && Catch::Contains("bogus"));
  }
  {
    EnvGuard ratio("DTR_BUDGET", "0.5");
    table.reload_config();
    CHECK(table.allocate(512, 0, stream(1), message) == nullptr);
    CHECK_THAT(message, Catch::Contains("ratio") && Catch::Contains("DTR_BUDGET=8G"));
  }
  EnvGuard budget("DTR_BUDGET", "0");
  table.reload_config();
  message.clear();
  CHECK_THROWS_WITH(table.allocate(512, 3, stream(1), message),
                    Catch::Contains("fake device 3 does not exist"));
  int not_ours = 0;
  table.deallocate(&not_ours, 4, 0, message);
  CHECK_THAT(message, Catch::Contains("was not allocated by dtr_malloc"));
}

TEST_CASE("pluggable table: allocator threads on several streams", "[pluggable]") {
  EnvGuard budget("DTR_BUDGET", "0");
  FakeTable fake;
  fake.device.capacity = 256 << 20;
  auto& table = fake.table;
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &table, &failures] {
      // Threads 0 and 1 share stream 1; 2 and 3 have streams of their own.
      const cudaStream_t on = stream(t < 2 ? 1 : static_cast<uintptr_t>(t));
      std::vector<std::pair<void*, size_t>> held;
      uint32_t x = 12345u + static_cast<uint32_t>(t);
      std::string message;
      for (int i = 0; i < 5000; ++i) {
        x = x * 1664525u + 1013904223u;
        if (held.size() < 16 && (x >> 28) < 10) {
          const size_t bytes = 1 + (x >> 8) % (3 << 20);
          void* ptr = table.allocate(bytes, 0, on, message);
          if (ptr == nullptr) ++failures[t];
          held.emplace_back(ptr, bytes);
        } else if (!held.empty()) {
          table.deallocate(held.back().first, held.back().second, 0, message);
          held.pop_back();
        }
      }
      for (auto& [ptr, bytes] : held) table.deallocate(ptr, bytes, 0, message);
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures == std::vector<int>(4, 0));
  const auto stats = table.stats(0);
  CHECK(stats.allocated_bytes_current == 0);
  CHECK(stats.allocation_current == 0);
  CHECK(stats.streams == 3);
  CHECK(stats.reserved_bytes_current == fake.device.live);
}

#else  // !DTR_HAVE_CUDA

TEST_CASE("pluggable table", "[pluggable]") {
  WARN("CUDA library not built (DTR_WITH_CUDA=OFF or no toolkit): the table is not tested");
}

#endif  // DTR_HAVE_CUDA
