// plan.h: a static rematerialization plan and its versioned JSON file (docs/plan-format.md).
//
// A plan says, per graph node, whether it is kept (a checkpoint: resident from its
// computation to its last use) or recomputed (dropped after its forward use and recomputed
// from kept ancestors when the backward needs it); plan_eval.h defines exactly how such a
// plan runs. A method that needs finer control (revolve, rotor, checkmate) also gives an
// explicit schedule: the sequence of compute and free steps, which then overrides the
// per-node decisions when the plan is evaluated.
//
// A plan is bound to one graph: the file records the trace's file name, the node count and
// graph_hash(), and check_plan_matches() refuses a plan made for another graph.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "dtr/planner/graph.h"

namespace dtr {

constexpr uint32_t kPlanFormatVersion = 1;

enum class NodeDecision : uint8_t { keep, recompute };
const char* node_decision_name(NodeDecision d);

struct ScheduleStep {
  enum class Kind : uint8_t { compute, free };
  Kind kind = Kind::compute;
  uint32_t node = 0;
  bool operator==(const ScheduleStep& o) const { return kind == o.kind && node == o.node; }
};

struct Plan {
  std::string method;               // planner name
  std::string trace;                // trace (or graph) file name, no directory; may be ""
  uint32_t node_count = 0;          // graph.size()
  std::string graph_hash;           // graph_hash(graph)
  uint64_t budget_bytes = 0;        // the budget it was made for
  std::vector<NodeDecision> decisions;  // one per node
  std::vector<ScheduleStep> schedule;   // empty: run by the decisions
  // What the method predicted (informational; plan_eval recomputes them).
  uint64_t predicted_compute_ns = 0;
  uint64_t predicted_peak_bytes = 0;

  bool has_schedule() const { return !schedule.empty(); }
};

// A plan keeping every node, bound to `graph`.
Plan keep_all_plan(const Graph& graph, const std::string& method = "keep-all");
// Fills node_count and graph_hash from `graph`.
void bind_plan(Plan& plan, const Graph& graph, const std::string& trace_name);

// Throws PlanError ("PATH: problem; hint") for a malformed or unsupported file.
Plan read_plan(std::istream& in, const std::string& path_for_errors);
Plan read_plan(const std::string& path);
void write_plan(const Plan& plan, std::ostream& out);
void write_plan(const Plan& plan, const std::string& path);

// Throws PlanError when `plan` was made for another graph (count or hash differ) or its
// node indices are out of range for `graph`.
void check_plan_matches(const Plan& plan, const Graph& graph, const std::string& plan_path,
                        const std::string& trace_name);

}  // namespace dtr
