// dtr_ancestors_heuristic.cpp: h_DTR with MSPS's neighbourhood (Note [Ancestors only]).
//
// cost(s) = (compute(s) + compute of s's evicted ancestors) / (size(s) * staleness(s))
// The evicted ancestors are the evicted storages reachable from s through evicted parents:
// what remaking s after evicting it would run, as msps counts them; the staleness divisor
// is h_DTR's. Exact, by the same graph search as dtr (evicted_neighborhood_compute).
//
// Note [Ancestors only]
// ~~~~~~~~~~~~~~~~~~~~~
// h_DTR also charges the evicted *descendants* of s: those remakes would need s too. In
// replays of training traces that term steers the policy away from storages whose
// children were evicted and toward ones that are dearer to lose: in a trace of the 3-layer
// transformer at 0.7 of its peak, dtr_eq evicts 15 softmax outputs, and remaking each
// reruns the attention scores' baddbmm, where msps evicts dropout products that a `mul`
// remakes. Dropping the descendants' term and keeping staleness did better than both on
// the PyTorch traces and on two of DTR's three logs, and slightly worse on ResNet-32
// (docs/simulator.md, "dtr_ancestors"). Measured, not derived: a policy to compare, not
// the default.
#include <limits>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class DtrAncestorsHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "dtr_ancestors"; }
  uint32_t needs() const override { return kFeatureStaleness | kFeatureNeighborhood; }
  double score(const Engine& e, StorageId s) override {
    return score_up_to(e, s, std::numeric_limits<double>::infinity());
  }
  double score_up_to(const Engine& e, StorageId s, double cutoff) override {
    return neighborhood_ratio(e, s, double(e.storage_size(s)) * double(e.staleness(s)),
                              /*descendants=*/false, cutoff);
  }
  // The ancestors only add cost: the local ratio bounds the score from below.
  bool has_lower_bound() const override { return true; }
  double lower_bound(const Engine& e, StorageId s) override {
    return dtr_ratio(double(e.storage_compute(s)), double(e.storage_size(s)),
                     double(e.staleness(s)));
  }
};
}  // namespace

HeuristicInfo dtr_ancestors_heuristic_info() {
  return {"dtr_ancestors",
          "h_DTR with msps's neighbourhood: (compute + evicted ancestors' compute) / (size * "
          "staleness)",
          kFeatureStaleness | kFeatureNeighborhood,
          [](const HeuristicParams&) { return std::make_unique<DtrAncestorsHeuristic>(); }};
}
}  // namespace dtr
