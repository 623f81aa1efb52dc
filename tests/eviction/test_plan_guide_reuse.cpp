// test_plan_guide_reuse.cpp: PlanGuide numbers storages itself (Note [Creation index] in
// eviction/plan_guide.cpp), so a host that retires storages and reuses their ids
// (Engine::reuse_retired, as the torch host does after each full collect) is guided
// exactly as one that never reuses an id.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "dtr/core/clock.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"
#include "dtr/eviction/plan_guide.h"

using namespace dtr;

namespace {

constexpr uint32_t kSteps = 4;
constexpr uint32_t kChain = 5;  // storages per step: x_0 .. x_4, x_i = f(x_{i-1})

// Sizes differ per step and position, so a guide that took a reused StorageId for a
// creation index would see a size mismatch (a departure) instead of silently misdropping.
uint64_t size_of(uint32_t step, uint32_t i) { return 1000 * (step + 1) + 10 * i; }

// Node 0: the pinned parameter; then per step the chain, x_0 reading the parameter. The plan
// drops x_i once x_{i+1} is made (its last use) and x_{kChain-1} once it is made (no user).
PlanHints chain_hints() {
  PlanHints h;
  h.nodes.push_back({});
  h.nodes[0].size_bytes = 64;
  std::vector<std::vector<uint32_t>> users(1);
  for (uint32_t step = 0; step < kSteps; ++step) {
    for (uint32_t i = 0; i < kChain; ++i) {
      const uint32_t k = static_cast<uint32_t>(h.nodes.size());
      const uint32_t dep = i == 0 ? 0 : k - 1;
      PlanHints::Node n;
      n.size_bytes = size_of(step, i);
      n.dep_count = 1;
      n.dep_sum = dep;
      n.last_use = i + 1 < kChain ? k + 1 : k;
      h.nodes.push_back(n);
      users.emplace_back();
      users[dep].push_back(k);
    }
  }
  for (const auto& u : users) {
    h.user_begin.push_back(static_cast<uint32_t>(h.users.size()));
    h.users.insert(h.users.end(), u.begin(), u.end());
  }
  h.user_begin.push_back(static_cast<uint32_t>(h.users.size()));
  h.source = "test";
  return h;
}

// Records, for each eviction, the creation index the guide gives the storage.
struct DropLog : EngineHooks {
  const PlanGuide* guide = nullptr;
  std::vector<uint32_t> dropped_nodes;
  void on_evict(StorageId s) override { dropped_nodes.push_back(guide->node_of(s)); }
};

struct Run {
  std::vector<uint32_t> dropped_nodes;
  uint64_t plan_drops = 0;
  uint64_t departures = 0;
  size_t storage_ids = 0;  // ids the engine ever handed out
  std::string departure;
};

Run run(const PlanHints& hints, bool reuse) {
  LogicalClock clock(1);
  DropLog log;
  PlanGuide guide(hints, &log);
  log.guide = &guide;
  EngineConfig config;
  config.debug = 3;
  Engine engine(config, builtin_heuristics().make("dtr_eq", {}), clock, &guide);
  guide.bind(engine);
  TensorId param;
  REQUIRE(engine.constant(64, param).ok());
  guide.end_op(engine, engine.op_of(param));
  for (uint32_t step = 0; step < kSteps; ++step) {
    std::vector<TensorId> chain;
    for (uint32_t i = 0; i < kChain; ++i) {
      std::vector<TensorId> out;
      const TensorId in = i == 0 ? param : chain.back();
      REQUIRE(engine.call(10, {in}, {{size_of(step, i), -1}}, out).ok());
      chain.push_back(out[0]);
      guide.end_op(engine, engine.op_of(out[0]));
    }
    // The program lets go of the step's tensors and nothing can read them again: the torch
    // host releases and discards them, and the engine retires their ops and storages.
    for (TensorId t : chain) {
      engine.release(t);
      engine.discard(engine.storage_of(t));
    }
    if (reuse) engine.reuse_retired();
  }
  Run r;
  r.dropped_nodes = log.dropped_nodes;
  r.plan_drops = engine.stats().num_plan_drops;
  r.departures = engine.stats().plan_departures;
  r.storage_ids = engine.num_storages();
  r.departure = guide.departure();
  return r;
}

}  // namespace

TEST_CASE("the plan guide follows a host that reuses retired storage ids",
          "[eviction][warm][retire]") {
  const PlanHints hints = chain_hints();
  const Run plain = run(hints, false);
  const Run reused = run(hints, true);
  INFO("plain: " << plain.departure << "; reused: " << reused.departure);
  // The host did reuse ids: storage k is not the k-th storage made.
  CHECK(plain.storage_ids == 1 + kSteps * kChain);
  CHECK(reused.storage_ids < plain.storage_ids);
  // Both runs stay on the plan and drop the same nodes, in the same order: every chain
  // storage but the last of each step is dropped by the guide at its last use (before the
  // program releases it); the releases evict the rest.
  CHECK(plain.departures == 0);
  CHECK(reused.departures == 0);
  CHECK(plain.plan_drops == kSteps * kChain);
  CHECK(reused.plan_drops == plain.plan_drops);
  REQUIRE(!plain.dropped_nodes.empty());
  CHECK(reused.dropped_nodes == plain.dropped_nodes);
  // The guide's indices are creation indices, whatever the ids were.
  std::vector<uint32_t> first_step(plain.dropped_nodes.begin(), plain.dropped_nodes.begin() + kChain);
  CHECK(first_step == std::vector<uint32_t>{1, 2, 3, 4, 5});
}

TEST_CASE("the plan guide forgets a retired storage's creation index", "[eviction][warm][retire]") {
  // Node 0: a parameter; nodes 1 and 2: two ops on it, each kept to its end.
  PlanHints hints;
  hints.nodes.resize(3);
  hints.nodes[0].size_bytes = 64;
  for (uint32_t k : {1u, 2u}) {
    hints.nodes[k].size_bytes = size_of(0, k);
    hints.nodes[k].dep_count = 1;
    hints.nodes[k].dep_sum = 0;
  }
  hints.user_begin = {0, 2, 2, 2};
  hints.users = {1, 2};
  LogicalClock clock(1);
  PlanGuide guide(hints);
  EngineConfig config;
  Engine engine(config, builtin_heuristics().make("dtr_eq", {}), clock, &guide);
  guide.bind(engine);
  TensorId param;
  REQUIRE(engine.constant(64, param).ok());
  guide.end_op(engine, engine.op_of(param));
  std::vector<TensorId> out;
  REQUIRE(engine.call(10, {param}, {{size_of(0, 1), -1}}, out).ok());
  guide.end_op(engine, engine.op_of(out[0]));
  const StorageId s = engine.storage_of(out[0]);
  CHECK(guide.node_of(s) == 1);
  engine.release(out[0]);
  engine.discard(s);  // retired: the guide hears on_retire_storage
  CHECK(guide.node_of(s) == PlanHints::kNever);
  engine.reuse_retired();
  // The next storage takes the retired id, and the guide numbers it as the next node.
  out.clear();
  REQUIRE(engine.call(10, {param}, {{size_of(0, 2), -1}}, out).ok());
  guide.end_op(engine, engine.op_of(out[0]));
  CHECK(engine.storage_of(out[0]) == s);
  CHECK(guide.node_of(s) == 2);
  CHECK(guide.on_plan());
}
