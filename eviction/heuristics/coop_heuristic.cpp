// coop_heuristic.cpp: Coop's contiguity-aware eviction (Zhang et al., NeurIPS 2023).
//
// Coop evicts a window of adjacent blocks rather than single storages, so that the memory
// it frees coalesces into one block; the engine's window search does that (Note [Window
// search] in candidate_search.cpp) for any policy that declares kFeatureAddressOrder. This
// file only scores one storage; a window costs the sum of its storages' scores:
//   cost(s) = (compute(s) + compute of each distinct eq class among s's evicted neighbours)
//             / staleness(s)
// Size is left out of the ratio because the window search already weighs bytes: a window
// must free enough of them, and among those the cheapest wins. Staleness keeps storages
// that were just touched (staleness 0: +inf, never evicted when anything else will do).
#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class CoopHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "coop"; }
  uint32_t needs() const override {
    return kFeatureStaleness | kFeatureEqClasses | kFeatureAddressOrder;
  }
  double score(const Engine& e, StorageId s) override {
    return dtr_ratio(double(e.eq_class_cost(s)), 1.0, double(e.staleness(s)));
  }
};
}  // namespace

HeuristicInfo coop_heuristic_info() {
  return {"coop",
          "Coop: evict the cheapest window of adjacent blocks (compute / staleness, eq classes); "
          "needs the caching allocator",
          kFeatureStaleness | kFeatureEqClasses | kFeatureAddressOrder,
          [](const HeuristicParams&) { return std::make_unique<CoopHeuristic>(); }};
}
}  // namespace dtr
