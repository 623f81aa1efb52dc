// dtr_logs.h: the loop over DTR's three training logs, shared by the sim tests that check
// a replay against them.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "dtr/core/trace.h"
#include "dtr/sim/replay.h"
#include "test_support.h"

namespace dtr::test {

// Calls body(log, trace, baseline) for "resnet32", "transformer" and "lstm", each read from
// DTR_LOG_DIR; a log that is not there is a WARN and is skipped.
template <typename Body>
void for_each_dtr_log(Body&& body) {
  for (const char* log : {"resnet32", "transformer", "lstm"}) {
    const std::string path = log_path(log);
    if (path.empty()) {
      WARN("skipped: DTR log '" << log << "' not found in " << DTR_LOG_DIR);
      continue;
    }
    const Trace trace = read_trace(path);
    const Baseline baseline = compute_baseline(trace);
    body(std::string(log), trace, baseline);
  }
}

}  // namespace dtr::test
