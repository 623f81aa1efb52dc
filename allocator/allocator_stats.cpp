// allocator_stats.cpp: updates, JSON export and peak reset, generated from
// DTR_ALLOCATOR_STATS (see allocator_stats.h for the shape and its invariants).
// No locking here: the allocator owns its AllocatorStats under its mutex.
#include "dtr/allocator/allocator_stats.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "dtr/core/check.h"

namespace dtr {

void AllocatorStat::increase(uint64_t amount) {
  current += amount;
  peak = std::max(peak, current);
  allocated += amount;
}

void AllocatorStat::decrease(uint64_t amount) {
  DTR_ASSERT(current >= amount, "allocator stat would go negative");
  current -= amount;
  freed += amount;
}

void AllocatorStatFamily::increase(StatPool pool, uint64_t amount) {
  all.increase(amount);
  (*this)[pool].increase(amount);
}

void AllocatorStatFamily::decrease(StatPool pool, uint64_t amount) {
  all.decrease(amount);
  (*this)[pool].decrease(amount);
}

AllocatorStat& AllocatorStatFamily::operator[](StatPool pool) {
  switch (pool) {
#define DTR_ALLOCATOR_STAT_POOL_CASE(member, name)                                                 \
  case StatPool::member: return member;
    DTR_ALLOCATOR_STAT_POOLS(DTR_ALLOCATOR_STAT_POOL_CASE)
#undef DTR_ALLOCATOR_STAT_POOL_CASE
  }
  return all;
}

const AllocatorStat& AllocatorStatFamily::operator[](StatPool pool) const {
  return const_cast<AllocatorStatFamily&>(*this)[pool];
}

void AllocatorStatFamily::reset_peaks() {
#define DTR_ALLOCATOR_STAT_POOL_RESET(member, name) member.reset_peak();
  DTR_ALLOCATOR_STAT_POOLS(DTR_ALLOCATOR_STAT_POOL_RESET)
#undef DTR_ALLOCATOR_STAT_POOL_RESET
}

namespace {

void put_family(nlohmann::ordered_json& out, const char* key, const AllocatorStatFamily& family) {
#define DTR_ALLOCATOR_STAT_FIELD_JSON(field) out[prefix + #field] = stat.field;
#define DTR_ALLOCATOR_STAT_POOL_JSON(member, name)                                                 \
  {                                                                                                \
    const AllocatorStat& stat = family.member;                                                     \
    const std::string prefix = std::string(key) + "." + name + ".";                                \
    DTR_ALLOCATOR_STAT_FIELDS(DTR_ALLOCATOR_STAT_FIELD_JSON)                                       \
  }
  DTR_ALLOCATOR_STAT_POOLS(DTR_ALLOCATOR_STAT_POOL_JSON)
#undef DTR_ALLOCATOR_STAT_POOL_JSON
#undef DTR_ALLOCATOR_STAT_FIELD_JSON
}

}  // namespace

nlohmann::ordered_json AllocatorStats::to_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
#define DTR_ALLOCATOR_STATS_POOL_JSON(member, key, doc) put_family(out, key, member);
#define DTR_ALLOCATOR_STATS_SCALAR_JSON(member, key, doc) out[key] = member;
  DTR_ALLOCATOR_STATS(DTR_ALLOCATOR_STATS_POOL_JSON, DTR_ALLOCATOR_STATS_SCALAR_JSON)
#undef DTR_ALLOCATOR_STATS_POOL_JSON
#undef DTR_ALLOCATOR_STATS_SCALAR_JSON
  // PyTorch 1.13's memory_stats() has these, for its option max_split_size: blocks are
  // split at any size here, as under its default (SIZE_MAX, which it reports as int64 -1),
  // so no allocation or segment is oversize. One Stat each, no pools.
  for (const char* family : {"oversize_allocations", "oversize_segments"})
    for (const char* field : {"current", "peak", "allocated", "freed"})
      out[std::string(family) + "." + field] = uint64_t{0};
  out["max_split_size"] = -1;
  return out;
}

void AllocatorStats::reset_peaks() {
#define DTR_ALLOCATOR_STATS_POOL_RESET(member, key, doc) member.reset_peaks();
#define DTR_ALLOCATOR_STATS_SCALAR_RESET(member, key, doc)
  DTR_ALLOCATOR_STATS(DTR_ALLOCATOR_STATS_POOL_RESET, DTR_ALLOCATOR_STATS_SCALAR_RESET)
#undef DTR_ALLOCATOR_STATS_POOL_RESET
#undef DTR_ALLOCATOR_STATS_SCALAR_RESET
}

std::string AllocatorStats::describe() {
  std::string out;
#define DTR_ALLOCATOR_STATS_POOL_DOC(member, key, doc)                                             \
  out += std::string("| `") + key +                                                                \
         ".{all,small_pool,large_pool}.{current,peak,allocated,freed}` | " + doc + " |\n";
#define DTR_ALLOCATOR_STATS_SCALAR_DOC(member, key, doc)                                           \
  out += std::string("| `") + key + "` | " + doc + " |\n";
  DTR_ALLOCATOR_STATS(DTR_ALLOCATOR_STATS_POOL_DOC, DTR_ALLOCATOR_STATS_SCALAR_DOC)
#undef DTR_ALLOCATOR_STATS_POOL_DOC
#undef DTR_ALLOCATOR_STATS_SCALAR_DOC
  out +=
      "| `oversize_allocations.{current,peak,allocated,freed}`, `oversize_segments.*` | "
      "always 0: no max_split_size here |\n";
  out +=
      "| `max_split_size` | always -1: blocks are split at any size (PyTorch 1.13's unlimited "
      "default, as it reports it) |\n";
  return out;
}

}  // namespace dtr
