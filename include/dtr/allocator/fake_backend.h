// fake_backend.h: a Backend that only does address arithmetic, for the simulator.
//
// Segments are handed out by a bump pointer from kFakeBaseAddress, each aligned to
// kFakeAlignment; addresses are never reused, so two segments never share an address and
// a replay's block addresses are deterministic. No memory is touched (memory_is_real() is
// false: never dereference these pointers). An optional capacity plays the device's size:
// past it allocate_segment returns nullptr, which drives the allocator's cache release.
// By default it does not serve small requests, so everything goes through segments, as on
// a GPU; with `serve_small` it hands out small blocks of their own from another range, as
// the host backend's mimalloc heap does (Note [Small path] in caching_allocator.cpp), and
// the simulator's model of the PyTorch CPU host uses that (Note [Host device] in
// sim/replay.cpp).
// Not thread-safe by itself: the caching allocator calls it under its lock.
#pragma once

#include <cstdint>

#include "dtr/allocator/backend.h"

namespace dtr {

constexpr uint64_t kFakeBaseAddress = uint64_t{1} << 40;  // far from any real mapping
constexpr size_t kFakeAlignment = 2097152;                // every segment starts on 2 MiB
constexpr uint64_t kFakeSmallBaseAddress = uint64_t{1} << 39;  // small blocks, below segments
constexpr size_t kFakeSmallAlignment = 64;

class FakeBackend : public Backend {
 public:
  // `capacity_bytes`: live segment bytes the fake device holds (default: unlimited).
  explicit FakeBackend(uint64_t capacity_bytes = UINT64_MAX, bool serve_small = false)
      : capacity_bytes_(capacity_bytes), serve_small_(serve_small) {}

  const char* name() const override { return "fake"; }
  size_t alignment() const override { return kFakeAlignment; }
  void* allocate_segment(size_t bytes) override;
  void free_segment(void* ptr, size_t bytes) override;
  bool memory_is_real() const override { return false; }
  bool can_copy() const override { return true; }  // copy() has nothing to copy
  bool serves_small() const override { return serve_small_; }
  void* allocate_small(size_t bytes) override;
  void free_small(void* ptr, size_t bytes) override;

  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t num_segment_allocs() const { return num_segment_allocs_; }
  uint64_t num_segment_frees() const { return num_segment_frees_; }

 private:
  uint64_t capacity_bytes_;
  bool serve_small_;
  uint64_t next_address_ = kFakeBaseAddress;
  uint64_t next_small_address_ = kFakeSmallBaseAddress;
  uint64_t live_bytes_ = 0;
  uint64_t num_segment_allocs_ = 0;
  uint64_t num_segment_frees_ = 0;
};

}  // namespace dtr
