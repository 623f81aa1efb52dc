// bench_eviction.cpp: time to choose one victim against the number of evictable storages.
//
// The pool holds n material, unlocked storages made by independent ops of varied size and
// age (so scores differ); each iteration asks the engine for the storage it would evict,
// which scores candidates with the policy and applies the choice rule. Full scan is linear
// in n; sampling scores ceil(sqrt(n)) candidates. Target: <= 2 us per choice at 1e5 with
// sampling (issue #2).
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "dtr/core/clock.h"
#include "dtr/eviction/engine.h"
#include "dtr/eviction/heuristic_registry.h"

namespace {

struct Pool {
  dtr::LogicalClock clock{1};
  std::unique_ptr<dtr::Engine> engine;

  Pool(size_t n, dtr::SearchMode mode, const char* policy, uint32_t sample_size = 0) {
    dtr::EngineConfig config;
    config.search = mode;
    config.sample_size = sample_size;
    engine = std::make_unique<dtr::Engine>(config, dtr::builtin_heuristics().make(policy, {}), clock);
    std::mt19937_64 rng(42);
    std::vector<dtr::TensorId> outs;
    for (size_t i = 0; i < n; ++i) {
      outs.clear();
      engine->call(1 + rng() % 1000, {}, {{(1 + rng() % 4096) * 256, -1}}, outs);
    }
  }
};

void choose(benchmark::State& state, dtr::SearchMode mode, const char* policy,
            uint32_t sample_size = 0) {
  Pool pool(static_cast<size_t>(state.range(0)), mode, policy, sample_size);
  for (auto _ : state) benchmark::DoNotOptimize(pool.engine->choose_victim());
  state.counters["pool"] = static_cast<double>(pool.engine->pool_size());
  state.counters["scored_per_choice"] = static_cast<double>(pool.engine->stats().candidates_scored) /
                                        static_cast<double>(pool.engine->stats().eviction_searches);
}

void BM_ChooseFullScan(benchmark::State& state) { choose(state, dtr::SearchMode::full, "dtr_eq"); }
void BM_ChooseSampled(benchmark::State& state) { choose(state, dtr::SearchMode::sample, "dtr_eq"); }
// A fixed sample of 32 (DTR_CONF="search:sample,sample:32"): constant work per choice.
void BM_ChooseSampled32(benchmark::State& state) { choose(state, dtr::SearchMode::sample, "dtr_eq", 32); }

// Note [Cutoff scores] in eviction/candidate_search.cpp: a pool of n storages, each the end
// of a chain of 63 evicted ones (what a thrashing run leaves behind), under msps, whose score
// searches the evicted ancestors. `cut` is the engine as it is; `full` the same policy with
// every score searched in full (score_up_to left at its default), in the same run.
void choose_in_chains(benchmark::State& state, bool cut) {
  dtr::LogicalClock clock{1};
  dtr::EngineConfig config;
  std::unique_ptr<dtr::Heuristic> msps = dtr::builtin_heuristics().make("msps", {});
  if (!cut) msps = dtr::with_full_scores(std::move(msps));
  dtr::Engine engine(config, std::move(msps), clock);
  std::mt19937_64 rng(42);
  std::vector<dtr::TensorId> outs;
  for (int64_t chain = 0; chain < state.range(0); ++chain) {
    std::vector<dtr::TensorId> in;
    for (int i = 0; i < 64; ++i) {
      outs.clear();
      engine.call(1 + rng() % 1000, in, {{(1 + rng() % 64) * 4096, -1}}, outs);
      if (!in.empty()) engine.drop(engine.storage_of(in[0]));
      in = {outs[0]};
    }
  }
  for (auto _ : state) benchmark::DoNotOptimize(engine.choose_victim());
  state.counters["pool"] = static_cast<double>(engine.pool_size());
  state.counters["scored_per_choice"] = static_cast<double>(engine.stats().candidates_scored) /
                                        static_cast<double>(engine.stats().eviction_searches);
}
void BM_ChooseInChainsCut(benchmark::State& state) { choose_in_chains(state, true); }
void BM_ChooseInChainsFull(benchmark::State& state) { choose_in_chains(state, false); }

BENCHMARK(BM_ChooseInChainsCut)
    ->RangeMultiplier(10)
    ->Range(100, 10000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChooseInChainsFull)
    ->RangeMultiplier(10)
    ->Range(100, 10000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChooseFullScan)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChooseSampled)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChooseSampled32)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMicrosecond);

}  // namespace
