// allocator_helpers.h: shared pieces of the allocator tests.
//
// Evictor is a stand-in for the engine's side of the out-of-memory chain: blocks are
// registered as evictable with it, and make_room frees them (oldest first) through
// CachingAllocator::free, exactly as the engine frees a storage's buffer. It records every
// call. It is thread-safe (its own mutex), and never holds that mutex while calling into
// the allocator. Patterns write a tag into a real allocation and check it before free.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "dtr/allocator/caching_allocator.h"

namespace dtr::test {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

struct EvictorCall {
  uint64_t bytes_needed = 0;
  bool contiguous = false;
  uint64_t device_frees_at_call = 0;  // stats().num_device_free seen from inside the call
};

struct Registered {
  void* ptr = nullptr;
  size_t bytes = 0;
  uint64_t tag = 0;
};

class Evictor : public EvictionCallback {
 public:
  explicit Evictor(CachingAllocator* allocator = nullptr) : allocator_(allocator) {}
  void attach(CachingAllocator* allocator) { allocator_ = allocator; }

  void add(void* ptr, size_t bytes, uint64_t tag = 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    registry_.push_back({ptr, bytes, tag});
  }
  // Takes a block back out (its owner wants to free it itself); false if already evicted.
  // The tag tells a block from a later one at the same address (after an eviction).
  bool take(void* ptr, uint64_t tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = registry_.begin(); it != registry_.end(); ++it) {
      if (it->ptr == ptr && it->tag == tag) {
        registry_.erase(it);
        return true;
      }
    }
    return false;
  }
  bool take_any(Registered* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (registry_.empty()) return false;
    *out = registry_.front();
    registry_.pop_front();
    return true;
  }
  size_t registered() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return registry_.size();
  }

  uint64_t make_room(uint64_t bytes_needed, bool contiguous) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      calls_.push_back({bytes_needed, contiguous, allocator_->stats().num_device_free});
    }
    uint64_t freed = 0;
    Registered victim;
    while (freed < bytes_needed && take_any(&victim)) {
      if (before_free) before_free(victim);
      allocator_->free(victim.ptr);
      freed += round_block_size(victim.bytes);
    }
    return freed;
  }
  uint64_t pinned_bytes() const override { return pinned_bytes_value; }
  uint64_t in_use_bytes() const override { return in_use_bytes_value; }
  std::string oom_advice(uint64_t) const override { return oom_advice_value; }
  std::string oom_context() const override { return oom_context_value; }
  uint64_t evictable_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t total = 0;
    for (const Registered& r : registry_) total += round_block_size(r.bytes);
    return total;
  }
  std::vector<EvictorCall> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  std::function<void(const Registered&)> before_free;  // e.g. check a pattern
  uint64_t pinned_bytes_value = 0;                     // what pinned_bytes() reports
  uint64_t in_use_bytes_value = 0;  // what in_use_bytes() reports (a part of the above)
  std::string oom_advice_value;     // what oom_advice() reports
  std::string oom_context_value;    // what oom_context() reports

 private:
  CachingAllocator* allocator_;
  mutable std::mutex mutex_;
  std::deque<Registered> registry_;
  std::vector<EvictorCall> calls_;
};

// Writes `tag`-derived words into [ptr, ptr+bytes): every word below kFullFill bytes,
// else one word per 512 B (blocks are 512 B granular, so any overlap is seen) and the last.
constexpr size_t kFullFill = 64 * 1024;

inline uint64_t pattern_word(uint64_t tag, size_t offset) {
  return (tag * 0x9E3779B97F4A7C15ull) ^ (offset * 0xC2B2AE3D27D4EB4Full);
}

template <typename Visit>
void pattern_offsets(size_t bytes, Visit visit) {
  if (bytes < sizeof(uint64_t)) return;
  const size_t step = bytes <= kFullFill ? sizeof(uint64_t) : 512;
  for (size_t off = 0; off + sizeof(uint64_t) <= bytes; off += step) visit(off);
  visit(bytes - sizeof(uint64_t));
}

inline void write_pattern(void* ptr, size_t bytes, uint64_t tag) {
  char* base = static_cast<char*>(ptr);
  pattern_offsets(bytes, [&](size_t off) {
    const uint64_t word = pattern_word(tag, off);
    std::memcpy(base + off, &word, sizeof word);
  });
}

inline bool check_pattern(const void* ptr, size_t bytes, uint64_t tag) {
  const char* base = static_cast<const char*>(ptr);
  bool ok = true;
  pattern_offsets(bytes, [&](size_t off) {
    uint64_t word;
    std::memcpy(&word, base + off, sizeof word);
    // The last word may overlap the previous one: compare what was written last.
    if (off == bytes - sizeof(uint64_t)) {
      if (word != pattern_word(tag, off)) ok = false;
    } else if (off + 2 * sizeof(uint64_t) <= bytes || bytes % sizeof(uint64_t) == 0) {
      if (word != pattern_word(tag, off)) ok = false;
    }
  });
  return ok;
}

// Sizes shaped like the DTR logs' MEMORY values: many small tensors, some very large ones.
inline size_t log_like_size(std::mt19937_64& rng, size_t max_large_bytes) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  if (unit(rng) < 0.7) {  // 64 B .. 1 MiB, log-uniform
    return static_cast<size_t>(64.0 * std::pow(16384.0, unit(rng)));
  }
  const double lo = static_cast<double>(kMiB), hi = static_cast<double>(max_large_bytes);
  return static_cast<size_t>(lo * std::pow(hi / lo, unit(rng)));
}

}  // namespace dtr::test
