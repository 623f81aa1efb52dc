// bench_allocator.cpp: alloc+free throughput of the caching allocator against raw mimalloc
// and glibc malloc, on the tensor sizes of a DTR log.
//
// Sizes are the MEMORY values of the ResNet-32 log in DTR_LOG_DIR (a fixed synthetic mix
// of 64 B..1 MiB and 1..200 MiB sizes when the log is absent). Each benchmark keeps
// kLiveSlots allocations alive and, per iteration, frees the oldest and allocates the next
// size: one item = one allocate + one free, in a steady state. Memory is not touched, so
// only the allocators' own work is timed. ->Threads(2) runs two threads against the same
// allocator (the caching allocator's one mutex is then contended, as in a real process).
// The caching allocator runs over the host backend with no budget and debug 0.
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
#include "dtr/allocator/host_backend.h"
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

BENCHMARK(BM_AllocFreeCachingHost)
    ->ArgName("small_only")
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_AllocFreeMimalloc)
    ->ArgName("small_only")
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_AllocFreeGlibc)
    ->ArgName("small_only")
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

}  // namespace
