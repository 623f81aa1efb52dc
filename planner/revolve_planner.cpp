// revolve_planner.cpp: Griewank's binomial checkpointing (Griewank & Walther, "Algorithm 799:
// revolve", ACM TOMS 2000).
//
// Model: l steps of equal cost and size, c checkpoint slots, the initial state stored in one
// of them. Reversing steps s+1..e from state s: advance j steps, store that state, reverse
// the upper part with one slot less, restore state s and reverse the lower part with all
// slots. The least number of forward steps is t(l, c) = r*l - C(c+r, c+1), r the least with
// C(c+r, c) >= l, and the split j must satisfy t(l, c) = j + t(l-j, c-1) + t(j, c).
//
// On a graph: a training chain (as_training_chain) runs the schedule exactly, as a compute
// order whose frees come from schedule_with_frees(); any other graph goes through its chain
// view (Note [Chains from DAGs]), keeping the states stored in the first sweep. Sizes are not
// uniform in practice, so the number of slots is searched: the most slots whose evaluated
// peak fits the budget (fewer slots never use less compute).
#include <algorithm>

#include "dtr/planner/planner.h"
#include "planner/chain_view.h"

namespace dtr {

namespace {

constexpr uint64_t kInf = UINT64_MAX;

// C(n, k), saturating at UINT64_MAX.
uint64_t binomial(uint64_t n, uint64_t k) {
  if (k > n) return 0;
  k = std::min(k, n - k);
  unsigned __int128 r = 1;
  for (uint64_t i = 0; i < k; ++i) {
    r = r * (n - i) / (i + 1);
    if (r > UINT64_MAX) return UINT64_MAX;
  }
  return static_cast<uint64_t>(r);
}

// The split of Walther's revolve (numforw/"check" rule), checked against t(); else a scan.
uint64_t revolve_split(uint64_t l, uint64_t c) {
  if (c == 1) return l - 1;
  const uint64_t target = revolve_forward_steps(l, c);
  auto total = [&](uint64_t j) {
    const uint64_t a = revolve_forward_steps(l - j, c - 1), b = revolve_forward_steps(j, c);
    return (a == kInf || b == kInf) ? kInf : j + a + b;
  };
  uint64_t reps = 0, range = 1;
  while (range < l) {
    ++reps;
    range = range * (reps + c) / reps;
  }
  const uint64_t bino1 = range * reps / (c + reps);
  const uint64_t bino2 = c > 1 ? bino1 * c / (c + reps - 1) : 1;
  const uint64_t bino3 = c == 1 ? 0 : (c > 2 ? bino2 * (c - 1) / (c + reps - 2) : 1);
  const uint64_t bino4 = bino2 * (reps - 1) / c;
  const uint64_t bino5 = c < 3 ? 0 : (c > 3 ? bino3 * (c - 2) / reps : 1);
  uint64_t j;
  if (l <= bino1 + bino3)
    j = bino4;
  else if (l >= range - bino5)
    j = bino1;
  else
    j = l - bino2 - bino3;
  if (j < 1) j = 1;
  if (j < l && total(j) == target) return j;
  for (j = 1; j < l; ++j)
    if (total(j) == target) return j;
  return l - 1;  // unreachable when t() is right
}

void reverse_range(uint32_t s, uint32_t e, uint32_t c, std::vector<RevolveAction>& out) {
  using K = RevolveAction::Kind;
  while (e - s > 1) {
    const uint32_t j = static_cast<uint32_t>(revolve_split(e - s, c));
    out.push_back({K::advance, s, s + j});
    if (e - (s + j) > 1) {
      out.push_back({K::store, s + j, 0});
      reverse_range(s + j, e, c - 1, out);
    } else {
      out.push_back({K::reverse, 0, e});
    }
    out.push_back({K::restore, s, 0});
    e = s + j;  // the lower part, with all c slots
  }
  out.push_back({K::reverse, 0, e});
}

// Compute order on training_chain_graph for a revolve schedule over L stages.
std::vector<uint32_t> revolve_compute_order(uint32_t L, const std::vector<RevolveAction>& actions) {
  std::vector<uint32_t> order{0};
  for (const RevolveAction& a : actions) {
    if (a.kind == RevolveAction::Kind::advance)
      for (uint32_t k = a.from + 1; k <= a.to; ++k) order.push_back(k);
    else if (a.kind == RevolveAction::Kind::reverse)
      order.push_back(L + (L - a.to));  // d_i
  }
  return order;
}

class RevolvePlanner final : public Planner {
 public:
  std::string name() const override { return "revolve"; }

  PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions& options) override {
    check_budget(graph, budget_bytes);
    ChainSpec spec;
    if (as_training_chain(graph, &spec)) return plan_chain(graph, spec, budget_bytes);
    const ChainView view = make_chain_view(graph, options.max_stages);
    const uint32_t L = static_cast<uint32_t>(view.spec.stages());
    // Slots from L (store every state) down; the first whose plan fits is the cheapest.
    std::vector<uint32_t> slots;
    for (uint32_t c = L; c >= 1; c = c > 8 ? c * 3 / 4 : c - 1) slots.push_back(c);
    PlanResult r = best_of_attempts(
        graph, budget_bytes, slots.size(),
        [&](size_t i) {
          const auto order = revolve_compute_order(L, revolve_schedule(L, slots[i]));
          return decisions_keeping(graph, view, first_sweep_states(view.spec, order));
        },
        /*stop_at_first_feasible=*/true);
    r.note = "DAG linearised into " + std::to_string(L) + " stages";
    return r;
  }

 private:
  static PlanResult plan_chain(const Graph& graph, const ChainSpec& spec, uint64_t budget_bytes) {
    const uint32_t L = static_cast<uint32_t>(spec.stages());
    auto schedule_for = [&](uint32_t c) {
      return schedule_with_frees(graph, revolve_compute_order(L, revolve_schedule(L, c)));
    };
    // Binary search for the most slots that fit (peak grows with the slots).
    uint32_t lo = 1, hi = L;
    if (evaluate_schedule(graph, schedule_for(hi)).peak_bytes > budget_bytes) {
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo + 1) / 2;
        if (evaluate_schedule(graph, schedule_for(mid)).peak_bytes <= budget_bytes)
          lo = mid;
        else
          hi = mid - 1;
      }
    } else {
      lo = hi;
    }
    PlanResult r;
    r.plan.schedule = schedule_for(lo);
    r.plan.decisions.assign(graph.size(), NodeDecision::keep);
    for (uint32_t k = 1; k < L; ++k) r.plan.decisions[k] = NodeDecision::recompute;
    for (uint32_t k : first_sweep_states(spec, revolve_compute_order(L, revolve_schedule(L, lo))))
      r.plan.decisions[k] = NodeDecision::keep;
    r.note = "training chain of " + std::to_string(L) + " steps, " + std::to_string(lo) +
             " slots: " + std::to_string(revolve_forward_steps(L, lo)) + " forward steps";
    return r;
  }
};

}  // namespace

uint64_t revolve_forward_steps(uint64_t l, uint64_t c) {
  if (l <= 1) return 0;
  if (c == 0) return kInf;
  uint64_t r = 0;
  while (binomial(c + r, c) < l) ++r;
  const uint64_t b = binomial(c + r, c + 1);
  return r * l - b;
}

std::vector<RevolveAction> revolve_schedule(uint32_t l, uint32_t c) {
  std::vector<RevolveAction> out;
  if (l == 0) return out;
  if (c == 0) throw PlanError("revolve: reversing " + std::to_string(l) + " steps needs at least 1 slot");
  out.push_back({RevolveAction::Kind::store, 0, 0});
  reverse_range(0, l, c, out);
  return out;
}

std::unique_ptr<Planner> make_revolve_planner() { return std::make_unique<RevolvePlanner>(); }

}  // namespace dtr
