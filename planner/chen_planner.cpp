// chen_planner.cpp: Chen et al., "Training Deep Nets with Sublinear Memory Cost" (2016).
//
// Candidates are the forward nodes that are neither pinned nor backward, in execution order
// (on a DAG: its linearisation, Note [Chains from DAGs]); nodes with a late pin are
// recomputed in every plan but keep-all (Note [Late pins] in graph.cpp). Two families of plans:
//  - sqrt(n): keep every ceil(sqrt(n))-th candidate;
//  - the greedy of their Algorithm 2 for a segment budget b: walk the candidates adding up
//    sizes, and keep the node at which the running sum exceeds b (then restart the sum).
// As in the paper, b is searched over a grid (here geometric, from the smallest candidate
// size to their total, plus b = 0, which keeps everything); every plan goes through the
// common evaluator and the cheapest whose peak fits the budget wins.
#include <algorithm>
#include <cmath>

#include "dtr/planner/planner.h"
#include "planner/chain_view.h"

namespace dtr {

namespace {

constexpr size_t kGridPoints = 48;  // greedy segment budgets tried

class ChenPlanner final : public Planner {
 public:
  std::string name() const override { return "chen"; }

  PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions&) override {
    check_budget(graph, budget_bytes);
    std::vector<uint32_t> cand;
    uint64_t total = 0, smallest = UINT64_MAX;
    for (uint32_t i = 0; i < graph.size(); ++i)
      if (!graph.nodes[i].pinned && !graph.nodes[i].backward) {
        cand.push_back(i);
        total += graph.nodes[i].size_bytes;
        smallest = std::min<uint64_t>(smallest, std::max<uint64_t>(1, graph.nodes[i].size_bytes));
      }
    auto base = [&] {
      std::vector<NodeDecision> d(graph.size(), NodeDecision::keep);
      for (uint32_t x : cand) d[x] = NodeDecision::recompute;
      for (uint32_t i = 0; i < graph.size(); ++i)  // Note [Late pins]: made again at the pin
        if (graph.pinned_late(i)) d[i] = NodeDecision::recompute;
      return d;
    };
    auto attempt = [&](size_t i) -> std::vector<NodeDecision> {
      std::vector<NodeDecision> d = base();
      if (i == 0) {  // sqrt(n) segments
        const size_t k = std::max<size_t>(1, static_cast<size_t>(std::ceil(std::sqrt(double(cand.size())))));
        for (size_t c = k - 1; c < cand.size(); c += k) d[cand[c]] = NodeDecision::keep;
        return d;
      }
      if (i == 1) return std::vector<NodeDecision>(graph.size(), NodeDecision::keep);  // b = 0
      // Geometric grid from `smallest` to `total`.
      const double t = double(i - 2) / double(kGridPoints - 1);
      const double b = double(smallest) * std::pow(double(std::max(total, smallest)) / double(smallest), t);
      double run = 0;
      for (uint32_t x : cand) {
        run += double(graph.nodes[x].size_bytes);
        if (run > b) {
          d[x] = NodeDecision::keep;
          run = 0;
        }
      }
      return d;
    };
    if (cand.empty()) {
      PlanResult r;
      r.plan.decisions = base();
      return r;
    }
    return best_of_attempts(graph, budget_bytes, kGridPoints + 2, attempt);
  }
};

}  // namespace

std::unique_ptr<Planner> make_chen_planner() { return std::make_unique<ChenPlanner>(); }

}  // namespace dtr
