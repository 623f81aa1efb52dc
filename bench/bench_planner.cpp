// bench_planner.cpp: solve time of each planning method against graph size.
//
// BM_PlanChain/<method>/<nodes>: a heterogeneous training chain of `nodes` nodes (half
// forward, half backward; seeded costs and sizes) at 30% of its no-remat peak.
// BM_PlanLog/<method>/<log>: the DTR logs' graphs at budget 0.5 of the trace's baseline peak.
// BM_CheckpointSubsetDP/<variant>/<stages>: the checkpoint-subset DP alone on a chain of
// `stages` stages, the O(L log L) one (0) against the O(L^3) reference (1), which is run up
// to 2000 stages only.
// Method 4, kusumoto-approx (the DAG planner), runs on chains of up to 2000 nodes and the
// first two logs only: its time grows about as the square of the forward nodes.
// Each iteration is run_planner(): the solve plus the common evaluator. Skips with a reason
// when a log is absent.
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "dtr/planner/planner.h"
#include "dtr/sim/replay.h"
#include "bench_support.h"

namespace {

const char* const kMethods[] = {"chen", "revolve", "rotor", "checkpoint-subset", "kusumoto-approx"};
const char* const kLogs[] = {"resnet32", "transformer", "lstm"};

dtr::ChainSpec bench_chain_spec(uint32_t stages) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> cost(1000, 9000), size(1 << 20, 8 << 20);
  dtr::ChainSpec s;
  for (uint32_t i = 0; i < stages; ++i) {
    s.fwd_ns.push_back(i == 0 ? 0 : cost(rng));
    s.fwd_bytes.push_back(size(rng));
    s.bwd_ns.push_back(2 * cost(rng));
    s.bwd_bytes.push_back(size(rng) / 4);
  }
  return s;
}

dtr::Graph bench_chain(uint32_t nodes) { return dtr::training_chain_graph(bench_chain_spec(nodes / 2)); }

void BM_PlanChain(benchmark::State& state) {
  const char* method = kMethods[state.range(0)];
  const dtr::Graph g = bench_chain(static_cast<uint32_t>(state.range(1)));
  const uint64_t peak = dtr::evaluate_plan(g, dtr::keep_all_plan(g)).peak_bytes;
  const uint64_t budget = std::max(dtr::largest_op_need(g), peak * 3 / 10);
  auto planner = dtr::make_planner(method);
  dtr::PlanResult r;
  for (auto _ : state) r = dtr::run_planner(*planner, g, budget, dtr::PlanOptions{});
  state.SetLabel(method);
  state.counters["feasible"] = r.feasible;
  state.counters["overhead"] = double(r.predicted_compute_ns) / double(g.total_compute_ns());
}
BENCHMARK(BM_PlanChain)
    ->ArgsProduct({{0, 1, 2, 3}, {100, 1000, 10000}})
    ->ArgsProduct({{4}, {100, 1000, 2000}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_PlanLog(benchmark::State& state) {
  const char* method = kMethods[state.range(0)];
  const std::string path = dtr::bench::find_log(kLogs[state.range(1)]);
  if (path.empty()) {
    state.SkipWithError("DTR log not found in DTR_LOG_DIR");
    return;
  }
  const dtr::Trace trace = dtr::read_trace(path);
  const dtr::Graph g = dtr::graph_from_trace(trace);
  const uint64_t budget = dtr::compute_baseline(trace).peak_bytes / 2;
  auto planner = dtr::make_planner(method);
  dtr::PlanResult r;
  for (auto _ : state) r = dtr::run_planner(*planner, g, budget, dtr::PlanOptions{});
  state.SetLabel(std::string(method) + " " + kLogs[state.range(1)]);
  state.counters["nodes"] = double(g.size());
  state.counters["feasible"] = r.feasible;
  state.counters["overhead"] = double(r.predicted_compute_ns) / double(g.total_compute_ns());
}
BENCHMARK(BM_PlanLog)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}})
    ->ArgsProduct({{4}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_CheckpointSubsetDP(benchmark::State& state) {
  const bool cubic = state.range(0) == 1;
  const uint32_t stages = static_cast<uint32_t>(state.range(1));
  if (cubic && stages > 2000) {
    state.SkipWithError("the O(L^3) DP is run up to 2000 stages");
    return;
  }
  const dtr::ChainSpec spec = bench_chain_spec(stages);
  uint64_t peak = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cubic ? dtr::checkpoint_subset_min_peak_cubic(spec, &peak)
                                   : dtr::checkpoint_subset_min_peak(spec, &peak));
  }
  state.SetLabel(cubic ? "O(L^3)" : "O(L log L)");
  state.counters["peak_MiB"] = double(peak) / double(1 << 20);
}
BENCHMARK(BM_CheckpointSubsetDP)
    ->ArgsProduct({{0, 1}, {100, 1000, 2000, 10000, 100000}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
