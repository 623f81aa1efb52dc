// allocator_stats.h: the caching allocator's counters, from one X-macro list.
//
// Every counter is declared once in DTR_ALLOCATOR_STATS below. A POOL entry is a family
// shaped like PyTorch's `torch.cuda.memory_stats()`: three pools (all, small_pool,
// large_pool) times four fields (current, peak, allocated, freed), exported as
// `<key>.<pool>.<field>`, e.g. `allocated_bytes.large_pool.peak`. A SCALAR entry is one
// counter. The shape itself comes from DTR_ALLOCATOR_STAT_POOLS and
// DTR_ALLOCATOR_STAT_FIELDS, so no key is written by hand anywhere.
//
// Invariants (checked by CachingAllocator::is_valid against a recount): for every family,
// `all` = `small_pool` + `large_pool` in every field; current = allocated - freed;
// peak >= current. The struct is a plain value: the allocator fills it under its lock
// and hands out copies.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dtr {

// POOL(member, "key", "description"): a {all, small_pool, large_pool} x
//   {current, peak, allocated, freed} family.
// SCALAR(member, "key", "description"): one counter or gauge.
// Note [Allocated vs active] in allocator/caching_allocator.cpp explains the first three.
#define DTR_ALLOCATOR_STATS(POOL, SCALAR)                                                          \
  POOL(allocated_bytes, "allocated_bytes",                                                         \
       "live bytes: each request rounded up to 512 B; this is what the budget caps")               \
  POOL(reserved_bytes, "reserved_bytes",                                                           \
       "bytes held from the backend: segments plus live small-path allocations")                   \
  POOL(active_bytes, "active_bytes",                                                               \
       "bytes of allocated blocks, including a block's unsplit tail (PyTorch's block size)")       \
  POOL(allocation, "allocation", "allocated blocks (a count)")                                     \
  POOL(active, "active",                                                                           \
       "active blocks (a count): the allocated ones, as PyTorch's on a device without streams")    \
  POOL(inactive_split, "inactive_split",                                                           \
       "free blocks in a segment that holds other blocks (a count; Note [Inactive splits])")       \
  POOL(inactive_split_bytes, "inactive_split_bytes", "the bytes of those free blocks")             \
  POOL(segment, "segment", "segments held from the backend (a count)")                             \
  SCALAR(num_alloc_retries, "num_alloc_retries",                                                   \
         "allocation attempts repeated after an eviction or a cache release")                      \
  SCALAR(                                                                                          \
      num_ooms, "num_ooms",                                                                        \
      "out-of-memory errors: requests that ended in an AllocatorOom, and those the owner raised "  \
      "without one (count_oom)")                                                                   \
  SCALAR(num_device_alloc, "num_device_alloc", "segments taken from the backend")                  \
  SCALAR(num_device_free, "num_device_free", "segments given back to the backend")                 \
  SCALAR(num_eviction_calls, "dtr.num_eviction_calls", "EvictionCallback::make_room calls")        \
  SCALAR(num_new_peak_calls, "dtr.num_new_peak_calls",                                             \
         "EvictionCallback::before_new_peak calls (Note [New peaks])")                             \
  SCALAR(num_cache_releases, "dtr.num_cache_releases",                                             \
         "times cached free segments were released to satisfy a request")                          \
  SCALAR(num_block_moves, "dtr.num_block_moves",                                                   \
         "live blocks copied elsewhere to give a segment back (Note [Compaction])")                \
  SCALAR(moved_bytes, "dtr.moved_bytes", "bytes those copies moved")                               \
  SCALAR(                                                                                          \
      num_packings, "dtr.num_packings",                                                            \
      "compactions that packed segments' blocks into one fresh, smaller segment (Note [Packing])") \
  SCALAR(largest_free_block_bytes, "dtr.largest_free_block_bytes",                                 \
         "largest cached free block (gauge, taken when the stats are read)")                       \
  SCALAR(fragmentation_free_bytes, "dtr.fragmentation_free_bytes",                                 \
         "free bytes inside segments, reserved - active (gauge, taken when the stats are read)")

// X(member, "name"): the pools of a POOL family, in export order.
#define DTR_ALLOCATOR_STAT_POOLS(X)                                                                \
  X(all, "all") X(small_pool, "small_pool") X(large_pool, "large_pool")
// X(field): the fields of one pool's counter, in export order.
#define DTR_ALLOCATOR_STAT_FIELDS(X) X(current) X(peak) X(allocated) X(freed)

// One pool's counter, updated like PyTorch's Stat.
struct AllocatorStat {
#define DTR_ALLOCATOR_STAT_FIELD(field) uint64_t field = 0;
  DTR_ALLOCATOR_STAT_FIELDS(DTR_ALLOCATOR_STAT_FIELD)
#undef DTR_ALLOCATOR_STAT_FIELD

  void increase(uint64_t amount);
  void decrease(uint64_t amount);
  void reset_peak() { peak = current; }
};

enum class StatPool : uint8_t {
#define DTR_ALLOCATOR_STAT_POOL_ENUM(member, name) member,
  DTR_ALLOCATOR_STAT_POOLS(DTR_ALLOCATOR_STAT_POOL_ENUM)
#undef DTR_ALLOCATOR_STAT_POOL_ENUM
};

// A POOL family: one AllocatorStat per pool.
struct AllocatorStatFamily {
#define DTR_ALLOCATOR_STAT_POOL_MEMBER(member, name) AllocatorStat member;
  DTR_ALLOCATOR_STAT_POOLS(DTR_ALLOCATOR_STAT_POOL_MEMBER)
#undef DTR_ALLOCATOR_STAT_POOL_MEMBER

  // Changes `all` and `pool` together (pool is small_pool or large_pool).
  void increase(StatPool pool, uint64_t amount);
  void decrease(StatPool pool, uint64_t amount);
  AllocatorStat& operator[](StatPool pool);
  const AllocatorStat& operator[](StatPool pool) const;
  void reset_peaks();
};

struct AllocatorStats {
#define DTR_ALLOCATOR_STATS_POOL_MEMBER(member, key, doc) AllocatorStatFamily member;
#define DTR_ALLOCATOR_STATS_SCALAR_MEMBER(member, key, doc) uint64_t member = 0;
  DTR_ALLOCATOR_STATS(DTR_ALLOCATOR_STATS_POOL_MEMBER, DTR_ALLOCATOR_STATS_SCALAR_MEMBER)
#undef DTR_ALLOCATOR_STATS_POOL_MEMBER
#undef DTR_ALLOCATOR_STATS_SCALAR_MEMBER

  // Flat object {"allocated_bytes.all.current": 123, ..., "num_ooms": 0, ...} in list order.
  nlohmann::ordered_json to_json() const;
  // Peaks restart from the current values (torch.cuda.reset_peak_memory_stats()).
  void reset_peaks();
  // One line per family or counter: key pattern, description. For docs.
  static std::string describe();
};

}  // namespace dtr
