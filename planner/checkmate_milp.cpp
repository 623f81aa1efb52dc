// checkmate_milp.cpp: Checkmate's stage-form schedules, their evaluation, the MILP of Jain et
// al. (MLSys 2020) in solver-neutral form, and its exact solve with CBC.
//
// Design: one formulation (build_checkmate_formulation) serves both the exact MILP here and
// the LP relaxation in checkmate_lp_rounding.cpp. Whatever a solver returns is read back as
// a StageSchedule and re-checked by evaluate_stage_schedule, which implements the same memory
// accounting independently of the solver (Note [Checkmate memory accounting]); a solution
// that fails the check is reported as an error, never returned as a plan.
// Lock rules: none; CBC is driven through CbcSolverUsefulData, not CbcMain's static state,
// so two solves on two threads do not share parameters.
#include "dtr/planner/checkmate.h"
#include "dtr/planner/planner.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>

#include "CbcModel.hpp"
#include "CbcSolver.hpp"
#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"

namespace dtr {

// Note [Checkmate memory accounting]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Following the paper (section 4.4) and its reference implementation:
//   U[t][0]   = sum_i M_i S[t][i] + M_0 R[t][0]
//   U[t][k+1] = U[t][k] + M_{k+1} R[t][k+1] - sum_{(i,k) in E} M_i FREE[t][i][k]
//   U[t][k]  <= budget for every k <= t
//   U[t][k] + W_k R[t][k] <= budget where node k's op holds scratch W_k while it runs
//                            (Note [Op workspace in plans] in plan_eval.cpp)
// FREE[t][i][k] = R[t][k] * (1 - S[t+1][i]) * prod_{j in users(i), k < j <= t} (1 - R[t][j]):
// i is freed right after its last reader in stage t unless kept into stage t+1 (in the last
// stage there is no S[t+1]). So while node k+1 is computed, its inputs (which cannot have been
// freed: k+1 still reads them) and its output are counted, and everything freed after node k
// is not. Two consequences fix the convention: a node's computation needs its inputs plus
// its output within the budget (Checkmate's linear graph of 17 nodes is infeasible at
// budget 2 because node 9 reads nodes 7 and 8), and a value no later node in the stage reads
// is not freed until the stage ends (it still counts against the stage's later steps).
// Beyond the paper: R[t][k] = 0 for k > t (frontier advancing), so U[t][k] and FREE[t][.][k]
// are only built for k <= t; the steps after t could only free memory. Pinned nodes are kept
// in every stage after their pin starts until it ends, never freed and never recomputed
// there (R fixed to 0; Notes [Late pins in stage form] and [Pin ends in stage form]).
// Duplicate reads of one input count as one edge.

// Note [Late pins in stage form]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A late pin (Note [Late pins] in graph.cpp) starts at stage q = pin_stage(i) > i: the
// zeroed gradient buffers that zero_grad makes at the start of a step and the next backward
// pass writes into. Stage form used to pin them from their computation, which held them
// through the whole forward pass: on a 2-step ResNet-18 trace recorded from PyTorch, 43 MiB
// of zeros at the start of the second backward, so no stage-form plan (checkmate, kusumoto)
// went under 119 MiB where the decisions-based chain methods reached 103 MiB. Now
// S[t][i] is fixed to 1 only for t > q (Graph::kept_pinned) and node i has no FREE column
// only from stage q on (Graph::never_freed); before, it is an ordinary node that a schedule
// may drop and recompute. Stage q itself needs it resident: R[q][i] + S[q][i] >= 1 (a row
// of its own, since a pin at the last stage has no S[q+1]); complete_compute_from_keep
// makes it there if it is not kept, and evaluate_stage_schedule checks it.

// Note [Pin ends in stage form]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A pin that ends at stage e (Note [Pin ends] in graph.cpp: a DISCARDed CONSTANT) keeps
// S[t][i] fixed to 1 only for t <= e (Graph::kept_pinned), so the memory rows stop counting
// it after e. Within stage e it is held until node e itself is computed, the stage's last
// computation: stage_schedule_steps writes no free of it before, and evaluate_stage_schedule
// counts it to there (Graph::held_through_stage; until 2026-12-07 both freed it after a
// remat before node e, which the evaluator of explicit schedules refused as "frees a pinned
// node"). The MILP's memory rows still give it a FREE column at e: without it CBC found no
// plan in 40 s on tests/data/planner/two_steps.trace at 820 B, where with it it proves one
// optimal in 7 s, and that plan runs at 820 B. A solution whose rows free such a node early
// is measured by the evaluator, which reports its true peak, so it is never said to fit
// where it does not. R
// stays fixed to 0 after the pin starts, also after e (Graph::never_recomputed): the node
// cannot be made again, and nothing needs it then, since e is at or after the last use of
// everything that may be recomputed through it; a later recomputation of one of its users
// would find it neither kept nor computed, which the dependency rows forbid.

// Note [Shared runs in stage form]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Stage t computes its nodes in node order, and the outputs of one op are adjacent nodes,
// so whichever of an op's outputs the stage computes come one right after another: one run
// of the op (Note [One run of a multi-output op] in plan_eval.cpp). So the objective
// charges the run, not the outputs: the outputs' R columns cost only a tie-break and a
// continuous column Y[t][op] in [0, 1] with Y >= R[t][j] for each output j < t carries the
// op's cost; minimising drives Y to max_j R[t][j], 0 or 1 at integer R, and the MILP's
// objective is the evaluation's compute (to within the tie-breaks, less than one cost
// unit in all). Node t's own first computation in stage t stays free (a later
// output of t-1's op, which stage t-1 made). evaluate_stage_schedule charges the same, and
// stage_schedule_steps writes each stage's computations in node order, so the plan's
// evaluation in schedule mode charges the same too.
// Y is built only where it changes something: for an op whose stage may recompute two or
// more of its outputs (the others are pinned there), all of the same cost (as a trace's
// are; a hand-made graph with unequal costs keeps one charge per output, above the
// evaluation). Kept small because CBC's search is sensitive to it: with Y on every
// multi-output op, or a refund column per later output (Z <= R[t][i], Z <= the sum of the
// earlier outputs' R, objective -cost), CBC found no plan for tests/data/planner/
// two_steps.trace at 820 B within 120 s; with Y where it matters it found one within 40 s,
// and with the tie-break it proves 820 B optimal in 7 s. The tie-break: an R column of
// cost 0 is free to be 1, and such spare recomputations cost memory the search then had
// to undo; each costs 0.5 / (number of R columns + 1) cost units, so all of them together
// cost less than one unit and the optimum's compute is unchanged, while among schedules of
// equal compute the MILP prefers fewer computations.

// Note [Formulation size guard]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The formulation has O(n^2 + n|E|) columns (docs/planner-milp.md) and --time-limit does
// not bound everything a solve does: building the formulation and loading it into the
// solver come first, CBC checks its limit only between nodes and heuristic passes (its
// preprocessing and root LP on a large model run to the end), and the LP rounding builds
// the formulation once per budget fraction and rounds each LP at every threshold. Measured
// with --time-limit 5 (docs/planner-milp.md, "Formulation size guard"): the MILP returned
// after 5-18 s at 100-200 nodes but after minutes, or not within 10 minutes, at 400-806;
// the LP rounding stayed within a few seconds of the limit up to about 800 nodes, with a
// resident set growing to 1 GiB at 806 nodes. So each method refuses a graph with more
// nodes than its limit (kCheckmateMilpMaxNodes, kCheckmateLpMaxNodes; CheckmateOptions::
// max_nodes, `dtr-plan --milp-max-nodes`) before building anything: status kTooLarge, and
// the planner throws PlanTooLarge, which `dtr-plan` reports (exit 2; a `too-large` row in
// `compare`).

namespace {

// Sorted, duplicate-free inputs of each node.
std::vector<std::vector<uint32_t>> unique_deps(const Graph& graph) {
  std::vector<std::vector<uint32_t>> deps(graph.size());
  for (size_t k = 0; k < graph.size(); ++k) {
    deps[k] = graph.nodes[k].deps;
    std::sort(deps[k].begin(), deps[k].end());
    deps[k].erase(std::unique(deps[k].begin(), deps[k].end()), deps[k].end());
  }
  return deps;
}

std::vector<std::vector<uint32_t>> unique_users(const std::vector<std::vector<uint32_t>>& deps) {
  std::vector<std::vector<uint32_t>> users(deps.size());
  for (uint32_t k = 0; k < deps.size(); ++k) {
    for (uint32_t i : deps[k]) users[i].push_back(k);
  }
  return users;  // each list ascending, since k ascends
}

bool shape_ok(const Graph& graph, const StageSchedule& s, std::string* why) {
  const size_t n = graph.size();
  if (s.compute.size() != n || s.keep.size() != n) {
    *why = "schedule has " + std::to_string(s.compute.size()) + " compute and " +
           std::to_string(s.keep.size()) + " keep stages for a graph of " + std::to_string(n) +
           " nodes";
    return false;
  }
  for (size_t t = 0; t < n; ++t) {
    if (s.compute[t].size() != t + 1 || s.keep[t].size() != t) {
      *why = "stage " + std::to_string(t) + " has the wrong number of entries";
      return false;
    }
  }
  return true;
}

}  // namespace

const char* milp_status_name(MilpStatus status) {
  switch (status) {
    case MilpStatus::kOptimal: return "optimal";
    case MilpStatus::kFeasible: return "feasible";
    case MilpStatus::kInfeasible: return "infeasible";
    case MilpStatus::kTimeLimit: return "time-limit";
    case MilpStatus::kNoSolution: return "no-solution";
    case MilpStatus::kTooLarge: return "too-large";
  }
  return "?";
}

StageSchedule StageSchedule::no_remat(const Graph& graph) {
  const size_t n = graph.size();
  const auto users = graph.users();
  std::vector<uint32_t> last_use(n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t j : users[i]) last_use[i] = std::max(last_use[i], j);
  }
  StageSchedule s;
  s.compute.resize(n);
  s.keep.resize(n);
  for (size_t t = 0; t < n; ++t) {
    s.compute[t].assign(t + 1, 0);
    s.compute[t][t] = 1;
    s.keep[t].assign(t, 0);
    for (size_t i = 0; i < t; ++i)
      s.keep[t][i] =
          (graph.nodes[i].pinned && t <= graph.nodes[i].pinned_until) || last_use[i] >= t;
  }
  return s;
}

void complete_compute_from_keep(const Graph& graph, StageSchedule& s) {
  const size_t n = graph.size();
  s.compute.resize(n);
  for (size_t t = 0; t < n; ++t) {
    for (uint32_t i = 0; i < t; ++i) {
      if (graph.kept_pinned(i, t)) s.keep[t][i] = 1;
    }
  }
  for (size_t t = 0; t < n; ++t) {
    auto& r = s.compute[t];
    r.assign(t + 1, 0);
    r[t] = 1;
    if (t + 1 < n) {  // what enters stage t+1 must be resident in stage t
      for (size_t i = 0; i < t; ++i) {
        if (s.keep[t + 1][i] && !s.keep[t][i]) r[i] = 1;
      }
    }
    for (uint32_t i = 0; i < t; ++i)  // a late pin starting here (Note [Late pins in stage form])
      if (graph.pin_starts(i, t) && !s.keep[t][i]) r[i] = 1;
    for (size_t j = t + 1; j-- > 0;) {  // inputs of computed nodes, closed backward
      if (!r[j]) continue;
      for (uint32_t d : graph.nodes[j].deps) {
        if (!s.keep[t][d]) r[d] = 1;
      }
    }
  }
}

ScheduleCost evaluate_stage_schedule(const Graph& graph, const StageSchedule& s) {
  ScheduleCost c;
  if (!shape_ok(graph, s, &c.error)) return c;
  const size_t n = graph.size();
  const auto deps = unique_deps(graph);
  const auto users = unique_users(deps);
  auto fail = [&](size_t t, const std::string& what) {
    c.error = "stage " + std::to_string(t) + ": " + what;
    return c;
  };
  for (size_t t = 0; t < n; ++t) {
    const auto& r = s.compute[t];
    const auto& keep = s.keep[t];
    if (!r[t]) return fail(t, "does not compute node " + std::to_string(t));
    for (uint32_t i = 0; i < t; ++i) {
      if (graph.kept_pinned(i, t) && !keep[i])
        return fail(t, "pinned node " + std::to_string(i) + " is not kept");
      if (graph.pin_starts(i, t) && !keep[i] && !r[i])
        return fail(t, "pinned node " + std::to_string(i) + " is not resident when its pin starts");
      if (keep[i] && !(s.compute[t - 1][i] || (i < t - 1 && s.keep[t - 1][i])))
        return fail(t, "keeps node " + std::to_string(i) + ", not resident in stage " +
                           std::to_string(t - 1));
    }
    for (size_t k = 0; k <= t; ++k) {
      if (!r[k]) continue;
      for (uint32_t i : deps[k]) {
        if (!r[i] && !keep[i])
          return fail(t, "computes node " + std::to_string(k) + " but its input " +
                             std::to_string(i) + " is neither kept nor computed");
      }
    }
    // Memory, freeing every value as early as the accounting allows.
    auto freed_after = [&](size_t k) {
      uint64_t bytes = 0;
      if (!r[k]) return bytes;
      for (uint32_t i : deps[k]) {
        if (graph.held_through_stage(i, t)) continue;  // k < t here
        if (t + 1 < n && s.keep[t + 1][i]) continue;
        bool read_later = false;
        for (uint32_t j : users[i]) read_later = read_later || (j > k && j <= t && r[j]);
        if (!read_later) bytes += graph.nodes[i].size_bytes;
      }
      return bytes;
    };
    // U[t][k], with node k's scratch while it runs (Note [Op workspace in plans]).
    auto sample = [&](uint64_t u, size_t k) {
      c.peak_bytes = std::max(c.peak_bytes, u + (r[k] ? graph.nodes[k].workspace_bytes : 0));
    };
    uint64_t u = r[0] ? graph.nodes[0].size_bytes : 0;
    for (size_t i = 0; i < t; ++i) u += keep[i] ? graph.nodes[i].size_bytes : 0;
    sample(u, 0);
    for (size_t k = 0; k < t; ++k) {
      u += r[k + 1] ? graph.nodes[k + 1].size_bytes : 0;
      u -= freed_after(k);
      sample(u, k + 1);
    }
    // Note [One run of a multi-output op] (plan_eval.cpp): node t's own computation is free
    // when it is a later output of t-1's op; a recomputation when the stage's previous
    // computation was of an earlier output of its op.
    uint32_t prev = UINT32_MAX;
    for (uint32_t k = 0; k <= t; ++k) {
      if (!r[k]) continue;
      const bool shared =
          k == t ? t > 0 && graph.nodes[t].same_op_as_prev : graph.same_run(prev, k);
      // Note [Remat cost in plans] (plan_eval.cpp): k < t is a recomputation.
      if (!shared) c.compute_ns += k == t ? graph.nodes[k].compute_ns : graph.nodes[k].remat_cost();
      ++c.num_computes;
      prev = k;
    }
  }
  c.valid = true;
  return c;
}

std::vector<ScheduleStep> stage_schedule_steps(const Graph& graph, const StageSchedule& s) {
  std::string why;
  if (!shape_ok(graph, s, &why)) throw PlanError("stage_schedule_steps: " + why);
  const size_t n = graph.size();
  const auto deps = unique_deps(graph);
  const auto users = unique_users(deps);
  std::vector<ScheduleStep> steps;
  std::vector<uint8_t> resident(n, 0);
  auto free_node = [&](uint32_t i) {
    steps.push_back({ScheduleStep::Kind::free, i});
    resident[i] = 0;
  };
  for (size_t t = 0; t < n; ++t) {
    const auto& r = s.compute[t];
    for (uint32_t k = 0; k <= t; ++k) {
      if (!r[k]) continue;
      steps.push_back({ScheduleStep::Kind::compute, k});
      resident[k] = 1;
      for (uint32_t i : deps[k]) {
        if (graph.never_freed(i, t) || !resident[i]) continue;
        // In the stage its pin ends in, a pinned node is held until that stage's own node
        // is computed: a remat computed before it (k < t) may not free it (a probe,
        // 2026-12-07: kusumoto-approx's plan freed one there, which evaluate_schedule
        // refused as "frees a pinned node"); the evaluator and the MILP agree.
        if (graph.held_through_stage(i, t) && k < t) continue;
        if (t + 1 < n && s.keep[t + 1][i]) continue;
        bool read_later = false;
        for (uint32_t j : users[i]) read_later = read_later || (j > k && j <= t && r[j]);
        if (!read_later) free_node(i);
      }
    }
    for (uint32_t i = 0; i <= t; ++i) {  // what does not enter stage t+1
      const bool kept = t + 1 < n && s.keep[t + 1][i];
      if (resident[i] && !kept && !graph.never_freed(i, t) && t + 1 < n) free_node(i);
    }
  }
  return steps;
}

CheckmateFormulation build_checkmate_formulation(const Graph& graph, uint64_t budget_bytes) {
  graph.validate();
  const size_t n = graph.size();
  const auto deps = unique_deps(graph);
  const auto users = unique_users(deps);
  CheckmateFormulation f;
  uint64_t mem_gcd = 0, cost_gcd = 0;
  for (const auto& node : graph.nodes) {
    mem_gcd = std::gcd(std::gcd(mem_gcd, node.size_bytes), node.workspace_bytes);
    cost_gcd = std::gcd(std::gcd(cost_gcd, node.compute_ns), node.remat_cost());
  }
  f.memory_unit_bytes = mem_gcd ? mem_gcd : 1;
  f.cost_unit_ns = cost_gcd ? cost_gcd : 1;
  // Sizes and scratch are multiples of the unit, so flooring the budget loses no schedule.
  f.budget_units = static_cast<double>(budget_bytes / f.memory_unit_bytes);
  auto mem = [&](size_t i) {
    return static_cast<double>(graph.nodes[i].size_bytes / f.memory_unit_bytes);
  };
  auto scratch = [&](size_t i) {
    return static_cast<double>(graph.nodes[i].workspace_bytes / f.memory_unit_bytes);
  };
  auto add_col = [&](double lb, double ub, double obj, bool integer) {
    f.col_lb.push_back(lb);
    f.col_ub.push_back(ub);
    f.obj.push_back(obj);
    f.col_integer.push_back(integer);
    return static_cast<int>(f.col_lb.size() - 1);
  };
  int row = -1;
  auto add_row = [&](double lb, double ub) {
    f.row_lb.push_back(lb);
    f.row_ub.push_back(ub);
    return ++row;
  };
  auto elem = [&](int r, int col, double v) {
    f.elem_row.push_back(r);
    f.elem_col.push_back(col);
    f.elem_value.push_back(v);
  };
  constexpr double kInf = 1e30;

  f.r_col.resize(n);
  f.s_col.resize(n);
  // The R columns of an op's outputs that share a run cost this, not 0 (Note [Shared runs
  // in stage form]): less than one cost unit over all R columns, so the optimum's compute
  // is unchanged, but among schedules of equal compute the MILP prefers fewer computations.
  const double tie_break = 0.5 / (static_cast<double>(n) * static_cast<double>(n + 1) / 2 + 1);
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i <= t; ++i) {
      // The first computation of a second output of an op is free (a constant: R[t][t] = 1).
      const bool shared = i == t && t > 0 && graph.nodes[t].same_op_as_prev;
      // Note [Remat cost in plans] (plan_eval.cpp): R[t][i] with i < t is a recomputation.
      const uint64_t ns = i == t ? graph.nodes[i].compute_ns : graph.nodes[i].remat_cost();
      const double cost = shared ? 0 : static_cast<double>(ns / f.cost_unit_ns);
      // A pinned node is kept in every later stage, so it is never recomputed: left free,
      // a pinned node of cost 0 (a trace's CONSTANT) could be "recomputed" at no cost into
      // a schedule that computes a resident node, which plan_eval refuses.
      const bool fixed_off = i < t && graph.never_recomputed(static_cast<uint32_t>(i), t);
      f.r_col[t].push_back(add_col(i == t ? 1 : 0, fixed_off ? 0 : 1, cost, true));
      ++f.num_r;
    }
    // An op with several outputs costs one run in stage t, whichever of its outputs before
    // t the stage recomputes (Note [Shared runs in stage form]): where two or more of them
    // may be recomputed, their R columns cost a tie-break and a run column Y >= R[t][j] for each
    // carries the op's cost.
    for (uint32_t i = 0; i + 1 < t; ++i) {
      if (!graph.nodes[i + 1].same_op_as_prev || (i > 0 && graph.nodes[i].same_op_as_prev))
        continue;  // i is not the first output of a multi-output op
      CheckmateFormulation::OpRun run{static_cast<uint32_t>(t), {}, -1};
      bool equal_costs = true;
      for (uint32_t j = i; j < t && (j == i || graph.nodes[j].same_op_as_prev); ++j) {
        equal_costs = equal_costs && graph.nodes[j].remat_cost() == graph.nodes[i].remat_cost();
        if (!graph.never_recomputed(j, t)) run.outputs.push_back(j);
      }
      const double cost = static_cast<double>(graph.nodes[i].remat_cost() / f.cost_unit_ns);
      if (run.outputs.size() < 2 || !equal_costs || cost == 0) continue;
      for (uint32_t j : run.outputs) f.obj[static_cast<size_t>(f.r_col[t][j])] = tie_break;
      run.col = add_col(0, 1, cost, false);
      f.op_runs.push_back(std::move(run));
    }
    for (size_t i = 0; i < t; ++i) {
      f.s_col[t].push_back(add_col(graph.kept_pinned(static_cast<uint32_t>(i), t) ? 1 : 0, 1, 0, true));
      ++f.num_s;
    }
  }
  auto R = [&](size_t t, size_t i) { return f.r_col[t][i]; };
  auto S = [&](size_t t, size_t i) { return f.s_col[t][i]; };

  for (const CheckmateFormulation::OpRun& run : f.op_runs) {
    for (uint32_t j : run.outputs) {
      const int r = add_row(0, kInf);  // Y - R[t][j] >= 0
      elem(r, run.col, 1);
      elem(r, R(run.stage, j), -1);
    }
  }

  for (size_t t = 0; t < n; ++t) {
    // Dependencies: R[t][k] <= R[t][i] + S[t][i] for each edge (i, k), k <= t.
    for (size_t k = 0; k <= t; ++k) {
      for (uint32_t i : deps[k]) {
        const int r = add_row(0, kInf);
        elem(r, R(t, i), 1);
        elem(r, S(t, i), 1);
        elem(r, R(t, k), -1);
      }
    }
    // A late pin starting at stage t: R[t][i] + S[t][i] >= 1 (Note [Late pins in stage form]).
    for (uint32_t i = 0; i < t; ++i) {
      if (!graph.pin_starts(i, t)) continue;
      const int r = add_row(1, kInf);
      elem(r, R(t, i), 1);
      elem(r, S(t, i), 1);
    }
    // Residency: S[t+1][i] <= R[t][i] + S[t][i].
    if (t + 1 < n) {
      for (size_t i = 0; i <= t; ++i) {
        const int r = add_row(0, kInf);
        elem(r, R(t, i), 1);
        if (i < t) elem(r, S(t, i), 1);
        elem(r, S(t + 1, i), -1);
      }
    }
    // Memory: U[t][k] for k <= t, bounded by the budget.
    std::vector<int> u(t + 1);
    for (size_t k = 0; k <= t; ++k) {
      u[k] = add_col(0, f.budget_units, 0, false);
      ++f.num_u;
      if (scratch(k) == 0) continue;
      const int r = add_row(-kInf, f.budget_units);  // U[t][k] + W_k R[t][k] <= budget
      elem(r, u[k], 1);
      elem(r, R(t, k), scratch(k));
    }
    {
      const int r = add_row(0, 0);  // U[t][0] - sum M_i S[t][i] - M_0 R[t][0] = 0
      elem(r, u[0], 1);
      for (size_t i = 0; i < t; ++i) {
        if (mem(i) != 0) elem(r, S(t, i), -mem(i));
      }
      if (mem(0) != 0) elem(r, R(t, 0), -mem(0));
    }
    for (size_t k = 0; k < t; ++k) {
      // U[t][k+1] - U[t][k] - M_{k+1} R[t][k+1] + sum M_i FREE[t][i][k] = 0
      const int r = add_row(0, 0);
      elem(r, u[k + 1], 1);
      elem(r, u[k], -1);
      if (mem(k + 1) != 0) elem(r, R(t, k + 1), -mem(k + 1));
      for (uint32_t i : deps[k]) {
        // Note [Pin ends in stage form]: the rows may free a pin's node at its end stage
        // after an earlier remat, which the schedule does not; the evaluator checks.
        if (graph.never_freed(i, t)) continue;  // never freed: no FREE column
        const int fc = add_col(0, 1, 0, true);
        ++f.num_free;
        if (mem(i) != 0) elem(r, fc, mem(i));
        // hazards h = (1 - R[t][k]) + S[t+1][i] + sum_{j in users(i), k < j <= t} R[t][j]
        // 1 - FREE <= h          <=>  FREE - R[t][k] + S[t+1][i] + sum R >= 0
        // kappa (1 - FREE) >= h  <=>  -kappa FREE + R[t][k] - S[t+1][i] - sum R >= 1 - kappa
        double kappa = 1;
        std::vector<int> later;
        for (uint32_t j : users[i]) {
          if (j > k && j <= t) later.push_back(R(t, j));
        }
        kappa += static_cast<double>(later.size()) + (t + 1 < n ? 1 : 0);
        const int lo = add_row(0, kInf);
        elem(lo, fc, 1);
        elem(lo, R(t, k), -1);
        if (t + 1 < n) elem(lo, S(t + 1, i), 1);
        for (int c : later) elem(lo, c, 1);
        const int hi = add_row(1 - kappa, kInf);
        elem(hi, fc, -kappa);
        elem(hi, R(t, k), 1);
        if (t + 1 < n) elem(hi, S(t + 1, i), -1);
        for (int c : later) elem(hi, c, -1);
      }
    }
  }
  return f;
}

namespace {

int no_callback(CbcModel*, int) { return 0; }

OsiClpSolverInterface load(const CheckmateFormulation& f, bool integer) {
  CoinPackedMatrix matrix(false, f.elem_row.data(), f.elem_col.data(), f.elem_value.data(),
                          static_cast<CoinBigIndex>(f.elem_value.size()));
  matrix.setDimensions(static_cast<int>(f.num_rows()), static_cast<int>(f.num_cols()));
  OsiClpSolverInterface solver;
  solver.loadProblem(matrix, f.col_lb.data(), f.col_ub.data(), f.obj.data(), f.row_lb.data(),
                     f.row_ub.data());
  if (integer) {
    for (size_t j = 0; j < f.num_cols(); ++j) {
      if (f.col_integer[j]) solver.setInteger(static_cast<int>(j));
    }
  }
  return solver;
}

StageSchedule read_schedule(const CheckmateFormulation& f, const double* x) {
  StageSchedule s;
  const size_t n = f.r_col.size();
  s.compute.resize(n);
  s.keep.resize(n);
  for (size_t t = 0; t < n; ++t) {
    for (int c : f.r_col[t]) s.compute[t].push_back(x[c] > 0.5);
    for (int c : f.s_col[t]) s.keep[t].push_back(x[c] > 0.5);
    // A node of remat cost 0 (Note [Remat cost in plans] in plan_eval.cpp) may come out
    // both kept into stage t and recomputed there, at no cost in the objective; only the
    // keep is meant, and a recomputation of a resident node is no valid step.
    for (size_t i = 0; i < t; ++i)
      if (s.keep[t][i]) s.compute[t][i] = 0;
  }
  return s;
}

}  // namespace

// Used by checkmate_lp_rounding.cpp: the LP relaxation's optimum, a proof that the LP is
// infeasible (then so is the MILP), or the time limit. Clp's own limit bounds the solve.
MilpStatus solve_checkmate_lp(const CheckmateFormulation& f, std::vector<double>* x,
                              double* objective, int log_level, double max_seconds) {
  OsiClpSolverInterface solver = load(f, false);
  solver.messageHandler()->setLogLevel(log_level);
  solver.getModelPtr()->setMaximumSeconds(std::max(0.01, max_seconds));
  solver.initialSolve();
  if (solver.isProvenOptimal()) {
    x->assign(solver.getColSolution(), solver.getColSolution() + f.num_cols());
    *objective = solver.getObjValue();
    return MilpStatus::kOptimal;
  }
  if (solver.isProvenPrimalInfeasible()) return MilpStatus::kInfeasible;
  return MilpStatus::kTimeLimit;  // stopped by the limit (or abandoned): nothing proven
}

uint32_t checkmate_max_nodes(const CheckmateOptions& opts, bool relaxed) {
  if (opts.max_nodes != 0) return opts.max_nodes;
  return relaxed ? kCheckmateLpMaxNodes : kCheckmateMilpMaxNodes;
}

bool checkmate_too_large(const Graph& graph, const CheckmateOptions& opts, bool relaxed,
                         CheckmateResult* result) {
  const uint32_t limit = checkmate_max_nodes(opts, relaxed);
  if (graph.size() <= limit) return false;
  result->status = MilpStatus::kTooLarge;
  result->detail =
      std::string("too large: ") + std::to_string(graph.size()) + " nodes > limit " +
      std::to_string(limit) + " of " + (relaxed ? "checkmate-lp" : "checkmate") +
      " (its formulation has O(n^2) columns and building and presolving it is not "
      "bounded by --time-limit); use kusumoto-approx, rotor or revolve, coarsen the "
      "graph, " +
      (relaxed ? ""
               : "try checkmate-lp (limit " + std::to_string(kCheckmateLpMaxNodes) + " nodes), ") +
      "or raise --milp-max-nodes at your own risk";
  return true;
}

CheckmateResult solve_checkmate_milp(const Graph& graph, const CheckmateOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  CheckmateResult res;
  // Note [Formulation size guard]: nothing is built for a graph above the limit.
  if (checkmate_too_large(graph, opts, /*relaxed=*/false, &res)) return res;
  const CheckmateFormulation f = build_checkmate_formulation(graph, opts.budget_bytes);
  res.num_cols = f.num_cols();
  res.num_rows = f.num_rows();
  res.num_integer = f.num_r + f.num_s + f.num_free;

  OsiClpSolverInterface solver = load(f, true);
  CbcModel model(solver);
  CbcSolverUsefulData data;
  data.noPrinting_ = opts.log_level == 0;
  data.useSignalHandler_ = false;
  CbcMain0(model, data);
  const std::string log = std::to_string(opts.log_level);
  const std::string sec = std::to_string(std::max(0.01, opts.time_limit_s));
  const char* argv[] = {"dtr-plan", "-log", log.c_str(), "-timeMode", "elapsed",
                        "-sec", sec.c_str(), "-solve", "-quit"};
  CbcMain1(static_cast<int>(sizeof(argv) / sizeof(argv[0])), argv, model, no_callback, data);
  res.solve_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const double unit = static_cast<double>(f.cost_unit_ns);
  res.lower_bound_ns = std::max(0.0, model.getBestPossibleObjValue()) * unit;
  const double* x = model.bestSolution();
  // CBC can report "proven infeasible" when its time limit cut it off during preprocessing
  // (seen once under ASan with a 0.3 s limit): a proof only counts when no limit stopped
  // the search.
  const bool stopped_by_limit =
      model.isSecondsLimitReached() || res.solve_s >= opts.time_limit_s;
  if (model.isProvenInfeasible() && x == nullptr && !stopped_by_limit) {
    res.status = MilpStatus::kInfeasible;
    res.lower_bound_ns = 0;
    res.detail = "CBC proved that no schedule fits the budget";
    return res;
  }
  if (x == nullptr) {
    res.status = MilpStatus::kTimeLimit;
    res.detail = "no schedule found within " + sec + " s";
    return res;
  }
  res.schedule = read_schedule(f, x);
  res.cost = evaluate_stage_schedule(graph, res.schedule);
  if (!res.cost.valid)
    throw PlanError("checkmate: CBC returned a schedule that fails evaluation (" + res.cost.error +
                    "); this is a bug in the formulation");
  if (res.cost.peak_bytes > opts.budget_bytes) {
    // Note [Pin ends in stage form]: the rows freed a pin's node at its end stage before
    // the schedule does; what runs needs more than the budget, so there is no plan here.
    res.status = MilpStatus::kNoSolution;
    res.detail = "CBC's schedule needs " + std::to_string(res.cost.peak_bytes) +
                 " bytes when run, over the budget (a pinned node held to the end of its "
                 "pin: Note [Pin ends in stage form])";
    res.schedule = StageSchedule{};
    return res;
  }
  if (model.isProvenOptimal()) {
    res.status = MilpStatus::kOptimal;
    res.lower_bound_ns = static_cast<double>(res.cost.compute_ns);
    res.detail = "proven optimal";
  } else {
    res.status = MilpStatus::kFeasible;
    res.detail = "time limit of " + sec + " s reached; best bound " +
                 std::to_string(res.lower_bound_ns) + " ns";
  }
  return res;
}

Plan plan_from_stage_schedule(const Graph& graph, const StageSchedule& s, const std::string& method) {
  Plan plan = keep_all_plan(graph, method);
  std::vector<uint32_t> times(graph.size(), 0);
  for (const auto& r : s.compute) {
    for (size_t i = 0; i < r.size(); ++i) times[i] += r[i];
  }
  for (size_t i = 0; i < graph.size(); ++i) {
    plan.decisions[i] = times[i] > 1 ? NodeDecision::recompute : NodeDecision::keep;
  }
  plan.schedule = stage_schedule_steps(graph, s);
  const ScheduleCost c = evaluate_stage_schedule(graph, s);
  plan.predicted_compute_ns = c.compute_ns;
  plan.predicted_peak_bytes = c.peak_bytes;
  return plan;
}

namespace {

class CheckmatePlanner : public Planner {
 public:
  explicit CheckmatePlanner(bool relaxed) : relaxed_(relaxed) {}
  std::string name() const override { return relaxed_ ? "checkmate-lp" : "checkmate"; }
  PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions& options) override {
    PlanResult res;
    // Keeping everything has the least compute: where it fits, it is the answer (as for
    // the chain methods, best_of_attempts in chain_view.cpp). LP rounding need not find it:
    // checkmate-lp recomputed 0.8% at the baseline peak of a recorded residual trace.
    const StageSchedule whole = StageSchedule::no_remat(graph);
    // Valid for any graph that validates; plan_from_stage_schedule evaluates it.
    Plan keep_all = plan_from_stage_schedule(graph, whole, name());
    if (keep_all.predicted_peak_bytes <= budget_bytes) {
      res.plan = std::move(keep_all);
      res.feasible = true;
      res.predicted_compute_ns = res.plan.predicted_compute_ns;
      res.predicted_peak_bytes = res.plan.predicted_peak_bytes;
      res.note = "keeping every node fits the budget; nothing recomputed, no solve";
      return res;
    }
    CheckmateOptions opts;
    opts.budget_bytes = budget_bytes;
    opts.time_limit_s = options.time_limit_s;
    opts.max_nodes = options.milp_max_nodes;
    const CheckmateResult r = relaxed_ ? solve_checkmate_lp_rounding(graph, opts)
                                       : solve_checkmate_milp(graph, opts);
    if (r.status == MilpStatus::kTooLarge) throw PlanTooLarge(name() + ": " + r.detail);
    res.plan = r.has_plan() ? plan_from_stage_schedule(graph, r.schedule, name())
                            : keep_all_plan(graph, name());
    res.feasible = r.has_plan();
    res.predicted_compute_ns = res.plan.predicted_compute_ns;
    res.predicted_peak_bytes = res.plan.predicted_peak_bytes;
    res.solve_seconds = r.solve_s;
    res.note = std::string(milp_status_name(r.status)) + ": " + r.detail + " (" +
               std::to_string(r.num_cols) + " columns, " + std::to_string(r.num_rows) + " rows)";
    if (!r.has_plan()) res.note += "; the plan is keep-all";
    return res;
  }

 private:
  bool relaxed_;
};

}  // namespace

std::unique_ptr<Planner> make_checkmate_planner(bool relaxed) {
  return std::make_unique<CheckmatePlanner>(relaxed);
}

}  // namespace dtr
