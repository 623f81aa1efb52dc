// fake_backend.cpp: bump-pointer segments that are never touched (see fake_backend.h).
#include "dtr/allocator/fake_backend.h"

#include "dtr/core/check.h"

namespace dtr {

void* FakeBackend::allocate_segment(size_t bytes) {
  if (bytes > capacity_bytes_ - live_bytes_) return nullptr;  // the fake device is full
  const uint64_t ptr = next_address_;
  next_address_ += (bytes + kFakeAlignment - 1) / kFakeAlignment * kFakeAlignment;
  live_bytes_ += bytes;
  ++num_segment_allocs_;
  return reinterpret_cast<void*>(ptr);
}

void FakeBackend::free_segment(void* ptr, size_t bytes) {
  DTR_CHECK(reinterpret_cast<uint64_t>(ptr) >= kFakeBaseAddress && bytes <= live_bytes_,
            "fake backend: freeing a segment it did not hand out");
  live_bytes_ -= bytes;
  ++num_segment_frees_;
}

void* FakeBackend::allocate_small(size_t bytes) {
  if (!serve_small_ || bytes > capacity_bytes_ - live_bytes_) return nullptr;
  const uint64_t ptr = next_small_address_;
  next_small_address_ +=
      (bytes + kFakeSmallAlignment - 1) / kFakeSmallAlignment * kFakeSmallAlignment;
  DTR_CHECK(next_small_address_ <= kFakeBaseAddress,
            "fake backend: small blocks ran into segments");
  live_bytes_ += bytes;
  return reinterpret_cast<void*>(ptr);
}

void FakeBackend::free_small(void* ptr, size_t bytes) {
  DTR_CHECK(reinterpret_cast<uint64_t>(ptr) >= kFakeSmallBaseAddress &&
                reinterpret_cast<uint64_t>(ptr) < kFakeBaseAddress && bytes <= live_bytes_,
            "fake backend: freeing a small block it did not hand out");
  live_bytes_ -= bytes;
}

}  // namespace dtr
