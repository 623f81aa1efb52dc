// kusumoto_planner.cpp: the lower-set DP of Kusumoto et al. (NeurIPS 2019) and its
// translation into a Checkmate stage-form schedule.
//
// Design: lower sets are bitsets over the forward nodes, sorted by size, so that every
// proper subset of a set comes before it. The DP pushes from each set to every strict
// superset; per set it keeps a Pareto table (overhead -> least accumulated checkpoint
// memory). Per-set quantities (boundary, the paper's memory terms) are computed once.
// The strategy it returns is only the DP's opinion: the schedule built from it is measured
// with evaluate_stage_schedule, and the budget search (Note [DP budget search]) picks the strategy
// whose measured schedule is best. No locks, no global state.
#include "dtr/planner/kusumoto.h"
#include "dtr/planner/planner.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>

namespace dtr {

// Note [Kusumoto DP]
// ~~~~~~~~~~~~~~~~~~
// For lower sets L < L' of the forward graph and V = L' \ L (the paper's section 4, with the
// per-transition memory terms of the authors' chainer-compiler implementation):
//   overhead(L, L') = T(V \ bd(L'))            nodes of V not kept, recomputed in backward
//   ckpt(L, L')     = M(bd(L') \ L)            checkpoints this segment adds
//   peak(L, L')     = M(V) + M(dp(L') \ L') + M(dm(dp(L') \ L') ... see below)
// where bd(L') = nodes of L' with a forward user outside L', dp(X) = users of X, dm(X) =
// inputs of X. peak is the memory of back-propagating through V: V itself, the gradients
// flowing into it (dp(L') \ L'), and the other inputs of those users. With
// opt[L][t] = least checkpoint memory reaching L with overhead t,
//   opt[L'][t + overhead] = min opt[L][t] + ckpt(L, L')
// subject to opt[L][t] + peak(L, L') <= B and opt[L][t] + ckpt(L, L') <= B. Time-centric:
// the least t with opt[forward][t] defined; memory-centric: the least B for which any t is
// defined, then the least t. Costs are exact integers (no discretisation: tables are Pareto
// pruned instead, Note [Bounded Pareto tables]).

// Note [Bounded Pareto tables]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With exact integer costs a set's table holds one entry per Pareto-optimal (overhead,
// checkpoint memory) pair, and on a long forward graph that front grows with the budget:
// on the DTR Transformer log (1 068 lower sets of ancestors) the largest table held 537
// entries and all of them 215 408 at twice the budget, and as every set there is a subset
// of every larger one, each entry is pushed into a thousand sets: one plan did not finish in
// 300 s. So a front longer than KusumotoOptions::pareto_width keeps that many entries,
// evenly spaced along it, the cheapest and the leanest always among them. Below the width
// the DP is exact as before; above it the DP may miss its own optimum, which costs nothing
// in correctness: the strategy it returns is measured like any other (Note [DP budget
// search]). Keeping the leanest entry keeps feasibility: a strategy exists at a DP budget
// exactly when one does unbounded (tests/planner/test_kusumoto.cpp).

// Note [Lower sets to stages]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Our graphs carry explicit backward nodes, and the stage form runs first computations in
// index order, so a strategy is applied through keep decisions (S) and phase two of
// Checkmate's rounding (complete_compute_from_keep) supplies the recomputation:
//  - a backward value is kept while a later node reads it;
//  - during the forward pass a forward value is kept while a later forward node reads it,
//    and past that only if it is a checkpoint (in bd(L_i) of its segment) or in the last
//    segment and still read later (by the backward);
//  - during the backward pass the active segment of backward node b is the latest segment
//    among b's forward inputs (b's predecessor's, if it reads none); a forward value is kept
//    into b's stage if read later and a checkpoint, in the last segment, or in the active
//    segment. Anything else b needs is recomputed in b's stage from what is kept.
// This is the paper's execution when the backward consumes segments in reverse; on other
// graphs it is still a valid schedule, and evaluate_stage_schedule measures what it costs.

// Note [DP budget search]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The DP's memory estimate is not the stage accounting (it ignores, for example, gradients
// already computed and forward values kept for the backward), so the DP is run at several
// budgets and each strategy measured. Time-centric: DP budgets B*k/8 for k = 1..16; the
// cheapest measured schedule with peak <= B wins (ties: lower peak). Memory-centric: the
// least DP budget b* with a strategy (bisection; feasibility is monotone in the budget),
// then b* * (1 + k/8) for k = 0..8; the lowest measured peak wins (ties: less compute), and
// it is `found` only if that peak is <= B. Where no time-centric candidate fits, it measures
// the memory-centric ones too, so it finds a fit wherever the memory-centric search does:
// the DP does not see an op's scratch (Note [Op workspace in plans] in plan_eval.cpp), and
// on a 2-step ResNet-18 trace with scratch kusumoto-approx fit no budget up to 116 MiB
// where kusumoto-approx-mem fit 114.3 MiB, its grid of B/8 steps missing the lean DP
// budgets.

namespace {

using Bits = std::vector<uint64_t>;

struct Forward {
  uint32_t base = 0;                      // global id of local node 0
  uint32_t n = 0;                         // forward nodes
  std::vector<std::vector<uint32_t>> in;  // forward inputs within the part (unique)
  std::vector<std::vector<uint32_t>> out; // forward users within the part (unique)
  std::vector<uint64_t> cost, mem;
  size_t words = 0;
};

// The forward nodes [begin, end) of one training step, by local id (global id - begin);
// edges from outside the range (an earlier step's values, read as inputs) are left out.
Forward forward_part(const Graph& g, uint32_t begin, uint32_t end) {
  Forward f;
  f.base = begin;
  f.n = end - begin;
  f.in.resize(f.n);
  f.out.resize(f.n);
  for (uint32_t v = 0; v < f.n; ++v) {
    // A later output of a multi-output op costs nothing here: the segments recompute it
    // with its op's first output (Note [One run of a multi-output op] in plan_eval.cpp).
    // The cost is only ever a recomputation's (Note [Remat cost in plans] there).
    f.cost.push_back(v > 0 && g.nodes[begin + v].same_op_as_prev ? 0
                                                                 : g.nodes[begin + v].remat_cost());
    f.mem.push_back(g.nodes[begin + v].size_bytes);
    auto deps = g.nodes[begin + v].deps;
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    for (uint32_t d : deps) {
      if (d < begin) continue;
      f.in[v].push_back(d - begin);
      f.out[d - begin].push_back(v);
    }
  }
  f.words = (f.n + 63) / 64;
  return f;
}

// Note [Kusumoto over several steps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A trace of several training steps alternates forward and backward runs of nodes (Note
// [Backward passes of a recorded trace] in graph.cpp). Each forward run followed by a
// backward run is one step, and the DP runs on each step's forward part separately: values
// of earlier steps are inputs to it (resident, outside its lower sets), and each step gets
// the same DP budget, so the budget search (Note [DP budget search]) still tries one number
// per attempt. A step whose DP finds no strategy at that budget keeps its forward part whole
// (one segment); the measured schedule decides whether the attempt fits. A forward value is
// kept for what reads it after its own step's backward run (rare: the optimizer reads
// gradients, not activations). Forward nodes after the last backward run (the last
// optimizer step) are computed once and kept while read.
struct StepRange {
  uint32_t begin = 0, fwd_end = 0, end = 0;  // forward [begin, fwd_end), backward [fwd_end, end)
};

std::vector<StepRange> training_steps(const Graph& g) {
  std::vector<StepRange> steps;
  const uint32_t n = static_cast<uint32_t>(g.size());
  for (uint32_t i = 0; i < n;) {
    StepRange r;
    r.begin = i;
    while (i < n && !g.nodes[i].backward) ++i;
    r.fwd_end = i;
    while (i < n && g.nodes[i].backward) ++i;
    r.end = i;
    if (r.fwd_end > r.begin && r.end > r.fwd_end) steps.push_back(r);
  }
  return steps;
}

bool has(const Bits& b, uint32_t v) { return (b[v / 64] >> (v % 64)) & 1; }
void set(Bits& b, uint32_t v) { b[v / 64] |= uint64_t{1} << (v % 64); }
bool subset(const Bits& a, const Bits& b) {
  for (size_t w = 0; w < a.size(); ++w) {
    if (a[w] & ~b[w]) return false;
  }
  return true;
}
template <class F>
void for_each_bit(const Bits& b, F&& fn) {
  for (size_t w = 0; w < b.size(); ++w) {
    for (uint64_t x = b[w]; x; x &= x - 1) fn(static_cast<uint32_t>(w * 64 + __builtin_ctzll(x)));
  }
}
uint64_t sum(const Bits& b, const std::vector<uint64_t>& val) {
  uint64_t s = 0;
  for_each_bit(b, [&](uint32_t v) { s += val[v]; });
  return s;
}

std::vector<Bits> enumerate(const Forward& f, bool exact, size_t cap) {
  std::vector<Bits> sets;
  if (exact) {
    Bits cur(f.words, 0);
    // Depth-first over nodes in index order: v may join only if all its inputs have.
    auto rec = [&](auto&& self, uint32_t v) -> void {
      if (v == f.n) {
        if (sets.size() >= cap) {
          throw PlanTooLarge("kusumoto: the forward graph (" + std::to_string(f.n) +
                             " nodes) has more than " + std::to_string(cap) +
                             " lower sets, the most the exact DP enumerates; use "
                             "--method kusumoto-approx (lower sets of ancestors)");
        }
        sets.push_back(cur);
        return;
      }
      self(self, v + 1);
      bool ok = true;
      for (uint32_t d : f.in[v]) ok = ok && has(cur, d);
      if (ok) {
        set(cur, v);
        self(self, v + 1);
        cur[v / 64] &= ~(uint64_t{1} << (v % 64));
      }
    };
    rec(rec, 0);
  } else {
    sets.emplace_back(f.words, 0);
    std::vector<Bits> anc(f.n, Bits(f.words, 0));
    for (uint32_t v = 0; v < f.n; ++v) {
      set(anc[v], v);
      for (uint32_t d : f.in[v]) {
        for (size_t w = 0; w < f.words; ++w) anc[v][w] |= anc[d][w];
      }
      sets.push_back(anc[v]);
    }
    Bits all(f.words, 0);
    for (uint32_t v = 0; v < f.n; ++v) set(all, v);
    sets.push_back(all);
    std::sort(sets.begin(), sets.end());
    sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
  }
  auto count = [](const Bits& b) {
    size_t c = 0;
    for (uint64_t w : b) c += static_cast<size_t>(__builtin_popcountll(w));
    return c;
  };
  std::stable_sort(sets.begin(), sets.end(),
                   [&](const Bits& a, const Bits& b) { return count(a) < count(b); });
  return sets;
}

struct SetInfo {
  Bits boundary;          // bd(L)
  uint64_t mem = 0;       // M(L)
  uint64_t grad_mem = 0;  // M(dp(L) \ L) + M(dm(dp(L) \ L) \ L \ (dp(L) \ L)) (Note [Kusumoto DP])
  size_t size = 0;
};

// Note [Kusumoto time limit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The DP grows about as the square of the lower sets (Note [Bounded Pareto tables]): on a
// 9.9k-op densenet121 trace, kusumoto-approx ran past 8 minutes where the other methods of
// `dtr-plan compare` took seconds, and `make eval` waited on it. Like checkmate's solver, it
// now stops at the plan options' time limit: each DP checks the clock every 64 lower sets,
// and a DP that runs out of time abandons its budget. The strategies measured before then
// are kept (the best is returned, with a note); with none, the plan is keep-all and marked
// infeasible.
struct Deadline {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::time_point::max();
  bool passed() const { return std::chrono::steady_clock::now() >= at; }
};

struct Strategy {
  std::vector<size_t> chain;  // indices into the lower sets, from the empty set to the full one
  uint64_t overhead = 0;
};

class Dp {
 public:
  Dp(const Forward& f, std::vector<Bits> sets) : f_(f), sets_(std::move(sets)) {
    for (const Bits& l : sets_) {
      SetInfo s;
      s.boundary.assign(f_.words, 0);
      Bits plus(f_.words, 0);
      for_each_bit(l, [&](uint32_t v) {
        ++s.size;
        s.mem += f_.mem[v];
        for (uint32_t u : f_.out[v]) {
          if (!has(l, u)) {
            set(s.boundary, v);
            set(plus, u);
          }
        }
      });
      Bits minus(f_.words, 0);
      for_each_bit(plus, [&](uint32_t u) {
        for (uint32_t d : f_.in[u]) {
          if (!has(l, d) && !has(plus, d)) set(minus, d);
        }
      });
      s.grad_mem = sum(plus, f_.mem) + sum(minus, f_.mem);
      info_.push_back(std::move(s));
    }
  }

  size_t num_sets() const { return sets_.size(); }
  const Bits& set_bits(size_t i) const { return sets_[i]; }

  // Least-overhead strategy within DP budget b (false if none). Pulls into each set from
  // its subsets, which come earlier (sets are sorted by size), so every table is final
  // before it is read; Note [Bounded Pareto tables] for `width`.
  // `deadline`: Note [Kusumoto time limit]; when it passes, solve stops and sets *late.
  bool solve(uint64_t b, size_t width, Strategy* out, const Deadline& deadline = Deadline{},
             bool* late = nullptr) const {
    struct Entry {
      uint64_t t, ckpt;         // accumulated overhead and checkpoint memory
      uint32_t prev, prev_pos;  // the set it came from and the entry there
    };
    const size_t nl = sets_.size();
    std::vector<std::vector<Entry>> opt(nl);
    opt[0].push_back(Entry{0, 0, UINT32_MAX, 0});
    std::vector<Entry> cand;
    for (size_t j = 1; j < nl; ++j) {
      if ((j & 63) == 0 && deadline.passed()) {
        if (late) *late = true;
        return false;
      }
      cand.clear();
      for (size_t i = 0; i < j; ++i) {
        if (opt[i].empty() || info_[i].size >= info_[j].size || !subset(sets_[i], sets_[j]))
          continue;
        const uint64_t peak = info_[j].mem - info_[i].mem + info_[j].grad_mem;
        if (peak > b) continue;
        uint64_t overhead = 0, ckpt = 0;
        for (size_t w = 0; w < f_.words; ++w) {
          const uint64_t v = sets_[j][w] & ~sets_[i][w];
          for (uint64_t x = v & ~info_[j].boundary[w]; x; x &= x - 1)
            overhead += f_.cost[w * 64 + __builtin_ctzll(x)];
          for (uint64_t x = info_[j].boundary[w] & ~sets_[i][w]; x; x &= x - 1)
            ckpt += f_.mem[w * 64 + __builtin_ctzll(x)];
        }
        for (size_t k = 0; k < opt[i].size(); ++k) {
          const Entry& e = opt[i][k];
          if (e.ckpt + peak > b || e.ckpt + ckpt > b) continue;
          cand.push_back(Entry{e.t + overhead, e.ckpt + ckpt, static_cast<uint32_t>(i),
                               static_cast<uint32_t>(k)});
        }
      }
      // The Pareto front: by overhead, keeping an entry only if it holds less checkpoint
      // memory than every cheaper one (ties: the first pushed, the smallest subset).
      std::stable_sort(cand.begin(), cand.end(), [](const Entry& x, const Entry& y) {
        return x.t != y.t ? x.t < y.t : x.ckpt < y.ckpt;
      });
      std::vector<Entry>& front = opt[j];
      for (const Entry& e : cand)
        if (front.empty() || e.ckpt < front.back().ckpt) front.push_back(e);
      const size_t keep = width == 1 ? 2 : width;  // both ends are always kept
      if (keep != 0 && front.size() > keep) {
        // Keep `keep` entries evenly spaced along the front, both ends included.
        std::vector<Entry> thin;
        for (size_t k = 0; k < keep; ++k)
          thin.push_back(front[k * (front.size() - 1) / (keep - 1)]);
        front.swap(thin);
      }
    }
    if (opt[nl - 1].empty()) return false;
    out->chain.clear();
    out->overhead = opt[nl - 1].front().t;
    for (uint32_t i = static_cast<uint32_t>(nl - 1), k = 0; i != UINT32_MAX;) {
      out->chain.push_back(i);
      const Entry& e = opt[i][k];
      i = e.prev;
      k = e.prev_pos;
    }
    std::reverse(out->chain.begin(), out->chain.end());
    return true;
  }

 private:
  const Forward& f_;
  std::vector<Bits> sets_;
  std::vector<SetInfo> info_;
};

// One training step's forward part and its DP (the DP refers to the part's Forward, so a
// StepPart is not moved once made).
struct StepPart {
  StepRange range;
  Forward f;
  std::unique_ptr<Dp> dp;
};

// Note [Lower sets to stages], per step (Note [Kusumoto over several steps]). strategies[p]
// is step p's strategy; an empty chain keeps its forward part whole (one segment).
StageSchedule to_schedule(const Graph& g, const std::vector<std::unique_ptr<StepPart>>& parts,
                          const std::vector<Strategy>& strategies,
                          std::vector<std::vector<uint32_t>>* segments) {
  constexpr uint32_t kNone = UINT32_MAX;
  const size_t n = g.size();
  std::vector<uint32_t> step_of(n, kNone), seg(n, 0), last_seg(parts.size(), 0);
  std::vector<uint8_t> ckpt(n, 0);
  segments->clear();
  for (size_t p = 0; p < parts.size(); ++p) {
    const Forward& f = parts[p]->f;
    const Strategy& st = strategies[p];
    const uint32_t first = static_cast<uint32_t>(segments->size());
    if (st.chain.size() >= 2) {
      for (size_t s = 0; s + 1 < st.chain.size(); ++s) {
        const Bits& lo = parts[p]->dp->set_bits(st.chain[s]);
        const Bits& hi = parts[p]->dp->set_bits(st.chain[s + 1]);
        segments->emplace_back();
        for_each_bit(hi, [&](uint32_t v) {
          if (has(lo, v)) return;
          seg[f.base + v] = first + static_cast<uint32_t>(s);
          segments->back().push_back(f.base + v);
          for (uint32_t u : f.out[v]) ckpt[f.base + v] |= !has(hi, u);
        });
      }
    } else {
      segments->emplace_back();
      for (uint32_t v = 0; v < f.n; ++v) {
        seg[f.base + v] = first;
        segments->back().push_back(f.base + v);
      }
    }
    last_seg[p] = static_cast<uint32_t>(segments->size() - 1);
    for (uint32_t v = 0; v < f.n; ++v) step_of[f.base + v] = static_cast<uint32_t>(p);
  }
  const auto users = g.users();
  std::vector<uint32_t> last_use(n, 0), last_fwd_use(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t p = step_of[i];
    for (uint32_t j : users[i]) {
      last_use[i] = std::max(last_use[i], j);
      if (p != kNone && j < parts[p]->range.fwd_end) last_fwd_use[i] = std::max(last_fwd_use[i], j);
    }
  }
  // The active segment of each backward node: the latest segment among its inputs from its
  // step's forward part, else its predecessor's, else the step's last segment.
  std::vector<uint32_t> active(n, 0);
  for (size_t p = 0; p < parts.size(); ++p) {
    const StepRange& r = parts[p]->range;
    for (uint32_t b = r.fwd_end; b < r.end; ++b) {
      bool any = false;
      uint32_t a = 0;
      for (uint32_t d : g.nodes[b].deps) {
        if (step_of[d] == p) {
          a = any ? std::max(a, seg[d]) : seg[d];
          any = true;
        }
      }
      active[b] = any ? a : (b > r.fwd_end ? active[b - 1] : last_seg[p]);
    }
  }
  StageSchedule s;
  s.keep.resize(n);
  for (size_t t = 0; t < n; ++t) {
    s.keep[t].assign(t, 0);
    for (uint32_t u = 0; u < t; ++u) {
      const bool read_later = last_use[u] >= t;
      const uint32_t p = step_of[u];
      if (p != kNone && g.pinned_late(u) && t <= g.pin_stage(u)) {
        // A buffer whose pin starts later (a zeroed gradient): kept only while its own
        // forward pass reads it, made again for its pin (Note [Late pins in stage form]).
        s.keep[t][u] = t < parts[p]->range.fwd_end && last_fwd_use[u] >= t;
      } else if (p == kNone || t >= parts[p]->range.end) {
        s.keep[t][u] = read_later;  // backward values; forward values past their step
      } else if (t < parts[p]->range.fwd_end) {
        s.keep[t][u] = last_fwd_use[u] >= t || (read_later && (ckpt[u] || seg[u] == last_seg[p]));
      } else {
        s.keep[t][u] = read_later && (ckpt[u] || seg[u] == last_seg[p] || seg[u] == active[t]);
      }
    }
  }
  complete_compute_from_keep(g, s);
  return s;
}

}  // namespace

std::vector<std::vector<uint32_t>> forward_lower_sets(const Graph& graph, bool exact, size_t cap) {
  const Forward f = forward_part(graph, 0, std::min<uint32_t>(graph.first_backward,
                                                              static_cast<uint32_t>(graph.size())));
  std::vector<std::vector<uint32_t>> out;
  for (const Bits& b : enumerate(f, exact, cap)) {
    out.emplace_back();
    for_each_bit(b, [&](uint32_t v) { out.back().push_back(v); });
  }
  return out;
}

std::optional<uint64_t> kusumoto_dp_overhead(const Graph& graph, uint64_t dp_budget, bool exact,
                                             size_t pareto_width) {
  graph.validate();
  const std::vector<StepRange> ranges = training_steps(graph);
  if (ranges.empty()) return std::nullopt;
  const Forward f = forward_part(graph, ranges[0].begin, ranges[0].fwd_end);
  const Dp dp(f, enumerate(f, exact, KusumotoOptions{}.max_lower_sets));
  Strategy st;
  if (!dp.solve(dp_budget, pareto_width, &st)) return std::nullopt;
  return st.overhead;
}

KusumotoResult solve_kusumoto(const Graph& graph, const KusumotoOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  graph.validate();
  KusumotoResult res;
  // Note [Kusumoto time limit]
  Deadline deadline;
  if (opts.time_limit_s > 0)
    deadline.at = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(opts.time_limit_s));
  bool late = false;
  size_t budgets_tried = 0;
  auto finish = [&]() {
    res.solve_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return res;
  };
  const std::vector<StepRange> ranges = training_steps(graph);
  if (ranges.empty()) {
    // No forward/backward split: nothing for the lower-set framework to recompute.
    res.schedule = StageSchedule::no_remat(graph);
    res.cost = evaluate_stage_schedule(graph, res.schedule);
    res.found = res.cost.valid && res.cost.peak_bytes <= opts.budget_bytes;
    res.detail = "graph has no forward/backward split; every node computed once";
    return finish();
  }
  if (!opts.memory_centric) {
    // Keeping everything has the least compute: where it fits, it is the answer (as for
    // the chain methods, best_of_attempts in chain_view.cpp). The lower-set DPs need not
    // find it: kusumoto-approx recomputed 2% at --budget 1.0 of a recorded mlp trace.
    res.schedule = StageSchedule::no_remat(graph);
    res.cost = evaluate_stage_schedule(graph, res.schedule);
    if (res.cost.valid && res.cost.peak_bytes <= opts.budget_bytes) {
      res.found = true;
      res.detail = "keeping every node fits the budget; nothing recomputed";
      return finish();
    }
    res = KusumotoResult{};
  }
  std::vector<std::unique_ptr<StepPart>> parts;
  for (const StepRange& r : ranges) {
    auto part = std::make_unique<StepPart>();
    part->range = r;
    part->f = forward_part(graph, r.begin, r.fwd_end);
    part->dp = std::make_unique<Dp>(part->f, enumerate(part->f, opts.exact, opts.max_lower_sets));
    res.num_lower_sets += part->dp->num_sets();
    parts.push_back(std::move(part));
  }
  // Each step's strategy at DP budget b (an empty chain where its DP has none); returns
  // how many steps have one.
  auto solve_steps = [&](uint64_t b, std::vector<Strategy>* out) {
    out->assign(parts.size(), Strategy{});
    size_t solved = 0;
    for (size_t p = 0; p < parts.size() && !late; ++p)
      if (parts[p]->dp->solve(b, opts.pareto_width, &(*out)[p], deadline, &late))
        ++solved;  // solve leaves it empty otherwise
    return late ? 0 : solved;
  };

  bool have = false;
  size_t kept_whole = 0;  // steps of the chosen schedule whose DP had no strategy
  auto consider = [&](uint64_t b) {
    std::vector<Strategy> st;
    const size_t solved = solve_steps(b, &st);
    if (late) return false;
    ++budgets_tried;
    if (solved == 0) return false;
    std::vector<std::vector<uint32_t>> segments;
    StageSchedule s = to_schedule(graph, parts, st, &segments);
    const ScheduleCost c = evaluate_stage_schedule(graph, s);
    if (!c.valid) {
      throw PlanError("kusumoto: the schedule built from a strategy fails evaluation (" + c.error +
                      "); this is a bug in the translation");
    }
    bool better;
    if (!have) {
      better = true;
    } else if (opts.memory_centric) {
      better = c.peak_bytes != res.cost.peak_bytes ? c.peak_bytes < res.cost.peak_bytes
                                                   : c.compute_ns < res.cost.compute_ns;
    } else {
      const bool fits = c.peak_bytes <= opts.budget_bytes;
      const bool had_fit = res.cost.peak_bytes <= opts.budget_bytes;
      better = fits != had_fit ? fits
               : fits ? (c.compute_ns != res.cost.compute_ns ? c.compute_ns < res.cost.compute_ns
                                                              : c.peak_bytes < res.cost.peak_bytes)
                      : c.peak_bytes < res.cost.peak_bytes;
    }
    if (better) {
      have = true;
      res.schedule = std::move(s);
      res.cost = c;
      res.segments = std::move(segments);
      res.dp_budget_bytes = b;
      res.dp_overhead_ns = 0;
      for (const Strategy& x : st) res.dp_overhead_ns += x.overhead;
      kept_whole = parts.size() - solved;
    }
    return true;
  };

  const uint64_t budget = opts.budget_bytes;
  // The leanest DP budgets: the least at which every step has a strategy (bisection;
  // monotone), and up to twice it.
  auto lean_budgets = [&]() {
    uint64_t lo = 0, hi = 0;  // the DP always succeeds at the sum of all terms
    for (const auto& part : parts)
      for (uint64_t m : part->f.mem) hi += 3 * m;
    std::vector<Strategy> probe;
    if (solve_steps(hi, &probe) < parts.size()) hi = UINT64_MAX / 4;
    while (lo < hi && !late) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (solve_steps(mid, &probe) == parts.size()) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    for (uint64_t k = 0; k <= 8 && !late; ++k) consider(hi + hi * k / 8);
  };
  if (opts.memory_centric) {
    lean_budgets();
  } else {
    for (uint64_t k = 1; k <= 16 && !late; ++k) consider(budget / 8 * k + budget % 8 * k / 8);
    if (!late && !(have && res.cost.peak_bytes <= budget))
      lean_budgets();  // Note [DP budget search]
  }
  if (!have) {
    // No DP budget gave a strategy: report the keep-all schedule (valid, over the budget)
    // rather than an empty one, which no plan can be made from.
    res.schedule = StageSchedule::no_remat(graph);
    res.cost = evaluate_stage_schedule(graph, res.schedule);
  }
  res.found = have && res.cost.peak_bytes <= budget;
  std::ostringstream d;
  d << res.num_lower_sets << (opts.exact ? " lower sets" : " lower sets of ancestors");
  if (parts.size() > 1) d << " over " << parts.size() << " training steps, each planned on its own";
  if (have) {
    d << "; " << res.segments.size() << " segments, DP budget " << res.dp_budget_bytes
      << " bytes, measured peak " << res.cost.peak_bytes << " bytes";
    if (kept_whole)
      d << "; " << kept_whole << " of " << parts.size()
        << " steps had no strategy at that DP budget and are kept whole";
  } else {
    d << "; no strategy within any DP budget tried, the schedule is keep-all";
  }
  res.timed_out = late;
  if (late)
    d << "; time limit of " << opts.time_limit_s << " s reached after " << budgets_tried
      << " DP budget(s)" << (have ? ", the best strategy measured by then is kept" : "");
  res.detail = d.str();
  return finish();
}

namespace {

class KusumotoPlanner : public Planner {
 public:
  KusumotoPlanner(bool exact, bool memory_centric) : exact_(exact), memory_centric_(memory_centric) {}
  std::string name() const override {
    return std::string("kusumoto") + (exact_ ? "" : "-approx") + (memory_centric_ ? "-mem" : "");
  }
  PlanResult plan(const Graph& graph, uint64_t budget_bytes, const PlanOptions& options) override {
    KusumotoOptions opts;
    opts.budget_bytes = budget_bytes;
    opts.exact = exact_;
    opts.memory_centric = memory_centric_;
    opts.pareto_width = options.kusumoto_width;
    opts.time_limit_s = options.time_limit_s;
    const KusumotoResult r = solve_kusumoto(graph, opts);
    PlanResult res;
    res.plan = plan_from_stage_schedule(graph, r.schedule, name());
    res.feasible = r.found;
    res.predicted_compute_ns = res.plan.predicted_compute_ns;
    res.predicted_peak_bytes = res.plan.predicted_peak_bytes;
    res.solve_seconds = r.solve_s;
    res.note = r.detail;
    return res;
  }

 private:
  bool exact_, memory_centric_;
};

}  // namespace

std::unique_ptr<Planner> make_kusumoto_planner(bool exact, bool memory_centric) {
  return std::make_unique<KusumotoPlanner>(exact, memory_centric);
}

}  // namespace dtr
