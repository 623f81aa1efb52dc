// test_op_costs.cpp: an op's cost estimate is the median of its signature's recent runs
// (Note [Noisy op times] in eviction/op_costs.cpp).
#include <catch2/catch.hpp>

#include "dtr/core/options.h"
#include "dtr/eviction/op_costs.h"

using namespace dtr;

TEST_CASE("a signature's first run is its own estimate", "[eviction][op_costs]") {
  OpCosts costs;
  CHECK(costs.observe(7, 1000) == 1000);
  CHECK(costs.observe(8, 9000) == 9000);
  CHECK(costs.signatures() == 2);
}

TEST_CASE("a burst in one run does not move the estimate", "[eviction][op_costs]") {
  OpCosts costs;
  REQUIRE(costs.observe(1, 8000000) == 8000000);  // the first run caught in a burst
  CHECK(costs.observe(1, 100000) == 100000);      // the lower median of two: the minimum
  CHECK(costs.observe(1, 110000) == 110000);
  CHECK(costs.observe(1, 9000000) == 110000);  // a later burst
  CHECK(costs.observe(1, 105000) == 110000);   // {8e6, 1e5, 1.1e5, 9e6, 1.05e5}
  // Other signatures keep their own windows.
  CHECK(costs.observe(2, 50) == 50);
  // The first burst leaves the window: {1e5, 1e5, 1.05e5, 1.1e5, 9e6}.
  CHECK(costs.observe(1, 100000) == 105000);
}

TEST_CASE("the estimate follows a lasting change within the window", "[eviction][op_costs]") {
  OpCosts costs;
  for (int i = 0; i < 10; ++i) costs.observe(3, 1000);
  uint64_t estimate = 0;
  int runs = 0;
  while (estimate != 5000) {
    estimate = costs.observe(3, 5000);
    ++runs;
    REQUIRE(runs <= static_cast<int>(OpCosts::kWindow));
  }
  CHECK(runs == static_cast<int>(OpCosts::kWindow) / 2 + 1);
}

TEST_CASE("op_cost's values", "[eviction][op_costs]") {
  CHECK(parse_op_cost("measured") == OpCostMode::measured);
  CHECK(parse_op_cost("median") == OpCostMode::median);
  CHECK_THROWS_AS(parse_op_cost("mean"), ConfigError);
}
