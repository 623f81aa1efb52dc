// test_stats.cpp: the stats list exports under PyTorch's memory_stats() names.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "dtr/core/stats.h"

TEST_CASE("stats export every counter under its key, in list order", "[core][stats]") {
  dtr::Stats s;
  s.allocated_current = 100;
  s.allocated_peak = 300;
  s.num_evictions = 7;
  const auto j = s.to_json();
  CHECK(j.at("allocated_bytes.all.current") == 100);
  CHECK(j.at("allocated_bytes.all.peak") == 300);
  CHECK(j.at("dtr.num_evictions") == 7);
  CHECK(j.at("num_ooms") == 0);
  CHECK(j.begin().key() == "allocated_bytes.all.current");
  size_t n = 0;
#define COUNT(member, key, doc) ++n;
  DTR_STATS(COUNT)
#undef COUNT
  CHECK(j.size() == n);
  CHECK(dtr::Stats::describe().find("`dtr.remat_compute_ns`") != std::string::npos);
}

TEST_CASE("reset_peaks restarts peaks from the current values", "[core][stats]") {
  dtr::Stats s;
  s.allocated_current = 10;
  s.allocated_peak = 50;
  s.allocation_current = 2;
  s.allocation_peak = 9;
  s.reset_peaks();
  CHECK(s.allocated_peak == 10);
  CHECK(s.allocation_peak == 2);
}
