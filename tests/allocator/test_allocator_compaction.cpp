// test_allocator_compaction.cpp: Note [Compaction]: under a reserved limit, live blocks
// that keep a segment are moved into free blocks of other segments, and the segment goes
// back, before anything is evicted.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "allocator_helpers.h"
#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"
#include "dtr/allocator/host_backend.h"

using namespace dtr;
using namespace dtr::test;

namespace {

struct Move {
  uint64_t owner;
  void* from;
  void* to;
};

// The owner's side: moves the blocks of the owners in `movable_owners`; when asked by the
// chain (EvictionCallback::compact) it calls CachingAllocator::compact, as the torch host
// does, and records every move. make_room has nothing to evict.
class Mover : public Evictor, public BlockMover {
 public:
  std::set<uint64_t> movable_owners;
  std::vector<Move> moves;
  int compact_calls = 0;

  uint64_t compact(uint64_t bytes_requested) override {
    ++compact_calls;
    return allocator->compact(bytes_requested, *this);
  }
  bool movable(uint64_t owner, void*) override { return movable_owners.count(owner) != 0; }
  void moved(uint64_t owner, void* from, void* to) override { moves.push_back({owner, from, to}); }

  CachingAllocator* allocator = nullptr;
};

AllocatorConfig limited(uint64_t reserved_limit) {
  AllocatorConfig config;
  config.reserved_limit_bytes = reserved_limit;
  config.exact_segments = true;  // as the torch host under its reserved limit
  config.use_backend_small_path = false;
  config.debug = 3;
  return config;
}

// X: a 16 MiB segment (made for a 16 MiB request `a`, freed) then given a 3 MiB block `c`
// (owner 3); Y: a 20 MiB segment (made for a 20 MiB request, freed: under a reserved limit
// each request gets a segment of its own size, Note [Segments under a reserved limit])
// with one 2 MiB block `b` (owner 2). 36 MiB reserved under a 64 MiB limit, nothing fully
// free.
void make_two_segments(CachingAllocator& allocator, void** a, void** b, void** c) {
  *a = allocator.allocate(16 * kMiB, 1).ptr;
  allocator.free(allocator.allocate(20 * kMiB, 9).ptr);  // Y, cached, fully free
  *b = allocator.allocate(2 * kMiB, 2).ptr;              // the only free block: Y's
  allocator.free(*a);                                    // X is cached, fully free
  *c = allocator.allocate(3 * kMiB, 3).ptr;              // best fit: X's 16, not Y's 18
}

struct TwoSegments {
  Mover mover;
  CachingAllocator allocator;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  explicit TwoSegments(std::unique_ptr<Backend> backend)
      : allocator(limited(64 * kMiB), std::move(backend), &mover) {
    mover.attach(&allocator);
    mover.allocator = &allocator;
    make_two_segments(allocator, &a, &b, &c);
  }
};

bool inside(void* ptr, void* segment, size_t size) {
  const auto p = reinterpret_cast<uintptr_t>(ptr), s = reinterpret_cast<uintptr_t>(segment);
  return p >= s && p < s + size;
}

}  // namespace

TEST_CASE("compaction moves a block that keeps a segment and gives the segment back",
          "[allocator][compaction]") {
  // Real memory, so the copy is seen. A 30 MiB request needs a fresh segment: 36 + 30 MiB
  // is over the limit. Y holds the fewest live bytes and its block fits in X's 13 free
  // MiB: it moves, Y goes back, and the request gets its segment, with nothing evicted.
  TwoSegments t(std::make_unique<HostBackend>());
  Mover& mover = t.mover;
  CachingAllocator& allocator = t.allocator;
  void *a = t.a, *b = t.b, *c = t.c;
  REQUIRE(b);
  REQUIRE(c == a);  // best fit: X's 16 MiB block, not Y's 18 MiB one
  std::memset(b, 0x5a, 2 * kMiB);
  static_cast<unsigned char*>(b)[12345] = 0x17;
  mover.movable_owners = {2, 3};
  const uint64_t b_number = allocator.allocation_number(b);
  REQUIRE(b_number > 0);
  const AllocatorStats before = allocator.stats();
  REQUIRE(before.reserved_bytes.all.current == 36 * kMiB);

  AllocResult d = allocator.allocate(30 * kMiB, 4);
  REQUIRE(d.ok());
  CHECK(mover.calls().empty());  // make_room was never asked
  CHECK(mover.compact_calls == 1);
  REQUIRE(mover.moves.size() == 1);
  const Move m = mover.moves[0];
  CHECK(m.owner == 2);
  CHECK(m.from == b);
  CHECK(inside(m.to, a, 16 * kMiB));  // into X's free tail
  const unsigned char* moved = static_cast<const unsigned char*>(m.to);
  CHECK(moved[0] == 0x5a);
  CHECK(moved[12345] == 0x17);
  CHECK(moved[2 * kMiB - 1] == 0x5a);
  CHECK(allocator.allocation_number(m.to) == b_number);  // the block keeps its number
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_block_moves == 1);
  CHECK(s.moved_bytes == 2 * kMiB);
  CHECK(s.num_device_free == 1);                     // Y
  CHECK(s.reserved_bytes.all.current == 46 * kMiB);  // X and the new 30 MiB segment
  CHECK(s.allocated_bytes.all.current == before.allocated_bytes.all.current + 30 * kMiB);
  // Never counted twice: the peak is still the set-up's (16 + 20 MiB), not current + 2 MiB.
  CHECK(s.allocated_bytes.all.peak ==
        std::max(before.allocated_bytes.all.peak, s.allocated_bytes.all.current));
  CHECK(s.num_ooms == 0);
  CHECK(allocator.is_valid());
  allocator.free(m.to);  // the block lives at its new address now
  allocator.free(c);
  allocator.free(d.ptr);
  CHECK(allocator.stats().allocated_bytes.all.current == 0);
}

TEST_CASE("compaction moves nothing when the segments it may empty are not enough",
          "[allocator][compaction]") {
  // The same layout on the fake device; the request is 46 MiB, so 18 MiB must go back.
  // Only X's block may move (Y's owner says no), and X is 16 MiB: nothing is moved, the
  // chain goes on to make_room, which has nothing, and the request fails.
  const bool x_movable = GENERATE(true, false);
  INFO((x_movable ? "X movable" : "nothing movable"));
  TwoSegments t(std::make_unique<FakeBackend>());
  Mover& mover = t.mover;
  CachingAllocator& allocator = t.allocator;
  void *a = t.a, *b = t.b, *c = t.c;
  REQUIRE(c == a);
  if (x_movable) mover.movable_owners = {3};

  AllocResult d = allocator.allocate(46 * kMiB, 4);
  CHECK_FALSE(d.ok());
  CHECK(mover.compact_calls >= 1);
  CHECK(mover.moves.empty());
  CHECK(mover.calls().size() == 1);  // make_room, asked for a contiguous range
  CHECK(mover.calls()[0].contiguous);
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_block_moves == 0);
  CHECK(s.reserved_bytes.all.current == 36 * kMiB);
  CHECK(allocator.is_valid());

  // A 30 MiB request needs only 2 MiB back: X alone is enough when it may move.
  AllocResult e = allocator.allocate(30 * kMiB, 5);
  CHECK(e.ok() == x_movable);
  if (x_movable) {
    REQUIRE(mover.moves.size() == 1);
    CHECK(mover.moves[0].owner == 3);
    CHECK_FALSE(inside(mover.moves[0].to, a, 16 * kMiB));  // out of X, into Y
    allocator.free(mover.moves[0].to);
    allocator.free(e.ptr);
  } else {
    allocator.free(c);
  }
  allocator.free(b);
  CHECK(allocator.is_valid());
}

TEST_CASE("without a callback that compacts, the chain is as before", "[allocator][compaction]") {
  // Evictor does not override compact(): the same layout ends in make_room and an OOM.
  Evictor evictor;
  CachingAllocator allocator(limited(64 * kMiB), std::make_unique<FakeBackend>(), &evictor);
  evictor.attach(&allocator);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  make_two_segments(allocator, &a, &b, &c);
  REQUIRE(allocator.stats().reserved_bytes.all.current == 36 * kMiB);
  CHECK_FALSE(allocator.allocate(30 * kMiB, 4).ok());
  CHECK(allocator.stats().num_block_moves == 0);
  allocator.free(b);
  allocator.free(c);
}

namespace {

// Note [Packing]: two 20 MiB segments (made for 20 MiB requests, freed), each [9 MiB][5 MiB
// free][6 MiB], the 9 and 6 MiB blocks movable (owners 1-4), the holes left by freed 5 MiB
// blocks. No free piece takes a 9 MiB block, so step 2 of Note [Compaction] can empty
// neither segment.
struct HolesTooSmall {
  Mover mover;
  CachingAllocator allocator;
  void* live[4] = {};
  explicit HolesTooSmall(std::unique_ptr<Backend> backend, uint64_t reserved_limit)
      : allocator(limited(reserved_limit), std::move(backend), &mover) {
    mover.attach(&allocator);
    mover.allocator = &allocator;
    void* whole[2] = {allocator.allocate(20 * kMiB, 9).ptr, allocator.allocate(20 * kMiB, 9).ptr};
    for (void* w : whole) allocator.free(w);
    void* holes[2] = {};
    for (int s = 0; s < 2; ++s) {
      live[2 * s] = allocator.allocate(9 * kMiB, 2 * s + 1).ptr;
      holes[s] = allocator.allocate(5 * kMiB, 9).ptr;
      live[2 * s + 1] = allocator.allocate(6 * kMiB, 2 * s + 2).ptr;
    }
    for (void* hole : holes) allocator.free(hole);
    mover.movable_owners = {1, 2, 3, 4};
  }
};

}  // namespace

TEST_CASE(
    "compaction packs a segment's blocks into a smaller fresh one when no free block "
    "takes them",
    "[allocator][compaction]") {
  // 40 MiB reserved under a 60 MiB limit; a 24 MiB request needs 4 MiB back. One segment's
  // 15 MiB of blocks go into a fresh 16 MiB segment and the 20 MiB segment goes back:
  // 40 + 16 - 20 + 24 = 60. Real memory, so the copies are seen.
  HolesTooSmall t(std::make_unique<HostBackend>(), 60 * kMiB);
  CachingAllocator& allocator = t.allocator;
  REQUIRE(allocator.stats().reserved_bytes.all.current == 40 * kMiB);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(t.live[i]);
    std::memset(t.live[i], 0x30 + i, i % 2 ? 6 * kMiB : 9 * kMiB);
  }
  AllocResult d = allocator.allocate(24 * kMiB, 5);
  REQUIRE(d.ok());
  CHECK(t.mover.calls().empty());  // make_room was never asked
  REQUIRE(t.mover.moves.size() == 2);
  const Move big = t.mover.moves[0], small = t.mover.moves[1];
  CHECK(big.owner + 1 == small.owner);  // both blocks of one segment, the larger first
  CHECK(big.from == t.live[big.owner - 1]);
  CHECK(static_cast<const char*>(small.to) == static_cast<const char*>(big.to) + 9 * kMiB);
  for (const Move& m : {big, small}) {
    const size_t size = m.owner % 2 ? 9 * kMiB : 6 * kMiB;
    const unsigned char* p = static_cast<const unsigned char*>(m.to);
    CHECK(p[0] == 0x30 + m.owner - 1);
    CHECK(p[size - 1] == 0x30 + m.owner - 1);
  }
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_packings == 1);
  CHECK(s.num_block_moves == 2);
  CHECK(s.moved_bytes == 15 * kMiB);
  CHECK(s.num_device_free == 1);
  CHECK(s.reserved_bytes.all.peak == 60 * kMiB);  // never above the limit, fresh segment included
  CHECK(s.reserved_bytes.all.current == 60 * kMiB);
  CHECK(s.allocated_bytes.all.peak == s.allocated_bytes.all.current);  // never counted twice
  CHECK(allocator.is_valid());
  allocator.free(big.to);
  allocator.free(small.to);
  allocator.free(t.live[small.owner % 4]);
  allocator.free(t.live[(small.owner + 1) % 4]);
  allocator.free(d.ptr);
  CHECK(allocator.stats().allocated_bytes.all.current == 0);
}

TEST_CASE("compaction packs nothing when the fresh segment would not fit or gain enough",
          "[allocator][compaction]") {
  // Under 56 MiB the request needs 8 MiB back: one segment packed gains 4 MiB, and both
  // would need a 30 MiB fresh segment where 16 MiB are left. Nothing moves; out of memory.
  HolesTooSmall t(std::make_unique<FakeBackend>(), 56 * kMiB);
  CachingAllocator& allocator = t.allocator;
  CHECK_FALSE(allocator.allocate(24 * kMiB, 5).ok());
  CHECK(t.mover.compact_calls >= 1);
  CHECK(t.mover.moves.empty());
  const AllocatorStats s = allocator.stats();
  CHECK(s.num_packings == 0);
  CHECK(s.num_device_alloc == 2);
  CHECK(s.reserved_bytes.all.current == 40 * kMiB);
  CHECK(allocator.is_valid());
  for (void* p : t.live) allocator.free(p);
}
