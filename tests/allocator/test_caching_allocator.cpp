// test_caching_allocator.cpp: rounding, segment sizes, split/coalesce golden cases, best
// fit, the address-ordered view, owners and evictable flags, and the stats export.
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "allocator_helpers.h"
#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"

using namespace dtr;
using namespace dtr::test;

namespace {

AllocatorConfig debug_config() {
  AllocatorConfig config;
  config.debug = 3;
  return config;
}

uintptr_t addr(void* p) { return reinterpret_cast<uintptr_t>(p); }

struct Expected {
  uintptr_t ptr;
  size_t size;
  bool allocated;
};

void require_blocks(const CachingAllocator& allocator, const std::vector<Expected>& expected) {
  const std::vector<BlockView> views = allocator.blocks_in_address_order();
  REQUIRE(views.size() == expected.size());
  for (size_t i = 0; i < views.size(); ++i) {
    INFO("block " << i);
    CHECK(views[i].ptr == expected[i].ptr);
    CHECK(views[i].size == expected[i].size);
    CHECK(views[i].allocated == expected[i].allocated);
  }
}

}  // namespace

TEST_CASE("allocator rounds sizes to 512 B", "[allocator]") {
  CHECK(round_block_size(0) == 512);
  CHECK(round_block_size(1) == 512);
  CHECK(round_block_size(512) == 512);
  CHECK(round_block_size(513) == 1024);
  CHECK(round_block_size(1000) == 1024);
  CHECK(round_block_size(kMiB + 1) == kMiB + 512);

  CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
  AllocResult r = allocator.allocate(1);
  REQUIRE(r.ok());
  const AllocatorStats s = allocator.stats();
  CHECK(s.allocated_bytes.all.current == 512);
  CHECK(s.active_bytes.all.current == 512);
  allocator.free(r.ptr);
  allocator.free(nullptr);  // ignored
  CHECK(allocator.stats().allocated_bytes.all.current == 0);
}

// Note [Constants where they were allocated] in integration/torch/recording.cpp: a trace
// places a storage it learns of late where its block was allocated.
TEST_CASE("allocator numbers its allocations in order", "[allocator]") {
  for (const bool small_path : {false, true}) {
    AllocatorConfig config = debug_config();
    config.use_backend_small_path = small_path;
    CachingAllocator allocator(config, std::make_unique<FakeBackend>(UINT64_MAX, small_path));
    CHECK(allocator.allocations() == 0);
    void* a = allocator.allocate(1000).ptr;
    void* b = allocator.allocate(3 * kMiB).ptr;
    CHECK(allocator.allocations() == 2);
    CHECK(allocator.allocation_number(a) == 1);
    CHECK(allocator.allocation_number(b) == 2);
    allocator.free(a);
    CHECK(allocator.allocation_number(a) == 0);  // not a live block
    void* c = allocator.allocate(1000).ptr;      // a new allocation; a's block again in a segment
    if (!small_path) CHECK(c == a);              // the fake small path never reuses an address
    CHECK(allocator.allocation_number(c) == 3);
    CHECK(allocator.allocation_number(static_cast<char*>(b) + 512) == 0);  // inside, not at
    CHECK(allocator.allocations() == 3);
    allocator.free(b);
    allocator.free(c);
  }
}

TEST_CASE("the fake backend serves small blocks of their own where asked, as the host does",
          "[allocator]") {
  // Note [Host device] in sim/replay.cpp: the simulator's model of the PyTorch CPU host.
  for (const bool serve_small : {false, true}) {
    INFO(serve_small);
    CachingAllocator allocator(debug_config(),
                               std::make_unique<FakeBackend>(UINT64_MAX, serve_small));
    void* a = allocator.allocate(1000).ptr;
    void* b = allocator.allocate(64 * 1024).ptr;
    REQUIRE(a);
    REQUIRE(b);
    const AllocatorStats stats = allocator.stats();
    if (serve_small) {  // exact rounded sizes, no segment
      CHECK(stats.reserved_bytes.small_pool.current == 1024 + 64 * 1024);
      CHECK(stats.segment.all.current == 0);
      CHECK(reinterpret_cast<uint64_t>(a) >= kFakeSmallBaseAddress);
      CHECK(reinterpret_cast<uint64_t>(a) < kFakeBaseAddress);
    } else {  // one 2 MiB small segment, PyTorch's
      CHECK(stats.reserved_bytes.small_pool.current == 2 * kMiB);
      CHECK(stats.segment.all.current == 1);
    }
    allocator.free(a);
    allocator.free(b);
    allocator.empty_cache();
    CHECK(allocator.stats().reserved_bytes.all.current == 0);
  }
}

TEST_CASE("allocator segment sizes: 2 MiB small, 20 MiB mid, exact large", "[allocator]") {
  CHECK(segment_size_for(512) == 2 * kMiB);
  CHECK(segment_size_for(kMiB) == 2 * kMiB);  // 1 MiB is still small (PyTorch's <=)
  CHECK(segment_size_for(kMiB + 512) == 20 * kMiB);
  CHECK(segment_size_for(10 * kMiB - 512) == 20 * kMiB);
  CHECK(segment_size_for(10 * kMiB) == 10 * kMiB);
  CHECK(segment_size_for(13 * kMiB + 512) == 14 * kMiB);
  CHECK(segment_size_for(200 * kMiB + 512) == 202 * kMiB);

  struct Case {
    size_t request, segment;
    bool small;
  };
  for (const Case& c : {Case{1000, 2 * kMiB, true}, Case{kMiB, 2 * kMiB, true},
                        Case{kMiB + 1, 20 * kMiB, false}, Case{9 * kMiB, 20 * kMiB, false},
                        Case{12 * kMiB, 12 * kMiB, false}, Case{13 * kMiB + 1, 14 * kMiB, false}}) {
    INFO("request " << c.request);
    CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
    AllocResult r = allocator.allocate(c.request);
    REQUIRE(r.ok());
    const AllocatorStats s = allocator.stats();
    CHECK(s.reserved_bytes.all.current == c.segment);
    CHECK(s.segment.all.current == 1);
    CHECK(s.segment.small_pool.current == (c.small ? 1u : 0u));
    CHECK(s.segment.large_pool.current == (c.small ? 0u : 1u));
    CHECK(addr(r.ptr) == kFakeBaseAddress);
  }
}

// Note [Segments under a reserved limit]: with exact_segments (the host under a reserved
// limit) a mid-size request gets a segment of its own size, rounded to 2 MiB, not 20 MiB;
// without it (a device's memory) nothing changes.
TEST_CASE("allocator with exact segments gives a request a segment of its size", "[allocator]") {
  CHECK(least_segment_for(512) == 2 * kMiB);
  CHECK(least_segment_for(kMiB) == 2 * kMiB);
  CHECK(least_segment_for(kMiB + 512) == 2 * kMiB);
  CHECK(least_segment_for(2 * kMiB + 512) == 4 * kMiB);
  CHECK(least_segment_for(13 * kMiB + 512) == 14 * kMiB);

  AllocatorConfig config = debug_config();
  config.reserved_limit_bytes = 12 * kMiB;
  config.exact_segments = true;
  CachingAllocator allocator(config, std::make_unique<FakeBackend>());
  AllocResult a = allocator.allocate(2 * kMiB);
  REQUIRE(a.ok());  // without exact segments: 20 MiB, refused, and out of memory (below)
  AllocResult b = allocator.allocate(3 * kMiB);
  REQUIRE(b.ok());
  const AllocatorStats s = allocator.stats();
  CHECK(s.reserved_bytes.all.current == 6 * kMiB);  // 2 + 4
  CHECK(s.segment.large_pool.current == 2);
  CHECK_FALSE(allocator.allocate(7 * kMiB).ok());      // an 8 MiB segment would pass 12 MiB
  CHECK(allocator.allocate(6 * kMiB).ok());            // a 6 MiB one fits exactly
  allocator.free(b.ptr);                               // its 4 MiB segment, cached,
  CHECK(allocator.allocate(kMiB + 512).ptr == b.ptr);  // serves a smaller request

  // Without: a 20 MiB segment, which a 12 MiB limit (or device) refuses.
  config.exact_segments = false;
  CachingAllocator device(config, std::make_unique<FakeBackend>());
  CHECK_FALSE(device.allocate(2 * kMiB).ok());
  CachingAllocator plain(debug_config(), std::make_unique<FakeBackend>());
  REQUIRE(plain.allocate(2 * kMiB).ok());
  CHECK(plain.stats().reserved_bytes.all.current == 20 * kMiB);
}

TEST_CASE("allocator split and coalesce golden case", "[allocator]") {
  CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
  const uintptr_t base = kFakeBaseAddress;
  void* a = allocator.allocate(1000).ptr;
  REQUIRE(addr(a) == base);
  require_blocks(allocator, {{base, 1024, true}, {base + 1024, 2 * kMiB - 1024, false}});

  void* b = allocator.allocate(3000).ptr;
  REQUIRE(addr(b) == base + 1024);
  void* c = allocator.allocate(512).ptr;
  REQUIRE(addr(c) == base + 4096);
  require_blocks(allocator, {{base, 1024, true},
                             {base + 1024, 3072, true},
                             {base + 4096, 512, true},
                             {base + 4608, 2 * kMiB - 4608, false}});

  allocator.free(a);  // no free neighbour: stays alone
  require_blocks(allocator, {{base, 1024, false},
                             {base + 1024, 3072, true},
                             {base + 4096, 512, true},
                             {base + 4608, 2 * kMiB - 4608, false}});
  allocator.free(c);  // merges with the free tail
  require_blocks(
      allocator,
      {{base, 1024, false}, {base + 1024, 3072, true}, {base + 4096, 2 * kMiB - 4096, false}});
  allocator.free(b);  // merges both sides: the segment is one free block again
  require_blocks(allocator, {{base, 2 * kMiB, false}});
  CHECK(allocator.largest_free_block() == 2 * kMiB);

  // The cached segment is reused, not a new one.
  void* d = allocator.allocate(4096).ptr;
  CHECK(addr(d) == base);
  CHECK(allocator.stats().num_device_alloc == 1);
  allocator.free(d);
  CHECK(allocator.empty_cache() == 2 * kMiB);
  CHECK(allocator.stats().reserved_bytes.all.current == 0);
  CHECK(allocator.blocks_in_address_order().empty());
}

TEST_CASE("allocator splits the large pool only above 1 MiB of remainder", "[allocator]") {
  CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
  const uintptr_t base = kFakeBaseAddress;
  // 19.5 MiB in a 20 MiB segment: the 0.5 MiB tail is not worth a block.
  void* a = allocator.allocate(19 * kMiB + 512 * kKiB).ptr;
  require_blocks(allocator, {{base, 20 * kMiB, true}});
  AllocatorStats s = allocator.stats();
  CHECK(s.allocated_bytes.large_pool.current ==
        19 * kMiB + 512 * kKiB);  // Note [Allocated vs active]
  CHECK(s.active_bytes.large_pool.current == 20 * kMiB);
  CHECK(s.to_json()["dtr.fragmentation_free_bytes"] == 0);
  allocator.free(a);
  // Exactly 1 MiB left: still not split (PyTorch: remaining > kSmallSize).
  a = allocator.allocate(19 * kMiB).ptr;
  require_blocks(allocator, {{base, 20 * kMiB, true}});
  allocator.free(a);
  // 18 MiB: the 2 MiB tail is split off.
  a = allocator.allocate(18 * kMiB).ptr;
  require_blocks(allocator, {{base, 18 * kMiB, true}, {base + 18 * kMiB, 2 * kMiB, false}});
  s = allocator.stats();
  CHECK(s.to_json()["dtr.fragmentation_free_bytes"] == 2 * kMiB);
  allocator.free(a);
  require_blocks(allocator, {{base, 20 * kMiB, false}});
}

TEST_CASE("allocator best fit picks the smallest fitting block", "[allocator]") {
  CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
  // Free holes of 4 KiB, 2 KiB and 8 KiB, separated by live 512 B blocks.
  void* a = allocator.allocate(4 * kKiB).ptr;
  void* s1 = allocator.allocate(512).ptr;
  void* b = allocator.allocate(2 * kKiB).ptr;
  void* s2 = allocator.allocate(512).ptr;
  void* c = allocator.allocate(8 * kKiB).ptr;
  void* s3 = allocator.allocate(512).ptr;
  allocator.free(a);
  allocator.free(b);
  allocator.free(c);
  CHECK(addr(allocator.allocate(1500).ptr) == addr(b));  // 1536 B: the 2 KiB hole
  CHECK(addr(allocator.allocate(3000).ptr) == addr(a));  // 3072 B: the 4 KiB hole
  CHECK(addr(allocator.allocate(2048).ptr) == addr(c));  // 2 KiB: left are 512 B, 1 KiB, 8 KiB
  (void)s1;
  (void)s2;
  (void)s3;
  std::string why;
  CHECK(allocator.is_valid(&why));
}

TEST_CASE("allocator owners and evictable flags show in address order", "[allocator]") {
  CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
  void* a = allocator.allocate(kKiB, 7).ptr;
  void* b = allocator.allocate(kKiB).ptr;
  CHECK(allocator.set_owner(b, 9));
  CHECK(allocator.set_evictable(a, true));
  int local = 0;
  CHECK_FALSE(allocator.set_owner(&local, 1));  // not a live block
  CHECK_FALSE(allocator.set_evictable(&local, true));
  std::vector<BlockView> views = allocator.blocks_in_address_order();
  REQUIRE(views.size() == 3);
  CHECK(views[0].owner == 7);
  CHECK(views[0].evictable);
  CHECK(views[0].requested_bytes == kKiB);
  CHECK(views[1].owner == 9);
  CHECK_FALSE(views[1].evictable);
  CHECK_FALSE(views[2].allocated);
  CHECK(views[2].owner == 0);
  allocator.free(a);
  views = allocator.blocks_in_address_order();
  CHECK_FALSE(views[0].evictable);  // a freed block forgets its flags
  CHECK(views[0].owner == 0);
}

TEST_CASE("allocator blocks_in_address_order covers every segment exactly", "[allocator]") {
  CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
  std::mt19937_64 rng(7);
  std::vector<void*> live;
  for (int op = 0; op < 600; ++op) {
    if (live.empty() || rng() % 3 != 0) {
      AllocResult r = allocator.allocate(log_like_size(rng, 40 * kMiB), op);
      REQUIRE(r.ok());
      live.push_back(r.ptr);
    } else {
      const size_t i = rng() % live.size();
      allocator.free(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    if (op % 50 == 0 && !live.empty()) allocator.empty_cache();
  }
  const std::vector<BlockView> views = allocator.blocks_in_address_order();
  const AllocatorStats s = allocator.stats();
  std::set<uint64_t> segment_ids;
  uint64_t total = 0, allocated_blocks = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    total += views[i].size;
    allocated_blocks += views[i].allocated;
    segment_ids.insert(views[i].segment_id);
    if (i > 0) {
      REQUIRE(views[i].ptr > views[i - 1].ptr);
      if (views[i].segment_id == views[i - 1].segment_id)
        REQUIRE(views[i].ptr == views[i - 1].ptr + views[i - 1].size);  // contiguous
      else
        REQUIRE(views[i].segment_id != views[i - 1].segment_id);
    }
  }
  // Each segment's blocks are one run (an id never comes back after another).
  std::set<uint64_t> seen;
  for (size_t i = 0; i < views.size(); ++i) {
    if (i == 0 || views[i].segment_id != views[i - 1].segment_id)
      REQUIRE(seen.insert(views[i].segment_id).second);
  }
  CHECK(segment_ids.size() == s.segment.all.current);
  CHECK(total == s.reserved_bytes.all.current);
  CHECK(allocated_blocks == s.allocation.all.current);
  CHECK(allocated_blocks == live.size());
  for (void* p : live) allocator.free(p);
}

TEST_CASE("allocator stats use PyTorch's memory_stats() keys", "[allocator]") {
  CachingAllocator allocator(debug_config(), std::make_unique<FakeBackend>());
  void* a = allocator.allocate(3 * kMiB).ptr;  // large pool, 20 MiB segment
  void* b = allocator.allocate(kKiB).ptr;      // small pool, 2 MiB segment
  void* c = allocator.allocate(kKiB).ptr;
  allocator.free(c);
  const nlohmann::ordered_json j = allocator.stats().to_json();

  // PyTorch 1.13's keys (num_device_alloc and num_device_free are 2.x's).
  std::set<std::string> pytorch_keys = {"num_alloc_retries", "num_ooms", "num_device_alloc",
                                        "num_device_free", "max_split_size"};
  for (const char* family : {"oversize_allocations", "oversize_segments"})  // one Stat each
    for (const char* field : {"current", "peak", "allocated", "freed"})
      pytorch_keys.insert(std::string(family) + "." + field);
  for (const char* family : {"allocated_bytes", "reserved_bytes", "active_bytes", "allocation",
                             "segment", "active", "inactive_split", "inactive_split_bytes"})
    for (const char* pool : {"all", "small_pool", "large_pool"})
      for (const char* field : {"current", "peak", "allocated", "freed"})
        pytorch_keys.insert(std::string(family) + "." + pool + "." + field);
  for (const std::string& key : pytorch_keys) {
    INFO(key);
    CHECK(j.contains(key));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    INFO(it.key());
    const bool ours = it.key().rfind("dtr.", 0) == 0;
    CHECK((ours || pytorch_keys.count(it.key()) == 1));
  }
  CHECK(j["allocated_bytes.all.current"] == 3 * kMiB + kKiB);
  CHECK(j["allocated_bytes.large_pool.current"] == 3 * kMiB);
  CHECK(j["allocated_bytes.small_pool.peak"] == 2 * kKiB);
  CHECK(j["allocated_bytes.small_pool.freed"] == kKiB);
  CHECK(j["allocated_bytes.all.allocated"] == 3 * kMiB + 2 * kKiB);
  CHECK(j["reserved_bytes.all.current"] == 22 * kMiB);
  CHECK(j["segment.all.current"] == 2);
  CHECK(j["allocation.all.current"] == 2);
  CHECK(j["allocation.all.peak"] == 3);
  CHECK(j["num_ooms"] == 0);
  CHECK(j["dtr.largest_free_block_bytes"] == 20 * kMiB - 3 * kMiB);
  CHECK_FALSE(AllocatorStats::describe().empty());
  // Note [Inactive splits]: a's segment's 17 MiB tail, and the small segment's free rest
  // beside b (c merged back into it).
  CHECK(j["active.all.current"] == 2);
  CHECK(j["active.all.peak"] == 3);
  CHECK(j["inactive_split.all.current"] == 2);
  CHECK(j["inactive_split.large_pool.current"] == 1);
  CHECK(j["inactive_split_bytes.large_pool.current"] == 17 * kMiB);
  CHECK(j["inactive_split_bytes.small_pool.current"] == 2 * kMiB - kKiB);
  CHECK(j["oversize_allocations.current"] == 0);
  CHECK(j["max_split_size"] == -1);

  // reset_peaks: peaks restart at the current values.
  allocator.free(a);
  AllocatorStats s = allocator.stats();
  CHECK(s.allocated_bytes.all.peak == 3 * kMiB + 2 * kKiB);
  allocator.reset_peaks();
  s = allocator.stats();
  CHECK(s.allocated_bytes.all.peak == kKiB);
  CHECK(s.allocated_bytes.large_pool.peak == 0);
  CHECK(s.allocation.all.peak == 1);
  CHECK(s.reserved_bytes.all.peak == 22 * kMiB);
  CHECK(s.allocated_bytes.all.allocated == 3 * kMiB + 2 * kKiB);  // totals keep counting
  // a's segment is one free block again: no split left in the large pool.
  CHECK(s.inactive_split.large_pool.current == 0);
  CHECK(s.inactive_split_bytes.large_pool.current == 0);
  allocator.free(b);
}
