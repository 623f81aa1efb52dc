// msps_heuristic.cpp: MSPS (Peng et al., Capuchin): memory saving per second.
// cost(s) = (compute(s) + compute of s's evicted ancestors) / size(s): what recomputing s
// would cost, per byte it frees. No staleness.
#include <limits>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class MspsHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "msps"; }
  uint32_t needs() const override { return kFeatureNeighborhood; }
  double score(const Engine& e, StorageId s) override {
    return score_up_to(e, s, std::numeric_limits<double>::infinity());
  }
  double score_up_to(const Engine& e, StorageId s, double cutoff) override {
    return neighborhood_ratio(e, s, double(e.storage_size(s)), /*descendants=*/false, cutoff);
  }
  bool has_lower_bound() const override { return true; }
  double lower_bound(const Engine& e, StorageId s) override {
    const uint64_t size = e.storage_size(s);
    return size ? double(e.storage_compute(s)) / double(size) : std::numeric_limits<double>::infinity();
  }
};
}  // namespace

HeuristicInfo msps_heuristic_info() {
  return {"msps", "MSPS: (compute + evicted ancestors' compute) / size", kFeatureNeighborhood,
          [](const HeuristicParams&) { return std::make_unique<MspsHeuristic>(); }};
}
}  // namespace dtr
