// host_backend.cpp: segments and small blocks from mimalloc (see host_backend.h).
//
// Note [Thread-local heaps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// mimalloc allows a heap made by mi_heap_new to allocate only on the thread that created
// it (mi_free works from any thread). The caching allocator calls allocate_small from
// whichever thread asked, under its lock, so a single heap in the backend would be used
// from many threads, which mimalloc forbids even when serialized. Each thread therefore
// gets its own small-path heap, made on its first small request and kept in a
// thread_local; mimalloc deletes it when the thread exits and moves its live blocks to the
// thread's backing heap, where they stay valid and mi_free still frees them. The heap is
// shared by every HostBackend of that thread: it holds only mimalloc's pages, no state of
// ours. This is the one thread_local in the libraries; it exists because of mimalloc's
// contract, not to hold configuration.
#include "dtr/allocator/host_backend.h"

#include <mimalloc.h>

#include "dtr/core/check.h"

namespace dtr {

namespace {

mi_heap_t* small_path_heap() {
  thread_local mi_heap_t* heap = nullptr;  // Note [Thread-local heaps]
  if (!heap) heap = mi_heap_new();
  return heap;
}

}  // namespace

void* HostBackend::allocate_segment(size_t bytes) {
  void* ptr = mi_malloc_aligned(bytes, kHostSegmentAlignment);
  if (ptr) live_segment_bytes_ += bytes;
  return ptr;
}

void HostBackend::free_segment(void* ptr, size_t bytes) {
  DTR_ASSERT(bytes <= live_segment_bytes_, "host backend: segment bytes underflow");
  live_segment_bytes_ -= bytes;
  mi_free(ptr);
}

void* HostBackend::allocate_small(size_t bytes) {
  mi_heap_t* heap = small_path_heap();
  if (!heap) return nullptr;
  void* ptr = mi_heap_malloc_aligned(heap, bytes, kHostSmallAlignment);
  if (ptr) live_small_bytes_ += bytes;
  return ptr;
}

void HostBackend::free_small(void* ptr, size_t bytes) {
  DTR_ASSERT(bytes <= live_small_bytes_, "host backend: small bytes underflow");
  live_small_bytes_ -= bytes;
  mi_free(ptr);
}

}  // namespace dtr
