// block_pool.h: the caching allocator's plain data (private to allocator/).
//
// A Segment is one range from the backend; its Blocks tile it exactly, linked by prev/next
// in address order. A free block of a segment sits in exactly one BlockPool (small or
// large, by the segment's pool); an allocated block sits in none. Blocks live in a
// BlockArena that recycles them, so splitting and merging never call the system
// allocator once the arena is warm. Nothing here locks: the owner (CachingAllocator)
// holds its mutex around every use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <vector>

#include "dtr/allocator/allocator_stats.h"

namespace dtr {

struct Segment;

struct Block {
  uintptr_t ptr = 0;
  size_t size = 0;            // bytes spanned, a multiple of kMinBlockSize
  size_t requested_size = 0;  // the caller's request while allocated, else 0
  bool allocated = false;
  bool evictable = false;
  bool unmovable = false;  // CachingAllocator::set_unmovable: Note [Compaction]
  uint64_t owner = 0;
  uint64_t number = 0;    // while allocated: CachingAllocator::allocation_number
  Block* prev = nullptr;  // neighbours in the same segment, address order
  Block* next = nullptr;
  Segment* segment = nullptr;  // null: a small-path block from Backend::allocate_small
  StatPool pool = StatPool::small_pool;
};

struct Segment {
  uint64_t id = 0;  // unique for the allocator's life, in allocation order
  uintptr_t ptr = 0;
  size_t size = 0;
  StatPool pool = StatPool::small_pool;
  Block* first = nullptr;  // the block at ptr
};

// Free blocks ordered by (size, address): best fit is one lower_bound.
class BlockPool {
 public:
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using Set = std::set<Block*, BySizeThenAddress>;

  // The smallest free block of at least `size` bytes (lowest address among equals), or null.
  Block* best_fit(size_t size) const {
    Block key;
    key.size = size;
    key.ptr = 0;
    auto it = blocks_.lower_bound(&key);
    return it == blocks_.end() ? nullptr : *it;
  }
  void insert(Block* block) { blocks_.insert(block); }
  void erase(Block* block) { blocks_.erase(block); }
  bool contains(Block* block) const { return blocks_.count(block) != 0; }
  size_t largest() const { return blocks_.empty() ? 0 : (*blocks_.rbegin())->size; }
  const Set& blocks() const { return blocks_; }

 private:
  Set blocks_;
};

// Owns every Block; recycles freed ones (RAII: the deque frees them all at the end).
class BlockArena {
 public:
  Block* make() {
    if (!recycled_.empty()) {
      Block* block = recycled_.back();
      recycled_.pop_back();
      *block = Block{};
      return block;
    }
    storage_.emplace_back();
    return &storage_.back();
  }
  void recycle(Block* block) { recycled_.push_back(block); }

 private:
  std::deque<Block> storage_;  // deque: growing never moves existing blocks
  std::vector<Block*> recycled_;
};

}  // namespace dtr
