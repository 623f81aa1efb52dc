// test_allocator_threads.cpp: several threads allocating, freeing and evicting each other's
// blocks through one allocator, then the invariant checker. Meant for TSan: `make
// test-tsan` runs the tests whose names start with "allocator threads".
//
// Ownership: a thread owns its pinned blocks; an evictable block is owned by the shared
// Evictor's registry. Whoever takes it out of the registry (its thread wanting to free it,
// or make_room from any thread's allocate) checks its pattern and frees it.
#include <catch2/catch.hpp>

#include <atomic>
#include <random>
#include <thread>

#include "allocator_helpers.h"
#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"
#include "dtr/allocator/host_backend.h"

using namespace dtr;
using namespace dtr::test;

namespace {

constexpr int kThreads = 4;

void run_threads(std::unique_ptr<Backend> backend, uint64_t budget_bytes, size_t max_large_bytes,
                 int ops_per_thread, uint32_t debug) {
  const bool real = backend->memory_is_real();
  AllocatorConfig config;
  config.budget_bytes = budget_bytes;
  config.debug = debug;
  Evictor evictor;
  CachingAllocator allocator(config, std::move(backend), &evictor);
  evictor.attach(&allocator);
  std::atomic<int> bad_patterns{0};
  std::atomic<int> ooms{0};
  evictor.before_free = [&](const Registered& victim) {
    if (real && !check_pattern(victim.ptr, victim.bytes, victim.tag)) ++bad_patterns;
  };

  auto worker = [&](int index) {
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(index));
    std::vector<Registered> mine;       // pinned blocks this thread owns
    std::vector<Registered> evictable;  // given to the evictor; may be gone already
    uint64_t next_tag = static_cast<uint64_t>(index) << 48;
    for (int op = 0; op < ops_per_thread; ++op) {
      const unsigned dice = rng() % 100;
      if (dice < 55 || (mine.empty() && evictable.empty())) {
        const size_t bytes = log_like_size(rng, max_large_bytes);
        const uint64_t tag = ++next_tag;
        AllocResult r = allocator.allocate(bytes, tag);
        if (!r.ok()) {
          ++ooms;  // other threads' pinned blocks fill the budget: give some back
          for (int k = 0; k < 2 && !mine.empty(); ++k) {
            if (real && !check_pattern(mine.back().ptr, mine.back().bytes, mine.back().tag))
              ++bad_patterns;
            allocator.free(mine.back().ptr);
            mine.pop_back();
          }
          continue;
        }
        if (real) write_pattern(r.ptr, bytes, tag);
        if (rng() % 3 != 0) {
          allocator.set_evictable(r.ptr, true);
          evictable.push_back({r.ptr, bytes, tag});
          evictor.add(r.ptr, bytes, tag);  // from here on the registry owns it
        } else {
          mine.push_back({r.ptr, bytes, tag});
        }
      } else if (dice < 80 && !evictable.empty()) {
        const size_t i = rng() % evictable.size();
        const Registered block = evictable[i];
        evictable[i] = evictable.back();
        evictable.pop_back();
        if (evictor.take(block.ptr, block.tag)) {  // still ours: check and free it
          if (real && !check_pattern(block.ptr, block.bytes, block.tag)) ++bad_patterns;
          allocator.free(block.ptr);
        }
      } else if (!mine.empty()) {
        const size_t i = rng() % mine.size();
        if (real && !check_pattern(mine[i].ptr, mine[i].bytes, mine[i].tag)) ++bad_patterns;
        allocator.free(mine[i].ptr);
        mine[i] = mine.back();
        mine.pop_back();
      } else {
        (void)allocator.blocks_in_address_order();
        (void)allocator.stats();
      }
    }
    for (const Registered& block : mine) allocator.free(block.ptr);
    for (const Registered& block : evictable)
      if (evictor.take(block.ptr, block.tag)) allocator.free(block.ptr);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();

  std::string why;
  const bool valid = allocator.is_valid(&why);
  INFO(why);
  REQUIRE(valid);
  CHECK(bad_patterns == 0);
  const AllocatorStats s = allocator.stats();
  CHECK(s.allocated_bytes.all.current == 0);
  CHECK(s.allocation.all.current == 0);
  CHECK(s.allocated_bytes.all.peak <= budget_bytes);
  CHECK(s.num_ooms == static_cast<uint64_t>(ooms.load()));
  CHECK(s.num_eviction_calls > 0);
  CHECK(evictor.registered() == 0);
}

}  // namespace

TEST_CASE("allocator threads: concurrent alloc, free and eviction on the fake backend",
          "[allocator][threads]") {
  run_threads(std::make_unique<FakeBackend>(), 256 * kMiB, 64 * kMiB, 1500, 3);
}

TEST_CASE("allocator threads: concurrent alloc, free and eviction on the host backend",
          "[allocator][threads]") {
  run_threads(std::make_unique<HostBackend>(), 96 * kMiB, 16 * kMiB, 1500, 1);
}
