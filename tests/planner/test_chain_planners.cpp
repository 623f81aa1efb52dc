// test_chain_planners.cpp: chen, revolve, rotor and checkpoint-subset against known counts
// and brute force.
#include <catch2/catch.hpp>

#include <map>
#include <queue>
#include <tuple>
#include <random>
#include <sstream>

#include "dtr/planner/plan_eval.h"
#include "dtr/planner/planner.h"

namespace {

// Griewank's recursion t(l, c) = min_j j + t(l-j, c-1) + t(j, c), by memoised search.
uint64_t revolve_by_recursion(uint64_t l, uint64_t c, std::map<std::pair<uint64_t, uint64_t>, uint64_t>& memo) {
  if (l <= 1) return 0;
  if (c == 0) return UINT64_MAX / 4;
  auto it = memo.find({l, c});
  if (it != memo.end()) return it->second;
  uint64_t best = UINT64_MAX / 4;
  for (uint64_t j = 1; j < l; ++j)
    best = std::min(best, j + revolve_by_recursion(l - j, c - 1, memo) + revolve_by_recursion(j, c, memo));
  return memo[{l, c}] = best;
}

// Least compute over the schedules of training_chain_graph(spec) within `budget` (Dijkstra
// over resident sets), with the evaluator's memory model: computing a node needs its deps
// resident and adds its size; frees are free. State: resident a_1..a_{L-1}, which of them
// have been resident across a reversal, and how many reversals are done (the latest
// gradient d_{i+1} is resident).
// `persistent`: Rotor's schedule class: a state that was resident across a reversal stays
// until its last use (d_{k+1}); without it, any free is allowed.
uint64_t brute_force(const dtr::ChainSpec& spec, uint64_t budget, bool persistent = true) {
  const uint32_t L = static_cast<uint32_t>(spec.stages());
  using State = std::tuple<uint32_t, uint32_t, uint32_t>;  // (resident mask, held-across mask, next reversal: L..0)
  std::map<State, uint64_t> dist;
  using Item = std::pair<uint64_t, State>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> pq;
  auto grad = [&](uint32_t i) { return i >= 1 && i <= L ? spec.bwd_bytes[i - 1] : 0; };
  auto mem = [&](uint32_t mask, uint32_t next) {
    uint64_t m = spec.fwd_bytes[0] + grad(next + 1);  // a_0 pinned; d_{next+1} held
    for (uint32_t k = 1; k < L; ++k)
      if (mask >> k & 1) m += spec.fwd_bytes[k];
    return m;
  };
  auto push = [&](State s, uint64_t d) {
    auto it = dist.find(s);
    if (it == dist.end() || d < it->second) dist[s] = d, pq.push({d, s});
  };
  if (spec.fwd_bytes[0] > budget) return UINT64_MAX;
  push({0, 0, L}, spec.fwd_ns[0]);
  while (!pq.empty()) {
    const auto [d, s] = pq.top();
    pq.pop();
    if (d != dist[s]) continue;
    const auto [mask, held, next] = s;
    if (next == 0) return d;
    const uint64_t m = mem(mask, next);
    auto resident = [&](uint32_t k) { return k == 0 || (mask >> k & 1); };
    for (uint32_t k = 1; k < L; ++k) {
      if (mask >> k & 1) {
        const bool last_use_passed = next <= k;
        if (!persistent || !(held >> k & 1) || last_use_passed)
          push({mask & ~(1u << k), held & ~(1u << k), next}, d);  // free a_k
      } else if (resident(k - 1) && m + spec.fwd_bytes[k] <= budget) {
        push({mask | (1u << k), held, next}, d + spec.fwd_ns[k]);  // compute a_k
      }
    }
    // reversal d_next: needs a_{next-1} and d_{next+1}; then d_{next+1} is dropped.
    if (resident(next - 1) && m + grad(next) <= budget)
      push({mask, persistent ? mask : 0, next - 1}, d + spec.bwd_ns[next - 1]);
  }
  return UINT64_MAX;
}

dtr::ChainSpec random_chain(std::mt19937_64& rng, uint32_t L) {
  std::uniform_int_distribution<uint64_t> cost(1, 20), size(1, 4), gsize(0, 3);
  dtr::ChainSpec s;
  for (uint32_t i = 0; i < L; ++i) {
    s.fwd_ns.push_back(i == 0 ? 0 : cost(rng));
    s.fwd_bytes.push_back(size(rng));
    s.bwd_ns.push_back(cost(rng));
    s.bwd_bytes.push_back(gsize(rng));
  }
  return s;
}

}  // namespace

TEST_CASE("revolve's forward-step counts are Griewank's binomial formula", "[planner][revolve]") {
  CHECK(dtr::revolve_forward_steps(16, 2) == 45);
  CHECK(dtr::revolve_forward_steps(16, 3) == 33);
  CHECK(dtr::revolve_forward_steps(16, 4) == 27);
  CHECK(dtr::revolve_forward_steps(100, 4) == 374);
  CHECK(dtr::revolve_forward_steps(100, 6) == 280);
  CHECK(dtr::revolve_forward_steps(1, 1) == 0);
  CHECK(dtr::revolve_forward_steps(10, 1) == 45);  // l(l-1)/2
  CHECK(dtr::revolve_forward_steps(10, 10) == 9);   // store everything
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> memo;
  for (uint64_t l = 1; l <= 40; ++l)
    for (uint64_t c = 1; c <= 6; ++c) {
      INFO("l=" << l << " c=" << c);
      CHECK(dtr::revolve_forward_steps(l, c) == revolve_by_recursion(l, c, memo));
    }
}

TEST_CASE("revolve's schedule takes exactly the formula's forward steps", "[planner][revolve]") {
  for (uint32_t l : {1u, 2u, 3u, 7u, 16u, 33u, 100u, 257u})
    for (uint32_t c = 1; c <= 7; ++c) {
      const auto actions = dtr::revolve_schedule(l, c);
      uint64_t advances = 0, reversals = 0;
      uint32_t stored = 0, max_stored = 0;
      for (const auto& a : actions) {
        if (a.kind == dtr::RevolveAction::Kind::advance) advances += a.to - a.from;
        if (a.kind == dtr::RevolveAction::Kind::reverse) ++reversals;
        if (a.kind == dtr::RevolveAction::Kind::store) max_stored = std::max(max_stored, ++stored);
        if (a.kind == dtr::RevolveAction::Kind::restore) (void)0;
      }
      INFO("l=" << l << " c=" << c);
      CHECK(advances == dtr::revolve_forward_steps(l, c));
      CHECK(reversals == l);
    }
  // On a unit training chain the schedule, run by the evaluator, costs l-1 + t(l, c) forward
  // steps... plus one per reversal; with free reversals it is the formula's count.
  const uint32_t L = 16;
  const dtr::ChainSpec spec{std::vector<uint64_t>(L, 1), std::vector<uint64_t>(L, 1),
                            std::vector<uint64_t>(L, 0), std::vector<uint64_t>(L, 0)};
  const dtr::Graph g = dtr::training_chain_graph(spec);
  auto planner = dtr::make_planner("revolve");
  uint64_t last = UINT64_MAX;
  for (uint64_t budget : {3u, 4u, 5u, 6u, 8u, 17u}) {
    const dtr::PlanResult r = dtr::run_planner(*planner, g, budget, dtr::PlanOptions{});
    INFO("budget " << budget << ": " << r.note);
    CHECK(r.feasible);
    CHECK(r.plan.has_schedule());
    CHECK(r.predicted_peak_bytes <= budget);
    bool is_formula = false;  // compute = a_0 + t(16, c) for some slot count c
    for (uint64_t c = 1; c <= L; ++c) is_formula |= r.predicted_compute_ns == 1 + dtr::revolve_forward_steps(L, c);
    CHECK(is_formula);
    CHECK(r.predicted_compute_ns <= last);
    last = r.predicted_compute_ns;
  }
  CHECK(last == L);  // everything fits: each a_k once
}

TEST_CASE("rotor equals a brute-force search on random heterogeneous chains", "[planner][rotor]") {
  std::mt19937_64 rng(5);
  int compared = 0, infeasible = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const uint32_t L = 1 + static_cast<uint32_t>(rng() % 8);  // <= 8 stages: 2^7 masks
    const dtr::ChainSpec spec = random_chain(rng, L);
    uint64_t total = 0;
    for (uint32_t i = 0; i < L; ++i) total += spec.fwd_bytes[i] + spec.bwd_bytes[i];
    const uint64_t budget = 2 + rng() % (total + 2);
    const uint64_t expect = brute_force(spec, budget);
    const dtr::RotorSolution sol = dtr::rotor_solve(spec, budget, 1000);
    INFO("trial " << trial << " L=" << L << " budget " << budget);
    REQUIRE(sol.feasible == (expect != UINT64_MAX));
    if (!sol.feasible) {
      ++infeasible;
      continue;
    }
    CHECK(sol.compute_ns == expect);
    // Rotor's class is persistent schedules; freeing a checkpoint early and recomputing it
    // later can only help, never hurt.
    CHECK(brute_force(spec, budget, /*persistent=*/false) <= sol.compute_ns);
    // The schedule itself, run by the common evaluator, costs that and fits.
    const dtr::Graph g = dtr::training_chain_graph(spec);
    const dtr::PlanEval e = dtr::evaluate_schedule(g, dtr::schedule_with_frees(g, sol.compute_order));
    CHECK(e.compute_ns == sol.compute_ns);
    CHECK(e.peak_bytes <= budget);
    ++compared;
  }
  CHECK(compared > 60);
  CHECK(infeasible > 0);
}

TEST_CASE("non-persistent schedules can beat rotor's persistent optimum", "[planner][rotor]") {
  // Found by the brute force: keeping a_2 through the reversal of step 5 and dropping it
  // before step 4's reversal (which needs the room) saves recomputing a_1, a_2 once. Rotor's
  // recurrence keeps every checkpoint until its last use, so it pays 83, not 67.
  const dtr::ChainSpec spec{{0, 1, 15, 1, 6}, {1, 4, 2, 3, 4}, {4, 4, 1, 8, 10}, {0, 0, 0, 2, 3}};
  const dtr::RotorSolution sol = dtr::rotor_solve(spec, 10, 1000);
  REQUIRE(sol.feasible);
  CHECK(sol.compute_ns == 83);
  CHECK(brute_force(spec, 10, /*persistent=*/true) == 83);
  CHECK(brute_force(spec, 10, /*persistent=*/false) == 67);
}

TEST_CASE("rotor on a 10-stage chain matches brute force at every budget", "[planner][rotor]") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 4; ++trial) {
    const dtr::ChainSpec spec = random_chain(rng, 10);
    for (uint64_t budget = 4; budget <= 30; budget += 3) {
      const uint64_t expect = brute_force(spec, budget);
      const dtr::RotorSolution sol = dtr::rotor_solve(spec, budget, 1000);
      INFO("trial " << trial << " budget " << budget);
      REQUIRE(sol.feasible == (expect != UINT64_MAX));
      if (sol.feasible) CHECK(sol.compute_ns == expect);
    }
  }
}

TEST_CASE("rotor never beats revolve's count on homogeneous chains and is no worse", "[planner][rotor][revolve]") {
  // Unit chain with free reversals: every schedule's cost is its forward steps. Rotor's
  // optimum over all schedules is at most revolve's for the slots that fit its budget.
  const uint32_t L = 12;
  const dtr::ChainSpec spec{std::vector<uint64_t>(L, 1), std::vector<uint64_t>(L, 1),
                            std::vector<uint64_t>(L, 0), std::vector<uint64_t>(L, 0)};
  const dtr::Graph g = dtr::training_chain_graph(spec);
  for (uint64_t budget = 3; budget <= 13; ++budget) {
    auto revolve = dtr::make_planner("revolve");
    const dtr::PlanResult rv = dtr::run_planner(*revolve, g, budget, dtr::PlanOptions{});
    const dtr::RotorSolution rt = dtr::rotor_solve(spec, budget, 1000);
    INFO("budget " << budget);
    REQUIRE(rt.feasible);
    CHECK(rt.compute_ns <= rv.predicted_compute_ns);
    CHECK(rt.compute_ns == brute_force(spec, budget));
  }
}

TEST_CASE("checkpoint-subset's DP finds the least-peak subset", "[planner][checkpoint-subset]") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 60; ++trial) {
    const uint32_t L = 1 + static_cast<uint32_t>(rng() % 9);
    const dtr::ChainSpec spec = random_chain(rng, L);
    const dtr::Graph g = dtr::training_chain_graph(spec);
    uint64_t dp_peak = 0;
    const std::vector<uint32_t> states = dtr::checkpoint_subset_min_peak(spec, &dp_peak);
    // Brute force: every subset of a_1..a_{L-1}, run by the evaluator.
    uint64_t best = UINT64_MAX;
    for (uint32_t mask = 0; mask < (1u << (L - 1)); ++mask) {
      std::vector<dtr::NodeDecision> d(g.size(), dtr::NodeDecision::keep);
      for (uint32_t k = 1; k < L; ++k)
        if (!(mask >> (k - 1) & 1)) d[k] = dtr::NodeDecision::recompute;
      best = std::min(best, dtr::evaluate_decisions(g, d).peak_bytes);
    }
    std::vector<dtr::NodeDecision> d(g.size(), dtr::NodeDecision::keep);
    for (uint32_t k = 1; k < L; ++k) d[k] = dtr::NodeDecision::recompute;
    for (uint32_t k : states) d[k] = dtr::NodeDecision::keep;
    uint64_t cubic_peak = 0;
    dtr::checkpoint_subset_min_peak_cubic(spec, &cubic_peak);
    INFO("trial " << trial << " L=" << L);
    CHECK(dp_peak == best);
    CHECK(cubic_peak == best);
    CHECK(dtr::checkpoint_subset_peak(spec, states) == best);
    CHECK(dtr::evaluate_decisions(g, d).peak_bytes == best);
  }
}

TEST_CASE("checkpoint-subset's O(L log L) DP gives the O(L^3) DP's least peak", "[planner][checkpoint-subset]") {
  // Chains up to 400 stages, sizes from three spreads: uniform, heavy-tailed, and mostly
  // equal with zeros (ties everywhere: the bisection's edge cases).
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t L = 1 + static_cast<uint32_t>(trial < 200 ? rng() % 40 : rng() % 400);
    dtr::ChainSpec spec;
    for (uint32_t i = 0; i < L; ++i) {
      auto bytes = [&]() -> uint64_t {
        switch (trial % 3) {
          case 0: return 1 + rng() % 1000;
          case 1: return uint64_t{1} << (rng() % 30);
          default: return rng() % 4 == 0 ? 0 : 8;
        }
      };
      spec.fwd_ns.push_back(i == 0 ? 0 : 1 + rng() % 50);
      spec.fwd_bytes.push_back(bytes());
      spec.bwd_ns.push_back(1 + rng() % 50);
      spec.bwd_bytes.push_back(bytes());
    }
    uint64_t fast = 0, cubic = 0;
    const std::vector<uint32_t> fast_states = dtr::checkpoint_subset_min_peak(spec, &fast);
    const std::vector<uint32_t> cubic_states = dtr::checkpoint_subset_min_peak_cubic(spec, &cubic);
    INFO("trial " << trial << " L=" << L);
    REQUIRE(fast == cubic);
    CHECK(dtr::checkpoint_subset_peak(spec, fast_states) == fast);
    CHECK(dtr::checkpoint_subset_peak(spec, cubic_states) == cubic);
  }
  // A subset that is not increasing within 1..L-1 is refused.
  const dtr::ChainSpec spec = random_chain(rng, 5);
  CHECK_THROWS_AS(dtr::checkpoint_subset_peak(spec, {3, 2}), dtr::PlanError);
  CHECK_THROWS_AS(dtr::checkpoint_subset_peak(spec, {5}), dtr::PlanError);
}

TEST_CASE("checkpoint-subset solves a long training chain exactly, not by stages", "[planner][checkpoint-subset]") {
  std::mt19937_64 rng(5);
  const dtr::ChainSpec spec = random_chain(rng, 3000);
  const dtr::Graph g = dtr::training_chain_graph(spec);
  uint64_t least = 0;
  dtr::checkpoint_subset_min_peak(spec, &least);
  const uint64_t full = dtr::evaluate_plan(g, dtr::keep_all_plan(g)).peak_bytes;
  REQUIRE(least < full);
  auto planner = dtr::make_planner("checkpoint-subset");
  const dtr::PlanResult r = dtr::run_planner(*planner, g, least, dtr::PlanOptions{});
  INFO(r.note);
  CHECK(r.feasible);
  CHECK(r.predicted_peak_bytes == least);
  CHECK(r.note.find("3000 stages") != std::string::npos);
  // Nothing has a lower peak in this model, and the evaluator agrees with the model.
  const dtr::PlanResult one_below = dtr::run_planner(*planner, g, least - 1, dtr::PlanOptions{});
  CHECK_FALSE(one_below.feasible);
}

TEST_CASE("chen keeps everything when it fits and segments when it must", "[planner][chen]") {
  const uint32_t L = 64;
  const dtr::ChainSpec spec{std::vector<uint64_t>(L, 10), std::vector<uint64_t>(L, 100),
                            std::vector<uint64_t>(L, 20), std::vector<uint64_t>(L, 0)};
  const dtr::Graph g = dtr::training_chain_graph(spec);
  auto chen = dtr::make_planner("chen");
  const dtr::PlanResult roomy = dtr::run_planner(*chen, g, 64 * 100, dtr::PlanOptions{});
  CHECK(roomy.feasible);
  CHECK(roomy.predicted_compute_ns == g.total_compute_ns());
  // sqrt(64) = 8 segments of 8: about 16 states resident, one extra forward pass.
  const dtr::PlanResult tight = dtr::run_planner(*chen, g, 17 * 100, dtr::PlanOptions{});
  CHECK(tight.feasible);
  CHECK(tight.predicted_peak_bytes <= 1700);
  CHECK(tight.predicted_compute_ns > g.total_compute_ns());
  CHECK(tight.predicted_compute_ns <= g.total_compute_ns() + 63 * 10);
  const dtr::PlanResult hopeless = dtr::run_planner(*chen, g, 4 * 100, dtr::PlanOptions{});
  CHECK_FALSE(hopeless.feasible);
}

TEST_CASE("every chain method gives a plan the evaluator accepts on a DAG", "[planner][dag]") {
  // A residual-style DAG: each block reads the previous two; backward mirrors it.
  std::string text;
  const int n = 30;
  text += "node in cost=0 size=10 pinned\n";
  for (int i = 0; i < n; ++i)
    text += "node f" + std::to_string(i) + " cost=" + std::to_string(5 + i % 7) + " size=" +
            std::to_string(10 + (i * 7) % 13) + " deps=" + (i == 0 ? "in" : "f" + std::to_string(i - 1)) +
            (i >= 2 ? ",f" + std::to_string(i - 2) : "") + "\n";
  for (int i = n - 1; i >= 0; --i)
    text += "node g" + std::to_string(i) + " cost=9 size=5 deps=f" + std::to_string(i) +
            (i < n - 1 ? ",g" + std::to_string(i + 1) : "") + " backward" + (i == 0 ? " pinned" : "") + "\n";
  std::istringstream in(text);
  const dtr::Graph g = dtr::read_graph_text(in, "dag");
  const uint64_t full = dtr::evaluate_plan(g, dtr::keep_all_plan(g)).peak_bytes;
  for (const char* m : {"chen", "revolve", "rotor", "checkpoint-subset"}) {
    auto planner = dtr::make_planner(m);
    dtr::PlanOptions o;
    o.max_stages = 10;
    const dtr::PlanResult r = dtr::run_planner(*planner, g, full, o);
    INFO(m << ": " << r.note);
    CHECK(r.feasible);
    CHECK(r.predicted_compute_ns == g.total_compute_ns());  // keeping all fits: no overhead
    const dtr::PlanResult half = dtr::run_planner(*planner, g, full / 2, o);
    CHECK(half.plan.decisions.size() == g.size());
    CHECK(half.predicted_compute_ns >= g.total_compute_ns());
    if (half.feasible) CHECK(half.predicted_peak_bytes <= full / 2);
  }
}
