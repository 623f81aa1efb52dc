// bench_allocator.cpp: alloc+free throughput of the caching allocator against raw mimalloc
// and glibc malloc, on the tensor sizes of a DTR log.
//
// Sizes are the MEMORY values of the ResNet-32 log in DTR_LOG_DIR (a fixed synthetic mix
// of 64 B..1 MiB and 1..200 MiB sizes when the log is absent). Each benchmark keeps
// kLiveSlots allocations alive and, per iteration, frees the oldest and allocates the next
// size: one item = one allocate + one free, in a steady state. Memory is not touched, so
// only the allocators' own work is timed. ->Threads(2) runs two threads against the same
// allocator (the caching allocator's one mutex is then contended, as in a real process).
// The caching allocator runs over the host backend with no budget and debug 0. Where the
// CUDA library is built, two more compare the path behind dtr_malloc (PluggableTable) with
// the caching allocator alone, both over fake segments.
// Note: the Debian libmimalloc.so exports malloc/free, so a program linking dtr_allocator
// gets mimalloc as its malloc; the glibc benchmark calls __libc_malloc/__libc_free to
// measure glibc itself. Each benchmark runs on every size (small_only:0) and on the
// sizes <= 1 MiB only (small_only:1).
#include <benchmark/benchmark.h>
#include <mimalloc.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"
#include "dtr/allocator/host_backend.h"
#ifdef DTR_HAVE_CUDA
#include "integration/cuda/pluggable_table.h"
#endif
#include "bench_support.h"

extern "C" void* __libc_malloc(size_t bytes);  // glibc exports these; see BM_AllocFreeGlibc
extern "C" void __libc_free(void* ptr);

namespace {

constexpr size_t kLiveSlots = 64;  // allocations alive at once, per thread

std::vector<size_t> load_sizes() {
  std::vector<size_t> sizes;
  const std::string path = dtr::bench::find_log("resnet32");
  if (!path.empty()) {
    std::ifstream in(path);
    std::string line;
    const std::string key = "\"MEMORY\":\"";
    while (std::getline(in, line)) {
      const size_t at = line.find(key);
      if (at == std::string::npos) continue;
      const size_t bytes = std::strtoull(line.c_str() + at + key.size(), nullptr, 10);
      if (bytes > 0) sizes.push_back(bytes);
    }
  }
  if (sizes.empty()) {  // synthetic: 2/3 small (64 B..1 MiB), 1/3 large (1..200 MiB)
    std::mt19937_64 rng(42);
    for (int i = 0; i < 1024; ++i) {
      const bool small = rng() % 3 != 0;
      sizes.push_back(small ? 64 + rng() % (1 << 20) : (1 << 20) + rng() % (200u << 20));
    }
  }
  return sizes;
}

// range(0) == 0: every size; 1: only the small ones (<= 1 MiB), where the caching layer
// adds its bookkeeping on top of mimalloc and segment caching cannot help.
const std::vector<size_t>& sizes(int64_t small_only) {
  static const std::vector<size_t> kAll = load_sizes();
  static const std::vector<size_t> kSmall = [] {
    std::vector<size_t> small;
    for (size_t bytes : kAll)
      if (bytes <= dtr::kSmallSize) small.push_back(bytes);
    return small;
  }();
  return small_only ? kSmall : kAll;
}

template <typename Alloc, typename Free>
void run(benchmark::State& state, Alloc alloc, Free release) {
  const std::vector<size_t>& all = sizes(state.range(0));
  std::vector<void*> live(kLiveSlots, nullptr);
  size_t i = static_cast<size_t>(state.thread_index()) * 7919;  // threads walk different sizes
  for (auto _ : state) {
    void*& slot = live[i % kLiveSlots];
    release(slot);
    // A const value: with GCC 12, DoNotOptimize on a non-const reference ("+m,r") lost
    // the stored pointer, so every free() saw nullptr.
    void* const got = alloc(all[i % all.size()]);
    benchmark::DoNotOptimize(got);
    slot = got;
    ++i;
  }
  for (void* p : live) release(p);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["sizes"] = static_cast<double>(all.size());
}

dtr::CachingAllocator& caching_allocator() {
  static dtr::CachingAllocator allocator(dtr::AllocatorConfig{},
                                         std::make_unique<dtr::HostBackend>());
  return allocator;
}

void BM_AllocFreeCachingHost(benchmark::State& state) {
  dtr::CachingAllocator& allocator = caching_allocator();
  const dtr::AllocatorStats before = allocator.stats();
  run(
      state, [&](size_t n) { return allocator.allocate(n).ptr; },
      [&](void* p) { allocator.free(p); });
  if (state.thread_index() == 0) {
    const dtr::AllocatorStats after = allocator.stats();
    state.counters["segment_allocs"] =
        static_cast<double>(after.num_device_alloc - before.num_device_alloc);
    state.counters["ooms"] = static_cast<double>(after.num_ooms - before.num_ooms);
    state.counters["reserved_MiB"] =
        static_cast<double>(after.reserved_bytes.all.current) / (1 << 20);
  }
}

void BM_AllocFreeMimalloc(benchmark::State& state) {
  run(
      state, [](size_t n) { return mi_malloc(n); }, [](void* p) { mi_free(p); });
}

// glibc's own entry points: linking libmimalloc.so makes plain malloc/free mimalloc's.
void BM_AllocFreeGlibc(benchmark::State& state) {
  run(
      state, [](size_t n) { return __libc_malloc(n); }, [](void* p) { __libc_free(p); });
}

// Every benchmark here: all sizes and the small ones, on one thread and on two.
void every_size_and_thread_count(benchmark::internal::Benchmark* b) {
  b->ArgName("small_only")->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();
}

BENCHMARK(BM_AllocFreeCachingHost)->Apply(every_size_and_thread_count);
BENCHMARK(BM_AllocFreeMimalloc)->Apply(every_size_and_thread_count);
BENCHMARK(BM_AllocFreeGlibc)->Apply(every_size_and_thread_count);

#ifdef DTR_HAVE_CUDA
// The path behind dtr_malloc / dtr_free without CUDA: a PluggableTable (table mutex, live
// map, budget and counters, then the stream's caching allocator, built without mimalloc:
// Note [No mimalloc in a dlopen'd library]) over fake segments. Each thread is its own
// stream. Against BM_AllocFreeCachingFake (the caching allocator alone, with mimalloc
// nodes, over the same fake segments), the difference is what the table adds per request.
void BM_AllocFreePluggableTable(benchmark::State& state) {
  static dtr::PluggableTable table(
      [](int) -> std::unique_ptr<dtr::Backend> { return std::make_unique<dtr::FakeBackend>(); });
  const auto on = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(state.thread_index()) + 1);
  std::string message;
  run(
      state, [&](size_t n) { return table.allocate(n, 0, on, message); },
      [&](void* p) {
        if (p != nullptr) table.deallocate(p, 0, 0, message);
      });
}

void BM_AllocFreeCachingFake(benchmark::State& state) {
  static dtr::CachingAllocator allocator(dtr::AllocatorConfig{},
                                         std::make_unique<dtr::FakeBackend>());
  run(
      state, [&](size_t n) { return allocator.allocate(n).ptr; },
      [&](void* p) { allocator.free(p); });
}

BENCHMARK(BM_AllocFreePluggableTable)->Apply(every_size_and_thread_count);
BENCHMARK(BM_AllocFreeCachingFake)->Apply(every_size_and_thread_count);
#endif  // DTR_HAVE_CUDA

}  // namespace
