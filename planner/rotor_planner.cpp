// rotor_planner.cpp: the optimal dynamic program for heterogeneous chains (Beaumont, Eyraud-
// Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing for heterogeneous chains", 2019;
// the `rotor` package), in Griewank's chain model of graph.h's ChainSpec.
//
// Note [Rotor recurrence]
// ~~~~~~~~~~~~~~~~~~~~~~~
// C(s, t, m): least compute to run the reversals of steps t, t-1, ..., s (computing d_t..d_s)
// when state a_{s-1} is resident (outside m) and d_{t+1} is resident (inside m), with m memory
// units for everything else; at the end d_s is resident and nothing else of the range is.
//   s == t:  B_s needs d_{t+1} and makes d_s:       wd[t+1] + wd[s] <= m  ->  ub[s]
//   s <  t:  for a split k in (s, t]: advance from a_{s-1} to a_{k-1} freeing each
//            intermediate state (computing a_j needs wd[t+1] + wa[j-1] (j > s) + wa[j] <= m),
//            keep a_{k-1}, solve C(k, t, m - wa[k-1]), free a_{k-1}, then C(s, k-1, m):
//            sum(uf[s..k-1]) + C(k, t, m - wa[k-1]) + C(s, k-1, m).
// The answer is uf[0] + C(1, L, M) with M the budget minus a_0 (pinned). Memory is counted in
// units of ceil(M / memory_slots) bytes, every size rounded up: the schedule always fits;
// it is exactly optimal when the sizes are multiples of the unit (tests compare it with a
// brute-force search over all schedules). O(L^3 * slots) time, O(L^2 * slots) memory.
#include <algorithm>

#include "dtr/planner/planner.h"
#include "planner/chain_view.h"

namespace dtr {

namespace {

constexpr uint64_t kInf = UINT64_MAX / 4;

struct RotorTable {
  uint32_t L = 0, slots = 0;
  std::vector<uint64_t> cost;   // [(s-1)*L + (t-1)][m]
  std::vector<uint16_t> split;  // 0: base case, else k
  size_t at(uint32_t s, uint32_t t, uint32_t m) const {
    return ((size_t(s - 1) * L + (t - 1)) * (slots + 1)) + m;
  }
};

void emit(const RotorTable& tab, const std::vector<uint64_t>& wa, uint32_t s, uint32_t t, uint32_t m,
          std::vector<uint32_t>& order) {
  const uint32_t L = tab.L;
  while (true) {
    if (s == t) {
      order.push_back(L + (L - s));  // d_s
      return;
    }
    const uint32_t k = tab.split[tab.at(s, t, m)];
    for (uint32_t j = s; j <= k - 1; ++j) order.push_back(j);  // a_s..a_{k-1}
    emit(tab, wa, k, t, m - static_cast<uint32_t>(wa[k - 1]), order);
    t = k - 1;
  }
}

class RotorPlanner final : public Planner {
 public:
  std::string name() const override { return "rotor"; }

  PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions& options) override {
    check_budget(graph, budget_bytes);
    ChainSpec spec;
    if (as_training_chain(graph, &spec) && spec.stages() <= std::max<uint32_t>(options.max_stages, 2)) {
      const RotorSolution sol = rotor_solve(spec, budget_bytes, options.memory_slots);
      PlanResult r;
      r.plan.decisions.assign(graph.size(), NodeDecision::keep);
      if (!sol.feasible) {
        r.note = "no schedule fits at this memory discretisation";
        return r;
      }
      r.plan.schedule = schedule_with_frees(graph, sol.compute_order);
      for (uint32_t k = 1; k < spec.stages(); ++k) r.plan.decisions[k] = NodeDecision::recompute;
      for (uint32_t k : first_sweep_states(spec, sol.compute_order)) r.plan.decisions[k] = NodeDecision::keep;
      r.note = "training chain, exact DP";
      return r;
    }
    const ChainView view = make_chain_view(graph, options.max_stages);
    const uint64_t model = view.model_budget(budget_bytes, graph);
    // The chain model is approximate on a DAG: try it at shrinking model budgets and keep
    // the cheapest plan whose evaluated peak fits.
    static const double kScales[] = {1.0, 0.85, 0.7, 0.55, 0.4, 0.3, 0.2, 0.12, 0.06};
    PlanResult r = best_of_attempts(graph, budget_bytes, std::size(kScales), [&](size_t i) {
      const RotorSolution sol =
          rotor_solve(view.spec, static_cast<uint64_t>(double(model) * kScales[i]), options.memory_slots);
      if (!sol.feasible) return std::vector<NodeDecision>{};
      return decisions_keeping(graph, view, first_sweep_states(view.spec, sol.compute_order));
    });
    r.note = "DAG linearised into " + std::to_string(view.spec.stages()) + " stages";
    return r;
  }
};

}  // namespace

RotorSolution rotor_solve(const ChainSpec& spec, uint64_t budget_bytes, uint32_t memory_slots) {
  RotorSolution out;
  const uint32_t L = static_cast<uint32_t>(spec.stages());
  if (L == 0) return out;
  if (L > 60000 || double(L) * L * (std::max<uint32_t>(1, memory_slots) + 1) > 4e8)
    throw PlanError("rotor: a chain of " + std::to_string(L) + " stages with " +
                    std::to_string(memory_slots) + " memory levels needs too large a table; hint: "
                    "lower max_stages (the DAG is then grouped into fewer stages)");
  if (budget_bytes < spec.fwd_bytes[0]) return out;
  const uint64_t M = budget_bytes - spec.fwd_bytes[0];
  const uint32_t slots = std::max<uint32_t>(1, memory_slots);
  const uint64_t unit = std::max<uint64_t>(1, (M + slots - 1) / slots);
  const uint32_t S = static_cast<uint32_t>(std::min<uint64_t>(M / unit, slots));
  auto units = [&](uint64_t bytes) { return (bytes + unit - 1) / unit; };
  std::vector<uint64_t> wa(L), wd(L + 2, 0), uf(L), ub(L + 1, 0);
  for (uint32_t i = 0; i < L; ++i) {
    wa[i] = units(spec.fwd_bytes[i]);
    uf[i] = spec.fwd_ns[i];
    wd[i + 1] = units(spec.bwd_bytes[i]);
    ub[i + 1] = spec.bwd_ns[i];
  }
  RotorTable tab;
  tab.L = L;
  tab.slots = S;
  tab.cost.assign(size_t(L) * L * (S + 1), kInf);
  tab.split.assign(tab.cost.size(), 0);
  for (uint32_t len = 0; len < L; ++len) {
    for (uint32_t s = 1; s + len <= L; ++s) {
      const uint32_t t = s + len;
      uint64_t* row = &tab.cost[tab.at(s, t, 0)];
      uint16_t* arg = &tab.split[tab.at(s, t, 0)];
      if (len == 0) {
        const uint64_t need = wd[t + 1] + wd[s];
        for (uint64_t m = need; m <= S; ++m) row[m] = ub[s];
        continue;
      }
      uint64_t adv_cost = 0, adv_max = 0;
      for (uint32_t k = s + 1; k <= t; ++k) {
        const uint32_t j = k - 1;  // a_j is the last state the advance computes
        adv_cost += uf[j];
        adv_max = std::max(adv_max, (j > s ? wa[j - 1] : 0) + wa[j]);
        const uint64_t lo = std::max(wd[t + 1] + adv_max, wa[k - 1]);
        const uint64_t* upper = &tab.cost[tab.at(k, t, 0)];
        const uint64_t* lower = &tab.cost[tab.at(s, k - 1, 0)];
        for (uint64_t m = lo; m <= S; ++m) {
          const uint64_t a = upper[m - wa[k - 1]], b = lower[m];
          if (a >= kInf || b >= kInf) continue;
          const uint64_t c = adv_cost + a + b;
          if (c < row[m]) row[m] = c, arg[m] = static_cast<uint16_t>(k);
        }
      }
    }
  }
  const uint64_t best = tab.cost[tab.at(1, L, S)];
  if (best >= kInf) return out;
  out.feasible = true;
  out.compute_ns = uf[0] + best;
  out.compute_order.push_back(0);
  emit(tab, wa, 1, L, S, out.compute_order);
  return out;
}

std::unique_ptr<Planner> make_rotor_planner() { return std::make_unique<RotorPlanner>(); }

}  // namespace dtr
