// planner_registry.cpp: the table of planning methods, by name.
//
// An explicit table rather than self-registration, for the reason given for heuristics in
// docs/architecture.md: dtr_planner is a static library, and an object file holding only a
// static registrar would never be linked. Adding a method: write planner/<name>_planner.cpp
// defining a factory declared in include/dtr/planner/planner.h, and add one line here.
#include "dtr/planner/planner.h"

namespace dtr {

const std::vector<PlannerInfo>& planner_registry() {
  static const std::vector<PlannerInfo> table = {
      {"chen", "Chen et al. 2016: sqrt(n) segments and the greedy under the budget, best evaluated",
       [] { return make_chen_planner(); }},
      {"revolve",
       "Griewank's binomial checkpointing (homogeneous chains); DAGs via their linearisation",
       [] { return make_revolve_planner(); }},
      {"rotor", "Beaumont et al.'s optimal DP for heterogeneous chains, memory discretised",
       [] { return make_rotor_planner(); }},
      {"checkpoint-subset",
       "keep-all where it fits, else the checkpoint subset with the least peak (O(L log L) DP)",
       [] { return make_checkpoint_subset_planner(); }},
      {"checkmate",
       "Jain et al. 2020: the exact MILP (R, S, FREE) solved with CBC under the time limit",
       [] { return make_checkmate_planner(false); }},
      {"checkmate-lp", "Checkmate's LP relaxation with two-phase rounding (S by threshold, then R)",
       [] { return make_checkmate_planner(true); }},
      {"kusumoto",
       "Kusumoto et al. 2019: lower-set DP over all lower sets (small graphs), least time",
       [] { return make_kusumoto_planner(true, false); }},
      {"kusumoto-approx", "Kusumoto et al.'s DP over lower sets of ancestors, least time",
       [] { return make_kusumoto_planner(false, false); }},
      {"kusumoto-mem", "Kusumoto et al.'s DP over all lower sets, least memory (memory-centric)",
       [] { return make_kusumoto_planner(true, true); }},
      {"kusumoto-approx-mem", "Kusumoto et al.'s DP over lower sets of ancestors, least memory",
       [] { return make_kusumoto_planner(false, true); }},
  };
  return table;
}

std::string planner_names() {
  std::string out;
  for (const PlannerInfo& p : planner_registry()) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

std::unique_ptr<Planner> make_planner(const std::string& name) {
  for (const PlannerInfo& p : planner_registry())
    if (p.name == name) return p.make();
  throw PlanError("unknown planning method '" + name + "'; valid methods: " + planner_names());
}

}  // namespace dtr
