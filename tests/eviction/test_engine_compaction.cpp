// test_engine_compaction.cpp: Note [Compaction in the engine]: where the engine allocates
// (the simulator) and the allocator's reserved limit refuses a segment, storages no op
// holds move, and the engine keeps their new addresses; with compact off it evicts.
#include <catch2/catch.hpp>

#include <memory>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"
#include "dtr/core/clock.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"

using namespace dtr;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

struct Device {
  LogicalClock clock{1};
  std::unique_ptr<CachingAllocator> allocator;
  std::unique_ptr<Engine> engine;

  explicit Device(bool compact) {
    AllocatorConfig aconfig;
    aconfig.budget_bytes = 64 * kMiB;
    aconfig.reserved_limit_bytes = 64 * kMiB;
    aconfig.exact_segments = true;  // as the host under its reserved limit
    aconfig.debug = 3;
    allocator = std::make_unique<CachingAllocator>(aconfig, std::make_unique<FakeBackend>());
    EngineConfig config;
    config.compact = compact;
    config.debug = 3;
    engine = std::make_unique<Engine>(config, builtin_heuristics().make("dtr_eq", {}), clock,
                                      nullptr, EngineMemory{allocator.get(), true});
  }
  TensorId op(std::vector<TensorId> inputs, uint64_t bytes) {
    std::vector<TensorId> outs;
    REQUIRE(engine->call(1000, inputs, {OutputSpec{bytes, -1}}, outs).ok());
    return outs[0];
  }
  // The block that holds storage `t` (its owner), or a default BlockView.
  BlockView block_of(TensorId t) const {
    const uint64_t owner = Engine::owner_of(engine->storage_of(t));
    for (const BlockView& b : allocator->blocks_in_address_order())
      if (b.allocated && b.owner == owner) return b;
    return {};
  }
};

// X: a 16 MiB segment (made for a 16 MiB output that died, eagerly evicted) that now holds
// `c` (3 MiB); Y: a 20 MiB segment (likewise made for a 20 MiB output: under a reserved
// limit each gets a segment of its own size, Note [Segments under a reserved limit] in
// allocator/caching_allocator.cpp) holding only `b` (2 MiB, live, evictable). 36 MiB
// reserved under the device's 64 MiB: a 30 MiB output needs Y back.
struct TwoSegments {
  Device d;
  TensorId x, b, c;
  explicit TwoSegments(bool compact) : d(compact) {
    REQUIRE(d.engine->constant(64 * 1024, x).ok());  // a small constant: the small pool
    const TensorId a = d.op({x}, 16 * kMiB);
    d.engine->release(d.op({x}, 20 * kMiB));  // Y, cached, fully free
    b = d.op({x}, 2 * kMiB);                  // the only free block: Y's
    d.engine->release(a);
    c = d.op({b}, 3 * kMiB);
    REQUIRE(d.allocator->stats().reserved_bytes.large_pool.current == 36 * kMiB);
    REQUIRE(d.block_of(c).segment_id != d.block_of(b).segment_id);
  }
};

}  // namespace

TEST_CASE("the engine moves a storage no op holds instead of evicting it",
          "[eviction][allocator][compaction]") {
  TwoSegments t(/*compact=*/true);
  Engine& e = *t.d.engine;
  const uint64_t evictions = e.stats().num_evictions;
  const TensorId out = t.d.op({t.c}, 30 * kMiB);
  const AllocatorStats s = t.d.allocator->stats();
  CHECK(s.num_block_moves == 1);
  CHECK(s.moved_bytes == 2 * kMiB);
  CHECK(s.num_device_free == 1);  // Y went back
  CHECK(s.reserved_bytes.all.peak <= 64 * kMiB);
  CHECK(e.stats().num_evictions == evictions);  // nothing evicted
  CHECK(e.is_material(e.storage_of(t.b)));
  // b's block is in X now, next to c, and the engine holds that address: touching b needs
  // no remat, and freeing it (the engine frees what it holds) frees the moved block.
  const BlockView moved = t.d.block_of(t.b);
  REQUIRE(moved.allocated);
  CHECK(moved.segment_id == t.d.block_of(t.c).segment_id);
  REQUIRE(e.materialize(t.b).ok());
  CHECK(e.stats().num_remats == 0);
  e.release(t.b);
  e.release(t.c);
  e.release(out);
  CHECK(t.d.allocator->is_valid());
}

TEST_CASE("without compact the engine evicts the storage instead",
          "[eviction][allocator][compaction]") {
  TwoSegments t(/*compact=*/false);
  Engine& e = *t.d.engine;
  const uint64_t evictions = e.stats().num_evictions;
  t.d.op({t.c}, 30 * kMiB);
  CHECK(t.d.allocator->stats().num_block_moves == 0);
  CHECK(e.stats().num_evictions == evictions + 1);
  CHECK_FALSE(e.is_material(e.storage_of(t.b)));
  REQUIRE(e.materialize(t.b).ok());  // made again from x
  CHECK(e.stats().num_remats == 1);
}

TEST_CASE("a storage a running op holds does not move", "[eviction][allocator][compaction]") {
  // The 30 MiB op reads b and c: both are locked, nothing can move or be evicted, and the
  // request runs out of memory with every block where it was.
  TwoSegments t(/*compact=*/true);
  const BlockView b_before = t.d.block_of(t.b);
  std::vector<TensorId> outs;
  const Status status = t.d.engine->call(1000, {t.b, t.c}, {OutputSpec{30 * kMiB, -1}}, outs);
  CHECK(status.code == StatusCode::oom);
  CHECK(t.d.allocator->stats().num_block_moves == 0);
  CHECK(t.d.block_of(t.b).ptr == b_before.ptr);
  CHECK(t.d.allocator->is_valid());
}
