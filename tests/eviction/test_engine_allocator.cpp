// test_engine_allocator.cpp: the engine with a caching allocator attached (Note [Budget
// owner] in engine.cpp): the window search against brute force, the budget held by the
// allocator, and the typed out-of-memory error when nothing is left to evict.
#include <catch2/catch.hpp>

#include <memory>
#include <algorithm>
#include <random>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"
#include "dtr/core/clock.h"
#include "dtr/core/options.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"
#include "eviction/candidate_search.h"

using namespace dtr;

namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// Scores a storage by its compute alone, so window costs are exact integers.
class ComputeHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "compute"; }
  uint32_t needs() const override { return 0; }
  double score(const Engine& e, StorageId s) override { return double(e.storage_compute(s)); }
};

struct Window {
  bool found = false;
  double cost = 0;
};

// Every window of every segment, O(n^2): the reference for the two-pointer search.
Window brute_force(const Engine& engine, const std::vector<BlockView>& blocks, uint64_t need,
                   bool contiguous) {
  Window best;
  for (size_t l = 0; l < blocks.size(); ++l) {
    uint64_t weight = 0;
    double cost = 0;
    int evictable = 0;
    for (size_t r = l; r < blocks.size(); ++r) {
      const BlockView& b = blocks[r];
      if (b.segment_id != blocks[l].segment_id) break;
      if (b.allocated) {
        if (b.owner == 0 || !engine.is_evictable(Engine::storage_of_owner(b.owner))) break;
        const StorageId s = Engine::storage_of_owner(b.owner);
        weight += contiguous ? b.size : round_block_size(engine.storage_size(s));
        cost += double(engine.storage_compute(s));
        ++evictable;
      } else if (contiguous) {
        weight += b.size;
      }
      if (weight >= need && evictable > 0 && (!best.found || cost < best.cost)) {
        best.found = true;
        best.cost = cost;
      }
    }
  }
  return best;
}

// Note [Segment fallback]'s choice, by brute force: returns the cost key of the best
// clearable segment (spanning ones first), or found = false.
Window best_segment(const Engine& engine, const std::vector<BlockView>& blocks, uint64_t need,
                    bool* spans_out) {
  Window best;
  bool best_spans = false;
  for (uint64_t seg = 0; seg < 64; ++seg) {
    bool clearable = true, any = false, present = false;
    double cost = 0;
    uint64_t span = 0;
    for (const BlockView& b : blocks) {
      if (b.segment_id != seg) continue;
      present = true;
      span += b.size;
      if (!b.allocated) continue;
      if (b.owner == 0 || !engine.is_evictable(Engine::storage_of_owner(b.owner))) {
        clearable = false;
        continue;
      }
      any = true;
      cost += double(engine.storage_compute(Engine::storage_of_owner(b.owner)));
    }
    if (!present || !clearable || !any) continue;
    const bool spans = span >= need;
    const double key = spans ? cost : cost / double(span);
    if (!best.found || (spans && !best_spans) || (spans == best_spans && key < best.cost)) {
      best.found = true;
      best.cost = key;
      best_spans = spans;
    }
  }
  *spans_out = best_spans;
  return best;
}

}  // namespace

TEST_CASE("window search finds the cheapest qualifying window (vs brute force)",
          "[eviction][allocator][coop]") {
  std::mt19937_64 rng(42);
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 300; ++round) {
    LogicalClock clock(1);
    Engine engine(EngineConfig{}, std::make_unique<ComputeHeuristic>(), clock);
    // Storages with random costs; some pinned (not evictable).
    const size_t n = uniform(1, 24);
    std::vector<StorageId> storages;
    for (size_t i = 0; i < n; ++i) {
      std::vector<TensorId> outs;
      REQUIRE(engine.call(uniform(0, 9), {}, {OutputSpec{uniform(1, 8) * kMiB, -1}}, outs).ok());
      if (uniform(0, 5) == 0) REQUIRE(engine.pin(outs[0]).ok());
      storages.push_back(engine.storage_of(outs[0]));
    }
    // Lay them out over 1-3 segments with free and foreign blocks in between.
    std::vector<BlockView> blocks;
    uintptr_t address = kFakeBaseAddress;
    uint64_t segment = 0;
    for (StorageId s : storages) {
      if (uniform(0, 7) == 0) ++segment;
      if (uniform(0, 3) == 0)
        blocks.push_back(BlockView{address, uniform(1, 6) * kMiB, 0, segment, false, false, false, 0});
      else if (uniform(0, 9) == 0)
        blocks.push_back(BlockView{address, 2 * kMiB, 2 * kMiB, segment, false, true, false, 0});
      address += 16 * kMiB;
      const uint64_t size = round_block_size(engine.storage_size(s));
      blocks.push_back(BlockView{address, size, size, segment, false, true, false, Engine::owner_of(s)});
      address += 16 * kMiB;
    }
    for (bool contiguous : {false, true}) {
      const uint64_t need = uniform(2, 30) * kMiB;  // > 1 MiB: a large-pool request
      std::mt19937_64 search_rng(0);
      std::vector<std::pair<double, StorageId>> scratch;
      ComputeHeuristic heuristic;
      CandidateSearch search{engine, heuristic, search_rng, scratch};
      uint64_t scored = 0;
      const std::vector<StorageId> got = search.window(blocks, need, contiguous, scored);
      const Window want = brute_force(engine, blocks, need, contiguous);
      INFO("round " << round << (contiguous ? " contiguous" : " budget") << " need " << need);
      if (contiguous && !want.found) {
        // No window: a whole segment to give back (Note [Segment fallback]).
        bool spans = false;
        const Window seg = best_segment(engine, blocks, need, &spans);
        REQUIRE(got.empty() == !seg.found);
        if (got.empty()) continue;
        double cost = 0;
        uint64_t span = 0, segment_id = UINT64_MAX;
        for (const BlockView& b : blocks)
          if (b.allocated && b.owner == Engine::owner_of(got[0])) segment_id = b.segment_id;
        for (const BlockView& b : blocks) {
          if (b.segment_id != segment_id) continue;
          span += b.size;
          if (b.allocated) CHECK(std::count(got.begin(), got.end(), Engine::storage_of_owner(b.owner)) == 1);
        }
        for (StorageId s : got) cost += double(engine.storage_compute(s));
        CHECK((spans ? cost : cost / double(span)) == Approx(seg.cost));
        continue;
      }
      REQUIRE(got.empty() == !want.found);
      if (got.empty()) continue;
      double cost = 0;
      for (StorageId s : got) {
        CHECK(engine.is_evictable(s));
        cost += double(engine.storage_compute(s));
      }
      CHECK(cost == want.cost);
      // The chosen storages are adjacent: one segment, no breaking block between them.
      size_t first = blocks.size(), last = 0;
      for (size_t i = 0; i < blocks.size(); ++i)
        for (StorageId s : got)
          if (blocks[i].owner == Engine::owner_of(s)) first = std::min(first, i), last = std::max(last, i);
      for (size_t i = first; i <= last; ++i) {
        CHECK(blocks[i].segment_id == blocks[first].segment_id);
        if (blocks[i].allocated) CHECK(blocks[i].owner != 0);
      }
    }
  }
}

namespace {

struct AllocatorFixture {
  LogicalClock clock{1};
  std::unique_ptr<CachingAllocator> allocator;
  std::unique_ptr<Engine> engine;

  AllocatorFixture(uint64_t budget, const std::string& policy) {
    AllocatorConfig aconfig;
    aconfig.budget_bytes = budget;
    aconfig.reserved_limit_bytes = budget;
    aconfig.debug = 3;
    allocator = std::make_unique<CachingAllocator>(aconfig, std::make_unique<FakeBackend>());
    EngineConfig config;
    config.debug = 3;
    engine = std::make_unique<Engine>(config, builtin_heuristics().make(policy, {}), clock,
                                      nullptr, EngineMemory{allocator.get(), true});
  }
  // Sum of the block-rounded sizes of material storages: what the allocator must count.
  uint64_t material_block_bytes() const {
    uint64_t total = 0;
    for (StorageId s = 0; s < engine->num_storages(); ++s)
      if (engine->is_material(s)) total += round_block_size(engine->storage_size(s));
    return total;
  }
};

}  // namespace

TEST_CASE("engine over the fake allocator: the allocator's budget holds and evictions make room",
          "[eviction][allocator]") {
  const std::string policy = GENERATE(as<std::string>{}, "dtr_eq", "lru", "coop");
  INFO(policy);
  AllocatorFixture f(4 * kMiB, policy);  // two 2 MiB small segments
  Engine& e = *f.engine;
  TensorId x;
  REQUIRE(e.constant(256 * kKiB, x).ok());
  std::vector<TensorId> chain{x};
  for (int i = 0; i < 40; ++i) {
    std::vector<TensorId> outs;
    REQUIRE(e.call(10 + i, {chain.back()}, {OutputSpec{256 * kKiB, -1}}, outs).ok());
    chain.push_back(outs[0]);
    const AllocatorStats s = f.allocator->stats();
    CHECK(s.allocated_bytes.all.current == f.material_block_bytes());
    CHECK(s.allocated_bytes.all.peak <= 4 * kMiB);
    CHECK(s.reserved_bytes.all.peak <= 4 * kMiB);
  }
  CHECK(e.stats().num_evictions > 0);
  CHECK(e.stats().allocator_requests > 0);
  // Touch every tensor again, first to last: each is rematerialized as needed.
  for (TensorId t : chain) REQUIRE(e.materialize(t).ok());
  CHECK(e.stats().num_remats > 0);
  CHECK(f.allocator->stats().allocated_bytes.all.peak <= 4 * kMiB);
  CHECK(f.allocator->stats().allocated_bytes.all.current == f.material_block_bytes());
}

TEST_CASE("engine over the fake allocator: out of memory exactly when nothing is evictable",
          "[eviction][allocator]") {
  AllocatorFixture f(4 * kMiB, "dtr_eq");
  Engine& e = *f.engine;
  // Pin 256 KiB storages until the next one cannot fit: 16 fit the 4 MiB exactly.
  std::vector<TensorId> pinned;
  for (int i = 0; i < 16; ++i) {
    TensorId t;
    REQUIRE(e.constant(256 * kKiB, t).ok());
    pinned.push_back(t);
  }
  CHECK(e.evictable_bytes() == 0);
  TensorId t;
  const Status status = e.constant(256 * kKiB, t);
  REQUIRE(status.code == StatusCode::oom);
  CHECK(status.oom.budget_bytes == 4 * kMiB);
  CHECK(status.oom.pinned_bytes == 4 * kMiB);
  CHECK(status.oom.evictable_bytes == 0);
  CHECK(status.oom.requested_bytes == 256 * kKiB);
  CHECK(status.message().find("out of memory") != std::string::npos);
  CHECK(e.stats().num_ooms == 1);
  // While something is evictable, the same request succeeds: free one pin's worth by
  // releasing an unpinned storage's reference is not possible (all pinned), so start over
  // with one evictable storage in the mix.
  AllocatorFixture g(4 * kMiB, "dtr_eq");
  for (int i = 0; i < 15; ++i) REQUIRE(g.engine->constant(256 * kKiB, t).ok());
  std::vector<TensorId> outs;
  REQUIRE(g.engine->call(1, {t}, {OutputSpec{256 * kKiB, -1}}, outs).ok());  // evictable
  REQUIRE(g.engine->constant(256 * kKiB, t).ok());                            // evicts it
  CHECK(g.engine->stats().num_evictions == 1);
  CHECK(g.engine->stats().num_ooms == 0);
}

TEST_CASE("engine over the fake allocator: an op's workspace is a block while it runs",
          "[eviction][allocator]") {
  // Note [Op workspace]. Two 2 MiB small segments: 2 MiB of pinned constants fill one.
  AllocatorFixture f(4 * kMiB, "dtr_eq");
  Engine& e = *f.engine;
  for (int i = 0; i < 8; ++i) {
    TensorId t;
    REQUIRE(e.constant(256 * kKiB, t).ok());
  }
  std::vector<TensorId> out;
  REQUIRE(e.call(10, {}, {OutputSpec{1 * kMiB, -1}}, out).ok());
  const TensorId x = out[0];
  // y's output (256 KiB) fits beside x, its 1 MiB of scratch does not: x goes.
  out.clear();
  REQUIRE(e.call(10, {}, {OutputSpec{256 * kKiB, -1}}, out, Engine::kSameCost, 1 * kMiB).ok());
  const TensorId y = out[0];
  CHECK(e.stats().num_evictions == 1);
  CHECK(!e.is_defined(x));
  const AllocatorStats after = f.allocator->stats();
  CHECK(after.allocated_bytes.all.current == f.material_block_bytes());  // scratch freed
  CHECK(after.allocated_bytes.all.peak <= 4 * kMiB);
  // A remat takes the scratch again: 256 KiB and 1 MiB more allocated, then freed.
  REQUIRE(e.drop(e.storage_of(y)));
  REQUIRE(e.materialize(y).ok());
  const AllocatorStats again = f.allocator->stats();
  CHECK(again.allocated_bytes.all.allocated - after.allocated_bytes.all.allocated ==
        256 * kKiB + 1 * kMiB);
  CHECK(again.allocated_bytes.all.current == f.material_block_bytes());

  // Where nothing can be evicted, the scratch is out of memory and the output's block goes
  // back.
  AllocatorFixture g(4 * kMiB, "dtr_eq");
  for (int i = 0; i < 12; ++i) {
    TensorId t;
    REQUIRE(g.engine->constant(256 * kKiB, t).ok());
  }
  out.clear();
  const Status oom =
      g.engine->call(10, {}, {OutputSpec{256 * kKiB, -1}}, out, Engine::kSameCost, 1 * kMiB);
  REQUIRE(oom.code == StatusCode::oom);
  CHECK(oom.oom.requested_bytes == 1 * kMiB);
  CHECK(g.allocator->stats().allocated_bytes.all.current == g.material_block_bytes());
}

TEST_CASE(
    "engine over the fake allocator: a remat's copies of outputs still material are "
    "blocks while it runs",
    "[eviction][allocator]") {
  // Note [Duplicate outputs in the peak]. Two 2 MiB small segments; 1 MiB of pinned
  // constants, a two-output op (a, b: 512 KiB each) and c (512 KiB) leave 1.5 MiB free.
  AllocatorFixture f(4 * kMiB, "dtr_eq");
  Engine& e = *f.engine;
  for (int i = 0; i < 4; ++i) {
    TensorId t;
    REQUIRE(e.constant(256 * kKiB, t).ok());
  }
  std::vector<TensorId> out;
  REQUIRE(e.call(10, {}, {OutputSpec{512 * kKiB, -1}, OutputSpec{512 * kKiB, -1}}, out).ok());
  const TensorId a = out[0], b = out[1];
  out.clear();
  REQUIRE(e.call(1000, {}, {OutputSpec{512 * kKiB, -1}}, out).ok());
  const TensorId c = out[0];
  REQUIRE(e.drop(e.storage_of(a)));
  const AllocatorStats before = f.allocator->stats();
  // a's remat runs the op again: a block for a and one for b's copy, which goes back as it
  // returns. 1 MiB fits beside 2 MiB allocated: nothing is evicted.
  REQUIRE(e.materialize(a).ok());
  const AllocatorStats after = f.allocator->stats();
  CHECK(after.allocated_bytes.all.allocated - before.allocated_bytes.all.allocated == 1 * kMiB);
  CHECK(after.allocated_bytes.all.current == f.material_block_bytes());
  CHECK(after.allocated_bytes.all.peak == 3 * kMiB);
  CHECK(e.stats().allocated_peak == after.allocated_bytes.all.peak);
  CHECK(e.stats().num_evictions == 0);
  CHECK(e.is_defined(b));

  // With 1.25 MiB more pinned, a's block fits and b's copy does not: c is evicted for it
  // (b is locked as the op's output); the peak is 2.25 MiB pinned and the op's 1.5 MiB.
  for (int i = 0; i < 5; ++i) {
    TensorId t;
    REQUIRE(e.constant(256 * kKiB, t).ok());
  }
  REQUIRE(e.drop(e.storage_of(a)));
  REQUIRE(e.materialize(a).ok());
  CHECK(e.stats().num_evictions == 1);
  CHECK(!e.is_defined(c));
  CHECK(e.is_defined(b));
  CHECK(f.allocator->stats().allocated_bytes.all.peak == 3 * kMiB + 768 * kKiB);
  CHECK(e.stats().allocated_peak == 3 * kMiB + 768 * kKiB);
  CHECK(f.allocator->stats().allocated_bytes.all.current == f.material_block_bytes());
}

TEST_CASE("coop needs the allocator; the engine refuses it alone", "[eviction][allocator][coop]") {
  LogicalClock clock(1);
  CHECK_THROWS_AS(Engine(EngineConfig{}, builtin_heuristics().make("coop", {}), clock), ConfigError);
  CachingAllocator allocator(AllocatorConfig{}, std::make_unique<FakeBackend>());
  CHECK_NOTHROW(Engine(EngineConfig{}, builtin_heuristics().make("coop", {}), clock, nullptr,
                       EngineMemory{&allocator, true}));
}
