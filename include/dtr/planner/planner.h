// planner.h: the Planner interface, the registry of methods, and the chain helpers they share.
//
// A planner turns (graph, budget) into a Plan. It only plans: run_planner() times it and
// puts the result through the common evaluator (plan_eval.h), so every method is measured
// the same way. A method is one file planner/<name>_planner.cpp defining a factory declared
// here, plus one line in the table in planner/planner_registry.cpp.
//
// Chain methods (chen, revolve, rotor, checkpoint-subset) see a general DAG through its
// linearisation (Note [Chains from DAGs] in planner/chain_view.cpp): the execution order of
// the forward nodes is the chain, grouped into stages; their plan keeps the stage
// boundaries the method checkpoints, and the evaluator measures what that really costs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtr/planner/graph.h"
#include "dtr/planner/plan.h"
#include "dtr/planner/plan_eval.h"

namespace dtr {

// A method that refuses the graph for its size before doing any work (Note [Formulation
// size guard] in planner/checkmate_milp.cpp): what() says the size, the limit and what to
// use instead. `dtr-plan` exits 2 on it; `compare` shows a `too-large` row.
class PlanTooLarge : public PlanError {
 public:
  using PlanError::PlanError;
};
// The budget is below the largest single op's need (check_budget): no schedule fits.
class BudgetBelowOpNeed : public PlanError {
 public:
  using PlanError::PlanError;
};

// Entries kept per lower set's Pareto table by the kusumoto methods (Note [Bounded Pareto
// tables] in planner/kusumoto_planner.cpp).
constexpr uint32_t kKusumotoParetoWidth = 256;

struct PlanOptions {
  double time_limit_s = 60.0;    // checkmate and kusumoto stop here and return their incumbent
  uint32_t milp_max_nodes = 0;   // checkmate methods refuse larger graphs; 0: their defaults
  uint32_t max_stages = 100;     // chain methods on a DAG group forward nodes into at most this
  uint32_t memory_slots = 400;   // rotor/checkpoint-subset: memory discretisation levels
  uint32_t kusumoto_width = kKusumotoParetoWidth;  // kusumoto methods; 0: unbounded
  uint64_t seed = 0;
  std::string trace_name;        // recorded in the plan
};

struct PlanResult {
  Plan plan;
  bool feasible = false;           // the evaluated peak fits the budget
  uint64_t predicted_compute_ns = 0;  // after run_planner: the evaluator's numbers
  uint64_t predicted_peak_bytes = 0;
  double solve_seconds = 0;
  std::string note;                // e.g. "time limit reached", "coarsened to 100 stages"
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual std::string name() const = 0;
  // Throws BudgetBelowOpNeed when the budget is below the largest single op's need, and
  // PlanTooLarge when the method refuses the graph's size.
  virtual PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions& options) = 0;
};

// The least memory any schedule needs: the most, over the nodes, of a node's size, its
// deps' sizes and its op's scratch (GraphNode::workspace_bytes).
uint64_t largest_op_need(const Graph& graph, uint32_t* node = nullptr);
// Throws BudgetBelowOpNeed ("budget X is below the largest single op's need Y (node N ...)").
void check_budget(const Graph& graph, uint64_t budget_bytes);

// The least peak any plan can reach on `graph` (Note [Plan floor] in planner/planner.cpp):
// the most, over the nodes i, of what the first computation of node i must hold: node i,
// its deps, its scratch, and every pinned node made before it. At least largest_op_need().
struct PlanFloor {
  uint64_t bytes = 0;         // the floor
  uint32_t node = 0;          // the node whose first computation needs it
  uint64_t op_bytes = 0;      // that node, its scratch and its deps that are not pinned
  uint64_t pinned_bytes = 0;  // pinned nodes made before it (its pinned deps included)
  uint32_t pinned_count = 0;
};
PlanFloor plan_floor(const Graph& graph);
// "every plan holds at least X while node N 'name' is computed: P in K pinned nodes made
// before it, never freed (...), and O for the node, its other inputs and its scratch".
std::string describe_plan_floor(const Graph& graph, const PlanFloor& floor);

// Checks the budget, runs the planner, times it, evaluates the plan with evaluate_plan()
// and fills feasible / predicted_* / solve_seconds and the plan's binding and budget.
PlanResult run_planner(Planner& planner, const Graph& graph, uint64_t budget_bytes,
                       const PlanOptions& options);

// ---- registry ----

struct PlannerInfo {
  std::string name;
  std::string summary;  // one line, for `dtr-plan methods`
  std::function<std::unique_ptr<Planner>()> make;
};
const std::vector<PlannerInfo>& planner_registry();
std::string planner_names();  // "chen, revolve, ..."
// Throws PlanError naming the valid methods.
std::unique_ptr<Planner> make_planner(const std::string& name);

// ---- factories (one file each) ----

std::unique_ptr<Planner> make_chen_planner();
std::unique_ptr<Planner> make_revolve_planner();
std::unique_ptr<Planner> make_rotor_planner();
std::unique_ptr<Planner> make_checkpoint_subset_planner();
std::unique_ptr<Planner> make_checkmate_planner(bool relaxed);
std::unique_ptr<Planner> make_kusumoto_planner(bool exact, bool memory_centric);

// ---- revolve (Griewank's binomial checkpointing), planner/revolve_planner.cpp ----

// Forward steps to reverse l steps with c checkpoint slots (the initial state occupies one):
// r*l - C(c+r, c+1), r the least with C(c+r, c) >= l. UINT64_MAX when c == 0 and l > 1.
uint64_t revolve_forward_steps(uint64_t l, uint64_t c);

struct RevolveAction {
  enum class Kind : uint8_t { advance, store, restore, reverse };
  Kind kind;
  uint32_t from = 0;  // advance: from state `from` to state `to`; store/restore: state `from`
  uint32_t to = 0;    // reverse: the step `to` (needs state to - 1)
};
// The binomial schedule reversing steps 1..l with c slots (state 0 stored in one of them).
std::vector<RevolveAction> revolve_schedule(uint32_t l, uint32_t c);

// ---- rotor (Beaumont et al.'s DP for heterogeneous chains), planner/rotor_planner.cpp ----

struct RotorSolution {
  bool feasible = false;
  uint64_t compute_ns = 0;              // the DP's optimum, in the chain's cost model
  std::vector<uint32_t> compute_order;  // nodes of training_chain_graph(spec), in order
};
// Optimal schedule for training_chain_graph(spec) within budget_bytes (pinned a_0 and d_1
// included), memory rounded up to `memory_slots` levels (exact when sizes are multiples of
// budget / memory_slots).
RotorSolution rotor_solve(const ChainSpec& spec, uint64_t budget_bytes, uint32_t memory_slots);

// ---- checkpoint-subset, planner/checkpoint_subset_planner.cpp ----

// The states k (1 <= k < L) of the chain's checkpoint subset with the least peak under
// single-level checkpointing (Note [Checkpoint-subset DP]); `peak_bytes` gets that peak,
// a_0 and d_1 included. O(L log L) time and space (Note [Checkpoint-subset in O(L log L)]).
std::vector<uint32_t> checkpoint_subset_min_peak(const ChainSpec& spec, uint64_t* peak_bytes);
// The same least peak by the direct O(L^3) DP: the reference the fast one is tested against.
std::vector<uint32_t> checkpoint_subset_min_peak_cubic(const ChainSpec& spec, uint64_t* peak_bytes);
// The peak of the subset `states` (increasing, within 1..L-1) in the same model.
uint64_t checkpoint_subset_peak(const ChainSpec& spec, const std::vector<uint32_t>& states);

}  // namespace dtr
