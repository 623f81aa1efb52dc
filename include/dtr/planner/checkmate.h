// checkmate.h: the Checkmate MILP of Jain et al. (MLSys 2020) over a planner Graph, solved
// with CBC, and its LP relaxation with two-phase rounding (docs/planner-milp.md).
//
// Schedules are in Checkmate's stage form ("frontier-advancing"): stage t computes node t
// for the first time, after recomputing whatever earlier nodes it chooses, always in index
// (topological) order, each at most once per stage.
//   compute[t][i] (R): node i is computed in stage t, for i <= t; compute[t][t] is 1.
//   keep[t][i]    (S): node i is resident entering stage t, for i < t; keep[0] is empty.
// Memory accounting (Note [Checkmate memory accounting] in planner/checkmate_milp.cpp): while a
// node is computed its inputs and its output are resident, together with everything kept
// into the stage and every value computed earlier in the stage not yet freed; a value is
// freed right after its last use in the stage unless it is kept into the next one. A
// schedule's peak is the largest such total; its cost is the sum of compute_ns over R,
// except that the first computation of a node with same_op_as_prev is free (the op ran once
// for both outputs; plan_eval.h charges it the same way when the two computations are
// adjacent steps, which stage_schedule_steps produces whenever stage t recomputes nothing).
//
// Invariant: every schedule a solver here returns has passed evaluate_stage_schedule (valid, and
// peak <= budget when the status says a plan was found), so solver bugs cannot leak plans.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtr/planner/graph.h"
#include "dtr/planner/plan.h"

namespace dtr {

struct StageSchedule {
  std::vector<std::vector<uint8_t>> compute;  // R: compute[t] has t+1 entries
  std::vector<std::vector<uint8_t>> keep;     // S: keep[t] has t entries

  // Every node computed exactly once and kept while a later node reads it.
  static StageSchedule no_remat(const Graph& graph);
};

struct ScheduleCost {
  bool valid = false;        // dependencies and keeps consistent (error says why not)
  std::string error;
  uint64_t compute_ns = 0;   // sum of compute_ns over every (re)computation
  uint64_t peak_bytes = 0;   // Checkmate accounting, freeing each value at its last use
  uint64_t num_computes = 0; // number of (t, i) with R = 1 (n plus the recomputations)
};

ScheduleCost evaluate_stage_schedule(const Graph& graph, const StageSchedule& schedule);

// The same schedule as compute/free steps for a Plan (plan.h): per stage, the computations
// in index order, each followed by the frees the accounting makes after it; values kept into
// stage t but not into t+1 and never freed by a read are freed when stage t ends. Running
// these steps through plan_eval's evaluate_plan gives the same peak and compute.
std::vector<ScheduleStep> stage_schedule_steps(const Graph& graph, const StageSchedule& schedule);

// A Plan (plan.h) carrying stage_schedule_steps(schedule); a node computed more than once is
// `recompute`, the others `keep`; predicted_* from evaluate_stage_schedule.
Plan plan_from_stage_schedule(const Graph& graph, const StageSchedule& schedule,
                              const std::string& method);

// Phase two of Checkmate's two-phase rounding: given keep (S; pinned nodes are forced kept),
// the least compute (R) that makes the schedule valid: node t in stage t, every node that
// enters stage t+1 without being kept into stage t, and the inputs of everything computed
// that are not kept, closed backward. `schedule.compute` is overwritten.
void complete_compute_from_keep(const Graph& graph, StageSchedule& schedule);

// The MILP in solver-neutral form. Columns: R (lower triangle, diagonal fixed to 1),
// S (strictly lower triangle), U (continuous, [0, budget]), FREE (one per stage t and edge
// (i, k) with k <= t). Memory is in units of the gcd of node sizes, cost in units of the
// gcd of node costs, to keep CBC's numbers small.
struct CheckmateFormulation {
  std::vector<double> col_lb, col_ub, obj;
  std::vector<uint8_t> col_integer;
  std::vector<double> row_lb, row_ub;
  std::vector<int> elem_row, elem_col;  // constraint matrix as triplets
  std::vector<double> elem_value;
  std::vector<std::vector<int>> r_col, s_col;  // column of R[t][i], S[t][i]
  uint64_t memory_unit_bytes = 1;
  uint64_t cost_unit_ns = 1;
  double budget_units = 0;
  size_t num_r = 0, num_s = 0, num_u = 0, num_free = 0;
  // One run of a multi-output op in stage `stage` (Note [Shared runs in stage form] in
  // planner/checkmate_milp.cpp): the R columns of `outputs` (those the stage may
  // recompute) cost only a tie-break; the continuous column `col`, >= each of their R,
  // carries the op's cost.
  struct OpRun {
    uint32_t stage;
    std::vector<uint32_t> outputs;
    int col;
  };
  std::vector<OpRun> op_runs;

  size_t num_cols() const { return col_lb.size(); }
  size_t num_rows() const { return row_lb.size(); }
};

CheckmateFormulation build_checkmate_formulation(const Graph& graph, uint64_t budget_bytes);

enum class MilpStatus {
  kOptimal,     // proven optimal: no valid schedule within the budget costs less
  kFeasible,    // a schedule within the budget, not proven optimal (time limit reached)
  kInfeasible,  // proven: no schedule fits the budget
  kTimeLimit,   // time limit reached before any schedule was found; nothing proven
  kNoSolution,  // LP rounding: no rounding fit the budget (the MILP may still have one)
  kTooLarge,    // more nodes than CheckmateOptions::max_nodes: nothing built, nothing solved
};
const char* milp_status_name(MilpStatus status);

// Note [Formulation size guard] (planner/checkmate_milp.cpp): the largest graphs each
// method takes. Measured with --time-limit 5 on 2 shared cores (docs/planner-milp.md).
constexpr uint32_t kCheckmateMilpMaxNodes = 100;
constexpr uint32_t kCheckmateLpMaxNodes = 800;

struct CheckmateOptions {
  uint64_t budget_bytes = 0;
  // Larger graphs are refused with kTooLarge before the formulation is built; 0 means
  // the method's default (kCheckmateMilpMaxNodes or kCheckmateLpMaxNodes).
  uint32_t max_nodes = 0;
  double time_limit_s = 60.0;  // CBC's wall-clock limit for the whole solve (CbcMain "-sec")
  int log_level = 0;           // CBC's log level; 0 is silent
  // LP rounding: thresholds tried for S, and budget fractions tried when no threshold fits.
  std::vector<double> round_thresholds = {0.5, 0.6, 0.7, 0.8, 0.9, 0.4, 0.3, 0.2, 0.1, 0.05, 0.01};
  std::vector<double> lp_budget_fractions = {1.0, 0.9, 0.8, 0.7, 0.6, 0.5};
};

struct CheckmateResult {
  MilpStatus status = MilpStatus::kTimeLimit;
  StageSchedule schedule;       // empty unless kOptimal or kFeasible
  ScheduleCost cost;            // evaluate_stage_schedule(graph, schedule)
  double lower_bound_ns = 0;    // best proven bound on the optimal compute (LP value for -lp)
  double solve_s = 0;           // wall-clock seconds spent in the solver(s)
  size_t num_cols = 0, num_rows = 0, num_integer = 0;
  std::string detail;           // solver's words: what limit was hit, which threshold won

  bool has_plan() const { return status == MilpStatus::kOptimal || status == MilpStatus::kFeasible; }
};

// The LP relaxation of `f` with Clp, stopped after `max_seconds` of wall time: kOptimal
// with the optimal column values and objective (in f's cost units), kInfeasible (then so
// is the MILP), or kTimeLimit.
MilpStatus solve_checkmate_lp(const CheckmateFormulation& f, std::vector<double>* x,
                              double* objective, int log_level, double max_seconds);

// The node limit a method applies (opts.max_nodes, or its default), and the kTooLarge
// result for `graph` when it has more nodes: detail is "too large: N nodes > limit L; ...".
uint32_t checkmate_max_nodes(const CheckmateOptions& opts, bool relaxed);
bool checkmate_too_large(const Graph& graph, const CheckmateOptions& opts, bool relaxed,
                         CheckmateResult* result);

// The exact MILP (binary R, S, FREE) under CBC with opts.time_limit_s.
CheckmateResult solve_checkmate_milp(const Graph& graph, const CheckmateOptions& opts);
// The LP relaxation (Clp), then two-phase rounding: S by threshold, R by
// complete_compute_from_keep; the cheapest rounding whose peak fits the budget wins.
CheckmateResult solve_checkmate_lp_rounding(const Graph& graph, const CheckmateOptions& opts);

}  // namespace dtr
