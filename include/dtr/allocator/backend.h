// backend.h: where the caching allocator's memory comes from.
//
// A backend hands out and takes back *segments*: large, aligned ranges that the caching
// allocator then splits into blocks. Three backends exist:
//  - host: segments from mimalloc (and small requests served by a mimalloc heap directly);
//  - fake: address arithmetic only, no memory touched, so the simulator can replay a trace
//    through the real allocator and see real fragmentation at any size;
//  - cuda (integration/cuda/, built when nvcc is found): cudaMalloc / cudaFree.
// A backend is not thread-safe by itself: the caching allocator calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace dtr {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int device() const { return -1; }  // -1: host memory; >= 0: a CUDA device
  virtual size_t alignment() const = 0;      // every segment start is a multiple of this
  // A segment of exactly `bytes` (a multiple of alignment()), or nullptr when the device
  // has no memory left: the allocator then releases cached segments and retries.
  virtual void* allocate_segment(size_t bytes) = 0;
  virtual void free_segment(void* ptr, size_t bytes) = 0;
  // Small requests a backend serves itself, bypassing segments (host: a mimalloc heap).
  virtual bool serves_small() const { return false; }
  virtual void* allocate_small(size_t bytes) { return nullptr; }
  virtual void free_small(void* ptr, size_t bytes) {}
  // Gives memory the backend keeps after frees back to the system, where it keeps any
  // (host: mimalloc's emptied pages of the calling thread). CachingAllocator::empty_cache.
  virtual void trim() {}
  // Whether copy() works (CachingAllocator::compact moves nothing otherwise), and the copy
  // of `bytes` from one block to another. The fake backend copies nothing (its blocks hold
  // no data) and says true; the default, and the CUDA backend for now, says false.
  virtual bool can_copy() const { return false; }
  virtual void copy(void* /*to*/, const void* /*from*/, size_t /*bytes*/) {}
  // False for the fake backend: its pointers must never be dereferenced.
  virtual bool memory_is_real() const { return true; }
};

}  // namespace dtr
