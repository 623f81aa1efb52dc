// warm_start.h: a static plan as the starting knowledge of the dynamic runtime.
//
// The plan's graph is the trace's (graph_from_trace): the k-th storage a replay makes is
// node k, so a plan translates into PlanHints for the engine's PlanGuide (eviction/plan_guide.h,
// Note [Warm start] in eviction/plan_guide.cpp) by the evaluator's own rules (Note [Static
// execution] in planner/plan_eval.cpp): a node dies after its last use; a `recompute`
// forward node that its step's backward reads is dropped after its last forward use. A plan's
// explicit schedule, if any, is not followed: its decisions are (every method writes them;
// for schedule methods they are the states stored in the first sweep), and deeper
// recomputation is left to the engine's on-demand rematerialization.
#pragma once

#include <memory>
#include <string>

#include "dtr/core/trace.h"
#include "dtr/eviction/plan_guide.h"
#include "dtr/planner/graph.h"
#include "dtr/planner/plan.h"

namespace dtr {

// Hints for `plan` on `graph`; throws PlanError if the plan has the wrong node count.
PlanHints plan_hints(const Graph& graph, const Plan& plan, const std::string& source = "");

// Reads the plan file at `plan_path` and checks it was made for `trace` (node count and
// graph hash: PlanError "plan for another trace" otherwise, as `dtr-plan eval`); returns
// its hints, with source "FILE (METHOD)".
std::shared_ptr<const PlanHints> load_warm_start(const Trace& trace, const std::string& plan_path);

// For a live host that has only the plan (DTR_PLAN): reads the trace at `trace_path`, or,
// when it is empty, the trace the plan names (its `trace.file`) in the plan's directory,
// then as above. Throws PlanError (or TraceError) naming the file and what to do.
std::shared_ptr<const PlanHints> load_warm_start(const std::string& plan_path,
                                                 const std::string& trace_path);

}  // namespace dtr
