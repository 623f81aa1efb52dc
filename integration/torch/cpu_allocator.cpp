// cpu_allocator.cpp: the c10::Allocator over dtr::CachingAllocator (see cpu_allocator.h).
//
// Note [Immortal allocator]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch keeps a raw pointer to its CPU allocator, and every DataPtr we hand out keeps a
// raw pointer to our deleter, which reaches the CachingAllocator through kCaching below.
// Tensors die late: Python finalization, then atexit handlers, then static destructors in
// reverse load order (libtorch's own statics hold tensors). So neither object may ever be
// destroyed: both are created with `new` on first installation and deliberately never
// deleted, and the library is never unloaded (torch.ops.load_library does not dlclose).
//
// Note [Foreign storages]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Storages allocated before installation (by c10's default allocator, or by another
// library's) carry their own DataPtr: c10 frees them through that DataPtr's deleter and
// context, never through PyTorch's current allocator. Our deleter sees only pointers we
// handed out; CachingAllocator::free stops the process (DTR_CHECK) on anything else, so a
// mix-up cannot pass silently. tests/torch/test_allocator_hook.py frees a tensor made
// before load_library after it.
//
// Note [Profiler sizes]
// ~~~~~~~~~~~~~~~~~~~~~
// torch.profiler(profile_memory=True) wants the size of every free. CachingAllocator::free
// does not return it, so when (and only when) a profiler listens, the size reported for a
// free is the drop in allocated_bytes.all.current around it: exact while one thread frees
// at a time (the CPU autograd engine runs on the calling thread), approximate when
// another thread allocates in between. Sizes are the rounded sizes the budget counts.
//
// Note [Measuring workspaces]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A trace (DTR_TRACE) records each op's results, but a live op may also hold scratch while
// it runs (a convolution's columns, oneDNN's reorders) that it frees before returning. The
// allocator counts it against the budget, so a replay that does not see it has more room
// than the run had (a recorded resnet18 step: a live peak 9.5 MB above the replay's, of
// 341 MB). While the torch host traces, the fallback opens a WorkspaceMeter around each
// recorded op's kernel; the hook then keeps, per thread, the blocks the op allocated and
// the bytes of them still held, and their peak. A free of one of them lowers the count; a
// free of anything else (an eviction to make room, a storage the op dropped) does not.
// The op's scratch is the peak less what it still holds at the end: the trace's WORKSPACE
// (Note [Op workspace] in eviction/engine.cpp). Sizes are the requested bytes, as the
// trace's MEMORY. Not seen: what other threads allocate for the op (OpenMP workers rarely
// allocate through c10) and scratch outside the allocator (BLAS, oneDNN's own buffers).
// Off while not tracing: one thread-local test per allocation and per free.
#include "integration/torch/cpu_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "dtr/allocator/caching_allocator.h"
#include "integration/torch/compat.h"

namespace dtr::torch_integration {

namespace {

// Set once by install_cpu_allocator, never reset: Note [Immortal allocator].
std::atomic<CachingAllocator*> kCaching{nullptr};
std::atomic<void (*)()> allocation_observer{nullptr};

// Note [Measuring workspaces]: this thread's open meter, if any.
struct Workspace {
  std::vector<std::pair<void*, size_t>> blocks;  // allocated since it opened, still held
  uint64_t held = 0;
  uint64_t peak = 0;
};
thread_local Workspace workspace;
thread_local bool workspace_open = false;

void workspace_allocated(void* ptr, size_t nbytes) {
  workspace.blocks.emplace_back(ptr, nbytes);
  workspace.held += nbytes;
  workspace.peak = std::max(workspace.peak, workspace.held);
}

void workspace_freed(void* ptr) {
  auto& blocks = workspace.blocks;
  for (size_t i = blocks.size(); i-- > 0;) {  // scratch goes soon after it came
    if (blocks[i].first != ptr) continue;
    workspace.held -= blocks[i].second;
    blocks[i] = blocks.back();
    blocks.pop_back();
    return;
  }
}

void free_block(void* ptr) {
  if (workspace_open) workspace_freed(ptr);
  CachingAllocator* caching = kCaching.load(std::memory_order_acquire);
  if (!torch_compat::memory_profiling_enabled()) {
    caching->free(ptr);
    return;
  }
  // Note [Profiler sizes]
  const uint64_t before = caching->stats().allocated_bytes.all.current;
  caching->free(ptr);
  const AllocatorStats after = caching->stats();
  const uint64_t now = after.allocated_bytes.all.current;
  const int64_t freed = before > now ? static_cast<int64_t>(before - now) : 0;
  torch_compat::report_memory_usage(ptr, -freed, now, after.reserved_bytes.all.current);
}

class DtrCpuAllocator final : public torch_compat::CpuAllocatorBase {
 public:
  explicit DtrCpuAllocator(CachingAllocator& caching) : caching_(caching) {}

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

 protected:
  c10::DataPtr allocate_bytes(size_t nbytes) const override {
    // c10's default allocator returns no memory for zero bytes; so do we (the DataPtr's
    // deleter is never called for a null context).
    if (nbytes == 0) return torch_compat::make_cpu_data_ptr(nullptr, nullptr, &free_block);
    if (auto observer = allocation_observer.load(std::memory_order_relaxed)) observer();
    AllocResult result = caching_.allocate(nbytes);
    if (!result.ok()) {
      const AllocatorOom& oom = result.oom;
      if (torch_compat::memory_profiling_enabled())
        torch_compat::report_out_of_memory(static_cast<int64_t>(oom.requested_bytes),
                                           oom.allocated_bytes, oom.reserved_bytes);
      torch_compat::throw_out_of_memory(oom.message());
    }
    if (torch_compat::memory_profiling_enabled()) {
      const AllocatorStats stats = caching_.stats();
      torch_compat::report_memory_usage(result.ptr,
                                        static_cast<int64_t>(round_block_size(nbytes)),
                                        stats.allocated_bytes.all.current,
                                        stats.reserved_bytes.all.current);
    }
    if (workspace_open) workspace_allocated(result.ptr, nbytes);
    return torch_compat::make_cpu_data_ptr(result.ptr, result.ptr, &free_block);
  }

 private:
  CachingAllocator& caching_;
};

std::mutex install_mutex;
DtrCpuAllocator* installed = nullptr;  // guarded by install_mutex; never deleted

bool is_dtr_allocator(c10::Allocator* allocator) {
  // Compared by type name, not typeid: another copy of this library (loaded from another
  // path) has its own, hidden, type_info for the same class.
  return allocator && std::strcmp(typeid(*allocator).name(), typeid(DtrCpuAllocator).name()) == 0;
}

}  // namespace

InstallResult install_cpu_allocator(CachingAllocator& allocator) {
  std::lock_guard<std::mutex> lock(install_mutex);
  if (installed) return InstallResult::already_installed;
  if (is_dtr_allocator(torch_compat::cpu_allocator())) return InstallResult::other_copy;
  kCaching.store(&allocator, std::memory_order_release);
  installed = new DtrCpuAllocator(allocator);  // Note [Immortal allocator]
  torch_compat::set_cpu_allocator(installed, kCpuAllocatorPriority);
  return InstallResult::installed;
}

bool cpu_allocator_is_ours() {
  std::lock_guard<std::mutex> lock(install_mutex);
  return installed && torch_compat::cpu_allocator() == installed;
}

WorkspaceMeter::WorkspaceMeter(bool on) {
  if (!on || workspace_open) return;
  workspace.blocks.clear();
  workspace.held = workspace.peak = 0;
  workspace_open = open_ = true;
}

WorkspaceMeter::~WorkspaceMeter() { close(); }

uint64_t WorkspaceMeter::close() {
  if (!open_) return 0;
  open_ = workspace_open = false;
  return workspace.peak - workspace.held;
}

void set_allocation_observer(void (*observer)()) {
  allocation_observer.store(observer, std::memory_order_relaxed);
}

std::string compiled_torch_version() { return torch_compat::compiled_torch_version(); }

std::string tested_torch_version() { return torch_compat::kTestedTorchVersion; }

}  // namespace dtr::torch_integration
