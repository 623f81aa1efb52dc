// caching_allocator.h: a PyTorch-style caching allocator for one device, with a hard budget.
//
// What it is. Memory comes from a Backend in *segments*; a segment is split into *blocks*
// that are handed out and, when freed, coalesced with free neighbours and cached for reuse
// (never given back to the backend except by the out-of-memory chain or empty_cache()).
// Sizes are rounded up to kMinBlockSize. Requests up to kSmallSize use the small pool
// (2 MiB segments), larger ones the large pool (20 MiB segments up to kMinLargeAlloc, then
// exact segments rounded to kRoundLarge; all exact with config.exact_segments). A free
// block is found by best fit: the smallest free block that fits, lowest address among
// equals. If the backend serves small requests itself (host: a mimalloc heap) and
// config.use_backend_small_path is on, small requests go there instead of into segments,
// but are still counted in the stats and the budget (Note [Small path] in
// allocator/caching_allocator.cpp).
//
// Budget. allocated_bytes (live requests rounded to kMinBlockSize) never exceeds
// config.budget_bytes, and reserved_bytes never exceeds config.reserved_limit_bytes.
// A request that does not fit runs the out-of-memory chain (Note [Out-of-memory chain]):
// (1) a cached free block or a fresh segment, (2) the EvictionCallback, (3) releasing
// cached segments and then compacting (both before (2) when the budget is fine but no
// block fits: Note [Compaction]), (4) an AllocatorOom.
//
// Invariants (is_valid checks all of them; at config.debug >= 3 after every allocate and
// free): blocks tile each segment exactly, in address order, with consistent prev/next
// links; no two neighbouring blocks are both free; the free pools hold exactly the free
// blocks; the stats equal a recount; the budget and the reserved limit hold.
//
// Lock rules (Note [Lock rules] in allocator/caching_allocator.cpp has the reasons):
//  - One std::mutex (not recursive) guards every block, segment, pool and stat.
//  - The Backend is only ever called with that mutex held: backends need not be thread-safe.
//  - The EvictionCallback is only ever called with the mutex released, and only when the
//    allocator is consistent (is_valid holds). The callback may call any public method,
//    free() in particular, and even allocate(); several threads may be inside the callback
//    at once, so the callback serializes itself.
//  - Every public method takes the mutex itself; none calls another public method while
//    holding it. Views and stats are returned as copies.
//  - The AllocatorObserver (set_observer) is called with the mutex held, at the moment of
//    each event: it must be quick and must not call this allocator (it would deadlock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dtr/allocator/allocator_stats.h"
#include "dtr/allocator/backend.h"

namespace dtr {

constexpr size_t kMinBlockSize = 512;        // all sizes are rounded to at least 512 bytes
constexpr size_t kSmallSize = 1048576;       // largest "small" request: 1 MiB
constexpr size_t kSmallBuffer = 2097152;     // segment size for small requests: 2 MiB
constexpr size_t kLargeBuffer = 20971520;    // segment size for 1 MiB < request < 10 MiB: 20 MiB
constexpr size_t kMinLargeAlloc = 10485760;  // requests from 10 MiB get an exact segment
constexpr size_t kRoundLarge = 2097152;      // ... rounded up to a multiple of 2 MiB
constexpr uint64_t kUnlimitedBytes = std::numeric_limits<uint64_t>::max();  // no budget / limit

// `bytes` rounded up to a multiple of kMinBlockSize (0 -> kMinBlockSize).
size_t round_block_size(size_t bytes);
// The segment a rounded request of `bytes` gets when no cached block fits.
size_t segment_size_for(size_t bytes);
// The least segment that serves it: 2 MiB for the small pool, the request rounded up to
// kRoundLarge for the large; what a fresh segment is with AllocatorConfig::exact_segments.
size_t least_segment_for(size_t bytes);
// True when a rounded request of `bytes` belongs to the small pool (bytes <= kSmallSize).
inline bool is_small_request(size_t bytes) { return bytes <= kSmallSize; }

struct AllocatorConfig {
  uint64_t budget_bytes = kUnlimitedBytes;          // hard cap on allocated_bytes.all.current
  uint64_t reserved_limit_bytes = kUnlimitedBytes;  // cap on reserved_bytes.all.current
  uint32_t debug = 0;                  // 0..3; at 3 is_valid() runs after every allocate/free
  bool use_backend_small_path = true;  // small requests to Backend::allocate_small if served
  // Each fresh large segment the size of its request (least_segment_for), not 20 MiB for a
  // request under 10 MiB: a host's reserved limit, where a device's memory is not the
  // limit (Note [Segments under a reserved limit] in allocator/caching_allocator.cpp).
  bool exact_segments = false;
};

// The out-of-memory result: everything a user needs to decide what to change.
struct AllocatorOom {
  uint64_t requested_bytes = 0;           // the request, rounded to kMinBlockSize
  uint64_t budget_bytes = 0;              // AllocatorConfig::budget_bytes
  uint64_t reserved_limit_bytes = 0;      // AllocatorConfig::reserved_limit_bytes
  uint64_t allocated_bytes = 0;           // live, at the time of the failure
  uint64_t reserved_bytes = 0;            // held from the backend, at the time of the failure
  uint64_t pinned_bytes = 0;              // from EvictionCallback::pinned_bytes (0: no callback)
  uint64_t evictable_bytes = 0;           // from EvictionCallback::evictable_bytes (0: no callback)
  uint64_t in_use_bytes = 0;              // of pinned_bytes, what only running ops hold
  bool has_callback = false;              // the three above came from an EvictionCallback
  std::string owner_advice;               // from EvictionCallback::oom_advice
  std::string owner_context;              // from EvictionCallback::oom_context
  uint64_t largest_free_block_bytes = 0;  // largest cached free block
  // The fresh segment the request takes where no cached block fits it (0: it takes none,
  // as on the small path). Above the reserved limit, no eviction can make room: Note
  // [Segments larger than the device].
  uint64_t segment_bytes = 0;

  // Allocated bytes the callback's owner does not account for (an op's own buffers, such
  // as a convolution's workspace; tensors it does not track); 0 without a callback.
  uint64_t untracked_bytes() const;

  // A sentence for a human: the numbers above and what to try.
  std::string message() const;
};

// The result of allocate(): a pointer, or (ptr == nullptr) the out-of-memory details.
struct AllocResult {
  void* ptr = nullptr;
  AllocatorOom oom;
  bool ok() const { return ptr != nullptr; }
};

// The engine's side of the out-of-memory chain. Called without the allocator's lock.
class EvictionCallback {
 public:
  virtual ~EvictionCallback() = default;
  // Free storages (through CachingAllocator::free) to make room. When
  // `contiguous_request` is false the budget is the problem and `bytes_needed` is how many
  // more bytes must be freed; when true the budget is fine but no free block of
  // `bytes_needed` contiguous bytes exists (and no segment can be added), so freeing a
  // contiguous window of blocks (blocks_in_address_order) helps most. Return the bytes
  // freed; freeing nothing means nothing more can be evicted. The allocator retries after
  // every call that freed something.
  virtual uint64_t make_room(uint64_t bytes_needed, bool contiguous_request) = 0;
  // Called when an allocation would raise allocated or reserved bytes above their peak,
  // before it is served (Note [New peaks] in allocator/caching_allocator.cpp): free what
  // the program no longer holds but the callback's owner kept (a host's dead storages),
  // never what it still needs. Return the bytes freed. The default frees nothing.
  virtual uint64_t before_new_peak(uint64_t /*bytes_requested*/) { return 0; }
  // Called when contiguity is the shortfall (a request of `bytes_requested` needs a
  // segment that the reserved limit or the backend refuses) and releasing cached segments
  // did not help, before make_room: the owner may call CachingAllocator::compact with the
  // BlockMover of what it can move (Note [Compaction] in allocator/caching_allocator.cpp).
  // Return the segment bytes released. The default moves nothing.
  virtual uint64_t compact(uint64_t /*bytes_requested*/) { return 0; }
  // For the AllocatorOom message: live bytes that cannot / could be evicted now, and of
  // the former, those only a running op holds (Note [Out-of-memory breakdown]).
  virtual uint64_t pinned_bytes() const { return 0; }
  virtual uint64_t evictable_bytes() const { return 0; }
  virtual uint64_t in_use_bytes() const { return 0; }
  // For the AllocatorOom message of a request of `bytes_requested`: one more thing to
  // try, from the owner's own options, as a clause after "or" ("lower option ..."); empty
  // for none.
  virtual std::string oom_advice(uint64_t /*bytes_requested*/) const { return {}; }
  // For the AllocatorOom message: where the request came from, as sentences of its own
  // ("It came from ..."), where the owner knows more than the caller does; empty for none.
  virtual std::string oom_context() const { return {}; }
};

// The owner's side of CachingAllocator::compact. Both are called with the allocator's
// mutex held (like an AllocatorObserver): quick, and never calling the allocator.
class BlockMover {
 public:
  virtual ~BlockMover() = default;
  // Whether the live block at `ptr` (allocated with `owner`) may be copied elsewhere now:
  // nothing reads or writes it until moved() has told its owner the new address.
  virtual bool movable(uint64_t owner, void* ptr) = 0;
  // Its bytes are at `to` now and `from` is free: point the owner at `to` without
  // freeing `from` (the allocator has freed it).
  virtual void moved(uint64_t owner, void* from, void* to) = 0;
};

// One block, for address-ordered scans (contiguity-aware eviction).
struct BlockView {
  uintptr_t ptr = 0;
  size_t size = 0;             // bytes the block spans (rounded; may include an unsplit tail)
  size_t requested_bytes = 0;  // the caller's request; 0 for a free block
  uint64_t segment_id = 0;     // blocks with the same id are one contiguous segment
  bool small_pool = false;     // the segment serves requests <= kSmallSize only
  bool allocated = false;
  bool evictable = false;  // set_evictable(); always false for a free block
  uint64_t owner = 0;      // allocate()/set_owner(); 0 for a free block
};

// What the allocator just did, for an AllocatorObserver (allocator/memory_history.h
// records these). Names as in PyTorch's memory snapshots (device_traces).
enum class AllocatorAction : uint8_t {
  alloc,           // a block was handed out
  free_requested,  // free() was called on it
  free_completed,  // it is free (always right after free_requested: no streams here)
  segment_alloc,   // a segment came from the backend
  segment_free,    // a segment went back to the backend
  oom,             // allocate() returned an AllocatorOom
};
const char* allocator_action_name(AllocatorAction action);  // "alloc", "segment_free", ...

struct AllocatorEvent {
  AllocatorAction action = AllocatorAction::alloc;
  uintptr_t addr = 0;          // block or segment address; 0 for oom
  size_t size = 0;             // block or segment bytes; oom: the rounded request
  size_t requested_bytes = 0;  // alloc/free: the caller's request; oom: the same as size
  uint64_t owner = 0;          // alloc/free: the block's owner
  // Note [Small path]: a block the backend served itself; it comes with its own
  // segment_alloc before its alloc and segment_free after its free_completed, so that a
  // snapshot can show it as a segment of its own (Note [Small-path segments] in
  // allocator/memory_snapshot.cpp).
  bool small_path = false;
  uint64_t free_bytes = 0;  // oom: bytes left under the budget (what a device would call free)
};

// Sees every AllocatorEvent, with the allocator's mutex held (see the lock rules above).
class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  virtual void on_allocator_event(const AllocatorEvent& event) = 0;
};

// A segment and its blocks (which tile it), or one small-path block as its own segment.
struct SegmentView {
  uintptr_t ptr = 0;
  size_t size = 0;
  bool small_pool = false;  // serves requests <= kSmallSize
  bool small_path = false;  // Note [Small path]: one block from Backend::allocate_small
  std::vector<BlockView> blocks;  // address order; their sizes sum to `size`
};

class CachingAllocator {
 public:
  // `callback` may be null (then step (2) of the chain is skipped) and must outlive *this.
  CachingAllocator(AllocatorConfig config, std::unique_ptr<Backend> backend,
                   EvictionCallback* callback = nullptr);
  // Gives every segment and small-path allocation back to the backend, live ones included.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `bytes` (aligned to kMinBlockSize in segments), or an AllocatorOom. Never throws.
  AllocResult allocate(size_t bytes, uint64_t owner = 0);
  // Frees a pointer allocate() returned; nullptr is ignored. Anything else is a DTR_CHECK.
  void free(void* ptr);
  // Set on a live block; false (and nothing changed) when `ptr` is not one.
  bool set_owner(void* ptr, uint64_t owner);
  bool set_evictable(void* ptr, bool evictable);
  // The live block's address was handed out (numpy, another thread): compact() never moves
  // it. Until it is freed. False (nothing changed) when `ptr` is not a live block.
  bool set_unmovable(void* ptr);
  // Allocations are numbered 1, 2, ... in the order they were handed out: the number of
  // the live block at `ptr` (kept when compact() moves it), or 0 when `ptr` is not one; and
  // the number of the latest (0 before the first), read without the mutex. A trace places
  // a storage it learns of late where it was allocated (Note [Constants where they were
  // allocated] in integration/torch/recording.cpp).
  uint64_t allocation_number(void* ptr) const;
  uint64_t allocations() const;

  // Note [Compaction]: moves every live block out of the segments that hold the fewest
  // live bytes, all of them movable, into free blocks of other segments (or, under a
  // reserved limit, packs some into one fresh smaller segment: Note [Packing]), and gives
  // the emptied segments back, until a request of `bytes_requested` could get a fresh
  // segment (under the reserved limit); moves nothing when that cannot be reached, or when
  // the backend cannot copy. Returns the segment bytes released.
  uint64_t compact(size_t bytes_requested, BlockMover& mover);
  // Gives every fully free cached segment back to the backend and lets the backend trim
  // what it keeps after frees (Backend::trim); returns the segment bytes released.
  uint64_t empty_cache();
  // Every block of every segment, in address order (small-path allocations are not in
  // segments and not listed: Note [Small path]).
  std::vector<BlockView> blocks_in_address_order() const;
  size_t largest_free_block() const;
  // Every segment with its blocks, and every small-path block as a segment of its own,
  // in address order (what a memory snapshot shows).
  std::vector<SegmentView> segments() const;

  AllocatorStats stats() const;  // a copy, gauges filled in
  void reset_peaks();
  // Counts in num_ooms an out-of-memory error its owner raised without a request failing
  // here (a ratio budget that does not fit, on_thrash:raise): num_ooms counts every one the
  // program saw, as PyTorch's counts every one its allocator threw.
  void count_oom();
  // Note [Forking beside the allocator] in allocator/caching_allocator.cpp: pthread_atfork's
  // prepare handler takes the allocator's lock, and its parent and child handlers release
  // it, so a child is never forked while another thread is inside the allocator.
  void lock_for_fork();
  void unlock_after_fork();
  // Checks every invariant listed above; on failure says which in *why (if given).
  bool is_valid(std::string* why = nullptr) const;

  // Changes config().budget_bytes (kUnlimitedBytes: no budget). Refused (false, nothing
  // changed) when more than `budget_bytes` are allocated now: the budget invariant holds
  // at every moment. config() is not synchronized with this call: read it on the thread
  // that set the budget, or after synchronizing with it.
  bool set_budget(uint64_t budget_bytes);
  // set_budget, after asking the eviction callback to free what is allocated above
  // `budget_bytes`, as for a request that does not fit (make_room). Refused as set_budget
  // is when what stays allocated is still more: a lowered budget (python's
  // dtr.set_budget, a ratio budget set after the first steps) evicts rather than fails.
  bool lower_budget(uint64_t budget_bytes);

  const AllocatorConfig& config() const { return config_; }
  const Backend& backend() const { return *backend_; }
  void set_eviction_callback(EvictionCallback* callback);  // before concurrent use
  // Every event from now on goes to `observer` (null: none; then an event costs one
  // branch). It must outlive its use; it is called with the mutex held (lock rules above).
  void set_observer(AllocatorObserver* observer);

 private:
  class Impl;  // the mutex, blocks, segments, pools and stats: allocator/caching_allocator.cpp

  AllocatorConfig config_;  // budget_bytes changes only through set_budget
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtr
