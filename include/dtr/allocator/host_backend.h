// host_backend.h: a Backend over mimalloc, for host (CPU) memory.
//
// Segments come from mimalloc's default heap (mi_malloc_aligned, kHostSegmentAlignment).
// Small requests (Backend::allocate_small) come from a mimalloc heap of the calling
// thread's own (mi_heap_new / mi_heap_malloc_aligned), aligned to kHostSmallAlignment;
// any thread frees with mi_free. Note [Thread-local heaps] in allocator/host_backend.cpp
// says why the heap is per thread. The caching allocator calls it under its lock; the
// backend keeps no state that needs one besides its counters.
#pragma once

#include <cstdint>

#include "dtr/allocator/backend.h"

namespace dtr {

constexpr size_t kHostSegmentAlignment = 4096;  // segments start on a page
constexpr size_t kHostSmallAlignment = 64;      // small-path blocks start on a cache line

class HostBackend : public Backend {
 public:
  const char* name() const override { return "host"; }
  size_t alignment() const override { return kHostSegmentAlignment; }
  void* allocate_segment(size_t bytes) override;
  void free_segment(void* ptr, size_t bytes) override;
  bool serves_small() const override { return true; }
  void* allocate_small(size_t bytes) override;
  void free_small(void* ptr, size_t bytes) override;
  void trim() override;  // Note [Trimming the small path] in allocator/host_backend.cpp
  bool can_copy() const override { return true; }
  void copy(void* to, const void* from, size_t bytes) override;  // memcpy

  uint64_t live_segment_bytes() const { return live_segment_bytes_; }
  uint64_t live_small_bytes() const { return live_small_bytes_; }

 private:
  uint64_t live_segment_bytes_ = 0;
  uint64_t live_small_bytes_ = 0;
};

}  // namespace dtr
