// test_memory_history.cpp: the allocator's observer, the event recorder and the snapshot.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "dtr/allocator/caching_allocator.h"
#include "dtr/allocator/fake_backend.h"
#include "dtr/allocator/host_backend.h"
#include "dtr/allocator/memory_history.h"
#include "dtr/allocator/memory_snapshot.h"
#include "dtr/core/options.h"

using namespace dtr;
using nlohmann::ordered_json;

namespace {

constexpr size_t kMiB = 1024 * 1024;

std::unique_ptr<CachingAllocator> fake_allocator(uint64_t budget = kUnlimitedBytes) {
  AllocatorConfig config;
  config.budget_bytes = budget;
  config.debug = 3;
  return std::make_unique<CachingAllocator>(config, std::make_unique<FakeBackend>());
}

std::vector<AllocatorAction> actions(const MemoryHistory& h) {
  std::vector<AllocatorAction> out;
  for (const MemoryHistoryEntry& e : h.entries()) out.push_back(e.action);
  return out;
}

// Every segment's blocks tile it, in both formats (1.13's `stats` asserts the sum).
void check_tiling(const ordered_json& segments) {
  REQUIRE(segments.is_array());
  for (const auto& seg : segments) {
    uint64_t sum = 0;
    for (const auto& b : seg.at("blocks")) sum += b.at("size").get<uint64_t>();
    CHECK(sum == seg.at("total_size").get<uint64_t>());
  }
}

}  // namespace

TEST_CASE("the allocator tells its observer every event, in order", "[allocator][history]") {
  auto alloc = fake_allocator();
  LogicalClock clock(5000);
  MemoryHistory history(clock, 100);
  alloc->set_observer(&history);
  AllocResult a = alloc->allocate(1000, /*owner=*/7);
  REQUIRE(a.ok());
  clock.advance(3000);
  alloc->free(a.ptr);
  alloc->empty_cache();
  using A = AllocatorAction;
  CHECK(actions(history) == std::vector<A>{A::segment_alloc, A::alloc, A::free_requested,
                                           A::free_completed, A::segment_free});
  const auto entries = history.entries();
  CHECK(entries[0].size == 2 * kMiB);
  CHECK(entries[1].addr == reinterpret_cast<uintptr_t>(a.ptr));
  CHECK(entries[1].size == 1024);
  CHECK(entries[1].requested_bytes == 1000);
  CHECK(entries[1].owner == 7);
  CHECK(entries[1].time == 5000);
  CHECK(entries[2].time == 8000);
  CHECK(entries[2].owner == 7);
  CHECK(history.num_recorded() == 5);

  alloc->set_observer(nullptr);  // detached: nothing more is recorded
  alloc->free(alloc->allocate(1000).ptr);
  CHECK(history.num_recorded() == 5);
}

TEST_CASE("the ring keeps the last max_entries events", "[allocator][history]") {
  auto alloc = fake_allocator();
  LogicalClock clock;
  MemoryHistory history(clock, 3);
  alloc->set_observer(&history);
  AllocResult a = alloc->allocate(1000);
  alloc->free(a.ptr);  // segment_alloc, alloc, free_requested, free_completed
  alloc->empty_cache();  // segment_free
  using A = AllocatorAction;
  CHECK(actions(history) == std::vector<A>{A::free_requested, A::free_completed, A::segment_free});
  CHECK(history.num_recorded() == 5);

  MemoryHistory none(clock, 0);  // no ring, categories still tracked
  alloc->set_observer(&none);
  a = alloc->allocate(1000);
  CHECK(none.entries().empty());
  CHECK(none.num_recorded() == 2);
  alloc->free(a.ptr);
}

TEST_CASE("categories come from the context, the owner function and set_category",
          "[allocator][history]") {
  auto alloc = fake_allocator();
  LogicalClock clock;
  MemoryHistory history(clock, 100, [](uint64_t owner) {
    return owner == 1 ? MemoryCategory::parameter : MemoryCategory::activation;
  });
  alloc->set_observer(&history);
  void* param = alloc->allocate(4096, 1).ptr;
  void* act = alloc->allocate(4096, 2).ptr;
  CHECK(history.category_of(reinterpret_cast<uintptr_t>(param)) == MemoryCategory::parameter);
  CHECK(history.category_of(reinterpret_cast<uintptr_t>(act)) == MemoryCategory::activation);
  {
    MemoryHistory::ContextScope evicting(&history, MemoryContext::evicting);
    CHECK(history.context() == MemoryContext::evicting);
    alloc->free(act);  // an eviction
  }
  CHECK(history.context() == MemoryContext::none);
  // The owner was evicted: its next block is a remat even without a context (the
  // simulator's engine allocates before it says a remat runs).
  void* again = alloc->allocate(4096, 2).ptr;
  CHECK(history.category_of(reinterpret_cast<uintptr_t>(again)) == MemoryCategory::remat);
  void* other = nullptr;
  {
    MemoryHistory::ContextScope remat(&history, MemoryContext::remat);
    other = alloc->allocate(4096, 3).ptr;
    // Another thread's events are not part of this thread's remat.
    void* elsewhere = nullptr;
    std::thread([&] { elsewhere = alloc->allocate(4096, 4).ptr; }).join();
    CHECK(history.category_of(reinterpret_cast<uintptr_t>(elsewhere)) ==
          MemoryCategory::activation);
    alloc->free(elsewhere);
  }
  CHECK(history.category_of(reinterpret_cast<uintptr_t>(other)) == MemoryCategory::remat);
  alloc->free(again);  // an ordinary free keeps the block's category
  // A host that learns later what a block is.
  void* late = alloc->allocate(4096, 0).ptr;
  CHECK(history.set_category(reinterpret_cast<uintptr_t>(late), MemoryCategory::parameter));
  CHECK_FALSE(history.set_category(12345, MemoryCategory::parameter));

  std::vector<MemoryCategory> alloc_cats, free_cats;
  for (const auto& e : history.entries()) {
    if (e.action == AllocatorAction::alloc) alloc_cats.push_back(e.category);
    if (e.action == AllocatorAction::free_completed) free_cats.push_back(e.category);
    if (e.action == AllocatorAction::segment_alloc) CHECK(e.category == MemoryCategory::unknown);
  }
  using C = MemoryCategory;
  CHECK(alloc_cats == std::vector<C>{C::parameter, C::activation, C::remat, C::remat,
                                     C::activation, C::parameter});
  CHECK(free_cats == std::vector<C>{C::evicted, C::activation, C::remat});
  alloc->free(param);
  alloc->free(other);
  alloc->free(late);
  CHECK(std::string(memory_category_name(MemoryCategory::evicted)) == "evicted");
}

TEST_CASE("small-path blocks are segments of their own", "[allocator][history]") {
  AllocatorConfig config;
  config.debug = 3;
  CachingAllocator alloc(config, std::make_unique<HostBackend>());
  LogicalClock clock;
  MemoryHistory history(clock, 100);
  alloc.set_observer(&history);
  AllocResult small = alloc.allocate(3000, 9);   // the backend's small path
  AllocResult large = alloc.allocate(3 * kMiB, 10);  // a 20 MiB segment
  REQUIRE(small.ok());
  REQUIRE(large.ok());
  const auto segments = alloc.segments();
  REQUIRE(segments.size() == 2);
  size_t small_path = 0;
  for (const SegmentView& s : segments) {
    uint64_t sum = 0;
    for (const BlockView& b : s.blocks) sum += b.size;
    CHECK(sum == s.size);
    if (s.small_path) {
      ++small_path;
      CHECK(s.ptr == reinterpret_cast<uintptr_t>(small.ptr));
      CHECK(s.blocks.size() == 1);
      CHECK(s.blocks[0].allocated);
    }
  }
  CHECK(small_path == 1);
  alloc.free(small.ptr);
  using A = AllocatorAction;
  const auto acts = actions(history);
  CHECK(acts == std::vector<A>{A::segment_alloc, A::alloc, A::segment_alloc, A::alloc,
                               A::free_requested, A::free_completed, A::segment_free});
  CHECK(history.entries()[0].small_path);
  const ordered_json snap = memory_snapshot(alloc, &history, SnapshotFormat::dict);
  check_tiling(snap.at("segments"));
  CHECK(snap.at("allocator_settings").at("dtr_backend_small_path") == true);
  alloc.free(large.ptr);
}

TEST_CASE("memory_snapshot: the dict of _dump_snapshot and the list of 1.13",
          "[allocator][history][snapshot]") {
  auto alloc = fake_allocator(/*budget=*/4 * kMiB);
  LogicalClock clock(2000000);
  MemoryHistory history(clock, 100, [](uint64_t) { return MemoryCategory::activation; });
  alloc->set_observer(&history);
  void* a = alloc->allocate(1000, 1).ptr;
  void* b = alloc->allocate(3 * kMiB, 2).ptr;
  CHECK_FALSE(alloc->allocate(8 * kMiB, 3).ok());  // over the budget: an oom entry
  alloc->free(a);

  const ordered_json meta = {{"trace", "x.log"}, {"evictions", 3}};
  const ordered_json snap = memory_snapshot(*alloc, &history, SnapshotFormat::dict, meta);
  CHECK(snap.begin().key() == "segments");
  const auto& segments = snap.at("segments");
  REQUIRE(segments.size() == 2);  // 2 MiB small segment, 20 MiB large segment
  check_tiling(segments);
  for (const char* key : {"device", "address", "total_size", "allocated_size", "active_size",
                          "requested_size", "stream", "segment_type", "blocks"})
    CHECK(segments[0].contains(key));
  CHECK(segments[0].at("segment_type") == "small");
  CHECK(segments[1].at("segment_type") == "large");
  CHECK(segments[1].at("allocated_size") == 3 * kMiB);
  CHECK(segments[1].at("requested_size") == 3 * kMiB);
  const auto& block = segments[1].at("blocks")[0];
  CHECK(block.at("address") == segments[1].at("address"));
  CHECK(block.at("state") == "active_allocated");
  CHECK(block.at("category") == "activation");
  CHECK(segments[0].at("blocks")[0].at("state") == "inactive");

  const auto& trace = snap.at("device_traces").at(0);
  std::vector<std::string> acts;
  for (const auto& e : trace) acts.push_back(e.at("action"));
  CHECK(acts == std::vector<std::string>{"segment_alloc", "alloc", "segment_alloc", "alloc",
                                         "oom", "free_requested", "free_completed", "snapshot"});
  CHECK(trace[1].at("size") == 1000);  // the request, as PyTorch records it
  CHECK(trace[1].at("time_us") == 2000);
  CHECK(trace[1].at("category") == "activation");
  CHECK(trace[0].at("category") == "unknown");
  CHECK(trace[4].at("device_free") == 4 * kMiB - 1024 - 3 * kMiB);
  CHECK_FALSE(trace[4].contains("addr"));
  CHECK(trace.back().at("category") == "unknown");
  CHECK(snap.at("allocator_settings").at("dtr_budget_bytes") == 4 * kMiB);
  CHECK(snap.at("allocator_settings").at("dtr_reserved_limit_bytes").is_null());
  const auto& um = snap.at("user_metadata");
  CHECK(um.at("dtr_snapshot_version") == 1);
  CHECK(um.at("trace_entries_recorded") == 7);
  CHECK(um.at("trace") == "x.log");
  CHECK(um.at("evictions") == 3);

  const ordered_json list = memory_snapshot(*alloc, &history, SnapshotFormat::list);
  REQUIRE(list.is_array());
  check_tiling(list);
  for (const char* key : {"address", "total_size", "stream", "segment_type", "blocks"})
    CHECK(list[0].contains(key));
  CHECK_FALSE(list[0].contains("frames"));

  // Without a history: segments, and an empty trace.
  const ordered_json bare = memory_snapshot(*alloc, nullptr, SnapshotFormat::dict);
  CHECK(bare.at("device_traces").at(0).empty());
  alloc->free(b);
}

TEST_CASE("snapshot formats and files", "[allocator][history][snapshot]") {
  CHECK(parse_snapshot_format("dict") == SnapshotFormat::dict);
  CHECK(parse_snapshot_format("list") == SnapshotFormat::list);
  try {
    parse_snapshot_format("tree");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("valid: dict, list") != std::string::npos);
  }
  CHECK(std::string(snapshot_format_name(SnapshotFormat::list)) == "list");

  const std::string bad = "/nonexistent-dir/snap.pickle";
  try {
    write_snapshot(bad, ordered_json::array());
    FAIL("no error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(bad) != std::string::npos);
  }
  const std::string path = "test_memory_history_snapshot.pickle";
  write_snapshot(path, ordered_json::array());
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == std::string("\x80\x04\x5d\x94\x2e", 5));  // pickle.dumps([], protocol=4)
  std::remove(path.c_str());
}
