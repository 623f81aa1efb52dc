// bench_replay.cpp: replay throughput on the ResNet-32 log and the whole paper sweep.
//
// BM_ReplayResNet32: events per second replaying the ResNet-32 log at budget 0.3 with
// dtr_eq (full scan and sampling). BM_PaperSweep: wall time of the 3 logs x 7 policies x
// 9 budgets grid on all cores, the job DTR's Python simulator takes minutes for (target
// < 10 s on a 2-core machine). Both skip when the logs are absent.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "dtr/sim/replay.h"
#include "dtr/sim/sweep.h"
#include "bench_support.h"

namespace {

void replay_resnet(benchmark::State& state, dtr::SearchMode mode) {
  const std::string path = dtr::bench::find_log("resnet32");
  if (path.empty()) {
    state.SkipWithError("ResNet-32 log not found in DTR_LOG_DIR");
    return;
  }
  const dtr::Trace trace = dtr::read_trace(path);
  const dtr::Baseline baseline = dtr::compute_baseline(trace);
  dtr::ReplayOptions options;
  options.policy = "dtr_eq";
  options.search = mode;
  options.budget = dtr::Budget::parse("0.3");
  uint64_t evictions = 0;
  for (auto _ : state) {
    dtr::ReplayResult r = dtr::replay(trace, baseline, options);
    evictions = r.stats.num_evictions;
    benchmark::DoNotOptimize(r.overhead);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * trace.events.size()));
  state.counters["events"] = static_cast<double>(trace.events.size());
  state.counters["evictions"] = static_cast<double>(evictions);
}

void BM_ReplayResNet32Full(benchmark::State& state) { replay_resnet(state, dtr::SearchMode::full); }
void BM_ReplayResNet32Sampled(benchmark::State& state) { replay_resnet(state, dtr::SearchMode::sample); }
BENCHMARK(BM_ReplayResNet32Full)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReplayResNet32Sampled)->Unit(benchmark::kMillisecond);

void paper_sweep(benchmark::State& state, dtr::SearchMode mode) {
  dtr::SweepSpec spec;
  for (const char* prefix : {"resnet32", "transformer", "lstm"}) {
    const std::string path = dtr::bench::find_log(prefix);
    if (path.empty()) {
      state.SkipWithError("a DTR log is missing in DTR_LOG_DIR");
      return;
    }
    spec.trace_paths.push_back(path);
  }
  spec.policies = {"dtr_eq", "dtr", "dtr_local", "msps", "lru", "size", "random"};
  spec.ratios = dtr::parse_ratio_list("0.1:0.9:0.1");
  spec.base.search = mode;
  spec.progress = false;
  for (auto _ : state) benchmark::DoNotOptimize(dtr::run_sweep(spec).size());
  state.counters["replays"] = 3 * 7 * 9;
}

void BM_PaperSweepFull(benchmark::State& state) { paper_sweep(state, dtr::SearchMode::full); }
void BM_PaperSweepSampled(benchmark::State& state) { paper_sweep(state, dtr::SearchMode::sample); }
BENCHMARK(BM_PaperSweepFull)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();
BENCHMARK(BM_PaperSweepSampled)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

}  // namespace
