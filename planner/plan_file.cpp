// plan_file.cpp: reader and writer of the plan file (docs/plan-format.md), version 1.
//
//   {"format": "dtr-plan", "version": 1, "method": "chen",
//    "trace": {"file": "resnet32.log", "nodes": 1234, "hash": "0123456789abcdef"},
//    "budget_bytes": 4000000000,
//    "predicted": {"compute_ns": ..., "peak_bytes": ...},
//    "decisions": "KKRRK...",                    // one letter per node: K keep, R recompute
//    "schedule": [["compute", 3], ["free", 2]]}  // optional
//
// Decisions are one string rather than an array of objects so a plan for a 20 000-node trace
// stays small and diffable. Any structural problem is a PlanError naming the file.
#include <fstream>
#include <istream>
#include <limits>
#include <ostream>
#include <sstream>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "dtr/core/output_file.h"
#include "dtr/planner/plan.h"

namespace dtr {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem, const std::string& hint) {
  throw PlanError(path + ": " + problem + "; " + hint);
}

const char* kHint = "is it a plan written by `dtr-plan --out`? (docs/plan-format.md)";

}  // namespace

const char* node_decision_name(NodeDecision d) {
  return d == NodeDecision::keep ? "keep" : "recompute";
}

Plan keep_all_plan(const Graph& graph, const std::string& method) {
  Plan p;
  p.method = method;
  p.decisions.assign(graph.size(), NodeDecision::keep);
  bind_plan(p, graph, "");
  return p;
}

void bind_plan(Plan& plan, const Graph& graph, const std::string& trace_name) {
  plan.trace = trace_name;
  plan.node_count = static_cast<uint32_t>(graph.size());
  plan.graph_hash = graph_hash(graph);
}

void write_plan(const Plan& plan, std::ostream& out) {
  nlohmann::ordered_json j;
  j["format"] = "dtr-plan";
  j["version"] = kPlanFormatVersion;
  j["method"] = plan.method;
  j["trace"] = {{"file", plan.trace}, {"nodes", plan.node_count}, {"hash", plan.graph_hash}};
  j["budget_bytes"] = plan.budget_bytes;
  j["predicted"] = {{"compute_ns", plan.predicted_compute_ns},
                    {"peak_bytes", plan.predicted_peak_bytes}};
  std::string decisions;
  decisions.reserve(plan.decisions.size());
  for (NodeDecision d : plan.decisions) decisions += d == NodeDecision::keep ? 'K' : 'R';
  j["decisions"] = decisions;
  if (plan.has_schedule()) {
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (const ScheduleStep& s : plan.schedule)
      steps.push_back({s.kind == ScheduleStep::Kind::compute ? "compute" : "free", s.node});
    j["schedule"] = std::move(steps);
  }
  out << j.dump(1) << "\n";
}

void write_plan(const Plan& plan, const std::string& path) {
  std::ostringstream out;
  write_plan(plan, out);
  write_file(path, out.str(), "plan");  // Note [Output files]
}

// A plan's fields, each named where it is missing or of another type or range (a probe,
// 2026-12-07: "budget_bytes": -5 read as 2^64 - 5, "a budget of 16777216 TiB: fits";
// 1.5 as 1; "nodes": 2^32 + 680 as 680; "abc" gave nlohmann's "type must be number").
const nlohmann::json& field(const nlohmann::json& object, const char* key, const char* where,
                            const std::string& path) {
  if (!object.is_object() || !object.contains(key))
    fail(path, std::string("missing field \"") + key + "\"" + where, kHint);
  return object[key];
}

std::string text_field(const nlohmann::json& object, const char* key, const char* where,
                       const std::string& path) {
  const nlohmann::json& value = field(object, key, where, path);
  if (!value.is_string())
    fail(path,
         std::string("field \"") + key + "\"" + where + " is " + value.type_name() + ", not text",
         kHint);
  return value.get<std::string>();
}

uint64_t count_field(const nlohmann::json& object, const char* key, const char* where, uint64_t max,
                     const std::string& path) {
  const nlohmann::json& value = field(object, key, where, path);
  if (!value.is_number_unsigned() || value.get<uint64_t>() > max)
    fail(path,
         std::string("field \"") + key + "\"" + where + " is " + value.dump() +
             ", not a whole number from 0 to " + std::to_string(max),
         kHint);
  return value.get<uint64_t>();
}

Plan read_plan(std::istream& in, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse errors, a number out of range
    fail(path, std::string("not valid JSON (") + e.what() + ")", kHint);
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != "dtr-plan")
    fail(path, "missing \"format\": \"dtr-plan\"", kHint);
  if (!j.contains("version") || !j["version"].is_number_unsigned())
    fail(path, "\"version\" is missing or not a whole number from 1",
         "this dtr-plan reads version " + std::to_string(kPlanFormatVersion));
  const uint64_t version = j["version"].get<uint64_t>();
  if (version == 0 || version > kPlanFormatVersion)
    fail(path, "plan format version " + std::to_string(version) + " is not supported",
         "this dtr-plan reads version " + std::to_string(kPlanFormatVersion) +
             (version == 0 ? "; make the plan again with this dtr-plan"
                           : "; upgrade dtr, or make the plan again with this dtr-plan"));
  Plan p;
  try {
    p.method = text_field(j, "method", "", path);
    const nlohmann::json& t = field(j, "trace", "", path);
    p.trace = text_field(t, "file", " of \"trace\"", path);
    p.node_count = static_cast<uint32_t>(
        count_field(t, "nodes", " of \"trace\"", std::numeric_limits<uint32_t>::max(), path));
    p.graph_hash = text_field(t, "hash", " of \"trace\"", path);
    p.budget_bytes = count_field(j, "budget_bytes", "", std::numeric_limits<uint64_t>::max(), path);
    if (j.contains("predicted")) {
      const nlohmann::json& predicted = j["predicted"];
      const uint64_t max = std::numeric_limits<uint64_t>::max();
      if (predicted.is_object() && predicted.contains("compute_ns"))
        p.predicted_compute_ns =
            count_field(predicted, "compute_ns", " of \"predicted\"", max, path);
      if (predicted.is_object() && predicted.contains("peak_bytes"))
        p.predicted_peak_bytes =
            count_field(predicted, "peak_bytes", " of \"predicted\"", max, path);
    }
    const std::string decisions = text_field(j, "decisions", "", path);
    if (decisions.size() != p.node_count)
      fail(path, "\"decisions\" has " + std::to_string(decisions.size()) + " entries but the plan has " +
                     std::to_string(p.node_count) + " nodes",
           "the file is truncated or edited by hand");
    p.decisions.reserve(decisions.size());
    for (size_t i = 0; i < decisions.size(); ++i) {
      if (decisions[i] != 'K' && decisions[i] != 'R')
        fail(path, "decision " + std::to_string(i) + " is '" + std::string(1, decisions[i]) + "'",
             "each decision is K (keep) or R (recompute)");
      p.decisions.push_back(decisions[i] == 'K' ? NodeDecision::keep : NodeDecision::recompute);
    }
    if (j.contains("schedule")) {
      const auto& steps = j["schedule"];
      if (!steps.is_array()) fail(path, "\"schedule\" is not an array", kHint);
      for (size_t i = 0; i < steps.size(); ++i) {
        const auto& s = steps[i];
        if (!s.is_array() || s.size() != 2 || !s[0].is_string() || !s[1].is_number_unsigned())
          fail(path, "schedule step " + std::to_string(i) + " is not [\"compute\"|\"free\", NODE]", kHint);
        ScheduleStep step;
        const std::string kind = s[0].get<std::string>();
        if (kind == "compute")
          step.kind = ScheduleStep::Kind::compute;
        else if (kind == "free")
          step.kind = ScheduleStep::Kind::free;
        else
          fail(path, "schedule step " + std::to_string(i) + " has kind '" + kind + "'",
               "a step is \"compute\" or \"free\"");
        const uint64_t node = s[1].get<uint64_t>();
        if (node >= p.node_count)
          fail(path, "schedule step " + std::to_string(i) + " names node " + std::to_string(node) +
                         " of " + std::to_string(p.node_count),
               "the file is corrupt");
        step.node = static_cast<uint32_t>(node);
        p.schedule.push_back(step);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("missing or mistyped field (") + e.what() + ")", kHint);
  }
  return p;
}

Plan read_plan(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw PlanError(path + ": is a directory; give a plan file (dtr-plan --out)");
  std::ifstream in(path);
  if (!in) throw PlanError(path + ": cannot open plan file; check the path");
  return read_plan(in, path);
}

void check_plan_matches(const Plan& plan, const Graph& graph, const std::string& plan_path,
                        const std::string& trace_name) {
  const std::string hash = graph_hash(graph);
  if (plan.node_count != graph.size() || plan.graph_hash != hash) {
    // The same name and node count: the trace recorded again (op times are in the hash),
    // or read into a graph by a dtr-plan that builds it otherwise (as after Note [Pin ends]
    // changed in 2026-12).
    const bool same_shape = plan.node_count == graph.size() && plan.trace == trace_name;
    throw PlanError(plan_path + ": plan for another trace: made for '" + plan.trace + "' (" +
                    std::to_string(plan.node_count) + " nodes, hash " + plan.graph_hash +
                    "), not for '" + trace_name + "' (" + std::to_string(graph.size()) +
                    " nodes, hash " + hash + "); hint: make a plan for this trace with `dtr-plan`" +
                    (same_shape ? " (the same name and size: a trace recorded again has other "
                                  "op times, and a plan made by another dtr-plan version may "
                                  "read the trace into another graph)"
                                : ""));
  }
  if (plan.decisions.size() != graph.size())
    throw PlanError(plan_path + ": " + std::to_string(plan.decisions.size()) + " decisions for " +
                    std::to_string(graph.size()) + " nodes; hint: the plan is corrupt");
  for (const ScheduleStep& s : plan.schedule)
    if (s.node >= graph.size())
      throw PlanError(plan_path + ": schedule names node " + std::to_string(s.node) +
                      "; hint: the plan is corrupt");
}

}  // namespace dtr
