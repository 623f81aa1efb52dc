// size_heuristic.cpp: largest storage first (cost 1/size).
#include <limits>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class SizeHeuristic final : public Heuristic {
 public:
  std::string_view name() const override { return "size"; }
  uint32_t needs() const override { return 0; }
  double score(const Engine& e, StorageId s) override {
    const uint64_t size = e.storage_size(s);
    return size > 0 ? 1.0 / double(size) : std::numeric_limits<double>::infinity();
  }
};
}  // namespace

HeuristicInfo size_heuristic_info() {
  return {"size", "largest storage first", 0,
          [](const HeuristicParams&) { return std::make_unique<SizeHeuristic>(); }};
}
}  // namespace dtr
