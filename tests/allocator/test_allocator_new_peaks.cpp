// test_allocator_new_peaks.cpp: EvictionCallback::before_new_peak (Note [New peaks] in
// allocator/caching_allocator.cpp). A host that holds blocks it knows to be dead frees them
// when asked, so neither allocated nor reserved bytes grow past what the program holds.
#include <catch2/catch.hpp>

#include <vector>

#include "allocator_helpers.h"
#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"

using namespace dtr;
using namespace dtr::test;

namespace {

// Holds "dead" blocks and frees them all when asked before a new peak; counts the asks.
class DeadHolder : public EvictionCallback {
 public:
  void attach(CachingAllocator* allocator) { allocator_ = allocator; }
  void hold(void* ptr) { dead_.push_back(ptr); }
  uint64_t make_room(uint64_t, bool) override { return 0; }
  uint64_t before_new_peak(uint64_t bytes_requested) override {
    requests.push_back(bytes_requested);
    const uint64_t before = allocator_->stats().allocated_bytes.all.current;
    for (void* ptr : dead_) allocator_->free(ptr);
    dead_.clear();
    return before - allocator_->stats().allocated_bytes.all.current;
  }
  std::vector<uint64_t> requests;

 private:
  CachingAllocator* allocator_ = nullptr;
  std::vector<void*> dead_;
};

AllocatorConfig checked_config() {
  AllocatorConfig config;
  config.debug = 3;
  return config;
}

// A fake device with no budget, and a host holding dead blocks.
struct Fixture {
  DeadHolder host;
  CachingAllocator allocator{checked_config(), std::make_unique<FakeBackend>(), &host};
  Fixture() { host.attach(&allocator); }
};

}  // namespace

TEST_CASE_METHOD(Fixture,
                 "allocator new peaks: dead blocks go before allocated bytes pass their peak",
                 "[allocator]") {
  // Growing from nothing: every request raises the peak, so each one asks first.
  AllocResult a = allocator.allocate(4 * kMiB);
  AllocResult b = allocator.allocate(4 * kMiB);
  AllocResult x = allocator.allocate(4 * kMiB);
  REQUIRE((a.ok() && b.ok() && x.ok()));
  CHECK(host.requests == std::vector<uint64_t>{4 * kMiB, 4 * kMiB, 4 * kMiB});
  allocator.free(x.ptr);
  CHECK(allocator.stats().allocated_bytes.all.peak == 12 * kMiB);

  // b dies but the host only knows later (it still holds it). Below the peak nothing is
  // asked: 8 + 2 MiB stays under 12 MiB.
  host.hold(b.ptr);
  AllocResult c = allocator.allocate(2 * kMiB);
  REQUIRE(c.ok());
  CHECK(host.requests.size() == 3);
  // Past the peak (10 + 4 > 12): the host frees b first, so the peak stays where it was.
  AllocResult d = allocator.allocate(4 * kMiB);
  REQUIRE(d.ok());
  CHECK(host.requests.size() == 4);
  const AllocatorStats s = allocator.stats();
  CHECK(s.allocated_bytes.all.current == 10 * kMiB);
  CHECK(s.allocated_bytes.all.peak == 12 * kMiB);  // 14 MiB had b been kept
  CHECK(s.num_new_peak_calls == 4);
  CHECK(s.num_eviction_calls == 0);  // no budget: make_room is never asked
  for (void* ptr : {a.ptr, c.ptr, d.ptr}) allocator.free(ptr);
}

TEST_CASE_METHOD(Fixture,
                 "allocator new peaks: dead blocks go before a segment raises reserved bytes",
                 "[allocator]") {
  // Three 6 MiB blocks share one 20 MiB segment; b has a 20 MiB segment of its own.
  AllocResult p1 = allocator.allocate(6 * kMiB);
  AllocResult p2 = allocator.allocate(6 * kMiB);
  AllocResult p3 = allocator.allocate(6 * kMiB);
  AllocResult b = allocator.allocate(20 * kMiB);
  REQUIRE((p1.ok() && p2.ok() && p3.ok() && b.ok()));
  CHECK(allocator.stats().reserved_bytes.all.current == 40 * kMiB);
  CHECK(allocator.stats().allocated_bytes.all.peak == 38 * kMiB);
  // Holes of 6 and 8 MiB around p2; b is dead, the host does not know yet.
  allocator.free(p1.ptr);
  allocator.free(p3.ptr);
  host.hold(b.ptr);
  const size_t asked = host.requests.size();
  // 10 MiB keeps allocated under its peak (26 + 10 <= 38) but fits no hole: it would take
  // a new segment. The host is asked first, and b's segment serves it.
  AllocResult c = allocator.allocate(10 * kMiB);
  REQUIRE(c.ok());
  CHECK(host.requests.size() == asked + 1);
  const AllocatorStats s = allocator.stats();
  CHECK(s.reserved_bytes.all.current == 40 * kMiB);  // 50 MiB had b been kept
  CHECK(s.reserved_bytes.all.peak == 40 * kMiB);
  CHECK(s.allocated_bytes.all.current == 16 * kMiB);
  CHECK(s.num_device_alloc == 2);
  for (void* ptr : {p2.ptr, c.ptr}) allocator.free(ptr);
}

TEST_CASE("allocator new peaks: a host that frees nothing still gets its allocation",
          "[allocator]") {
  Evictor evictor;  // make_room only; before_new_peak is the default (frees nothing)
  CachingAllocator allocator(checked_config(), std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  AllocResult a = allocator.allocate(4 * kMiB);
  REQUIRE(a.ok());
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_new_peak_calls == 1);
  CHECK(s.num_alloc_retries == 0);  // asking first is not a retry of the chain
  CHECK(s.allocated_bytes.all.peak == 4 * kMiB);
  allocator.free(a.ptr);
}
