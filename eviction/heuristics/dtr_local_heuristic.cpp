// dtr_local_heuristic.cpp: h_DTR^local: compute(s) / (size(s) * staleness(s)).
// Ignores what evicting s would cost its evicted neighbours.
#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class DtrLocalHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "dtr_local"; }
  uint32_t needs() const override { return kFeatureStaleness; }
  double score(const Engine& e, StorageId s) override {
    return dtr_ratio(double(e.storage_compute(s)), double(e.storage_size(s)), double(e.staleness(s)));
  }
};
}  // namespace

HeuristicInfo dtr_local_heuristic_info() {
  return {"dtr_local", "h_DTR^local: compute / (size * staleness), no neighbourhood", kFeatureStaleness,
          [](const HeuristicParams&) { return std::make_unique<DtrLocalHeuristic>(); }};
}
}  // namespace dtr
