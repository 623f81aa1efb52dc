// dtr_heuristic.cpp: h_DTR (Kirisame et al., ICLR 2021).
//
// cost(s) = (compute(s) + compute of s's evicted neighbourhood, forward and backward)
//           / (size(s) * staleness(s))
// The evicted neighbourhood is every evicted storage reachable from s through evicted
// storages: what evicting s could force to be recomputed with it. Exact, found by a graph
// search per score (the engine's evicted_neighborhood_compute).
#include <limits>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class DtrHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "dtr"; }
  uint32_t needs() const override { return kFeatureStaleness | kFeatureNeighborhood; }
  double score(const Engine& e, StorageId s) override {
    return score_up_to(e, s, std::numeric_limits<double>::infinity());
  }
  double score_up_to(const Engine& e, StorageId s, double cutoff) override {
    return neighborhood_ratio(e, s, double(e.storage_size(s)) * double(e.staleness(s)),
                              /*descendants=*/true, cutoff);
  }
  // The neighbourhood only adds cost: the local ratio bounds the score from below.
  bool has_lower_bound() const override { return true; }
  double lower_bound(const Engine& e, StorageId s) override {
    return dtr_ratio(double(e.storage_compute(s)), double(e.storage_size(s)), double(e.staleness(s)));
  }
};
}  // namespace

HeuristicInfo dtr_heuristic_info() {
  return {"dtr", "h_DTR: (compute + evicted neighbourhood's compute) / (size * staleness)",
          kFeatureStaleness | kFeatureNeighborhood,
          [](const HeuristicParams&) { return std::make_unique<DtrHeuristic>(); }};
}
}  // namespace dtr
