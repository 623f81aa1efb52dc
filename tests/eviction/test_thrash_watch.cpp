// test_thrash_watch.cpp: the live run's thrash check fires once per budget, only when remats
// have cost more than (max_overhead - 1) times the program's ops over its recent past and at
// least a second (Note [Thrashing in a live run] in eviction/thrash_watch.cpp).
#include <catch2/catch.hpp>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/options.h"
#include "dtr/eviction/thrash_watch.h"

using namespace dtr;

namespace {
constexpr uint64_t kSecond = 1'000'000'000;

// room_ns: of remat_ns, the time spent making room for the remats (Note [Room within remats]).
Stats totals(uint64_t model_ns, uint64_t remat_ns, uint64_t room_ns = 0) {
  Stats s;
  s.model_compute_ns = model_ns;
  s.remat_measured_ns = remat_ns;
  s.remat_room_ns = room_ns;
  return s;
}
}  // namespace

TEST_CASE("the watch fires once remats pass (max_overhead - 1) times the ops",
          "[eviction][thrash]") {
  ThrashWatch watch(2.0, "dtr_eq", false, 0);
  watch.rearm(totals(0, 0), 64ull << 20);
  CHECK_FALSE(watch.check(totals(4 * kSecond, 3 * kSecond)));  // 1.75x
  CHECK_FALSE(watch.check(totals(4 * kSecond, 4 * kSecond)));  // exactly 2x: not over
  std::optional<std::string> message = watch.check(totals(4 * kSecond, 5 * kSecond));
  REQUIRE(message);
  CHECK(message->find("dtr: thrashing: remats took 5.0 s (0.0 s of it making room for them: "
                      "searching, evicting) against 4.0 s") == 0);
  CHECK(message->find("max_overhead 2") != std::string::npos);
  CHECK(message->find("since the budget was set (the run took 2.25x") != std::string::npos);
  CHECK(message->find("budget 64.00 MiB)") != std::string::npos);
  CHECK(message->find("policy:msps") != std::string::npos);
  CHECK(message->find("dead_first:True") != std::string::npos);
  CHECK(message->find("on_thrash:raise") != std::string::npos);
  // Once per budget: a run that caught the error must be able to go on.
  CHECK_FALSE(watch.check(totals(4 * kSecond, 50 * kSecond)));
}

TEST_CASE("the watch suggests only what the run does not already do", "[eviction][thrash]") {
  const auto message = [](const std::string& policy, bool dead_first, double remake_factor) {
    ThrashWatch watch(2.0, policy, dead_first, remake_factor);
    watch.rearm(totals(0, 0), 64ull << 20);
    return watch.check(totals(kSecond, 5 * kSecond)).value_or("");
  };
  // The PyTorch host's defaults: dead_first is on, so msps and remake_factor are left to try.
  std::string m = message("auto", true, 0);
  CHECK(m.find("Raise the budget, or try policy:msps (it scores by bytes freed per second of "
               "remat) or remake_factor:1 (dtr_eq keeps what it has dropped and remade again "
               "and again); on_thrash:raise") != std::string::npos);
  CHECK(m.find("dead_first") == std::string::npos);
  // remake_factor is dtr_eq's (and auto's while it runs dtr_eq) alone.
  CHECK(message("auto", true, 1).find("remake_factor") == std::string::npos);
  CHECK(message("dtr_eq", true, 0)
            .find("or try policy:msps (it scores by bytes freed per "
                  "second of remat) or remake_factor:1") != std::string::npos);
  CHECK(message("dtr_ancestors", true, 0).find("remake_factor") == std::string::npos);
  m = message("msps", false, 0);
  CHECK(m.find("Raise the budget, or try dead_first:True (it evicts what remats brought back "
               "first); on_thrash:raise") != std::string::npos);
  CHECK(m.find("policy:msps") == std::string::npos);
  CHECK(message("msps", true, 0).find("Raise the budget; on_thrash:raise") != std::string::npos);
}

// A policy that has left others as thrashing (auto's cut candidates) is not told to try
// them: the 2000-layer residual MLP's warning under auto suggested msps, the candidate auto
// had cut for cascading.
TEST_CASE("the watch names the candidates auto left and does not suggest them",
          "[eviction][thrash]") {
  struct Left : Heuristic {
    std::vector<std::string> left;
    std::string_view name() const override { return "auto"; }
    uint32_t needs() const override { return 0; }
    double score(const Engine&, StorageId) override { return 1.0; }
    std::vector<std::string> thrashed() const override { return left; }
  } policy;
  const auto message = [&](std::vector<std::string> left) {
    policy.left = std::move(left);
    ThrashWatch watch(2.0, "auto", true, 0);
    watch.rearm(totals(0, 0), 64ull << 20);
    return watch.check(totals(kSecond, 5 * kSecond), &policy).value_or("");
  };
  std::string m = message({"msps"});
  CHECK(m.find(". auto has left msps as thrashing. Raise the budget, or try remake_factor:1 "
               "(dtr_eq keeps") != std::string::npos);
  CHECK(m.find("policy:msps") == std::string::npos);
  m = message({"dtr_ancestors", "msps"});
  CHECK(m.find("auto has left dtr_ancestors and msps as thrashing. Raise") != std::string::npos);
  m = message({"dtr_eq", "dtr_ancestors", "dtr_eq_keep"});
  CHECK(m.find("auto has left dtr_eq, dtr_ancestors and dtr_eq_keep as thrashing. Raise the "
               "budget, or try policy:msps") != std::string::npos);
  CHECK(message({}).find("has left") == std::string::npos);
  // The runaway stop's advice is the same.
  policy.left = {"msps"};
  ThrashWatch watch(2.0, "auto", true, 0);
  watch.rearm(totals(0, 0), 64ull << 20);
  watch.mark_op(totals(kSecond, 0));
  const std::optional<std::string> runaway = watch.runaway(totals(kSecond, 30 * kSecond), &policy);
  REQUIRE(runaway);
  CHECK(runaway->find("auto has left msps as thrashing. Raise the budget") != std::string::npos);
}

TEST_CASE("the watch ignores less than a second of remats", "[eviction][thrash]") {
  ThrashWatch watch(2.0, "dtr_eq", false, 0);
  watch.rearm(totals(0, 0), 1 << 20);
  CHECK_FALSE(watch.check(totals(kSecond / 100, ThrashWatch::kMinRematNs - 1)));
  CHECK(watch.check(totals(kSecond / 100, ThrashWatch::kMinRematNs)));
}

TEST_CASE("the watch counts from the last budget change and fires again after it",
          "[eviction][thrash]") {
  ThrashWatch watch(3.0, "dtr_eq", false, 0);
  watch.rearm(totals(0, 0), kUnlimitedBytes);
  REQUIRE(watch.check(totals(kSecond, 3 * kSecond)));  // 4x
  // A new budget: 10 s of ops and 3 s of remats before it are not counted.
  watch.rearm(totals(10 * kSecond, 3 * kSecond), 32 << 20);
  CHECK_FALSE(watch.check(totals(12 * kSecond, 6 * kSecond)));  // 2 s of ops, 3 s of remats
  std::optional<std::string> again = watch.check(totals(12 * kSecond, 8 * kSecond));
  REQUIRE(again);
  CHECK(again->find("remats took 5.0 s (0.0 s of it making room") != std::string::npos);
  CHECK(again->find("against 2.0 s") != std::string::npos);
  CHECK(again->find("32.00 MiB") != std::string::npos);
}

TEST_CASE("a collapse after a long healthy stretch is found within minutes of remats",
          "[eviction][thrash]") {
  // Note [Thrashing in a live run]: an hour at 1.2x (one step: 1 s of ops, 0.2 s of remats),
  // then every step takes 0.1 s of ops and 1 s of remats. A ratio over the whole run
  // would pass 2 only after about 3 200 s of such remats (720 + r > 3600 + r / 10).
  for (const uint64_t offset_steps : {0u, 30u, 59u}) {  // where in a window the collapse comes
    CAPTURE(offset_steps);
    ThrashWatch watch(2.0, "dtr_eq", false, 0);
    watch.rearm(totals(0, 0), 64ull << 20);
    uint64_t model = 0, remat = 0;
    for (uint64_t step = 0; step < 3600 + offset_steps; ++step) {
      model += kSecond, remat += kSecond / 5;
      REQUIRE_FALSE(watch.check(totals(model, remat)));
    }
    uint64_t thrash_remat = 0;
    std::optional<std::string> message;
    while (!message && thrash_remat < 3000 * kSecond) {
      model += kSecond / 10, remat += kSecond, thrash_remat += kSecond;
      message = watch.check(totals(model, remat));
    }
    REQUIRE(message);
    CHECK(thrash_remat <= 120 * kSecond);
    CHECK(message->find("in the last stretch of the run (that stretch took") != std::string::npos);
    CHECK(message->find("budget 64.00 MiB)") != std::string::npos);
  }
}

TEST_CASE("max_overhead 0 turns the watch off", "[eviction][thrash]") {
  ThrashWatch watch(0.0, "dtr_eq", false, 0);
  watch.rearm(totals(0, 0), 1 << 20);
  CHECK_FALSE(watch.check(totals(kSecond, 100 * kSecond)));
}

TEST_CASE("on_thrash takes warn or raise and names both when wrong", "[eviction][thrash]") {
  CHECK(parse_thrash_action("warn") == ThrashAction::warn);
  CHECK(parse_thrash_action("raise") == ThrashAction::raise);
  try {
    parse_thrash_action("stop");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("valid values: warn, raise") != std::string::npos);
  }
}

TEST_CASE("one op's remats past 10 s and 5 x max_overhead times the recent ops are a runaway",
          "[eviction][thrash]") {
  // Note [Runaway cascades]: counted from mark_op, against the program's ops since rearm.
  ThrashWatch watch(2.0, "dtr_eq", true, 0);
  watch.rearm(totals(0, 0), 64ull << 20);
  watch.mark_op(totals(kSecond / 2, 3 * kSecond));                // 3 s of remats before this op
  CHECK_FALSE(watch.runaway(totals(kSecond / 2, 13 * kSecond)));  // 10 s: not over the floor
  std::optional<std::string> message = watch.runaway(totals(kSecond / 2, 13 * kSecond + 1));
  REQUIRE(message);
  CHECK(message->find("dtr: runaway thrashing: the remats for one op's inputs have run 10.0 s "
                      "(0.0 s of it making room for them: searching, evicting), over 10 times the "
                      "0.5 s the program's own ops have taken since the "
                      "budget was set, and had not ended") == 0);
  CHECK(message->find("budget 64.00 MiB") != std::string::npos);
  CHECK(message->find("policy:msps") != std::string::npos);
  CHECK(message->find("dead_first") == std::string::npos);  // the run already does it
  CHECK(message->find("on_thrash:warn too") != std::string::npos);
  // Firing marks again: the next cascade is judged on its own.
  CHECK_FALSE(watch.runaway(totals(kSecond / 2, 14 * kSecond)));
  // With 3 s of the program's ops the limit is 10 x 3 s = 30 s.
  watch.mark_op(totals(3 * kSecond, 20 * kSecond));
  CHECK_FALSE(watch.runaway(totals(3 * kSecond, 50 * kSecond)));
  CHECK(watch.runaway(totals(3 * kSecond, 51 * kSecond)));
  // The limit scales with max_overhead, and max_overhead 0 turns it off.
  ThrashWatch lenient(4.0, "dtr_eq", true, 0);
  lenient.mark_op(totals(0, 0));
  CHECK_FALSE(lenient.runaway(totals(3 * kSecond, 60 * kSecond)));  // limit 20 x 3 s
  CHECK(lenient.runaway(totals(3 * kSecond, 61 * kSecond)));
  ThrashWatch off(0.0, "dtr_eq", true, 0);
  off.mark_op(totals(0, 0));
  CHECK_FALSE(off.runaway(totals(kSecond, 1000 * kSecond)));
}

TEST_CASE("a runaway is judged against the recent ops, not all the run's", "[eviction][thrash]") {
  // Note [Runaway cascades]: ten minutes of healthy ops, checked after each op as the host
  // does, then a cascade. The limit is 10 x the last window (60 s), not 10 x 600 s.
  ThrashWatch watch(2.0, "dtr_eq", true, 0);
  watch.rearm(totals(0, 0), 64ull << 20);
  for (uint64_t t = 1; t <= 600; ++t) CHECK_FALSE(watch.check(totals(t * kSecond, 0)));
  watch.mark_op(totals(600 * kSecond, 0));
  CHECK_FALSE(watch.runaway(totals(600 * kSecond, 600 * kSecond)));
  std::optional<std::string> message = watch.runaway(totals(600 * kSecond, 600 * kSecond + 1));
  REQUIRE(message);
  CHECK(message->find("have run 600.0 s (0.0 s of it making room for them: searching, evicting), "
                      "over 10 times the 60.0 s the program's own ops have "
                      "taken in the last stretch of the run") != std::string::npos);
  // Ops run before the budget was set do not count: 100 s of them, then 1 s under a budget.
  ThrashWatch late(2.0, "dtr_eq", true, 0);
  late.rearm(totals(100 * kSecond, 0), 64ull << 20);
  late.mark_op(totals(101 * kSecond, 0));
  CHECK_FALSE(late.runaway(totals(101 * kSecond, 10 * kSecond)));  // the 10 s floor
  CHECK(late.runaway(totals(101 * kSecond, 10 * kSecond + 1)));
  // After the thrash warning fired, windows still close: the span stays recent.
  ThrashWatch fired(2.0, "dtr_eq", true, 0);
  fired.rearm(totals(0, 0), 64ull << 20);
  REQUIRE(fired.check(totals(2 * kSecond, 3 * kSecond)));  // the warning
  for (uint64_t t = 3; t <= 600; ++t) CHECK_FALSE(fired.check(totals(t * kSecond, 3 * kSecond)));
  fired.mark_op(totals(600 * kSecond, 3 * kSecond));
  CHECK(fired.runaway(totals(600 * kSecond, 603 * kSecond + 1)));
}

TEST_CASE("both messages say what of the remats' time went to making room for them",
          "[eviction][thrash]") {
  // Note [Room within remats]: the watch judges the remats' whole wall time, and says how
  // much of it was collecting, searching and evicting. Counted over the same span as the
  // remats: since rearm() for the warning, since mark_op() for a runaway.
  ThrashWatch watch(2.0, "dtr", true, 0);
  watch.rearm(totals(0, kSecond, kSecond / 2), 64ull << 20);  // before the budget: not counted
  std::optional<std::string> message =
      watch.check(totals(2 * kSecond, 6 * kSecond, 3 * kSecond + kSecond / 2));
  REQUIRE(message);
  CHECK(message->find("remats took 5.0 s (3.0 s of it making room for them: searching, "
                      "evicting) against 2.0 s") != std::string::npos);
  watch.mark_op(totals(2 * kSecond, 6 * kSecond, 4 * kSecond));
  CHECK_FALSE(watch.runaway(totals(2 * kSecond, 26 * kSecond, 19 * kSecond)));  // 20 s: the limit
  message = watch.runaway(totals(2 * kSecond, 27 * kSecond, 19 * kSecond));     // 7 s of it remats
  REQUIRE(message);
  CHECK(message->find("have run 21.0 s (15.0 s of it making room for them: searching, evicting), "
                      "over 10 times the 2.0 s") != std::string::npos);
  // 15 of 21 s is under three quarters: the cascade's own words.
  CHECK(message->find("each remat evicts what a later one needs. ") != std::string::npos);
  CHECK(message->find("most of the remats' time") == std::string::npos);
  // Over three quarters: the messages say where the time went.
  watch.mark_op(totals(2 * kSecond, 27 * kSecond, 19 * kSecond));
  message = watch.runaway(totals(2 * kSecond, 48 * kSecond, 35 * kSecond));  // 16 of 21 s
  REQUIRE(message);
  CHECK(message->find("each remat evicts what a later one needs, and most of the remats' time "
                      "went to searching for what to evict, as long chains of evicted storages "
                      "lie around each candidate. ") != std::string::npos);
  ThrashWatch searching(2.0, "dtr", true, 0);
  searching.rearm(totals(0, 0), 64ull << 20);
  message = searching.check(totals(kSecond, 4 * kSecond, 3 * kSecond + 1));
  REQUIRE(message);
  CHECK(message->find("forces another remat, and most of the remats' time went to searching") !=
        std::string::npos);
}
