// test_engine.cpp: the engine's semantics on small hand-built programs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>

#include "dtr/core/clock.h"
#include "dtr/core/options.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"

using namespace dtr;

namespace {

// Counts what the engine asks the host to do, and checks the budget at every compute.
struct RecordingHooks : EngineHooks {
  const Engine* engine = nullptr;
  std::vector<std::pair<OpId, bool>> computes;
  std::vector<StorageId> evictions;
  std::vector<std::pair<TensorId, size_t>> materializing;  // target and depth at each compute
  uint64_t max_live = 0;
  void on_compute(OpId op, bool remat) override {
    computes.push_back({op, remat});
    materializing.push_back({engine->materializing(), engine->materialize_depth()});
    max_live = std::max(max_live, engine->live_bytes());
    REQUIRE(engine->live_bytes() <= engine->budget_bytes());
  }
  void on_evict(StorageId s) override { evictions.push_back(s); }
};

struct Fixture {
  LogicalClock clock{1};
  RecordingHooks hooks;
  std::unique_ptr<Engine> engine;

  explicit Fixture(uint64_t budget, const std::string& policy = "dtr_eq", bool dead_first = true,
                   bool lazy_release = false, bool relax_locks = true) {
    EngineConfig config;
    config.budget_bytes = budget;
    config.dead_first = dead_first;
    config.lazy_release = lazy_release;
    config.relax_locks = relax_locks;
    config.debug = 3;
    engine = std::make_unique<Engine>(config, builtin_heuristics().make(policy, {}), clock, &hooks);
    hooks.engine = engine.get();
  }
  TensorId op(uint64_t ns, std::vector<TensorId> in, uint64_t bytes, Status* status = nullptr) {
    std::vector<TensorId> out;
    Status s = engine->call(ns, in, {{bytes, -1}}, out);
    if (status) *status = s;
    else REQUIRE(s.ok());
    return out[0];
  }
};

// Drops a's storage and remakes it, `times` times.
void remake(Engine& engine, TensorId a, int times) {
  for (int i = 0; i < times; ++i) {
    REQUIRE(engine.drop(engine.storage_of(a)));
    REQUIRE(engine.materialize(a).ok());
  }
}

// dtr_eq with `params` beside simrd's, to compare their scores of one engine's storages.
struct DtrEqScores {
  explicit DtrEqScores(const HeuristicParams& params)
      : h(builtin_heuristics().make("dtr_eq", params)),
        plain(builtin_heuristics().make("dtr_eq", {})),
        engine(EngineConfig{}, builtin_heuristics().make("dtr_eq", {}), clock) {}
  // A result of 1000 bytes computed in `ns` from `in`.
  TensorId op(uint64_t ns, std::vector<TensorId> in) {
    std::vector<TensorId> out;
    REQUIRE(engine.call(ns, in, {{1000, -1}}, out).ok());
    return out.back();
  }
  // Scores stopped at a cutoff stay above it, and the full score is returned at it (Note
  // [Cutoff scores] in eviction/candidate_search.cpp).
  void check_cutoffs(StorageId s) {
    const double full = h->score(engine, s);
    CHECK(h->score_up_to(engine, s, full / 2) > full / 2);
    CHECK(h->score_up_to(engine, s, full) == full);
  }
  LogicalClock clock{1};
  std::unique_ptr<Heuristic> h, plain;
  Engine engine;
};

}  // namespace

TEST_CASE("an unconstrained engine computes once and never evicts", "[eviction]") {
  Fixture f(UINT64_MAX);
  TensorId a = f.op(10, {}, 100);
  TensorId b = f.op(20, {a}, 200);
  TensorId c = f.op(30, {a, b}, 300);
  CHECK(f.engine->live_bytes() == 600);
  CHECK(f.engine->stats().model_compute_ns == 60);
  CHECK(f.engine->stats().num_evictions == 0);
  CHECK(f.clock.now() == 61);
  CHECK(f.engine->is_defined(c));
}

TEST_CASE("the budget is hard: outputs are made room for before they exist", "[eviction]") {
  Fixture f(1000);
  TensorId a = f.op(10, {}, 400);
  TensorId b = f.op(10, {a}, 400);
  TensorId c = f.op(10, {b}, 400);  // needs 400 more: must evict a (b is locked as input)
  CHECK(f.engine->live_bytes() <= 1000);
  CHECK(!f.engine->is_defined(a));
  CHECK(f.engine->is_defined(b));
  CHECK(f.engine->is_defined(c));
  CHECK(f.hooks.max_live <= 1000);
  CHECK(f.engine->stats().num_evictions == 1);
  CHECK(f.hooks.evictions.size() == 1);
}

TEST_CASE("an evicted storage is rematerialized through its lineage, parents first", "[eviction]") {
  Fixture f(1000);
  TensorId a = f.op(5, {}, 300);
  TensorId b = f.op(7, {a}, 300);
  TensorId c = f.op(11, {b}, 300);
  f.engine->release(c);  // eager eviction of a dead storage
  CHECK(f.engine->stats().num_eager_evictions == 1);
  TensorId d = f.op(13, {b}, 600);  // room for 600: evicts a (the cheaper, staler storage)
  CHECK(!f.engine->is_defined(a));
  f.engine->release(d);
  f.engine->release(b);
  // b is dead and evicted; a needed again: a is rematerialized (cost 5)
  REQUIRE(f.engine->materialize(a).ok());
  CHECK(f.engine->stats().remat_compute_ns == 5);
  CHECK(f.engine->stats().num_remats == 1);
}

TEST_CASE("a remat chain names the tensor it was asked for and its depth", "[eviction]") {
  // Note [Out-of-memory within a remat] in integration/torch/lineage.cpp reads these.
  Fixture f(UINT64_MAX);
  TensorId a = f.op(5, {}, 100);
  TensorId b = f.op(7, {a}, 100);
  TensorId c = f.op(11, {b}, 100);
  CHECK(f.engine->materializing() == kNoId);
  CHECK(f.engine->materialize_depth() == 0);
  for (TensorId t : {c, b, a}) REQUIRE(f.engine->drop(f.engine->storage_of(t)));
  f.hooks.computes.clear();
  f.hooks.materializing.clear();
  REQUIRE(f.engine->materialize(c).ok());
  REQUIRE(f.hooks.computes.size() == 3);
  CHECK(f.hooks.computes[0].first == f.engine->op_of(a));
  CHECK(f.hooks.computes[2].first == f.engine->op_of(c));
  using Seen = std::pair<TensorId, size_t>;
  CHECK(f.hooks.materializing == std::vector<Seen>{{c, 3}, {c, 2}, {c, 1}});
  CHECK(f.engine->materializing() == kNoId);
  CHECK(f.engine->materialize_depth() == 0);
}

TEST_CASE("a remat costs the op's remat cost where the host gave one", "[eviction]") {
  // Note [Remat cost]: the model's compute and the first run count compute_ns; a remat,
  // the clock at a remat and the heuristics' cost count remat_ns.
  Fixture f(1000);
  std::vector<TensorId> out;
  REQUIRE(f.engine->call(600, {}, {{300, -1}}, out, /*remat_ns=*/90).ok());
  const TensorId m = out[0];
  TensorId b = f.op(10, {m}, 300);
  CHECK(f.engine->storage_compute(f.engine->storage_of(m)) == 90);
  CHECK(f.engine->storage_compute(f.engine->storage_of(b)) == 10);
  CHECK(f.engine->op_compute_ns(f.engine->op_of(m)) == 600);
  CHECK(f.engine->op_remat_ns(f.engine->op_of(m)) == 90);
  CHECK(f.engine->stats().model_compute_ns == 610);
  TensorId c = f.op(20, {b}, 600);  // evicts m (b is locked)
  REQUIRE(!f.engine->is_defined(m));
  f.engine->release(c);
  const Tick before = f.clock.now();
  REQUIRE(f.engine->materialize(m).ok());
  CHECK(f.engine->stats().remat_compute_ns == 90);
  CHECK(f.clock.now() - before == 90);
  CHECK(f.engine->stats().model_compute_ns == 630);
}

TEST_CASE("an op's workspace needs room while it runs, at its first run and at a remat",
          "[eviction]") {
  // Note [Op workspace]: 300 B of scratch beside a 300 B output.
  Fixture f(1000);
  TensorId a = f.op(5, {}, 300);
  TensorId b = f.op(7, {a}, 300);
  std::vector<TensorId> out;
  REQUIRE(f.engine->call(11, {b}, {{300, -1}}, out, Engine::kSameCost, 300).ok());
  const TensorId c = out[0];
  CHECK(f.engine->op_workspace_bytes(f.engine->op_of(c)) == 300);
  // 600 live + 300 output + 300 scratch > 1000: a went (b is the op's input, locked).
  CHECK(f.engine->stats().num_evictions == 1);
  CHECK(!f.engine->is_defined(a));
  CHECK(f.engine->live_bytes() == 600);            // the scratch is gone again
  CHECK(f.engine->stats().allocated_peak == 900);  // but counted while c's op ran
  // The same op without scratch would have fitted beside a.
  Fixture g(1000);
  TensorId ga = g.op(5, {}, 300);
  TensorId gb = g.op(7, {ga}, 300);
  g.op(11, {gb}, 300);
  CHECK(g.engine->stats().num_evictions == 0);

  // A remat of c's op needs the scratch again: with a back (300) and b (300), room for
  // c (300) and its scratch (300) means evicting one of them.
  REQUIRE(f.engine->materialize(a).ok());
  REQUIRE(f.engine->drop(f.engine->storage_of(c)));
  const uint64_t evictions = f.engine->stats().num_evictions;
  REQUIRE(f.engine->materialize(c).ok());
  CHECK(f.engine->stats().num_evictions == evictions + 1);
  CHECK(f.engine->live_bytes() <= 700);

  // Scratch that cannot fit beside what is pinned is out of memory, and says how much.
  Fixture h(1000);
  TensorId p;
  REQUIRE(h.engine->constant(600, p).ok());
  out.clear();
  const Status oom = h.engine->call(1, {p}, {{100, -1}}, out, Engine::kSameCost, 400);
  REQUIRE(oom.code == StatusCode::oom);
  CHECK(oom.oom.requested_bytes == 500);
  CHECK(h.engine->live_bytes() == 600);
}

TEST_CASE("a rematerialized dead intermediate is evicted before live storages", "[eviction]") {
  // Note [Dead storages first]. m is dead (released) and only lineage needs it: b's remat
  // brings it back, young, so a staleness score keeps it and evicts a live storage.
  for (const bool dead_first : {true, false}) {
    CAPTURE(dead_first);
    Fixture f(1000, "lru", dead_first);
    const TensorId x = f.op(1, {}, 100);
    const TensorId a = f.op(1, {}, 100);
    REQUIRE(f.engine->pin(a).ok());
    const TensorId m = f.op(1, {a}, 100);
    const TensorId b = f.op(1, {m}, 100);
    f.engine->release(m);  // eager eviction
    auto evict_100 = [&] {
      REQUIRE(f.engine->make_room(f.engine->budget_bytes() - f.engine->live_bytes() + 100).ok());
    };
    f.engine->release(f.op(1, {}, 1));   // the clock moves on
    f.engine->release(f.op(1, {x}, 1));  // x is read now: b becomes the stalest
    evict_100();
    REQUIRE(!f.engine->is_defined(b));
    REQUIRE(f.engine->materialize(b).ok());  // m first, then b
    REQUIRE(f.engine->is_defined(m));
    evict_100();
    // dead_first: m goes, and both live storages stay; simrd's choice: m, the youngest,
    // stays and a live storage goes (LRU: b, whose remat did not refresh its access time).
    CHECK(f.engine->is_defined(m) == !dead_first);
    CHECK((f.engine->is_defined(b) && f.engine->is_defined(x)) == dead_first);
  }
}

TEST_CASE("dead_first_ratio takes a dead storage only while its score is near the pool's best",
          "[eviction]") {
  // Note [Dead storages first]. With `size` (score 1/size) the dead m (100 bytes) scores 10
  // times the live x (1000 bytes): a ratio of 0 or 16 takes m, a ratio of 4 takes x.
  for (const double ratio : {0.0, 16.0, 4.0}) {
    CAPTURE(ratio);
    LogicalClock clock{1};
    RecordingHooks hooks;
    EngineConfig config;
    config.budget_bytes = 1300;
    config.dead_first = true;
    config.dead_first_ratio = ratio;
    config.debug = 3;
    Engine engine(config, builtin_heuristics().make("size", {}), clock, &hooks);
    hooks.engine = &engine;
    auto op = [&](std::vector<TensorId> in, uint64_t bytes) {
      std::vector<TensorId> out;
      REQUIRE(engine.call(1, in, {{bytes, -1}}, out).ok());
      return out[0];
    };
    const TensorId x = op({}, 1000);
    const TensorId a = op({}, 100);
    REQUIRE(engine.pin(a).ok());
    const TensorId m = op({a}, 100);
    const TensorId b = op({m}, 100);
    engine.release(m);  // eager eviction: m is dead
    REQUIRE(engine.drop(engine.storage_of(b)));
    REQUIRE(engine.materialize(b).ok());  // m first, then b: m is material and dead
    REQUIRE(engine.is_defined(m));
    REQUIRE(engine.live_bytes() == 1300);
    REQUIRE(engine.make_room(100).ok());
    CHECK(engine.is_defined(m) == (ratio == 4.0));
    CHECK(engine.is_defined(x) == (ratio != 4.0));
    CHECK(engine.is_defined(b));
  }
}

TEST_CASE("lazy_release keeps a dead storage until the next eviction request", "[eviction]") {
  // Note [Lazy release]: m dies while b, computed from it, is evicted. Kept material (as
  // the PyTorch host keeps what its scans have not found), m serves b's remat as a parent;
  // the next eviction request evicts it first, whatever the policy would choose.
  for (const bool lazy : {true, false}) {
    CAPTURE(lazy);
    Fixture f(1000, "size", /*dead_first=*/false, lazy);
    const TensorId a = f.op(1, {}, 100);
    REQUIRE(f.engine->pin(a).ok());
    const TensorId m = f.op(3, {a}, 200);
    const TensorId b = f.op(5, {m}, 500);
    const TensorId x = f.op(1, {}, 100);
    REQUIRE(f.engine->make_room(f.engine->budget_bytes() - f.engine->live_bytes() + 400).ok());
    REQUIRE(!f.engine->is_defined(b));  // the largest
    f.engine->release(m);
    CHECK(f.engine->is_defined(m) == lazy);
    CHECK(f.engine->stats().num_eager_evictions == (lazy ? 0 : 1));
    REQUIRE(f.engine->materialize(b).ok());
    CHECK(f.engine->stats().num_remats == (lazy ? 1 : 2));  // b alone, or m then b
    // Room for 150 more: the lazily released m goes (eagerly) before the policy is asked.
    f.engine->release(b);  // b is dead now too: kept as well
    CHECK(f.engine->is_defined(b) == lazy);
    const uint64_t evictions = f.engine->stats().num_evictions;
    REQUIRE(f.engine->make_room(f.engine->budget_bytes() - f.engine->live_bytes() + 150).ok());
    CHECK(!f.engine->is_defined(m));
    CHECK(!f.engine->is_defined(b));
    CHECK(f.engine->is_defined(x));
    // Lazy: all eager, nothing chosen. simrd: b went at its release, and m, brought back
    // by b's remat, is the policy's choice.
    CHECK(f.engine->stats().num_evictions == evictions + (lazy ? 0 : 1));
  }
}

TEST_CASE("keep_near_large keeps a dropped input of a large held result to the period's end",
          "[eviction]") {
  // Note [Dropped inputs of large results]. x (100 B) and y (200 B) make g (400 B, through
  // a dead 800 B h for y: two ops downstream); the program holds g and drops x and y.
  struct Run {
    bool x_material, y_material, x_after_period, y_after_period;
    uint64_t kept, eager;
  };
  auto run = [](double ratio) {
    LogicalClock clock{1};
    EngineConfig config;
    config.keep_near_large = ratio;
    config.debug = 3;
    Engine engine(config, builtin_heuristics().make("dtr_eq", {}), clock);
    std::vector<TensorId> out;
    auto op = [&](std::vector<TensorId> in, uint64_t bytes) {
      REQUIRE(engine.call(10, in, {{bytes, -1}}, out).ok());
      return out.back();
    };
    const TensorId x = op({}, 100), y = op({}, 200);
    const TensorId h = op({y}, 800);
    const TensorId g = op({x, h}, 400);
    engine.release(h);  // 800 B: no held storage downstream is 2 times it
    engine.release(x);
    engine.release(y);
    Run r{engine.is_material(engine.storage_of(x)),
          engine.is_material(engine.storage_of(y)),
          false,
          false,
          engine.stats().num_kept_dropped,
          0};
    CHECK(engine.is_material(engine.storage_of(g)));
    engine.end_period();
    r.x_after_period = engine.is_material(engine.storage_of(x));
    r.y_after_period = engine.is_material(engine.storage_of(y));
    r.eager = engine.stats().num_eager_evictions;
    CHECK(engine.external_refs(x) == 0);
    CHECK(engine.external_refs(y) == 0);
    return r;
  };
  const Run off = run(0), two = run(2), four = run(4), eight = run(8);
  // Off: all three dead and evicted at once.
  CHECK(!off.x_material);
  CHECK(!off.y_material);
  CHECK(off.kept == 0);
  CHECK(off.eager == 3);
  // g is 4 times x and 2 times y (through h): both kept at 2, x alone at 4, none at 8.
  CHECK(two.x_material);
  CHECK(two.y_material);
  CHECK(two.kept == 2);
  CHECK(four.x_material);
  CHECK(!four.y_material);
  CHECK(four.kept == 1);
  CHECK(!eight.x_material);
  CHECK(eight.kept == 0);
  // The period's end lets go of what was kept, which dies then.
  CHECK(!two.x_after_period);
  CHECK(!two.y_after_period);
  CHECK(two.eager == 3);
  CHECK(four.eager == 3);
}

TEST_CASE("policy dtr_eq_keep keeps as keep_near_large:8 does; the option, where set, wins",
          "[eviction]") {
  // Note [Keeping as a candidate] in eviction/heuristics/dtr_eq_keep_heuristic.cpp. x
  // (100 B) makes g (800 B, 8 times x); the program holds g and drops x.
  auto kept = [](const char* policy, double option) {
    LogicalClock clock{1};
    EngineConfig config;
    config.keep_near_large = option;
    config.debug = 3;
    Engine engine(config, builtin_heuristics().make(policy, {}), clock);
    std::vector<TensorId> out;
    REQUIRE(engine.call(10, {}, {{100, -1}}, out).ok());
    const TensorId x = out.back();
    REQUIRE(engine.call(10, {x}, {{800, -1}}, out).ok());
    engine.release(x);
    const bool material = engine.is_material(engine.storage_of(x));
    CHECK(engine.stats().num_kept_dropped == (material ? 1u : 0u));
    engine.end_period();
    CHECK(!engine.is_material(engine.storage_of(x)));  // let go at the period's end
    return material;
  };
  CHECK(!kept("dtr_eq", 0));
  CHECK(kept("dtr_eq_keep", 0));
  CHECK(!kept("dtr_eq_keep", 16));  // the option's ratio, not the policy's: g is only 8x
  CHECK(kept("dtr_eq", 8));
}

TEST_CASE("a nested rematerialization re-runs a chain bottom-up with an explicit stack", "[eviction]") {
  // A chain of 5000 ops with room for 6 tensors: asking for the last one after evicting
  // everything rematerializes the whole chain, 5000 frames deep, with no recursion.
  const uint64_t unit = 8;
  Fixture f(6 * unit, "lru");
  std::vector<TensorId> chain{f.op(1, {}, unit)};
  for (int i = 1; i < 5000; ++i) chain.push_back(f.op(1, {chain.back()}, unit));
  const TensorId last = chain.back();
  REQUIRE(f.engine->make_room(f.engine->budget_bytes()).ok());  // evicts everything
  CHECK(f.engine->pool_size() == 0);
  CHECK(f.engine->live_bytes() == 0);
  CHECK(!f.engine->is_defined(last));
  REQUIRE(f.engine->materialize(last).ok());
  CHECK(f.engine->is_defined(last));
  CHECK(f.engine->stats().max_remat_depth >= 4999);
  CHECK(f.engine->stats().num_remats == 5000);
}

// Note [Relaxed remat locks]: z = h(a3, m) with m material and a3 three evicted ops deep.
// Frame z locks m on entry; remaking a2 then needs k + m + a1 + a2 = 700 > 650 with nothing
// else evictable. Before, out of memory; now frame z lets go of m, which is evicted and
// remade when z resumes.
TEST_CASE("a nested remat lets go of its outer frames' parents rather than run out", "[eviction]") {
  const bool relax = GENERATE(true, false);  // false: option relax_locks off, as simrd
  Fixture f(650, "dtr_eq", true, false, relax);
  TensorId k;
  REQUIRE(f.engine->constant(50, k).ok());
  TensorId a1 = f.op(1, {k}, 200);
  TensorId a2 = f.op(1, {a1}, 200);
  TensorId a3 = f.op(1, {a2}, 200);  // 650: exactly the budget
  REQUIRE(f.engine->drop(f.engine->storage_of(a1)));
  REQUIRE(f.engine->drop(f.engine->storage_of(a2)));
  TensorId m = f.op(1, {k}, 250);
  TensorId z = f.op(1, {a3, m}, 50);
  REQUIRE(f.engine->drop(f.engine->storage_of(a3)));
  REQUIRE(f.engine->drop(f.engine->storage_of(z)));
  REQUIRE(f.engine->is_defined(m));
  const uint64_t remats_before = f.engine->stats().num_remats;

  if (!relax) {
    const Status s = f.engine->materialize(z);
    CHECK(s.code == StatusCode::oom);
    CHECK(s.oom.in_use_bytes == 450);  // m, locked by frame z, and a1, a2's input
    CHECK(f.engine->stats().num_relaxed_remats == 0);
    CHECK(f.engine->drop(f.engine->storage_of(m)));  // the failed remat let go of its locks
    return;
  }
  REQUIRE(f.engine->materialize(z).ok());
  CHECK(f.engine->is_defined(z));
  CHECK(f.engine->stats().num_relaxed_remats == 1);
  CHECK(f.engine->stats().num_ooms == 0);
  // a1, a2, a3, then m (evicted for a2) and z itself.
  CHECK(f.engine->stats().num_remats - remats_before == 5);
  CHECK(f.hooks.max_live <= 650);
  // Every lock the frames took is gone: z, a3 and m can all be evicted again.
  CHECK(f.engine->drop(f.engine->storage_of(z)));
  CHECK(f.engine->drop(f.engine->storage_of(a3)));
  CHECK(f.engine->drop(f.engine->storage_of(m)));
  CHECK(f.engine->live_bytes() == 50);
}

TEST_CASE("multi-output ops are recomputed once and refill every evicted output", "[eviction]") {
  Fixture f(10000);
  TensorId in = f.op(1, {}, 100);
  std::vector<TensorId> outs;
  REQUIRE(f.engine->call(50, {in}, {{100, -1}, {200, -1}}, outs).ok());
  REQUIRE(f.engine->make_room(10000).ok());  // evicts everything evictable
  CHECK(f.engine->live_bytes() == 0);
  CHECK(!f.engine->is_defined(outs[0]));
  CHECK(!f.engine->is_defined(outs[1]));
  const size_t computes = f.hooks.computes.size();
  REQUIRE(f.engine->materialize(outs[1]).ok());
  CHECK(f.engine->is_defined(outs[0]));
  CHECK(f.engine->is_defined(outs[1]));
  // the input (1 op) and the two-output op (1 op): two computes, not three
  CHECK(f.hooks.computes.size() - computes == 2);
  CHECK(f.engine->live_bytes() == 400);
}

TEST_CASE("a view shares its base's storage and is evicted with it", "[eviction]") {
  Fixture f(10000);
  TensorId base = f.op(10, {}, 1000);
  std::vector<TensorId> outs;
  REQUIRE(f.engine->call(1, {base}, {{0, 0}}, outs).ok());
  const TensorId view = outs[0];
  CHECK(f.engine->storage_of(view) == f.engine->storage_of(base));
  CHECK(f.engine->live_bytes() == 1000);
  f.engine->release(base);  // the view still holds the storage
  CHECK(f.engine->is_defined(view));
  f.engine->release(view);  // now the storage is dead
  CHECK(f.engine->live_bytes() == 0);
  CHECK(f.engine->stats().num_eager_evictions == 1);
}

TEST_CASE("pinned storages are never evicted; an infeasible budget is a typed OOM", "[eviction]") {
  Fixture f(1000);
  TensorId k;
  REQUIRE(f.engine->constant(600, k).ok());
  TensorId a = f.op(1, {k}, 300);
  Status s;
  f.op(1, {a}, 500, &s);  // 600 pinned + 300 locked input + 500 > 1000
  REQUIRE(s.code == StatusCode::oom);
  CHECK(s.oom.budget_bytes == 1000);
  CHECK(s.oom.requested_bytes == 500);
  CHECK(s.oom.live_bytes == 900);
  CHECK(s.oom.pinned_bytes == 900);  // the constant, and `a` locked as the op's input
  CHECK(s.oom.in_use_bytes == 300);  // `a` only (Note [Out-of-memory breakdown])
  CHECK(s.oom.evictable_bytes == 0);
  CHECK(s.message().find("pinned 600 B, in use by the running op 300 B and evictable 0 B") !=
        std::string::npos);
  CHECK(f.engine->evictable_bytes() == 300);  // the failed op let go of `a`
  CHECK(s.message().find("pinned") != std::string::npos);
  CHECK(f.engine->is_defined(k));
  CHECK(f.engine->stats().num_ooms == 1);
  // The engine stays consistent after the failure.
  std::string why;
  CHECK(f.engine->is_valid(&why));
}

TEST_CASE("collect_pins discards dropped pins no lineage needs, only when nothing is left",
          "[eviction][collect]") {
  // Note [Collecting dropped pins]. k (600 B) is pinned and dropped; s (4 B) is made from
  // k and pinned (a result under min_evictable), so no remat can read k; h (300 B) is
  // made from nothing and held. An op of 500 B on h then needs room that only k has.
  auto engine_with = [](bool collect, LogicalClock& clock) {
    EngineConfig config;
    config.budget_bytes = 1000;
    config.collect_pins = collect;
    config.debug = 3;
    return std::make_unique<Engine>(config, builtin_heuristics().make("dtr_eq", {}), clock);
  };
  auto call = [](Engine& e, std::vector<TensorId> in, uint64_t bytes) {
    std::vector<TensorId> out;
    const Status status = e.call(1, in, {{bytes, -1}}, out);
    return std::make_pair(status, out.empty() ? kNoId : out[0]);
  };
  for (const bool collect : {false, true}) {
    LogicalClock clock{1};
    auto e = engine_with(collect, clock);
    TensorId k;
    REQUIRE(e->constant(600, k).ok());
    const TensorId sum = call(*e, {k}, 4).second;
    REQUIRE(e->pin(sum).ok());
    e->release(k);
    const TensorId h = call(*e, {}, 300).second;
    const auto [status, out] = call(*e, {h}, 500);
    if (!collect) {  // the torch host's engine: its own collector decides
      CHECK(status.code == StatusCode::oom);
      CHECK(e->stats().full_collects == 0);
      continue;
    }
    REQUIRE(status.ok());
    CHECK(e->is_discarded(e->storage_of(k)));
    CHECK(e->is_defined(sum));
    CHECK(e->live_bytes() == 804);
    CHECK(e->stats().full_collects == 1);
    CHECK(e->stats().num_evictions == 0);
  }
  SECTION("a dropped pin a held storage can be remade from stays") {
    LogicalClock clock{1};
    auto e = engine_with(true, clock);
    TensorId k;
    REQUIRE(e->constant(600, k).ok());
    const TensorId child = call(*e, {k}, 4).second;  // held, unpinned: may be evicted
    e->release(k);
    const TensorId h = call(*e, {}, 300).second;
    const auto [status, out] = call(*e, {h}, 500);
    CHECK(status.code == StatusCode::oom);
    CHECK(!e->is_discarded(e->storage_of(k)));
    CHECK(!e->is_defined(child));  // evicted first, which did not make room enough
    CHECK(e->stats().full_collects == 0);
    std::string why;
    CHECK(e->is_valid(&why));
  }
}

TEST_CASE("thrashing past the remat limit is reported", "[eviction]") {
  LogicalClock clock{1};
  EngineConfig config;
  config.budget_bytes = 3 * 100;
  config.max_remat_ns = 50;
  config.debug = 3;
  Engine engine(config, builtin_heuristics().make("lru", {}), clock);
  std::vector<TensorId> chain;
  for (int i = 0; i < 31; ++i) {
    std::vector<TensorId> in, out;
    if (!chain.empty()) in.push_back(chain.back());
    REQUIRE(engine.call(10, in, {{100, -1}}, out).ok());
    chain.push_back(out[0]);
  }
  CHECK(!engine.is_defined(chain[20]));
  // chain[20] needs chain[0..19] again: 210 ns of remat > 50 ns.
  Status s = engine.materialize(chain[20]);
  CHECK(s.code == StatusCode::thrash);
  CHECK(std::string(s.message()).find("overhead") != std::string::npos);
  std::string why;
  CHECK(engine.is_valid(&why));
  CHECK(why.empty());
}

// Note [Stopping a materialization]: a host asked after each remat may stop the cascade.
struct StoppingHooks : EngineHooks {
  Engine* engine = nullptr;
  uint64_t stop_after = 0;  // remats before stop_remats says yes
  uint64_t remats = 0;
  TensorId nested = kNoId;  // materialized from inside the first remat when set
  Status nested_status;
  OpId refused = kNoId;  // may_recompute says no for it (Note [Refused remats])
  uint64_t throw_at = UINT64_MAX;  // the remat that throws (Note [Host exceptions])
  void on_compute(OpId, bool remat) override {
    if (!remat) return;
    if (remats + 1 == throw_at) throw std::runtime_error("out of memory in a kernel");
    ++remats;
    if (nested != kNoId) {
      const TensorId t = nested;
      nested = kNoId;
      nested_status = engine->materialize(t);
    }
  }
  bool stop_remats() override { return remats >= stop_after; }
  bool may_recompute(OpId op) override { return op != refused; }
};

// A chain of 100-byte storages; each op costs 10 ns. All dropped, so each needs all before.
std::vector<TensorId> dropped_chain(Engine& engine, int length) {
  std::vector<TensorId> chain;
  for (int i = 0; i < length; ++i) {
    std::vector<TensorId> in, out;
    if (!chain.empty()) in.push_back(chain.back());
    REQUIRE(engine.call(10, in, {{100, -1}}, out).ok());
    chain.push_back(out[0]);
  }
  for (TensorId t : chain) REQUIRE(engine.drop(engine.storage_of(t)));
  return chain;
}

// After a materialization was abandoned: the engine is consistent and nothing of `chain`
// is locked.
void check_unwound(const Engine& engine, const std::vector<TensorId>& chain) {
  std::string why;
  CHECK(engine.is_valid(&why));
  CHECK(why.empty());
  for (TensorId t : chain) CHECK(!engine.is_locked(engine.storage_of(t)));
}

// An engine with room for 100 such storages, asking `hooks`.
struct StoppingFixture {
  LogicalClock clock{1};
  StoppingHooks hooks;
  std::unique_ptr<Engine> engine;
  StoppingFixture() {
    EngineConfig config;
    config.budget_bytes = 100 * 100;
    config.debug = 3;
    engine =
        std::make_unique<Engine>(config, builtin_heuristics().make("dtr_eq", {}), clock, &hooks);
    hooks.engine = engine.get();
  }
};

TEST_CASE("the host can stop a cascade of remats between two of them", "[eviction]") {
  StoppingFixture f;
  Engine& engine = *f.engine;
  StoppingHooks& hooks = f.hooks;
  const std::vector<TensorId> chain = dropped_chain(engine, 21);
  hooks.stop_after = 5;
  Status s = engine.materialize(chain[20]);
  CHECK(s.code == StatusCode::thrash);
  CHECK(engine.stats().num_remats == 5);  // chain[0..4], then stopped
  CHECK(engine.is_defined(chain[4]));     // what was made stays
  CHECK(!engine.is_defined(chain[5]));
  CHECK(!engine.is_defined(chain[20]));
  check_unwound(engine, chain);  // every frame's locks undone
  // The host goes on: the next materialization starts from what the stopped one made.
  hooks.stop_after = UINT64_MAX;
  REQUIRE(engine.materialize(chain[20]).ok());
  CHECK(engine.stats().num_remats == 21);
}

TEST_CASE("a materialization nested in a remat is not stopped, the outer one is", "[eviction]") {
  StoppingFixture f;
  Engine& engine = *f.engine;
  StoppingHooks& hooks = f.hooks;
  const std::vector<TensorId> outer = dropped_chain(engine, 10);
  const std::vector<TensorId> inner = dropped_chain(engine, 3);
  hooks.stop_after = 0;  // armed from the start
  hooks.nested = inner[2];
  Status s = engine.materialize(outer[9]);
  CHECK(hooks.nested_status.ok());  // its caller is inside the engine: it runs to the end
  CHECK(engine.is_defined(inner[2]));
  CHECK(s.code == StatusCode::thrash);  // stopped after its first remat, outer[0]
  CHECK(engine.is_defined(outer[0]));
  CHECK(!engine.is_defined(outer[1]));
  CHECK(engine.stats().num_remats == 4);
  std::string why;
  CHECK(engine.is_valid(&why));
  CHECK(why.empty());
}

TEST_CASE("the host can refuse a remat before it runs", "[eviction]") {
  // Note [Refused remats]
  StoppingFixture f;
  Engine& engine = *f.engine;
  StoppingHooks& hooks = f.hooks;
  hooks.stop_after = UINT64_MAX;
  const std::vector<TensorId> chain = dropped_chain(engine, 8);
  hooks.refused = engine.op_of(chain[3]);
  Status s = engine.materialize(chain[6]);
  CHECK(s.code == StatusCode::refused);
  CHECK(std::string(s.name()) == "refused");
  CHECK(engine.stats().num_remats == 3);  // chain[0..2]; chain[3]'s op never ran
  CHECK(engine.is_defined(chain[2]));
  CHECK(!engine.is_defined(chain[3]));
  CHECK(!engine.is_defined(chain[6]));
  check_unwound(engine, chain);
  // Asked again, it refuses again; what does not need the op still comes back.
  CHECK(engine.materialize(chain[6]).code == StatusCode::refused);
  CHECK(engine.stats().num_remats == 3);
  hooks.refused = kNoId;
  REQUIRE(engine.materialize(chain[6]).ok());
  CHECK(engine.stats().num_remats == 7);
}

// Pins the storages it is told to keep when the engine asks to evict them.
struct KeepingHooks final : public EngineHooks {
  Engine* engine = nullptr;
  std::vector<StorageId> keep;
  std::vector<StorageId> asked;
  bool may_evict(StorageId s) override {
    asked.push_back(s);
    if (std::find(keep.begin(), keep.end(), s) == keep.end()) return true;
    REQUIRE(engine->pin(engine->storage_tensors(s)[0]).ok());
    return false;
  }
};

TEST_CASE("a storage the host says cannot be made again is pinned, not evicted", "[eviction]") {
  // Note [Unrecomputable victims]
  LogicalClock clock{1};
  KeepingHooks hooks;
  EngineConfig config;
  config.budget_bytes = 300;
  config.debug = 3;
  Engine engine(config, builtin_heuristics().make("lru", {}), clock, &hooks);
  hooks.engine = &engine;
  std::vector<TensorId> t(4), out;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(engine.call(10, {}, {{100, -1}}, out).ok());
    t[i] = out[0];
    out.clear();
  }
  // lru would take t[0], then t[1]: the host keeps both, so t[2] goes.
  hooks.keep = {engine.storage_of(t[0]), engine.storage_of(t[1])};
  REQUIRE(engine.call(10, {}, {{100, -1}}, out).ok());
  t[3] = out[0];
  out.clear();
  CHECK(hooks.asked == std::vector<StorageId>{engine.storage_of(t[0]), engine.storage_of(t[1]),
                                              engine.storage_of(t[2])});
  CHECK(engine.stats().num_unrecomputable == 2);
  CHECK(engine.stats().num_evictions == 1);
  CHECK(engine.is_defined(t[0]));
  CHECK(engine.is_pinned(engine.storage_of(t[0])));
  CHECK(engine.is_pinned(engine.storage_of(t[1])));
  CHECK(!engine.is_defined(t[2]));
  // Only t[3] is left to evict; once the host keeps it too, nothing is, and the request
  // fails with the kept storages counted as pinned.
  hooks.keep.push_back(engine.storage_of(t[3]));
  const Status s = engine.call(10, {}, {{100, -1}}, out);
  CHECK(s.code == StatusCode::oom);
  CHECK(engine.stats().num_unrecomputable == 3);
  CHECK(engine.stats().pinned_current == 300);
  std::string why;
  CHECK(engine.is_valid(&why));
  CHECK(why.empty());
}

TEST_CASE("an exception from a remat unwinds the materialization and its locks", "[eviction]") {
  // Note [Host exceptions]
  StoppingFixture f;
  Engine& engine = *f.engine;
  StoppingHooks& hooks = f.hooks;
  hooks.stop_after = UINT64_MAX;
  const std::vector<TensorId> chain = dropped_chain(engine, 8);
  hooks.throw_at = 4;  // chain[3]'s op
  CHECK_THROWS_WITH(engine.materialize(chain[6]), "out of memory in a kernel");
  CHECK(engine.stats().num_remats == 3);  // chain[0..2] stay made
  CHECK(engine.is_defined(chain[2]));
  CHECK(!engine.is_defined(chain[3]));
  check_unwound(engine, chain);
  // Each made storage can go again, and the next materialization starts from them.
  CHECK(engine.evictable_bytes() == 3 * 100);
  hooks.throw_at = UINT64_MAX;
  REQUIRE(engine.materialize(chain[6]).ok());
  CHECK(engine.stats().num_remats == 7);
}

TEST_CASE("lock_tensors undoes its locks when a remat throws", "[eviction]") {
  // Note [Host exceptions]: the live host locks an op's inputs this way.
  StoppingFixture f;
  Engine& engine = *f.engine;
  StoppingHooks& hooks = f.hooks;
  hooks.stop_after = UINT64_MAX;
  std::vector<TensorId> kept;
  REQUIRE(engine.call(10, {}, {{100, -1}}, kept).ok());  // defined: locked first
  const std::vector<TensorId> chain = dropped_chain(engine, 3);
  hooks.throw_at = 2;  // chain[1]'s op
  CHECK_THROWS(engine.lock_tensors({kept[0], chain[2]}));
  CHECK(engine.is_defined(chain[0]));
  check_unwound(engine, {kept[0], chain[0]});
  hooks.throw_at = UINT64_MAX;
  REQUIRE(engine.lock_tensors({kept[0], chain[2]}).ok());
  CHECK(engine.is_locked(engine.storage_of(kept[0])));
  engine.unlock_tensors({kept[0], chain[2]});
}

TEST_CASE("the registry lists every built-in policy and refuses unknown names", "[eviction][registry]") {
  const HeuristicRegistry& r = builtin_heuristics();
  for (const char* name :
       {"dtr", "dtr_eq", "dtr_local", "dtr_ancestors", "lru", "size", "msps", "random"})
    CHECK(r.find(name) != nullptr);
  try {
    r.make("dtr_eqq", {});
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("dtr_eqq") != std::string::npos);
    CHECK(std::string(e.what()).find("dtr_eq") != std::string::npos);
  }
}

TEST_CASE("each registry entry declares the needs its heuristic reports", "[eviction][registry]") {
  for (const HeuristicInfo& info : builtin_heuristics().entries()) {
    INFO(info.name);
    const auto h = info.make({});
    CHECK(h->needs() == info.needs);
    CHECK(std::string(h->name()) == info.name);
    CHECK(!info.summary.empty());
  }
}

TEST_CASE("the engine refuses a heuristic whose needs it cannot meet", "[eviction][registry]") {
  struct NeedsAddresses : Heuristic {
    std::string_view name() const override { return "needs_addresses"; }
    uint32_t needs() const override { return kFeatureAddressOrder | kFeatureStaleness; }
    double score(const Engine&, StorageId) override { return 0; }
  };
  HeuristicRegistry registry;
  registry.add({"needs_addresses", "test", kFeatureAddressOrder,
                [](const HeuristicParams&) { return std::make_unique<NeedsAddresses>(); }});
  LogicalClock clock;
  try {
    Engine engine(EngineConfig{}, registry.make("needs_addresses", {}), clock);
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("address_order") != std::string::npos);
  }
}

TEST_CASE("each heuristic picks the victim its formula says", "[eviction][heuristics]") {
  // Three unrelated storages. Clock: 11, 511, 611, then +5 = 616, so staleness is 605,
  // 105 and 5 ticks.
  auto victim = [](const std::string& policy) {
    LogicalClock clock{1};
    Engine engine(EngineConfig{}, builtin_heuristics().make(policy, {}), clock);
    std::vector<TensorId> out;
    engine.call(10, {}, {{100, -1}}, out);     // 0: cheap, small, stalest
    engine.call(500, {}, {{10000, -1}}, out);  // 1: expensive, biggest
    engine.call(100, {}, {{1000, -1}}, out);   // 2: freshest
    clock.advance(5);
    return engine.choose_victim();
  };
  CHECK(victim("lru") == 0);
  CHECK(victim("size") == 1);
  CHECK(victim("dtr_local") == 0);  // 10/(100*605) < 500/(10000*105) < 100/(1000*5)
  CHECK(victim("dtr") == 0);        // no evicted neighbours: same as dtr_local
  CHECK(victim("dtr_eq") == 0);
  CHECK(victim("msps") == 1);  // 500/10000 < 10/100 = 100/1000
  CHECK(victim("dtr_ancestors") == 0);  // no evicted ancestors: same as dtr_local
}

TEST_CASE("dtr_ancestors charges evicted ancestors, not evicted descendants",
          "[eviction][heuristics]") {
  // Note [Ancestors only]. a (cost 100) makes b (cost 1000), which is evicted but kept
  // referenced; c (cost 300) is unrelated; all 1000 bytes. dtr charges a for b, its evicted
  // child, and picks c; dtr_ancestors does not, and picks a, as msps (a has no evicted
  // ancestors) does.
  struct Run {
    StorageId victim, a, c;
  };
  auto run = [](const std::string& policy) {
    LogicalClock clock{1};
    Engine engine(EngineConfig{}, builtin_heuristics().make(policy, {}), clock);
    std::vector<TensorId> out;
    engine.call(100, {}, {{1000, -1}}, out);  // a
    const TensorId a = out.back();
    engine.call(1000, {a}, {{1000, -1}}, out);  // b, read a
    const TensorId b = out.back();
    engine.call(300, {}, {{1000, -1}}, out);  // c
    const TensorId c = out.back();
    REQUIRE(engine.drop(engine.storage_of(b)));
    clock.advance(1000);
    return Run{engine.choose_victim(), engine.storage_of(a), engine.storage_of(c)};
  };
  const Run dtr = run("dtr"), ancestors = run("dtr_ancestors"), msps = run("msps");
  // Staleness: c's is 1000 ticks; a's at least 1300 (b read it, then c ran for 300) and at
  // most 2300. dtr: (100 + 1000) / (1000 * 2300) > 300 / (1000 * 1000), so c.
  CHECK(dtr.victim == dtr.c);
  CHECK(ancestors.victim == ancestors.a);  // 100 / (1000 * 1300) < 300 / (1000 * 1000)
  CHECK(msps.victim == msps.a);            // 100 / 1000 < 300 / 1000
}

TEST_CASE("ties go to the storage that entered the pool last; zero costs to the first", "[eviction][heuristics]") {
  // Note [Tie-breaking]: DTR's simulator scans its pool list with `cost <= best` and stops at
  // the first zero cost.
  auto victim = [](const std::string& policy, uint64_t compute_ns) {
    LogicalClock clock{1};
    Engine engine(EngineConfig{}, builtin_heuristics().make(policy, {}), clock);
    std::vector<TensorId> out;
    for (int i = 0; i < 4; ++i) engine.call(compute_ns, {}, {{256, -1}}, out);
    clock.advance(3);
    return engine.choose_victim();
  };
  CHECK(victim("size", 7) == 3);       // equal sizes: the last to enter the pool
  CHECK(victim("dtr_local", 0) == 0);  // zero costs: the first
  LogicalClock clock{1};
  EngineConfig sampled;
  sampled.search = SearchMode::sample;
  Engine engine(sampled, builtin_heuristics().make("size", {}), clock);
  std::vector<TensorId> out;
  for (int i = 0; i < 100; ++i) engine.call(1, {}, {{uint64_t(64 + i), -1}}, out);
  engine.choose_victim();
  CHECK(engine.stats().candidates_scored == 10);  // ceil(sqrt(100))
}

TEST_CASE("dtr_eq charges a live storage made from a dropped one dead_lineage_factor times",
          "[eviction][heuristics]") {
  // Note [Live storages on dead lineage]. a (cost 100) makes b (cost 100); the program drops
  // a, which is evicted at once; c (cost 300) is unrelated; all 1000 bytes. Staleness: b's
  // is 1300 ticks or more (c ran for 300, then 1000 more), c's 1000. As simrd, b costs
  // (100 + 100) / (1000 * 1300) < 300 / (1000 * 1000): b goes. With the factor at 30 it
  // costs 30 times that, over c's: c goes.
  struct Run {
    StorageId victim, b, c;
    bool b_marked, c_marked, b_marked_before;
  };
  auto run = [](double factor) {
    LogicalClock clock{1};
    HeuristicParams params;
    params.dead_lineage_factor = factor;
    Engine engine(EngineConfig{}, builtin_heuristics().make("dtr_eq", params), clock);
    std::vector<TensorId> out;
    engine.call(100, {}, {{1000, -1}}, out);
    const TensorId a = out.back();
    engine.call(100, {a}, {{1000, -1}}, out);
    const TensorId b = out.back();
    const bool before = engine.on_dead_lineage(engine.storage_of(b));
    engine.release(a);
    REQUIRE_FALSE(engine.is_defined(a));  // eager eviction
    engine.call(300, {}, {{1000, -1}}, out);
    const TensorId c = out.back();
    clock.advance(1000);
    return Run{engine.choose_victim(),
               engine.storage_of(b),
               engine.storage_of(c),
               engine.on_dead_lineage(engine.storage_of(b)),
               engine.on_dead_lineage(engine.storage_of(c)),
               before};
  };
  const Run simrd = run(1), guarded = run(30);
  CHECK(simrd.victim == simrd.b);
  CHECK(guarded.victim == guarded.c);
  CHECK_FALSE(guarded.b_marked_before);  // a was still held
  CHECK(guarded.b_marked);
  CHECK_FALSE(guarded.c_marked);  // made from nothing
  // The factor applies to dtr_eq's score only where the storage is marked.
  HeuristicParams params;
  params.dead_lineage_factor = 30;
  DtrEqScores t(params);
  const TensorId a = t.op(100, {});
  const StorageId b = t.engine.storage_of(t.op(100, {a}));
  t.clock.advance(10);
  CHECK(t.h->score(t.engine, b) == t.plain->score(t.engine, b));
  t.engine.release(a);
  CHECK(t.h->score(t.engine, b) == 30 * t.plain->score(t.engine, b));
  t.check_cutoffs(b);
}

TEST_CASE("the dead-lineage mark follows releases, pins, discards and retirement",
          "[eviction][heuristics]") {
  // Note [Dropped parent count]: the mark is a count of edges from dropped parents, kept up
  // to date where they change; is_valid() recounts it and compares it with the walk.
  LogicalClock clock{1};
  Engine engine(EngineConfig{}, builtin_heuristics().make("dtr_eq", HeuristicParams{}), clock);
  std::vector<TensorId> out;
  auto op = [&](std::vector<TensorId> in) {
    REQUIRE(engine.call(10, in, {{1000, -1}}, out).ok());
    return out.back();
  };
  std::string why;
  auto marked = [&](TensorId t) {
    INFO(why);
    REQUIRE(engine.is_valid(&why));
    return engine.on_dead_lineage(engine.storage_of(t));
  };
  const TensorId a = op({}), p = op({});
  const TensorId b = op({a, p, a});  // reads a twice: two edges
  const TensorId c = op({b});
  REQUIRE(engine.pin(p).ok());
  CHECK_FALSE(marked(b));
  engine.release(p);  // pinned: never recomputed, so no dead lineage
  CHECK_FALSE(marked(b));
  engine.release(a);  // dropped: b is marked, c (made from b, held) is not
  CHECK(marked(b));
  CHECK_FALSE(marked(c));
  engine.release(b);  // b is dead itself: unmarked; c now on dead lineage
  CHECK_FALSE(marked(b));
  CHECK(marked(c));
  // A discard unpins p; its op and b's retire once b is discarded (nothing reads them).
  engine.discard(engine.storage_of(p));
  CHECK(marked(c));
  const OpId b_op = engine.op_of(b);
  engine.discard(engine.storage_of(b));
  CHECK(marked(c));  // the edge from b stays: c's op is not retired
  engine.release(c);
  engine.discard(engine.storage_of(c));  // c's op, then b's, then p's retire
  CHECK(engine.is_retired(b_op));
  CHECK(engine.is_valid(&why));
  INFO(why);
  const TensorId d = op({});
  CHECK_FALSE(marked(d));
}

TEST_CASE("dtr_eq charges a storage remade more than twice remake_factor times per remake",
          "[eviction][heuristics]") {
  // Note [Storages remade again and again]. a and b (cost 100, 1000 bytes each) are made
  // from nothing; a is dropped and remade `remakes` times, then b runs and 1000 ticks pass:
  // a is the staler (1100 ticks against 1000), so simrd's score evicts it. Remade 4 times
  // with the factor at 1, a costs 1 + (4 - 2) = 3 times that, over b's: b goes, unless a
  // period (a training step) ended after the remakes.
  struct Run {
    StorageId victim, a, b;
    uint32_t remakes;
  };
  auto run = [](double factor, int remakes, bool step_ends = false) {
    LogicalClock clock{1};
    HeuristicParams params;
    params.remake_factor = factor;
    Engine engine(EngineConfig{}, builtin_heuristics().make("dtr_eq", params), clock);
    std::vector<TensorId> out;
    engine.call(100, {}, {{1000, -1}}, out);
    const TensorId a = out.back();
    remake(engine, a, remakes);
    if (step_ends) engine.end_period();  // the count is per period (a training step)
    engine.call(100, {}, {{1000, -1}}, out);
    const TensorId b = out.back();
    clock.advance(1000);
    return Run{engine.choose_victim(), engine.storage_of(a), engine.storage_of(b),
               engine.storage_remakes(engine.storage_of(a))};
  };
  const Run simrd = run(0, 4), twice = run(1, 2), four = run(1, 4);
  CHECK(simrd.remakes == 4);
  CHECK(simrd.victim == simrd.a);
  CHECK(twice.victim == twice.a);  // the first two remakes are free
  CHECK(four.victim == four.b);
  CHECK(run(1, 0).remakes == 0);  // computed once: no remake
  const Run next_step = run(1, 4, true);
  CHECK(next_step.remakes == 0);
  CHECK(next_step.victim == next_step.a);

  // The score itself: 1 + factor * (remakes - 2) times simrd's, and cutoffs still hold.
  HeuristicParams params;
  params.remake_factor = 0.5;
  DtrEqScores t(params);
  const TensorId a = t.op(100, {});
  remake(t.engine, a, 6);
  t.clock.advance(10);
  const StorageId s = t.engine.storage_of(a);
  CHECK(t.h->score(t.engine, s) == 3 * t.plain->score(t.engine, s));  // 1 + 0.5 * (6 - 2)
  t.check_cutoffs(s);
}
