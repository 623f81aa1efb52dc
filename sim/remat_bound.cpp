// remat_bound.cpp: a lower bound on the recomputation of any schedule (remat_bound.h).
//
// Note [Remat bound]
// ~~~~~~~~~~~~~~~~~~
// While the op at event k runs, the engine holds its args' storages, its outputs and its
// WORKSPACE (Note [Faithful to simrd], Note [Op workspace] in eviction/engine.cpp), and
// every constant and pinned storage still alive: call that the resident set R(k). Every
// other storage s made before k and used after k by the program (an arg of a later op, a
// PIN, or still referenced at the end) is either resident at k or made again after k.
// Making s again reruns at least the ops of one chain to a tensor of s the program uses
// after k: the op that made the tensor and, for a view or an in-place write, those of the
// tensor it aliases, down to the storage's root (an evicted storage loses all its tensors;
// each is made again by rerunning its op). So with the needed set N(k) and a budget B, at
// least |R(k)| + |N(k)| - B bytes of N(k) are not resident at k, and dropping them costs at
// least the fractional knapsack's minimum: storages taken by re-making cost per byte,
// cheapest first. An op run shared by the chains of several storages in N(k) is split
// between them, so that no set of drops is charged a run twice. When |R(k)| > B no schedule
// runs the trace.
//
// One strengthening makes the bound bite on gradient accumulation. `buf.add_(g)` (an
// in-place write, recorded as an alias result) makes buf's new value from g; if g is read
// by nothing else, is not pinned and is at least as large as buf, then keeping g instead
// of buf saves no memory, so a schedule that drops buf pays for g too: g's chain joins
// buf's. Without it, a dropped gradient would be charged the add_ (microseconds) instead
// of the convolution_backward that made g (tens of ms).
//
// Summing: the re-makings charged at k happen after k, and each reruns an op of some
// storage's chain. If every use whose chain contains one of k1's runs comes before k2, then
// no storage needed after k2 shares a run with k1's, and the two sums count different
// reruns. So the bound is the heaviest set of events pairwise so separated: weighted
// interval scheduling over [k, last use of k's runs]. A storage whose runs are used far
// ahead (a parameter-like buffer updated in place every step) would make every point
// overlap, so each point is also offered with a few horizons: storages whose runs are used
// past the horizon count as free there (dropping them costs nothing in the sum, which only
// lowers it), and its reach is the horizon. On the resnet18 trace of docs/simulator.md
// the points fall one or two per training step, the largest at the stem's ReLU backward.
//
// What it leaves out, all of which only makes real schedules dearer: that the choices of
// Note [Dead args] are yes or no (it solves their linear relaxation), the memory re-makings
// take after the point, fragmentation (the `fake` allocator), and the interplay of moments
// within one separated stretch.
#include "dtr/sim/remat_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <unordered_map>

#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"
#include "dtr/core/status.h"

namespace dtr {
namespace {

constexpr size_t kNever = std::numeric_limits<size_t>::max();

struct BTensor {
  uint32_t storage = 0;
  size_t event = 0;             // the event that made it
  uint32_t parent = kNoId;      // the tensor it aliases, for a view or in-place result
  std::vector<uint32_t> extra;  // tensors whose chains join its own (Note [Remat bound])
  uint32_t refs = 0;            // names referring to it
  // Its chain, computed on first need: the events rerun to make it again, and their cost.
  bool chain_done = false;
  std::vector<size_t> chain;
  uint64_t chain_ns = 0;
};

struct BStorage {
  uint64_t size = 0;
  size_t made = 0;  // event index
  bool constant = false;
  size_t pinned_from = kNever;  // first PIN (a constant: its creation)
  size_t discarded = kNever;
  uint32_t arg_reads = 0;  // ops that read it, over the whole trace
  bool other_use = false;  // PINned or referenced at the end
  // Uses by the program: (event index, tensor), in event order.
  std::vector<std::pair<size_t, uint32_t>> uses;
  size_t cursor = 0;  // first use after the current event

  // The first event it is resident for good at, kNever if never pinned: a constant from
  // its creation, a PINned storage from the event after the PIN.
  size_t pinned_start() const {
    if (pinned_from == kNever) return kNever;
    return constant ? pinned_from : pinned_from + 1;
  }
};

uint64_t remat_cost(const TraceEvent& ev) {
  return ev.remat_time_ns == TraceEvent::kSameTime ? ev.time_ns : ev.remat_time_ns;
}

// Note [Dead args]: the dead storages that the re-makings of a point's needed storages read,
// directly or through one another's re-makings.
struct DeadArgs {
  std::vector<uint32_t> storage;            // per node: the dead storage
  std::vector<uint64_t> storage_size;       // per node: its bytes
  std::vector<uint32_t> tensor;             // per node: the tensor charged for re-making it
  std::vector<std::vector<uint32_t>> deps;  // per node: the nodes re-making it reads
  // Per needed storage: the nodes its re-making reads.
  std::vector<std::vector<uint32_t>> item_deps;
};

struct Item {
  uint64_t size;
  double cost;
  size_t reach;  // the last use whose chain reruns one of its runs
};

class BoundBuilder {
 public:
  BoundBuilder(const Trace& trace) : trace_(trace) {}

  void walk();
  RematBound solve(const Baseline& baseline, uint64_t budget, size_t lp_rounds);

 private:
  const std::vector<size_t>& chain(uint32_t t);
  uint32_t cheapest_remake(const BStorage& st, size_t e);
  template <typename Available>
  DeadArgs dead_args(size_t e, const std::vector<uint32_t>& needed_tensor, Available&& available);
  uint32_t fresh_tensor(uint32_t storage, size_t event, uint32_t parent);
  uint32_t fresh_storage(uint64_t size, size_t event);
  void use(size_t event, uint32_t t);
  std::vector<uint32_t> read_args(size_t e, const TraceEvent& ev);

  const Trace& trace_;
  std::vector<BTensor> tensors_;
  std::vector<BStorage> storages_;
  std::vector<uint32_t> tensor_of_;  // NameId -> tensor
  std::vector<size_t> ops_;          // indices of CALL/MUTATE events
  // Per op event: the distinct storages it holds while it runs (args', new outputs').
  std::vector<std::vector<uint32_t>> op_storages_;
  // Per event (empty but for ops): the tensors its args named (Note [Dead args]).
  std::vector<std::vector<uint32_t>> event_args_;
};

uint32_t BoundBuilder::fresh_storage(uint64_t size, size_t event) {
  BStorage s;
  s.size = size;
  s.made = event;
  storages_.push_back(std::move(s));
  return static_cast<uint32_t>(storages_.size() - 1);
}

uint32_t BoundBuilder::fresh_tensor(uint32_t storage, size_t event, uint32_t parent) {
  BTensor t;
  t.storage = storage;
  t.event = event;
  t.parent = parent;
  tensors_.push_back(std::move(t));
  return static_cast<uint32_t>(tensors_.size() - 1);
}

void BoundBuilder::use(size_t event, uint32_t t) {
  if (t == kNoId) return;
  storages_[tensors_[t].storage].uses.push_back({event, t});
}

// An op's args: a use of each tensor, one read of each distinct storage. Returns the
// storages.
std::vector<uint32_t> BoundBuilder::read_args(size_t e, const TraceEvent& ev) {
  std::vector<uint32_t> seen;
  for (NameId a : ev.args) {
    const uint32_t t = tensor_of_[a];
    use(e, t);
    if (t != kNoId) event_args_[e].push_back(t);
    if (t != kNoId && std::find(seen.begin(), seen.end(), tensors_[t].storage) == seen.end()) {
      seen.push_back(tensors_[t].storage);
      ++storages_[tensors_[t].storage].arg_reads;
    }
  }
  return seen;
}

void BoundBuilder::walk() {
  tensor_of_.assign(trace_.names.size(), kNoId);
  event_args_.assign(trace_.events.size(), {});
  // A DISCARD names a storage its program has released: through the last tensor the name
  // referred to.
  std::vector<uint32_t> last_tensor_of(trace_.names.size(), kNoId);
  auto point = [&](NameId name, uint32_t t) {
    uint32_t& slot = tensor_of_[name];
    if (slot != kNoId) --tensors_[slot].refs;
    slot = t;
    if (t != kNoId) ++tensors_[t].refs, last_tensor_of[name] = t;
  };
  const std::vector<TraceEvent>& events = trace_.events;
  for (size_t e = 0; e < events.size(); ++e) {
    const TraceEvent& ev = events[e];
    switch (ev.kind) {
      case TraceEventKind::annotate: break;
      case TraceEventKind::constant: {
        const uint32_t s = fresh_storage(ev.results[0].size_bytes, e);
        storages_[s].constant = true;
        storages_[s].pinned_from = e;
        point(ev.results[0].name, fresh_tensor(s, e, kNoId));
        break;
      }
      case TraceEventKind::call: {
        ops_.push_back(e);
        std::vector<uint32_t> seen = read_args(e, ev);
        std::vector<uint32_t> made;
        for (const TraceResult& r : ev.results) {
          uint32_t t;
          if (r.alias >= 0) {
            const uint32_t parent = tensor_of_[ev.args[r.alias]];
            t = fresh_tensor(parent == kNoId ? fresh_storage(0, e) : tensors_[parent].storage, e,
                             parent);
            // Its other args: candidates for joining its chain, checked in chain().
            for (size_t i = 0; i < ev.args.size(); ++i)
              if (static_cast<int32_t>(i) != r.alias && tensor_of_[ev.args[i]] != kNoId)
                tensors_[t].extra.push_back(tensor_of_[ev.args[i]]);
          } else {
            t = fresh_tensor(fresh_storage(r.size_bytes, e), e, kNoId);
          }
          made.push_back(t);
        }
        for (size_t i = 0; i < ev.results.size(); ++i) {
          point(ev.results[i].name, made[i]);
          if (ev.results[i].alias < 0) seen.push_back(tensors_[made[i]].storage);
        }
        op_storages_.push_back(std::move(seen));
        break;
      }
      case TraceEventKind::mutate: {
        ops_.push_back(e);
        std::vector<uint32_t> seen = read_args(e, ev);
        std::vector<uint32_t> made;
        for (uint32_t m : ev.mutated) {
          const uint32_t old = tensor_of_[ev.args[m]];
          const uint64_t size = old == kNoId ? 0 : storages_[tensors_[old].storage].size;
          made.push_back(fresh_tensor(fresh_storage(size, e), e, kNoId));
        }
        for (size_t i = 0; i < ev.mutated.size(); ++i) {
          point(ev.args[ev.mutated[i]], made[i]);
          seen.push_back(tensors_[made[i]].storage);
        }
        op_storages_.push_back(std::move(seen));
        break;
      }
      case TraceEventKind::copy: point(ev.dst, tensor_of_[ev.src]); break;
      case TraceEventKind::copy_from: point(ev.dst, tensor_of_[ev.src]); break;
      case TraceEventKind::release: point(ev.dst, kNoId); break;
      case TraceEventKind::pin: {
        const uint32_t t = tensor_of_[ev.dst];
        if (t == kNoId) break;
        use(e, t);
        BStorage& s = storages_[tensors_[t].storage];
        s.other_use = true;
        s.pinned_from = std::min(s.pinned_from, e);
        break;
      }
      // A pin when material pins nothing that is not resident anyway: neither a use nor a
      // pin here, which can only lower the bound.
      case TraceEventKind::pin_when_material: break;
      case TraceEventKind::discard: {
        const uint32_t t = last_tensor_of[ev.dst];
        if (t != kNoId)
          storages_[tensors_[t].storage].discarded =
              std::min(storages_[tensors_[t].storage].discarded, e);
        break;
      }
    }
  }
  // What is still referenced at the end is made material then (Note [Trace to engine]).
  for (uint32_t t = 0; t < tensors_.size(); ++t)
    if (tensors_[t].refs > 0) {
      use(events.size(), t);
      storages_[tensors_[t].storage].other_use = true;
    }
}

// The events rerun to make tensor t again: its op, the chain of the tensor it aliases, and
// the chains of the args that join it (Note [Remat bound]). The alias chain is walked
// iteratively; only joined args recurse, each into an older tensor. Computed once per
// tensor.
const std::vector<size_t>& BoundBuilder::chain(uint32_t t) {
  if (tensors_[t].chain_done) return tensors_[t].chain;
  // Iterative over the alias chain: collect the tensors from t down to the root.
  std::vector<uint32_t> path;
  for (uint32_t u = t; u != kNoId && !tensors_[u].chain_done; u = tensors_[u].parent)
    path.push_back(u);
  for (size_t i = path.size(); i-- > 0;) {
    BTensor& bt = tensors_[path[i]];
    std::vector<size_t> c;
    if (bt.parent != kNoId) c = tensors_[bt.parent].chain;
    c.push_back(bt.event);
    const BStorage& own = storages_[bt.storage];
    for (uint32_t x : bt.extra) {
      const BStorage& g = storages_[tensors_[x].storage];
      if (tensors_[x].storage == bt.storage || g.constant || g.pinned_from != kNever ||
          g.other_use || g.arg_reads != 1 || g.size < own.size)
        continue;
      // x's storage was made before bt by a shorter chain: already computed or computable
      // without coming back to bt.
      const std::vector<size_t>& xc = chain(x);
      c.insert(c.end(), xc.begin(), xc.end());
    }
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    bt.chain = std::move(c);
    bt.chain_ns = 0;
    for (size_t ev : bt.chain) bt.chain_ns += remat_cost(trace_.events[ev]);
    bt.chain_done = true;
  }
  return tensors_[t].chain;
}

// What dropping storage st at event e makes the schedule rerun, at least: for each use
// after e, the tensor it reads or, if that tensor is made after e (by a later in-place
// write or view, which the program runs anyway), its alias ancestor made before e; the
// cheapest of their chains. Returns the tensor.
uint32_t BoundBuilder::cheapest_remake(const BStorage& st, size_t e) {
  uint32_t best = kNoId;
  for (size_t i = st.cursor; i < st.uses.size(); ++i) {
    uint32_t t = st.uses[i].second;
    while (tensors_[t].event >= e && tensors_[t].parent != kNoId) t = tensors_[t].parent;
    chain(t);
    if (best == kNoId || tensors_[t].chain_ns < tensors_[best].chain_ns) best = t;
  }
  return best;
}

// Note [Dead args]
// ~~~~~~~~~~~~~~~~
// Re-making a dropped storage s after the point k runs the ops of its chain, and they read
// their args. An arg that the program still uses after k is needed at k itself: resident
// then, or dropped and charged on its own. An arg that is resident anyway at k (a constant,
// pinned, the op's own) costs nothing. But an arg d the program no longer uses (dead at k,
// made before it) is resident at k only if the schedule kept it there, in memory the
// budget counts, and is otherwise made again after k, through its own chain, whose args
// raise the same question. (A layer's weight gradient is large and its convolution's two
// inputs small, but those inputs died in the backward pass: a schedule that drops the
// gradient at the stem must have kept them, or make them again from what it kept.)
// So where a point's re-makings read dead args, its cost is a linear program (the
// relaxation of the schedule's yes-or-no choices, so a lower bound of them) over x_s
// (needed s dropped), y_d (dead d made again), z_d (dead d kept) and w_r (op run r rerun):
//   minimize   sum cost_r w_r
//   subject to sum size_s x_s - sum size_d z_d >= the bytes to drop
//              y_d + z_d >= x_s     for each dead d that re-making s reads
//              y_e + z_e >= y_d     for each dead e that re-making d reads
//              w_r >= x_s, w_r >= y_d   for each run r of s's or d's chain
// A run shared by several re-makings (a multi-output op, a view's root) is paid once, so
// the costs need no splitting there. Where a storage is re-made through several of its
// tensors, the cheapest tensor's chain is charged and only the dead args all of them read
// are required, which only lowers the bound. A point without dead args keeps the fractional
// knapsack of Note [Remat bound]. The search stops at kMaxDeadNodes dead storages (the
// rest count as resident for free, again only lower). On the 3-step resnet18 trace of
// docs/simulator.md the bound at 0.5 rose from 1.1130 to 1.1319; with the choices integer
// (Clp's branch and bound at every point, a throwaway build: 6 minutes) it read 1.1392.
constexpr size_t kMaxDeadNodes = 4000;

template <typename Available>
DeadArgs BoundBuilder::dead_args(size_t e, const std::vector<uint32_t>& needed_tensor,
                                 Available&& available) {
  DeadArgs out;
  std::unordered_map<uint32_t, uint32_t> node_of;  // storage -> node
  std::vector<std::vector<uint32_t>> node_tensors;
  std::unordered_map<uint32_t, std::vector<uint32_t>> reads_of;  // tensor -> nodes its chain reads
  std::vector<uint32_t> work;
  auto node = [&](uint32_t a) -> uint32_t {
    const uint32_t sa = tensors_[a].storage;
    auto it = node_of.find(sa);
    if (it == node_of.end()) {
      if (out.storage.size() >= kMaxDeadNodes) return kNoId;
      it = node_of.emplace(sa, static_cast<uint32_t>(out.storage.size())).first;
      out.storage.push_back(sa);
      out.storage_size.push_back(storages_[sa].size);
      node_tensors.emplace_back();
    }
    std::vector<uint32_t>& ts = node_tensors[it->second];
    if (std::find(ts.begin(), ts.end(), a) == ts.end()) ts.push_back(a), work.push_back(a);
    return it->second;
  };
  // The dead args of t's chain, as nodes (sorted, distinct).
  auto reads = [&](uint32_t t) {
    std::vector<uint32_t> found;
    const std::vector<size_t>& c = chain(t);
    for (size_t r : c)
      for (uint32_t a : event_args_[r]) {
        const uint32_t sa = tensors_[a].storage;
        if (sa == tensors_[t].storage || std::binary_search(c.begin(), c.end(), tensors_[a].event))
          continue;  // made by the chain itself
        const BStorage& st = storages_[sa];
        if (st.made >= e || available(sa) || (!st.uses.empty() && st.uses.back().first > e))
          continue;  // resident anyway, or needed at e (its own item)
        const uint32_t n = node(a);
        if (n != kNoId) found.push_back(n);
      }
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    return found;
  };
  for (uint32_t t : needed_tensor) out.item_deps.push_back(reads(t));
  while (!work.empty()) {
    const uint32_t a = work.back();
    work.pop_back();
    if (!reads_of.count(a)) reads_of.emplace(a, reads(a));
  }
  for (size_t n = 0; n < out.storage.size(); ++n) {
    const std::vector<uint32_t>& ts = node_tensors[n];
    uint32_t best = ts[0];
    for (uint32_t t : ts)
      if (tensors_[t].chain_ns < tensors_[best].chain_ns) best = t;
    out.tensor.push_back(best);
    std::vector<uint32_t> deps = reads_of[ts[0]];
    for (size_t i = 1; i < ts.size(); ++i) {
      const std::vector<uint32_t>& other = reads_of[ts[i]];
      std::vector<uint32_t> both;
      std::set_intersection(deps.begin(), deps.end(), other.begin(), other.end(),
                            std::back_inserter(both));
      deps = std::move(both);
    }
    out.deps.push_back(std::move(deps));
  }
  return out;
}

// The fractional knapsack of Note [Remat bound]: the least cost of dropping `drop` bytes
// at a point, cheapest per byte first, with the items whose runs are used past `horizon`
// free ("Summing").
double knapsack_cost(const std::vector<Item>& items, uint64_t drop, size_t horizon) {
  double need = static_cast<double>(drop);
  std::vector<uint32_t> active;
  for (uint32_t i = 0; i < items.size(); ++i) {
    if (items[i].reach > horizon)
      need -= static_cast<double>(items[i].size);
    else if (items[i].size > 0)
      active.push_back(i);
  }
  std::sort(active.begin(), active.end(), [&](uint32_t a, uint32_t b) {
    return items[a].cost * static_cast<double>(items[b].size) <
           items[b].cost * static_cast<double>(items[a].size);
  });
  double ns = 0;
  for (uint32_t i : active) {
    if (need <= 0) break;
    const double take = std::min(static_cast<double>(items[i].size), need);
    ns += items[i].cost * take / static_cast<double>(items[i].size);
    need -= take;
  }
  return ns;
}

// The least cost of dropping `drop` bytes at a point, per horizon: the knapsack, or where
// the re-makings read dead args, the linear program of Note [Dead args], built once and
// solved again per horizon with the free items fixed at 0.
struct DropCosts {
  std::vector<double> ns;  // per horizon
  // Per horizon: the re-makings read dead args and Clp proved no optimum, so `ns` is the
  // knapsack's (BoundPoint::dead_args_unpriced).
  std::vector<bool> unproven;
};

DropCosts least_drop_costs(const std::vector<Item>& items,
                           const std::vector<const std::vector<size_t>*>& item_chain,
                           const DeadArgs& dead,
                           const std::vector<const std::vector<size_t>*>& dead_chain,
                           const std::vector<TraceEvent>& events, uint64_t drop,
                           const std::vector<size_t>& horizons) {
  DropCosts costs;
  for (size_t horizon : horizons) costs.ns.push_back(knapsack_cost(items, drop, horizon));
  costs.unproven.assign(horizons.size(), false);
  if (dead.item_deps.empty()) return costs;
  // The dead nodes the items reach.
  std::vector<int32_t> column(dead.storage.size(), -1);
  std::vector<uint32_t> reached;
  for (uint32_t i = 0; i < items.size(); ++i)
    if (items[i].size > 0)
      for (uint32_t n : dead.item_deps[i])
        if (column[n] < 0) column[n] = 0, reached.push_back(n);
  for (size_t k = 0; k < reached.size(); ++k)
    for (uint32_t n : dead.deps[reached[k]])
      if (column[n] < 0) column[n] = 0, reached.push_back(n);
  if (reached.empty()) return costs;
  // Columns: x per item, y and z per reached node, and w per op run their chains rerun,
  // which carries the cost: a run shared by several re-makings is paid once. Bytes in MiB
  // and costs in ms keep the coefficients near 1.
  const double kMiB = 1048576.0, kMs = 1e6;
  std::vector<uint32_t> item_of;  // x column -> item
  for (uint32_t i = 0; i < items.size(); ++i)
    if (items[i].size > 0) item_of.push_back(i);
  const int n_x = static_cast<int>(item_of.size());
  for (size_t k = 0; k < reached.size(); ++k) column[reached[k]] = n_x + 2 * static_cast<int>(k);
  int n_cols = n_x + 2 * static_cast<int>(reached.size());
  std::unordered_map<size_t, int> run_column;
  std::vector<double> obj(n_cols, 0.0);
  std::vector<int> row_of, col_of;
  std::vector<double> value, row_lb;
  auto add = [&](int row, int col, double v) {
    row_of.push_back(row), col_of.push_back(col), value.push_back(v);
  };
  int rows = 0;
  auto at_least = [&](double lb) { row_lb.push_back(lb), ++rows; };
  for (int c = 0; c < n_x; ++c)  // the memory row; its bound is set per horizon
    add(rows, c, static_cast<double>(items[item_of[c]].size) / kMiB);
  for (uint32_t n : reached)
    add(rows, column[n] + 1, -static_cast<double>(dead.storage_size[n]) / kMiB);
  at_least(0.0);
  auto reruns = [&](int col, const std::vector<size_t>& chain) {  // w_r - col >= 0
    for (size_t r : chain) {
      auto [it, fresh] = run_column.try_emplace(r, n_cols);
      if (fresh) {
        ++n_cols;
        obj.push_back(static_cast<double>(remat_cost(events[r])) / kMs);
      }
      add(rows, it->second, 1.0), add(rows, col, -1.0), at_least(0.0);
    }
  };
  auto needs = [&](int user_col, uint32_t n) {  // y_n + z_n - user >= 0
    add(rows, column[n], 1.0), add(rows, column[n] + 1, 1.0), add(rows, user_col, -1.0);
    at_least(0.0);
  };
  for (int c = 0; c < n_x; ++c) {
    reruns(c, *item_chain[item_of[c]]);
    for (uint32_t n : dead.item_deps[item_of[c]]) needs(c, n);
  }
  for (uint32_t n : reached) {
    reruns(column[n], *dead_chain[n]);
    for (uint32_t m : dead.deps[n]) needs(column[n], m);
  }
  CoinPackedMatrix matrix(false, row_of.data(), col_of.data(), value.data(),
                          static_cast<CoinBigIndex>(value.size()));
  matrix.setDimensions(rows, n_cols);
  const std::vector<double> col_lb(n_cols, 0.0), col_ub(n_cols, 1.0), row_ub(rows, COIN_DBL_MAX);
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  solver.loadProblem(matrix, col_lb.data(), col_ub.data(), obj.data(), row_lb.data(),
                     row_ub.data());
  bool first = true;
  for (size_t h = 0; h < horizons.size(); ++h) {
    double need = static_cast<double>(drop);
    for (int c = 0; c < n_x; ++c) {
      const bool free = items[item_of[c]].reach > horizons[h];
      if (free) need -= static_cast<double>(items[item_of[c]].size);
      solver.setColUpper(c, free ? 0.0 : 1.0);
    }
    if (need <= 0) continue;  // the knapsack's 0
    solver.setRowLower(0, need / kMiB);
    if (first)
      solver.initialSolve(), first = false;
    else
      solver.resolve();
    if (!solver.isProvenOptimal()) {  // no claim beyond the knapsack's
      costs.unproven[h] = true;
      continue;
    }
    // The op times are whole nanoseconds: a value within the solver's tolerance of a whole
    // number is that number; any other is shaved, as the tolerance could put it a hair
    // above the optimum.
    const double ns = std::max(0.0, solver.getObjValue() * kMs);
    const double nearest = std::round(ns);
    const double lp =
        std::abs(ns - nearest) <= 1e-6 * std::max(1.0, ns) ? nearest : ns * (1 - 1e-6);
    costs.ns[h] = std::max(costs.ns[h], lp);
  }
  return costs;
}

RematBound BoundBuilder::solve(const Baseline& baseline, uint64_t budget, size_t lp_rounds) {
  RematBound out;
  out.budget_bytes = budget;
  out.baseline_compute_ns = baseline.compute_ns;
  const std::vector<TraceEvent>& events = trace_.events;

  // Per event: the last use whose chain reruns it (for the separation of points).
  std::vector<size_t> last_use_of_run(events.size() + 1, 0);
  for (BStorage& s : storages_) {
    if (s.constant) continue;
    for (const auto& [pos, t] : s.uses)
      for (size_t r : chain(t)) last_use_of_run[r] = std::max(last_use_of_run[r], pos);
  }

  // Storages made before the current op and used after it, swept in event order.
  std::vector<std::vector<uint32_t>> starting(events.size() + 1);
  for (uint32_t s = 0; s < storages_.size(); ++s) {
    const BStorage& st = storages_[s];
    if (st.constant || st.uses.empty() || st.uses.back().first <= st.made) continue;
    starting[st.made + 1].push_back(s);
  }
  std::vector<std::vector<uint32_t>> pin_starts(events.size() + 1), pin_ends(events.size() + 1);
  for (uint32_t s = 0; s < storages_.size(); ++s) {
    const BStorage& st = storages_[s];
    const size_t from = st.pinned_start();
    if (from == kNever || (st.discarded != kNever && st.discarded < from)) continue;
    pin_starts[from].push_back(s);
    if (st.discarded != kNever) pin_ends[st.discarded + 1].push_back(s);
  }

  struct Candidate {
    size_t event, reach;
    BoundPoint point;
  };
  // Note [Points worth a linear program]: the events whose points are solved with their
  // dead args, and the values found there, per horizon (a point's horizons are the same at
  // every sweep).
  std::unordered_map<size_t, DropCosts> solved;
  std::vector<size_t> wanted;  // events to solve on the next sweep
  auto sweep = [&]() {
    std::vector<Candidate> candidates;
    std::unordered_map<size_t, uint32_t> run_count;  // op run -> needed storages whose chain has it
    std::vector<Item> items;
    std::vector<uint32_t> in_op;  // storages of the current op
    std::vector<uint32_t> active;
    uint64_t pinned_bytes = 0;  // live constants and pinned storages
    for (BStorage& st : storages_) st.cursor = 0;
    size_t op_index = 0;
    for (size_t e = 0; e <= events.size(); ++e) {
      for (uint32_t s : pin_starts[e]) pinned_bytes += storages_[s].size;
      for (uint32_t s : pin_ends[e]) pinned_bytes -= storages_[s].size;
      for (uint32_t s : starting[e]) active.push_back(s);
      if (op_index >= ops_.size() || ops_[op_index] != e) continue;
      ++op_index;
      const TraceEvent& ev = events[e];
      auto pinned_at = [&](const BStorage& st) {
        return st.pinned_start() <= e && (st.discarded == kNever || st.discarded >= e);
      };
      // The op's own storages: its args' and its new outputs'; and its scratch (Note [Op
      // workspace] in eviction/engine.cpp), which every run of it holds beside them.
      in_op.clear();
      uint64_t resident = pinned_bytes + ev.workspace_bytes;
      for (uint32_t s : op_storages_[op_index - 1]) {
        in_op.push_back(s);
        if (!pinned_at(storages_[s])) resident += storages_[s].size;
      }
      // Resident at e anyway (a constant, pinned, the op's own), or freed for good: neither
      // needed at e nor a dead arg (Note [Dead args]).
      auto held_or_gone = [&](uint32_t s) {
        const BStorage& st = storages_[s];
        return st.constant || pinned_at(st) || (st.discarded != kNever && st.discarded <= e) ||
               std::find(in_op.begin(), in_op.end(), s) != in_op.end();
      };

      // Needed storages: made before e, used after e, not held, not pinned, not discarded.
      size_t kept = 0;
      uint64_t needed = 0;
      run_count.clear();
      std::vector<uint32_t> needed_ids, needed_tensor;
      for (uint32_t s : active) {
        BStorage& st = storages_[s];
        while (st.cursor < st.uses.size() && st.uses[st.cursor].first <= e) ++st.cursor;
        if (st.cursor >= st.uses.size()) continue;  // no use after e: drops out for good
        active[kept++] = s;
        if (held_or_gone(s)) continue;
        needed += st.size;
        needed_ids.push_back(s);
        needed_tensor.push_back(cheapest_remake(st, e));
        for (size_t r : tensors_[needed_tensor.back()].chain) ++run_count[r];
      }
      active.resize(kept);

      BoundPoint p;
      p.event = e;
      p.line = ev.line;
      p.op = ev.op;
      p.resident_bytes = resident;
      p.needed_bytes = needed;
      if (resident > out.most_resident.resident_bytes) out.most_resident = p;
      if (resident > budget) {
        out.feasible = false;
        continue;
      }
      if (resident + needed <= budget) continue;
      p.drop_bytes = resident + needed - budget;
      items.clear();
      std::vector<size_t> reaches;
      std::vector<const std::vector<size_t>*> item_chain;
      for (size_t i = 0; i < needed_ids.size(); ++i) {
        const BStorage& st = storages_[needed_ids[i]];
        const BTensor& t = tensors_[needed_tensor[i]];
        Item it{st.size, 0.0, e};
        for (size_t r : t.chain) {
          it.cost += static_cast<double>(remat_cost(events[r])) / run_count[r];
          it.reach = std::max(it.reach, last_use_of_run[r]);
        }
        items.push_back(it);
        reaches.push_back(it.reach);
        item_chain.push_back(&t.chain);
      }
      // Horizons (Note [Remat bound], "Summing"): an item whose runs are used past the
      // horizon is counted free, so the point's reruns all come before it. A few horizons
      // per point, from the nearest reach to the farthest; the scheduling below picks.
      std::sort(reaches.begin(), reaches.end());
      reaches.erase(std::unique(reaches.begin(), reaches.end()), reaches.end());
      const size_t kHorizons = 12;
      std::vector<size_t> horizons;
      for (size_t i = 0; i < kHorizons && !reaches.empty(); ++i)
        horizons.push_back(reaches[(reaches.size() - 1) * i / (kHorizons - 1)]);
      horizons.erase(std::unique(horizons.begin(), horizons.end()), horizons.end());
      DropCosts costs;
      bool unsolved = false;  // priced without looking for dead args
      auto found = solved.find(e);
      if (found == solved.end() && std::find(wanted.begin(), wanted.end(), e) != wanted.end()) {
        // Note [Dead args]: the dead storages the re-makings read.
        const DeadArgs dead = dead_args(e, needed_tensor, held_or_gone);
        std::vector<const std::vector<size_t>*> dead_chain;
        for (uint32_t t : dead.tensor) dead_chain.push_back(&tensors_[t].chain);
        costs =
            least_drop_costs(items, item_chain, dead, dead_chain, events, p.drop_bytes, horizons);
        solved[e] = costs;
      } else if (found != solved.end()) {
        costs = found->second;
      } else {
        costs = least_drop_costs(items, item_chain, DeadArgs{}, {}, events, p.drop_bytes, horizons);
        unsolved = true;
      }
      uint64_t last_ns = 0;
      for (size_t h = 0; h < horizons.size(); ++h) {
        BoundPoint hp = p;
        hp.remat_ns = static_cast<uint64_t>(costs.ns[h]);  // rounded down: still a bound
        hp.dead_args_unpriced = unsolved || costs.unproven[h];
        if (hp.remat_ns > last_ns) candidates.push_back({e, horizons[h], std::move(hp)});
        last_ns = std::max(last_ns, static_cast<uint64_t>(costs.ns[h]));
      }
    }
    return candidates;
  };

  // Weighted interval scheduling: points whose reaches do not overlap the next one's event.
  // Returns the best sum and the chosen candidates.
  auto schedule = [](std::vector<Candidate>& candidates, std::vector<size_t>& chosen) {
    std::sort(candidates.begin(), candidates.end(),
              [](const Candidate& a, const Candidate& b) { return a.reach < b.reach; });
    const size_t n = candidates.size();
    std::vector<uint64_t> best(n + 1, 0);
    std::vector<size_t> prev(n, 0);
    for (size_t i = 0; i < n; ++i) {
      // The last candidate (by reach) whose reach is at or before this one's event.
      size_t lo = 0, hi = i;
      while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (candidates[mid].reach <= candidates[i].event)
          lo = mid + 1;
        else
          hi = mid;
      }
      prev[i] = lo;  // candidates [0, lo) are compatible
      best[i + 1] = std::max(best[i], candidates[i].point.remat_ns + best[lo]);
    }
    chosen.clear();
    for (size_t i = n; i > 0;) {
      if (best[i] == best[i - 1]) {
        --i;
        continue;
      }
      chosen.push_back(i - 1);
      i = prev[i - 1];
    }
    return best[n];
  };

  // Note [Points worth a linear program]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A linear program per point (Note [Dead args]) took minutes on DTR's LSTM log, where
  // nearly every op of the backward passes is a point. Every point's knapsack without its
  // dead args is a bound too, only a looser one, so the sweep solves the programs only where
  // they can change the sum: it sums the knapsacks, solves the points it chose and the
  // kTopPoints largest not solved yet, and sums again, until every chosen point is solved
  // (or after `lp_rounds` sweeps, kBoundLpRounds unless told: 0 is the knapsacks alone).
  // The sum is a bound at every round.
  constexpr size_t kTopPoints = 16;
  std::vector<Candidate> candidates;
  std::vector<size_t> chosen;
  uint64_t total = 0;
  for (size_t round = 0;; ++round) {
    candidates = sweep();
    total = schedule(candidates, chosen);
    bool all_solved = true;
    for (size_t i : chosen)
      if (!solved.count(candidates[i].event)) all_solved = false;
    if (all_solved || round == lp_rounds) break;
    wanted.clear();
    for (size_t i : chosen)
      if (!solved.count(candidates[i].event)) wanted.push_back(candidates[i].event);
    std::vector<size_t> order(candidates.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return candidates[a].point.remat_ns > candidates[b].point.remat_ns;
    });
    size_t added = 0;
    for (size_t i : order) {
      if (added == kTopPoints) break;
      const size_t e = candidates[i].event;
      if (solved.count(e) || std::find(wanted.begin(), wanted.end(), e) != wanted.end()) continue;
      wanted.push_back(e);
      ++added;
    }
  }
  for (size_t i : chosen) {
    out.points.push_back(candidates[i].point);
    if (out.points.back().dead_args_unpriced) ++out.points_dead_args_unpriced;
  }
  std::sort(out.points.begin(), out.points.end(),
            [](const BoundPoint& a, const BoundPoint& b) { return a.event < b.event; });
  out.remat_ns = total;
  out.overhead = baseline.compute_ns == 0 ? 1.0
                                          : 1.0 + static_cast<double>(out.remat_ns) /
                                                      static_cast<double>(baseline.compute_ns);
  return out;
}

}  // namespace

RematBound remat_bound(const Trace& trace, const Baseline& baseline, uint64_t budget_bytes,
                       size_t lp_rounds) {
  BoundBuilder b(trace);
  b.walk();
  return b.solve(baseline, budget_bytes, lp_rounds);
}

namespace {
// 12.345 ms, or 870 ns for the small times of hand-made traces.
std::string format_ns(uint64_t ns) {
  char text[32];
  if (ns >= 100000)
    std::snprintf(text, sizeof text, "%.3f ms", static_cast<double>(ns) / 1e6);
  else
    std::snprintf(text, sizeof text, "%llu ns", static_cast<unsigned long long>(ns));
  return text;
}
}  // namespace

std::string format_remat_bound(const RematBound& bound, size_t max_points) {
  char line[512];
  std::string out;
  if (!bound.feasible) {
    const BoundPoint& p = bound.most_resident;
    std::snprintf(line, sizeof line,
                  "no schedule fits %s: op '%s' (event %zu, line %u) needs %s resident "
                  "(its args and outputs, live constants and pinned storages); raise the budget "
                  "to at least %s\n",
                  format_bytes(bound.budget_bytes).c_str(), p.op.c_str(), p.event, p.line,
                  format_bytes(p.resident_bytes).c_str(), format_bytes(p.resident_bytes).c_str());
    return line;
  }
  std::snprintf(line, sizeof line,
                "any schedule recomputes at least %s at %s: overhead >= %.4f (%zu points)\n",
                format_ns(bound.remat_ns).c_str(), format_bytes(bound.budget_bytes).c_str(),
                bound.overhead, bound.points.size());
  out += line;
  if (bound.points_dead_args_unpriced > 0) {
    std::snprintf(line, sizeof line,
                  "  (%zu of the points priced without their dead args: Clp proved no optimum or "
                  "the rounds ran out; a looser bound there)\n",
                  bound.points_dead_args_unpriced);
    out += line;
  }
  std::vector<const BoundPoint*> order;
  for (const BoundPoint& p : bound.points) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const BoundPoint* a, const BoundPoint* b) {
    return a->remat_ns > b->remat_ns;
  });
  for (size_t i = 0; i < order.size() && i < max_points; ++i) {
    const BoundPoint& p = *order[i];
    std::snprintf(line, sizeof line,
                  "  %12s at '%s' (event %zu, line %u): %s resident, %s more needed later, "
                  "%s of it dropped\n",
                  format_ns(p.remat_ns).c_str(), p.op.c_str(), p.event, p.line,
                  format_bytes(p.resident_bytes).c_str(), format_bytes(p.needed_bytes).c_str(),
                  format_bytes(p.drop_bytes).c_str());
    out += line;
  }
  if (order.size() > max_points) {
    std::snprintf(line, sizeof line, "  ... and %zu more\n", order.size() - max_points);
    out += line;
  }
  return out;
}

}  // namespace dtr
