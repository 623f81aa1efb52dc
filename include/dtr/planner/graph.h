// graph.h: the training graph static planners work on.
//
// A Graph is a DAG of nodes in a topological order (the order the trace ran them): node i
// is one op's result storage (multi-output ops give one node per non-alias output, views
// fold into the storage they alias). Each node has a compute cost (ns; for a multi-output
// op every output node carries the op's cost, since recomputing any of them reruns the op)
// and a memory size (bytes), and the nodes it reads (`deps`, all < i). `backward` marks
// nodes computed by a backward pass (after the trace's `ANNOTATE BACKWARD`, or inferred for
// a trace without one: Note [Backward passes of a recorded trace] in planner/graph.cpp). A
// trace of several training steps has one backward pass per step, so forward nodes may
// follow backward ones; `first_backward` is the first backward node. A node is `pinned`
// when it must stay resident from its computation on (constants such as parameters; the
// step's results); its pin may start later than its computation (`pinned_from`, Note [Late
// pins] in planner/graph.cpp) and end before the last stage (`pinned_until`, Note [Pin ends]
// there). Planners decide, per stage, which nodes are resident and which are (re)computed.
//
// A node may also be read after its stage by what makes no node (`reads`: an in-place write
// into another storage, a PIN); those stages need it resident like its users.
//
// A computation also holds the node's op scratch while it runs (`workspace_bytes`).
//
// Invariants (Graph::validate throws PlanError on a violation): deps are in range and point
// backward (a topological order; a cycle in a text graph is reported as such), sizes and
// costs are non-negative, first_backward is the index of the first backward node (size()
// when there is none), a late pin names a later node of a pinned one, a pin's end is at or
// after its start and every use of the node, reads name this or later nodes in ascending order.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtr/core/trace.h"

namespace dtr {

// Malformed planner input (graph text, plan file, budget): what() says what and a hint.
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GraphNode {
  std::string name;            // trace name of the storage's root tensor, or the text name
  uint64_t compute_ns = 0;     // cost of computing this node (the program's run of it)
  uint64_t size_bytes = 0;     // memory it holds while resident
  std::vector<uint32_t> deps;  // nodes it reads, each < this node's index
  bool backward = false;       // computed by a backward pass (one per training step)
  bool pinned = false;         // constants and the step's outputs: resident once computed
  // A late pin (Note [Late pins] in planner/graph.cpp): when > this node's index, the pin
  // starts at node pinned_from's computation, which needs this node resident; before, it
  // is an ordinary node. 0: pinned from its own computation.
  uint32_t pinned_from = 0;
  // The last stage the pin holds (Note [Pin ends] in planner/graph.cpp: a CONSTANT the
  // trace DISCARDs, such as a dropout mask): after it nothing uses the node, which is freed
  // and never made again. kPinnedToEnd: resident to the end.
  static constexpr uint32_t kPinnedToEnd = UINT32_MAX;
  uint32_t pinned_until = kPinnedToEnd;
  // Stages (ascending node indices, its own or later) after which the node is read by what makes
  // no node of its own: an in-place write into another storage, a PIN (Note [In-place
  // writes] in planner/graph.cpp). Each is one more use: that stage needs it resident.
  std::vector<uint32_t> reads;
  // Another output of the op that made node i-1 (multi-output ops, e.g. batch norm): the
  // op runs once for all its outputs, so total_compute_ns() charges it once, and so does
  // every run of it that plan evaluation counts (Note [One run of a multi-output op] in
  // planner/plan_eval.cpp).
  bool same_op_as_prev = false;
  // What computing it again costs, where that differs from compute_ns: a trace's REMAT_TIME
  // (a dropout mask the torch host keeps packed to bits; Note [Remat cost] in
  // eviction/engine.cpp). kSameCost: compute_ns; it is the trace's value for a CALL without
  // REMAT_TIME, as Engine::kSameCost is. Note [Remat cost in plans] in
  // planner/plan_eval.cpp says who charges it.
  static constexpr uint64_t kSameCost = TraceEvent::kSameTime;
  uint64_t remat_ns = kSameCost;
  uint64_t remat_cost() const { return remat_ns == kSameCost ? compute_ns : remat_ns; }
  // Scratch the op holds while it runs and frees before it returns (a trace's WORKSPACE:
  // a convolution's columns): every computation of the node needs it besides the node and
  // its deps. Like compute_ns, every output node of a multi-output op carries the op's.
  // Note [Op workspace in plans] in planner/plan_eval.cpp.
  uint64_t workspace_bytes = 0;
};

struct Graph {
  std::vector<GraphNode> nodes;  // in topological (execution) order
  uint32_t first_backward = 0;   // index of the first backward node (nodes.size() if none)

  // Whether some forward node follows a backward one (a trace of several training steps):
  // methods that see the forward part as the prefix [0, first_backward) plan only the
  // first step then (docs/planner.md).
  bool has_several_backward_passes() const;

  size_t size() const { return nodes.size(); }
  // The stage from which pinned node i stays resident: i, or its late pin's node.
  uint32_t pin_stage(uint32_t i) const {
    return nodes[i].pinned_from > i ? nodes[i].pinned_from : i;
  }
  bool pinned_late(uint32_t i) const { return nodes[i].pinned && nodes[i].pinned_from > i; }
  // Whether pinned node i's pin ends before the last stage (Note [Pin ends]).
  bool pin_ends(uint32_t i) const {
    return nodes[i].pinned && nodes[i].pinned_until != GraphNode::kPinnedToEnd;
  }
  // Whether pinned node i is held by its pin at stage t: from its pin's start to its end.
  bool pinned_at(uint32_t i, size_t t) const {
    return nodes[i].pinned && t >= pin_stage(i) && t <= nodes[i].pinned_until;
  }
  // In stage form (Checkmate's S and R, planner/checkmate_milp.cpp; Notes [Late pins in
  // stage form] and [Pin ends in stage form] there): whether node i must be kept into stage
  // t, whether stage t may not free it, and whether stage t may not compute it (after its
  // pin starts it is never made again, also after the pin ends).
  bool kept_pinned(uint32_t i, size_t t) const { return pinned_at(i, t) && t > pin_stage(i); }
  bool never_freed(uint32_t i, size_t t) const {
    return pinned_at(i, t) && t < nodes[i].pinned_until;
  }
  bool never_recomputed(uint32_t i, size_t t) const { return nodes[i].pinned && t > pin_stage(i); }
  // Whether stage t may not free node i after computing one of its earlier nodes (a remat):
  // a pin held at t holds until node t itself is computed, also in the stage it ends in.
  // The rule of the stage evaluator and stage_schedule_steps (Note [Pin ends in stage
  // form] in planner/checkmate_milp.cpp).
  bool held_through_stage(uint32_t i, size_t t) const { return pinned_at(i, t); }
  // Whether node i's pin starts late, at stage t: stage t must have it resident.
  bool pin_starts(uint32_t i, size_t t) const { return pinned_late(i) && pin_stage(i) == t; }
  // Whether node x is a later output of node prev's op (prev < x, and x and every node
  // between follow with same_op_as_prev): computed right after prev, it comes out of the
  // same run (Note [One run of a multi-output op] in planner/plan_eval.cpp).
  bool same_run(uint32_t prev, uint32_t x) const;
  uint64_t total_compute_ns() const;
  // Users of each node (inverse of deps), computed on demand.
  std::vector<std::vector<uint32_t>> users() const;
  // Every stage that needs each node resident: its users and its `reads`, ascending.
  std::vector<std::vector<uint32_t>> uses() const;
  // Throws PlanError naming the first broken invariant.
  void validate() const;
};

// A stable 64-bit hash of the graph's structure (names, costs, sizes, deps, flags), as
// 16 hex digits: a plan file records it so a plan is never applied to another graph.
std::string graph_hash(const Graph& graph);

// From a trace: one node per storage made by CALL/MUTATE/CONSTANT (Note [Trace to graph] in
// planner/graph.cpp).
Graph graph_from_trace(const Trace& trace);
// Whether graph_from_trace infers the backward passes of `trace` (it has no ANNOTATE
// BACKWARD) rather than reading them from the annotation.
bool backward_inferred(const Trace& trace);
// The op names whose results begin a backward pass in a trace without ANNOTATE BACKWARD:
// autograd's derivative ops, `aten::*_backward*` (Note [Backward passes of a recorded trace]).
bool is_backward_op_name(const std::string& op);
// Whether an op writes its first arg in place, by ATen's naming (`add_`, `addcdiv_`; not a
// dunder such as `__iand__`): its non-alias result is a new version of that arg.
bool is_inplace_op_name(const std::string& op);

// The text format for hand-made graphs (docs/plan-format.md), one node per line:
//   node NAME cost=C size=S [deps=A,B,...] [backward] [pinned] [pinned-from=LATER]
//        [pinned-until=END] [same-op] [reads=LATER,...] [workspace=W]
// `#` starts a comment. Names must be defined before use; a dependency on a later node
// (which is how a cycle shows up) is an error naming the line.
Graph read_graph_text(std::istream& in, const std::string& path_for_errors);
Graph read_graph_text(const std::string& path);
void write_graph_text(const Graph& graph, std::ostream& out);

// Checkmate's linear graph gen_linear_graph(n): 2n+1 unit-cost, unit-size nodes, chain edges
// i -> i+1 plus skip edges i -> 2n-i for i < n.
Graph linear_graph(uint32_t n);
// A chain of n nodes with the given per-node costs and sizes.
Graph chain_graph(const std::vector<uint64_t>& compute_ns, const std::vector<uint64_t>& size_bytes);

// A training chain in Griewank's model (docs/planner.md): L stages; a_0 is the pinned input,
// a_i = F_i(a_{i-1}) for i < L; the reversal of stage i is the backward node
// d_i = B_i(a_{i-1}, d_{i+1}) (d_{L+1} absent), which re-runs F_i internally, so a_L is never
// stored. d_1 is the step's output (pinned). All vectors have L entries:
// fwd_ns[i], fwd_bytes[i]: cost and size of a_i (fwd_ns[0] is the input's, charged once);
// bwd_ns[i], bwd_bytes[i]: cost and size of d_{i+1}.
struct ChainSpec {
  std::vector<uint64_t> fwd_ns, fwd_bytes, bwd_ns, bwd_bytes;
  size_t stages() const { return fwd_ns.size(); }
};
// Nodes a_0..a_{L-1} then d_L..d_1 (node L + (L - i) is d_i).
Graph training_chain_graph(const ChainSpec& spec);
// The ChainSpec `graph` was made from, if its structure is exactly a training chain's.
bool as_training_chain(const Graph& graph, ChainSpec* spec);

}  // namespace dtr
