// caching_allocator.cpp: the caching allocator (the model and its invariants are in
// include/dtr/allocator/caching_allocator.h; the plain data in allocator/block_pool.h).
//
// CachingAllocator is a thin shell: every public method forwards to Impl, which holds the
// one mutex. Impl's methods named *_locked expect the mutex held; the others take it.
//
// Note [Lock rules]
// ~~~~~~~~~~~~~~~~~
// One std::mutex, deliberately not recursive, guards all state. Three rules follow:
//  1. The Backend is called only under the mutex. Backends are then free to be
//     single-threaded (the fake backend's bump pointer, the host backend's bookkeeping),
//     and a cudaMalloc that blocks only blocks other allocations, which would wait anyway.
//  2. The EvictionCallback is called only with the mutex released, at a point where every
//     invariant holds (the failed attempt changed nothing). The engine's make_room frees
//     storages, and freeing a storage calls free(), which takes the mutex: with the mutex
//     held this would deadlock (or need a recursive mutex, which would let free() run in
//     the middle of allocate()'s bookkeeping). So allocate() unlocks, calls, relocks, and
//     starts its attempt again from scratch: nothing it saw before the call is trusted.
//  3. No public method calls another public method while holding the mutex, and nothing
//     returns a reference into the state (views and stats are copies). A callback may thus
//     use the whole API, allocate() included; tests/allocator prove free() does not deadlock.
// Several threads may run the out-of-memory chain, and so the callback, at the same time.
//
// Note [Out-of-memory chain]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// allocate() tries, in order, each step named in the code:
//  (1) cached_block_or_segment: the best-fitting cached free block, or a fresh segment
//      from the backend; both only while allocated + request <= budget and reserved +
//      segment <= reserved limit. This is the fast path, and the only step when memory is
//      plentiful.
//  (2) evict: EvictionCallback::make_room. If the budget was the shortfall it is asked for
//      allocated + request - budget bytes (any bytes will do); otherwise the budget is fine
//      but no block fits and no segment can be added, and it is asked for a contiguous
//      range of the request's size (contiguous_request = true). After every call that freed
//      something (the allocator counts its own frees, so a callback cannot claim progress
//      it did not make) step (1) runs again.
//  (3) release_cache: give every fully free cached segment back to the backend and run (1)
//      again. Skipped when the budget is the shortfall: releasing segments lowers reserved
//      bytes, never allocated bytes. When contiguity is the shortfall it runs *before* (2):
//      giving back an idle segment costs a device synchronization, evicting costs
//      recomputation, and recomputation was the dearer by far when measured (ResNet-32
//      log, dtr_eq, budget 0.6 of the baseline, fake device of the budget's size: overhead
//      1.405 with eviction first, 1.074 with the cache released first).
//  (3b) compact: when contiguity is the shortfall and (3) released nothing,
//      EvictionCallback::compact, with the mutex released; its owner may move live blocks
//      so that whole segments go back (Note [Compaction]). A copy is cheaper than a
//      recomputation, so it runs before (2); after a call that released a segment, (1)
//      runs again.
//  (4) out_of_memory: an AllocatorOom with the numbers. It is returned exactly when the
//      callback freed nothing and no cached segment could be released.
// A request larger than the budget or the reserved limit goes straight to (4): nothing
// can make it fit, so nothing is evicted for it. Every repeat of (1) after (2) or (3)
// counts in num_alloc_retries.
//
// Note [Out-of-memory breakdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The message splits the allocated bytes by what could free them: pinned (constants,
// parameters, storages pinned for raw access or at the optimizer step), in use (locked
// only while a running op or remat reads or writes them: its inputs and the parents of a
// remat), evictable, and untracked, the rest: memory the callback's owner does not account
// for. Under PyTorch that is what an op allocates for itself, and tensors the lineage has
// not met yet: a factory op's result (torch.randn) is not recorded, and enters the lineage
// as a constant when a recorded op first reads it. A 3x3 convolution of a 16 MiB input
// (batch 64, 16 channels, 64x64) takes a 16 MiB workspace besides its output, so an
// evaluation pass under torch.no_grad() at batch 64 ran out under a budget that left room
// for input and output, with 16 MiB that neither pinned nor evictable bytes explained
// before this split (tests/torch/test_infeasible_budget.py). Allocated bytes are rounded
// to blocks, the engine's to the byte, so a few KiB of untracked bytes are rounding; the
// message names them only from 1 MiB up.
//
// Note [New peaks]
// ~~~~~~~~~~~~~~~~
// A host that learns late that a block is dead (the torch integration finds storages only
// its lineage holds by scanning for them) would otherwise raise the peak by what it has
// not yet found, and reserved bytes by the segments that holding them takes. So when step
// (1) would raise allocated or reserved bytes above their peak, allocate() first asks
// EvictionCallback::before_new_peak (mutex released, as for make_room) to free those, then
// starts again (Shortfall::new_peak). The checks are a few loads under the mutex; the call
// runs only while a peak grows (a first step, the region after reset_peaks), and at most
// once per allocate(). A peak the program really reaches is reached all the same.
//
// Note [Compaction]
// ~~~~~~~~~~~~~~~~~
// Under a reserved limit a request can fail for want of a segment while much of what is
// reserved is free, in pieces: a long-lived block that landed in a large segment keeps the
// whole segment. In resnet18 at 0.5x (tests/torch/scripts/vision.py --batch 32, budget
// 163M, reserved_limit 180M) the run ran out of memory in its first backward pass asking
// for 32 MiB with 159.4 MiB reserved, 88.8 MiB allocated and a largest free block of 24
// MiB: two of its three 32 MiB segments held one block each, the 6 MiB input batch and a
// 4 MiB activation, while a parameter segment had 11 MiB free. Evicting cannot help with
// a pinned input; moving it can. compact(request, mover) does, under the mutex:
//  1. Target: the segment bytes to give back so that the request's fresh segment (or its
//     small-path block) fits under the reserved limit; with no limit (the backend refused
//     the segment) one such segment's worth.
//  2. Candidates: segments with live blocks, all of which the mover says are movable now,
//     fewest live bytes first. Each is tried in turn on a model of the other segments'
//     free blocks (best fit, largest block first, splitting as allocate() would); one that
//     fits is chosen and its blocks' destinations leave the model. Segments that receive
//     blocks are not candidates (no block moves twice), and a chosen segment's own free
//     blocks are never destinations.
//  3. Only when the chosen segments reach the target are the blocks moved: best fit among
//     the free blocks outside the chosen segments, Backend::copy of the requested bytes,
//     the destination takes the block's request, owner and evictable flag, the source is
//     freed, and BlockMover::moved tells the owner. allocated_bytes do not change (the
//     budget holds at every moment, as the copy is never counted twice); active_bytes
//     change by the two blocks' unsplit tails. Then the emptied segments are released.
// The mover decides what may move: the torch host moves storages its lineage knows that
// no running op holds and whose address nobody was given (Note [Moving storages] in
// integration/torch/lineage.cpp); the simulator's engine moves material storages no op
// holds, and only under a reserved limit of the replay's own (Note [Compaction in the
// engine] in eviction/engine.cpp), so default replays stay comparable with the published
// ones; the CUDA backend cannot copy yet, so a CUDA allocator never moves a block.
//
// Note [Packing]
// ~~~~~~~~~~~~~~
// Step 2 needs free blocks elsewhere large enough for each moved block; when the blocks are
// large and the free space lies in smaller pieces it falls short. The run that showed it
// (resnet18 as above, limit 1.05x its budget, 2026-11-28): a 32 MiB request in the first
// backward pass with nothing evictable needed 20.5 MiB of segments back; step 2 found 20
// (a 20 MiB segment holding 4.5 + 1.5 MiB of parameters), while another 20 MiB segment held
// two 9 MiB parameters and no free piece elsewhere took a 9 MiB block. So, in the large
// pool only and only under a reserved limit, when step 2 falls short:
//  2b. Pack: candidates step 2 neither chose nor sends blocks into, fewest live bytes
//      first, are packed into one fresh segment sized to their blocks (rounded up to
//      kRoundLarge), as long as that segment fits under the limit once step 2's segments
//      are back, and each one packed gains (its size is more than what it adds to the
//      fresh one), until step 2's segments and the packed ones, less the fresh segment,
//      reach the target. If they cannot, nothing moves.
//  3b. After step 3 (its moves never go into packed segments) and its release, the fresh
//      segment is taken, the packed blocks go into it, largest first, and the packed
//      segments are given back. If the backend refuses the fresh segment, step 3's
//      release stands and nothing more moves.
// The fresh segment raises reserved bytes for a moment, never above the limit.
// dtr.num_packings counts the compactions that packed.
//
// Note [Segments under a reserved limit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// segment_size_for gives a request between 1 and 10 MiB a 20 MiB segment, as PyTorch's
// CUDA allocator does: such blocks then share segments, and cudaMalloc, slow and
// synchronizing, runs less often. Under the host's reserved limit that costs more than it
// saves. A 20 MiB segment kept by one live block holds up to 18 MiB of the limit that no
// other pool can use, and the segment can be given back only once that block dies or
// moves. patterns.py's MLP at 0.7 of its peak under a limit of 1.25 times its budget (26.3
// MiB) ran out of memory asking for 512 KiB with 8 MiB allocated: its 2 MiB batch, a fresh
// randn result that nothing may move, held a 20 MiB segment. Under such a limit the
// test_remat.py scripts at their two lowest fractions ran out of memory in 23 of 51 cases
// (min_evictable:0, 2026-12-05). Giving the 20 MiB only where it fits under the limit, and
// the request's own size otherwise, still left 17 of them out of memory. So with
// AllocatorConfig::exact_segments, which the torch host sets when it has a reserved limit
// (and the simulator when it replays one), every fresh large segment is
// least_segment_for(request): the request rounded up to kRoundLarge (2 MiB). Then all 51
// trained bit-identically, and under 1.1 times the budget (default min_evictable) 50 of 51,
// against 24 before. The small pool keeps its 2 MiB segments, and compaction's target
// (Note [Compaction], step 1) is reckoned on the same segment. A device's own memory (the
// simulator's default fake device, a GPU) keeps PyTorch's sizes.
//
// Note [Allocated vs active]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A block is not split when the remainder would be too small to be worth keeping (< 512 B
// in the small pool, <= 1 MiB in the large pool), so an allocated block can be larger than
// its rounded request. allocated_bytes counts the rounded request (what the program holds,
// the same number the engine counts for a storage, and what the budget caps); active_bytes
// counts the block's size, which is what PyTorch calls allocated_bytes. The difference is
// the unsplit tails; reserved - active is the free memory inside segments.
//
// Note [Small path]
// ~~~~~~~~~~~~~~~~~
// A backend that serves small requests itself (Backend::serves_small, the host backend's
// mimalloc heap) does better on them than 2 MiB segments: no internal fragmentation, size
// classes, thread-local pages. Such a block has no segment; it counts in the small pool's
// allocated, active and reserved bytes (by its rounded size) and in allocation, but not in
// segment, and it is not listed by blocks_in_address_order: it is not part of any range a
// contiguous eviction could free. The fake backend does not serve small requests, so a
// simulated replay sends everything through segments and sees their fragmentation.
// An observer sees such a block as a segment of its own: segment_alloc then alloc, and
// free_requested, free_completed then segment_free (segments() lists it the same way).
//
// Note [Observer]
// ~~~~~~~~~~~~~~~
// The observer is told each event where it happens, under the mutex, so the order it
// sees is the order of the allocator's state changes, and a recorder needs no lock of its
// own for its ring. The price: it must not call the allocator. With no observer an event
// costs one branch on a pointer (notify_locked).
//
// Note [No mimalloc in a dlopen'd library]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The CUDA library (integration/cuda) compiles this file again with
// DTR_ALLOCATOR_NO_MIMALLOC, and its table of live blocks then uses std::allocator. That
// library is dlopen'd into a PyTorch 2.x process, and there (an H200 with torch 2.11) the
// first dtr_free crashed inside mi_free, while the same code passed in a plain test
// process. The cause was not established. A library loaded late looks its symbols up in
// the process's global scope before its own dependencies, so it cannot be sure which
// mi_* it gets, and a CUDA allocator makes few, large requests, so the nodes' cost does
// not matter there. The CPU runtime (preloaded, or loaded into torch 1.13) keeps mimalloc.
#include "dtr/allocator/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>

#ifndef DTR_ALLOCATOR_NO_MIMALLOC
#include <mimalloc.h>
#endif

#include "allocator/block_pool.h"
#include "dtr/core/check.h"
#include "dtr/core/status.h"

namespace dtr {

size_t round_block_size(size_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t least_segment_for(size_t bytes) {
  if (bytes <= kSmallSize) return kSmallBuffer;
  return kRoundLarge * ((bytes + kRoundLarge - 1) / kRoundLarge);
}

size_t segment_size_for(size_t bytes) {
  // PyTorch's sizes: the least segment, except that requests under 10 MiB share 20 MiB.
  if (bytes > kSmallSize && bytes < kMinLargeAlloc) return kLargeBuffer;
  return least_segment_for(bytes);
}

// Note [Out-of-memory breakdown]: below this, untracked bytes are block rounding.
constexpr uint64_t kUntrackedWorthNaming = 1 << 20;

uint64_t AllocatorOom::untracked_bytes() const {
  if (!has_callback) return 0;
  const uint64_t accounted = pinned_bytes + evictable_bytes;
  return allocated_bytes > accounted ? allocated_bytes - accounted : 0;
}

std::string AllocatorOom::message() const {
  std::string out =
      "dtr: allocator out of memory: tried to allocate " + format_bytes(requested_bytes) +
      " with a budget of " +
      (budget_bytes == kUnlimitedBytes ? std::string("unlimited") : format_bytes(budget_bytes)) +
      " (allocated " + format_bytes(allocated_bytes) + ", reserved " + format_bytes(reserved_bytes);
  if (reserved_limit_bytes != kUnlimitedBytes)
    out += " of a reserved limit of " + format_bytes(reserved_limit_bytes);
  if (has_callback) {  // Note [Out-of-memory breakdown]
    out += "; pinned " + format_bytes(pinned_bytes - std::min(in_use_bytes, pinned_bytes)) +
           ", in use by the running op " + format_bytes(in_use_bytes) + ", evictable " +
           format_bytes(evictable_bytes);
    if (untracked_bytes() >= kUntrackedWorthNaming)
      out += ", untracked " + format_bytes(untracked_bytes()) +
             " (outside dtr's lineage: tensors no recorded op has read yet, such as fresh "
             "torch.empty results, results of ops dtr does not record (most ops outside aten, "
             "and ops run under a TorchDispatchMode), and buffers ops allocate for "
             "themselves, such as a convolution's workspace)";
  }
  out += "; largest free block " + format_bytes(largest_free_block_bytes) + "). ";
  if (!owner_context.empty()) out += owner_context + " ";
  // Note [Segments larger than the device] in core/status.cpp
  if (const std::string why = segment_above_limit(segment_bytes, reserved_limit_bytes);
      !why.empty() && requested_bytes <= reserved_limit_bytes)
    return out + why;
  if (requested_bytes > budget_bytes || requested_bytes > reserved_limit_bytes) {
    out += "The request alone exceeds the budget or the reserved limit: raise it above " +
           format_bytes(requested_bytes) + ".";
    return out;
  }
  const char* held = !has_callback ? "the allocated bytes"
                     : untracked_bytes() >= kUntrackedWorthNaming
                         ? "the pinned, in-use and untracked bytes"
                         : "the pinned and in-use bytes";
  out += "Nothing more could be evicted and releasing cached segments did not help. ";
  if (reserved_limit_bytes != kUnlimitedBytes &&
      allocated_bytes + requested_bytes <= budget_bytes) {
    // The budget had room: the limit refused a segment, and the free bytes under it lie in
    // segments that live blocks keep (in pieces too small, or in the other pool).
    out +=
        "The budget has room for it; the reserved limit does not, with the free bytes in "
        "segments that live blocks keep. Try: raise the reserved limit, or reduce the batch "
        "size";
  } else {
    out += "Try: raise the budget above " + std::string(held) +
           " plus this request, or reduce the batch size";
    if (reserved_limit_bytes != kUnlimitedBytes && largest_free_block_bytes < requested_bytes)
      out += ", or raise the reserved limit (free memory is fragmented: no free block fits)";
  }
  if (!owner_advice.empty()) out += ", or " + owner_advice;
  out += ".";
  return out;
}

namespace {

// new_peak: the request fits, but would raise allocated or reserved bytes above their
// peak before the callback was asked (Note [New peaks]).
enum class Shortfall : uint8_t { none, budget, reserved_limit, backend, new_peak };

struct Attempt {
  Block* block = nullptr;
  Shortfall shortfall = Shortfall::none;
};

}  // namespace

const char* allocator_action_name(AllocatorAction action) {
  switch (action) {
    case AllocatorAction::alloc: return "alloc";
    case AllocatorAction::free_requested: return "free_requested";
    case AllocatorAction::free_completed: return "free_completed";
    case AllocatorAction::segment_alloc: return "segment_alloc";
    case AllocatorAction::segment_free: return "segment_free";
    case AllocatorAction::oom: return "oom";
  }
  return "unknown";
}

class CachingAllocator::Impl {
 public:
  Impl(const AllocatorConfig& config, Backend& backend, EvictionCallback* callback)
      : config_(config),
        backend_(backend),
        callback_(callback),
        small_path_(config.use_backend_small_path && backend.serves_small()) {
    DTR_CHECK(backend.alignment() > 0 && kSmallBuffer % backend.alignment() == 0,
              "backend alignment must divide the 2 MiB segment size");
  }

  ~Impl() {
    for (auto& entry : allocated_) {
      Block* block = entry.second;
      if (!block->segment) backend_.free_small(reinterpret_cast<void*>(block->ptr), block->size);
    }
    for (auto& entry : segments_)
      backend_.free_segment(reinterpret_cast<void*>(entry.second->ptr), entry.second->size);
  }

  AllocResult allocate(size_t bytes, uint64_t owner) {
    const size_t need = round_block_size(bytes);
    std::unique_lock<std::mutex> lock(mutex_);
    // Note [Out-of-memory chain]
    const bool can_ever_fit = need <= config_.budget_bytes && need <= config_.reserved_limit_bytes;
    bool may_raise_peak = callback_ == nullptr;  // Note [New peaks]
    while (can_ever_fit) {
      // (1) cached_block_or_segment
      const Attempt attempt = cached_block_or_segment_locked(need, bytes, owner, may_raise_peak);
      if (attempt.block) {
        debug_check_locked("allocate");
        return AllocResult{reinterpret_cast<void*>(attempt.block->ptr), {}};
      }
      if (attempt.shortfall == Shortfall::new_peak) {
        EvictionCallback* callback = callback_;
        ++stats_.num_new_peak_calls;
        may_raise_peak = true;
        lock.unlock();
        callback->before_new_peak(need);
        lock.lock();
        continue;
      }
      // (3) release_cache first when contiguity is the shortfall: Note [Out-of-memory chain]
      if (attempt.shortfall != Shortfall::budget && release_cached_segments_locked() > 0) {
        ++stats_.num_cache_releases;
        ++stats_.num_alloc_retries;
        continue;
      }
      // (3b) compact, with the mutex released (Note [Compaction])
      if (attempt.shortfall != Shortfall::budget && callback_) {
        EvictionCallback* callback = callback_;
        const uint64_t releases_before = stats_.num_device_free;
        lock.unlock();
        callback->compact(need);
        lock.lock();
        if (stats_.num_device_free != releases_before) {
          ++stats_.num_alloc_retries;
          continue;
        }
      }
      // (2) evict, with the mutex released (Note [Lock rules])
      if (callback_) {
        const bool contiguous = attempt.shortfall != Shortfall::budget;
        const uint64_t bytes_needed =
            contiguous ? need : stats_.allocated_bytes.all.current + need - config_.budget_bytes;
        EvictionCallback* callback = callback_;
        const uint64_t frees_before = num_frees_;
        ++stats_.num_eviction_calls;
        lock.unlock();
        callback->make_room(bytes_needed, contiguous);
        lock.lock();
        if (num_frees_ != frees_before) {
          ++stats_.num_alloc_retries;
          continue;
        }
      }
      break;
    }
    // (4) out_of_memory
    ++stats_.num_ooms;
    if (observer_) {
      AllocatorEvent event;
      event.action = AllocatorAction::oom;
      event.size = event.requested_bytes = need;
      if (config_.budget_bytes != kUnlimitedBytes)
        event.free_bytes = config_.budget_bytes - stats_.allocated_bytes.all.current;
      observer_->on_allocator_event(event);
    }
    AllocatorOom oom;
    oom.requested_bytes = need;
    oom.budget_bytes = config_.budget_bytes;
    oom.reserved_limit_bytes = config_.reserved_limit_bytes;
    oom.allocated_bytes = stats_.allocated_bytes.all.current;
    oom.reserved_bytes = stats_.reserved_bytes.all.current;
    oom.largest_free_block_bytes = largest_free_block_locked();
    if (!(is_small_request(need) && small_path_)) oom.segment_bytes = fresh_segment_locked(need);
    EvictionCallback* callback = callback_;
    lock.unlock();
    if (callback) {
      oom.pinned_bytes = callback->pinned_bytes();
      oom.evictable_bytes = callback->evictable_bytes();
      oom.in_use_bytes = callback->in_use_bytes();
      oom.owner_advice = callback->oom_advice(need);
      oom.owner_context = callback->oom_context();
      oom.has_callback = true;
    }
    return AllocResult{nullptr, oom};
  }

  void free(void* ptr) {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocated_.find(reinterpret_cast<uintptr_t>(ptr));
    DTR_CHECK(it != allocated_.end(),
              "free() of a pointer this allocator did not hand out, or a double free");
    Block* block = it->second;
    allocated_.erase(it);
    free_block_locked(block);
    debug_check_locked("free");
  }

  bool set_owner(void* ptr, uint64_t owner) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = find_allocated_locked(ptr);
    if (block) block->owner = owner;
    return block != nullptr;
  }

  bool set_evictable(void* ptr, bool evictable) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = find_allocated_locked(ptr);
    if (block) block->evictable = evictable;
    return block != nullptr;
  }

  uint64_t allocation_number(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Block* block = find_allocated_locked(ptr);
    return block ? block->number : 0;
  }
  uint64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }

  bool set_unmovable(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = find_allocated_locked(ptr);
    if (block) block->unmovable = true;
    return block != nullptr;
  }

  uint64_t empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t released = release_cached_segments_locked();
    backend_.trim();  // what the backend kept after frees (host: Note [Trimming the small path])
    debug_check_locked("empty_cache");
    return released;
  }

  // Note [Compaction]
  uint64_t compact(size_t bytes_requested, BlockMover& mover) {
    const size_t need = round_block_size(bytes_requested);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!backend_.can_copy()) return 0;
    // 1. the target
    const bool small_path = is_small_request(need) && small_path_;
    const uint64_t grows = small_path ? need : fresh_segment_locked(need);
    const uint64_t reserved = stats_.reserved_bytes.all.current;
    uint64_t target = grows;
    if (config_.reserved_limit_bytes != kUnlimitedBytes) {
      if (reserved + grows <= config_.reserved_limit_bytes) return 0;  // not the limit's doing
      target = reserved + grows - config_.reserved_limit_bytes;
    }
    // 2. candidates, and a model of the free blocks per pool: size -> segment
    struct Candidate {
      Segment* segment;
      uint64_t live;
    };
    std::vector<Candidate> candidates;
    for (const auto& entry : segments_) {
      Segment* segment = entry.second.get();
      uint64_t live = 0;
      bool all_movable = true;
      for (const Block* b = segment->first; b && all_movable; b = b->next) {
        if (!b->allocated) continue;
        live += b->size;
        all_movable = !b->unmovable && mover.movable(b->owner, reinterpret_cast<void*>(b->ptr));
      }
      if (live > 0 && all_movable) candidates.push_back({segment, live});
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.live < b.live; });
    using Model = std::multimap<size_t, const Segment*>;
    Model model[2];  // small, large
    for (StatPool pool : {StatPool::small_pool, StatPool::large_pool})
      for (const Block* b : pool_for(pool).blocks())
        model[pool == StatPool::small_pool ? 0 : 1].emplace(b->size, b->segment);
    std::vector<const Segment*> chosen, receiving;
    auto among = [](const std::vector<const Segment*>& set, const Segment* s) {
      return std::find(set.begin(), set.end(), s) != set.end();
    };
    uint64_t planned = 0;
    for (const Candidate& c : candidates) {
      if (planned >= target) break;
      if (among(receiving, c.segment)) continue;
      Model trial = model[c.segment->pool == StatPool::small_pool ? 0 : 1];
      for (auto it = trial.begin(); it != trial.end();)
        it = it->second == c.segment ? trial.erase(it) : std::next(it);
      std::vector<size_t> sizes;
      for (const Block* b = c.segment->first; b; b = b->next)
        if (b->allocated) sizes.push_back(round_block_size(b->requested_size));
      std::sort(sizes.rbegin(), sizes.rend());
      std::vector<const Segment*> receivers;
      bool fits = true;
      for (size_t size : sizes) {
        auto it = trial.lower_bound(size);
        if (it == trial.end()) {
          fits = false;
          break;
        }
        Block shape;
        shape.size = it->first;
        shape.pool = c.segment->pool;
        const Segment* into = it->second;
        trial.erase(it);
        if (should_split(shape, size)) trial.emplace(shape.size - size, into);
        receivers.push_back(into);
      }
      if (!fits) continue;
      model[c.segment->pool == StatPool::small_pool ? 0 : 1] = std::move(trial);
      chosen.push_back(c.segment);
      receiving.insert(receiving.end(), receivers.begin(), receivers.end());
      planned += c.segment->size;
    }
    // 2b. what free blocks cannot take, one fresh segment may: Note [Packing]
    std::vector<const Segment*> packed;
    uint64_t packed_live = 0, packed_size = 0, fresh = 0;
    if (planned < target && config_.reserved_limit_bytes != kUnlimitedBytes) {
      const uint64_t headroom = config_.reserved_limit_bytes - reserved + planned;
      for (const Candidate& c : candidates) {
        if (planned + packed_size >= target + fresh) break;
        if (c.segment->pool != StatPool::large_pool || among(chosen, c.segment) ||
            among(receiving, c.segment))
          continue;
        uint64_t live = packed_live;
        for (const Block* b = c.segment->first; b; b = b->next)
          if (b->allocated) live += round_block_size(b->requested_size);
        const uint64_t size = kRoundLarge * ((live + kRoundLarge - 1) / kRoundLarge);
        if (size > headroom || packed_size + c.segment->size - size <= packed_size - fresh)
          continue;  // no room for it, or nothing gained
        packed.push_back(c.segment);
        packed_live = live;
        packed_size += c.segment->size;
        fresh = size;
      }
      if (planned + packed_size < target + fresh) packed.clear();
    }
    if (planned < target && packed.empty()) return 0;
    // 3. the moves, then the release
    uint64_t released = 0;
    std::vector<const Segment*> excluded = chosen;  // packed segments receive nothing
    excluded.insert(excluded.end(), packed.begin(), packed.end());
    for (const Segment* segment : chosen) {
      for (Block* from : live_blocks_largest_first(segment)) {
        Block* to = best_fit_outside_locked(*from, excluded);
        if (!to) return release_cached_segments_locked();  // the model said it fits
        move_block_locked(from, to, mover);
      }
    }
    released += release_cached_segments_locked();
    if (!packed.empty()) {
      Shortfall shortfall = Shortfall::none;
      Block* block = add_segment_locked(StatPool::large_pool, fresh, &shortfall);
      if (!block) return released;  // the backend refused it: nothing more moves
      pool_insert_locked(block);
      const Segment* into = block->segment;
      for (const Segment* segment : packed) {
        for (Block* from : live_blocks_largest_first(segment)) {
          Block* to = first_fit_in_locked(*from, into);
          if (!to) return released + release_cached_segments_locked();  // sized to fit
          move_block_locked(from, to, mover);
        }
      }
      released += release_cached_segments_locked();
      ++stats_.num_packings;
    }
    debug_check_locked("compact");
    return released;
  }

  static std::vector<Block*> live_blocks_largest_first(const Segment* segment) {
    std::vector<Block*> live;
    for (Block* b = segment->first; b; b = b->next)
      if (b->allocated) live.push_back(b);
    std::stable_sort(live.begin(), live.end(), [](const Block* a, const Block* b) {
      return a->requested_size > b->requested_size;
    });
    return live;
  }

  std::vector<BlockView> blocks_in_address_order() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<BlockView> out;
    for (const auto& entry : segments_) {
      for (const Block* b = entry.second->first; b; b = b->next) {
        out.push_back(BlockView{b->ptr, b->size, b->requested_size, entry.second->id,
                                entry.second->pool == StatPool::small_pool, b->allocated,
                                b->evictable, b->owner});
      }
    }
    return out;
  }

  size_t largest_free_block() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return largest_free_block_locked();
  }

  std::vector<SegmentView> segments() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<SegmentView> out;
    for (const auto& entry : segments_) {
      const Segment& seg = *entry.second;
      SegmentView view;
      view.ptr = seg.ptr;
      view.size = seg.size;
      view.small_pool = seg.pool == StatPool::small_pool;
      for (const Block* b = seg.first; b; b = b->next) view.blocks.push_back(block_view(*b, seg.id));
      out.push_back(std::move(view));
    }
    for (const auto& entry : allocated_) {  // Note [Small path]: one segment per block
      const Block& b = *entry.second;
      if (b.segment) continue;
      SegmentView view;
      view.ptr = b.ptr;
      view.size = b.size;
      view.small_pool = true;
      view.small_path = true;
      view.blocks.push_back(block_view(b, 0));
      out.push_back(std::move(view));
    }
    std::sort(out.begin(), out.end(),
              [](const SegmentView& x, const SegmentView& y) { return x.ptr < y.ptr; });
    return out;
  }

  AllocatorStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats out = stats_;
    out.largest_free_block_bytes = largest_free_block_locked();
    out.fragmentation_free_bytes =
        stats_.reserved_bytes.all.current - stats_.active_bytes.all.current;
    return out;
  }

  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.reset_peaks();
  }

  void count_oom() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.num_ooms;
  }

  // Note [Forking beside the allocator]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // fork() copies only the calling thread. If another thread held the mutex then, the
  // child's copy stays locked for good, and its first allocation that takes the lock
  // blocks forever: beside a training thread, one child in about a thousand forks hung,
  // and a DataLoader's workers stuck at its 143rd loader (a probe, 2026-12-07; also with
  // remat:False). So
  // the PyTorch host's pthread_atfork handlers (integration/torch/runtime.cpp) take the
  // mutex before the fork, after the engine's lock (the order every other path takes
  // them in: the allocator calls the engine only with its mutex released, Note [Lock
  // rules]), and release it after, in the parent and in the child, whose one thread is a
  // copy of the one that took it.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

  bool is_valid(std::string* why) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return is_valid_locked(why);
  }

  void set_eviction_callback(EvictionCallback* callback) {
    std::lock_guard<std::mutex> lock(mutex_);
    callback_ = callback;
  }

  void set_observer(AllocatorObserver* observer) {
    std::lock_guard<std::mutex> lock(mutex_);
    observer_ = observer;
  }

  bool set_budget(uint64_t budget_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.allocated_bytes.all.current > budget_bytes) return false;
    config_.budget_bytes = budget_bytes;
    return true;
  }

  // Evicts down to the new budget with the mutex released (Note [Lock rules]), as step (2)
  // of Note [Out-of-memory chain] does, while each call frees something.
  bool lower_budget(uint64_t budget_bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (stats_.allocated_bytes.all.current > budget_bytes && callback_) {
      const uint64_t excess = stats_.allocated_bytes.all.current - budget_bytes;
      EvictionCallback* callback = callback_;
      const uint64_t frees_before = num_frees_;
      ++stats_.num_eviction_calls;
      lock.unlock();
      callback->make_room(excess, /*contiguous_request=*/false);
      lock.lock();
      if (num_frees_ == frees_before) break;
    }
    if (stats_.allocated_bytes.all.current > budget_bytes) return false;
    config_.budget_bytes = budget_bytes;
    return true;
  }

 private:
  BlockPool& pool_for(StatPool pool) {
    return pool == StatPool::small_pool ? small_blocks_ : large_blocks_;
  }
  const BlockPool& pool_for(StatPool pool) const {
    return pool == StatPool::small_pool ? small_blocks_ : large_blocks_;
  }

  static BlockView block_view(const Block& b, uint64_t segment_id) {
    return BlockView{b.ptr,       b.size,      b.requested_size, segment_id,
                     b.pool == StatPool::small_pool, b.allocated, b.evictable, b.owner};
  }

  // Note [Observer]: the one place events leave the allocator.
  void notify_locked(AllocatorAction action, const Block& block, size_t size) {
    if (!observer_) return;
    AllocatorEvent event;
    event.action = action;
    event.addr = block.ptr;
    event.size = size;
    event.requested_bytes = block.requested_size;
    event.owner = block.owner;
    event.small_path = block.segment == nullptr;
    observer_->on_allocator_event(event);
  }

  size_t largest_free_block_locked() const {
    return std::max(small_blocks_.largest(), large_blocks_.largest());
  }

  Block* find_allocated_locked(void* ptr) const {
    auto it = allocated_.find(reinterpret_cast<uintptr_t>(ptr));
    return it == allocated_.end() ? nullptr : it->second;
  }

  // The segment a request gets when no cached block fits: Note [Segments under a reserved
  // limit].
  size_t fresh_segment_locked(size_t need) const {
    return config_.exact_segments ? least_segment_for(need) : segment_size_for(need);
  }

  bool fits_reserved_locked(size_t bytes) const {
    return bytes <= config_.reserved_limit_bytes - stats_.reserved_bytes.all.current;
  }

  // Step (1) of Note [Out-of-memory chain]. Changes nothing unless it succeeds.
  // Unless `may_raise_peak`, fails with Shortfall::new_peak rather than raise allocated or
  // reserved bytes above their peak (Note [New peaks]).
  Attempt cached_block_or_segment_locked(size_t need, size_t requested, uint64_t owner,
                                         bool may_raise_peak) {
    if (need > config_.budget_bytes - stats_.allocated_bytes.all.current)
      return {nullptr, Shortfall::budget};
    auto past_peak = [&](const AllocatorStat& stat, size_t bytes) {
      return !may_raise_peak && stat.current + bytes > stat.peak;
    };
    if (past_peak(stats_.allocated_bytes.all, need)) return {nullptr, Shortfall::new_peak};
    const StatPool pool = is_small_request(need) ? StatPool::small_pool : StatPool::large_pool;
    if (pool == StatPool::small_pool && small_path_) {  // Note [Small path]
      if (!fits_reserved_locked(need)) return {nullptr, Shortfall::reserved_limit};
      if (past_peak(stats_.reserved_bytes.all, need)) return {nullptr, Shortfall::new_peak};
      void* ptr = backend_.allocate_small(need);
      if (!ptr) return {nullptr, Shortfall::backend};
      Block* block = arena_.make();
      block->ptr = reinterpret_cast<uintptr_t>(ptr);
      block->size = need;
      block->pool = pool;
      stats_.reserved_bytes.increase(pool, need);
      notify_locked(AllocatorAction::segment_alloc, *block, need);
      return {mark_allocated_locked(block, requested, owner), Shortfall::none};
    }
    BlockPool& free_blocks = pool_for(pool);
    Block* block = free_blocks.best_fit(need);
    if (block) {
      pool_erase_locked(block);
    } else {
      const size_t segment_bytes = fresh_segment_locked(need);
      if (past_peak(stats_.reserved_bytes.all, segment_bytes))
        return {nullptr, Shortfall::new_peak};
      Shortfall shortfall = Shortfall::none;
      block = add_segment_locked(pool, segment_bytes, &shortfall);
      if (!block) return {nullptr, shortfall};
    }
    if (should_split(*block, need)) split_locked(block, need);
    return {mark_allocated_locked(block, requested, owner), Shortfall::none};
  }

  // A fresh segment as one free block that is in no pool yet, or null with the reason.
  Block* add_segment_locked(StatPool pool, size_t bytes, Shortfall* shortfall) {
    if (!fits_reserved_locked(bytes)) {
      *shortfall = Shortfall::reserved_limit;
      return nullptr;
    }
    void* ptr = backend_.allocate_segment(bytes);
    if (!ptr) {
      *shortfall = Shortfall::backend;
      return nullptr;
    }
    DTR_CHECK(reinterpret_cast<uintptr_t>(ptr) % backend_.alignment() == 0,
              "backend returned a misaligned segment");
    auto segment = std::make_unique<Segment>();
    segment->id = next_segment_id_++;
    segment->ptr = reinterpret_cast<uintptr_t>(ptr);
    segment->size = bytes;
    segment->pool = pool;
    Block* block = arena_.make();
    block->ptr = segment->ptr;
    block->size = bytes;
    block->segment = segment.get();
    block->pool = pool;
    segment->first = block;
    segments_.emplace(segment->ptr, std::move(segment));
    stats_.reserved_bytes.increase(pool, bytes);
    stats_.segment.increase(pool, 1);
    ++stats_.num_device_alloc;
    notify_locked(AllocatorAction::segment_alloc, *block, bytes);
    return block;
  }

  // Note [Inactive splits]
  // ~~~~~~~~~~~~~~~~~~~~~~~
  // PyTorch's inactive_split counts the free blocks of segments that hold other blocks
  // too (Block::is_split: a prev or a next), and inactive_split_bytes their bytes: free
  // memory that a request larger than the block cannot use. A free block is in its pool,
  // and its neighbours do not change while it is there (a split takes a block out first;
  // two free neighbours are merged, the one in the pool taken out first), so a block is
  // counted as it enters its pool and uncounted as it leaves. So `.allocated` and `.freed`
  // count every entry and exit, where PyTorch's count each operation's net change (a free
  // that merges two split neighbours: 1 freed there, 2 freed and 1 allocated here);
  // `.current` and `.peak` agree.
  void pool_insert_locked(Block* block) {
    pool_for(block->pool).insert(block);
    if (block->prev || block->next) {
      stats_.inactive_split.increase(block->pool, 1);
      stats_.inactive_split_bytes.increase(block->pool, block->size);
    }
  }

  void pool_erase_locked(Block* block) {
    pool_for(block->pool).erase(block);
    if (block->prev || block->next) {
      stats_.inactive_split.decrease(block->pool, 1);
      stats_.inactive_split_bytes.decrease(block->pool, block->size);
    }
  }

  // Note [Allocated vs active]: a remainder is kept only when it is worth a block.
  static bool should_split(const Block& block, size_t need) {
    const size_t remaining = block.size - need;
    return block.pool == StatPool::small_pool ? remaining >= kMinBlockSize : remaining > kSmallSize;
  }

  void split_locked(Block* block, size_t need) {
    Block* rest = arena_.make();
    rest->ptr = block->ptr + need;
    rest->size = block->size - need;
    rest->segment = block->segment;
    rest->pool = block->pool;
    rest->prev = block;
    rest->next = block->next;
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = need;
    pool_insert_locked(rest);
  }

  Block* mark_allocated_locked(Block* block, size_t requested, uint64_t owner) {
    block->number = allocations_.fetch_add(1, std::memory_order_relaxed) + 1;
    block->allocated = true;
    block->requested_size = requested;
    block->owner = owner;
    block->evictable = false;
    block->unmovable = false;
    allocated_.emplace(block->ptr, block);
    stats_.allocated_bytes.increase(block->pool, round_block_size(requested));
    stats_.active_bytes.increase(block->pool, block->size);
    stats_.allocation.increase(block->pool, 1);
    stats_.active.increase(block->pool, 1);
    notify_locked(AllocatorAction::alloc, *block, block->size);
    return block;
  }

  // Note [Compaction]: the smallest free block of `from`'s pool that holds its request and
  // lies in none of `excluded`, lowest address among equals.
  Block* best_fit_outside_locked(const Block& from, const std::vector<const Segment*>& excluded) {
    const size_t need = round_block_size(from.requested_size);
    const BlockPool::Set& free_blocks = pool_for(from.pool).blocks();
    Block key;
    key.size = need;
    for (auto it = free_blocks.lower_bound(&key); it != free_blocks.end(); ++it)
      if (std::find(excluded.begin(), excluded.end(), (*it)->segment) == excluded.end()) return *it;
    return nullptr;
  }

  // Note [Packing]: the first free block of `segment` that holds `from`'s request.
  static Block* first_fit_in_locked(const Block& from, const Segment* segment) {
    const size_t need = round_block_size(from.requested_size);
    for (Block* b = segment->first; b; b = b->next)
      if (!b->allocated && b->size >= need) return b;
    return nullptr;
  }

  // Note [Compaction]: `to` (free, same pool) takes `from`'s bytes and place; `from` is freed.
  void move_block_locked(Block* from, Block* to, BlockMover& mover) {
    const size_t need = round_block_size(from->requested_size);
    pool_erase_locked(to);
    if (should_split(*to, need)) split_locked(to, need);
    backend_.copy(reinterpret_cast<void*>(to->ptr), reinterpret_cast<const void*>(from->ptr),
                  from->requested_size);
    to->allocated = true;
    to->requested_size = from->requested_size;
    to->owner = from->owner;
    to->number = from->number;
    to->evictable = from->evictable;
    allocated_.erase(from->ptr);
    allocated_.emplace(to->ptr, to);
    stats_.active_bytes.decrease(from->pool, from->size);
    stats_.active_bytes.increase(to->pool, to->size);
    ++stats_.num_block_moves;
    stats_.moved_bytes += from->requested_size;
    notify_locked(AllocatorAction::alloc, *to, to->size);
    notify_locked(AllocatorAction::free_requested, *from, from->size);
    notify_locked(AllocatorAction::free_completed, *from, from->size);
    const uint64_t owner = from->owner;
    void* old_ptr = reinterpret_cast<void*>(from->ptr);
    release_block_locked(from);
    mover.moved(owner, old_ptr, reinterpret_cast<void*>(to->ptr));
  }

  // `block` is already out of allocated_.
  void free_block_locked(Block* block) {
    notify_locked(AllocatorAction::free_requested, *block, block->size);
    notify_locked(AllocatorAction::free_completed, *block, block->size);
    ++num_frees_;
    stats_.allocated_bytes.decrease(block->pool, round_block_size(block->requested_size));
    stats_.active_bytes.decrease(block->pool, block->size);
    stats_.allocation.decrease(block->pool, 1);
    stats_.active.decrease(block->pool, 1);
    if (!block->segment) {  // Note [Small path]
      backend_.free_small(reinterpret_cast<void*>(block->ptr), block->size);
      stats_.reserved_bytes.decrease(block->pool, block->size);
      notify_locked(AllocatorAction::segment_free, *block, block->size);
      arena_.recycle(block);
      return;
    }
    release_block_locked(block);
  }

  // A segment's block becomes free, merged with free neighbours, in its pool; no stats.
  void release_block_locked(Block* block) {
    block->allocated = false;
    block->requested_size = 0;
    block->owner = 0;
    block->evictable = false;
    block->unmovable = false;
    merge_locked(block, block->prev);
    merge_locked(block, block->next);
    pool_insert_locked(block);
  }

  // Absorbs `neighbour` into `block` if it is free.
  void merge_locked(Block* block, Block* neighbour) {
    if (!neighbour || neighbour->allocated) return;
    pool_erase_locked(neighbour);
    if (neighbour == block->prev) {
      block->ptr = neighbour->ptr;
      block->prev = neighbour->prev;
      if (block->prev)
        block->prev->next = block;
      else
        block->segment->first = block;
    } else {
      block->next = neighbour->next;
      if (block->next) block->next->prev = block;
    }
    block->size += neighbour->size;
    arena_.recycle(neighbour);
  }

  // Step (3) of Note [Out-of-memory chain], and empty_cache().
  uint64_t release_cached_segments_locked() {
    uint64_t released = 0;
    for (auto it = segments_.begin(); it != segments_.end();) {
      Segment& segment = *it->second;
      Block* block = segment.first;
      if (block->allocated || block->next) {
        ++it;
        continue;
      }
      pool_erase_locked(block);
      notify_locked(AllocatorAction::segment_free, *block, segment.size);
      arena_.recycle(block);
      backend_.free_segment(reinterpret_cast<void*>(segment.ptr), segment.size);
      stats_.reserved_bytes.decrease(segment.pool, segment.size);
      stats_.segment.decrease(segment.pool, 1);
      ++stats_.num_device_free;
      released += segment.size;
      it = segments_.erase(it);
    }
    return released;
  }

  void debug_check_locked(const char* after) const {
    if (config_.debug < 3) return;
    std::string why;
    if (!is_valid_locked(&why)) {
      std::fprintf(stderr, "dtr: allocator invariant broken after %s: %s\n", after, why.c_str());
      DTR_CHECK(false, "CachingAllocator::is_valid (debug 3)");
    }
  }

  bool is_valid_locked(std::string* why) const {
    auto fail = [why](const std::string& message) {
      if (why) *why = message;
      return false;
    };
    AllocatorStats recount;
    size_t free_seen[2] = {0, 0};  // small, large
    size_t allocated_seen = 0;
    uintptr_t previous_end = 0;
    for (const auto& entry : segments_) {
      const Segment& segment = *entry.second;
      const std::string where = "segment " + std::to_string(segment.id);
      if (entry.first != segment.ptr) return fail(where + ": keyed under the wrong address");
      if (segment.ptr < previous_end) return fail(where + ": overlaps the previous segment");
      if (!segment.first || segment.first->prev) return fail(where + ": bad first block");
      uintptr_t expected = segment.ptr;
      size_t steps = 0;
      for (const Block* b = segment.first; b; b = b->next) {
        if (++steps > segment.size / kMinBlockSize) return fail(where + ": block list cycles");
        if (b->segment != &segment) return fail(where + ": block points at another segment");
        if (b->pool != segment.pool) return fail(where + ": block in the wrong pool");
        if (b->ptr != expected) return fail(where + ": blocks not contiguous");
        if (b->size == 0 || b->size % kMinBlockSize != 0) return fail(where + ": bad block size");
        if (b->next && b->next->prev != b) return fail(where + ": broken prev/next link");
        expected += b->size;
        if (b->allocated) {
          auto it = allocated_.find(b->ptr);
          if (it == allocated_.end() || it->second != b)
            return fail(where + ": allocated block missing from the allocated map");
          if (round_block_size(b->requested_size) > b->size)
            return fail(where + ": block smaller than its request");
          ++allocated_seen;
          recount.allocated_bytes.increase(b->pool, round_block_size(b->requested_size));
          recount.active_bytes.increase(b->pool, b->size);
          recount.allocation.increase(b->pool, 1);
          recount.active.increase(b->pool, 1);
        } else {
          if (b->next && !b->next->allocated) return fail(where + ": two neighbouring free blocks");
          if (!pool_for(b->pool).contains(const_cast<Block*>(b)))
            return fail(where + ": free block missing from its pool");
          if (b->owner || b->evictable || b->unmovable || b->requested_size)
            return fail(where + ": free block carries allocation data");
          ++free_seen[b->pool == StatPool::small_pool ? 0 : 1];
          if (b->prev || b->next) {  // Note [Inactive splits]
            recount.inactive_split.increase(b->pool, 1);
            recount.inactive_split_bytes.increase(b->pool, b->size);
          }
        }
      }
      if (expected != segment.ptr + segment.size) return fail(where + ": blocks do not tile it");
      recount.reserved_bytes.increase(segment.pool, segment.size);
      recount.segment.increase(segment.pool, 1);
      previous_end = segment.ptr + segment.size;
    }
    for (const auto& entry : allocated_) {
      const Block* b = entry.second;
      if (b->segment) continue;
      if (!small_path_ || !b->allocated || b->ptr != entry.first)
        return fail("bad small-path block");
      ++allocated_seen;
      recount.allocated_bytes.increase(b->pool, round_block_size(b->requested_size));
      recount.active_bytes.increase(b->pool, b->size);
      recount.reserved_bytes.increase(b->pool, b->size);
      recount.allocation.increase(b->pool, 1);
      recount.active.increase(b->pool, 1);
    }
    if (allocated_seen != allocated_.size()) return fail("allocated map holds unknown blocks");
    if (small_blocks_.blocks().size() != free_seen[0]) return fail("small pool holds extra blocks");
    if (large_blocks_.blocks().size() != free_seen[1]) return fail("large pool holds extra blocks");

#define DTR_ALLOCATOR_CHECK_POOL(family, pool_name)                                                \
  {                                                                                                \
    const AllocatorStat& have = stats_.family.pool_name;                                           \
    if (have.current != recount.family.pool_name.current)                                          \
      return fail(std::string(#family "." #pool_name ".current is ") +                             \
                  std::to_string(have.current) + ", a recount gives " +                            \
                  std::to_string(recount.family.pool_name.current));                               \
    if (have.peak < have.current || have.allocated - have.freed != have.current)                   \
      return fail(#family "." #pool_name ": peak/allocated/freed inconsistent");                   \
  }
#define DTR_ALLOCATOR_CHECK_FAMILY(family, key, doc)                                               \
  DTR_ALLOCATOR_CHECK_POOL(family, all)                                                            \
  DTR_ALLOCATOR_CHECK_POOL(family, small_pool)                                                     \
  DTR_ALLOCATOR_CHECK_POOL(family, large_pool)
#define DTR_ALLOCATOR_CHECK_SCALAR(member, key, doc)
    DTR_ALLOCATOR_STATS(DTR_ALLOCATOR_CHECK_FAMILY, DTR_ALLOCATOR_CHECK_SCALAR)
#undef DTR_ALLOCATOR_CHECK_SCALAR
#undef DTR_ALLOCATOR_CHECK_FAMILY
#undef DTR_ALLOCATOR_CHECK_POOL

    if (stats_.allocated_bytes.all.current > config_.budget_bytes) return fail("over the budget");
    if (stats_.reserved_bytes.all.current > config_.reserved_limit_bytes)
      return fail("over the reserved limit");
    return true;
  }

  AllocatorConfig config_;  // budget_bytes changes only through set_budget, under mutex_
  Backend& backend_;  // owned by CachingAllocator, which outlives *this
  EvictionCallback* callback_;
  AllocatorObserver* observer_ = nullptr;  // Note [Observer]
  const bool small_path_;

  mutable std::mutex mutex_;  // Note [Lock rules]: guards everything below
  BlockArena arena_;
  BlockPool small_blocks_;
  BlockPool large_blocks_;
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;  // by address
  // Live blocks by address. A node is made at every allocate() and freed at every free();
  // they come from mimalloc rather than the process's malloc (glibc's, in a PyTorch host),
  // which costs several times as much per small object. Not in the CUDA library: Note
  // [No mimalloc in a dlopen'd library].
#ifdef DTR_ALLOCATOR_NO_MIMALLOC
  using LiveNodeAllocator = std::allocator<std::pair<const uintptr_t, Block*>>;
#else
  using LiveNodeAllocator = mi_stl_allocator<std::pair<const uintptr_t, Block*>>;
#endif
  std::unordered_map<uintptr_t, Block*, std::hash<uintptr_t>, std::equal_to<uintptr_t>,
                     LiveNodeAllocator>
      allocated_;
  AllocatorStats stats_;
  uint64_t next_segment_id_ = 1;
  uint64_t num_frees_ = 0;  // progress marker for step (2) of the chain
  std::atomic<uint64_t> allocations_{0};  // Block::number of the latest allocation
};

CachingAllocator::CachingAllocator(AllocatorConfig config, std::unique_ptr<Backend> backend,
                                   EvictionCallback* callback)
    : config_(config), backend_(std::move(backend)) {
  DTR_CHECK(backend_ != nullptr, "CachingAllocator needs a backend");
  impl_ = std::make_unique<Impl>(config_, *backend_, callback);
}

CachingAllocator::~CachingAllocator() = default;

AllocResult CachingAllocator::allocate(size_t bytes, uint64_t owner) {
  return impl_->allocate(bytes, owner);
}
void CachingAllocator::free(void* ptr) { impl_->free(ptr); }
bool CachingAllocator::set_owner(void* ptr, uint64_t owner) { return impl_->set_owner(ptr, owner); }
bool CachingAllocator::set_unmovable(void* ptr) { return impl_->set_unmovable(ptr); }
uint64_t CachingAllocator::allocation_number(void* ptr) const {
  return impl_->allocation_number(ptr);
}
uint64_t CachingAllocator::allocations() const { return impl_->allocations(); }

bool CachingAllocator::set_evictable(void* ptr, bool evictable) {
  return impl_->set_evictable(ptr, evictable);
}
uint64_t CachingAllocator::compact(size_t bytes_requested, BlockMover& mover) {
  return impl_->compact(bytes_requested, mover);
}

uint64_t CachingAllocator::empty_cache() { return impl_->empty_cache(); }
std::vector<BlockView> CachingAllocator::blocks_in_address_order() const {
  return impl_->blocks_in_address_order();
}
size_t CachingAllocator::largest_free_block() const { return impl_->largest_free_block(); }
std::vector<SegmentView> CachingAllocator::segments() const { return impl_->segments(); }
AllocatorStats CachingAllocator::stats() const { return impl_->stats(); }
void CachingAllocator::reset_peaks() { impl_->reset_peaks(); }
bool CachingAllocator::is_valid(std::string* why) const { return impl_->is_valid(why); }
void CachingAllocator::set_eviction_callback(EvictionCallback* callback) {
  impl_->set_eviction_callback(callback);
}
void CachingAllocator::set_observer(AllocatorObserver* observer) {
  impl_->set_observer(observer);
}
bool CachingAllocator::set_budget(uint64_t budget_bytes) {
  if (!impl_->set_budget(budget_bytes)) return false;
  config_.budget_bytes = budget_bytes;
  return true;
}
void CachingAllocator::count_oom() { impl_->count_oom(); }
void CachingAllocator::lock_for_fork() { impl_->lock_for_fork(); }
void CachingAllocator::unlock_after_fork() { impl_->unlock_after_fork(); }
bool CachingAllocator::lower_budget(uint64_t budget_bytes) {
  if (!impl_->lower_budget(budget_bytes)) return false;
  config_.budget_bytes = budget_bytes;
  return true;
}

}  // namespace dtr
