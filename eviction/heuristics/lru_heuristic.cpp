// lru_heuristic.cpp: least recently used: the storage accessed longest ago goes first.
#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class LruHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "lru"; }
  uint32_t needs() const override { return kFeatureStaleness; }
  double score(const Engine& e, StorageId s) override { return double(e.last_access(s)); }
};
}  // namespace

HeuristicInfo lru_heuristic_info() {
  return {"lru", "least recently used first", kFeatureStaleness,
          [](const HeuristicParams&) { return std::make_unique<LruHeuristic>(); }};
}
}  // namespace dtr
