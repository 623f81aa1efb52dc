// stats.cpp: JSON export and peak reset, generated from DTR_STATS.
#include "dtr/core/stats.h"

#include <nlohmann/json.hpp>

namespace dtr {

nlohmann::ordered_json Stats::to_json() const {
  nlohmann::ordered_json ordered;
#define DTR_STATS_JSON(member, key, doc) ordered[key] = member;
  DTR_STATS(DTR_STATS_JSON)
#undef DTR_STATS_JSON
  return ordered;
}

void Stats::reset_peaks() {
  allocated_peak = allocated_current;
  allocation_peak = allocation_current;
}

std::string Stats::describe() {
  std::string out;
#define DTR_STATS_DOC(member, key, doc) out += std::string("| `") + key + "` | " + doc + " |\n";
  DTR_STATS(DTR_STATS_DOC)
#undef DTR_STATS_DOC
  return out;
}

}  // namespace dtr
