// test_cuda_backend.cpp: the CUDA backend and the CUDAPluggableAllocator C ABI.
//
// Built with the CUDA library only when DTR_HAVE_CUDA is defined (tests/CMakeLists.txt,
// when the dtr_cuda target exists); otherwise one test WARNs that it was not built. With
// the library but no usable GPU, every test WARNs "no CUDA device: <reason>" and returns,
// so a GPU-less run shows the skip instead of passing silently.
#include <catch2/catch.hpp>

#include "test_support.h"

#ifdef DTR_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "integration/cuda/cuda_backend.h"
#include "integration/cuda/pluggable_allocator.h"

namespace {

using dtr::test::EnvGuard;

// True (after a WARN saying why) when there is no CUDA device to test on.
bool skip_without_gpu() {
  if (dtr::cuda_device_count() > 0) return false;
  WARN("no CUDA device: " << dtr::cuda_unavailable_reason());
  return true;
}

bool is_aligned(const void* ptr, size_t alignment) {
  return reinterpret_cast<uintptr_t>(ptr) % alignment == 0;
}

}  // namespace

TEST_CASE("cuda_device_count never throws and agrees with the reason", "[cuda]") {
  int count = -1;
  REQUIRE_NOTHROW(count = dtr::cuda_device_count());
  CHECK(count >= 0);
  CHECK(dtr::cuda_unavailable_reason().empty() == (count > 0));
  if (count == 0) WARN("no CUDA device: " << dtr::cuda_unavailable_reason());
}

TEST_CASE("CudaBackend describes itself", "[cuda]") {
  if (skip_without_gpu()) return;
  auto backend = dtr::make_cuda_backend(0);
  CHECK(std::string(backend->name()) == "cuda");
  CHECK(backend->device() == 0);
  CHECK(backend->alignment() == 512);
  CHECK(backend->memory_is_real());
  CHECK_FALSE(backend->serves_small());
  CHECK_THROWS_AS(dtr::make_cuda_backend(dtr::cuda_device_count()), dtr::CudaError);
  CHECK_THROWS_AS(dtr::make_cuda_backend(-1), dtr::CudaError);
}

TEST_CASE("CudaBackend segments are aligned, writable and readable", "[cuda]") {
  if (skip_without_gpu()) return;
  auto backend = dtr::make_cuda_backend(0);
  for (size_t bytes : {size_t{512}, size_t{4096}, size_t{2} << 20, size_t{20} << 20}) {
    CAPTURE(bytes);
    void* ptr = backend->allocate_segment(bytes);
    REQUIRE(ptr != nullptr);
    CHECK(is_aligned(ptr, backend->alignment()));
    REQUIRE(cudaMemset(ptr, 0xab, bytes) == cudaSuccess);
    std::vector<unsigned char> host(bytes, 0);
    REQUIRE(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host.front() == 0xab);
    CHECK(host[bytes / 2] == 0xab);
    CHECK(host.back() == 0xab);
    backend->free_segment(ptr, bytes);
  }
}

TEST_CASE("CudaBackend returns nullptr when the device is out of memory", "[cuda]") {
  if (skip_without_gpu()) return;
  auto backend = dtr::make_cuda_backend(0);
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  // Twice the device's memory, rounded to the alignment: cannot succeed.
  const size_t too_big = (total_bytes * 2 + 511) / 512 * 512;
  CHECK(backend->allocate_segment(too_big) == nullptr);
  CHECK(cudaGetLastError() == cudaSuccess);    // the backend cleared the error
  void* ptr = backend->allocate_segment(512);  // and the device still works
  CHECK(ptr != nullptr);
  backend->free_segment(ptr, 512);
}

TEST_CASE("CudaBackend restores the caller's current device", "[cuda]") {
  if (skip_without_gpu()) return;
  const int last = dtr::cuda_device_count() - 1;
  REQUIRE(cudaSetDevice(last) == cudaSuccess);
  auto backend = dtr::make_cuda_backend(0);
  void* ptr = backend->allocate_segment(512);
  REQUIRE(ptr != nullptr);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == last);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, ptr) == cudaSuccess);
  CHECK(attributes.device == 0);
  backend->free_segment(ptr, 512);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("dtr_malloc and dtr_free serve device memory", "[cuda]") {
  if (skip_without_gpu()) return;
  EnvGuard budget("DTR_BUDGET", "0");
  dtr::pluggable_reload_config();
  const auto before = dtr::pluggable_device_stats(0);
  CHECK(dtr_malloc(0, 0, nullptr) == nullptr);  // size 0: nullptr, not an error
  void* ptr = dtr_malloc(1000, 0, nullptr);
  REQUIRE(ptr != nullptr);
  CHECK(is_aligned(ptr, 512));
  auto during = dtr::pluggable_device_stats(0);
  CHECK(during.allocated_bytes_current == before.allocated_bytes_current + 1024);
  CHECK(during.allocation_current == before.allocation_current + 1);
  REQUIRE(cudaMemset(ptr, 0x5a, 1000) == cudaSuccess);
  unsigned char host[1000] = {};
  REQUIRE(cudaMemcpy(host, ptr, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[0] == 0x5a);
  CHECK(host[999] == 0x5a);
  dtr_free(ptr, 1000, 0, nullptr);
  auto after = dtr::pluggable_device_stats(0);
  CHECK(after.allocated_bytes_current == before.allocated_bytes_current);
  CHECK(after.allocation_current == before.allocation_current);
  dtr_free(nullptr, 0, 0, nullptr);  // a no-op
}

TEST_CASE("dtr_malloc refuses a request over DTR_BUDGET with nullptr", "[cuda]") {
  if (skip_without_gpu()) return;
  {
    EnvGuard budget("DTR_BUDGET", "1M");
    dtr::pluggable_reload_config();
    const auto before = dtr::pluggable_device_stats(0);
    REQUIRE(before.allocated_bytes_current == 0);
    CHECK(before.budget_bytes == (1u << 20));
    void* half = dtr_malloc(512 << 10, 0, nullptr);
    REQUIRE(half != nullptr);
    CHECK(dtr_malloc((512 << 10) + 1, 0, nullptr) == nullptr);  // 512 KiB + 512 B > 1 MiB
    void* rest = dtr_malloc(512 << 10, 0, nullptr);             // exactly fills the budget
    CHECK(rest != nullptr);
    CHECK(dtr_malloc(1, 0, nullptr) == nullptr);
    const auto full = dtr::pluggable_device_stats(0);
    CHECK(full.allocated_bytes_current <= full.budget_bytes);
    CHECK(full.num_ooms == before.num_ooms + 2);
    dtr_free(rest, 512 << 10, 0, nullptr);
    dtr_free(half, 512 << 10, 0, nullptr);
  }
  {
    EnvGuard budget("DTR_BUDGET", "0.5");  // a ratio cannot be resolved on a real device
    dtr::pluggable_reload_config();
    CHECK(dtr_malloc(512, 0, nullptr) == nullptr);
  }
  dtr::pluggable_reload_config();  // back to the caller's environment
}

// A CUDA stream for one test, destroyed after the device has finished with it.
class ScopedStream {
 public:
  ScopedStream() { REQUIRE(cudaStreamCreate(&stream_) == cudaSuccess); }
  ~ScopedStream() {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

TEST_CASE("dtr_malloc reuses a freed block on the same stream without cudaMalloc", "[cuda]") {
  if (skip_without_gpu()) return;
  EnvGuard budget("DTR_BUDGET", "0");
  dtr::pluggable_reload_config();
  void* first = dtr_malloc(3 << 20, 0, nullptr);
  REQUIRE(first != nullptr);
  const auto held = dtr::pluggable_device_stats(0);
  CHECK(held.reserved_bytes_current >= held.allocated_bytes_current + (3u << 20));
  dtr_free(first, 3 << 20, 0, nullptr);
  const auto cached = dtr::pluggable_device_stats(0);
  CHECK(cached.allocated_bytes_current == held.allocated_bytes_current - (3u << 20));
  CHECK(cached.reserved_bytes_current == held.reserved_bytes_current);  // kept, not cudaFree'd
  void* again = dtr_malloc(3 << 20, 0, nullptr);
  CHECK(again == first);
  CHECK(dtr::pluggable_device_stats(0).num_device_alloc == held.num_device_alloc);
  dtr_free(again, 3 << 20, 0, nullptr);
}

TEST_CASE("a block freed on one stream is not handed to another", "[cuda]") {
  if (skip_without_gpu()) return;
  EnvGuard budget("DTR_BUDGET", "0");
  dtr::pluggable_reload_config();
  ScopedStream other;
  void* ours = dtr_malloc(12 << 20, 0, nullptr);
  REQUIRE(ours != nullptr);
  dtr_free(ours, 12 << 20, 0, nullptr);  // cached for the default stream
  const auto before = dtr::pluggable_device_stats(0);
  void* theirs = dtr_malloc(12 << 20, 0, other.get());
  REQUIRE(theirs != nullptr);
  CHECK(theirs != ours);  // Note [Streams]: a new segment, not the other stream's block
  const auto after = dtr::pluggable_device_stats(0);
  CHECK(after.num_device_alloc == before.num_device_alloc + 1);
  CHECK(after.streams >= 2);
  dtr_free(theirs, 12 << 20, 0, other.get());
  CHECK(dtr::pluggable_empty_cache(0) >= (24u << 20));  // both streams' cached segments
  CHECK(dtr::pluggable_device_stats(0).reserved_bytes_current ==
        dtr::pluggable_device_stats(0).allocated_bytes_current);
}

TEST_CASE("when the device runs short, other streams' caches are released", "[cuda]") {
  if (skip_without_gpu()) return;
  EnvGuard budget("DTR_BUDGET", "0");
  dtr::pluggable_reload_config();
  dtr::pluggable_empty_cache(0);
  ScopedStream first, second;
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  // Each request takes 60% of what is free: the two cannot be held at once.
  const size_t big = free_bytes / 10 * 6 / (2 << 20) * (2 << 20);
  void* a = dtr_malloc(big, 0, first.get());
  REQUIRE(a != nullptr);
  dtr_free(a, big, 0, first.get());  // cached for `first`
  const auto before = dtr::pluggable_device_stats(0);
  CHECK(before.reserved_bytes_current >= big);
  void* b = dtr_malloc(big, 0, second.get());
  CHECK(b != nullptr);
  const auto after = dtr::pluggable_device_stats(0);
  CHECK(after.cache_releases == before.cache_releases + 1);
  CHECK(after.num_device_free >= before.num_device_free + 1);
  CHECK(after.num_ooms == before.num_ooms);
  dtr_free(b, big, 0, second.get());
  dtr::pluggable_empty_cache(0);
}

TEST_CASE("dtr_malloc and dtr_free from several threads and streams", "[cuda]") {
  if (skip_without_gpu()) return;
  EnvGuard budget("DTR_BUDGET", "0");
  dtr::pluggable_reload_config();
  const auto before = dtr::pluggable_device_stats(0);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      cudaStream_t stream = nullptr;
      if (cudaStreamCreate(&stream) != cudaSuccess) {
        ++failures[t];
        return;
      }
      std::vector<std::pair<void*, size_t>> held;
      uint32_t x = 12345u + static_cast<uint32_t>(t);
      for (int i = 0; i < 2000; ++i) {
        x = x * 1664525u + 1013904223u;
        if (held.size() < 16 && (x >> 28) < 10) {
          const size_t bytes = 1 + (x >> 8) % (4 << 20);
          void* ptr = dtr_malloc(bytes, 0, stream);
          if (ptr == nullptr) ++failures[t];
          held.emplace_back(ptr, bytes);
        } else if (!held.empty()) {
          dtr_free(held.back().first, held.back().second, 0, stream);
          held.pop_back();
        }
      }
      for (auto& [ptr, bytes] : held) dtr_free(ptr, bytes, 0, stream);
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures == std::vector<int>(4, 0));
  const auto after = dtr::pluggable_device_stats(0);
  CHECK(after.allocated_bytes_current == before.allocated_bytes_current);
  CHECK(after.allocation_current == before.allocation_current);
  dtr::pluggable_empty_cache(0);
}

TEST_CASE("dtr_cuda_memory_stats_json gives PyTorch's keys and the budget", "[cuda]") {
  // Runs without a GPU too: a device that never allocated reports zeros.
  EnvGuard budget("DTR_BUDGET", "1M");
  dtr::pluggable_reload_config();
  const int device = dtr::cuda_device_count() > 0 ? 0 : 7;
  auto stats = nlohmann::json::parse(dtr_cuda_memory_stats_json(device));
  CHECK(stats.at("dtr.budget_bytes") == 1048576);
  for (const char* key :
       {"allocated_bytes.all.current", "allocated_bytes.large_pool.peak", "reserved_bytes.all.peak",
        "segment.small_pool.current", "num_alloc_retries", "num_ooms", "dtr.streams",
        "active.all.current", "inactive_split_bytes.large_pool.peak", "oversize_segments.peak"}) {
    CAPTURE(key);
    CHECK(stats.contains(key));
  }
  CHECK(stats.at("max_split_size") == -1);  // not summed over streams as a count is
  {
    EnvGuard unlimited("DTR_BUDGET", "0");
    dtr::pluggable_reload_config();
    CHECK(nlohmann::json::parse(dtr_cuda_memory_stats_json(device)).at("dtr.budget_bytes") ==
          nullptr);
  }
  dtr::pluggable_reload_config();
  if (skip_without_gpu()) return;
  EnvGuard unlimited("DTR_BUDGET", "0");
  dtr::pluggable_reload_config();
  dtr::pluggable_empty_cache(0);
  const auto before = nlohmann::json::parse(dtr_cuda_memory_stats_json(0));
  void* ptr = dtr_malloc(1000, 0, nullptr);
  REQUIRE(ptr != nullptr);
  stats = nlohmann::json::parse(dtr_cuda_memory_stats_json(0));
  const auto view = dtr::pluggable_device_stats(0);
  CHECK(stats.at("allocated_bytes.all.current") ==
        before.at("allocated_bytes.all.current").get<uint64_t>() + 1024);
  CHECK(stats.at("allocated_bytes.all.current") == view.allocated_bytes_current);
  CHECK(stats.at("reserved_bytes.all.current") == view.reserved_bytes_current);
  CHECK(stats.at("reserved_bytes.all.current").get<uint64_t>() >= (2u << 20));  // a small segment
  CHECK(stats.at("allocation.all.current") == view.allocation_current);
  dtr_free(ptr, 1000, 0, nullptr);
  dtr_cuda_reset_peak_stats(0);
  stats = nlohmann::json::parse(dtr_cuda_memory_stats_json(0));
  CHECK(stats.at("allocated_bytes.all.peak") == stats.at("allocated_bytes.all.current"));
  CHECK(stats.at("reserved_bytes.all.peak") == stats.at("reserved_bytes.all.current"));
  CHECK(dtr_cuda_empty_cache(0) >= (2u << 20));
  stats = nlohmann::json::parse(dtr_cuda_memory_stats_json(0));
  CHECK(stats.at("reserved_bytes.all.current") == stats.at("allocated_bytes.all.current"));
}

#else  // !DTR_HAVE_CUDA

TEST_CASE("CUDA backend", "[cuda]") {
  WARN("CUDA backend not built (DTR_WITH_CUDA=OFF or no toolkit)");
}

#endif  // DTR_HAVE_CUDA
