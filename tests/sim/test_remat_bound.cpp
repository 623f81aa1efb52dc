// test_remat_bound.cpp: the least recomputation of any schedule (Note [Remat bound] in
// sim/remat_bound.cpp): exact on hand-made traces, met by a policy where a policy can meet
// it, and never beaten by any policy on random programs, random training steps and DTR's
// logs.
#include <catch2/catch.hpp>

#include <sstream>

#include "dtr/core/trace.h"
#include "dtr/sim/remat_bound.h"
#include "dtr/sim/replay.h"
#include "dtr/sim/synthetic_trace.h"
#include "sim/dtr_logs.h"
#include "test_support.h"

using namespace dtr;

namespace {

// One CALL with one result: `args` are comma-separated quoted names (or empty); `alias` is
// the index of the arg it views, -1 for its own storage.
// `workspace`: the op's WORKSPACE bytes (0: none written).
std::string call(const std::string& op, const std::string& args, const std::string& result,
                 uint64_t time, uint64_t bytes, int alias = -1, uint64_t workspace = 0) {
  const std::string scratch =
      workspace ? ",\"WORKSPACE\":" + std::to_string(workspace) : std::string();
  return "{\"ARGS\":[" + args + "],\"INSTRUCTION\":\"CALL\",\"NAME\":\"" + op +
         "\",\"RESULT\":[\"" + result + "\"],\"TIME\":" + std::to_string(time) + scratch +
         "}\n{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"" + std::to_string(bytes) + "\",\"NAME\":\"" +
         result + "\"}\n{\"ALIAS\":" + std::to_string(alias) +
         ",\"INSTRUCTION\":\"ALIAS\",\"NAME\":\"" + result + "\"}\n";
}
std::string constant(const std::string& name, uint64_t bytes) {
  return "{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"" + name +
         "\"}\n{\"INSTRUCTION\":\"MEMORY\",\"MEMORY\":\"" + std::to_string(bytes) +
         "\",\"NAME\":\"" + name + "\"}\n";
}
std::string event(const char* instruction, const std::string& name) {
  return std::string("{\"INSTRUCTION\":\"") + instruction + "\",\"NAME\":\"" + name + "\"}\n";
}

Trace trace_of(const std::string& body) {
  std::istringstream text(
      "{\"INSTRUCTION\":\"DTR_TRACE\",\"VERSION\":3}\n"
      "{\"ANNOTATION\":\"START\",\"INSTRUCTION\":\"ANNOTATE\"}\n" +
      body);
  return read_trace(text, "bound.trace");
}

// a (10 ns, 4 B) is read again after b -> c, and h needs x, b and c resident: 9 B (k's
// output is empty, so that k fits in 9 B too).
// `h_scratch`: h's WORKSPACE.
std::string one_step(const std::string& p, uint64_t h_scratch = 0) {
  return call("f", "\"x\"", p + "a", 10, 4) + call("g", "\"" + p + "a\"", p + "b", 1, 4) +
         call("h", "\"" + p + "b\"", p + "c", 1, 4, -1, h_scratch) + event("RELEASE", p + "b") +
         call("k", "\"" + p + "a\",\"" + p + "c\"", p + "d", 1, 0) + event("RELEASE", p + "a") +
         event("RELEASE", p + "c") + event("RELEASE", p + "d");
}

ReplayResult replay_at(const Trace& trace, const std::string& policy, uint64_t budget,
                       ReplayOptions::Memory memory = ReplayOptions::Memory::none,
                       bool variant = false) {
  ReplayOptions o;
  o.memory = memory;
  // The engine's other choices: dead storages first, lazy release, sampled search.
  o.dead_first = o.lazy_release = variant;
  o.search = variant ? SearchMode::sample : SearchMode::full;
  o.policy = policy;
  o.budget.kind = Budget::Kind::bytes;
  o.budget.bytes = budget;
  o.max_overhead = 0;
  return replay(trace, compute_baseline(trace), o);
}

}  // namespace

TEST_CASE("remat bound: one forced drop, charged its op, met by dtr_eq", "[sim][bound]") {
  const Trace trace = trace_of(constant("x", 1) + one_step(""));
  const Baseline baseline = compute_baseline(trace);
  REQUIRE(baseline.compute_ns == 13);

  // At h: x (1) + b (4) + c (4) resident, a (4) needed by k: 13 B for a budget of 9.
  const RematBound b9 = remat_bound(trace, baseline, 9);
  REQUIRE(b9.feasible);
  CHECK(b9.remat_ns == 10);
  REQUIRE(b9.points.size() == 1);
  CHECK(b9.points[0].op == "h");
  CHECK(b9.points[0].resident_bytes == 9);
  CHECK(b9.points[0].needed_bytes == 4);
  CHECK(b9.points[0].drop_bytes == 4);
  CHECK(b9.overhead == Approx(23.0 / 13.0));
  const ReplayResult r = replay_at(trace, "dtr_eq", 9);
  REQUIRE(r.status_name == "ok");
  CHECK(r.stats.remat_compute_ns == 10);  // the bound is met

  // With room for a, nothing is forced; under h's 9 B, nothing runs.
  CHECK(remat_bound(trace, baseline, 13).remat_ns == 0);
  const RematBound b8 = remat_bound(trace, baseline, 8);
  CHECK_FALSE(b8.feasible);
  CHECK(b8.most_resident.op == "g");  // the first of g and h, which need 9 B each
  CHECK(b8.most_resident.resident_bytes == 9);
  CHECK(replay_at(trace, "dtr_eq", 8).status_name == "oom");
  CHECK(format_remat_bound(b8).find("no schedule fits") != std::string::npos);
}

TEST_CASE("remat bound: an op's workspace is resident while it runs", "[sim][bound]") {
  // Note [Op workspace]: with 4 B of scratch at h, 13 B no longer hold h's 9 B and a.
  const Trace trace = trace_of(constant("x", 1) + one_step("", 4));
  const Baseline baseline = compute_baseline(trace);
  REQUIRE(baseline.peak_bytes == 17);
  const RematBound b13 = remat_bound(trace, baseline, 13);
  REQUIRE(b13.feasible);
  CHECK(b13.remat_ns == 10);
  REQUIRE(b13.points.size() == 1);
  CHECK(b13.points[0].op == "h");
  CHECK(b13.points[0].resident_bytes == 13);
  const ReplayResult r = replay_at(trace, "dtr_eq", 13);
  REQUIRE(r.status_name == "ok");
  CHECK(r.stats.remat_compute_ns == 10);  // met
  CHECK_FALSE(remat_bound(trace, baseline, 12).feasible);
  CHECK(replay_at(trace, "dtr_eq", 12).status_name == "oom");
}

TEST_CASE("remat bound: separated steps add up", "[sim][bound]") {
  // Two steps of the same shape: each forces one drop of a 10 ns storage, and neither's
  // re-making can serve the other.
  const Trace trace = trace_of(constant("x", 1) + one_step("s1") + one_step("s2"));
  const RematBound b = remat_bound(trace, compute_baseline(trace), 9);
  REQUIRE(b.feasible);
  CHECK(b.remat_ns == 20);
  REQUIRE(b.points.size() == 2);
  CHECK(b.points[0].event < b.points[1].event);
  CHECK(replay_at(trace, "dtr_eq", 9).stats.remat_compute_ns == 20);
}

TEST_CASE("remat bound: an accumulated gradient is charged what made it", "[sim][bound]") {
  // buf = zero_(); g = bw(x) (100 ns); buf.add_(g); then an op needs 17 B while buf waits
  // for the optimizer's PIN. Under 20 B, 5 of buf's 8 B cannot stay: keeping g instead saves
  // nothing (as large, read by nothing else), so dropping buf reruns zero_, bw and add_.
  const std::string body =
      constant("x", 1) + call("aten::zero_", "", "buf", 1, 8) + call("bw", "\"x\"", "g", 100, 8) +
      call("aten::add_", "\"buf\",\"g\"", "buf2", 1, 8, 0) + event("RELEASE", "g") +
      event("RELEASE", "buf") + call("y", "\"x\"", "y", 1, 16) + event("RELEASE", "y") +
      event("PIN", "buf2");
  const Trace trace = trace_of(body);
  const Baseline baseline = compute_baseline(trace);
  const RematBound b = remat_bound(trace, baseline, 20);
  REQUIRE(b.feasible);
  CHECK(b.remat_ns == 102 * 5 / 8);  // 63: (1 + 100 + 1) ns per 8 B, for 5 B
  const ReplayResult r = replay_at(trace, "dtr_eq", 20);
  REQUIRE(r.status_name == "ok");
  CHECK(r.stats.remat_compute_ns == 102);
  CHECK(r.stats.remat_compute_ns >= b.remat_ns);

  SECTION("a write after the drop is the program's own run, not a re-making") {
    // The same ops, but the 17 B op comes before bw: buf is still zeros there, and making
    // it again costs zero_ alone; bw and add_ run after it anyway.
    const Trace early = trace_of(
        constant("x", 1) + call("aten::zero_", "", "buf", 1, 8) + call("y", "\"x\"", "y", 1, 16) +
        event("RELEASE", "y") + call("bw", "\"x\"", "g", 100, 8) +
        call("aten::add_", "\"buf\",\"g\"", "buf2", 1, 8, 0) + event("RELEASE", "g") +
        event("RELEASE", "buf") + event("PIN", "buf2"));
    const RematBound eb = remat_bound(early, compute_baseline(early), 20);
    CHECK(eb.remat_ns == 1 * 5 / 8);  // 0: a 1 ns memset, for 5 of 8 B
    const ReplayResult er = replay_at(early, "dtr_eq", 20);
    REQUIRE(er.status_name == "ok");
    CHECK(er.stats.remat_compute_ns == 1);
  }

  SECTION("a gradient source read again does not join the chain") {
    // g is read by one more op, so it does not join buf2's chain: keeping it may serve
    // both. But that op comes before y, so at y g is a dead arg of add_ (Note [Dead args]),
    // and keeping its 8 B leaves none of the 5 to drop: it is made again, 100 ns per 8 B.
    const Trace shared =
        trace_of(body.substr(0, body.find("{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"g\"")) +
                 call("use", "\"g\"", "u", 1, 1) + event("RELEASE", "u") + event("RELEASE", "g") +
                 event("RELEASE", "buf") + call("y", "\"x\"", "y", 1, 16) + event("RELEASE", "y") +
                 event("PIN", "buf2"));
    CHECK(remat_bound(shared, compute_baseline(shared), 20).remat_ns == 102 * 5 / 8);
    CHECK(replay_at(shared, "dtr_eq", 20).stats.remat_compute_ns == 102);
  }
}

TEST_CASE("remat bound: a dead arg of a re-making is kept or made again", "[sim][bound]") {
  // Note [Dead args]: g (8 B, 10 ns) is made from d (2 B, 100 ns), which then dies; h needs
  // 17 B with x, and g waits for k. Dropping g at h makes it again from d, so d was kept
  // through h (2 B of the budget) or is made again too (100 ns). Before the note the bound
  // charged g's op alone.
  const std::string body =
      constant("x", 1) + call("D", "\"x\"", "d", 100, 2) + call("G", "\"d\"", "g", 10, 8) +
      event("RELEASE", "d") + call("H", "\"x\"", "h", 1, 16) + event("RELEASE", "h") +
      call("K", "\"g\"", "k", 1, 0) + event("RELEASE", "g") + event("RELEASE", "k");
  const Trace trace = trace_of(body);
  const Baseline baseline = compute_baseline(trace);
  REQUIRE(baseline.compute_ns == 112);

  // Under 17 B all of g's 8 B go at h, and no byte is left to keep d: both are made again,
  // as dtr_eq does (d, dead, is evicted at once).
  const RematBound b17 = remat_bound(trace, baseline, 17);
  REQUIRE(b17.feasible);
  REQUIRE(b17.points.size() == 1);
  CHECK(b17.points[0].op == "H");
  CHECK(b17.points[0].drop_bytes == 8);
  CHECK(b17.remat_ns == 110);
  const ReplayResult r17 = replay_at(trace, "dtr_eq", 17);
  REQUIRE(r17.status_name == "ok");
  CHECK(r17.stats.remat_compute_ns == 110);

  // Under 19 B, 6 B must go: g's 8 less d's 2 kept, so keeping d costs nothing more.
  CHECK(remat_bound(trace, baseline, 19).remat_ns == 10);
  // Under 18 B, 7 B: keeping d through h leaves 6. The linear program keeps half of d and
  // makes half of it again (10 + 50); a real schedule pays 110, as dtr_eq does.
  const RematBound b18 = remat_bound(trace, baseline, 18);
  CHECK(b18.remat_ns >= 59);
  CHECK(b18.remat_ns <= 60);
  CHECK(b18.remat_ns <= replay_at(trace, "dtr_eq", 18).stats.remat_compute_ns);
  CHECK(b17.points_dead_args_unpriced == 0);
  CHECK_FALSE(b17.points[0].dead_args_unpriced);
  CHECK(format_remat_bound(b17).find("without their dead args") == std::string::npos);

  // With no sweep to price them (lp_rounds 0), the point is the knapsack's, g's op alone,
  // and says so.
  const RematBound knapsack = remat_bound(trace, baseline, 17, /*lp_rounds=*/0);
  REQUIRE(knapsack.points.size() == 1);
  CHECK(knapsack.remat_ns == 10);
  CHECK(knapsack.points[0].dead_args_unpriced);
  CHECK(knapsack.points_dead_args_unpriced == 1);
  CHECK(format_remat_bound(knapsack).find("1 of the points priced without their dead args") !=
        std::string::npos);
}

TEST_CASE("remat bound: no policy beats it on random programs and training steps", "[sim][bound]") {
  const ReplayOptions::Memory memory =
      GENERATE(ReplayOptions::Memory::none, ReplayOptions::Memory::fake);
  const bool fake = memory == ReplayOptions::Memory::fake;
  size_t checked = 0, binding = 0, infeasible = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    // Under the fake allocator, sizes of MiB: its segments are 2 MiB and up.
    const uint64_t unit = fake ? (1u << 20) : 1024;
    Trace trace = seed % 2 ? make_random_trace(seed, 400, unit)
                           : make_random_training_trace(seed, 6 + seed % 20, unit);
    // Every fourth pair of seeds holds scratch in a third of its calls (Note [Op workspace]).
    if (seed % 8 >= 6) add_random_workspaces(trace, seed, unit / 16);
    const Baseline baseline = compute_baseline(trace);
    for (double ratio : {0.9, 0.7, 0.5, 0.35, 0.2}) {
      const uint64_t budget =
          static_cast<uint64_t>(ratio * static_cast<double>(baseline.peak_bytes));
      const RematBound bound = remat_bound(trace, baseline, budget);
      if (!bound.feasible) ++infeasible;
      if (bound.remat_ns > 0) ++binding;
      for (const char* policy :
           {"dtr_eq", "dtr", "dtr_local", "dtr_ancestors", "msps", "lru", "size", "random",
            "dtr_eq+", "msps+"}) {  // +: the variant of replay_at
        const std::string name = policy;
        const bool variant = name.back() == '+';
        const ReplayResult r = replay_at(trace, variant ? name.substr(0, name.size() - 1) : name,
                                         budget, memory, variant);
        INFO("seed " << seed << " " << policy << " at " << ratio << ": " << r.status_name
                     << ", remat " << r.stats.remat_compute_ns << " ns, bound " << bound.remat_ns
                     << (bound.feasible ? "" : " (infeasible)") << (fake ? " fake" : " none"));
        if (!bound.feasible) {
          CHECK_FALSE(r.status.ok());
          continue;
        }
        if (!r.status.ok()) continue;
        CHECK(r.stats.remat_compute_ns >= bound.remat_ns);
        ++checked;
      }
    }
  }
  // The check must have had something to check.
  CHECK(checked > (fake ? 200u : 400u));
  CHECK(binding > 100);
  CHECK(infeasible > 0);
}

TEST_CASE("remat bound: under every policy on DTR's logs", "[sim][bound][faithful]") {
  test::for_each_dtr_log([](const std::string& log, const Trace& trace, const Baseline& baseline) {
    for (double ratio : {0.3, 0.5, 0.7}) {
      const uint64_t budget =
          static_cast<uint64_t>(ratio * static_cast<double>(baseline.peak_bytes));
      const RematBound bound = remat_bound(trace, baseline, budget);
      REQUIRE(bound.feasible);
      CHECK(bound.remat_ns > 0);
      for (const char* policy : {"dtr_eq", "msps"}) {
        const ReplayResult r = replay_at(trace, policy, budget);
        INFO(log << " " << policy << " at " << ratio << ": " << r.status_name << " " << r.overhead
                 << ", bound " << bound.overhead);
        if (r.status.ok()) CHECK(r.overhead >= bound.overhead);
      }
    }
  });
}
