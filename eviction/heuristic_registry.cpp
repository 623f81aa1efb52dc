// heuristic_registry.cpp: the registry and its table of built-in heuristics.
#include "dtr/eviction/heuristic_registry.h"

#include <limits>

#include "dtr/core/options.h"
#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {

double dtr_ratio(double cost, double size_bytes, double staleness_ticks) {
  const double denom = size_bytes * staleness_ticks;
  return denom > 0 ? cost / denom : std::numeric_limits<double>::infinity();
}

// Note [Cutoff scores] in candidate_search.cpp. The sums run in the order the scores always
// used (local, descendants, ancestors), so an uncut score has the same bits as before.
double neighborhood_ratio(const Engine& e, StorageId s, double denom, bool descendants,
                          double cutoff) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!(denom > 0)) return kInf;
  double cost = double(e.storage_compute(s));
  bool stopped = false;
  auto add = [&](bool forward) {
    if (stopped) return;
    // A sum above `stop` puts the score above cutoff (up to rounding, checked below).
    const double room = cutoff * denom - cost;
    const uint64_t stop = !(room < 1.8e19) ? UINT64_MAX : room > 0 ? uint64_t(room) : 0;
    const uint64_t found = e.evicted_neighborhood_compute(s, forward, stop);
    cost += double(found);
    stopped = found > stop;
  };
  if (descendants) add(/*forward=*/true);
  add(/*forward=*/false);
  const double score = cost / denom;
  if (!stopped || score > cutoff) return score;
  return neighborhood_ratio(e, s, denom, descendants, kInf);  // cut at a rounding edge
}

namespace {
// Everything forwarded to the inner heuristic but score_up_to, left at its default.
class FullScores final : public Heuristic {
 public:
  explicit FullScores(std::unique_ptr<Heuristic> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  uint32_t needs() const override { return inner_->needs(); }
  double score(const Engine& e, StorageId s) override { return inner_->score(e, s); }
  bool has_lower_bound() const override { return inner_->has_lower_bound(); }
  double lower_bound(const Engine& e, StorageId s) override { return inner_->lower_bound(e, s); }
  void on_period(const PeriodCost& cost) override { inner_->on_period(cost); }
  void on_remat(const PeriodCost& so_far) override { inner_->on_remat(so_far); }
  double keep_near_large() const override { return inner_->keep_near_large(); }
  std::string status() const override { return inner_->status(); }

 private:
  std::unique_ptr<Heuristic> inner_;
};
}  // namespace

TrialMode parse_trial_mode(const std::string& text) {
  if (text == "replay") return TrialMode::replay;
  if (text == "live") return TrialMode::live;
  throw ConfigError("dtr: option trial is '" + text +
                    "'; valid values: replay, live (DTR_CONF trial:live)");
}

std::unique_ptr<Heuristic> with_full_scores(std::unique_ptr<Heuristic> inner) {
  return std::make_unique<FullScores>(std::move(inner));
}

void HeuristicRegistry::add(HeuristicInfo info) {
  for (HeuristicInfo& e : entries_) {
    if (e.name == info.name) {
      e = std::move(info);
      return;
    }
  }
  entries_.push_back(std::move(info));
}

const HeuristicInfo* HeuristicRegistry::find(const std::string& name) const {
  for (const HeuristicInfo& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::string HeuristicRegistry::names() const {
  std::string out;
  for (const std::string& name : names_without(0)) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::vector<std::string> HeuristicRegistry::names_without(uint32_t features) const {
  std::vector<std::string> out;
  for (const HeuristicInfo& e : entries_)
    if (!(e.needs & features)) out.push_back(e.name);
  return out;
}

const HeuristicInfo& HeuristicRegistry::require(const std::string& name) const {
  const HeuristicInfo* info = find(name);
  if (!info)
    throw ConfigError("dtr: unknown policy '" + name + "'; valid policies: " + names());
  return *info;
}

std::unique_ptr<Heuristic> HeuristicRegistry::make(const std::string& name,
                                                   const HeuristicParams& params) const {
  return require(name).make(params);
}

const HeuristicRegistry& builtin_heuristics() {
  static const HeuristicRegistry registry = [] {
    HeuristicRegistry r;
    for (auto info : {dtr_eq_heuristic_info, dtr_eq_keep_heuristic_info, dtr_heuristic_info,
                      dtr_local_heuristic_info, dtr_ancestors_heuristic_info, msps_heuristic_info,
                      lru_heuristic_info, size_heuristic_info, random_heuristic_info,
                      coop_heuristic_info, auto_heuristic_info})
      r.add(info());
    return r;
  }();
  return registry;
}

}  // namespace dtr
