// checkmate_lp_rounding.cpp: Checkmate's approximation for graphs too large for the exact
// MILP (Jain et al. 2020, section 5): solve the LP relaxation of the same formulation, then
// round in two phases.
//   Phase 1: S[t][i] = 1 iff the LP's S*[t][i] >= threshold (pinned nodes always kept).
//   Phase 2: R is the least compute that makes S valid (complete_compute_from_keep).
// Rounding ignores memory, so a rounded schedule can overrun the budget. Note [Rounding
// search] says how we look for one that fits. Every candidate is measured with
// evaluate_stage_schedule; the cheapest that fits wins (ties: lower peak).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "dtr/planner/checkmate.h"

namespace dtr {

// Note [Rounding search]
// ~~~~~~~~~~~~~~~~~~~~~~
// The paper sweeps deterministic thresholds (and randomized rounding) and, when the rounded
// plan overruns memory, re-solves the LP against a smaller budget so that its fractional
// keeps leave room for the rounding error. We do the same deterministically: for each budget
// fraction in CheckmateOptions::lp_budget_fractions (1.0 first) we solve the LP at
// fraction * budget and try every threshold, measuring each rounded schedule against the real
// budget, and keep the cheapest over all fractions (a smaller budget sometimes rounds to a
// cheaper plan). Lower thresholds keep more (less compute, more memory), higher ones keep
// less. The LP value at the full budget is a lower bound on the MILP optimum and is reported
// as such. If the LP at the full budget is infeasible, so is the MILP (status kInfeasible);
// if no rounding fits, the status is kNoSolution. The time limit bounds the LP solves (Clp's
// own limit): when it runs out the best rounding so far stands, or the status is kTimeLimit.

CheckmateResult solve_checkmate_lp_rounding(const Graph& graph, const CheckmateOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  CheckmateResult res;
  // Note [Formulation size guard]: nothing is built for a graph above the limit.
  if (checkmate_too_large(graph, opts, /*relaxed=*/true, &res)) return res;
  res.status = MilpStatus::kNoSolution;
  bool have_bound = false;
  std::ostringstream tried;
  for (double fraction : opts.lp_budget_fractions) {
    const auto budget = static_cast<uint64_t>(std::floor(fraction * static_cast<double>(opts.budget_bytes)));
    const CheckmateFormulation f = build_checkmate_formulation(graph, budget);
    if (!have_bound) {
      res.num_cols = f.num_cols();
      res.num_rows = f.num_rows();
    }
    std::vector<double> x;
    double objective = 0;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const MilpStatus lp =
        solve_checkmate_lp(f, &x, &objective, opts.log_level, opts.time_limit_s - elapsed);
    if (lp == MilpStatus::kTimeLimit) {
      // The limit bounds the whole method: stop with the best rounding found so far.
      if (!res.has_plan()) {
        res.status = MilpStatus::kTimeLimit;
        std::ostringstream d;
        d << "the LP relaxation was not solved within " << opts.time_limit_s << " s ("
          << f.num_cols() << " columns); raise --time-limit or plan a coarser graph";
        res.detail = d.str();
      }
      break;
    }
    if (lp != MilpStatus::kOptimal) {
      if (!have_bound) {  // the full budget's LP: a proof of infeasibility
        res.status = MilpStatus::kInfeasible;
        res.detail = "the LP relaxation is infeasible, so no schedule fits the budget";
        break;
      }
      tried << " LP infeasible at " << fraction << "x;";
      continue;
    }
    if (!have_bound) {
      res.lower_bound_ns = objective * static_cast<double>(f.cost_unit_ns);
      have_bound = true;
    }
    const size_t n = graph.size();
    bool found = false;
    for (double threshold : opts.round_thresholds) {
      StageSchedule s;
      s.keep.resize(n);
      for (size_t t = 0; t < n; ++t) {
        s.keep[t].assign(t, 0);
        for (size_t i = 0; i < t; ++i) s.keep[t][i] = x[f.s_col[t][i]] >= threshold;
      }
      complete_compute_from_keep(graph, s);
      const ScheduleCost c = evaluate_stage_schedule(graph, s);
      if (!c.valid) {
        throw PlanError("checkmate-lp: a rounded schedule fails evaluation (" + c.error +
                        "); this is a bug in complete_compute_from_keep");
      }
      if (c.peak_bytes > opts.budget_bytes) continue;
      const bool better = !res.has_plan() || c.compute_ns < res.cost.compute_ns ||
                          (c.compute_ns == res.cost.compute_ns && c.peak_bytes < res.cost.peak_bytes);
      if (better) {
        res.schedule = std::move(s);
        res.cost = c;
        res.status = MilpStatus::kFeasible;
        std::ostringstream d;
        d << "LP at " << fraction << "x budget, S rounded at threshold " << threshold;
        res.detail = d.str();
      }
      found = true;
    }
    if (!found) tried << " no threshold fits at " << fraction << "x;";
  }
  if (res.status == MilpStatus::kNoSolution) res.detail = "no rounding fits the budget:" + tried.str();
  res.solve_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace dtr
