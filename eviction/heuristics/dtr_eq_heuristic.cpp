// dtr_eq_heuristic.cpp: h_DTR^eq, the union-find approximation of h_DTR.
//
// cost(s) = (compute(s) + compute of each distinct eq class among s's evicted neighbours)
//           / (size(s) * staleness(s))
// Evicted storages that touch are merged into one class whose compute is the sum of its
// members'; a rematerialized member's compute is subtracted but classes never split, which
// is what makes it cheap (near O(1) per score) and approximate. A live storage made from one
// the program has dropped costs dead_lineage_factor times that (Note [Live storages on dead
// lineage]), and with option remake_factor one remade more than twice costs more again
// (Note [Storages remade again and again]); with the factors at 1 and 0 this is the score
// of DTR's simulator.
//
// Note [Live storages on dead lineage]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The eq classes price a storage's remat by what is evicted around it now. Where the op
// that made it read a storage the program has dropped, that remat goes through lineage
// that only grows: what the dropped storage was made from is dropped in turn as the
// program moves on, each drop an eager eviction, and the classes see it only after the
// storage was chosen. A 2000-layer residual MLP (width 64, batch 48, SGD) at 0.6 of its
// peak showed it: in the backward pass dtr_eq evicted 24 weight gradients, each made from
// an activation just dropped whose class was still small; by the optimizer step the
// forward pass behind each had been dropped too, and the step remade them through 25 938
// remats, 3 442 deep (overhead 1.785 in a replay of its trace, against 1.029 for
// dtr_ancestors, whose score walks the evicted ancestors). Live, the default `auto`, which
// spends the first step under dtr_eq, was stopped as a runaway in about half the runs.
// So a live storage whose op read an unpinned storage the program holds no more
// (Engine::on_dead_lineage) costs `dead_lineage_factor` times its score: it goes after
// other storages unless they cost that much more. Dead storages are not marked (nothing
// outside waits for them), nor are pinned inputs (never recomputed); the engine keeps a
// count per storage up to date as the program drops storages (Note [Dropped parent count]
// in eviction/engine.cpp), so reading the mark costs one load.
// A factor, not a last place, and dtr_eq's alone: the rule also marks storages that are
// right to evict early, and the LSTMs lost by it (which of theirs it marks was not looked
// into). In replays of sixteen traces at 0.4-0.7 of their peaks as the PyTorch host runs
// (docs/simulator.md, "Live storages on dead lineage"), a factor of 30 left `auto` level on
// average (+0.0001), between 0.100 lower (adam_foreach at 0.5) and 0.102 higher (the
// chunked LSTM at 0.5), and two thrashing cells finished; the MLP's trace at 1000 layers
// went from 1.076 to 1.029. A factor of 4 cost the chunked LSTM more (simulator defaults),
// and one applied to every policy's score more still: dtr_ancestors and msps, which walk
// the evicted ancestors, did not need it. A synthetic chain of the MLP's shape built on the
// engine alone did worse with it (docs/pytorch.md, "Live storages on dead lineage"). The
// simulator keeps 1 (simrd's h_DTR^eq); the PyTorch host defaults to 30
// (DTR_PYTORCH_DEFAULTS in include/dtr/core/options.h).
// The factor multiplies the local ratio too, so the cutoff (Note [Cutoff scores] in
// candidate_search.cpp) compares the product, and a score is computed once: where the
// local ratio alone is above the cutoff, the candidate loses whatever its factor (>= 1),
// and neither its mark nor its classes are looked up.
//
// Note [Storages remade again and again]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// h_DTR^eq prices a storage by what remaking it would cost once. A storage the policy has
// already dropped and remade several times has shown what that price misses: the program
// comes back to it, again and again. The GRU of tests/torch/scripts/layers.py (--model
// ctc) is the case: 1.13 runs nn.GRU on the CPU as one `mm` projecting every frame's
// input (18.75 MiB, 14 ms) and then ten small ops a time step reading a slice of it. In
// the backward pass each step's saved gates are remade through that step's ops, which read
// the projection; large and cheap per byte, it was dropped again between two such remakes,
// 18-26 times a training step, and those `mm`s were 750 of a replay's 1322 ms of remats
// at 0.7 of its peak. So with option remake_factor F > 0, a storage remade r > 2 times in
// one period costs 1 + F x (r - 2) times its score: it stays unless the others cost that
// much more. The count is per period (Engine::end_period: the host's optimizer step, a
// trace's ANNOTATE STEP), so what the program keeps across steps and remakes once a step is
// not charged more each step; counted over the whole run instead, one cell of the sweep
// below moved (dtr_eq on the GAN at 0.6: 5.324 against 5.258). The first two remakes are
// free: most storages that are remade at all are remade once (ctc's replay at 0.7: 3602
// remats of 3318 ops), and with the penalty from the first remake on, 13 cells of twelve
// traces without recurrence read up to 1.6% higher (4 lower).
// Measured (docs/simulator.md, "Storages remade again and again"), F = 1, in replays of 21
// PyTorch traces as the host runs: the ctc GRU under `auto` at 0.65 / 0.7 / 0.8 of its
// peak went from 2.050 / 1.707 / 1.465 to 1.487 / 1.358 / 1.127, and live its dtr_eq runs
// remade for 20-40% less; but thrashing cells of four others read up to 7% higher under
// `auto` (the packed GRU at 0.7, a GAN at 0.6, gradient accumulation at 0.8, the SGD GRU
// at 0.7) and up to 27% under dtr_eq, and over the 95 cells `auto` finished at 0.3-0.9 the
// mean moved by 0.001. So it is opt-in, 0 (simrd's h_DTR^eq) in the simulator and on the
// host, and the thrashing warning suggests it where the run uses dtr_eq or `auto`
// (eviction/thrash_watch.cpp). The count is the engine's (Engine::storage_remakes), also
// reset when the storage's id is reused. The factor is >= 1, so the cutoff shortcut above
// holds.
#include <limits>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
class DtrEqHeuristic final : public Heuristic {
 public:
  DtrEqHeuristic(double dead_lineage_factor, double remake_factor, double keep_ratio)
      : factor_(dead_lineage_factor), remake_factor_(remake_factor), keep_ratio_(keep_ratio) {}
  // With a keep ratio, dtr_eq_keep (Note [Keeping as a candidate] in dtr_eq_keep_heuristic.cpp).
  std::string_view name() const override { return keep_ratio_ > 0 ? "dtr_eq_keep" : "dtr_eq"; }
  double keep_near_large() const override { return keep_ratio_; }
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
    // Note [Live storages on dead lineage]
    double factor = factor_ > 1.0 && e.on_dead_lineage(s) ? factor_ : 1.0;
    // Note [Storages remade again and again]; off (the default), the count, outside the
    // record's first cache line, is not read.
    if (remake_factor_ > 0) {
      const uint32_t remakes = e.storage_remakes(s);
      if (remakes > kFreeRemakes) factor *= 1.0 + remake_factor_ * double(remakes - kFreeRemakes);
    }
    if (factor * local > cutoff) return factor * local;
    return factor * dtr_ratio(double(e.eq_class_cost(s)), size, staleness);
  }

 private:
  static constexpr uint32_t kFreeRemakes = 2;  // Note [Storages remade again and again]
  const double factor_;                        // Note [Live storages on dead lineage]
  const double remake_factor_;                 // Note [Storages remade again and again]
  const double keep_ratio_;                    // Heuristic::keep_near_large; 0 for dtr_eq
};
}  // namespace

std::unique_ptr<Heuristic> make_dtr_eq(const HeuristicParams& p, double keep_ratio) {
  return std::make_unique<DtrEqHeuristic>(p.dead_lineage_factor, p.remake_factor, keep_ratio);
}

HeuristicInfo dtr_eq_heuristic_info() {
  return {"dtr_eq", "h_DTR^eq: like dtr, neighbourhood approximated by union-find classes",
          kFeatureStaleness | kFeatureEqClasses,
          [](const HeuristicParams& p) { return make_dtr_eq(p, /*keep_ratio=*/0); }};
}
}  // namespace dtr
