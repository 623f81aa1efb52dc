// graph.cpp: the planners' graph, built from a trace or read from the text format.
//
// Note [Trace to graph]
// ~~~~~~~~~~~~~~~~~~~~~
// A graph node is a storage, as in the engine (Note [Trace to engine] in sim/replay.cpp),
// and the walk over the events mirrors compute_baseline's storage bookkeeping:
//  - CALL: one node per non-alias result (size from MEMORY, cost = the op's TIME, remat
//    cost = its REMAT_TIME where it has one, scratch = its WORKSPACE); its deps are the
//    distinct storages of the op's args. The second and later outputs of one op are
//    marked `same_op_as_prev`, so the op's time is counted once in the forward pass.
//    An alias result folds into the storage it views (its name maps to that node). An op
//    whose results are all aliases (a view) makes no node: its time is added to the viewed
//    storage's node (and its remat cost to the node's, its scratch as the larger of the
//    two: the ops run one after the other), since recomputing that storage must redo the
//    view too, and the graph's total compute stays equal to the trace's. An op
//    with no results at all becomes a zero-size node (it still reads its args at that
//    point).
//  - an alias result that writes in place reads its other args: Note [In-place writes].
//  - MUTATE: copy-on-write, as the replay does: a fresh node per mutated arg, of that arg's
//    storage size, depending on every arg's storage; the arg's name moves to the new node
//    (named NAME.vK for the K-th version, so node names stay unique).
//  - CONSTANT: a pinned node of cost 0 (parameters and inputs are resident throughout).
//  - COPY / COPY_FROM / RELEASE keep a reference count per node (names referring to it);
//    nodes still referenced after the last event are the step's outputs: pinned. PIN pins
//    (from its computation on, or later: Note [Late pins]); DISCARD (format v2: nothing
//    reads the storage again) unpins what PIN pinned, so a gradient pinned at one optimizer
//    step and discarded later is not resident to the end.
//    A CONSTANT stays pinned: it cannot be recomputed; a DISCARD ends its pin (Note [Pin
//    ends]).
//  - ANNOTATE BACKWARD: every node made afterwards has backward = true. A trace without
//    the annotation (every trace recorded from PyTorch) gets its backward passes inferred:
//    Note [Backward passes of a recorded trace].
// Unlike the trace's baseline, a graph node is free to die after its last use (planners
// place frees), so the graph's no-remat peak is at most the trace's baseline peak.
//
// Note [Backward passes of a recorded trace]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// DTR's logs mark their one backward pass with ANNOTATE BACKWARD. Traces recorded from a
// live PyTorch run (Note [Recording a trace] in integration/torch/recording.cpp) have no
// annotation, and usually several training steps. Without backward nodes a `recompute`
// decision never drops anything (Note [Static execution] drops a node only when its next
// user is a backward node), so every plan ran as keep-all: on a 2-step ResNet-18 trace,
// chen at budget 0.8 marked 494 of 806 nodes `recompute`, recomputed none, and its peak
// was the keep-all peak (122.92 MiB). So when a trace has no BACKWARD annotation, the
// backward passes are inferred from the flow of gradients:
//  - a node made by one of autograd's derivative ops is backward: ATen names them
//    `*_backward*` (convolution_backward, threshold_backward, native_batch_norm_backward,
//    nll_loss_backward, _log_softmax_backward_data, ...; is_backward_op_name);
//  - so is a node made by a CALL that reads a backward node: the gradient flows on (the
//    sum of two gradients, the mm of a linear layer's weight gradient, the div of a mean);
//  - a MUTATE's new version is backward iff the version it replaces is: accumulating into
//    a gradient stays backward, an optimizer's update of a parameter does not, so the next
//    step's forward pass, which reads the parameters, stays forward. (The torch host
//    records most in-place ops as alias CALLs, which make no node: Note [Mutation] in
//    integration/torch/lineage.cpp.) So is the result of an in-place op (ATen names them
//    `*_`: add_, addcdiv_) that is not an alias: the host records a write into a storage
//    that lineage read as a new storage made by the op from a copy of the old value, its
//    first arg (Note [Copy on write], same file). Adam's `param.addcdiv_(exp_avg, denom)`
//    reads the gradient's moments; taken as backward, it made every node of the next
//    step's forward pass backward (a 2-step trace of a 6-layer transformer: 800 of 1622
//    nodes backward, the second forward pass among them, so no plan could drop one of its
//    activations).
// Each step's backward pass is found (ResNet-18: nodes 381-511 and 674-804), with the next
// step's forward pass in between: forward nodes may follow backward ones (graph.h). The
// loss gradient's seed (ones_like(loss)) reads only forward nodes and stays forward, as
// would a derivative helper computed from forward values alone: a recompute decision on it
// costs a cheap recomputation, nothing worse. A trace whose derivative ops are not named
// `*backward*` (a hand-written loss whose gradient is plain mul and sum) has no backward
// node before the first named one; a trace with none plans as keep-all, as before.
//
// Note [In-place writes]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The torch host records an in-place op (relu_, `out += identity`, a gradient accumulated
// into a zeroed buffer, an optimizer's update of a parameter) as a CALL whose result aliases
// the written arg: no node, its time folded into the written storage's node. The engine
// still sees the op (sim/replay.cpp): the alias is a tensor of its own, made by that op, and
// an evicted storage's alias is made again by rerunning it, which reads all its args. Two
// things the graph must keep so that a plan's drops are the engine's (Note [Warm start] in
// eviction/plan_guide.cpp):
//  - a reader of the alias needs what the write read: its deps are the storages of its
//    args and, for an arg made by an in-place write, what that write read (`write_reads`,
//    through chains of writes). ResNet's `relu(out += identity)` depends on the identity,
//    which may be newer than `out` (the downsample branch is computed after the main one),
//    so it cannot be a dep of out's node; it is one of the relu's.
//  - the write's own reads, and a PIN (which makes the storage resident there), are uses
//    without a node: `reads`, the stage (last node made) after which they happen. The
//    evaluator needs the node resident there; warm start does not drop it before. Without
//    them an optimizer's read of a gradient, or a pin right after a gradient is made, was
//    no use at all: a plan let the gradient die at once and the run recomputed it, with its
//    backward chain (on the 2-step ResNet-18 trace: 435 remats, thrash; docs/planner.md).
// The phase of a node (Note [Backward passes of a recorded trace]) follows the storages of
// its args only, so a step's forward pass reading a parameter through the optimizer's alias
// does not become backward.
//
// Note [Late pins]
// ~~~~~~~~~~~~~~~~
// A PIN pins a storage from that event on (docs/trace-format.md); a pinned node is
// resident from its computation on. Mostly the two agree, or the difference is moot: a
// CONSTANT is pinned when made, and a gradient pinned at the optimizer step could not be
// dropped before it anyway, since once the backward pass has written into it nothing in
// the graph can recompute it (the write's inputs are newer than the storage, so they are
// not its deps: Note [Trace to graph] folds the write into the node). The exception is a
// buffer made from nothing (an op without args: zero_, fill_, zeros) well before anything
// writes into it: optimizer.zero_grad() makes one per gradient after a step and the next
// backward pass accumulates into it (Note [Overwrite] in integration/torch/lineage.cpp: "a
// zeroed gradient is then evictable until the next backward pass writes it"). Pinned
// from its computation, the 2-step ResNet-18 trace held 42.6 MiB of zeros through the
// whole second forward pass. So a pinned node without deps, not a CONSTANT, gets a late
// pin: `pinned_from` is the last node made before the first event that pins it (PIN) or
// writes into it in place (an alias CALL that reads another storage). That node is
// usually what the write reads (the gradient it accumulates), so at its stage both are
// resident, as when the write runs. Before it the buffer is an ordinary node: a plan that
// marks it `recompute` lets it go after its computation and recomputes it at the pin
// (Note [Static execution]), for the cost of its op (a memset). A node pinned only by
// being referenced at the end, and never written in place, is pinned from its computation.
//
// Note [Pin ends]
// ~~~~~~~~~~~~~~~
// A CONSTANT cannot be recomputed, so it is pinned; but most are not resident to the end.
// The torch host records what it never recomputes as a CONSTANT (Note [Never recompute] in
// integration/torch/dispatch_hook.cpp): the parameters, each step's input batch, and every
// dropout mask (bernoulli_ is seeded-random). A DISCARD says the live run found nothing
// that reads the storage again, its lineage included. Pinned to the end, a 2-step trace of
// the 6-layer transformer held all its 48 masks (24 of 4 MiB, 24 of 1 MiB) for good: the
// graph's no-remat peak was 319.6 MiB against the live run's 259.9 MiB, its plan floor
// 0.667 of that peak, and no static plan went under 0.7 where the simulated dtr_eq ran
// at 0.5.
// So a DISCARDed CONSTANT's pin ends (`pinned_until`) at the later of
//  - the last node made before the DISCARD, and
//  - the last use of any node that may have to be recomputed through it: its users and,
//    through unpinned nodes, theirs (a recomputation needs it resident, and it cannot be
//    made again). A pinned user is never recomputed after its pin starts, and a late
//    pinned node has no deps, so no path runs through a pinned node.
// After its end the node is freed and never computed again: Graph::pinned_at and the
// stage-form predicates (Note [Pin ends in stage form] in checkmate_milp.cpp), the plan
// floor and static execution (Note [Static execution]) all count it from its pin's start
// to its end. A PIN's DISCARD unpins instead (the storage was computed, so it may be
// recomputed: Note [Trace to graph]). On that transformer trace the no-remat peak is now
// the trace's baseline peak, 259.86 MiB, and the floor 0.433 of it.
// The RELEASE of a pinned node's last name ends its pin the same way, at the later of that
// node and the same last use, where no DISCARD came first (a DISCARD of a PIN unpins; one
// of a CONSTANT may follow the release). So does a MUTATE or a COPY_FROM that rebinds its
// last name (a CONSTANT written in place: its old version's pin ends at the new version).
// The program reads nothing of it after it lets go (the
// trace reader refuses it: Note [Names stay defined] in core/trace_reader.cpp), and the
// trace's baseline frees it there. Pinned to the end, a bias gradient's 40-byte sum (the
// host pins op results under `min_evictable`: Note [Small storages] in
// integration/torch/lineage.cpp) held a recorded 2-step mlp trace's keep-all peak 36
// bytes above its baseline peak, so every chain method recomputed at `--budget 1.0`
// (checkpoint-subset: overhead 1.28), and a CONSTANT the program released unread held its
// bytes to the end of a hand trace.
#include "dtr/planner/graph.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <istream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <sys/stat.h>

#include "dtr/core/options.h"
#include "dtr/core/trace.h"

namespace dtr {

namespace {

constexpr uint32_t kNone = UINT32_MAX;

std::string graph_error(const std::string& path, size_t line, const std::string& problem,
                        const std::string& hint) {
  return path + ":" + std::to_string(line) + ": " + problem + "; " + hint;
}

// Note [Pin ends]: each DISCARDed CONSTANT's pin ends at the later of its DISCARD and the
// last use of anything that may be recomputed through it. `reach[i]`: the last stage that
// needs node i resident, its own uses and, through unpinned users, theirs.
void end_discarded_pins(Graph& g, std::vector<uint32_t>& discarded_at) {
  if (discarded_at.empty()) return;
  discarded_at.resize(g.nodes.size(), kNone);
  const auto n = static_cast<uint32_t>(g.nodes.size());
  const std::vector<std::vector<uint32_t>> uses = g.uses();
  const std::vector<std::vector<uint32_t>> users = g.users();
  std::vector<uint32_t> reach(n, 0);
  for (uint32_t i = n; i-- > 0;) {
    reach[i] = uses[i].empty() ? i : uses[i].back();
    for (uint32_t u : users[i])
      if (!g.nodes[u].pinned) reach[i] = std::max(reach[i], reach[u]);
  }
  for (uint32_t s = 0; s < n; ++s) {
    if (discarded_at[s] == kNone || !g.nodes[s].pinned) continue;
    const uint32_t end = std::max({discarded_at[s], reach[s], g.pin_stage(s)});
    if (end + 1 < n) g.nodes[s].pinned_until = end;
  }
}

}  // namespace

bool Graph::has_several_backward_passes() const {
  for (uint32_t i = first_backward; i < nodes.size(); ++i)
    if (!nodes[i].backward) return true;
  return false;
}

bool Graph::same_run(uint32_t prev, uint32_t x) const {
  if (prev >= x || x >= nodes.size()) return false;
  for (uint32_t j = x; j > prev; --j)
    if (!nodes[j].same_op_as_prev) return false;
  return true;
}

uint64_t Graph::total_compute_ns() const {
  uint64_t total = 0;
  for (const GraphNode& n : nodes)
    if (!n.same_op_as_prev) total += n.compute_ns;
  return total;
}

std::vector<std::vector<uint32_t>> Graph::users() const {
  std::vector<std::vector<uint32_t>> out(nodes.size());
  for (uint32_t i = 0; i < nodes.size(); ++i)
    for (uint32_t d : nodes[i].deps) out[d].push_back(i);
  return out;
}

std::vector<std::vector<uint32_t>> Graph::uses() const {
  std::vector<std::vector<uint32_t>> out = users();
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].reads.empty()) continue;
    std::vector<uint32_t>& u = out[i];
    u.insert(u.end(), nodes[i].reads.begin(), nodes[i].reads.end());
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
  }
  return out;
}

void Graph::validate() const {
  if (first_backward > nodes.size())
    throw PlanError("graph: first_backward " + std::to_string(first_backward) + " is past the " +
                    std::to_string(nodes.size()) + " nodes");
  uint32_t first = 0;
  while (first < nodes.size() && !nodes[first].backward) ++first;
  if (first != first_backward)
    throw PlanError("graph: first_backward is " + std::to_string(first_backward) +
                    " but the first backward node is " + std::to_string(first) +
                    "; hint: first_backward is the index of the first backward node");
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    for (uint32_t d : n.deps)
      if (d >= i)
        throw PlanError("graph: node " + std::to_string(i) + " (" + n.name + ") depends on node " +
                        std::to_string(d) +
                        ", which is not earlier: cycle or undefined node; hint: nodes must be in a "
                        "topological order");
    if (n.same_op_as_prev && i == 0)
      throw PlanError("graph: node 0 (" + n.name + ") cannot share an op with a previous node");
    if (n.pinned_until != GraphNode::kPinnedToEnd &&
        (!n.pinned || n.pinned_until >= nodes.size() || n.pinned_until < pin_stage(i)))
      throw PlanError(
          "graph: node " + std::to_string(i) + " (" + n.name + ") has a pin ending at node " +
          std::to_string(n.pinned_until) +
          (n.pinned ? ", not between its pin's start and the last node" : " but is not pinned") +
          "; hint: pinned_until names this node or a later one of a pinned node");
    if (n.pinned_from > i && (!n.pinned || n.pinned_from >= nodes.size()))
      throw PlanError("graph: node " + std::to_string(i) + " (" + n.name +
                      ") has a late pin at node " + std::to_string(n.pinned_from) +
                      (n.pinned ? ", past the last node" : " but is not pinned") +
                      "; hint: pinned_from names a later node of a pinned node");
    for (size_t k = 0; k < n.reads.size(); ++k)
      if (n.reads[k] < i || n.reads[k] >= nodes.size() || (k > 0 && n.reads[k] <= n.reads[k - 1]))
        throw PlanError("graph: node " + std::to_string(i) + " (" + n.name + ") has a read at node " +
                        std::to_string(n.reads[k]) +
                        "; hint: reads name this node or later ones, in ascending order, each once");
  }
  bool ends = false;
  for (uint32_t i = 0; i < nodes.size(); ++i) ends |= pin_ends(i);
  if (!ends) return;
  const std::vector<std::vector<uint32_t>> all = uses();
  for (uint32_t i = 0; i < nodes.size(); ++i)
    if (pin_ends(i) && !all[i].empty() && all[i].back() > nodes[i].pinned_until)
      throw PlanError("graph: node " + std::to_string(i) + " (" + nodes[i].name +
                      ") is used at node " + std::to_string(all[i].back()) +
                      " after its pin ends at node " + std::to_string(nodes[i].pinned_until) +
                      "; hint: a pin ends at or after the node's last use (Note [Pin ends])");
}

std::string graph_hash(const Graph& graph) {
  // FNV-1a over a canonical byte form; stable across platforms and runs.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t len) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  auto mix_u64 = [&mix](uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    mix(b, 8);
  };
  mix_u64(graph.nodes.size());
  for (uint32_t i = 0; i < graph.nodes.size(); ++i) {
    const GraphNode& n = graph.nodes[i];
    mix_u64(n.name.size());
    mix(n.name.data(), n.name.size());
    mix_u64(n.compute_ns);
    mix_u64(n.size_bytes);
    mix_u64(n.deps.size());
    for (uint32_t d : n.deps) mix_u64(d);
    const bool late = graph.pinned_late(i);
    const bool remat = n.remat_ns != GraphNode::kSameCost;
    mix_u64((n.backward ? 1u : 0u) | (n.pinned ? 2u : 0u) | (n.same_op_as_prev ? 4u : 0u) |
            (late ? 8u : 0u) | (remat ? 16u : 0u));
    if (late) mix_u64(n.pinned_from);  // absent otherwise: older graphs keep their hashes
    if (remat) mix_u64(n.remat_ns);    // likewise
    if (graph.pin_ends(i)) mix_u64(n.pinned_until | (uint64_t{1} << 62));  // likewise
    if (!n.reads.empty()) {             // likewise
      mix_u64(n.reads.size() | (uint64_t{1} << 63));
      for (uint32_t q : n.reads) mix_u64(q);
    }
    if (n.workspace_bytes) mix_u64(n.workspace_bytes | (uint64_t{1} << 61));  // likewise
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool is_backward_op_name(const std::string& op) { return op.find("backward") != std::string::npos; }

bool is_inplace_op_name(const std::string& op) {
  const size_t n = op.size();
  return n >= 2 && op[n - 1] == '_' && op[n - 2] != '_';
}

bool backward_inferred(const Trace& trace) {
  for (const TraceEvent& ev : trace.events)
    if (ev.kind == TraceEventKind::annotate && ev.op == "BACKWARD") return false;
  return true;
}

namespace {

// A view's op folded into the node of the storage it views (Note [Trace to graph]).
void add_cost(GraphNode& node, const TraceEvent& ev) {
  if (node.remat_ns != GraphNode::kSameCost || ev.remat_time_ns != TraceEvent::kSameTime)
    node.remat_ns = node.remat_cost() +
                    (ev.remat_time_ns == TraceEvent::kSameTime ? ev.time_ns : ev.remat_time_ns);
  node.compute_ns += ev.time_ns;
  node.workspace_bytes = std::max(node.workspace_bytes, ev.workspace_bytes);
}

}  // namespace

Graph graph_from_trace(const Trace& trace) {
  // Note [Plans number constants at first read] in core/constant_placement.cpp
  if (has_early_constants(trace))
    throw PlanError("trace '" + trace.path +
                    "' declares constants where their memory was "
                    "allocated (recorded with trace_constants:allocated), so its storages are "
                    "not made in the order the run makes them and no plan made from it could "
                    "be followed; record it again with the default, trace_constants:read");
  Graph g;
  std::vector<uint32_t> storage_of(trace.names.size(), kNone);
  std::vector<uint32_t> refs;                  // per node: names referring to it
  std::unordered_map<NameId, uint32_t> versions;  // MUTATE count per name
  bool backward = false;                          // past ANNOTATE BACKWARD
  const bool infer = backward_inferred(trace);    // Note [Backward passes of a recorded trace]

  // `inferred_backward`: the node's phase when the trace has no annotation.
  auto add_node = [&](std::string name, uint64_t cost, uint64_t size, std::vector<uint32_t> deps,
                      bool inferred_backward) {
    GraphNode n;
    n.name = std::move(name);
    n.compute_ns = cost;
    n.size_bytes = size;
    n.deps = std::move(deps);
    n.backward = infer ? inferred_backward : backward;
    g.nodes.push_back(std::move(n));
    refs.push_back(1);
    return static_cast<uint32_t>(g.nodes.size() - 1);
  };
  auto reads_backward = [&](const std::vector<uint32_t>& deps) {
    for (uint32_t d : deps)
      if (g.nodes[d].backward) return true;
    return false;
  };
  // Note [In-place writes]: per name, the other storages that defining its tensor reads
  // (empty for a storage's own tensor and for plain views).
  std::vector<std::vector<uint32_t>> write_reads(trace.names.size());
  // The storages the args are: the phase of the op (Note [Backward passes of a recorded
  // trace]) follows these alone.
  auto storages_of = [&](const std::vector<NameId>& args) {
    std::vector<uint32_t> deps;
    for (NameId a : args)
      if (storage_of[a] != kNone) deps.push_back(storage_of[a]);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    return deps;
  };
  // What recomputing a reader of the args needs: their storages and, for an arg made by
  // an in-place write, what the write read (Note [In-place writes]).
  auto deps_of = [&](const std::vector<NameId>& args) {
    std::vector<uint32_t> deps = storages_of(args);
    const size_t direct = deps.size();
    for (NameId a : args) deps.insert(deps.end(), write_reads[a].begin(), write_reads[a].end());
    if (deps.size() == direct) return deps;
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    return deps;
  };
  auto retain = [&](uint32_t s) {
    if (s != kNone) ++refs[s];
  };
  auto read_at = [&](uint32_t s, uint32_t stage) {
    std::vector<uint32_t>& reads = g.nodes[s].reads;
    if (stage >= s && (reads.empty() || reads.back() < stage)) reads.push_back(stage);
  };
  std::vector<uint32_t> released_at;  // Note [Pin ends]: where a node's last name went
  auto drop = [&](uint32_t s) {
    if (s == kNone || refs[s] == 0) return;
    if (--refs[s] == 0) {
      released_at.resize(g.nodes.size(), kNone);
      released_at[s] = static_cast<uint32_t>(g.nodes.size() - 1);
    }
  };

  std::unordered_set<uint32_t> pinned_by_pin;  // nodes a PIN (not a CONSTANT) pinned
  // Note [Late pins]: per node, the last node made before it was first pinned or written
  // in place (kNone: neither), and whether it is a CONSTANT.
  std::vector<uint32_t> held_from;
  std::vector<char> constant;
  std::vector<uint32_t> discarded_at;  // Note [Pin ends]: a CONSTANT's DISCARD, by node
  auto hold = [&](uint32_t s) {
    if (s == kNone || g.nodes.empty()) return;
    held_from.resize(g.nodes.size(), kNone);
    held_from[s] = std::min(held_from[s], static_cast<uint32_t>(g.nodes.size() - 1));
  };
  for (const TraceEvent& ev : trace.events) {
    switch (ev.kind) {
      case TraceEventKind::annotate:
        if (ev.op == "BACKWARD") backward = true;
        break;
      case TraceEventKind::constant: {
        const uint32_t s =
            add_node(trace.names[ev.results[0].name], 0, ev.results[0].size_bytes, {}, false);
        g.nodes[s].pinned = true;
        storage_of[ev.results[0].name] = s;
        write_reads[ev.results[0].name].clear();
        constant.resize(g.nodes.size(), 0);
        constant[s] = 1;
        break;
      }
      case TraceEventKind::call: {
        const std::vector<uint32_t> deps = deps_of(ev.args);
        // Note [Backward passes of a recorded trace]: an in-place op's own result is a new
        // version of its first arg.
        const bool copied = is_inplace_op_name(ev.op) && !ev.args.empty() &&
                            storage_of[ev.args[0]] != kNone && !is_backward_op_name(ev.op);
        const bool gradient =
            copied ? g.nodes[storage_of[ev.args[0]]].backward
                   : is_backward_op_name(ev.op) || reads_backward(storages_of(ev.args));
        bool made = false;
        for (const TraceResult& r : ev.results) {
          if (r.alias >= 0) continue;
          const uint32_t s =
              add_node(trace.names[r.name], ev.time_ns, r.size_bytes, deps, gradient);
          g.nodes[s].remat_ns = ev.remat_time_ns;  // GraphNode::kSameCost is kSameTime
          g.nodes[s].workspace_bytes = ev.workspace_bytes;
          g.nodes[s].same_op_as_prev = made;
          made = true;
          storage_of[r.name] = s;
          write_reads[r.name].clear();
        }
        for (const TraceResult& r : ev.results) {
          if (r.alias < 0) continue;
          const uint32_t s = storage_of[ev.args[r.alias]];
          storage_of[r.name] = s;
          retain(s);
          // Note [In-place writes]: the alias is defined by this op, which reads `deps`.
          std::vector<uint32_t>& reads = write_reads[r.name];
          reads.clear();
          for (uint32_t d : deps)
            if (d != s) reads.push_back(d);
          // An in-place write (the torch host records one as an alias result) that reads
          // another storage: Note [Late pins].
          for (NameId a : ev.args)
            if (storage_of[a] != kNone && storage_of[a] != s) {
              hold(s);
              break;
            }
        }
        if (!made && !ev.results.empty()) {
          // Note [In-place writes]: what the write reads besides the storages it writes is
          // read now, at the last node made.
          const uint32_t now = static_cast<uint32_t>(g.nodes.size() - 1);
          for (uint32_t d : storages_of(ev.args)) {
            bool written = false;
            for (const TraceResult& r : ev.results) written |= storage_of[r.name] == d;
            if (!written) read_at(d, now);
          }
        }
        if (!made) {
          if (ev.results.empty()) {
            const uint32_t s =
                add_node(ev.op + "@" + std::to_string(ev.line), ev.time_ns, 0, deps, gradient);
            g.nodes[s].workspace_bytes = ev.workspace_bytes;
            refs[s] = 0;  // nothing refers to it
          } else {
            const uint32_t s = storage_of[ev.args[ev.results[0].alias]];
            if (s != kNone) add_cost(g.nodes[s], ev);
          }
        }
        break;
      }
      case TraceEventKind::mutate: {
        const std::vector<uint32_t> deps = deps_of(ev.args);
        std::vector<uint32_t> fresh;
        for (size_t i = 0; i < ev.mutated.size(); ++i) {
          const NameId name = ev.args[ev.mutated[i]];
          const uint32_t old = storage_of[name];
          const uint32_t k = ++versions[name];
          const uint32_t s = add_node(trace.names[name] + ".v" + std::to_string(k), ev.time_ns,
                                      old == kNone ? 0 : g.nodes[old].size_bytes, deps,
                                      old != kNone && g.nodes[old].backward);
          g.nodes[s].same_op_as_prev = i > 0;
          fresh.push_back(s);
        }
        for (size_t i = 0; i < ev.mutated.size(); ++i) {
          const NameId name = ev.args[ev.mutated[i]];
          const uint32_t old = storage_of[name];
          storage_of[name] = fresh[i];
          write_reads[name].clear();  // the new version is its storage's own tensor
          drop(old);
        }
        break;
      }
      case TraceEventKind::copy:
        storage_of[ev.dst] = storage_of[ev.src];
        write_reads[ev.dst] = write_reads[ev.src];
        retain(storage_of[ev.src]);
        break;
      case TraceEventKind::copy_from: {
        const uint32_t old = storage_of[ev.dst];
        storage_of[ev.dst] = storage_of[ev.src];
        write_reads[ev.dst] = write_reads[ev.src];
        retain(storage_of[ev.src]);
        drop(old);
        break;
      }
      case TraceEventKind::release: drop(storage_of[ev.dst]); break;
      case TraceEventKind::pin:
      case TraceEventKind::pin_when_material:  // everything is material in a plan's baseline
        if (storage_of[ev.dst] != kNone) {
          // A pin makes the storage resident now; one DISCARD later unpins may leave it an
          // ordinary node (Note [In-place writes]).
          read_at(storage_of[ev.dst], static_cast<uint32_t>(g.nodes.size() - 1));
          g.nodes[storage_of[ev.dst]].pinned = true;
          pinned_by_pin.insert(storage_of[ev.dst]);
          hold(storage_of[ev.dst]);
        }
        break;
      case TraceEventKind::discard: {
        const uint32_t s = storage_of[ev.dst];
        if (s == kNone) break;
        if (pinned_by_pin.erase(s) > 0) {
          g.nodes[s].pinned = false;
        } else if (s < constant.size() && constant[s]) {
          discarded_at.resize(g.nodes.size(), kNone);
          discarded_at[s] = static_cast<uint32_t>(g.nodes.size() - 1);
        }
        break;
      }
    }
  }
  g.first_backward = 0;
  while (g.first_backward < g.nodes.size() && !g.nodes[g.first_backward].backward)
    ++g.first_backward;
  for (uint32_t s = 0; s < g.nodes.size(); ++s)
    if (refs[s] > 0) g.nodes[s].pinned = true;
  held_from.resize(g.nodes.size(), kNone);
  constant.resize(g.nodes.size(), 0);
  for (uint32_t s = 0; s < g.nodes.size(); ++s) {
    GraphNode& n = g.nodes[s];
    if (n.pinned && !constant[s] && n.deps.empty() && held_from[s] != kNone && held_from[s] > s)
      n.pinned_from = held_from[s];
  }
  // Note [Pin ends]: a pinned node the program let go of (the RELEASE of its last name)
  // ends its pin there too, unless a DISCARD ended it earlier or unpinned it.
  released_at.resize(g.nodes.size(), kNone);
  for (uint32_t s = 0; s < g.nodes.size(); ++s) {
    if (released_at[s] == kNone || refs[s] > 0 || !g.nodes[s].pinned) continue;
    discarded_at.resize(g.nodes.size(), kNone);
    discarded_at[s] = std::min(discarded_at[s], released_at[s]);
  }
  end_discarded_pins(g, discarded_at);
  g.validate();
  return g;
}

// ---- text format ----

namespace {

bool parse_u64(const std::string& text, uint64_t& out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

// The names in a comma-separated list (deps=, reads=), empty entries skipped.
std::vector<std::string> name_list(const std::string& list) {
  std::vector<std::string> names;
  for (size_t start = 0; start < list.size();) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    if (comma > start) names.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

// What a name in the text format may not hold: the separators of its fields and lists,
// the comment sign, spaces and control characters (Note [Graph names]).
bool separates(char c) {
  return c == ',' || c == '=' || c == '#' || static_cast<unsigned char>(c) <= ' ';
}

bool valid_name(const std::string& name) {
  return !name.empty() && std::none_of(name.begin(), name.end(), separates);
}

}  // namespace

Graph read_graph_text(std::istream& in, const std::string& path) {
  struct Line {
    size_t number;
    std::vector<std::string> tokens;
  };
  std::vector<Line> lines;
  std::string text;
  for (size_t number = 1; std::getline(in, text); ++number) {
    const size_t hash = text.find('#');
    if (hash != std::string::npos) text.resize(hash);
    std::istringstream ss(text);
    Line l{number, {}};
    for (std::string tok; ss >> tok;) l.tokens.push_back(tok);
    if (!l.tokens.empty()) lines.push_back(std::move(l));
  }
  if (lines.empty())  // an empty file planned as an empty graph, "feasible" (a probe)
    throw PlanError(path +
                    ": no nodes: the graph is empty; each line is `node NAME cost=C "
                    "size=S [deps=A,B] ...` (docs/plan-format.md)");
  // First pass: every name and its line, so a forward reference can be told from a typo.
  std::map<std::string, std::pair<uint32_t, size_t>> index;  // name -> (node, line)
  for (const Line& l : lines) {
    if (l.tokens[0] != "node")
      throw PlanError(graph_error(path, l.number, "unknown keyword '" + l.tokens[0] + "'",
                                  "each line is `node NAME cost=C size=S [deps=A,B] [backward] "
                                  "[pinned] [same-op]`"));
    if (l.tokens.size() < 2 || !valid_name(l.tokens[1]))
      throw PlanError(graph_error(path, l.number, "missing or invalid node name",
                                  "a name has no spaces, commas, '=' or '#'"));
    const auto [it, fresh] =
        index.emplace(l.tokens[1], std::make_pair(static_cast<uint32_t>(index.size()), l.number));
    if (!fresh)
      throw PlanError(graph_error(path, l.number, "node '" + l.tokens[1] + "' defined twice",
                                  "first defined on line " + std::to_string(it->second.second)));
  }
  // size= and workspace=: bytes with an optional K/M/G suffix, at most 2^50 as in a trace
  // (Note [Quantities that sum] in core/trace_reader.cpp: two costs of 2^63 summed to 0,
  // "feasible", and sizes of 9000000T planned).
  auto bytes_value = [&](const std::string& key, const std::string& value, size_t line) {
    uint64_t bytes = 0;
    try {
      bytes = parse_size(value);
    } catch (const ConfigError&) {
      throw PlanError(graph_error(path, line, "bad " + key + " '" + value + "'",
                                  key + " is bytes, optionally with K/M/G (512, 4K, 1.5M)"));
    }
    if (bytes > kMaxTraceQuantity)
      throw PlanError(graph_error(path, line, key + " '" + value + "' is above 2^50 bytes (1 PiB)",
                                  "the planner sums sizes, and larger ones overflow"));
    return bytes;
  };
  Graph g;
  bool seen_backward = false;
  uint64_t cost_sum = 0, bytes_sum = 0;  // Note [Quantities that sum]
  for (const Line& l : lines) {
    GraphNode n;
    n.name = l.tokens[1];
    const uint32_t self = static_cast<uint32_t>(g.nodes.size());
    bool have_cost = false, have_size = false;
    std::string pinned_from;  // resolved after the line: it names a later node
    std::string pinned_until;  // likewise
    std::string reads;        // likewise: later nodes
    for (size_t t = 2; t < l.tokens.size(); ++t) {
      const std::string& tok = l.tokens[t];
      const size_t eq = tok.find('=');
      const std::string key = tok.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : tok.substr(eq + 1);
      if (tok == "backward") {
        n.backward = true;
      } else if (tok == "pinned") {
        n.pinned = true;
      } else if (tok == "same-op") {
        n.same_op_as_prev = true;
      } else if (key == "pinned-from" && eq != std::string::npos) {
        pinned_from = value;
      } else if (key == "pinned-until" && eq != std::string::npos) {
        pinned_until = value;
      } else if (key == "reads" && eq != std::string::npos) {
        reads = value;
      } else if (key == "cost" && eq != std::string::npos) {
        if (!parse_u64(value, n.compute_ns) || n.compute_ns > kMaxTraceQuantity)
          throw PlanError(graph_error(path, l.number, "bad cost '" + value + "'",
                                      "cost is a non-negative integer (ns), at most 2^50"));
        have_cost = true;
      } else if (key == "remat-cost" && eq != std::string::npos) {
        if (!parse_u64(value, n.remat_ns) || n.remat_ns > kMaxTraceQuantity)
          throw PlanError(graph_error(path, l.number, "bad remat-cost '" + value + "'",
                                      "remat-cost is a non-negative integer (ns), at most 2^50"));
      } else if (key == "workspace" && eq != std::string::npos) {
        n.workspace_bytes = bytes_value(key, value, l.number);
      } else if (key == "size" && eq != std::string::npos) {
        n.size_bytes = bytes_value(key, value, l.number);
        have_size = true;
      } else if (key == "deps" && eq != std::string::npos) {
        for (const std::string& dep : name_list(value)) {
          const auto it = index.find(dep);
          if (it == index.end())
            throw PlanError(graph_error(path, l.number,
                                        "cycle or undefined node: '" + dep + "' is not defined",
                                        "define every dependency on an earlier line"));
          if (it->second.first >= self)
            throw PlanError(graph_error(
                path, l.number,
                "cycle or undefined node: '" + n.name + "' depends on '" + dep + "' (line " +
                    std::to_string(it->second.second) + "), which is not defined before it",
                "list nodes in a topological order; a graph with a cycle has none"));
          n.deps.push_back(it->second.first);
        }
        std::sort(n.deps.begin(), n.deps.end());
        n.deps.erase(std::unique(n.deps.begin(), n.deps.end()), n.deps.end());
      } else {
        throw PlanError(graph_error(path, l.number, "unknown field '" + tok + "'",
                                    "fields are cost=, remat-cost=, size=, deps=, backward, "
                                    "pinned, pinned-from=, pinned-until=, same-op, reads=, "
                                    "workspace="));
      }
    }
    // pinned-from=, pinned-until= and reads= name nodes defined at or after `first`.
    auto node_from = [&](const std::string& name, uint32_t first) {
      const auto it = index.find(name);
      return it == index.end() || it->second.first < first ? kNone : it->second.first;
    };
    if (!pinned_from.empty()) {
      n.pinned_from = n.pinned ? node_from(pinned_from, self + 1) : kNone;
      if (n.pinned_from == kNone)
        throw PlanError(
            graph_error(path, l.number, "bad pinned-from='" + pinned_from + "'",
                        "pinned-from= names a node defined after this one, which must be "
                        "`pinned` (Note [Late pins])"));
    }
    if (!pinned_until.empty()) {
      n.pinned_until = n.pinned ? node_from(pinned_until, self) : kNone;
      if (n.pinned_until == kNone)
        throw PlanError(
            graph_error(path, l.number, "bad pinned-until='" + pinned_until + "'",
                        "pinned-until= names this node or one defined after it, and the node "
                        "must be `pinned` (Note [Pin ends])"));
    }
    for (const std::string& name : name_list(reads)) {
      n.reads.push_back(node_from(name, self));
      if (n.reads.back() == kNone)
        throw PlanError(graph_error(path, l.number, "bad reads= entry '" + name + "'",
                                    "reads= names this node or nodes defined after it (Note "
                                    "[In-place writes])"));
    }
    std::sort(n.reads.begin(), n.reads.end());
    n.reads.erase(std::unique(n.reads.begin(), n.reads.end()), n.reads.end());
    if (!have_cost || !have_size)
      throw PlanError(graph_error(path, l.number, "node '" + n.name + "' lacks cost= or size=",
                                  "both are required"));
    if (n.backward && !seen_backward) {  // a forward node may follow: the next step
      seen_backward = true;
      g.first_backward = self;
    }
    if (n.same_op_as_prev && self == 0)
      throw PlanError(graph_error(path, l.number, "same-op on the first node",
                                  "same-op marks another output of the previous node's op"));
    cost_sum += n.compute_ns + (n.remat_ns == GraphNode::kSameCost ? 0 : n.remat_ns);
    bytes_sum += n.size_bytes + n.workspace_bytes;
    if (cost_sum > kMaxTraceSum || bytes_sum > kMaxTraceSum)
      throw PlanError(graph_error(path, l.number,
                                  "the graph's costs or sizes add up to more than 2^60 here",
                                  "the planner's sums cannot hold them; a real graph's are far "
                                  "smaller"));
    g.nodes.push_back(std::move(n));
  }
  if (!seen_backward) g.first_backward = static_cast<uint32_t>(g.nodes.size());
  g.validate();
  return g;
}

Graph read_graph_text(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw PlanError(path + ": is a directory; give a graph file (dtr-plan graph --out)");
  std::ifstream in(path);
  if (!in) throw PlanError(path + ": cannot open graph file; check the path");
  return read_graph_text(in, path);
}

// Note [Graph names]
// ~~~~~~~~~~~~~~~~~~
// A trace's names are any text ("a b", "x,y"), and a storage's versions are named by
// suffix ("y.v1"), which a name in the trace may already end with; the text format's
// names have no spaces, commas, '=' or '#', and are unique. Until 2026-12-07 `dtr-plan
// graph` wrote them as they were, and `--graph` refused what it had written (a probe). So
// the writer spells each node's name with '_' for each such character and, where that
// name is taken, a `~N` suffix; the graph written is the same graph, its names aside.
namespace {

std::vector<std::string> text_names(const Graph& graph) {
  std::vector<std::string> names;
  std::set<std::string> taken;
  for (const GraphNode& n : graph.nodes) {
    std::string name = n.name.empty() ? std::string("_") : n.name;
    std::replace_if(name.begin(), name.end(), separates, '_');
    if (taken.count(name)) {
      size_t k = 2;
      while (taken.count(name + "~" + std::to_string(k))) ++k;
      name += "~" + std::to_string(k);
    }
    taken.insert(name);
    names.push_back(std::move(name));
  }
  return names;
}

}  // namespace

void write_graph_text(const Graph& graph, std::ostream& out) {
  out << "# dtr graph: " << graph.size() << " nodes (docs/plan-format.md)\n";
  const std::vector<std::string> name = text_names(graph);  // Note [Graph names]
  for (uint32_t i = 0; i < graph.nodes.size(); ++i) {
    const GraphNode& n = graph.nodes[i];
    out << "node " << name[i] << " cost=" << n.compute_ns;
    if (n.remat_ns != GraphNode::kSameCost) out << " remat-cost=" << n.remat_ns;
    out << " size=" << n.size_bytes;
    if (!n.deps.empty()) {
      out << " deps=";
      for (size_t k = 0; k < n.deps.size(); ++k) out << (k ? "," : "") << name[n.deps[k]];
    }
    if (n.backward) out << " backward";
    if (n.pinned) out << " pinned";
    if (graph.pinned_late(i)) out << " pinned-from=" << name[n.pinned_from];
    if (graph.pin_ends(i)) out << " pinned-until=" << name[n.pinned_until];
    if (n.same_op_as_prev) out << " same-op";
    for (size_t k = 0; k < n.reads.size(); ++k) out << (k ? "," : " reads=") << name[n.reads[k]];
    if (n.workspace_bytes) out << " workspace=" << n.workspace_bytes;
    out << "\n";
  }
}

Graph linear_graph(uint32_t n) {
  Graph g;
  const uint32_t count = 2 * n + 1;
  for (uint32_t i = 0; i < count; ++i) {
    GraphNode node;
    node.name = "n" + std::to_string(i);
    node.compute_ns = 1;
    node.size_bytes = 1;
    if (i > 0) node.deps.push_back(i - 1);
    if (i > n) node.deps.push_back(2 * n - i);  // skip edge (2n-i) -> i
    std::sort(node.deps.begin(), node.deps.end());
    node.deps.erase(std::unique(node.deps.begin(), node.deps.end()), node.deps.end());
    node.backward = i > n;
    g.nodes.push_back(std::move(node));
  }
  g.first_backward = n + 1;
  g.validate();
  return g;
}

Graph chain_graph(const std::vector<uint64_t>& compute_ns, const std::vector<uint64_t>& size_bytes) {
  if (compute_ns.size() != size_bytes.size())
    throw PlanError("chain_graph: " + std::to_string(compute_ns.size()) + " costs but " +
                    std::to_string(size_bytes.size()) + " sizes");
  Graph g;
  for (size_t i = 0; i < compute_ns.size(); ++i) {
    GraphNode node;
    node.name = "c" + std::to_string(i);
    node.compute_ns = compute_ns[i];
    node.size_bytes = size_bytes[i];
    if (i > 0) node.deps.push_back(static_cast<uint32_t>(i - 1));
    g.nodes.push_back(std::move(node));
  }
  g.first_backward = static_cast<uint32_t>(g.nodes.size());
  return g;
}

Graph training_chain_graph(const ChainSpec& spec) {
  const size_t L = spec.stages();
  if (L == 0 || spec.fwd_bytes.size() != L || spec.bwd_ns.size() != L || spec.bwd_bytes.size() != L)
    throw PlanError("training_chain_graph: need L >= 1 stages and four vectors of L entries");
  Graph g;
  for (size_t i = 0; i < L; ++i) {
    GraphNode a;
    a.name = "a" + std::to_string(i);
    a.compute_ns = spec.fwd_ns[i];
    a.size_bytes = spec.fwd_bytes[i];
    if (i > 0) a.deps.push_back(static_cast<uint32_t>(i - 1));
    a.pinned = i == 0;
    g.nodes.push_back(std::move(a));
  }
  g.first_backward = static_cast<uint32_t>(L);
  for (size_t i = L; i >= 1; --i) {  // d_i, i = L..1
    GraphNode d;
    d.name = "d" + std::to_string(i);
    d.compute_ns = spec.bwd_ns[i - 1];
    d.size_bytes = spec.bwd_bytes[i - 1];
    d.deps.push_back(static_cast<uint32_t>(i - 1));                // a_{i-1}
    if (i < L) d.deps.push_back(static_cast<uint32_t>(g.nodes.size() - 1));  // d_{i+1}
    d.backward = true;
    d.pinned = i == 1;
    g.nodes.push_back(std::move(d));
  }
  g.validate();
  return g;
}

bool as_training_chain(const Graph& graph, ChainSpec* spec) {
  const size_t n = graph.size();
  if (n < 2 || n % 2 != 0 || graph.first_backward != n / 2) return false;
  const size_t L = n / 2;
  for (uint32_t i = 0; i < n; ++i)  // the chain model has no late pins, pin ends or reads
    if (graph.pinned_late(i) || graph.pin_ends(i) || !graph.nodes[i].reads.empty()) return false;
  ChainSpec s;
  for (size_t i = 0; i < L; ++i) {
    const GraphNode& a = graph.nodes[i];
    const std::vector<uint32_t> want = i > 0 ? std::vector<uint32_t>{uint32_t(i - 1)} : std::vector<uint32_t>{};
    if (a.deps != want || a.pinned != (i == 0) || a.same_op_as_prev) return false;
    s.fwd_ns.push_back(a.compute_ns);
    s.fwd_bytes.push_back(a.size_bytes);
  }
  s.bwd_ns.assign(L, 0);
  s.bwd_bytes.assign(L, 0);
  for (size_t i = L; i >= 1; --i) {
    const uint32_t idx = static_cast<uint32_t>(L + (L - i));
    const GraphNode& d = graph.nodes[idx];
    std::vector<uint32_t> want{uint32_t(i - 1)};
    if (i < L) want.push_back(idx - 1);
    if (d.deps != want || d.pinned != (i == 1) || d.same_op_as_prev) return false;
    s.bwd_ns[i - 1] = d.compute_ns;
    s.bwd_bytes[i - 1] = d.size_bytes;
  }
  if (spec) *spec = std::move(s);
  return true;
}

}  // namespace dtr
