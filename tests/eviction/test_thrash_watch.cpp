// test_thrash_watch.cpp: the live run's thrash check fires once per budget, only when remats
// have cost more than (max_overhead - 1) times the program's ops and at least a second
// (Note [Thrashing in a live run] in eviction/thrash_watch.cpp).
#include <catch2/catch.hpp>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/core/options.h"
#include "dtr/eviction/thrash_watch.h"

using namespace dtr;

namespace {
constexpr uint64_t kSecond = 1'000'000'000;

Stats totals(uint64_t model_ns, uint64_t remat_ns) {
  Stats s;
  s.model_compute_ns = model_ns;
  s.remat_measured_ns = remat_ns;
  return s;
}
}  // namespace

TEST_CASE("the watch fires once remats pass (max_overhead - 1) times the ops",
          "[eviction][thrash]") {
  ThrashWatch watch(2.0);
  watch.rearm(totals(0, 0), 64ull << 20);
  CHECK_FALSE(watch.check(totals(4 * kSecond, 3 * kSecond)));  // 1.75x
  CHECK_FALSE(watch.check(totals(4 * kSecond, 4 * kSecond)));  // exactly 2x: not over
  std::optional<std::string> message = watch.check(totals(4 * kSecond, 5 * kSecond));
  REQUIRE(message);
  CHECK(message->find("dtr: thrashing: remats took 5.0 s against 4.0 s") == 0);
  CHECK(message->find("2.25x") != std::string::npos);
  CHECK(message->find("max_overhead 2") != std::string::npos);
  CHECK(message->find("64.00 MiB") != std::string::npos);
  CHECK(message->find("policy:msps") != std::string::npos);
  CHECK(message->find("dead_first:True") != std::string::npos);
  CHECK(message->find("on_thrash:raise") != std::string::npos);
  // Once per budget: a run that caught the error must be able to go on.
  CHECK_FALSE(watch.check(totals(4 * kSecond, 50 * kSecond)));
}

TEST_CASE("the watch ignores less than a second of remats", "[eviction][thrash]") {
  ThrashWatch watch(2.0);
  watch.rearm(totals(0, 0), 1 << 20);
  CHECK_FALSE(watch.check(totals(kSecond / 100, ThrashWatch::kMinRematNs - 1)));
  CHECK(watch.check(totals(kSecond / 100, ThrashWatch::kMinRematNs)));
}

TEST_CASE("the watch counts from the last budget change and fires again after it",
          "[eviction][thrash]") {
  ThrashWatch watch(3.0);
  watch.rearm(totals(0, 0), kUnlimitedBytes);
  REQUIRE(watch.check(totals(kSecond, 3 * kSecond)));  // 4x
  // A new budget: 10 s of ops and 3 s of remats before it are not counted.
  watch.rearm(totals(10 * kSecond, 3 * kSecond), 32 << 20);
  CHECK_FALSE(watch.check(totals(12 * kSecond, 6 * kSecond)));  // 2 s of ops, 3 s of remats
  std::optional<std::string> again = watch.check(totals(12 * kSecond, 8 * kSecond));
  REQUIRE(again);
  CHECK(again->find("remats took 5.0 s against 2.0 s") != std::string::npos);
  CHECK(again->find("32.00 MiB") != std::string::npos);
}

TEST_CASE("max_overhead 0 turns the watch off", "[eviction][thrash]") {
  ThrashWatch watch(0.0);
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
