// test_retire.cpp: the engine forgets what nothing can need (Note [Retiring] in
// eviction/engine.cpp), and reuses the ids only when the host says so.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "dtr/core/clock.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"

using namespace dtr;

namespace {

struct RetireHooks : EngineHooks {
  const Engine* engine = nullptr;
  std::vector<OpId> retired_ops;
  std::vector<StorageId> retired_storages;
  void on_retire(OpId op) override {
    // The records are still intact when the host hears of it.
    REQUIRE(!engine->op_outputs(op).empty());
    retired_ops.push_back(op);
  }
  void on_retire_storage(StorageId s) override { retired_storages.push_back(s); }
};

struct Host {
  LogicalClock clock{1};
  RetireHooks hooks;
  std::unique_ptr<Engine> engine;

  explicit Host(uint64_t budget, const std::string& policy = "dtr_eq") {
    EngineConfig config;
    config.budget_bytes = budget;
    config.debug = 3;  // every invariant, eq classes and neighbour counts too, after each call
    engine = std::make_unique<Engine>(config, builtin_heuristics().make(policy, {}), clock, &hooks);
    hooks.engine = engine.get();
  }
  TensorId op(uint64_t ns, std::vector<TensorId> in, uint64_t bytes, int32_t alias = -1) {
    std::vector<TensorId> out;
    REQUIRE(engine->call(ns, in, {{bytes, alias}}, out).ok());
    return out[0];
  }
  // What the torch host does with a tensor the program dropped and no lineage needs.
  void forget(TensorId t) {
    engine->release(t);
    engine->discard(engine->storage_of(t));
  }
};

}  // namespace

TEST_CASE("an op is retired once its outputs are discarded and no remembered op reads them",
          "[eviction][retire]") {
  Host h(UINT64_MAX);
  const TensorId a = h.op(1, {}, 100);
  const TensorId b = h.op(2, {a}, 100);
  const OpId op_a = h.engine->op_of(a), op_b = h.engine->op_of(b);
  const StorageId sa = h.engine->storage_of(a), sb = h.engine->storage_of(b);
  h.forget(a);
  CHECK_FALSE(h.engine->is_retired(op_a));  // b's op still reads it
  CHECK(h.hooks.retired_ops.empty());
  h.forget(b);
  // b's op goes, and with it the last reader of a: the walk goes backwards.
  CHECK(h.hooks.retired_ops == std::vector<OpId>{op_b, op_a});
  CHECK(h.hooks.retired_storages == std::vector<StorageId>{sb, sa});
  CHECK(h.engine->is_retired(op_a));
  CHECK(h.engine->stats().num_retired_ops == 2);
  CHECK(h.engine->storage_tensors(sa).empty());
  CHECK(h.engine->tensor_children(a).empty());
}

TEST_CASE("a storage read by a live op, or still referenced, is not retired", "[eviction][retire]") {
  Host h(UINT64_MAX);
  const TensorId a = h.op(1, {}, 100);
  const TensorId v = h.op(0, {a}, 0, /*alias=*/0);  // a view: a second tensor on a's storage
  const TensorId b = h.op(2, {v}, 100);
  h.engine->release(a);
  h.engine->discard(h.engine->storage_of(a));  // v still holds a reference
  CHECK(h.engine->stats().num_retired_ops == 0);
  h.engine->release(v);
  h.engine->discard(h.engine->storage_of(v));
  CHECK(h.engine->stats().num_retired_ops == 0);  // b reads the view
  h.forget(b);
  CHECK(h.engine->stats().num_retired_ops == 3);  // b's op, the view's, then a's
  CHECK(h.hooks.retired_storages.size() == 2);
}

TEST_CASE("retired ids come back only at reuse_retired", "[eviction][retire]") {
  Host h(UINT64_MAX);
  const TensorId a = h.op(1, {}, 100);
  const OpId op_a = h.engine->op_of(a);
  h.forget(a);
  REQUIRE(h.engine->is_retired(op_a));
  const TensorId b = h.op(1, {}, 100);  // the simulator never calls reuse_retired
  CHECK(h.engine->op_of(b) != op_a);
  CHECK(h.engine->num_ops() == 2);
  h.engine->reuse_retired();
  const TensorId c = h.op(1, {}, 100);
  CHECK(h.engine->op_of(c) == op_a);
  CHECK(c == a);
  CHECK(h.engine->num_ops() == 2);
  CHECK(h.engine->is_defined(c));
  CHECK_FALSE(h.engine->is_retired(op_a));
}

TEST_CASE("a retired storage's compute leaves its eq class", "[eviction][retire]") {
  // a -> b -> {c, d}: b and c evicted form one class; c retired leaves b's class alone.
  Host h(UINT64_MAX, "dtr_eq");
  const TensorId a = h.op(1, {}, 100);
  const TensorId b = h.op(2, {a}, 100);
  const TensorId c = h.op(4, {b}, 100);
  const TensorId d = h.op(8, {b}, 100);
  (void)d;
  const StorageId sa = h.engine->storage_of(a);
  REQUIRE(h.engine->drop(h.engine->storage_of(b)));
  REQUIRE(h.engine->drop(h.engine->storage_of(c)));
  CHECK(h.engine->eq_class_cost(sa) == 1 + 2 + 4);
  h.forget(c);
  CHECK(h.engine->stats().num_retired_ops == 1);
  CHECK(h.engine->eq_class_cost(sa) == 1 + 2);
}

TEST_CASE("a long run that discards what dies keeps the engine's tables bounded",
          "[eviction][retire]") {
  // Each step: a forward chain from a pinned parameter under a budget that forces
  // evictions, a backward that reads it again (remats), then everything dies. Debug
  // level 3 checks every invariant after each call, the eq classes' counts included.
  Host h(500, "dtr_eq");
  TensorId param = kNoId;
  REQUIRE(h.engine->constant(50, param).ok());
  constexpr int kSteps = 300;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<TensorId> acts;
    TensorId x = param;
    for (int i = 0; i < 6; ++i) acts.push_back(x = h.op(10 + i, {x}, 100));
    const TensorId view = h.op(0, {x}, 0, /*alias=*/0);
    TensorId grad = h.op(5, {view}, 100);
    for (int i = 5; i >= 0; --i) {
      const TensorId g = h.op(5, {grad, acts[i]}, 100);
      h.forget(grad);
      grad = g;
    }
    h.forget(view);
    for (TensorId t : acts) h.forget(t);
    h.forget(grad);
    h.engine->reuse_retired();
  }
  const Stats& stats = h.engine->stats();
  CHECK(stats.num_ops == 1 + kSteps * 14);
  CHECK(stats.num_evictions > 0);
  CHECK(stats.num_remats > 0);
  CHECK(stats.num_retired_ops == kSteps * 14);  // all but the parameter's
  CHECK(h.engine->num_ops() <= 16);
  CHECK(h.engine->num_storages() <= 16);
  CHECK(h.engine->live_bytes() == 50);
}
