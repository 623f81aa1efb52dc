// dtr_eq_keep_heuristic.cpp: dtr_eq, with the engine keeping what the program drops near
// larger held storages (Note [Dropped inputs of large results] in eviction/engine.cpp) at
// ratio kKeepRatio while it scores: `auto`'s fourth candidate (Note [Keeping as a
// candidate]).
//
// Note [Keeping as a candidate]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Option keep_near_large pays where a large result is cheap to remake from small inputs the
// program has dropped, and only there: on resnet18 at batch 32 it moved the cliff from
// 0.58-0.60 of the peak towards 0.55 (live 1.475 -> 1.218 at 0.55x), but at 0.6x, where
// the step already fits, it cost 1.030 -> 1.096, and the GRUs remade more under it
// (docs/pytorch.md, "Option keep_near_large"). Whether it pays is a property of the
// program and the budget, which is what `auto`'s trial measures (Note [Policy trial] in
// auto_heuristic.cpp), so the keep is a policy of its own, dtr_eq's scores with the keep
// at 8 (the ratio measured there), and `auto` tries it after the other three. The engine
// asks the policy in force when the program drops a storage (Heuristic::keep_near_large),
// so under `auto` the keep follows the active candidate; what one candidate kept is let go
// at the period's end whoever is active then. The option, where set, overrides the policy.
// The policy is dtr_eq's own class with a keep ratio (make_dtr_eq), so its scores are
// dtr_eq's with no call in between.
#include <string>

#include "dtr/eviction/engine.h"
#include "eviction/heuristics/builtin.h"

namespace dtr {
namespace {
constexpr int kKeepRatio = 8;  // Note [Keeping as a candidate]
}  // namespace

HeuristicInfo dtr_eq_keep_heuristic_info() {
  return {"dtr_eq_keep",
          "dtr_eq, keeping a dropped storage to the step's end where a held one at most two ops "
          "downstream is " +
              std::to_string(kKeepRatio) +
              " times its size (as option keep_near_large:" + std::to_string(kKeepRatio) + ")",
          dtr_eq_heuristic_info().needs,
          [](const HeuristicParams& p) { return make_dtr_eq(p, kKeepRatio); }};
}
}  // namespace dtr
