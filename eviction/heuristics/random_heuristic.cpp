// random_heuristic.cpp: a uniformly random victim (seeded, so runs repeat).
// Each score is a fresh uniform draw; the engine's choice rule then picks a random storage.
#include <random>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class RandomHeuristic final : public Heuristic {
 public:
  explicit RandomHeuristic(uint64_t seed) : rng_(seed ^ 0x9e3779b97f4a7c15ull) {}
  std::string_view name() const override { return "random"; }
  uint32_t needs() const override { return 0; }
  double score(const Engine&, StorageId) override { return uniform_(rng_) + 1e-300; }

 private:
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};
}  // namespace

HeuristicInfo random_heuristic_info() {
  return {"random", "uniformly random victim (seeded)", 0,
          [](const HeuristicParams& p) { return std::make_unique<RandomHeuristic>(p.seed); }};
}
}  // namespace dtr
