// dtr_eq_heuristic.cpp: h_DTR^eq, the union-find approximation of h_DTR.
//
// cost(s) = (compute(s) + compute of each distinct eq class among s's evicted neighbours)
//           / (size(s) * staleness(s))
// Evicted storages that touch are merged into one class whose compute is the sum of its
// members'; a rematerialized member's compute is subtracted but classes never split, which
// is what makes it cheap (near O(1) per score) and approximate.
#include <limits>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class DtrEqHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "dtr_eq"; }
  uint32_t needs() const override { return kFeatureStaleness | kFeatureEqClasses; }
  double score(const Engine& e, StorageId s) override {
    return score_up_to(e, s, std::numeric_limits<double>::infinity());
  }
  // Note [Cutoff scores] in candidate_search.cpp: the classes only add to s's own compute,
  // so where the local ratio is already above the cutoff, the neighbours need no walk.
  double score_up_to(const Engine& e, StorageId s, double cutoff) override {
    const double size = double(e.storage_size(s)), staleness = double(e.staleness(s));
    const double local = dtr_ratio(double(e.storage_compute(s)), size, staleness);
    if (local > cutoff) return local;
    return dtr_ratio(double(e.eq_class_cost(s)), size, staleness);
  }
};
}  // namespace

HeuristicInfo dtr_eq_heuristic_info() {
  return {"dtr_eq", "h_DTR^eq: like dtr, neighbourhood approximated by union-find classes",
          kFeatureStaleness | kFeatureEqClasses,
          [](const HeuristicParams&) { return std::make_unique<DtrEqHeuristic>(); }};
}
}  // namespace dtr
