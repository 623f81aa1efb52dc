// test_allocator_oom.cpp: the budget and the out-of-memory chain, step by step
// (Note [Out-of-memory chain]), and the lock being released around the eviction callback.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <thread>

#include "allocator_helpers.h"
#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"
#include "dtr/core/status.h"

using namespace dtr;
using namespace dtr::test;

namespace {

AllocatorConfig budget_config(uint64_t budget_bytes) {
  AllocatorConfig config;
  config.budget_bytes = budget_bytes;
  config.debug = 3;
  return config;
}

}  // namespace

TEST_CASE("allocator oom chain: cached block first, eviction only when needed", "[allocator]") {
  Evictor evictor;
  CachingAllocator allocator(budget_config(8 * kMiB), std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    AllocResult r = allocator.allocate(2 * kMiB);
    REQUIRE(r.ok());
    blocks.push_back(r.ptr);
  }
  CHECK(evictor.calls().empty());  // within the budget: the callback is never asked
  CHECK(allocator.stats().allocated_bytes.all.current == 8 * kMiB);

  // (a) a cached free block fits and keeps allocated <= budget: no eviction, no new segment.
  allocator.free(blocks[1]);
  AllocResult again = allocator.allocate(2 * kMiB);
  REQUIRE(again.ok());
  CHECK(again.ptr == blocks[1]);  // best fit: the 2 MiB hole, not the 12 MiB tail
  blocks[1] = again.ptr;
  CHECK(evictor.calls().empty());
  CHECK(allocator.stats().num_device_alloc == 1);

  // (b) at the budget: the callback is asked for exactly the missing bytes, then a retry.
  evictor.add(blocks[0], 2 * kMiB);
  evictor.add(blocks[2], 2 * kMiB);
  AllocResult over = allocator.allocate(2 * kMiB);
  REQUIRE(over.ok());
  REQUIRE(evictor.calls().size() == 1);
  CHECK(evictor.calls()[0].bytes_needed == 2 * kMiB);
  CHECK_FALSE(evictor.calls()[0].contiguous);
  CHECK(evictor.registered() == 1);  // only blocks[0] was evicted
  CHECK(over.ptr == blocks[0]);      // and its hole reused
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_eviction_calls == 1);
  CHECK(s.num_ooms == 0);
  CHECK(s.allocated_bytes.all.current <= 8 * kMiB);
  CHECK(s.allocated_bytes.all.peak <= 8 * kMiB);
}

TEST_CASE("allocator oom chain: a contiguity shortfall releases the cache before evicting",
          "[allocator]") {
  // The fake device holds 24 MiB (or the reserved limit is 24 MiB): a cached 20 MiB
  // segment must go back before a 22 MiB one fits. The budget is fine, so giving back a
  // fully free segment is enough and nothing is evicted (Note [Out-of-memory chain]).
  const bool use_reserved_limit = GENERATE(false, true);
  INFO((use_reserved_limit ? "reserved limit" : "backend capacity"));
  AllocatorConfig config;
  config.debug = 3;
  uint64_t capacity = UINT64_MAX;
  if (use_reserved_limit)
    config.reserved_limit_bytes = 24 * kMiB;
  else
    capacity = 24 * kMiB;
  Evictor evictor;  // has nothing to evict
  CachingAllocator allocator(config, std::make_unique<FakeBackend>(capacity), &evictor);
  evictor.attach(&allocator);

  allocator.free(allocator.allocate(2 * kMiB).ptr);  // leaves a cached 20 MiB segment
  REQUIRE(allocator.stats().reserved_bytes.all.current == 20 * kMiB);
  AllocResult r = allocator.allocate(22 * kMiB);
  REQUIRE(r.ok());
  CHECK(evictor.calls().empty());
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_device_free == 1);
  CHECK(s.num_cache_releases == 1);
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_eviction_calls == 0);
  CHECK(s.num_ooms == 0);
  CHECK(s.reserved_bytes.all.current == 22 * kMiB);
  allocator.free(r.ptr);

  // With a live block in the way nothing can be released: the callback is asked for a
  // contiguous range, and (having nothing) the request ends in an AllocatorOom.
  void* live = allocator.allocate(2 * kMiB).ptr;
  REQUIRE(live != nullptr);
  AllocResult big = allocator.allocate(23 * kMiB);
  CHECK_FALSE(big.ok());
  const std::vector<EvictorCall> calls = evictor.calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].contiguous);
  CHECK(calls[0].bytes_needed == 23 * kMiB);
  allocator.free(live);
}

TEST_CASE("allocator oom chain: typed error exactly when nothing can be evicted", "[allocator]") {
  Evictor evictor;
  CachingAllocator allocator(budget_config(10 * kMiB), std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  // Every other 1 MiB block is evictable; the rest are pinned. Allocation keeps succeeding
  // (by evicting) until the pinned blocks alone fill the budget.
  uint64_t pinned = 0;
  int successes = 0;
  AllocResult failed;
  for (int i = 0; i < 100; ++i) {
    const uint64_t evictable_before = evictor.evictable_bytes();
    AllocResult r = allocator.allocate(kMiB);
    if (!r.ok()) {
      failed = r;
      // The failure comes only when the evictor had nothing left to give.
      CHECK(evictable_before == 0);
      break;
    }
    ++successes;
    if (i % 2 == 0) {
      evictor.add(r.ptr, kMiB);
    } else {
      pinned += kMiB;
      evictor.pinned_bytes_value = pinned;
    }
    REQUIRE(allocator.stats().allocated_bytes.all.current <= 10 * kMiB);
  }
  REQUIRE_FALSE(failed.ok());
  CHECK(pinned == 10 * kMiB);
  CHECK(successes == 20);  // 10 pinned + 10 evictable ones, all evicted along the way
  const AllocatorOom& oom = failed.oom;
  CHECK(oom.requested_bytes == kMiB);
  CHECK(oom.budget_bytes == 10 * kMiB);
  CHECK(oom.allocated_bytes == 10 * kMiB);
  CHECK(oom.pinned_bytes == 10 * kMiB);
  CHECK(oom.evictable_bytes == 0);
  CHECK(oom.reserved_bytes == allocator.stats().reserved_bytes.all.current);
  CHECK(oom.largest_free_block_bytes == allocator.largest_free_block());
  const std::string message = oom.message();
  CHECK(message.find("10.00 MiB") != std::string::npos);
  CHECK(message.find("pinned") != std::string::npos);
  CHECK(message.find("Try") != std::string::npos);
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_ooms == 1);
  // The failing request asked once more, got nothing, and gave up (no release: budget).
  CHECK(evictor.calls().back().bytes_needed == kMiB);
  CHECK(s.num_cache_releases == 0);
}

// Note [Out-of-memory breakdown]: the message splits allocated bytes into pinned, in use,
// evictable and untracked (what the callback does not account for).
TEST_CASE("allocator oom: the message accounts for every allocated byte", "[allocator]") {
  Evictor evictor;
  CachingAllocator allocator(budget_config(10 * kMiB), std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  std::vector<void*> held;
  for (int i = 0; i < 8; ++i) held.push_back(allocator.allocate(kMiB).ptr);
  // 8 MiB allocated: 3 pinned, 2 of which a running op holds; 5 the evictor never hears of.
  evictor.pinned_bytes_value = 3 * kMiB;
  evictor.in_use_bytes_value = 2 * kMiB;
  AllocResult r = allocator.allocate(4 * kMiB);
  REQUIRE_FALSE(r.ok());
  CHECK(r.oom.has_callback);
  CHECK(r.oom.in_use_bytes == 2 * kMiB);
  CHECK(r.oom.untracked_bytes() == 5 * kMiB);
  const std::string message = r.oom.message();
  CHECK(message.find("pinned 1.00 MiB, in use by the running op 2.00 MiB, evictable 0 B, "
                     "untracked 5.00 MiB") != std::string::npos);
  CHECK(message.find("workspace") != std::string::npos);

  // Block rounding is not worth a word: under 1 MiB untracked, the message names none.
  evictor.pinned_bytes_value = 8 * kMiB - 4096;
  evictor.in_use_bytes_value = 0;
  AllocResult rounded = allocator.allocate(4 * kMiB);
  REQUIRE_FALSE(rounded.ok());
  CHECK(rounded.oom.untracked_bytes() == 4096);
  CHECK(rounded.oom.message().find("untracked") == std::string::npos);

  // The owner's advice (the PyTorch host's on min_evictable) closes the list of things to try.
  CHECK(rounded.oom.message().find("set x:1") == std::string::npos);
  evictor.oom_advice_value = "set x:1 (why)";
  AllocResult advised = allocator.allocate(4 * kMiB);
  REQUIRE_FALSE(advised.ok());
  CHECK(advised.oom.owner_advice == "set x:1 (why)");
  const std::string advice = advised.oom.message();
  const std::string tail = ", or set x:1 (why).";
  REQUIRE(advice.size() > tail.size());
  CHECK(advice.compare(advice.size() - tail.size(), tail.size(), tail) == 0);

  // The owner's context (the PyTorch host's remat in progress) follows the figures, before
  // what to try.
  CHECK(advice.find("It came from") == std::string::npos);
  evictor.oom_context_value = "It came from op X.";
  const std::string placed = allocator.allocate(4 * kMiB).oom.message();
  const size_t context = placed.find("). It came from op X. Nothing more could be evicted");
  CHECK(context != std::string::npos);
  CHECK(context < placed.find("Try:"));
  for (void* p : held) allocator.free(p);
}

TEST_CASE("allocator oom: where the budget has room, the message names the reserved limit",
          "[allocator]") {
  // A 2 MiB block keeps a 20 MiB segment (PyTorch's sizes), and a small request needs a
  // 2 MiB segment of the small pool: 22 MiB would pass the 21 MiB limit. The budget has
  // room, and the largest free block (18 MiB) is large enough but in the other pool, so
  // the advice is the limit, not the budget (before, it said to raise the budget).
  Evictor evictor;
  AllocatorConfig config = budget_config(64 * kMiB);
  config.reserved_limit_bytes = 21 * kMiB;
  CachingAllocator allocator(config, std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  void* live = allocator.allocate(2 * kMiB).ptr;
  REQUIRE(live);
  AllocResult r = allocator.allocate(4096);
  REQUIRE_FALSE(r.ok());
  CHECK(r.oom.largest_free_block_bytes == 18 * kMiB);
  const std::string message = r.oom.message();
  CHECK(message.find("The budget has room for it; the reserved limit does not") !=
        std::string::npos);
  CHECK(message.find("Try: raise the reserved limit") != std::string::npos);
  CHECK(message.find("raise the budget") == std::string::npos);
  allocator.free(live);
}

TEST_CASE("allocator oom: a segment larger than the device is named, with the ways out",
          "[allocator]") {
  // Note [Segments larger than the device] in core/status.cpp: a 4 MiB request takes a
  // 20 MiB segment (PyTorch's sizes), which a device of 5 MiB never holds.
  Evictor evictor;
  AllocatorConfig config = budget_config(5 * kMiB);
  config.reserved_limit_bytes = 5 * kMiB;
  CachingAllocator allocator(config, std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  AllocResult r = allocator.allocate(4 * kMiB);
  REQUIRE_FALSE(r.ok());
  CHECK(r.oom.segment_bytes == 20 * kMiB);
  const std::string message = r.oom.message();
  CHECK(message.find("the fresh segment it takes, 20.00 MiB") != std::string::npos);
  CHECK(message.find("larger than the device's 5.00 MiB") != std::string::npos);
  CHECK(message.find("raise the budget") == std::string::npos);
  // The engine's status says the same (the simulator's replays).
  OomInfo info;
  info.requested_bytes = 4 * kMiB;
  info.budget_bytes = info.reserved_limit_bytes = 5 * kMiB;
  info.segment_bytes = r.oom.segment_bytes;
  const std::string status = Status::out_of_memory(info).message();
  CHECK(status.find("does not fit the device of 5.00 MiB") != std::string::npos);
  CHECK(status.find("at least 20.00 MiB") != std::string::npos);
  CHECK(status.find("Raise the budget above the pinned bytes") == std::string::npos);
  // Exact segments (a reserved limit of the host's own) take the request's size: it fits.
  config.exact_segments = true;
  CachingAllocator exact(config, std::make_unique<FakeBackend>(), &evictor);
  AllocResult fits = exact.allocate(4 * kMiB);
  REQUIRE(fits.ok());
  exact.free(fits.ptr);
  // A segment within the device says nothing of it.
  CHECK(segment_above_limit(4 * kMiB, 5 * kMiB).empty());
  CHECK(segment_above_limit(20 * kMiB, UINT64_MAX).empty());
}

TEST_CASE("allocator oom: requests that can never fit fail at once", "[allocator]") {
  Evictor evictor;
  CachingAllocator allocator(budget_config(4 * kMiB), std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  void* keep = allocator.allocate(kMiB).ptr;
  evictor.add(keep, kMiB);
  AllocResult r = allocator.allocate(5 * kMiB);
  REQUIRE_FALSE(r.ok());
  CHECK(evictor.calls().empty());  // nothing was evicted for a hopeless request
  CHECK(evictor.registered() == 1);
  CHECK(r.oom.requested_bytes == 5 * kMiB);
  CHECK(r.oom.evictable_bytes == kMiB);
  CHECK(r.oom.message().find("exceeds the budget") != std::string::npos);
  CHECK(allocator.stats().num_ooms == 1);

  // Without a callback the chain skips eviction; pinned/evictable read 0.
  CachingAllocator bare(budget_config(2 * kMiB), std::make_unique<FakeBackend>());
  void* a = bare.allocate(2 * kMiB).ptr;
  AllocResult none = bare.allocate(512);
  REQUIRE_FALSE(none.ok());
  CHECK(none.oom.pinned_bytes == 0);
  CHECK(none.oom.evictable_bytes == 0);
  CHECK_FALSE(none.oom.has_callback);
  CHECK(none.oom.untracked_bytes() == 0);  // nothing to account against
  CHECK(none.oom.message().find("untracked") == std::string::npos);
  CHECK(none.oom.allocated_bytes == 2 * kMiB);
  bare.free(a);
  CHECK(bare.allocate(512).ok());
}

namespace {

// A callback that uses the allocator's whole API from inside make_room: with the mutex
// held (it is not recursive) any of these calls would deadlock.
class ReentrantEvictor : public EvictionCallback {
 public:
  CachingAllocator* allocator = nullptr;
  void* victim = nullptr;
  bool saw_valid = false;
  uint64_t make_room(uint64_t, bool) override {
    std::string why;
    saw_valid = allocator->is_valid(&why);  // consistent when the callback runs
    (void)allocator->stats();
    (void)allocator->blocks_in_address_order();
    allocator->set_evictable(victim, false);
    AllocResult nested = allocator->allocate(0);  // may even allocate (fits: 512 B free)
    allocator->free(nested.ptr);
    allocator->free(victim);
    victim = nullptr;
    return 2 * kMiB;
  }
};

}  // namespace

TEST_CASE("allocator releases its lock around the eviction callback", "[allocator]") {
  ReentrantEvictor evictor;
  CachingAllocator allocator(budget_config(4 * kMiB + 512), std::make_unique<FakeBackend>(),
                             &evictor);
  evictor.allocator = &allocator;
  evictor.victim = allocator.allocate(2 * kMiB).ptr;
  void* other = allocator.allocate(2 * kMiB).ptr;

  // A watchdog turns a deadlock into a failure instead of a hung test run.
  std::mutex m;
  std::condition_variable done_cv;
  bool done = false;
  AllocResult r;
  std::thread worker([&] {
    r = allocator.allocate(2 * kMiB);
    std::lock_guard<std::mutex> lock(m);
    done = true;
    done_cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(m);
    if (!done_cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; })) {
      std::fprintf(stderr, "allocator deadlocked calling the eviction callback\n");
      std::_Exit(1);
    }
  }
  worker.join();
  REQUIRE(r.ok());
  CHECK(evictor.saw_valid);
  CHECK(evictor.victim == nullptr);
  CHECK(allocator.stats().num_alloc_retries == 1);
  allocator.free(r.ptr);
  allocator.free(other);
}
