// test_allocator_set_budget.cpp: CachingAllocator::set_budget raises and lowers the hard
// budget at run time, and refuses a budget below the bytes allocated now.
#include <catch2/catch.hpp>

#include "allocator_helpers.h"
#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"

using namespace dtr;
using namespace dtr::test;

TEST_CASE("set_budget changes the hard budget and refuses one below allocated", "[allocator]") {
  AllocatorConfig config;
  config.debug = 3;  // is_valid (budget invariant included) after every allocate and free
  config.budget_bytes = 4 * kMiB;
  CachingAllocator allocator(config, std::make_unique<FakeBackend>());

  AllocResult a = allocator.allocate(3 * kMiB);
  REQUIRE(a.ok());
  CHECK_FALSE(allocator.allocate(2 * kMiB).ok());  // 5 MiB > 4 MiB

  // Lower than what is allocated: refused, nothing changed.
  CHECK_FALSE(allocator.set_budget(2 * kMiB));
  CHECK(allocator.config().budget_bytes == 4 * kMiB);

  // Raised: the same request now fits, and the OOM message would name the new budget.
  REQUIRE(allocator.set_budget(6 * kMiB));
  CHECK(allocator.config().budget_bytes == 6 * kMiB);
  AllocResult b = allocator.allocate(2 * kMiB);
  REQUIRE(b.ok());
  AllocResult c = allocator.allocate(2 * kMiB);
  REQUIRE_FALSE(c.ok());
  CHECK(c.oom.budget_bytes == 6 * kMiB);
  CHECK(c.oom.message().find("6") != std::string::npos);

  // Lowered to exactly what is allocated: accepted; nothing more fits.
  allocator.free(b.ptr);
  REQUIRE(allocator.set_budget(3 * kMiB));
  CHECK_FALSE(allocator.allocate(512).ok());
  allocator.free(a.ptr);

  // Unlimited.
  REQUIRE(allocator.set_budget(kUnlimitedBytes));
  AllocResult d = allocator.allocate(64 * kMiB);
  REQUIRE(d.ok());
  allocator.free(d.ptr);
  std::string why;
  CHECK(allocator.is_valid(&why));
  CHECK(allocator.stats().num_ooms == 3);
}

TEST_CASE("lower_budget evicts down to the new budget, or refuses and changes nothing",
          "[allocator]") {
  AllocatorConfig config;
  config.debug = 3;
  config.budget_bytes = 16 * kMiB;
  CachingAllocator allocator(config, std::make_unique<FakeBackend>());
  Evictor evictor(&allocator);
  allocator.set_eviction_callback(&evictor);

  AllocResult kept = allocator.allocate(4 * kMiB);  // not registered: cannot be evicted
  REQUIRE(kept.ok());
  for (int i = 0; i < 3; ++i) {
    AllocResult r = allocator.allocate(3 * kMiB);
    REQUIRE(r.ok());
    evictor.add(r.ptr, 3 * kMiB);
  }
  REQUIRE(allocator.stats().allocated_bytes.all.current == 13 * kMiB);

  // 13 MiB allocated, 9 of them evictable: 8 MiB needs two evictions.
  REQUIRE(allocator.lower_budget(8 * kMiB));
  CHECK(allocator.config().budget_bytes == 8 * kMiB);
  CHECK(allocator.stats().allocated_bytes.all.current == 7 * kMiB);
  CHECK(evictor.registered() == 1);
  CHECK(evictor.calls().at(0).bytes_needed == 5 * kMiB);

  // Below the 4 MiB nothing can evict: refused, the budget as it was; what could be
  // evicted was.
  CHECK_FALSE(allocator.lower_budget(2 * kMiB));
  CHECK(allocator.config().budget_bytes == 8 * kMiB);
  CHECK(allocator.stats().allocated_bytes.all.current == 4 * kMiB);
  CHECK(evictor.registered() == 0);

  // Above what is allocated: no eviction asked, as set_budget.
  const size_t calls = evictor.calls().size();
  REQUIRE(allocator.lower_budget(5 * kMiB));
  CHECK(evictor.calls().size() == calls);
  CHECK_FALSE(allocator.allocate(2 * kMiB).ok());
  allocator.free(kept.ptr);
  std::string why;
  CHECK(allocator.is_valid(&why));
}
