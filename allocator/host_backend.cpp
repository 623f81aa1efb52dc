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
//
// Note [Trimming the small path]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A freed small block leaves the allocator's reserved bytes at once, but mimalloc keeps
// the page it lay in for the heap's next allocations: after 1000 tensors of 256 KiB were
// freed, reserved bytes read 0 and the process's resident memory stayed 250 MB up
// (tests/torch/test_python_api.py). trim() (empty_cache) collects the calling thread's
// small-path heap and mimalloc's own with force, which returns emptied pages and segments
// to the system. Only the calling thread's: mimalloc lets a heap be collected only by its
// owner, and other threads' heaps keep their pages until those threads free or exit.
#include "dtr/allocator/host_backend.h"

#include <cstring>

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

void HostBackend::trim() {  // Note [Trimming the small path]
  mi_heap_collect(small_path_heap(), /*force=*/true);
  mi_collect(/*force=*/true);
}

void HostBackend::copy(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}

}  // namespace dtr
