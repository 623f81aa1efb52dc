// checkpoint_subset_planner.cpp: the checkpoint subset of a chain that minimises peak memory.
//
// Single-level checkpointing (Chen et al.'s execution): the first sweep keeps a subset S of
// the chain's states; the backward re-runs each segment between consecutive checkpoints once,
// keeps that segment's states and consumes them. Which S gives the least peak?
//
// Note [Checkpoint-subset DP]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In the chain model (ChainSpec), the segment (p, q] (checkpoint a_p, next checkpoint a_q or
// the end q = L) needs, above the checkpoints a_0..a_p:
//   seg(p, q) = max( forward sweep: wa[j-1] (if j-1 > p) + wa[j],       p < j <= q, j < L
//                    re-run:        wa[p+1..q-1] + wd[q+1],
//                    reversal d_i:  wa[p+1..i-1] + wd[i+1] + wd[i],         p < i <= q )
// and the peak of S is max over its segments of (checkpoint bytes up to p) + seg(p, q).
// Checkpoint bytes are a prefix sum, added to every later segment, so the suffix problem
//   g(L) = 0,   g(p) = wa[p] + min_{p < q <= L} max(seg(p, q), g(q))
// is exact and the least peak is g(0) (a_0 is the pinned input). seg(p, q) is computed
// directly, so the DP takes O(L^3) time (O(L) per pair); an O(L) variant is not included,
// since none was checked against this one.
//
// As a planner: when keeping everything fits the budget it does so (no overhead); else it
// returns the least-peak subset, whatever its compute. On a DAG it uses the chain view
// (Note [Chains from DAGs]) and the evaluator measures the real plan.
#include <algorithm>

#include "dtr/planner/planner.h"
#include "planner/chain_view.h"

namespace dtr {

std::vector<uint32_t> checkpoint_subset_min_peak(const ChainSpec& spec, uint64_t* peak) {
  const uint32_t L = static_cast<uint32_t>(spec.stages());
  std::vector<uint64_t> wa(spec.fwd_bytes), wd(L + 2, 0);
  for (uint32_t i = 0; i < L; ++i) wd[i + 1] = spec.bwd_bytes[i];
  auto seg = [&](uint32_t p, uint32_t q) {
    uint64_t worst = 0, states = 0;
    // Forward sweep up to and including the next checkpoint a_q (a_L does not exist).
    for (uint32_t j = p + 1; j <= std::min(q, L - 1); ++j)
      worst = std::max(worst, (j - 1 > p ? wa[j - 1] : 0) + wa[j]);
    for (uint32_t i = p + 1; i <= q; ++i) {  // states = wa[p+1..i-1]
      worst = std::max(worst, states + wd[i + 1] + wd[i]);
      if (i < q) states += wa[i];
    }
    return std::max(worst, states + wd[q + 1]);
  };
  std::vector<uint64_t> g(L + 1, 0);
  std::vector<uint32_t> next(L + 1, L);
  for (uint32_t p = L; p-- > 0;) {
    uint64_t best = UINT64_MAX;
    for (uint32_t q = p + 1; q <= L; ++q) {
      const uint64_t v = std::max(seg(p, q), g[q]);
      if (v < best) best = v, next[p] = q;
    }
    g[p] = wa[p] + best;
  }
  if (peak) *peak = g[0];
  std::vector<uint32_t> states;
  for (uint32_t p = next[0]; p < L; p = next[p]) states.push_back(p);
  return states;
}

namespace {

class CheckpointSubsetPlanner final : public Planner {
 public:
  std::string name() const override { return "checkpoint-subset"; }

  PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions& options) override {
    check_budget(graph, budget_bytes);
    const ChainView view = make_chain_view(graph, options.max_stages);
    PlanResult r = best_of_attempts(
        graph, budget_bytes, 2,
        [&](size_t i) {
          if (i == 0) return std::vector<NodeDecision>(graph.size(), NodeDecision::keep);
          return decisions_keeping(graph, view, checkpoint_subset_min_peak(view.spec, nullptr));
        },
        /*stop_at_first_feasible=*/true);
    r.note = "chain of " + std::to_string(view.spec.stages()) + " stages";
    return r;
  }
};

}  // namespace

std::unique_ptr<Planner> make_checkpoint_subset_planner() {
  return std::make_unique<CheckpointSubsetPlanner>();
}

}  // namespace dtr
