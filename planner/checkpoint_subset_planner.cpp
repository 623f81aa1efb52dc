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
// is exact and the least peak is g(0) (a_0 is the pinned input).
// checkpoint_subset_min_peak_cubic computes seg(p, q) directly: O(L^3) time (O(L) per pair).
// It is the reference the fast DP is tested against.
//
// Note [Checkpoint-subset in O(L log L)]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The same recurrence, solved exactly with three facts:
//  1. The re-run term is never the maximum: the reversal term at i = q is the same sum plus
//     wd[q] >= 0. So seg(p, q) = max(fwd(p, q), rev(p, q)), two running maxima over a window
//     that grows with q: seg(p, q) is nondecreasing in q.
//  2. Both are range maxima of arrays fixed in advance: with P[k] = wa[0..k-1],
//       rev(p, q) = max_{p < i <= q} c[i] - P[p+1],     c[i] = P[i] + wd[i] + wd[i+1],
//       fwd(p, q) = max(wa[p+1], max_{p+1 < j <= min(q, L-1)} wa[j-1] + wa[j]),
//     so a sparse table answers seg(p, q) in O(1).
//  3. min_q max(seg(p, q), g(q)) = min_q max(seg(p, q), m(q)) with m(q) = min g[p+1..q]:
//     for the q reaching the right side, the r <= q with g(r) = m(q) has seg(p, r) <=
//     seg(p, q), so it does as well on the left side; the converse holds as m <= g. Now
//     one side is nondecreasing and the other nonincreasing in q, so the minimum of their
//     max sits where they cross, found by bisection; m(q) is a range minimum over g, whose
//     sparse table grows leftwards as g(p) is computed (its entries only look right).
// So each p costs O(log L) and the DP O(L log L) time and space. It is not Hong et al.'s
// O(n) algorithm, which solves a revised objective fitted to their tracing; this one
// solves the cubic one's objective and gives its least peak (tests/planner, random chains).
//
// As a planner: when keeping everything fits the budget it does so (no overhead); else it
// returns the least-peak subset, whatever its compute. A graph that is exactly a training
// chain is solved as it is, at any length; on a DAG it uses the chain view (Note [Chains
// from DAGs]) and the evaluator measures the real plan.
#include <algorithm>

#include "dtr/planner/planner.h"
#include "planner/chain_view.h"

namespace dtr {

namespace {

// The byte arrays of the chain model, indexed as in Note [Checkpoint-subset DP].
struct SubsetModel {
  uint32_t L;
  std::vector<uint64_t> wa, wd;  // wa[0..L-1]; wd[0..L+1], wd[i] = d_i's bytes (0 outside)

  explicit SubsetModel(const ChainSpec& spec)
      : L(static_cast<uint32_t>(spec.stages())), wa(spec.fwd_bytes), wd(L + 2, 0) {
    for (uint32_t i = 0; i < L; ++i) wd[i + 1] = spec.bwd_bytes[i];
  }

  // seg(p, q) term by term, in O(q - p).
  uint64_t seg(uint32_t p, uint32_t q) const {
    uint64_t worst = 0, states = 0;
    // Forward sweep up to and including the next checkpoint a_q (a_L does not exist).
    for (uint32_t j = p + 1; j <= std::min(q, L - 1); ++j)
      worst = std::max(worst, (j - 1 > p ? wa[j - 1] : 0) + wa[j]);
    for (uint32_t i = p + 1; i <= q; ++i) {  // states = wa[p+1..i-1]
      worst = std::max(worst, states + wd[i + 1] + wd[i]);
      if (i < q) states += wa[i];
    }
    return std::max(worst, states + wd[q + 1]);
  }
};

// floor(log2(n)), n >= 1.
unsigned floor_log2(size_t n) {
  unsigned k = 0;
  while (n >>= 1) ++k;
  return k;
}

// Range maxima of a fixed array in O(1) after O(n log n) set-up.
class RangeMax {
 public:
  explicit RangeMax(std::vector<uint64_t> values) {
    levels_.push_back(std::move(values));
    const size_t n = levels_[0].size();
    for (size_t w = 1; 2 * w <= n; w *= 2) {
      const std::vector<uint64_t>& prev = levels_.back();
      std::vector<uint64_t> next(n - 2 * w + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + w]);
      levels_.push_back(std::move(next));
    }
  }
  // max of values[lo..hi], lo <= hi.
  uint64_t max(size_t lo, size_t hi) const {
    const unsigned k = floor_log2(hi - lo + 1);
    return std::max(levels_[k][lo], levels_[k][hi + 1 - (size_t{1} << k)]);
  }

 private:
  std::vector<std::vector<uint64_t>> levels_;
};

}  // namespace

std::vector<uint32_t> checkpoint_subset_min_peak_cubic(const ChainSpec& spec, uint64_t* peak) {
  const SubsetModel m(spec);
  const uint32_t L = m.L;
  std::vector<uint64_t> g(L + 1, 0);
  std::vector<uint32_t> next(L + 1, L);
  for (uint32_t p = L; p-- > 0;) {
    uint64_t best = UINT64_MAX;
    for (uint32_t q = p + 1; q <= L; ++q) {
      const uint64_t v = std::max(m.seg(p, q), g[q]);
      if (v < best) best = v, next[p] = q;
    }
    g[p] = m.wa[p] + best;
  }
  if (peak) *peak = L == 0 ? 0 : g[0];
  std::vector<uint32_t> states;
  if (L == 0) return states;
  for (uint32_t p = next[0]; p < L; p = next[p]) states.push_back(p);
  return states;
}

std::vector<uint32_t> checkpoint_subset_min_peak(const ChainSpec& spec, uint64_t* peak) {
  // Note [Checkpoint-subset in O(L log L)]
  const SubsetModel m(spec);
  const uint32_t L = m.L;
  std::vector<uint32_t> states;
  if (peak) *peak = 0;
  if (L == 0) return states;
  const std::vector<uint64_t>& wa = m.wa;
  const std::vector<uint64_t>& wd = m.wd;
  std::vector<uint64_t> prefix(L + 1, 0), c(L + 1, 0), pair(L, 0);
  for (uint32_t k = 0; k < L; ++k) prefix[k + 1] = prefix[k] + wa[k];
  for (uint32_t i = 1; i <= L; ++i) c[i] = prefix[i] + wd[i] + wd[i + 1];
  for (uint32_t j = 1; j < L; ++j) pair[j] = wa[j - 1] + wa[j];
  const RangeMax rev_max(std::move(c)), fwd_max(std::move(pair));
  auto seg = [&](uint32_t p, uint32_t q) {
    uint64_t worst = rev_max.max(p + 1, q) - prefix[p + 1];
    const uint32_t last = std::min(q, L - 1);
    if (p + 1 <= last) worst = std::max(worst, wa[p + 1]);
    if (p + 2 <= last) worst = std::max(worst, fwd_max.max(p + 2, last));
    return worst;
  };
  // argmin of g over [x, x + 2^k - 1] in level k, filled right to left (ties: leftmost).
  std::vector<uint64_t> g(L + 1, 0);
  std::vector<std::vector<uint32_t>> argmin(floor_log2(L + 1) + 1, std::vector<uint32_t>(L + 1));
  auto better = [&](uint32_t a, uint32_t b) { return g[b] < g[a] ? b : a; };
  auto settle = [&](uint32_t x) {  // g[x] is final: fill the levels starting at x
    argmin[0][x] = x;
    for (uint32_t k = 1; k < argmin.size() && x + (1u << k) - 1 <= L; ++k)
      argmin[k][x] = better(argmin[k - 1][x], argmin[k - 1][x + (1u << (k - 1))]);
  };
  auto min_at = [&](uint32_t lo, uint32_t hi) {  // argmin of g over [lo, hi]
    const unsigned k = floor_log2(hi - lo + 1);
    return better(argmin[k][lo], argmin[k][hi + 1 - (1u << k)]);
  };
  std::vector<uint32_t> next(L + 1, L);
  settle(L);
  for (uint32_t p = L; p-- > 0;) {
    // The first q where seg(p, q) >= m(q); the optimum is there or just before it.
    uint32_t lo = p + 1, hi = L + 1;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (seg(p, mid) >= g[min_at(p + 1, mid)]) hi = mid;
      else lo = mid + 1;
    }
    uint64_t best = UINT64_MAX;
    for (uint32_t q : {lo - 1, lo}) {
      if (q <= p || q > L) continue;
      const uint32_t r = min_at(p + 1, q);
      const uint64_t v = std::max(seg(p, r), g[r]);
      if (v < best) best = v, next[p] = r;
    }
    g[p] = wa[p] + best;
    settle(p);
  }
  if (peak) *peak = g[0];
  for (uint32_t p = next[0]; p < L; p = next[p]) states.push_back(p);
  return states;
}

uint64_t checkpoint_subset_peak(const ChainSpec& spec, const std::vector<uint32_t>& states) {
  const SubsetModel m(spec);
  if (m.L == 0) return 0;
  std::vector<uint32_t> bounds{0};
  for (uint32_t k : states) {
    if (k <= bounds.back() || k >= m.L)
      throw PlanError("checkpoint_subset_peak: states must increase within 1..L-1");
    bounds.push_back(k);
  }
  bounds.push_back(m.L);
  uint64_t peak = 0, below = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    below += m.wa[bounds[s]];
    peak = std::max(peak, below + m.seg(bounds[s], bounds[s + 1]));
  }
  return peak;
}

namespace {

class CheckpointSubsetPlanner final : public Planner {
 public:
  std::string name() const override { return "checkpoint-subset"; }

  PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions& options) override {
    check_budget(graph, budget_bytes);
    ChainSpec spec;
    if (as_training_chain(graph, &spec)) {
      PlanResult r = best_of_attempts(graph, budget_bytes, 1, [&](size_t) {
        std::vector<NodeDecision> d(graph.size(), NodeDecision::keep);
        for (uint32_t k = 1; k < spec.stages(); ++k) d[k] = NodeDecision::recompute;
        for (uint32_t k : checkpoint_subset_min_peak(spec, nullptr)) d[k] = NodeDecision::keep;
        return d;
      });
      r.note = "training chain of " + std::to_string(spec.stages()) + " stages, exact DP";
      return r;
    }
    const ChainView view = make_chain_view(graph, options.max_stages);
    PlanResult r = best_of_attempts(graph, budget_bytes, 1, [&](size_t) {
      return decisions_keeping(graph, view, checkpoint_subset_min_peak(view.spec, nullptr));
    });
    r.note = "DAG linearised into " + std::to_string(view.spec.stages()) + " stages";
    return r;
  }
};

}  // namespace

std::unique_ptr<Planner> make_checkpoint_subset_planner() {
  return std::make_unique<CheckpointSubsetPlanner>();
}

}  // namespace dtr
